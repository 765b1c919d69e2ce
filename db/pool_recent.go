package db

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/policyguard/policyguard/policy"
)

// An account's pool counts every request of its members, so on SQLite a
// member's admission writes two rows: its own, in its user's range of the
// key of requests, and its pool's, in the account's. Were both in
// requests, a commit of many admissions would write the newest page of
// every account it admitted to, besides its users' pages: with 10,000
// users over 100 accounts, about 47 more pages of WAL for a batch of 64.
//
// So on SQLite a pool's newest rows go first to pool_recent (migration
// 15), keyed by time: a commit writes its last page or two whatever the
// accounts it admitted to. When it holds maxStaged rows or more, the
// writer moves them into requests in the commit it is about to make, so
// that each account's page of requests (and the pages above it) is
// written once for many commits. A pool's rows are numbered across both
// tables, those in pool_recent after all of those in requests, so a
// window is still counted as the newest seq minus the first's.
//
// The writer keeps its own copy of pool_recent (stagedRows, per pool): it
// wrote every row there, except when another process wrote the file, a
// transaction rolled back or the writer is new, and then it merges them
// all before anything else (poolsStale). So its reads of a pool are the
// seeks of requests, continued in memory. The read connections (usage,
// dry runs and shadow limits of a pool) read both tables with the pool
// variants below, each seek of requests beside a range of pool_recent
// from the cutoff, the nearer of the two kept.
//
// With wrk (64 connections, rounds of 5 s alternated with the build
// before it, SQLite FULL, 10,000 rotating users over 100 accounts), a
// member's check cost 1.117 to 1.373 times a plain one (median 1.33;
// 1,000 to 1,900 more bytes written than a plain check), against 1.362
// to 1.592 (median 1.46; 2,700 to 3,800 more bytes) with pool_recent
// keyed by account and merged every 512 rows, as it was in version 14.
// Nearly all the rest is the merges: never merged, a member's check
// wrote no more than a plain one.
//
// The reads of requests that are not a history's see a pool's rows only
// in a tier change's preview and the cleanup, which have the writer merge
// first (the overview's lists skip pools, and no chart is a pool's).
// PostgreSQL commits many transactions at once and keeps a pool's rows in
// requests: its variants are the plain statements.

// maxStaged is how many pool rows pool_recent holds before the writer
// merges them into requests.
const maxStaged = 2048

// poolVariant maps a statement on a user's requests to its variant for an
// account's pool; 0 for none.
var poolVariant = [numQueries]query{
	qLast: qPoolLast, qFirstAfter: qPoolFirstAfter, qFirstAfter3: qPoolFirstAfter3,
	qNthAfter: qPoolNthAfter, qAround: qPoolAround, qInsert: qPoolInsert,
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

// poolQueries are the pool variants on SQLite.
var poolQueries = map[query]string{
	qPoolLast:        both(`SELECT ts, seq FROM requests WHERE user_id = ?1 ORDER BY ts DESC, seq DESC LIMIT 1`, "1 DESC, 2 DESC", "1"),
	qPoolFirstAfter:  firstAfter("2"),
	qPoolFirstAfter3: `SELECT 0, ts, seq FROM (` + firstAfter("2") + `) UNION ALL SELECT 1, ts, seq FROM (` + firstAfter("3") + `) UNION ALL SELECT 2, ts, seq FROM (` + firstAfter("4") + `)`,
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

// stagedRows are an account pool's rows in pool_recent, as the SQLite
// writer wrote them: numbered from first, one after another, with
// timestamps ts (never empty). They are the pool's newest rows: every
// other is in requests, numbered before first.
type stagedRows struct {
	first int64
	ts    []int64
}

// firstAfter returns the oldest staged row after cutoff; a nil s has none.
func (s *stagedRows) firstAfter(cutoff int64) (ts, seq int64, ok bool) {
	if s == nil {
		return 0, 0, false
	}
	j := sort.Search(len(s.ts), func(j int) bool { return s.ts[j] > cutoff })
	if j == len(s.ts) {
		return 0, 0, false
	}
	return s.ts[j], s.first + int64(j), true
}

// at returns the timestamp of the row numbered seq when it is staged.
func (s *stagedRows) at(seq int64) (int64, bool) {
	if s == nil || seq < s.first || seq-s.first >= int64(len(s.ts)) {
		return 0, false
	}
	return s.ts[seq-s.first], true
}

// staged returns the pool's staged rows when h is the SQLite writer's
// history of an account's pool that has some; nil otherwise.
func (h *history) staged() *stagedRows {
	if h.tx == nil || h.tx.w == nil || !policy.IsAccountKey(h.user) {
		return nil
	}
	return h.tx.w.pools[h.user]
}

// stagedAfter extends cursor k, just read from requests, with the pool's
// staged rows after its cutoff: when requests had fewer rows after it than
// k holds, the staged rows come next.
func (h *history) stagedAfter(k *cursor) error {
	s := h.staged()
	if s == nil || k.n == readahead {
		return nil
	}
	for j := sort.Search(len(s.ts), func(j int) bool { return s.ts[j] > k.cutoff }); j < len(s.ts) && k.n < readahead; j++ {
		seq := s.first + int64(j)
		if k.n == 0 {
			k.seq = seq
		}
		if seq != k.seq+int64(k.n) {
			return fmt.Errorf("history of %q: staged row %d after row %d of requests", h.user, seq, k.seq+int64(k.n)-1)
		}
		k.ts[k.n] = s.ts[j]
		k.n++
	}
	return nil
}

// stage records that the writer wrote the pool's row (ts, seq) to
// pool_recent.
func (w *writer) stage(pool string, ts, seq int64) error {
	s := w.pools[pool]
	if s == nil {
		s = &stagedRows{first: seq}
		w.pools[pool] = s
	}
	if want := s.first + int64(len(s.ts)); seq != want {
		return fmt.Errorf("pool %q: row %d staged where %d comes next", pool, seq, want)
	}
	s.ts = append(s.ts, ts)
	w.staged++
	return nil
}

// unstage forgets the pool's staged rows, which its transaction deletes.
func (w *writer) unstage(pool string) {
	if s := w.pools[pool]; s != nil {
		w.staged -= len(s.ts)
		delete(w.pools, pool)
	}
}

// mergedPools records that pool_recent is empty: merged into requests.
func (w *writer) mergedPools() {
	clear(w.pools)
	w.staged, w.poolsStale = 0, false
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
