package db

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"hash/fnv"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"

	"github.com/policyguard/policyguard/policy"
)

// Defaults of the PostgreSQL options.
const (
	// DefaultPoolSize is how many connections a store opens at most.
	DefaultPoolSize = 16
	// DefaultStatementTimeout is how long one statement may run.
	DefaultStatementTimeout = 5 * time.Second
)

// WithPoolSize sets how many connections to PostgreSQL the store opens at
// most (default DefaultPoolSize). Each batch loop of admissions holds one
// while it has work (at most half the pool, see pgBatches), and each other
// write, admission decided alone and read holds one while it runs. SQLite
// ignores it.
func WithPoolSize(n int) Option { return func(o *options) { o.poolSize = n } }

// WithStatementTimeout sets PostgreSQL's statement_timeout: how long one
// statement may run before it fails (default DefaultStatementTimeout). A
// check that fails so answers 503. SQLite ignores it.
func WithStatementTimeout(d time.Duration) Option { return func(o *options) { o.statementTimeout = d } }

// IsPostgres reports whether dsn names a PostgreSQL database: a URL that
// begins with postgres:// or postgresql://.
func IsPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// Redact returns dsn with the password of a URL replaced by xxxxx, for
// messages and logs.
func Redact(dsn string) string {
	if !IsPostgres(dsn) {
		return dsn
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "a PostgreSQL URL that does not parse"
	}
	return u.Redacted()
}

func openPostgres(ctx context.Context, dsn string, o *options) (*Store, error) {
	name := Redact(dsn)
	if o.poolSize < 1 {
		return nil, fmt.Errorf("%s: pool size must be at least 1, not %d", name, o.poolSize)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	// Every session of the pool waits for a lock and runs a statement no
	// longer than this: a stuck database fails checks (503) instead of
	// holding them.
	cfg.RuntimeParams["statement_timeout"] = strconv.FormatInt(o.statementTimeout.Milliseconds(), 10)
	cfg.RuntimeParams["lock_timeout"] = strconv.FormatInt(o.busyTimeout.Milliseconds(), 10)
	if cfg.ConnectTimeout == 0 {
		// A server that does not answer fails a check like a slow
		// statement does, not after the system's TCP timeout.
		cfg.ConnectTimeout = o.statementTimeout
	}
	sdb := stdlib.OpenDB(*cfg)
	sdb.SetMaxOpenConns(o.poolSize)
	sdb.SetMaxIdleConns(o.poolSize)
	s := &Store{db: sqlx.NewDb(sdb, "pgx"), d: postgresDialect, counts: newCheckCounts()}
	// Migrating holds a connection for its lock and goose takes another:
	// one more than a pool of one.
	sdb.SetMaxOpenConns(max(o.poolSize, 2))
	if err := s.migrateLocked(ctx); err != nil {
		sdb.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	sdb.SetMaxOpenConns(o.poolSize)
	w := &pgWriter{db: sdb, tiers: &s.tiers, jobs: make(chan *pgJob, 1024), maxBatch: max(o.maxBatch, 1),
		batchTimeout: 2 * o.statementTimeout, freshTiers: s.freshTiers}
	n := pgBatches(o.poolSize)
	w.batchers.Add(n)
	for range n {
		go w.batchLoop()
	}
	s.writer = w
	if err := s.start(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return s, nil
}

// Advisory locks, in PostgreSQL's two-key space: a class and a number.
// Every process on the database takes the same ones.
const (
	lockUser  = 1 // number: userLockKey(user id); one user's writes
	lockAdmin = 2 // number 0: changes to tiers and user records
	lockPrune = 3 // number 0: the cleanup, one replica at a time
	lockSetup = 4 // number 0: migrations, one process at a time
	// lockAccount is lockUser for an account's pool (policy.AccountKey):
	// a class of its own, so that no account's lock is a user's (nor,
	// numbered 0, the migrations'). A transaction takes at most one,
	// before any user's (see Store.AdmitPooled), and batches take none,
	// so neither order can deadlock.
	lockAccount = 5 // number: userLockKey(account key)
)

// migrateLocked migrates while holding a session lock, so that replicas
// started together do not run the same migration twice.
func (s *Store) migrateLocked(ctx context.Context) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return unavailable(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1, 0)`, lockSetup); err != nil {
		return unavailable(err)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1, 0)`, lockSetup) //nolint:errcheck // the session's end releases it too
	return s.migrate(ctx)
}

// pgWriter runs planned admissions in batches (see admitPlanned), and
// each other job in a transaction of its own on the pool: unlike SQLite,
// PostgreSQL commits many transactions at once. What SQLite's single
// writer gets by running one job at a time, a job or a batch here gets
// from advisory locks taken in its transaction (see writeTx.lockUser and
// admit_batch): one user's admissions, finishes and keepalives run one
// after the other, in this process and every other on the database, and
// each reads the rows the one before it committed (a statement under READ
// COMMITTED sees every commit made before it began, and the lock is
// granted after the previous holder committed). Nothing is cached between
// jobs.
type pgWriter struct {
	db    *sql.DB
	tiers *atomic.Pointer[tierCache] // the store's

	mu      sync.RWMutex // guards closed against Add on a waited-for running
	closed  bool
	running sync.WaitGroup

	// Planned admissions wait in jobs for one of pgBatches loops, which
	// run them in batches of up to maxBatch, each bounded by batchTimeout
	// (see admitPlanned).
	jobs         chan *pgJob
	maxBatch     int
	batchTimeout time.Duration
	batchers     sync.WaitGroup
	// batched counts the planned admissions a batch decided, alone those
	// left to decide alone, and disagreements those of them whose decide
	// disagreed with what admit_batch recorded: none, while the function
	// and package policy say the same.
	batched, alone, disagreements atomic.Int64
	// freshTiers brings the store's tiers up to date (Store.freshTiers).
	freshTiers func(context.Context) (*tierCache, error)
}

func (w *pgWriter) do(ctx context.Context, fn func(tx *writeTx) error) error {
	return w.run(ctx, "BEGIN", fn)
}

// admit begins the transaction and takes the user's lock in one round trip
// (see userLockKey), as an admission always needs both.
func (w *pgWriter) admit(ctx context.Context, user string, decide func(policy.History) (policy.Admission, error)) error {
	return w.run(ctx, admitBegin(user), func(tx *writeTx) error { return tx.admit(user, decide) })
}

// admitAlone is admit for a caller already counted in running.
func (w *pgWriter) admitAlone(ctx context.Context, user string, decide func(policy.History) (policy.Admission, error)) error {
	return w.runTx(ctx, admitBegin(user), func(tx *writeTx) error { return tx.admit(user, decide) })
}

func admitBegin(user string) string {
	class, key := lockOf(user)
	return fmt.Sprintf("BEGIN; SELECT pg_advisory_xact_lock(%d, %d)", class, key)
}

// lockOf returns the class and number of the advisory lock of key, a user
// id or an account's pool.
func lockOf(key string) (class int, number int32) {
	if policy.IsAccountKey(key) {
		return lockAccount, userLockKey(key)
	}
	return lockUser, userLockKey(key)
}

// run runs fn in a transaction that begin (a statement without
// parameters, which may be several) starts.
func (w *pgWriter) run(ctx context.Context, begin string, fn func(tx *writeTx) error) error {
	if err := w.enter(); err != nil {
		return err
	}
	defer w.running.Done()
	return w.runTx(ctx, begin, fn)
}

// enter counts a caller in running, which Close waits for, unless the
// writer is closed (errClosed). The caller calls running.Done when it is
// finished.
func (w *pgWriter) enter() error {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return errClosed
	}
	w.running.Add(1)
	return nil
}

// runTx is run for a caller counted in running.
func (w *pgWriter) runTx(ctx context.Context, begin string, fn func(tx *writeTx) error) error {
	// The transaction lives in the caller's context: a caller that goes
	// away before COMMIT has it rolled back and hears so, and nothing is
	// recorded. (On SQLite a job shares its transaction with others, so
	// the writer cannot do that.) It is run by hand on a connection of
	// the pool rather than through database/sql's Tx, so that BEGIN can
	// travel with the first statement; a connection returned with a
	// transaction still open is discarded by the driver (ResetSession).
	conn, err := w.db.Conn(ctx)
	if err != nil {
		return unavailable(err)
	}
	defer conn.Close()
	// Without parameters pgx sends the text as one simple query, which
	// may hold several statements.
	if _, err := conn.ExecContext(ctx, begin); err != nil {
		discard(conn)
		return unavailable(err)
	}
	tx := &writeTx{ctx: ctx, conn: conn, d: postgresDialect, tiers: w.tiers}
	if err := fn(tx); err != nil {
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil {
			discard(conn)
		}
		return err // the job's error says what matters
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		discard(conn)
		return unavailable(err)
	}
	return nil
}

// discard keeps conn from going back to the pool: its session may be in
// a transaction or in an unknown state.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
}

// userLockKey is the number of user's advisory lock: a 32-bit FNV-1a hash
// of the id. Every replica must compute the same number, so it is part of
// the database's format: changing it would let an old and a new replica
// admit the same user at once.
func userLockKey(user string) int32 {
	h := fnv.New32a()
	h.Write([]byte(user))
	return int32(h.Sum32())
}

func (w *pgWriter) close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.mu.Unlock()
	w.running.Wait()
	// Nobody sends any more: the batch loops end once the queue is empty.
	close(w.jobs)
	w.batchers.Wait()
	return nil
}

// lockUser takes user's lock until the transaction ends, on PostgreSQL;
// SQLite's writer runs one job at a time and needs none. Every write to a
// user's requests, calls or tokens takes it first.
func (tx *writeTx) lockUser(user string) error {
	if tx.w != nil {
		return nil
	}
	class, key := lockOf(user)
	_, err := tx.conn.ExecContext(tx.ctx, `SELECT pg_advisory_xact_lock($1, $2)`, class, key)
	return unavailable(err)
}

// tryLockUser is lockUser without waiting: ok is false when another
// transaction holds the lock.
func (tx *writeTx) tryLockUser(user string) (ok bool, err error) {
	if tx.w != nil {
		return true, nil
	}
	class, key := lockOf(user)
	err = tx.conn.QueryRowContext(tx.ctx, `SELECT pg_try_advisory_xact_lock($1, $2)`, class, key).Scan(&ok)
	return ok, unavailable(err)
}

// lockAdmin takes the lock of changes to tiers and user records until the
// transaction ends, on PostgreSQL, so that two replicas changing them at
// once cannot both pass a check that only one may (a tier deleted while a
// record is assigned to it); SQLite's writer needs none.
func (tx *writeTx) lockAdmin() error {
	if tx.w != nil {
		return nil
	}
	_, err := tx.conn.ExecContext(tx.ctx, `SELECT pg_advisory_xact_lock($1, 0)`, lockAdmin)
	return unavailable(err)
}

// pruneLock tries to take the cleanup's lock for a session of its own, on
// PostgreSQL: ok is false when another replica holds it (and is cleaning
// up). release ends it. SQLite needs none.
func (s *Store) pruneLock(ctx context.Context) (ok bool, release func(), err error) {
	if !s.d.postgres {
		return true, func() {}, nil
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return false, nil, unavailable(err)
	}
	if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1, 0)`, lockPrune).Scan(&ok); err != nil || !ok {
		conn.Close()
		return false, nil, unavailable(err)
	}
	return true, func() {
		_, err := conn.ExecContext(context.Background(), `SELECT pg_advisory_unlock($1, 0)`, lockPrune)
		if err != nil {
			// A connection that cannot unlock must not go back to the
			// pool holding the lock; closing the session releases it.
			discard(conn)
		}
		conn.Close()
	}, nil
}

// pgFirstRead is what a PostgreSQL admission reads first, in one statement
// once its user's lock is held: the version of the tiers, the user's
// newest request and the user's record. Read one by one they would cost
// three round trips (see history.currentTierPG).
var pgFirstRead = func() string {
	cols := strings.Split(userColumns, ", ")
	for i, c := range cols {
		switch c {
		case "user_id", "note":
			cols[i] = "coalesce(u." + c + ", '')"
		case "limits":
			cols[i] = "coalesce(u.limits::text, '{}')"
		case "updated_at":
			cols[i] = "coalesce(u." + c + ", 0)"
		default:
			cols[i] = "u." + c
		}
	}
	return `SELECT (SELECT version FROM tier_version WHERE id = 1), r.ts, r.seq, u.user_id IS NOT NULL, ` + strings.Join(cols, ", ") + `
	FROM (SELECT 1) AS one
	LEFT JOIN LATERAL (SELECT ts, seq FROM requests WHERE user_id = $1 ORDER BY ts DESC, seq DESC LIMIT 1) AS r ON true
	LEFT JOIN users AS u ON u.user_id = $1`
}()

// currentTierPG is CurrentTier on PostgreSQL, where the admission's
// transaction is the only truth: one statement reads the tiers' version,
// which says whether the store's cache of tiers is current, and with it
// what load and CurrentUser would read next, which they then find loaded.
// A cache older than the table costs one more read, of the tier's row.
func (h *history) currentTierPG(name string) (*policy.Tier, bool, error) {
	if !h.loaded {
		var (
			ts, seq sql.NullInt64
			found   bool
			r       userRow
		)
		args := append([]any{&h.version, &ts, &seq, &found}, r.scanArgs()...)
		if err := h.tx.conn.QueryRowContext(h.tx.ctx, pgFirstRead, h.user).Scan(args...); err != nil {
			return nil, false, unavailable(err)
		}
		h.versionRead = true
		h.loaded, h.any, h.lastTS, h.lastSeq = true, ts.Valid, ts.Int64, seq.Int64
		h.st = &userState{any: h.any, lastTS: h.lastTS, lastSeq: h.lastSeq, recordLoaded: true}
		if found {
			u, err := r.record()
			if err != nil {
				return nil, false, err
			}
			h.st.record = &u
		}
	}
	c := h.tiersAt
	if c == nil {
		c = h.tx.tiers.Load()
	}
	if h.versionRead && c != nil && c.version == h.version {
		t, ok := c.byName[name]
		return &t, ok, nil
	}
	tiers, err := queryTiers(h.tx, ` WHERE name = ?`, name)
	t, ok := tiers[name]
	return &t, ok, err
}
