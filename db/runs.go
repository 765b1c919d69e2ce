package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// Runs are kept in runs, one row per run, and run_tree, each run's
// ancestors and itself (see migration 27). A check in a run reads the
// run's chain and writes it in the user's admission: on SQLite in the
// writer's transaction, on PostgreSQL in a transaction of its own under
// the user's lock (a run's check is never planned, see
// policy.RateLimiter), which covers every run of the tree since a tree
// belongs to one user. What the tree's calls reserve and use reaches the
// rows through triggers on calls, in the transaction that writes the
// call, whichever path writes it.

var (
	_ policy.RunHistory = (*history)(nil)
	_ policy.RunStore   = (*Store)(nil)
)

// runColumns are the columns a Run is read from, r the runs table, and
// the calls in flight of its subtree at ?2: those in_flight counts, less
// those expired at ?2 but not yet settled, for each run of the subtree a
// range of calls_run_open (empty in the writer, which settles a user's
// expired calls before it decides a check).
const runColumns = `r.run_id, r.user_id, r.tier, coalesce(r.parent, ''), r.root, r.depth, r.opened_at, r.last_at,
	r.state, coalesce(r.cause, ''), coalesce(r.ended_at, 0), r.requests, r.tokens, r.cost,
	r.in_flight - (SELECT count(*) FROM run_tree AS d JOIN calls AS c ON c.run_id = d.run_id
		WHERE d.ancestor = r.run_id AND c.finished_at IS NULL AND c.expires_at <= ?2)`

var runQueries = map[query]string{
	// A run and its ancestors, nearest first.
	qRunChain: `SELECT ` + runColumns + ` FROM run_tree AS t JOIN runs AS r ON r.run_id = t.ancestor
		WHERE t.run_id = ?1 ORDER BY r.depth DESC`,
	qRunInsert: `INSERT INTO runs (run_id, user_id, tier, parent, root, depth, opened_at, last_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO NOTHING`,
	// The new run's ancestors are its parent's, and itself.
	qRunTreeInsert: `INSERT INTO run_tree (run_id, ancestor)
		SELECT ?1, ancestor FROM run_tree WHERE run_id = ?2 UNION ALL SELECT ?1, ?1`,
	// The request and its call (?3 calls, 1 or 0), and what the call
	// reserves (?4 tokens, ?5 cost).
	qRunCount: `UPDATE runs SET requests = requests + 1, last_at = ?2, in_flight = in_flight + ?3,
		tokens = tokens + ?4, cost = cost + ?5
		WHERE run_id IN (SELECT ancestor FROM run_tree WHERE run_id = ?1)`,
	qRunClose: `UPDATE runs SET state = ?2, cause = ?3, ended_at = ?4 WHERE run_id = ?1 AND state = 'open'`,
	// A run and its descendants, those still open.
	qRunSubtreeOpen: `SELECT ` + runColumns + ` FROM run_tree AS t JOIN runs AS r ON r.run_id = t.run_id
		WHERE t.ancestor = ?1 AND r.state = 'open'`,
	qRunsForget:    `DELETE FROM runs WHERE user_id = ?`,
	qRunTreeForget: `DELETE FROM run_tree WHERE run_id IN (SELECT run_id FROM runs WHERE user_id = ?)`,
	qRunTreePrune:  `DELETE FROM run_tree WHERE run_id IN (SELECT run_id FROM runs WHERE last_at <= ? ORDER BY last_at LIMIT ?)`,
	qRunsPrune:     `DELETE FROM runs WHERE run_id IN (SELECT run_id FROM runs WHERE last_at <= ? ORDER BY last_at LIMIT ?)`,
	qRunUser:       `SELECT user_id FROM runs WHERE run_id = ?`,
	qRunChildren:   `SELECT run_id FROM runs WHERE parent = ? ORDER BY run_id`,
	qRunGet:        `SELECT ` + runColumns + ` FROM runs AS r WHERE r.run_id = ?1`,
	qRunsByUser:    `SELECT ` + runColumns + ` FROM runs AS r WHERE r.user_id = ?1 AND r.run_id > ?3 ORDER BY r.run_id LIMIT ?4`,
	// By state: expired takes the runs held as open too (see
	// policy.RunStore.ListRuns).
	qRunsByState: `SELECT ` + runColumns + ` FROM runs AS r WHERE (r.state = ?1 OR (?1 = 'expired' AND r.state = 'open'))
		AND r.run_id > ?3 ORDER BY r.run_id LIMIT ?4`,
	qRunsByUserState: `SELECT ` + runColumns + ` FROM runs AS r WHERE r.user_id = ?1 AND (r.state = ?5 OR (?5 = 'expired' AND r.state = 'open'))
		AND r.run_id > ?3 ORDER BY r.run_id LIMIT ?4`,
	qRunsAll: `SELECT ` + runColumns + ` FROM runs AS r WHERE r.run_id > ?3 AND ?1 = ?1 ORDER BY r.run_id LIMIT ?4`,
}

// runScan scans a Run read with runColumns.
type runScan struct {
	r                       policy.Run
	state, cause            string
	openedAt, lastAt, ended int64
	cost                    int64
}

func (w *runScan) dest() []any {
	r := &w.r
	return []any{&r.ID, &r.UserID, &r.Tier, &r.Parent, &r.Root, &r.Depth, &w.openedAt, &w.lastAt,
		&w.state, &w.cause, &w.ended, &r.Requests, &r.Tokens, &w.cost, &r.CallsInFlight}
}

func (w *runScan) run() policy.Run {
	r := w.r
	r.OpenedAt, r.LastAt = time.UnixMicro(w.openedAt).UTC(), time.UnixMicro(w.lastAt).UTC()
	r.State, r.Cause, r.Cost = policy.RunState(w.state), policy.RunCause(w.cause), policy.Money(w.cost)
	if w.ended != 0 {
		r.EndedAt = time.UnixMicro(w.ended).UTC()
	}
	return r
}

// scanRuns reads the runs of rows.
func scanRuns(rows *sql.Rows) ([]policy.Run, error) {
	defer rows.Close()
	out := []policy.Run{}
	for rows.Next() {
		var w runScan
		if err := rows.Scan(w.dest()...); err != nil {
			return nil, unavailable(err)
		}
		out = append(out, w.run())
	}
	return out, unavailable(rows.Err())
}

// RunChain implements policy.RunHistory.
func (h *history) RunChain(id string, now time.Time) ([]policy.Run, error) {
	rows, err := h.q.query(qRunChain, id, now.UnixMicro())
	if err != nil {
		return nil, unavailable(err)
	}
	return scanRuns(rows)
}

// writeRuns stores what a's admission does to runs, in the transaction
// that records it (when it does): the run it opens first, then the
// request counted, then the runs it closes, which may include the run
// just opened (a budget of one step).
func (tx *writeTx) writeRuns(a *policy.Admission) error {
	ra := a.Run
	if r := ra.Open; r != nil && a.Record {
		res, err := tx.exec(qRunInsert, r.ID, r.UserID, r.Tier, nullText(r.Parent), r.Root, r.Depth,
			r.OpenedAt.UnixMicro(), r.LastAt.UnixMicro())
		if err != nil {
			return unavailable(err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return unavailable(err)
		} else if n == 0 {
			// Another user's check opened it since this one read: their
			// locks differ (on PostgreSQL), the run's key does not.
			return policy.Errorf(policy.ECONFLICT, "run %s belongs to another user", policy.Quote(r.ID))
		}
		if _, err := tx.exec(qRunTreeInsert, r.ID, r.Parent); err != nil {
			return unavailable(err)
		}
	}
	if ra.ID != "" && a.Record {
		var calls, tokens, cost int64
		if c := a.Call; c != nil {
			calls, tokens, cost = 1, c.Reserved, int64(c.ReservedCost)
		}
		if _, err := tx.exec(qRunCount, ra.ID, a.At.Truncate(policy.Resolution).UnixMicro(), calls, tokens, cost); err != nil {
			return unavailable(err)
		}
	}
	for _, c := range ra.Close {
		if _, err := tx.exec(qRunClose, c.ID, string(c.State), string(c.Cause), c.At.UnixMicro()); err != nil {
			return unavailable(err)
		}
	}
	return nil
}

// GetRun implements policy.RunStore.
func (s *Store) GetRun(ctx context.Context, id string, now time.Time) (policy.Run, error) {
	rows, err := s.db.QueryContext(ctx, s.d.queries[qRunGet], id, now.UnixMicro())
	if err != nil {
		return policy.Run{}, unavailable(err)
	}
	runs, err := scanRuns(rows)
	if err != nil {
		return policy.Run{}, err
	}
	if len(runs) == 0 {
		return policy.Run{}, policy.Errorf(policy.ENOTFOUND, "run %s not found", policy.Quote(id))
	}
	r := runs[0]
	rows, err = s.db.QueryContext(ctx, s.d.queries[qRunChildren], id)
	if err != nil {
		return policy.Run{}, unavailable(err)
	}
	defer rows.Close()
	r.Children = []string{}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return policy.Run{}, unavailable(err)
		}
		r.Children = append(r.Children, c)
	}
	return r, unavailable(rows.Err())
}

// ListRuns implements policy.RunStore.
func (s *Store) ListRuns(ctx context.Context, f policy.RunFilter, now time.Time) ([]policy.Run, error) {
	q := qRunsAll
	switch {
	case f.UserID != "" && f.State != "":
		q = qRunsByUserState
	case f.UserID != "":
		q = qRunsByUser
	case f.State != "":
		q = qRunsByState
	}
	first := any(f.UserID)
	if q == qRunsByState {
		first = string(f.State)
	}
	args := []any{first, now.UnixMicro(), f.After, f.Limit}
	if q == qRunsByUserState {
		args = append(args, string(f.State))
	}
	rows, err := s.db.QueryContext(ctx, s.d.queries[q], args...)
	if err != nil {
		return nil, unavailable(err)
	}
	return scanRuns(rows)
}

// EndRun implements policy.RunStore: under the lock of the run's user,
// which every admission in its tree takes, so that no check admitted
// after it commits finds the run open, on any replica.
func (s *Store) EndRun(ctx context.Context, id string, now time.Time, expired func(policy.Run) policy.RunCause) (policy.Run, error) {
	var user string
	err := s.db.QueryRowContext(ctx, s.d.queries[qRunUser], id).Scan(&user)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return policy.Run{}, policy.Errorf(policy.ENOTFOUND, "run %s not found", policy.Quote(id))
	case err != nil:
		return policy.Run{}, unavailable(err)
	}
	at := now.Truncate(policy.Resolution)
	audit := auditBy(ctx, at)
	err = s.writer.do(ctx, func(tx *writeTx) error {
		if err := tx.lockUser(user); err != nil {
			return err
		}
		ended, err := tx.endRuns(id, at, expired)
		if err != nil || !ended {
			return err // nil: nothing was ended, nothing to log
		}
		return audit.insert(tx, auditEntry{kind: policy.AuditRuns, subject: id, action: policy.AuditEnded})
	})
	if err != nil {
		return policy.Run{}, fmt.Errorf("end run %q: %w", id, err)
	}
	return s.GetRun(ctx, id, now)
}

// endRuns ends run id and its open descendants at at, in the
// transaction that holds their user's lock, and reports whether it ended
// any: a run expired reads as expired (expired returns its cause), and is
// stored so, as the next check in it would store it, not as ended.
func (tx *writeTx) endRuns(id string, at time.Time, expired func(policy.Run) policy.RunCause) (bool, error) {
	rows, err := tx.query(qRunSubtreeOpen, id, at.UnixMicro())
	if err != nil {
		return false, unavailable(err)
	}
	runs, err := scanRuns(rows)
	if err != nil {
		return false, err
	}
	ended := false
	for _, r := range runs {
		state, cause := policy.RunEnded, policy.CauseEnded
		if c := expired(r); c != policy.CauseNone {
			state, cause = policy.RunExpired, c
		}
		ended = ended || state == policy.RunEnded
		if _, err := tx.exec(qRunClose, r.ID, string(state), string(cause), at.UnixMicro()); err != nil {
			return false, unavailable(err)
		}
	}
	return ended, nil
}

// pruneRunsStep deletes up to pruneBatch runs whose last request was at
// or before cutoff, and their rows of run_tree.
func pruneRunsStep(tx *writeTx, _ string, cutoff int64) (deleted int64, next string, done bool, err error) {
	if _, err := tx.exec(qRunTreePrune, cutoff, pruneBatch); err != nil {
		return 0, "", false, unavailable(err)
	}
	res, err := tx.exec(qRunsPrune, cutoff, pruneBatch)
	if err != nil {
		return 0, "", false, unavailable(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, "", false, unavailable(err)
	}
	return n, "", n < pruneBatch, nil
}
