package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// query names a statement the writer prepares once.
type query int

const (
	qLast query = iota
	qFirstAfter
	qNthAfter
	qInsert
	qForget
	qNextUser
	qPruneBound
	qPruneDelete
	numQueries
)

// queries are the statements of the hot path and of pruning. Each is a seek
// on the primary key (user_id, ts); none scans a user's window.
var queries = [numQueries]string{
	qLast:       `SELECT ts, seq FROM requests WHERE user_id = ? ORDER BY ts DESC LIMIT 1`,
	qFirstAfter: `SELECT ts, seq FROM requests WHERE user_id = ? AND ts > ? ORDER BY ts LIMIT 1`,
	// Only needed when a lowered limit leaves a window more than one
	// request over its ceiling; it steps over those requests.
	qNthAfter:    `SELECT ts FROM requests WHERE user_id = ? AND ts > ? ORDER BY ts LIMIT 1 OFFSET ?`,
	qInsert:      `INSERT INTO requests (user_id, ts, seq) VALUES (?, ?, ?)`,
	qForget:      `DELETE FROM requests WHERE user_id = ?`,
	qNextUser:    `SELECT user_id FROM requests WHERE user_id > ? ORDER BY user_id LIMIT 1`,
	qPruneBound:  `SELECT ts FROM requests WHERE user_id = ? AND ts <= ? ORDER BY ts LIMIT 1 OFFSET ?`,
	qPruneDelete: `DELETE FROM requests WHERE user_id = ? AND ts <= ?`,
}

// rowQuerier runs one of the queries and returns its row.
type rowQuerier interface {
	queryRow(q query, args ...any) *sql.Row
}

// history implements policy.History for one user on one transaction.
//
// A user's rows have strictly increasing ts and consecutive seq (pruning
// only removes the oldest rows, Forget removes all), so the number of rows
// after a cutoff is last.seq - first_after_cutoff.seq + 1: two seeks,
// whatever the count.
type history struct {
	q    rowQuerier
	user string

	loaded           bool
	any              bool
	lastTS, lastSeq  int64
	firstAfter       [len(policy.Windows)]firstRow // small cache: CountAfter then NthAfter(_, 1)
	firstAfterFilled int
}

type firstRow struct{ cutoff, ts, seq int64 }

func (h *history) load() error {
	if h.loaded {
		return nil
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
	return nil
}

// Last implements policy.History.
func (h *history) Last() (time.Time, bool, error) {
	if err := h.load(); err != nil || !h.any {
		return time.Time{}, false, err
	}
	return time.UnixMicro(h.lastTS), true, nil
}

// first returns the oldest row after cutoff; ok is false when there is none.
func (h *history) first(cutoff int64) (r firstRow, ok bool, err error) {
	if err := h.load(); err != nil || !h.any || h.lastTS <= cutoff {
		return r, false, err
	}
	for _, r := range h.firstAfter[:h.firstAfterFilled] {
		if r.cutoff == cutoff {
			return r, true, nil
		}
	}
	r.cutoff = cutoff
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
	return s.writer.do(ctx, func(tx *writeTx) error {
		h := &history{q: tx, user: userID}
		at, record, err := decide(h)
		if err != nil || !record {
			return err
		}
		ts := at.UnixMicro()
		if err := h.load(); err != nil {
			return err
		}
		if h.any && ts <= h.lastTS {
			return fmt.Errorf("admit %q: timestamp %d not after the last one %d", userID, ts, h.lastTS)
		}
		_, err = tx.exec(qInsert, userID, ts, h.lastSeq+1)
		return unavailable(err)
	})
}

// readTx adapts a read transaction to rowQuerier.
type readTx struct {
	ctx context.Context
	tx  *sql.Tx
}

func (r readTx) queryRow(q query, args ...any) *sql.Row {
	return r.tx.QueryRowContext(r.ctx, queries[q], args...)
}

// View implements policy.RequestStore on a read connection, so it never
// waits for the writer.
func (s *Store) View(ctx context.Context, userID string, fn func(policy.History) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return unavailable(err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to lose
	return fn(&history{q: readTx{ctx, tx}, user: userID})
}

// Forget implements policy.RequestStore.
func (s *Store) Forget(ctx context.Context, userID string) error {
	return s.writer.do(ctx, func(tx *writeTx) error {
		_, err := tx.exec(qForget, userID)
		return unavailable(err)
	})
}
