// Command policyguard serves policy-based guardrails for AI agents: per-user
// rate limits over rolling minute, hour and day windows and the features of
// each subscription tier, checked before a request reaches the model.
//
// This file is the command, and all of it: run wires the packages together
// (the store of package db, the policy.Service, the JSON API of package api
// with the admin page of package web mounted on it, the cleanup) and shuts
// them down; below it come the configuration (flags and environment
// variables), the subcommands ("policyguard tiers"), and the log writer
// that batches the access log. Only this package imports every other one.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/policyguard/policyguard/api"
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

// newHTTPServer returns the server for h. Every phase of a connection has a
// deadline, so slow or stalled clients cannot hold connections open.
func newHTTPServer(h http.Handler, tlsCfg *tls.Config, logs slog.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logs, slog.LevelWarn),
	}
}

// run starts the service and blocks until ctx ends, then shuts down
// gracefully: in-flight checks finish and their writes commit. With a
// subcommand's name as its first argument ("tiers", "backup") it runs that command
// instead (see Subcommands below).
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "tiers":
			return runTiers(ctx, args[1:], getenv, stdout, stderr)
		case "backup":
			return runBackup(ctx, args[1:], getenv, stdout, stderr)
		}
	}
	cfg, err := parseConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	tuneGC(getenv)
	logs := newLogWriter(stderr) // a line per request: written out in batches
	defer logs.Close()
	var handler slog.Handler = slog.NewTextHandler(logs, nil)
	if cfg.LogFormat == "json" {
		handler = slog.NewJSONHandler(logs, nil)
	}
	handler = newFlushingHandler(handler, logs)
	log := slog.New(handler)
	tlsCfg, err := cfg.tlsConfig()
	if err != nil {
		return err
	}

	now := time.Now
	var testClock *policy.TestClock
	if cfg.TestClock {
		testClock = policy.NewTestClock(time.Now())
		now = testClock.Now
	}
	store, err := db.Open(ctx, cfg.DBPath, append(cfg.storeOptions(), db.WithLogger(log))...)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Writable(ctx); err != nil {
		return fmt.Errorf("%s cannot be written: %s", db.Redact(cfg.DBPath), policy.ErrorMessage(err))
	}

	metrics := api.NewMetrics(nil)
	tiers, requests := metrics.MeterStorage(store, store)
	svc := policy.NewService(tiers, requests, policy.WithDefaultTier(cfg.DefaultTier), policy.WithClock(now),
		policy.WithCallTimeout(cfg.CallTimeout), policy.WithStats(store, store),
		policy.WithUsers(store), policy.WithTrustClientTier(cfg.TrustClientTier), policy.WithReplays(store),
		policy.WithKeys(store))
	metrics.SetCallsInFlight(func(ctx context.Context) (int64, error) {
		byTier, err := svc.CallsInFlight(ctx)
		var n int64
		for _, c := range byTier {
			n += c
		}
		return n, err
	})
	if _, err := store.Tier(ctx, cfg.DefaultTier); err != nil {
		return fmt.Errorf("default tier %q does not exist in %s", cfg.DefaultTier, db.Redact(cfg.DBPath))
	}
	if cfg.AdminToken == "" {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		cfg.AdminToken = hex.EncodeToString(b)
		fmt.Fprintf(stdout, "admin token (generated; set -admin-token or GUARDRAIL_ADMIN_TOKEN to choose one): %s\n", cfg.AdminToken)
	}

	// The JSON API and the admin page check the admin token through one
	// gate, so that a wrong token counts wherever it is sent.
	gate := policy.NewAdminGate(cfg.AdminToken)
	admin := web.NewAdmin(web.Config{Service: svc, Gate: gate, TierJSON: api.TierJSON, Logger: log, Sessions: store})
	srv := newHTTPServer(api.NewServer(api.Config{
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
		// Metrics on their own address can stay inside the network while
		// the API faces clients.
		mln, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", metrics.Handler())
		msrv := newHTTPServer(mux, nil, handler) // the same deadlines as the API's
		go func() {
			if err := msrv.Serve(mln); !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server failed", "err", err)
			}
		}()
		defer msrv.Close()
		fmt.Fprintf(stdout, "metrics on http://%s/metrics\n", mln.Addr())
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	if cfg.TestClock && !loopback(ln.Addr()) { // localhost resolved beyond loopback
		ln.Close()
		return fmt.Errorf("-test-clock: %s is not a loopback address", ln.Addr())
	}
	url := "http://" + ln.Addr().String()
	if tlsCfg != nil {
		url = "https://" + ln.Addr().String()
	}
	fmt.Fprintf(stdout, "policyguard listening on %s (database %s)\n", url, db.Redact(cfg.DBPath))
	syncMode := strings.ToUpper(cfg.Sync)
	if db.IsPostgres(cfg.DBPath) {
		syncMode = "server" // PostgreSQL's synchronous_commit decides
	}
	log.Info("serving", "addr", ln.Addr().String(), "db", db.Redact(cfg.DBPath), "store", store.Kind(), "default_tier", cfg.DefaultTier, "sync", syncMode,
		"tls", tlsCfg != nil, "api_token", cfg.APIToken != "", "fail_open", cfg.FailOpen, "trust_client_tier", cfg.TrustClientTier,
		"gomaxprocs", runtime.GOMAXPROCS(0)) // replicas sharing a host should split its cores (README)
	if cfg.Gateway != nil {
		names := make([]string, len(cfg.Gateway.Upstreams))
		for i, up := range cfg.Gateway.Upstreams {
			names[i] = up.Name
			fmt.Fprintf(stdout, "gateway: %s/llm/%s forwards to %s (%s)\n", url, up.Name, up.BaseURL.Redacted(), up.Protocol)
		}
		log.Info("gateway", "upstreams", strings.Join(names, ","), "passthrough", cfg.Gateway.Passthrough,
			"max_output", cfg.Gateway.MaxOutput, "drain", cfg.Gateway.Drain, "upstream_timeout", cfg.Gateway.UpstreamTimeout, "max_body", cfg.Gateway.MaxBody)
	}
	if cfg.APIToken == "" && !loopback(ln.Addr()) {
		log.Warn("checks need no API token on an address beyond loopback: anyone who reaches it can spend any user's quota; set -api-token")
	}
	if cfg.TestClock {
		log.Warn("test clock: time moves only through POST /v1/test/clock; this is not a real guard", "now", testClock.Now())
	}
	if cfg.FailOpen {
		log.Warn("fail-open: checks that storage cannot decide are admitted unrecorded")
	}

	bg, stopBG := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		store.PruneEvery(bg, cfg.CleanupInterval, policy.KeepFor, now, log, metrics.ObserveCleanup)
	}()

	serveErr := make(chan error, 1)
	go func() {
		if tlsCfg != nil {
			serveErr <- srv.ServeTLS(ln, "", "")
		} else {
			serveErr <- srv.Serve(ln)
		}
	}()
	select {
	case err = <-serveErr:
	case <-ctx.Done():
		log.Info("shutting down")
		shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = srv.Shutdown(shutCtx)
		cancel()
	}
	stopBG()
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return errors.Join(err, store.Close())
}

// loopback reports whether addr is a loopback address, reachable only from
// this machine.
func loopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// ---- Configuration: flags, environment variables and their defaults ----

// config is the service's configuration: flags over environment variables
// over defaults, each checked before the service starts, so that a mistake
// stops it at once and says what is wrong.
type config struct {
	Addr string
	// DBPath is the database: a SQLite file, or a postgres:// URL.
	DBPath          string
	AdminToken      string // empty: the service generates one
	DefaultTier     string
	CleanupInterval time.Duration
	Sync            string
	LogFormat       string // text or json
	MetricsAddr     string // empty: metrics are served on Addr
	FailOpen        bool
	// TrustClientTier believes a check's context.user_tier for a user
	// without an assigned tier; false decides it under the default tier.
	TrustClientTier bool
	APIToken        string // empty: checks need no token
	TLSCert         string // empty: plain HTTP
	TLSKey          string
	TrustedProxies  []*net.IPNet
	// TestClock runs the service on a clock that moves only when told
	// (POST /v1/test/clock); loopback addresses only.
	TestClock bool
	// CallTimeout is how long a metered call stays open without a finish
	// or keepalive before the service finishes it with its reservation.
	CallTimeout time.Duration
	// PostgreSQL's connection pool size, statement timeout and lock wait;
	// SQLite ignores them.
	PGPoolSize         int
	PGStatementTimeout time.Duration
	PGLockTimeout      time.Duration
	// Gateway configures /llm/{upstream}/...: nil when no upstream is
	// named.
	Gateway *gateway.Config
}

// storeOptions returns the options of db.Open for the configured database.
func (cfg config) storeOptions() []db.Option {
	if db.IsPostgres(cfg.DBPath) {
		return []db.Option{db.WithPoolSize(cfg.PGPoolSize), db.WithStatementTimeout(cfg.PGStatementTimeout),
			db.WithBusyTimeout(cfg.PGLockTimeout)}
	}
	return []db.Option{db.WithSynchronous(cfg.Sync)}
}

// withDefaults returns a lookup through getenv that gives def for a
// variable that is unset or empty.
func withDefaults(getenv func(string) string) func(key, def string) string {
	return func(key, def string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return def
	}
}

// dbPathFromEnv returns the database used where -db names none:
// GUARDRAIL_DB, or the SQLite file guardrail.db. The tiers commands share
// it with the service.
func dbPathFromEnv(getenv func(string) string) string {
	return withDefaults(getenv)("GUARDRAIL_DB", "guardrail.db")
}

// dbUsage describes -db, for the service and the tiers commands.
const dbUsage = "database: a SQLite file, created if missing, or a PostgreSQL URL (postgres://user:password@host:5432/name) (GUARDRAIL_DB, default guardrail.db)"

// defaultPGLockTimeout is how long a check waits for its user's lock on
// PostgreSQL by default.
const defaultPGLockTimeout = 5 * time.Second

// defaultTierFromEnv returns the default tier used where -default-tier
// names none: GUARDRAIL_DEFAULT_TIER, or policy.DefaultTierName. The tiers
// commands share it with the service.
func defaultTierFromEnv(getenv func(string) string) string {
	return withDefaults(getenv)("GUARDRAIL_DEFAULT_TIER", policy.DefaultTierName)
}

// parseConfig reads the service's flags from args, and the environment
// through getenv. Usage messages go to stderr; -h returns flag.ErrHelp.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	env := withDefaults(getenv)
	var cfg config
	fs := flag.NewFlagSet("policyguard", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, usage)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.Addr, "addr", env("GUARDRAIL_ADDR", "127.0.0.1:8080"), "listen address (GUARDRAIL_ADDR)")
	// Secrets and booleans take their variables after parsing, not as flag
	// defaults: a usage message (-h, a mistyped flag) prints every default,
	// and would print the tokens, or a database URL's password, into
	// whatever log catches stderr.
	fs.StringVar(&cfg.DBPath, "db", "", dbUsage)
	fs.StringVar(&cfg.AdminToken, "admin-token", "", "bearer token for the admin API; empty generates one and prints it (GUARDRAIL_ADMIN_TOKEN)")
	fs.StringVar(&cfg.DefaultTier, "default-tier", defaultTierFromEnv(getenv), "tier of requests that name none (GUARDRAIL_DEFAULT_TIER)")
	fs.StringVar(&cfg.Sync, "sync", env("GUARDRAIL_SYNC", db.SyncFull), "SQLite synchronous mode: FULL survives power loss, NORMAL only a process crash (GUARDRAIL_SYNC)")
	fs.StringVar(&cfg.LogFormat, "log-format", env("GUARDRAIL_LOG_FORMAT", "text"), "log format: text or json (GUARDRAIL_LOG_FORMAT)")
	fs.StringVar(&cfg.MetricsAddr, "metrics-addr", env("GUARDRAIL_METRICS_ADDR", ""), "serve GET /metrics on this address instead of the API's (GUARDRAIL_METRICS_ADDR)")
	fs.BoolVar(&cfg.FailOpen, "fail-open", false, "admit checks when storage fails instead of refusing them with 503; each is counted and logged (GUARDRAIL_FAIL_OPEN)")
	fs.BoolVar(&cfg.TrustClientTier, "trust-client-tier", true, "decide a check under the context.user_tier it names when its user has no assigned tier; false uses the default tier (GUARDRAIL_TRUST_CLIENT_TIER)")
	fs.StringVar(&cfg.APIToken, "api-token", "", "bearer token every POST /v1/check and call route (/v1/calls/...) must carry; empty leaves them open (GUARDRAIL_API_TOKEN)")
	fs.StringVar(&cfg.TLSCert, "tls-cert", env("GUARDRAIL_TLS_CERT", ""), "serve HTTPS with this PEM certificate (chain); needs -tls-key (GUARDRAIL_TLS_CERT)")
	fs.StringVar(&cfg.TLSKey, "tls-key", env("GUARDRAIL_TLS_KEY", ""), "PEM private key of -tls-cert (GUARDRAIL_TLS_KEY)")
	fs.BoolVar(&cfg.TestClock, "test-clock", false, "for tests: run on a clock that moves only through POST /v1/test/clock; loopback addresses only (GUARDRAIL_TEST_CLOCK)")
	proxies := env("GUARDRAIL_TRUSTED_PROXIES", "")
	fs.Func("trusted-proxies", "comma-separated addresses or CIDR ranges of reverse proxies whose X-Forwarded-For names the client (GUARDRAIL_TRUSTED_PROXIES, default none)", func(s string) error {
		proxies = s
		return nil
	})
	interval := env("GUARDRAIL_CLEANUP_INTERVAL", "1m")
	fs.Func("cleanup-interval", "how often rows older than 25 hours (a day and an hour's slack for clock steps) are deleted (GUARDRAIL_CLEANUP_INTERVAL, default 1m)", func(s string) error {
		interval = s
		return nil
	})
	callTimeout := env("GUARDRAIL_CALL_TIMEOUT", policy.DefaultCallTimeout.String())
	fs.Func("call-timeout", "how long a metered call stays open without a finish or keepalive before the service finishes it with its reserved tokens (GUARDRAIL_CALL_TIMEOUT, default 10m)", func(s string) error {
		callTimeout = s
		return nil
	})
	poolSize := env("GUARDRAIL_PG_POOL_SIZE", strconv.Itoa(db.DefaultPoolSize))
	fs.Func("pg-pool-size", fmt.Sprintf("PostgreSQL only: connections the service opens at most; a batch of checks holds one while it records (GUARDRAIL_PG_POOL_SIZE, default %d)", db.DefaultPoolSize), func(s string) error {
		poolSize = s
		return nil
	})
	stmtTimeout := env("GUARDRAIL_PG_STATEMENT_TIMEOUT", db.DefaultStatementTimeout.String())
	fs.Func("pg-statement-timeout", fmt.Sprintf("PostgreSQL only: how long one statement may run before it fails, and its check with 503 (GUARDRAIL_PG_STATEMENT_TIMEOUT, default %v)", db.DefaultStatementTimeout), func(s string) error {
		stmtTimeout = s
		return nil
	})
	lockTimeout := env("GUARDRAIL_PG_LOCK_TIMEOUT", defaultPGLockTimeout.String())
	fs.Func("pg-lock-timeout", fmt.Sprintf("PostgreSQL only: how long a check waits for the lock of its user, which another replica's check of the same user holds, before it fails with 503 (GUARDRAIL_PG_LOCK_TIMEOUT, default %v)", defaultPGLockTimeout), func(s string) error {
		lockTimeout = s
		return nil
	})
	var upstreams []string
	fs.Func("upstream", "a model API the gateway forwards to, NAME=PROTOCOL:URL with PROTOCOL openai or anthropic, served at /llm/NAME; repeatable; its key is read from GUARDRAIL_UPSTREAM_KEY_<NAME> (GUARDRAIL_UPSTREAMS, comma-separated)", func(s string) error {
		upstreams = append(upstreams, s)
		return nil
	})
	// Gateway body memory: an entry for the configuration table.
	bodyMemory := env("GUARDRAIL_GATEWAY_BODY_MEMORY", strconv.Itoa(gateway.DefaultBodyMemory))
	fs.StringVar(&bodyMemory, "gateway-body-memory", bodyMemory, fmt.Sprintf("the bytes of gateway request bodies held at once; a request that finds no room within 2s is a 503 (GUARDRAIL_GATEWAY_BODY_MEMORY, default %d, 256 MiB)", gateway.DefaultBodyMemory))
	// Gateway passthrough: an entry for the configuration table.
	passthrough := env("GUARDRAIL_GATEWAY_PASSTHROUGH", "")
	fs.StringVar(&passthrough, "gateway-passthrough", passthrough, "comma-separated path prefixes, such as /files,/models, whose other gateway paths are forwarded, each counted as a request with no tokens; prefixes of model calls the gateway cannot meter (batches, realtime, ...) are refused; other paths are a 404 (GUARDRAIL_GATEWAY_PASSTHROUGH)")
	maxOutput := env("GUARDRAIL_GATEWAY_MAX_OUTPUT", strconv.Itoa(gateway.DefaultMaxOutput))
	fs.Func("gateway-max-output", fmt.Sprintf("output tokens the gateway reserves for a call that sets no output cap (GUARDRAIL_GATEWAY_MAX_OUTPUT, default %d)", gateway.DefaultMaxOutput), func(s string) error {
		maxOutput = s
		return nil
	})
	drain := env("GUARDRAIL_GATEWAY_DRAIN", gateway.DefaultDrain.String())
	fs.Func("gateway-drain", fmt.Sprintf("how long the gateway reads on from an upstream after its client went away, to learn the tokens used; a call whose usage does not come is charged its reservation (GUARDRAIL_GATEWAY_DRAIN, default %v)", gateway.DefaultDrain), func(s string) error {
		drain = s
		return nil
	})
	upstreamTimeout := env("GUARDRAIL_UPSTREAM_TIMEOUT", gateway.DefaultUpstreamTimeout.String())
	fs.Func("upstream-timeout", fmt.Sprintf("how long an exchange with an upstream may last, a streamed answer included (GUARDRAIL_UPSTREAM_TIMEOUT, default %v)", gateway.DefaultUpstreamTimeout), func(s string) error {
		upstreamTimeout = s
		return nil
	})
	maxBody := env("GUARDRAIL_GATEWAY_MAX_BODY", strconv.Itoa(gateway.DefaultMaxBody))
	fs.Func("gateway-max-body", fmt.Sprintf("the largest request body the gateway accepts, in bytes; larger is a 413 (GUARDRAIL_GATEWAY_MAX_BODY, default %d, 32 MiB)", gateway.DefaultMaxBody), func(s string) error {
		maxBody = s
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["db"] {
		cfg.DBPath = dbPathFromEnv(getenv)
	}
	if cfg.DBPath == "" {
		return cfg, errors.New("-db names no database")
	}
	if n, err := strconv.Atoi(poolSize); err != nil || n < 1 {
		return cfg, fmt.Errorf("pool size %q: must be a whole number of at least 1 (-pg-pool-size, GUARDRAIL_PG_POOL_SIZE)", poolSize)
	} else {
		cfg.PGPoolSize = n
	}
	for _, d := range []struct {
		name, flag, value string
		to                *time.Duration
	}{
		{"statement timeout", "-pg-statement-timeout, GUARDRAIL_PG_STATEMENT_TIMEOUT", stmtTimeout, &cfg.PGStatementTimeout},
		{"lock timeout", "-pg-lock-timeout, GUARDRAIL_PG_LOCK_TIMEOUT", lockTimeout, &cfg.PGLockTimeout},
	} {
		v, err := time.ParseDuration(d.value)
		if err != nil || v < time.Millisecond {
			return cfg, fmt.Errorf("%s %q: must be a duration of at least 1ms such as 5s or 500ms (%s)", d.name, d.value, d.flag)
		}
		*d.to = v
	}
	if !set["admin-token"] {
		cfg.AdminToken = getenv("GUARDRAIL_ADMIN_TOKEN")
	}
	if !set["api-token"] {
		cfg.APIToken = getenv("GUARDRAIL_API_TOKEN")
	}
	if v := getenv("GUARDRAIL_FAIL_OPEN"); v != "" && !set["fail-open"] {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return cfg, fmt.Errorf("GUARDRAIL_FAIL_OPEN %q: must be true or false", v)
		}
		cfg.FailOpen = b
	}
	if v := getenv("GUARDRAIL_TRUST_CLIENT_TIER"); v != "" && !set["trust-client-tier"] {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return cfg, fmt.Errorf("GUARDRAIL_TRUST_CLIENT_TIER %q: must be true or false", v)
		}
		cfg.TrustClientTier = b
	}
	if v := getenv("GUARDRAIL_TEST_CLOCK"); v != "" && !set["test-clock"] {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return cfg, fmt.Errorf("GUARDRAIL_TEST_CLOCK %q: must be true or false", v)
		}
		cfg.TestClock = b
	}
	if cfg.TestClock {
		if err := checkTestClockAddr(cfg.Addr); err != nil {
			return cfg, err
		}
	}
	for _, tok := range []struct{ name, value string }{
		{"admin token (-admin-token, GUARDRAIL_ADMIN_TOKEN)", cfg.AdminToken},
		{"API token (-api-token, GUARDRAIL_API_TOKEN)", cfg.APIToken},
	} {
		if err := checkToken(tok.value); err != nil {
			return cfg, fmt.Errorf("%s %w", tok.name, err)
		}
	}
	d, err := time.ParseDuration(interval)
	if err != nil || d <= 0 {
		return cfg, fmt.Errorf("cleanup interval %q: must be a positive duration such as 1m or 30s", interval)
	}
	cfg.CleanupInterval = d
	if cfg.CallTimeout, err = time.ParseDuration(callTimeout); err != nil || cfg.CallTimeout <= 0 {
		return cfg, fmt.Errorf("call timeout %q: must be a positive duration such as 10m or 90s (-call-timeout, GUARDRAIL_CALL_TIMEOUT)", callTimeout)
	}
	if cfg.TrustedProxies, err = parseProxies(proxies); err != nil {
		return cfg, err
	}
	if cfg.LogFormat != "text" && cfg.LogFormat != "json" {
		return cfg, fmt.Errorf("log format %q: must be text or json", cfg.LogFormat)
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return cfg, errors.New("TLS needs both -tls-cert and -tls-key (GUARDRAIL_TLS_CERT, GUARDRAIL_TLS_KEY)")
	}
	if !set["upstream"] {
		upstreams = strings.Split(getenv("GUARDRAIL_UPSTREAMS"), ",")
	}
	gw := &gateway.Config{}
	for _, prefix := range strings.Split(passthrough, ",") {
		if prefix = strings.TrimSpace(prefix); prefix != "" {
			gw.Passthrough = append(gw.Passthrough, prefix)
		}
	}
	if gw.MaxOutput, err = strconv.ParseInt(maxOutput, 10, 64); err != nil || gw.MaxOutput < 1 || gw.MaxOutput > policy.MaxLimit {
		return cfg, fmt.Errorf("gateway max output %q: must be a whole number of tokens from 1 to %d (-gateway-max-output, GUARDRAIL_GATEWAY_MAX_OUTPUT)", maxOutput, policy.MaxLimit)
	}
	if gw.BodyMemory, err = strconv.ParseInt(bodyMemory, 10, 64); err != nil || gw.BodyMemory < 1 {
		return cfg, fmt.Errorf("gateway body memory %q: must be a whole number of bytes of at least 1 (-gateway-body-memory, GUARDRAIL_GATEWAY_BODY_MEMORY)", bodyMemory)
	}
	if gw.MaxBody, err = strconv.ParseInt(maxBody, 10, 64); err != nil || gw.MaxBody < 1 {
		return cfg, fmt.Errorf("gateway max body %q: must be a whole number of bytes of at least 1 (-gateway-max-body, GUARDRAIL_GATEWAY_MAX_BODY)", maxBody)
	}
	for _, d := range []struct {
		name, flag, value string
		to                *time.Duration
	}{
		{"gateway drain", "-gateway-drain, GUARDRAIL_GATEWAY_DRAIN", drain, &gw.Drain},
		{"upstream timeout", "-upstream-timeout, GUARDRAIL_UPSTREAM_TIMEOUT", upstreamTimeout, &gw.UpstreamTimeout},
	} {
		v, err := time.ParseDuration(d.value)
		if err != nil || v < time.Millisecond {
			return cfg, fmt.Errorf("%s %q: must be a duration of at least 1ms such as 60s or 10m (%s)", d.name, d.value, d.flag)
		}
		*d.to = v
	}
	for _, spec := range upstreams {
		if spec = strings.TrimSpace(spec); spec == "" {
			continue
		}
		up, err := gateway.ParseUpstream(spec)
		if err != nil {
			return cfg, err
		}
		for _, other := range gw.Upstreams {
			if other.Name == up.Name {
				return cfg, fmt.Errorf("upstream %s is named twice", up.Name)
			}
		}
		variable := upstreamKeyVariable(up.Name)
		if up.Key = getenv(variable); up.Key == "" {
			return cfg, fmt.Errorf("upstream %s has no key: set %s", up.Name, variable)
		}
		if err := checkToken(up.Key); err != nil {
			return cfg, fmt.Errorf("the key in %s %w", variable, err)
		}
		gw.Upstreams = append(gw.Upstreams, up)
	}
	if err := gw.Validate(); err != nil {
		return cfg, fmt.Errorf("%w (-gateway-passthrough, GUARDRAIL_GATEWAY_PASSTHROUGH)", err)
	}
	if len(gw.Upstreams) > 0 {
		cfg.Gateway = gw
	}
	return cfg, nil
}

// upstreamKeyVariable returns the environment variable that holds the key
// of the upstream named name: GUARDRAIL_UPSTREAM_KEY_ and the name in
// upper case, with "-" as "_". A key is read from the environment only,
// never from a flag, which a process listing and a usage message show.
func upstreamKeyVariable(name string) string {
	return "GUARDRAIL_UPSTREAM_KEY_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// parseProxies reads a comma-separated list of addresses and CIDR ranges.
func parseProxies(list string) ([]*net.IPNet, error) {
	var nets []*net.IPNet
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if !strings.Contains(item, "/") {
			ip := net.ParseIP(item)
			if ip == nil {
				return nil, fmt.Errorf("trusted proxy %q: not an IP address or CIDR range", item)
			}
			bits := 128
			if ip4 := ip.To4(); ip4 != nil {
				ip, bits = ip4, 32
			}
			nets = append(nets, &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)})
			continue
		}
		_, n, err := net.ParseCIDR(item)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: not an IP address or CIDR range", item)
		}
		nets = append(nets, n)
	}
	return nets, nil
}

// checkToken refuses a token no client could send back: a bearer token is
// read from its header with the surrounding spaces removed, and a header
// cannot carry control characters. A token pasted with a trailing space or
// newline would otherwise never match, and nothing would say why.
func checkToken(tok string) error {
	if strings.TrimSpace(tok) != tok {
		return errors.New("starts or ends with white space")
	}
	for _, r := range tok {
		if r < 0x20 || r == 0x7f {
			return errors.New("contains a control character")
		}
	}
	return nil
}

// tlsConfig loads the certificate and key, so that a bad pair stops the
// service at start-up rather than at the first client. Without a
// certificate it returns nil: the service speaks plain HTTP.
func (cfg config) tlsConfig() (*tls.Config, error) {
	if cfg.TLSCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s and key %s: %w", cfg.TLSCert, cfg.TLSKey, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// checkTestClockAddr refuses a listen address that is not loopback
// (127.0.0.0/8, ::1 or localhost): a service whose clock anyone with the
// admin token can move must not be mistaken for, or reachable as, a real
// one. An address without a host (":8080") listens on every interface and
// is refused.
func checkTestClockAddr(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-test-clock: listen address %q: %w", addr, err)
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("-test-clock: listen address %q is not loopback: a test clock listens only on 127.0.0.1, ::1 or localhost", addr)
}

// Garbage collection settings of the service, unless GOGC or GOMEMLIMIT
// set others. Its live heap is a few megabytes and every check allocates a
// few kilobytes, so with Go's default (collect when the heap doubles) it
// collects many times a second, about a seventh of its CPU time under
// load. Letting the heap grow to five times the live data before a
// collection costs a few more megabytes; the limit makes collections
// frequent again long before memory would grow past it.
const (
	gcPercent   = 400
	memoryLimit = 64 << 20
)

// tuneGC applies the settings above where the environment, read through
// getenv, sets none.
func tuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
}

// ---- Subcommands ----

// usage opens the usage message, before the flags: how the program is run,
// and the commands run instead of the service, one a line.
const usage = `Usage:
  policyguard [flags]            run the service
  policyguard COMMAND [args]     run a command and exit

Commands:
  tiers export|import ...
    	write the tiers and user records as a tiers file, or apply one (policyguard tiers -h tells more)
  backup [-db FILE] BACKUP.db
    	write a consistent copy of the SQLite database while the service runs; never overwrites a file

Flags:`

const backupUsage = `usage:
  policyguard backup [-db FILE] BACKUP.db
      writes a consistent copy of the SQLite database to BACKUP.db, which
      must not exist, while a service may go on using the database: every
      request, call, tier, user record and audit entry it held when the
      copy began. -db defaults to GUARDRAIL_DB or guardrail.db. A service
      started on the copy has them all. On PostgreSQL, use pg_dump.`

// runBackup runs "policyguard backup" with args, the arguments that follow
// "backup" (see db.Backup).
func runBackup(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("policyguard backup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, backupUsage) }
	dbPath := fs.String("db", "", dbUsage)
	files, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if len(files) != 1 {
		fmt.Fprintln(stderr, backupUsage)
		return errors.New("backup: name one file to write the copy to")
	}
	if *dbPath == "" {
		*dbPath = dbPathFromEnv(getenv)
	}
	if err := db.Backup(ctx, *dbPath, files[0]); err != nil {
		return err
	}
	st, err := os.Stat(files[0])
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "backed up %s to %s (%d bytes)\n", db.Redact(*dbPath), files[0], st.Size())
	return nil
}

// The "policyguard tiers" command: tier limits kept in a file, in a
// repository, applied from a pipeline. "tiers export" writes a database's
// tiers as a tiers file; "tiers import" checks a whole file and applies it
// in one transaction. A subcommand reads -db and GUARDRAIL_DB as the
// service does (dbPathFromEnv, dbUsage); run dispatches on its name.

const tiersUsage = `usage:
  policyguard tiers export [-db FILE|URL]
      writes every tier, account and user record as a tiers file (JSON)
      to stdout
  policyguard tiers import [-db FILE|URL] [-default-tier NAME] [-prune] TIERS.json
      checks the whole file, then creates and updates its tiers, accounts
      and user records in one transaction and reports each change; with
      -prune it also deletes the tiers the file does not list (never the
      default tier, nor one a user record assigns or an account has as its
      plan); no account or record is ever deleted

A running service on the same database applies an import on its next check.
-db defaults to GUARDRAIL_DB or guardrail.db, -default-tier to
GUARDRAIL_DEFAULT_TIER or free.`

// runTiers runs "policyguard tiers export|import" with args, the arguments
// that follow "tiers", reading the environment through getenv: -db and
// -default-tier default to what the service would use (see dbPathFromEnv
// and defaultTierFromEnv).
func runTiers(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, tiersUsage)
		return errors.New("tiers: name a command: export or import")
	}
	cmd := args[0]
	fs := flag.NewFlagSet("policyguard tiers "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, tiersUsage) }
	dbPath := fs.String("db", "", dbUsage)
	var defaultTier *string
	var prune *bool
	switch cmd {
	case "export":
	case "import":
		defaultTier = fs.String("default-tier", defaultTierFromEnv(getenv), "the service's default tier, which -prune keeps (GUARDRAIL_DEFAULT_TIER)")
		prune = fs.Bool("prune", false, "delete the tiers the file does not list")
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, tiersUsage)
		return nil
	default:
		fmt.Fprintln(stderr, tiersUsage)
		return fmt.Errorf("tiers: unknown command %q: want export or import", cmd)
	}
	files, err := parseInterspersed(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if *dbPath == "" {
		*dbPath = dbPathFromEnv(getenv)
	}

	if cmd == "export" {
		if len(files) > 0 {
			return fmt.Errorf("tiers export: unexpected argument %q: the tiers go to stdout", files[0])
		}
		// Exporting from a mistyped path must not create an empty
		// database and export its seeded tiers as if they were real. (A
		// mistyped PostgreSQL database fails to connect.)
		if _, err := os.Stat(*dbPath); err != nil && !db.IsPostgres(*dbPath) {
			return fmt.Errorf("tiers export: %w", err)
		}
		store, err := db.Open(ctx, *dbPath)
		if err != nil {
			return err
		}
		defer store.Close()
		tiers, err := store.Tiers(ctx)
		if err != nil {
			return err
		}
		f := api.TiersFile{Tiers: tiers}
		for after := ""; ; {
			page, err := store.Accounts(ctx, after, 1000)
			if err != nil {
				return err
			}
			f.Accounts = append(f.Accounts, page...)
			if len(page) < 1000 {
				break
			}
			after = page[len(page)-1].AccountID
		}
		for after := ""; ; {
			page, err := store.Users(ctx, after, 1000)
			if err != nil {
				return err
			}
			f.Users = append(f.Users, page...)
			if len(page) < 1000 {
				break
			}
			after = page[len(page)-1].UserID
		}
		if err := f.Write(stdout); err != nil {
			return err
		}
		return store.Close()
	}

	if len(files) != 1 {
		fmt.Fprintln(stderr, tiersUsage)
		return errors.New("tiers import: name exactly one tiers file (- reads stdin)")
	}
	f, err := readTiersFile(files[0])
	if err != nil {
		return err
	}
	store, err := db.Open(ctx, *dbPath)
	if err != nil {
		return err
	}
	defer store.Close()
	svc := policy.NewService(store, store, policy.WithDefaultTier(*defaultTier), policy.WithUsers(store))
	changes, err := svc.Import(ctx, f.Tiers, f.Accounts, f.Users, *prune)
	if err != nil {
		return fmt.Errorf("%s: nothing imported: %s", files[0], policy.ErrorMessage(err))
	}
	for _, c := range changes.Tiers {
		fmt.Fprintln(stdout, api.DescribeTierChange(c))
	}
	for _, c := range changes.Accounts {
		fmt.Fprintln(stdout, api.DescribeAccountChange(c))
	}
	for _, c := range changes.Users {
		fmt.Fprintln(stdout, api.DescribeUserChange(c))
	}
	switch n := changes.Len(); n {
	case 0:
		fmt.Fprintf(stdout, "no changes: %s already has the tiers of %s\n", *dbPath, files[0])
	case 1:
		fmt.Fprintf(stdout, "1 change imported into %s\n", *dbPath)
	default:
		fmt.Fprintf(stdout, "%d changes imported into %s\n", n, *dbPath)
	}
	return store.Close()
}

// readTiersFile reads and checks the tiers file at path, or stdin for "-".
func readTiersFile(path string) (api.TiersFile, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return api.TiersFile{}, err
		}
		defer f.Close()
		r = f
	}
	f, err := api.ReadTiersFileAll(r)
	if err != nil {
		msg := " " + policy.ErrorMessage(err)
		if strings.Contains(msg, "\n") { // one problem a line, indented
			msg = strings.ReplaceAll("\n"+msg[1:], "\n", "\n  ")
		}
		return api.TiersFile{}, fmt.Errorf("%s: nothing imported:%s", path, msg)
	}
	return f, nil
}

// parseInterspersed parses flags wherever they stand among the arguments,
// so that "import tiers.json -prune" works as well as "import -prune
// tiers.json", and returns the other arguments in order. "--" ends the
// flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if n := len(args) - fs.NArg(); n > 0 && args[n-1] == "--" {
			return append(rest, fs.Args()...), nil
		}
		args = fs.Args()
		if len(args) == 0 {
			return rest, nil
		}
		rest = append(rest, args[0])
		args = args[1:]
	}
}

// ---- Log lines in batches ----

// The access log writes a line per request, and written one by one, each
// line cost a system call under the log handler's lock, which every request
// then queued behind.

// logFlushInterval is how long a log line may wait in a logWriter.
const logFlushInterval = 100 * time.Millisecond

// logWriter gathers log lines and writes them out together: at most
// logFlushInterval after the first one waits, at once for a warning or an
// error (see newFlushingHandler), and at Close. It is safe for concurrent
// use.
type logWriter struct {
	mu       sync.Mutex
	w        *bufio.Writer
	pending  bool // a flush is scheduled
	closed   bool
	schedule func(time.Duration, func()) // time.AfterFunc, but for tests
}

// newLogWriter returns a logWriter that writes to w.
func newLogWriter(w io.Writer) *logWriter {
	return &logWriter{
		w:        bufio.NewWriterSize(w, 64<<10),
		schedule: func(d time.Duration, f func()) { time.AfterFunc(d, f) },
	}
}

func (b *logWriter) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.w.Write(p)
	if b.closed { // after Close, every line goes out at once
		if ferr := b.w.Flush(); err == nil {
			err = ferr
		}
		return n, err
	}
	if !b.pending && b.w.Buffered() > 0 {
		b.pending = true
		b.schedule(logFlushInterval, func() { b.Flush() })
	}
	return n, err
}

// Flush writes out what is buffered.
func (b *logWriter) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending = false
	return b.w.Flush()
}

// Close flushes and makes every later write go out at once.
func (b *logWriter) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return b.w.Flush()
}

// newFlushingHandler returns a handler that passes records to h, which
// writes into w, and flushes w after each warning or error, so that those
// are never held back.
func newFlushingHandler(h slog.Handler, w *logWriter) slog.Handler {
	return flushingHandler{h, w}
}

type flushingHandler struct {
	slog.Handler
	buf *logWriter
}

func (h flushingHandler) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Level >= slog.LevelWarn {
		_ = h.buf.Flush()
	}
	return err
}

func (h flushingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return flushingHandler{h.Handler.WithAttrs(attrs), h.buf}
}

func (h flushingHandler) WithGroup(name string) slog.Handler {
	return flushingHandler{h.Handler.WithGroup(name), h.buf}
}
