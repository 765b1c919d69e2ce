package db

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/policyguard/policyguard/policy"
)

// errClosed is returned by writes submitted after Close.
var errClosed = &policy.Error{Code: policy.EUNAVAILABLE, Message: "storage failed: store is closed"}

// commitSiblings is how many jobs must be waiting together for the writer
// to wait commitDelay for more before it commits: a sign of load, under
// which fewer, larger commits save fsyncs; a lone job never waits.
const commitSiblings = 4

// maxCachedUsers bounds the writer's cache of users' rows (about 350 bytes
// each), so a day with very many users costs at most about 25 MB of it.
const maxCachedUsers = 1 << 16

// writer owns the only connection that writes. Jobs queue up while a
// transaction commits and then run together in the next one, so a burst of
// admissions costs one fsync instead of one each (group commit), and no two
// writes ever wait on SQLite's lock for each other. A job's caller hears back
// only after COMMIT, so an answered admission is always on disk.
type writer struct {
	db       *sql.DB // where conn comes from, and a new one after an I/O error
	conn     *sql.Conn
	stmts    [numQueries]*sql.Stmt
	maxBatch int
	// commitDelay is how long a batch of commitSiblings jobs or more waits
	// for others before it commits; 0 never waits. linger starts that
	// wait: it returns a channel that receives when d has passed and a
	// function that ends the wait early.
	commitDelay time.Duration
	linger      func(d time.Duration) (expired <-chan time.Time, stop func())

	// users caches what admissions read of each user's rows (see
	// userState), so that most need no query before their insert. Only
	// the writer goroutine touches it. It stays right because every write
	// to requests goes through this writer, which keeps it up to date,
	// except writes by other processes, which change data_version and
	// empty it (see try).
	users       map[string]*userState
	dataVersion int64
	// pools holds each account pool's rows in pool_recent, as this
	// writer wrote them (see pool_recent.go), and staged counts them, or
	// more: at maxStaged the next commit merges them into requests.
	// poolsStale says pool_recent may hold rows pools lacks (another
	// process wrote, a transaction rolled back, the writer is new): the
	// next transaction merges them all before anything else.
	pools             map[string]*stagedRows
	staged, maxStaged int
	poolsStale        bool

	// tierView is the writer's copy of the tiers table, against which
	// admissions confirm the tier their check began with (see
	// history.CurrentTier). tiersStale says it must be read again: after
	// any write outside the prepared statements (the tiers' own writes go
	// that way), a rollback, or a write by another process.
	tierView   map[string]*policy.Tier
	tiersStale bool

	// counts, when set, are the counts of checks each commit also stores
	// (see checkCounts).
	counts *checkCounts

	// ioErr is the I/O error of the last commit, after which the writer
	// opens a new connection before it writes again (see reopen); reopened
	// counts the connections opened so, and ioLogged says the failure was
	// logged, since the last commit that succeeded. Only the writer
	// goroutine touches them.
	ioErr    error
	reopened int
	ioLogged bool
	// failed is the error of the last commit, nil once one succeeds: while
	// it is set, Ping tries a write (see probe) and reports its failure.
	failed atomic.Pointer[policy.Error]
	log    *slog.Logger

	mu     sync.RWMutex // guards closed against sends on a closed channel
	closed bool
	jobs   chan *job
	done   chan struct{}
}

// job is one unit of writing: an admission (user and decide) or any other
// write (run). If it fails, the whole transaction is rolled back and every
// other job of the batch runs again in a new one, so a job must only read
// and write through the transaction and keep no state that a second run
// would not overwrite. Jobs are pooled: a job belongs to the writer from
// submission until its answer is sent, and to nobody after it is received.
type job struct {
	ctx    context.Context
	run    func(tx *writeTx) error
	user   string
	decide func(policy.History) (policy.Admission, error)
	errc   chan error
}

var jobPool = sync.Pool{New: func() any { return &job{errc: make(chan error, 1)} }}

// writeTx is what a job sees of the open transaction: the SQLite writer's,
// or one of PostgreSQL's (see pgWriter).
type writeTx struct {
	ctx  context.Context
	conn sqlConn
	d    *dialect
	// stmts are the writer's statements prepared on its connection, on
	// SQLite; nil on PostgreSQL, whose driver prepares each statement of
	// d.queries once per connection.
	stmts *[numQueries]*sql.Stmt
	// w is the SQLite writer, whose caches the transaction reads and
	// keeps up to date; nil on PostgreSQL, where other processes write
	// the same rows, so that the transaction reads what it needs.
	w *writer
	// tiers is the store's cache of tiers, on PostgreSQL: current when
	// its version is the table's (see history.currentTierPG).
	tiers *atomic.Pointer[tierCache]
	// touched lists the users whose cached state this transaction read or
	// changed: a rollback forgets them, since what was cached may not have
	// happened.
	touched []string
	hist    history // reused by each admission of the batch
	// poolHist is hist for the pool of a member's admission.
	poolHist history
}

// sqlConn runs statements: the SQLite writer's *sql.Conn or a
// PostgreSQL *sql.Tx.
type sqlConn interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (tx *writeTx) queryRow(q query, args ...any) *sql.Row {
	if tx.stmts == nil {
		return tx.conn.QueryRowContext(tx.ctx, tx.d.queries[q], args...)
	}
	return tx.stmts[q].QueryRowContext(tx.ctx, args...)
}

func (tx *writeTx) query(q query, args ...any) (*sql.Rows, error) {
	if tx.stmts == nil {
		return tx.conn.QueryContext(tx.ctx, tx.d.queries[q], args...)
	}
	return tx.stmts[q].QueryContext(tx.ctx, args...)
}

func (tx *writeTx) exec(q query, args ...any) (sql.Result, error) {
	if tx.stmts == nil {
		return tx.conn.ExecContext(tx.ctx, tx.d.queries[q], args...)
	}
	return tx.stmts[q].ExecContext(tx.ctx, args...)
}

// cachedUser returns the cached state of user, nil when there is none. A
// caller that goes on to change it must call touch.
func (tx *writeTx) cachedUser(user string) *userState {
	if tx.w == nil {
		return nil
	}
	return tx.w.users[user]
}

// cacheUser caches st as user's state.
func (tx *writeTx) cacheUser(user string, st *userState) {
	if tx.w == nil {
		return
	}
	m := tx.w.users
	if _, ok := m[user]; !ok && len(m) >= maxCachedUsers {
		for k := range m { // evict one entry, effectively at random
			delete(m, k)
			break
		}
	}
	m[user] = st
	tx.touch(user)
}

// touch records that this transaction relies on or changed user's cached
// state.
func (tx *writeTx) touch(user string) { tx.touched = append(tx.touched, user) }

// forgetUser drops user's cached state, after a write that may have
// deleted rows it describes.
func (tx *writeTx) forgetUser(user string) {
	if tx.w != nil {
		delete(tx.w.users, user)
	}
}

func newWriter(ctx context.Context, db *sql.DB, maxBatch int, commitDelay time.Duration, log *slog.Logger) (*writer, error) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	w := &writer{
		db:          db,
		log:         log,
		maxBatch:    max(maxBatch, 1),
		commitDelay: commitDelay,
		linger: func(d time.Duration) (<-chan time.Time, func()) {
			timer.Reset(d)
			return timer.C, func() { timer.Stop() }
		},
		users: make(map[string]*userState),
		jobs:  make(chan *job, 1024),
		done:  make(chan struct{}),
		// Rows a previous process left in pool_recent move with the
		// first transaction.
		pools: make(map[string]*stagedRows), maxStaged: maxStaged, poolsStale: true,
	}
	if err := w.connect(ctx); err != nil {
		return nil, err
	}
	go w.loop()
	return w, nil
}

// connect takes a connection of the writer's own from the pool and
// prepares its statements on it.
func (w *writer) connect(ctx context.Context) error {
	conn, err := w.db.Conn(ctx)
	if err != nil {
		return err
	}
	// See checkpoint.go.
	if _, err := conn.ExecContext(ctx, `PRAGMA wal_autocheckpoint = `+strconv.Itoa(walRestartFrames)); err != nil {
		conn.Close()
		return err
	}
	var stmts [numQueries]*sql.Stmt
	for q, text := range sqliteDialect.queries {
		if stmts[q], err = conn.PrepareContext(ctx, text); err != nil {
			closeStmts(stmts[:])
			conn.Close()
			return fmt.Errorf("prepare %q: %w", text, err)
		}
	}
	w.conn, w.stmts = conn, stmts
	return nil
}

// reopen replaces the connection after a commit failed on an I/O error.
// Once a write or an fsync has failed, what the connection holds cannot be
// trusted to be what is on disk, so it is closed, never given back to the
// pool, and everything the writer remembers of rows and tiers is
// forgotten. The new connection is opened before the old one is closed:
// were the old the last connection to the file, the new one would rebuild
// the WAL index from the WAL itself, and so find committed the very
// transaction whose fsync failed, whose pages are in the file. Readers need
// no reopening: the failed commit never became visible to them.
func (w *writer) reopen(ctx context.Context) error {
	old, oldStmts := w.conn, w.stmts
	if err := w.connect(ctx); err != nil {
		return err
	}
	closeStmts(oldStmts[:])
	_ = old.Raw(func(any) error { return driver.ErrBadConn }) // closes it
	_ = old.Close()
	clear(w.users)
	w.tiersStale, w.poolsStale = true, true
	w.ioErr = nil
	w.reopened++
	return nil
}

// commitFailed records that a commit failed with err. An I/O error makes
// the writer reopen its connection before the next transaction; the first
// failure after a success is logged.
func (w *writer) commitFailed(err error) {
	first := w.failed.Swap(&policy.Error{Code: policy.EUNAVAILABLE, Message: "storage failed: " + err.Error()}) == nil
	var se *sqlite.Error
	switch {
	case errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_IOERR:
		w.ioErr = err
		if !w.ioLogged {
			w.ioLogged = true
			w.log.Error("storage: a commit failed on an I/O error; reopening the database before the next write", "err", err)
		}
	case first:
		w.log.Error("storage: a commit failed", "err", err)
	}
}

// commitSucceeded ends a run of failed commits, if there was one.
func (w *writer) commitSucceeded() {
	if w.failed.Load() == nil {
		return
	}
	w.failed.Store(nil)
	w.log.Info("storage: commits succeed again", "reopened", w.reopened)
	w.reopened, w.ioLogged = 0, false
}

// probe commits a transaction that writes a page, to learn whether writes
// succeed again after a failed commit: it sets user_version, which nothing
// reads, to the value it has.
func (w *writer) probe(ctx context.Context) error {
	return w.do(ctx, func(tx *writeTx) error {
		var v int64
		if err := tx.conn.QueryRowContext(tx.ctx, `PRAGMA user_version`).Scan(&v); err != nil {
			return unavailable(err)
		}
		_, err := tx.conn.ExecContext(tx.ctx, `PRAGMA user_version = `+strconv.FormatInt(v, 10))
		return unavailable(err)
	})
}

// do runs fn in the writer's next transaction and returns once that
// transaction has committed (nil) or failed.
func (w *writer) do(ctx context.Context, fn func(tx *writeTx) error) error {
	j := jobPool.Get().(*job)
	j.ctx, j.run = ctx, fn
	return w.submit(j)
}

// admit runs an admission of user in the writer's next transaction: decide
// reads the user's history and says whether and when to record a request.
// It returns once that transaction has committed (nil) or failed.
func (w *writer) admit(ctx context.Context, user string, decide func(policy.History) (policy.Admission, error)) error {
	j := jobPool.Get().(*job)
	j.ctx, j.user, j.decide = ctx, user, decide
	return w.submit(j)
}

func (w *writer) submit(j *job) error {
	defer func() {
		*j = job{errc: j.errc}
		jobPool.Put(j)
	}()
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		return errClosed
	}
	select {
	case w.jobs <- j:
	case <-j.ctx.Done():
		w.mu.RUnlock()
		return j.ctx.Err()
	}
	w.mu.RUnlock()
	// Wait for the outcome even if ctx ends meanwhile: the job may already
	// be in a transaction, and the caller must not believe nothing happened.
	return <-j.errc
}

func (w *writer) loop() {
	defer close(w.done)
	batch := make([]*job, 0, w.maxBatch)
	tx := &writeTx{conn: w.conn, d: sqliteDialect, stmts: &w.stmts, w: w}
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
		// Under load (several jobs were waiting), wait a moment for more
		// before committing: each commit costs an fsync, and the fsync,
		// not the jobs, is most of a small batch's cost.
		if w.commitDelay > 0 && len(batch) >= commitSiblings && len(batch) < w.maxBatch {
			expired, stop := w.linger(w.commitDelay)
		wait:
			for len(batch) < w.maxBatch {
				select {
				case j, ok := <-w.jobs:
					if !ok {
						break wait
					}
					batch = append(batch, j)
				case <-expired:
					break wait
				}
			}
			stop()
		}
		w.commit(tx, batch)
		clear(batch) // answered jobs belong to their callers again
	}
}

// commit runs batch in one transaction. A failing job is answered with its
// error and the others are retried without it, so one bad job cannot fail
// its neighbours.
func (w *writer) commit(tx *writeTx, batch []*job) {
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
		failed, err := w.try(tx, batch)
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
func (w *writer) try(tx *writeTx, batch []*job) (int, error) {
	ctx := context.Background() // a caller going away must not abort others' commit
	tx.ctx, tx.touched = ctx, tx.touched[:0]
	if w.ioErr != nil {
		if err := w.reopen(ctx); err != nil {
			w.log.Error("storage: reopening the database failed", "err", err)
			return -1, unavailable(err)
		}
		tx.conn = w.conn
	}
	if _, err := w.stmts[qBegin].ExecContext(ctx); err != nil {
		return -1, unavailable(err)
	}
	// Another process that wrote the file (data_version counts commits by
	// other connections) may have changed any user's rows.
	var v int64
	if err := w.stmts[qDataVersion].QueryRowContext(ctx).Scan(&v); err != nil {
		w.rollback(tx)
		return -1, unavailable(err)
	}
	if v != w.dataVersion {
		clear(w.users)
		w.tiersStale, w.poolsStale = true, true
		w.dataVersion = v
	}
	if w.poolsStale {
		if err := tx.mergePool(); err != nil {
			w.rollback(tx)
			return -1, err
		}
		w.mergedPools()
	}
	for i, j := range batch {
		var err error
		if j.run != nil {
			err = j.run(tx)
		} else {
			err = tx.admit(j.user, j.decide)
		}
		if err != nil {
			w.rollback(tx)
			return i, err
		}
	}
	taken := w.counts.take(false)
	if taken != nil {
		if err := flushCounts(tx, taken); err != nil {
			w.counts.settle(taken, false)
			w.rollback(tx)
			return -1, err
		}
	}
	merged := w.staged >= w.maxStaged
	if merged {
		if err := tx.mergePool(); err != nil {
			w.counts.settle(taken, false)
			w.rollback(tx)
			return -1, err
		}
	}
	if _, err := w.stmts[qCommit].ExecContext(ctx); err != nil {
		w.counts.settle(taken, false)
		w.rollback(tx)
		w.commitFailed(err)
		return -1, unavailable(err)
	}
	if merged {
		w.mergedPools()
	}
	w.counts.settle(taken, true)
	w.commitSucceeded()
	return -1, nil
}

func (w *writer) rollback(tx *writeTx) {
	for _, u := range tx.touched {
		delete(w.users, u)
	}
	w.tiersStale, w.poolsStale = true, true
	tx.touched = tx.touched[:0]
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
	return errors.Join(closeStmts(w.stmts[:]), w.conn.Close())
}

func closeStmts(stmts []*sql.Stmt) error {
	var errs []error
	for _, st := range stmts {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	return errors.Join(errs...)
}

// queryRowSQL and execSQL run statements outside the prepared set, for rare
// writes such as tier edits; the writer's copy of the tiers is read again
// after them.
func (tx *writeTx) queryRowSQL(text string, args ...any) *sql.Row {
	tx.tiersWritten()
	return tx.conn.QueryRowContext(tx.ctx, tx.d.bind(text), args...)
}

func (tx *writeTx) execSQL(text string, args ...any) (sql.Result, error) {
	tx.tiersWritten()
	return tx.conn.ExecContext(tx.ctx, tx.d.bind(text), args...)
}

// tiersWritten says the tiers may have changed: the SQLite writer reads
// its copy again. PostgreSQL keeps no copy (see history.CurrentTier).
func (tx *writeTx) tiersWritten() {
	if tx.w != nil {
		tx.w.tiersStale = true
	}
}
