package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/policyguard/policyguard/policy"
)

// errClosed is returned by writes submitted after Close.
var errClosed = &policy.Error{Code: policy.EUNAVAILABLE, Message: "storage failed: store is closed"}

// writer owns the only connection that writes. Jobs queue up while a
// transaction commits and then run together in the next one, so a burst of
// admissions costs one fsync instead of one each (group commit), and no two
// writes ever wait on SQLite's lock for each other. A job's caller hears back
// only after COMMIT, so an answered admission is always on disk.
type writer struct {
	conn     *sql.Conn
	stmts    [numQueries]*sql.Stmt
	maxBatch int

	mu     sync.RWMutex // guards closed against sends on a closed channel
	closed bool
	jobs   chan *job
	done   chan struct{}
}

// job is one unit of writing. run may execute any statements through tx; if
// it fails, the whole transaction is rolled back and every other job of the
// batch runs again in a new one, so run must only read and write through tx
// and keep no state that a second run would not overwrite.
type job struct {
	ctx  context.Context
	run  func(tx *writeTx) error
	errc chan error
}

// writeTx is what a job sees of the open transaction.
type writeTx struct {
	ctx   context.Context
	conn  *sql.Conn
	stmts *[numQueries]*sql.Stmt
}

func (tx *writeTx) queryRow(q query, args ...any) *sql.Row {
	return tx.stmts[q].QueryRowContext(tx.ctx, args...)
}

func (tx *writeTx) exec(q query, args ...any) (sql.Result, error) {
	return tx.stmts[q].ExecContext(tx.ctx, args...)
}

func newWriter(ctx context.Context, db *sql.DB, maxBatch int) (*writer, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	w := &writer{conn: conn, maxBatch: max(maxBatch, 1), jobs: make(chan *job, 1024), done: make(chan struct{})}
	for q, text := range queries {
		if w.stmts[q], err = conn.PrepareContext(ctx, text); err != nil {
			conn.Close()
			return nil, fmt.Errorf("prepare %q: %w", text, err)
		}
	}
	go w.loop()
	return w, nil
}

// do runs fn in the writer's next transaction and returns once that
// transaction has committed (nil) or failed.
func (w *writer) do(ctx context.Context, fn func(tx *writeTx) error) error {
	j := &job{ctx: ctx, run: fn, errc: make(chan error, 1)}
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		return errClosed
	}
	select {
	case w.jobs <- j:
	case <-ctx.Done():
		w.mu.RUnlock()
		return ctx.Err()
	}
	w.mu.RUnlock()
	// Wait for the outcome even if ctx ends meanwhile: the job may already
	// be in a transaction, and the caller must not believe nothing happened.
	return <-j.errc
}

func (w *writer) loop() {
	defer close(w.done)
	batch := make([]*job, 0, w.maxBatch)
	for j := range w.jobs {
		batch = append(batch[:0], j)
	fill:
		for len(batch) < w.maxBatch {
			select {
			case j, ok := <-w.jobs:
				if !ok {
					break fill
				}
				batch = append(batch, j)
			default:
				break fill
			}
		}
		w.commit(batch)
	}
}

// commit runs batch in one transaction. A failing job is answered with its
// error and the others are retried without it, so one bad job cannot fail
// its neighbours.
func (w *writer) commit(batch []*job) {
	// A caller that gave up before its job started gets nothing written.
	live := batch[:0]
	for _, j := range batch {
		if err := j.ctx.Err(); err != nil {
			j.errc <- err
			continue
		}
		live = append(live, j)
	}
	batch = live
	for len(batch) > 0 {
		failed, err := w.try(batch)
		if failed < 0 {
			for _, j := range batch {
				j.errc <- err
			}
			return
		}
		batch[failed].errc <- err
		batch = append(batch[:failed], batch[failed+1:]...)
	}
}

// try runs batch in one transaction. It returns -1 and the commit's outcome,
// or the index and error of the first job that failed (after rolling back).
func (w *writer) try(batch []*job) (int, error) {
	ctx := context.Background() // a caller going away must not abort others' commit
	if _, err := w.conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return -1, unavailable(err)
	}
	for i, j := range batch {
		if err := j.run(&writeTx{ctx: ctx, conn: w.conn, stmts: &w.stmts}); err != nil {
			w.rollback()
			return i, err
		}
	}
	if _, err := w.conn.ExecContext(ctx, "COMMIT"); err != nil {
		w.rollback()
		return -1, unavailable(err)
	}
	return -1, nil
}

func (w *writer) rollback() {
	// SQLite may already have rolled back (disk full, I/O error); the error
	// of a ROLLBACK without a transaction says nothing new.
	_, _ = w.conn.ExecContext(context.Background(), "ROLLBACK")
}

// close stops accepting jobs, waits for queued ones to commit, and releases
// the connection.
func (w *writer) close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	close(w.jobs)
	w.mu.Unlock()
	<-w.done
	var errs []error
	for _, st := range w.stmts {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	return errors.Join(append(errs, w.conn.Close())...)
}

// queryRowSQL and execSQL run statements outside the prepared set, for rare
// writes such as tier edits.
func (tx *writeTx) queryRowSQL(text string, args ...any) *sql.Row {
	return tx.conn.QueryRowContext(tx.ctx, text, args...)
}

func (tx *writeTx) execSQL(text string, args ...any) (sql.Result, error) {
	return tx.conn.ExecContext(tx.ctx, text, args...)
}
