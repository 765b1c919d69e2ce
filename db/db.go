package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/pressly/goose/v3"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/policyguard/policyguard/policy"
)

var (
	_ policy.TierStore    = (*Store)(nil)
	_ policy.RequestStore = (*Store)(nil)
	_ policy.UserStore    = (*Store)(nil)
)

// Synchronous settings accepted by WithSynchronous.
const (
	// SyncFull makes every commit durable against power loss, not only
	// against a crash of the process.
	SyncFull = "FULL"
	// SyncNormal survives a crash of the process (SIGKILL) but may lose the
	// last commits on power loss or an OS crash.
	SyncNormal = "NORMAL"
)

// Store is a database of tiers, user records and admitted requests, in
// SQLite or PostgreSQL. It is safe for concurrent use.
type Store struct {
	db     *sqlx.DB
	d      *dialect
	writer writes
	reads  [numQueries]*sql.Stmt // View's statements on the read pool (see readQueries)

	keyRead *sql.Stmt // KeyBySecretHash's statement on the read pool

	tiers       atomic.Pointer[tierCache]
	reloadMu    sync.Mutex    // serializes tier cache reloads
	tierVersion versionReader // tells whether the tier cache is stale; see tiers.go

	counts      *checkCounts               // counts of checks not yet stored (see stats.go)
	stopFlusher context.CancelFunc         // ends flushCountsEvery
	users       userCache                  // every user record; see users.go
	accounts    sync.Map                   // account id → policy.Account, every account; see accounts.go
	prices      atomic.Pointer[priceCache] // every price version; see prices.go
	pricesMu    sync.Mutex                 // serializes price cache reloads

	// billing is the billing cycle of keys whose records and accounts
	// set none, by which the cleanup buckets their rows (see periods.go).
	billing policy.BillingCycle

	closeOnce sync.Once
	closeErr  error
}

// writes runs the store's writes, each job in a transaction: the SQLite
// writer, or a transaction per job on PostgreSQL.
type writes interface {
	// do runs fn in a transaction and returns once it committed (nil)
	// or failed.
	do(ctx context.Context, fn func(tx *writeTx) error) error
	// admit runs an admission of user (see Store.Admit).
	admit(ctx context.Context, user string, decide func(policy.History) (policy.Admission, error)) error
	// close waits for the writes under way and refuses new ones.
	close() error
}

type options struct {
	synchronous string
	readConns   int
	maxBatch    int
	busyTimeout time.Duration
	commitDelay time.Duration // < 0: the default for the synchronous mode

	poolSize         int
	statementTimeout time.Duration
	timeZone         *time.Location // of billing periods (see WithTimeZone)

	log *slog.Logger
}

// Option configures Open.
type Option func(*options)

// WithSynchronous sets SQLite's synchronous pragma: SyncFull (default) or
// SyncNormal.
func WithSynchronous(mode string) Option { return func(o *options) { o.synchronous = mode } }

// WithBusyTimeout sets how long a statement waits for a lock another
// connection or process holds before it fails (default 5s): SQLite's busy
// timeout, PostgreSQL's lock_timeout.
func WithBusyTimeout(d time.Duration) Option { return func(o *options) { o.busyTimeout = d } }

// DefaultCommitDelay is how long, with SyncFull, the writer waits for more
// writes before committing when several are already waiting (see
// WithCommitDelay).
const DefaultCommitDelay = 200 * time.Microsecond

// WithCommitDelay sets how long the writer waits for more writes before it
// commits a batch when several (four or more) are already waiting, so that
// under load one fsync serves more of them; a lone write never waits. The
// default is DefaultCommitDelay with SyncFull and 0 with SyncNormal, which
// does not fsync at commit.
func WithCommitDelay(d time.Duration) Option { return func(o *options) { o.commitDelay = d } }

// WithLogger sets where the store logs what it does on its own, such as
// reopening a SQLite database after a commit failed on an I/O error. The
// default is slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithMaxBatch sets how many writes the writer commits in one transaction at
// most (default 256); on PostgreSQL, how many admissions one batch decides
// and commits at most.
func WithMaxBatch(n int) Option { return func(o *options) { o.maxBatch = n } }

// Open opens the database that dsn names and applies every pending
// migration. A URL that begins with postgres:// or postgresql:// is a
// PostgreSQL database (see IsPostgres); anything else is the path of a
// SQLite file, created (mode 0600) if it does not exist. Close releases it.
func Open(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	o := options{synchronous: SyncFull, readConns: 4, maxBatch: 256, busyTimeout: 5 * time.Second, commitDelay: -1,
		poolSize: DefaultPoolSize, statementTimeout: DefaultStatementTimeout, log: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	if o.log == nil {
		o.log = slog.Default()
	}
	open := openSQLite
	if IsPostgres(dsn) {
		open = openPostgres
	}
	s, err := open(ctx, dsn, &o)
	if err != nil {
		return nil, err
	}
	s.billing = policy.BillingCycle{Location: o.timeZone}
	return s, nil
}

func openSQLite(ctx context.Context, path string, o *options) (*Store, error) {
	switch o.synchronous = strings.ToUpper(o.synchronous); o.synchronous {
	case SyncFull, SyncNormal:
	default:
		return nil, fmt.Errorf("synchronous must be FULL or NORMAL, not %q", o.synchronous)
	}
	if path == "" || strings.ContainsAny(path, "?#") || strings.HasPrefix(path, "file:") || path == ":memory:" {
		return nil, fmt.Errorf("database path %q: must be a plain file path", path)
	}
	if err := createFile(path); err != nil {
		return nil, err
	}

	dsn := path + "?_busy_timeout=" + strconv.FormatInt(o.busyTimeout.Milliseconds(), 10) +
		"&_journal_mode=WAL&_synchronous=" + o.synchronous +
		"&_foreign_keys=1&_pragma=temp_store(memory)"
	sdb, err := sqlx.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// One connection belongs to the writer for the store's lifetime.
	sdb.SetMaxOpenConns(o.readConns + 1)
	sdb.SetMaxIdleConns(o.readConns + 1)

	s := &Store{db: sdb, d: sqliteDialect, counts: newCheckCounts()}
	if err := s.migrate(ctx); err != nil {
		sdb.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if o.commitDelay < 0 {
		o.commitDelay = 0
		if o.synchronous == SyncFull {
			o.commitDelay = DefaultCommitDelay
		}
	}
	w, err := newWriter(ctx, sdb.DB, o.maxBatch, o.commitDelay, o.log)
	if err != nil {
		sdb.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	w.counts = s.counts // each commit stores them
	s.writer = w
	if err := s.start(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// start loads what the store keeps in memory and starts storing the counts
// of checks; on failure it closes the store.
func (s *Store) start(ctx context.Context) error {
	for _, init := range []func(context.Context) error{s.initTiers, s.initUsers, s.initAccounts, s.initPrices, s.prepareReads, s.prepareKeyRead} {
		if err := init(ctx); err != nil {
			s.Close()
			return err
		}
	}
	flushCtx, stop := context.WithCancel(context.Background())
	s.stopFlusher = stop
	go s.flushCountsEvery(flushCtx, time.Second)
	go s.refreshPricesEvery(flushCtx, priceRefresh)
	return nil
}

// createFile creates path with mode 0600 when it does not exist, so the
// database is never readable by other users, whatever the umask.
func createFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case err == nil:
		return f.Close()
	case errors.Is(err, fs.ErrExist):
		st, err := os.Stat(path)
		if err != nil {
			return err
		}
		if st.IsDir() {
			return fmt.Errorf("database path %s is a directory", path)
		}
		return nil
	default:
		return fmt.Errorf("create database: %w", err)
	}
}

func (s *Store) migrate(ctx context.Context) error {
	p, err := goose.NewProvider(s.d.goose, s.db.DB, s.d.migrations)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	// A file migrated by a newer binary may hold tables this one does not
	// know how to keep consistent; refuse it rather than run half-blind.
	current, target, err := p.GetVersions(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if current > target {
		return fmt.Errorf("%s schema version %d is newer than this binary's %d: run a newer policyguard", s.d.name, current, target)
	}
	return nil
}

// Ping reports whether the database answers a query. On SQLite, after a
// commit failed, it also writes (see writer.probe) and reports whether
// that commits, so that a service whose disk failed says so, and says when
// it works again even if nothing else writes.
func (s *Store) Ping(ctx context.Context) error {
	if w, ok := s.writer.(*writer); ok && w.failed.Load() != nil {
		if err := w.probe(ctx); err != nil {
			return err
		}
	}
	var n int
	if err := s.db.GetContext(ctx, &n, "SELECT count(*) FROM tiers"); err != nil {
		return unavailable(err)
	}
	return nil
}

// Close waits for pending writes to commit and closes the database. Calls
// after Close fail.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		var err error
		if s.stopFlusher != nil {
			s.stopFlusher()
		}
		if s.writer != nil {
			if !s.counts.empty() {
				err = s.FlushCounts(context.Background())
			}
			err = errors.Join(err, s.writer.close())
		}
		for _, st := range append(s.reads[:], s.keyRead) {
			if st != nil {
				err = errors.Join(err, st.Close())
			}
		}
		s.closeErr = errors.Join(err, s.db.Close())
	})
	return s.closeErr
}

// unavailable wraps a storage failure as a policy error, so callers fail
// closed with a message that says what failed.
func unavailable(err error) error {
	if err == nil {
		return nil
	}
	var pe *policy.Error
	if errors.As(err, &pe) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &policy.Error{Code: policy.EUNAVAILABLE, Message: "storage failed: " + err.Error()}
}
