package db

import (
	"context"
	"strings"
)

// An account's pool counts every request of its members, so on SQLite a
// member's admission writes two rows: its own, in its user's range of the
// key of requests, and its pool's, in the account's. Were both in
// requests, a commit of many admissions would write the newest page of
// every account it admitted to, besides its users' pages: with 10,000
// users over 100 accounts, about 47 more pages of WAL for a batch of 64.
//
// So on SQLite a pool's newest rows go first to pool_recent (migration
// 14), keyed like requests but small: its few pages hold every account's
// newest rows, and a commit writes some of them whatever the accounts it
// admitted to. When it holds maxStaged rows or more, the writer moves
// them into requests in the commit it is about to make, so that each
// account's page of requests is written once for many commits. Every
// read of a pool's rows reads both tables (the pool variants below: each
// seek of requests and the same seek of pool_recent, the nearer of the
// two kept), and a pool's rows are numbered across both, so a window is
// still counted from two seeks, as the newest seq minus the first's.
//
// With wrk (64 connections, rounds of 5 s alternated with the build
// before it, SQLite FULL, 10,000 rotating users over 100 accounts), a
// member's check cost 1.178 to 1.355 times a plain one, median 1.33,
// against 1.277 to 1.458, median 1.42, with both rows in requests.
//
// The reads of requests that are not a history's see a pool's rows only
// in a tier change's preview and the cleanup, which have the writer merge
// first (the overview's lists skip pools, and no chart is a pool's); the
// writer's first commit merges too, so that rows never wait from one
// process to the next. PostgreSQL commits many transactions at once and
// keeps a pool's rows in requests: its variants are the plain statements.

// maxStaged is how many pool rows pool_recent holds before the writer
// merges them into requests.
const maxStaged = 512

// poolVariant maps a statement on a user's requests to its variant for an
// account's pool; 0 for none.
var poolVariant = [numQueries]query{
	qLast: qPoolLast, qFirstAfter: qPoolFirstAfter, qFirstAfter3: qPoolFirstAfter3,
	qRowsAfter: qPoolRowsAfter, qRowsAfter3: qPoolRowsAfter3, qNthAfter: qPoolNthAfter,
	qAround: qPoolAround, qInsert: qPoolInsert,
}

// both returns the rows of sel over requests and over pool_recent, in
// order, at most limit of them: sel is a SELECT of ts and seq FROM
// requests, ordered and limited, whose table name is replaced.
func both(sel, order, limit string) string {
	return `SELECT ts, seq FROM (` + sel + `) UNION ALL SELECT ts, seq FROM (` +
		strings.Replace(sel, "FROM requests", "FROM pool_recent", 1) + `) ORDER BY ` + order + ` LIMIT ` + limit
}

// firstAfter is the oldest row after cutoff ?N of pool ?1.
func firstAfter(n string) string {
	return both(`SELECT ts, seq FROM requests WHERE user_id = ?1 AND ts > ?`+n+` ORDER BY ts, seq LIMIT 1`, "1, 2", "1")
}

// rowsAfter is the oldest readahead rows after cutoff ?N of pool ?1.
func rowsAfter(n string) string {
	return both(`SELECT ts, seq FROM requests WHERE user_id = ?1 AND ts > ?`+n+` ORDER BY ts, seq LIMIT 8`, "1, 2", "8")
}

// poolQueries are the pool variants on SQLite.
var poolQueries = map[query]string{
	qPoolLast:        both(`SELECT ts, seq FROM requests WHERE user_id = ?1 ORDER BY ts DESC, seq DESC LIMIT 1`, "1 DESC, 2 DESC", "1"),
	qPoolFirstAfter:  firstAfter("2"),
	qPoolFirstAfter3: `SELECT 0, ts, seq FROM (` + firstAfter("2") + `) UNION ALL SELECT 1, ts, seq FROM (` + firstAfter("3") + `) UNION ALL SELECT 2, ts, seq FROM (` + firstAfter("4") + `)`,
	qPoolRowsAfter:   rowsAfter("2"),
	qPoolRowsAfter3:  `SELECT 0, ts, seq FROM (` + rowsAfter("2") + `) UNION ALL SELECT 1, ts, seq FROM (` + rowsAfter("3") + `) UNION ALL SELECT 2, ts, seq FROM (` + rowsAfter("4") + `)`,
	// The k-th row after the cutoff (?3 is k-1, as qNthAfter's OFFSET):
	// each table's first k, and the k-th of them together.
	qPoolNthAfter: `SELECT ts FROM (` + both(`SELECT ts, seq FROM requests WHERE user_id = ?1 AND ts > ?2 ORDER BY ts, seq LIMIT ?3 + 1`, "1, 2", "1 OFFSET ?3") + `)`,
	qPoolAround: `SELECT ts, seq FROM (` + both(`SELECT ts, seq FROM requests WHERE user_id = ?1 AND ts < ?2 ORDER BY ts DESC, seq DESC LIMIT 1`, "1 DESC, 2 DESC", "1") +
		`) UNION ALL SELECT ts, seq FROM (` + both(`SELECT ts, seq FROM requests WHERE user_id = ?1 AND ts >= ?2 ORDER BY ts, seq LIMIT 1`, "1, 2", "1") + `)`,
	qPoolInsert: `INSERT INTO pool_recent (user_id, ts, seq, tier_id) VALUES (?, ?, ?, ?)`,
	qPoolForget: `DELETE FROM pool_recent WHERE user_id = ?`,
	qPoolMerge:  `INSERT INTO requests (user_id, ts, seq, tier_id) SELECT user_id, ts, seq, tier_id FROM pool_recent`,
	qPoolClear:  `DELETE FROM pool_recent`,
}

// pgPoolQueries are the pool variants on PostgreSQL: the plain statements,
// and nothing to merge.
func pgPoolQueries() map[query]string {
	m := make(map[query]string, len(poolQueries))
	for q, p := range poolVariant {
		if p != 0 {
			m[p] = queries[q]
		}
	}
	m[qPoolForget] = `DELETE FROM requests WHERE user_id = ? AND 1 = 0`
	m[qPoolMerge] = `SELECT 1`
	m[qPoolClear] = `SELECT 1`
	return m
}

// mergePool moves pool_recent's rows into requests, on SQLite.
func (tx *writeTx) mergePool() error {
	for _, q := range [...]query{qPoolMerge, qPoolClear} {
		if _, err := tx.exec(q); err != nil {
			return unavailable(err)
		}
	}
	return nil
}

// mergePool has the writer merge pool_recent into requests with its next
// commit, and waits for it: on SQLite, before the reads that see requests
// alone (a preview) or must see every row there (the cleanup).
func (s *Store) mergePool(ctx context.Context) error {
	if _, ok := s.writer.(*writer); !ok {
		return nil
	}
	return s.writer.do(ctx, func(tx *writeTx) error {
		tx.w.staged = max(tx.w.staged, tx.w.maxStaged)
		return nil
	})
}
