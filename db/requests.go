package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// query names a statement prepared once.
type query int

const (
	qLast query = iota
	qFirstAfter
	qFirstAfter3
	qNthAfter
	qInsert
	qForget
	qNextUser
	qPruneBound
	qPruneDelete
	qBegin
	qCommit
	qDataVersion
	numQueries
)

// queries are the statements of the hot path and of pruning. Each is a seek
// on the primary key (user_id, ts); none scans a user's window.
var queries = [numQueries]string{
	qLast:       `SELECT ts, seq FROM requests WHERE user_id = ? ORDER BY ts DESC LIMIT 1`,
	qFirstAfter: `SELECT ts, seq FROM requests WHERE user_id = ? AND ts > ? ORDER BY ts LIMIT 1`,
	// The oldest row after each of three cutoffs, in one statement: one
	// round trip through database/sql instead of three.
	qFirstAfter3: `SELECT 0, ts, seq FROM (SELECT ts, seq FROM requests WHERE user_id = ?1 AND ts > ?2 ORDER BY ts LIMIT 1)
		UNION ALL SELECT 1, ts, seq FROM (SELECT ts, seq FROM requests WHERE user_id = ?1 AND ts > ?3 ORDER BY ts LIMIT 1)
		UNION ALL SELECT 2, ts, seq FROM (SELECT ts, seq FROM requests WHERE user_id = ?1 AND ts > ?4 ORDER BY ts LIMIT 1)`,
	// Only needed when a lowered limit leaves a window more than one
	// request over its ceiling; it steps over those requests.
	qNthAfter:    `SELECT ts FROM requests WHERE user_id = ? AND ts > ? ORDER BY ts LIMIT 1 OFFSET ?`,
	qInsert:      `INSERT INTO requests (user_id, ts, seq) VALUES (?, ?, ?)`,
	qForget:      `DELETE FROM requests WHERE user_id = ?`,
	qNextUser:    `SELECT user_id FROM requests WHERE user_id > ? ORDER BY user_id LIMIT 1`,
	qPruneBound:  `SELECT ts FROM requests WHERE user_id = ? AND ts <= ? ORDER BY ts LIMIT 1 OFFSET ?`,
	qPruneDelete: `DELETE FROM requests WHERE user_id = ? AND ts <= ?`,
	qBegin:       `BEGIN IMMEDIATE`,
	qCommit:      `COMMIT`,
	qDataVersion: `PRAGMA data_version`,
}

// readQueries are the queries View runs on the read connections.
var readQueries = [...]query{qLast, qFirstAfter, qFirstAfter3, qNthAfter}

// rowQuerier runs one of the queries.
type rowQuerier interface {
	queryRow(q query, args ...any) *sql.Row
	query(q query, args ...any) (*sql.Rows, error)
}

// history implements policy.History for one user on one transaction.
//
// A user's rows have strictly increasing ts and consecutive seq (pruning
// only removes the oldest rows, Forget removes all), so the number of rows
// after a cutoff is last.seq - first_after_cutoff.seq + 1: two seeks,
// whatever the count. In the writer the newest row comes from its cache,
// and Prefetch finds the oldest row of every window in one statement.
type history struct {
	q    rowQuerier
	tx   *writeTx // the writer's transaction, whose cache holds last rows; nil for reads
	user string

	loaded           bool
	any              bool
	lastTS, lastSeq  int64
	firstAfter       [len(policy.Windows)]firstRow // small cache: Prefetch, CountAfter, NthAfter(_, 1)
	firstAfterFilled int
}

// firstRow is the oldest row after cutoff; found is false when there is none.
type firstRow struct {
	cutoff, ts, seq int64
	found           bool
}

var _ policy.Prefetcher = (*history)(nil)

func (h *history) reset(q rowQuerier, tx *writeTx, user string) {
	*h = history{q: q, tx: tx, user: user}
}

func (h *history) load() error {
	if h.loaded {
		return nil
	}
	if h.tx != nil {
		if r, ok := h.tx.cachedLast(h.user); ok {
			h.loaded, h.any, h.lastTS, h.lastSeq = true, r.any, r.ts, r.seq
			return nil
		}
	}
	err := h.q.queryRow(qLast, h.user).Scan(&h.lastTS, &h.lastSeq)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return unavailable(err)
	default:
		h.any = true
	}
	h.loaded = true
	if h.tx != nil {
		h.tx.setLast(h.user, lastRow{ts: h.lastTS, seq: h.lastSeq, any: h.any})
	}
	return nil
}

// Last implements policy.History.
func (h *history) Last() (time.Time, bool, error) {
	if err := h.load(); err != nil || !h.any {
		return time.Time{}, false, err
	}
	return time.UnixMicro(h.lastTS), true, nil
}

// Prefetch implements policy.Prefetcher: it looks up the oldest row after
// each cutoff in one statement.
func (h *history) Prefetch(cutoffs *[len(policy.Windows)]time.Time) error {
	if err := h.load(); err != nil || !h.any {
		return err
	}
	var c [len(policy.Windows)]int64
	need := false
	for i, t := range cutoffs {
		c[i] = t.UnixMicro()
		need = need || h.lastTS > c[i]
	}
	if !need {
		return nil // every window is empty; first answers without a query
	}
	rows, err := h.q.query(qFirstAfter3, h.user, c[0], c[1], c[2])
	if err != nil {
		return unavailable(err)
	}
	defer rows.Close()
	h.firstAfterFilled = len(c)
	for i := range c {
		h.firstAfter[i] = firstRow{cutoff: c[i]}
	}
	for rows.Next() {
		var i int
		var r firstRow
		if err := rows.Scan(&i, &r.ts, &r.seq); err != nil {
			return unavailable(err)
		}
		if i < 0 || i >= len(c) {
			return fmt.Errorf("prefetch: row for cutoff %d", i)
		}
		r.cutoff, r.found = c[i], true
		h.firstAfter[i] = r
	}
	return unavailable(rows.Err())
}

// first returns the oldest row after cutoff; ok is false when there is none.
func (h *history) first(cutoff int64) (r firstRow, ok bool, err error) {
	if err := h.load(); err != nil || !h.any || h.lastTS <= cutoff {
		return r, false, err
	}
	for _, r := range h.firstAfter[:h.firstAfterFilled] {
		if r.cutoff == cutoff {
			if !r.found {
				// The newest row is after cutoff, so the oldest after it
				// exists: the cached newest row is wrong.
				return r, false, fmt.Errorf("history of %q: no row after %d but the newest is at %d", h.user, cutoff, h.lastTS)
			}
			return r, true, nil
		}
	}
	r.cutoff, r.found = cutoff, true
	if err := h.q.queryRow(qFirstAfter, h.user, cutoff).Scan(&r.ts, &r.seq); err != nil {
		return r, false, unavailable(err)
	}
	if h.firstAfterFilled < len(h.firstAfter) {
		h.firstAfter[h.firstAfterFilled] = r
		h.firstAfterFilled++
	}
	return r, true, nil
}

// CountAfter implements policy.History.
func (h *history) CountAfter(t time.Time) (int64, error) {
	r, ok, err := h.first(t.UnixMicro())
	if !ok {
		return 0, err
	}
	return h.lastSeq - r.seq + 1, nil
}

// NthAfter implements policy.History.
func (h *history) NthAfter(t time.Time, k int64) (time.Time, error) {
	cutoff := t.UnixMicro()
	if k == 1 {
		r, ok, err := h.first(cutoff)
		if err != nil {
			return time.Time{}, err
		}
		if !ok {
			return time.Time{}, fmt.Errorf("no request after %v", t)
		}
		return time.UnixMicro(r.ts), nil
	}
	var ts int64
	if err := h.q.queryRow(qNthAfter, h.user, cutoff, k-1).Scan(&ts); err != nil {
		return time.Time{}, unavailable(err)
	}
	return time.UnixMicro(ts), nil
}

// Admit implements policy.RequestStore. decide runs inside the writer's
// transaction, so nothing else writes between its reading and the insert.
func (s *Store) Admit(ctx context.Context, userID string, decide func(policy.History) (time.Time, bool, error)) error {
	return s.writer.admit(ctx, userID, decide)
}

// admit runs one admission in the writer's transaction.
func (tx *writeTx) admit(user string, decide func(policy.History) (time.Time, bool, error)) error {
	h := &tx.hist
	h.reset(tx, tx, user)
	at, record, err := decide(h)
	if err != nil || !record {
		return err
	}
	ts := at.UnixMicro()
	if err := h.load(); err != nil {
		return err
	}
	if h.any && ts <= h.lastTS {
		return fmt.Errorf("admit %q: timestamp %d not after the last one %d", user, ts, h.lastTS)
	}
	seq := h.lastSeq + 1
	if _, err := tx.exec(qInsert, user, ts, seq); err != nil {
		return unavailable(err)
	}
	tx.setLast(user, lastRow{ts: ts, seq: seq, any: true})
	return nil
}

// readTx adapts a read transaction to rowQuerier.
type readTx struct {
	ctx   context.Context
	tx    *sql.Tx
	stmts *[numQueries]*sql.Stmt
}

func (r readTx) stmt(q query) *sql.Stmt { return r.tx.StmtContext(r.ctx, r.stmts[q]) }

func (r readTx) queryRow(q query, args ...any) *sql.Row {
	return r.stmt(q).QueryRowContext(r.ctx, args...)
}

func (r readTx) query(q query, args ...any) (*sql.Rows, error) {
	return r.stmt(q).QueryContext(r.ctx, args...)
}

// prepareReads prepares the statements of View on the read pool.
func (s *Store) prepareReads(ctx context.Context) error {
	for _, q := range readQueries {
		st, err := s.db.PrepareContext(ctx, queries[q])
		if err != nil {
			return fmt.Errorf("prepare %q: %w", queries[q], err)
		}
		s.reads[q] = st
	}
	return nil
}

// View implements policy.RequestStore on a read connection, so it never
// waits for the writer.
func (s *Store) View(ctx context.Context, userID string, fn func(policy.History) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return unavailable(err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to lose
	h := &history{q: readTx{ctx, tx, &s.reads}, user: userID}
	return fn(h)
}

// Forget implements policy.RequestStore.
func (s *Store) Forget(ctx context.Context, userID string) error {
	return s.writer.do(ctx, func(tx *writeTx) error {
		tx.forgetLast(userID)
		_, err := tx.exec(qForget, userID)
		return unavailable(err)
	})
}
