package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/api/cli"
	"github.com/policyguard/policyguard/api/gateway"
	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
	"github.com/policyguard/policyguard/web"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "policyguard:", err)
		os.Exit(1)
	}
}

// run starts the service and blocks until ctx ends, then shuts down gracefully: in-flight checks
// finish and their writes commit. With a subcommand's name first ("tiers", "prices", "admins", "backup") it
// runs that command instead.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "tiers":
			return cli.Tiers(ctx, args[1:], cli.TiersEnv{DB: settingValue("db", getenv),
				DefaultTier: settingValue("default-tier", getenv), Open: openService}, stdout, stderr)
		case "prices":
			return cli.Prices(ctx, args[1:], cli.PricesEnv{DB: settingValue("db", getenv), Open: openService, Redact: db.Redact}, stdout, stderr)
		case "admins":
			return cli.Admins(ctx, args[1:], cli.AdminsEnv{DB: settingValue("db", getenv), Open: openService}, stdout, stderr)
		case "backup":
			return cli.Backup(ctx, args[1:], cli.BackupEnv{DB: settingValue("db", getenv),
				Backup: db.Backup, Redact: db.Redact}, stdout, stderr)
		}
	}
	cfg, err := parseConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	cli.TuneGC(getenv)
	logs := cli.NewLogWriter(stderr) // a line per request: written out in batches
	defer logs.Close()
	handler := cli.NewLogHandler(cfg.LogFormat, logs)
	log := slog.New(handler)
	tlsCfg, err := cli.LoadTLS(cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return err
	}

	now := time.Now
	var testClock *policy.TestClock
	if cfg.TestClock {
		testClock = policy.NewTestClock(time.Now())
		now = testClock.Now
	}
	store, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer store.Close()
	metrics := api.NewMetrics(nil)
	svc := newService(cfg, store, metrics, now)
	if cfg.AdminToken == "" && !cli.HasNamedAdmin(ctx, svc) { // with named admins, there is no built-in one
		b := make([]byte, 24)
		rand.Read(b) // never fails: crypto/rand crashes the program instead (Go 1.24)
		cfg.AdminToken = hex.EncodeToString(b)
		fmt.Fprintf(stdout, "admin token (generated; set -admin-token or GUARDRAIL_ADMIN_TOKEN to choose one): %s\n", cfg.AdminToken)
	}

	// The JSON API and the admin page check the admin token through one gate, so that a wrong token counts wherever it is sent.
	gate := policy.NewAdminGate(cfg.AdminToken)
	admin := web.NewAdmin(web.Config{Service: svc, Gate: gate, TierJSON: api.TierJSON, Logger: log, Sessions: store,
		Upstreams: cfg.Gateway.UpstreamNames()})
	srv := cli.NewHTTPServer(api.NewServer(api.Config{
		Service:        svc,
		Health:         store.Ping,
		Admin:          gate,
		Logger:         log,
		Metrics:        metrics,
		HideMetrics:    cfg.MetricsAddr != "",
		APIToken:       cfg.APIToken,
		FailOpen:       cfg.FailOpen,
		TrustedProxies: cfg.TrustedProxies,
		TestClock:      testClock,
		Pages:          admin.Register, // the admin page, behind the API's middleware
		Gateway:        cfg.Gateway,
	}), tlsCfg, handler)
	if cfg.MetricsAddr != "" {
		stopMetrics, err := cli.ServeMetrics(cfg.MetricsAddr, metrics.Handler(), handler, stdout)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	if cfg.TestClock && !loopback(ln.Addr()) { // localhost resolved beyond loopback
		ln.Close()
		return fmt.Errorf("-test-clock: %s is not a loopback address", ln.Addr())
	}
	announce(cfg, ln.Addr(), tlsCfg != nil, store.Kind(), testClock, log, stdout)

	bg, stopBG := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		store.PruneEvery(bg, cfg.CleanupInterval, policy.KeepFor, now, log, metrics.ObserveCleanup)
	}()
	err = cli.Serve(ctx, srv, ln, tlsCfg != nil, log)
	stopBG()
	wg.Wait()
	return errors.Join(err, store.Close())
}

// openStore opens the configured database and checks that the service can
// write it and that it holds the default tier.
func openStore(ctx context.Context, cfg config, log *slog.Logger) (*db.Store, error) {
	store, err := db.Open(ctx, cfg.DBPath, append(cfg.storeOptions(), db.WithLogger(log))...)
	if err != nil {
		return nil, err
	}
	if err := store.Writable(ctx); err != nil {
		store.Close()
		return nil, fmt.Errorf("%s cannot be written: %s", db.Redact(cfg.DBPath), policy.ErrorMessage(err))
	}
	if _, err := store.Tier(ctx, cfg.DefaultTier); err != nil {
		store.Close()
		return nil, fmt.Errorf("default tier %q does not exist in %s", cfg.DefaultTier, db.Redact(cfg.DBPath))
	}
	return store, nil
}

// newService returns the service on store, metered by metrics, on clock now.
func newService(cfg config, store *db.Store, metrics *api.Metrics, now func() time.Time) *policy.Service {
	tiers, requests := metrics.MeterStorage(store, store)
	svc := policy.NewService(tiers, requests, policy.WithDefaultTier(cfg.DefaultTier), policy.WithClock(now),
		policy.WithCallTimeout(cfg.CallTimeout), policy.WithRunIdle(cfg.RunIdle), policy.WithStats(store, store),
		policy.WithUsers(store), policy.WithTrustClientTier(cfg.TrustClientTier), policy.WithReplays(store),
		policy.WithKeys(store), policy.WithPrices(store), policy.WithAdmins(store), policy.WithAudit(store), policy.WithTimeZone(cfg.TimeZone))
	metrics.SetCallsInFlight(func(ctx context.Context) (int64, error) {
		byTier, err := svc.CallsInFlight(ctx)
		var n int64
		for _, c := range byTier {
			n += c
		}
		return n, err
	})
	return svc
}

// openService opens the database at dbPath for a subcommand (see
// cli.Opener).
func openService(ctx context.Context, dbPath, defaultTier string, existing bool) (*policy.Service, func() error, error) {
	if existing && !db.IsPostgres(dbPath) { // a mistyped PostgreSQL database fails to connect
		if _, err := os.Stat(dbPath); err != nil {
			return nil, nil, err
		}
	}
	store, err := db.Open(ctx, dbPath)
	if err != nil {
		return nil, nil, err
	}
	return policy.NewService(store, store, policy.WithDefaultTier(defaultTier), policy.WithUsers(store), policy.WithPrices(store),
		policy.WithAdmins(store)), store.Close, nil
}

// announce prints where the service listens and logs how it is set up,
// warning of the settings that leave it open.
func announce(cfg config, addr net.Addr, useTLS bool, storeKind string, testClock *policy.TestClock, log *slog.Logger, stdout io.Writer) {
	url := "http://" + addr.String()
	if useTLS {
		url = "https://" + addr.String()
	}
	fmt.Fprintf(stdout, "policyguard listening on %s (database %s)\n", url, db.Redact(cfg.DBPath))
	syncMode := strings.ToUpper(cfg.Sync)
	if db.IsPostgres(cfg.DBPath) {
		syncMode = "server" // PostgreSQL's synchronous_commit decides
	}
	log.Info("serving", "addr", addr.String(), "db", db.Redact(cfg.DBPath), "store", storeKind, "default_tier", cfg.DefaultTier, "sync", syncMode,
		"tls", useTLS, "api_token", cfg.APIToken != "", "fail_open", cfg.FailOpen, "trust_client_tier", cfg.TrustClientTier,
		"gomaxprocs", runtime.GOMAXPROCS(0)) // replicas sharing a host should split its cores (README)
	if gw := cfg.Gateway; gw != nil {
		names := make([]string, len(gw.Upstreams))
		for i, up := range gw.Upstreams {
			names[i] = up.Name
			fmt.Fprintf(stdout, "gateway: %s/llm/%s forwards to %s (%s)\n", url, up.Name, up.BaseURL.Redacted(), up.Protocol)
		}
		log.Info("gateway", "upstreams", strings.Join(names, ","), "passthrough", gw.Passthrough,
			"max_output", gw.MaxOutput, "drain", gw.Drain, "upstream_timeout", gw.UpstreamTimeout, "max_body", gw.MaxBody, "max_retry_wait", gw.MaxRetryWait)
	}
	if cfg.APIToken == "" && !loopback(addr) {
		log.Warn("checks need no API token on an address beyond loopback: anyone who reaches it can spend any user's quota; set -api-token")
	}
	if cfg.TestClock {
		log.Warn("test clock: time moves only through POST /v1/test/clock; this is not a real guard", "now", testClock.Now())
	}
	if cfg.FailOpen {
		log.Warn("fail-open: checks that storage cannot decide are admitted unrecorded")
	}
}

// loopback reports whether addr is a loopback address, reachable only from
// this machine.
func loopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// ---- Configuration: one table of flags, environment variables and defaults ----

// config is the service's configuration: flags over environment variables
// over defaults, each checked before the service starts, so that a mistake
// stops it at once and says what is wrong. Each field is described by its
// setting (see settings).
type config struct {
	Addr, DBPath, AdminToken, APIToken, DefaultTier string
	Sync, LogFormat, MetricsAddr, TLSCert, TLSKey   string
	FailOpen, TrustClientTier, TestClock            bool
	CleanupInterval, CallTimeout, RunIdle           time.Duration
	TrustedProxies                                  []*net.IPNet
	TimeZone                                        *time.Location // of billing periods that name none
	// PostgreSQL's; SQLite ignores them.
	PGPoolSize                        int
	PGStatementTimeout, PGLockTimeout time.Duration
	Gateway                           *gateway.Config // nil: no upstream is named
}

// defaultPGLockTimeout is how long a check waits for its user's lock on
// PostgreSQL by default.
const defaultPGLockTimeout = 5 * time.Second

// settings returns the table of the service's settings, which read into
// cfg and gw; getenv reads the upstreams' keys. Every flag is listed here
// once, with its variable, default and meaning: -h prints this table, and
// a test holds the README's Configuration table to it. A setting's Parse
// sees its value once, whether a flag, a variable or the default gave it.
func settings(cfg *config, gw *gateway.Config, getenv func(string) string) []cli.Setting {
	return []cli.Setting{
		{Flag: "addr", Env: "GUARDRAIL_ADDR", Default: "127.0.0.1:8080", Hint: "ADDR", Usage: "listen address", Parse: cli.SetString(&cfg.Addr)},
		{Flag: "db", Env: "GUARDRAIL_DB", Default: "guardrail.db", Hint: "FILE|URL",
			Usage: "the database: a SQLite file, created if missing, or a PostgreSQL URL (postgres://user:password@host:5432/name)",
			Parse: cli.SetNonEmpty(&cfg.DBPath, "-db names no database")},
		{Flag: "admin-token", Env: "GUARDRAIL_ADMIN_TOKEN", Hint: "TOKEN", Usage: "bearer token for the admin API; empty generates one and prints it",
			Parse: cli.SetToken(&cfg.AdminToken, "admin token (-admin-token, GUARDRAIL_ADMIN_TOKEN)")},
		{Flag: "api-token", Env: "GUARDRAIL_API_TOKEN", Hint: "TOKEN", Usage: "bearer token every POST /v1/check and call route (/v1/calls/...) must carry; empty leaves them open",
			Parse: cli.SetToken(&cfg.APIToken, "API token (-api-token, GUARDRAIL_API_TOKEN)")},
		{Flag: "default-tier", Env: "GUARDRAIL_DEFAULT_TIER", Default: policy.DefaultTierName, Hint: "NAME", Usage: "tier of requests that name none", Parse: cli.SetString(&cfg.DefaultTier)},
		{Flag: "trust-client-tier", Env: "GUARDRAIL_TRUST_CLIENT_TIER", Default: "true", Kind: cli.Bool, Parse: cli.SetBool(&cfg.TrustClientTier),
			Usage: "decide a check under the context.user_tier it names when its user has no assigned tier; false uses the default tier"},
		{Flag: "time-zone", Env: "GUARDRAIL_TIME_ZONE", Default: "UTC", Hint: "ZONE",
			Usage: "IANA time zone of the billing periods of users and accounts that set none, such as Europe/Berlin", Parse: func(v string) (err error) {
				cfg.TimeZone, err = policy.LoadTimeZone(v)
				return cli.Check(err == nil, "time zone %q: not a known IANA time zone name such as Europe/Berlin or UTC (-time-zone, GUARDRAIL_TIME_ZONE)", v)
			}},
		{Flag: "sync", Env: "GUARDRAIL_SYNC", Default: db.SyncFull, Hint: "MODE", Usage: "SQLite synchronous mode: FULL survives power loss, NORMAL only a process crash", Parse: cli.SetString(&cfg.Sync)},
		{Flag: "fail-open", Env: "GUARDRAIL_FAIL_OPEN", Default: "false", Kind: cli.Bool, Parse: cli.SetBool(&cfg.FailOpen),
			Usage: "admit checks when storage fails instead of refusing them with 503; each is counted and logged"},
		{Flag: "call-timeout", Env: "GUARDRAIL_CALL_TIMEOUT", Default: policy.DefaultCallTimeout.String(), Hint: "DURATION",
			Usage: "how long a metered call stays open without a finish or keepalive before the service finishes it with its reserved tokens",
			Parse: cli.SetDuration(&cfg.CallTimeout, 1, "call timeout %q: must be a positive duration such as 10m or 90s (-call-timeout, GUARDRAIL_CALL_TIMEOUT)")},
		{Flag: "run-idle", Env: "GUARDRAIL_RUN_IDLE", Default: policy.DefaultRunIdle.String(), Hint: "DURATION",
			Usage: "how long an agent run may go without a request before it expires, refused for good", Parse: cli.SetDuration(&cfg.RunIdle, 1, "run idle %q: must be a positive duration such as 1h or 30m (-run-idle, GUARDRAIL_RUN_IDLE)")},
		{Flag: "cleanup-interval", Env: "GUARDRAIL_CLEANUP_INTERVAL", Default: "1m", Hint: "DURATION",
			Usage: "how often rows older than 25 hours (a day and an hour's slack for clock steps) are deleted",
			Parse: cli.SetDuration(&cfg.CleanupInterval, 1, "cleanup interval %q: must be a positive duration such as 1m or 30s")},
		{Flag: "log-format", Env: "GUARDRAIL_LOG_FORMAT", Default: "text", Hint: "FORMAT", Usage: "log format: text or json", Parse: func(v string) error {
			cfg.LogFormat = v
			return cli.Check(v == "text" || v == "json", "log format %q: must be text or json", v)
		}},
		{Flag: "metrics-addr", Env: "GUARDRAIL_METRICS_ADDR", Hint: "ADDR", Usage: "serve GET /metrics on this address instead of the API's", Parse: cli.SetString(&cfg.MetricsAddr)},
		{Flag: "tls-cert", Env: "GUARDRAIL_TLS_CERT", Hint: "FILE", Usage: "serve HTTPS with this PEM certificate (chain); needs -tls-key", Parse: cli.SetString(&cfg.TLSCert)},
		{Flag: "tls-key", Env: "GUARDRAIL_TLS_KEY", Hint: "FILE", Usage: "PEM private key of -tls-cert", Parse: cli.SetString(&cfg.TLSKey)},
		{Flag: "trusted-proxies", Env: "GUARDRAIL_TRUSTED_PROXIES", Hint: "LIST",
			Usage: "comma-separated addresses or CIDR ranges of reverse proxies whose X-Forwarded-For names the client",
			Parse: func(v string) (err error) { cfg.TrustedProxies, err = cli.ParseProxies(v); return err }},
		{Flag: "pg-pool-size", Env: "GUARDRAIL_PG_POOL_SIZE", Default: strconv.Itoa(db.DefaultPoolSize), Hint: "N",
			Usage: "PostgreSQL only: connections the service opens at most; a batch of checks holds one while it records",
			Parse: cli.SetInt(&cfg.PGPoolSize, 1, "pool size %q: must be a whole number of at least 1 (-pg-pool-size, GUARDRAIL_PG_POOL_SIZE)")},
		{Flag: "pg-statement-timeout", Env: "GUARDRAIL_PG_STATEMENT_TIMEOUT", Default: db.DefaultStatementTimeout.String(), Hint: "DURATION",
			Usage: "PostgreSQL only: how long one statement may run before it fails, and its check with 503",
			Parse: cli.SetDuration(&cfg.PGStatementTimeout, time.Millisecond, "statement timeout %q: must be a duration of at least 1ms such as 5s or 500ms (-pg-statement-timeout, GUARDRAIL_PG_STATEMENT_TIMEOUT)")},
		{Flag: "pg-lock-timeout", Env: "GUARDRAIL_PG_LOCK_TIMEOUT", Default: defaultPGLockTimeout.String(), Hint: "DURATION",
			Usage: "PostgreSQL only: how long a check waits for the lock of its user, which another replica's check of the same user holds, before it fails with 503",
			Parse: cli.SetDuration(&cfg.PGLockTimeout, time.Millisecond, "lock timeout %q: must be a duration of at least 1ms such as 5s or 500ms (-pg-lock-timeout, GUARDRAIL_PG_LOCK_TIMEOUT)")},
		{Flag: "upstream", Env: "GUARDRAIL_UPSTREAMS", Kind: cli.List, Hint: "NAME=PROTOCOL:URL",
			Usage: "a model API the gateway forwards to, with PROTOCOL openai or anthropic, served at /llm/NAME; repeatable; its key is read from GUARDRAIL_UPSTREAM_KEY_<NAME>",
			Parse: func(v string) error { return cli.AddUpstream(gw, v, getenv) }},
		{Flag: "gateway-passthrough", Env: "GUARDRAIL_GATEWAY_PASSTHROUGH", Kind: cli.List, Hint: "PREFIXES",
			Usage: "comma-separated path prefixes, such as /files,/models, of the gateway paths no metered route takes to forward, each counted as a request with no tokens; other paths are a 404, and prefixes of model calls the gateway cannot meter (batches, realtime, ...) are refused",
			Parse: cli.AppendPassthrough(&gw.Passthrough)},
		{Flag: "gateway-max-output", Env: "GUARDRAIL_GATEWAY_MAX_OUTPUT", Default: strconv.Itoa(gateway.DefaultMaxOutput), Hint: "TOKENS",
			Usage: "output tokens the gateway reserves for a call that sets no output cap",
			Parse: cli.SetInt64(&gw.MaxOutput, 1, policy.MaxLimit, fmt.Sprintf("gateway max output %%q: must be a whole number of tokens from 1 to %d (-gateway-max-output, GUARDRAIL_GATEWAY_MAX_OUTPUT)", policy.MaxLimit))},
		{Flag: "gateway-drain", Env: "GUARDRAIL_GATEWAY_DRAIN", Default: gateway.DefaultDrain.String(), Hint: "DURATION",
			Usage: "how long the gateway reads on from an upstream after its client went away, to learn the tokens used; a call whose usage does not come is charged its reservation",
			Parse: cli.SetDuration(&gw.Drain, time.Millisecond, "gateway drain %q: must be a duration of at least 1ms such as 60s or 10m (-gateway-drain, GUARDRAIL_GATEWAY_DRAIN)")},
		{Flag: "upstream-timeout", Env: "GUARDRAIL_UPSTREAM_TIMEOUT", Default: gateway.DefaultUpstreamTimeout.String(), Hint: "DURATION",
			Usage: "how long an exchange with an upstream may last, a streamed answer included",
			Parse: cli.SetDuration(&gw.UpstreamTimeout, time.Millisecond, "upstream timeout %q: must be a duration of at least 1ms such as 60s or 10m (-upstream-timeout, GUARDRAIL_UPSTREAM_TIMEOUT)")},
		{Flag: "gateway-max-body", Env: "GUARDRAIL_GATEWAY_MAX_BODY", Default: strconv.Itoa(gateway.DefaultMaxBody), Hint: "BYTES",
			Usage: "the largest request body the gateway accepts, in bytes (32 MiB by default); larger is a 413",
			Parse: cli.SetInt64(&gw.MaxBody, 1, math.MaxInt64, "gateway max body %q: must be a whole number of bytes of at least 1 (-gateway-max-body, GUARDRAIL_GATEWAY_MAX_BODY)")},
		{Flag: "gateway-body-memory", Env: "GUARDRAIL_GATEWAY_BODY_MEMORY", Default: strconv.Itoa(gateway.DefaultBodyMemory), Hint: "BYTES",
			Usage: "the bytes of gateway request bodies held at once (256 MiB by default); a request that finds no room within 2s is a 503",
			Parse: cli.SetInt64(&gw.BodyMemory, 1, math.MaxInt64, "gateway body memory %q: must be a whole number of bytes of at least 1 (-gateway-body-memory, GUARDRAIL_GATEWAY_BODY_MEMORY)")},
		{Flag: "gateway-max-retry-wait", Env: "GUARDRAIL_GATEWAY_MAX_RETRY_WAIT", Default: gateway.DefaultMaxRetryWait.String(), Hint: "DURATION",
			Usage: "the longest Retry-After the gateway leaves a client's SDK to wait; a refusal with a longer one also carries x-should-retry: false, so the official SDKs raise their rate-limit error at once instead of sleeping",
			Parse: cli.SetDuration(&gw.MaxRetryWait, time.Second, "gateway max retry wait %q: must be a duration of at least 1s such as 60s or 5m (-gateway-max-retry-wait, GUARDRAIL_GATEWAY_MAX_RETRY_WAIT)")},
		{Flag: "test-clock", Env: "GUARDRAIL_TEST_CLOCK", Default: "false", Kind: cli.Bool, Parse: cli.SetBool(&cfg.TestClock),
			Usage: "for tests: run on a clock that moves only through POST /v1/test/clock; loopback addresses only"},
	}
}

// settingValue returns the value of the setting named flag where no flag
// gives one, for the subcommands, which share -db and -default-tier with
// the service.
func settingValue(flag string, getenv func(string) string) string {
	return cli.Lookup(settings(&config{}, &gateway.Config{}, getenv), flag).Value(getenv)
}

// usage opens the usage message, before the flags: how the program is run,
// and the commands run instead of the service, one a line.
const usage = `Usage:
  policyguard [flags]            run the service
  policyguard COMMAND [args]     run a command and exit

Commands:
  tiers export|import ...
    	write the tiers and user records as a tiers file, or apply one (policyguard tiers -h tells more)
  prices export|import ...
    	write the price table in force as a prices file, or apply one or LiteLLM's (policyguard prices -h tells more)
  admins add -role ROLE NAME
    	make a named admin and print its token (policyguard admins -h tells more)
  backup [-db FILE] BACKUP.db
    	write a consistent copy of the SQLite database while the service runs; never overwrites a file

Flags:`

// parseConfig reads the service's settings from args, and the environment
// through getenv. Usage messages go to stderr; -h returns flag.ErrHelp.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var cfg config
	gw := &gateway.Config{}
	fs := flag.NewFlagSet("policyguard", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := cli.Parse(fs, settings(&cfg, gw, getenv), args, getenv, usage); err != nil {
		return cfg, err
	}
	if cfg.TestClock {
		if err := cli.CheckTestClockAddr(cfg.Addr); err != nil {
			return cfg, err
		}
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return cfg, errors.New("TLS needs both -tls-cert and -tls-key (GUARDRAIL_TLS_CERT, GUARDRAIL_TLS_KEY)")
	}
	if err := gw.Validate(); err != nil {
		return cfg, fmt.Errorf("%w (-gateway-passthrough, GUARDRAIL_GATEWAY_PASSTHROUGH)", err)
	}
	if len(gw.Upstreams) > 0 {
		cfg.Gateway = gw
	}
	return cfg, nil
}

// storeOptions returns the options of db.Open for the configured database.
func (cfg config) storeOptions() []db.Option {
	if db.IsPostgres(cfg.DBPath) {
		return []db.Option{db.WithPoolSize(cfg.PGPoolSize), db.WithStatementTimeout(cfg.PGStatementTimeout),
			db.WithBusyTimeout(cfg.PGLockTimeout)}
	}
	return []db.Option{db.WithSynchronous(cfg.Sync)}
}
