// Command policyguard serves policy-based guardrails for AI agents: per-user
// rate limits over rolling minute, hour and day windows and the features of
// each subscription tier, checked before a request reaches the model.
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
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "policyguard:", err)
		os.Exit(1)
	}
}

// config is the service's configuration: flags over environment variables
// over defaults.
type config struct {
	addr            string
	dbPath          string
	adminToken      string
	defaultTier     string
	cleanupInterval time.Duration
	sync            string
	logFormat       string
	metricsAddr     string
	failOpen        bool
	apiToken        string
	tlsCert         string
	tlsKey          string
	trustedProxies  []*net.IPNet
	testClock       bool
}

func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	env := func(key, def string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return def
	}
	var cfg config
	fs := flag.NewFlagSet("policyguard", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.addr, "addr", env("GUARDRAIL_ADDR", "127.0.0.1:8080"), "listen address (GUARDRAIL_ADDR)")
	fs.StringVar(&cfg.dbPath, "db", env("GUARDRAIL_DB", "guardrail.db"), "SQLite database file, created if missing (GUARDRAIL_DB)")
	// Secrets and booleans take their variables after parsing, not as flag
	// defaults: a usage message (-h, a mistyped flag) prints every default,
	// and would print the tokens into whatever log catches stderr.
	fs.StringVar(&cfg.adminToken, "admin-token", "", "bearer token for the admin API; empty generates one and prints it (GUARDRAIL_ADMIN_TOKEN)")
	fs.StringVar(&cfg.defaultTier, "default-tier", env("GUARDRAIL_DEFAULT_TIER", policy.DefaultTierName), "tier of requests that name none (GUARDRAIL_DEFAULT_TIER)")
	fs.StringVar(&cfg.sync, "sync", env("GUARDRAIL_SYNC", db.SyncFull), "SQLite synchronous mode: FULL survives power loss, NORMAL only a process crash (GUARDRAIL_SYNC)")
	fs.StringVar(&cfg.logFormat, "log-format", env("GUARDRAIL_LOG_FORMAT", "text"), "log format: text or json (GUARDRAIL_LOG_FORMAT)")
	fs.StringVar(&cfg.metricsAddr, "metrics-addr", env("GUARDRAIL_METRICS_ADDR", ""), "serve GET /metrics on this address instead of the API's (GUARDRAIL_METRICS_ADDR)")
	fs.BoolVar(&cfg.failOpen, "fail-open", false, "admit checks when storage fails instead of refusing them with 503; each is counted and logged (GUARDRAIL_FAIL_OPEN)")
	fs.StringVar(&cfg.apiToken, "api-token", "", "bearer token every POST /v1/check must carry; empty leaves checks open (GUARDRAIL_API_TOKEN)")
	fs.StringVar(&cfg.tlsCert, "tls-cert", env("GUARDRAIL_TLS_CERT", ""), "serve HTTPS with this PEM certificate (chain); needs -tls-key (GUARDRAIL_TLS_CERT)")
	fs.StringVar(&cfg.tlsKey, "tls-key", env("GUARDRAIL_TLS_KEY", ""), "PEM private key of -tls-cert (GUARDRAIL_TLS_KEY)")
	fs.BoolVar(&cfg.testClock, "test-clock", false, "for tests: run on a clock that moves only through POST /v1/test/clock; loopback addresses only (GUARDRAIL_TEST_CLOCK)")
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
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["admin-token"] {
		cfg.adminToken = getenv("GUARDRAIL_ADMIN_TOKEN")
	}
	if !set["api-token"] {
		cfg.apiToken = getenv("GUARDRAIL_API_TOKEN")
	}
	if v := getenv("GUARDRAIL_FAIL_OPEN"); v != "" && !set["fail-open"] {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return cfg, fmt.Errorf("GUARDRAIL_FAIL_OPEN %q: must be true or false", v)
		}
		cfg.failOpen = b
	}
	if v := getenv("GUARDRAIL_TEST_CLOCK"); v != "" && !set["test-clock"] {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return cfg, fmt.Errorf("GUARDRAIL_TEST_CLOCK %q: must be true or false", v)
		}
		cfg.testClock = b
	}
	if cfg.testClock {
		if err := api.CheckTestClockAddr(cfg.addr); err != nil {
			return cfg, err
		}
	}
	for _, tok := range []struct{ name, value string }{
		{"admin token (-admin-token, GUARDRAIL_ADMIN_TOKEN)", cfg.adminToken},
		{"API token (-api-token, GUARDRAIL_API_TOKEN)", cfg.apiToken},
	} {
		if err := checkToken(tok.value); err != nil {
			return cfg, fmt.Errorf("%s %w", tok.name, err)
		}
	}
	d, err := time.ParseDuration(interval)
	if err != nil || d <= 0 {
		return cfg, fmt.Errorf("cleanup interval %q: must be a positive duration such as 1m or 30s", interval)
	}
	cfg.cleanupInterval = d
	if cfg.trustedProxies, err = parseProxies(proxies); err != nil {
		return cfg, err
	}
	if cfg.logFormat != "text" && cfg.logFormat != "json" {
		return cfg, fmt.Errorf("log format %q: must be text or json", cfg.logFormat)
	}
	if (cfg.tlsCert == "") != (cfg.tlsKey == "") {
		return cfg, errors.New("TLS needs both -tls-cert and -tls-key (GUARDRAIL_TLS_CERT, GUARDRAIL_TLS_KEY)")
	}
	return cfg, nil
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

// tlsConfig loads the certificate and key, so that a bad pair stops the
// service at start-up rather than at the first client.
func tlsConfig(certFile, keyFile string) (*tls.Config, error) {
	if certFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s and key %s: %w", certFile, keyFile, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// run starts the service and blocks until ctx ends, then shuts down
// gracefully: in-flight checks finish and their writes commit. With "tiers"
// as its first argument it runs that command instead (see runTiers).
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "tiers" {
		return runTiers(ctx, args[1:], getenv, stdout, stderr)
	}
	cfg, err := parseConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	tuneGC(getenv)
	logs := newLogBuffer(stderr) // a line per request: written out in batches
	defer logs.Close()
	var handler slog.Handler = slog.NewTextHandler(logs, nil)
	if cfg.logFormat == "json" {
		handler = slog.NewJSONHandler(logs, nil)
	}
	handler = flushingHandler{handler, logs}
	log := slog.New(handler)
	tlsCfg, err := tlsConfig(cfg.tlsCert, cfg.tlsKey)
	if err != nil {
		return err
	}

	now := time.Now
	var testClock *api.TestClock
	if cfg.testClock {
		testClock = api.NewTestClock(time.Now())
		now = testClock.Now
	}
	store, err := db.Open(ctx, cfg.dbPath, db.WithSynchronous(cfg.sync), db.WithClock(now))
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Writable(ctx); err != nil {
		return fmt.Errorf("%s cannot be written: %s", cfg.dbPath, policy.ErrorMessage(err))
	}

	metrics := api.NewMetrics(nil)
	tiers, requests := metrics.MeterStorage(store, store)
	svc := policy.NewService(tiers, requests, policy.WithDefaultTier(cfg.defaultTier), policy.WithClock(now))
	if _, err := store.Tier(ctx, cfg.defaultTier); err != nil {
		return fmt.Errorf("default tier %q does not exist in %s", cfg.defaultTier, cfg.dbPath)
	}
	if cfg.adminToken == "" {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		cfg.adminToken = hex.EncodeToString(b)
		fmt.Fprintf(stdout, "admin token (generated; set -admin-token or GUARDRAIL_ADMIN_TOKEN to choose one): %s\n", cfg.adminToken)
	}

	srv := newHTTPServer(api.NewServer(api.Config{
		Service:        svc,
		Health:         store.Ping,
		AdminToken:     cfg.adminToken,
		Logger:         log,
		Metrics:        metrics,
		HideMetrics:    cfg.metricsAddr != "",
		APIToken:       cfg.apiToken,
		FailOpen:       cfg.failOpen,
		TrustedProxies: cfg.trustedProxies,
		TestClock:      testClock,
	}), tlsCfg, handler)
	if cfg.metricsAddr != "" {
		// Metrics on their own address can stay inside the network while
		// the API faces clients.
		mln, err := net.Listen("tcp", cfg.metricsAddr)
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
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	if cfg.testClock && !loopback(ln.Addr()) { // localhost resolved beyond loopback
		ln.Close()
		return fmt.Errorf("-test-clock: %s is not a loopback address", ln.Addr())
	}
	url := "http://" + ln.Addr().String()
	if tlsCfg != nil {
		url = "https://" + ln.Addr().String()
	}
	fmt.Fprintf(stdout, "policyguard listening on %s (database %s)\n", url, cfg.dbPath)
	log.Info("serving", "addr", ln.Addr().String(), "db", cfg.dbPath, "default_tier", cfg.defaultTier, "sync", strings.ToUpper(cfg.sync),
		"tls", tlsCfg != nil, "api_token", cfg.apiToken != "", "fail_open", cfg.failOpen)
	if cfg.apiToken == "" && !loopback(ln.Addr()) {
		log.Warn("checks need no API token on an address beyond loopback: anyone who reaches it can spend any user's quota; set -api-token")
	}
	if cfg.testClock {
		log.Warn("test clock: time moves only through POST /v1/test/clock; this is not a real guard", "now", testClock.Now())
	}
	if cfg.failOpen {
		log.Warn("fail-open: checks that storage cannot decide are admitted unrecorded")
	}

	bg, stopBG := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		store.PruneEvery(bg, cfg.cleanupInterval, policy.KeepFor, now, log, metrics.ObserveCleanup)
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

const tiersUsage = `usage:
  policyguard tiers export [-db FILE]
      writes every tier as a tiers file (JSON) to stdout
  policyguard tiers import [-db FILE] [-default-tier NAME] [-prune] TIERS.json
      checks the whole file, then creates and updates its tiers in one
      transaction and reports each change; with -prune it also deletes the
      tiers the file does not list (never the default tier)

A running service on the same database applies an import on its next check.
-db defaults to GUARDRAIL_DB or guardrail.db, -default-tier to
GUARDRAIL_DEFAULT_TIER or free.`

// runTiers runs "policyguard tiers export|import": tier limits kept in a
// file, in a repository, applied from a pipeline.
func runTiers(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, tiersUsage)
		return errors.New("tiers: name a command: export or import")
	}
	env := func(key, def string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return def
	}
	cmd := args[0]
	fs := flag.NewFlagSet("policyguard tiers "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, tiersUsage) }
	dbPath := fs.String("db", env("GUARDRAIL_DB", "guardrail.db"), "SQLite database file (GUARDRAIL_DB)")
	var defaultTier *string
	var prune *bool
	switch cmd {
	case "export":
	case "import":
		defaultTier = fs.String("default-tier", env("GUARDRAIL_DEFAULT_TIER", policy.DefaultTierName), "the service's default tier, which -prune keeps (GUARDRAIL_DEFAULT_TIER)")
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

	if cmd == "export" {
		if len(files) > 0 {
			return fmt.Errorf("tiers export: unexpected argument %q: the tiers go to stdout", files[0])
		}
		// Exporting from a mistyped path must not create an empty
		// database and export its seeded tiers as if they were real.
		if _, err := os.Stat(*dbPath); err != nil {
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
		if err := api.WriteTiersFile(stdout, tiers); err != nil {
			return err
		}
		return store.Close()
	}

	if len(files) != 1 {
		fmt.Fprintln(stderr, tiersUsage)
		return errors.New("tiers import: name exactly one tiers file (- reads stdin)")
	}
	tiers, err := readTiersFile(files[0])
	if err != nil {
		return err
	}
	store, err := db.Open(ctx, *dbPath)
	if err != nil {
		return err
	}
	defer store.Close()
	svc := policy.NewService(store, store, policy.WithDefaultTier(*defaultTier))
	changes, err := svc.ImportTiers(ctx, tiers, *prune)
	if err != nil {
		return fmt.Errorf("%s: nothing imported: %s", files[0], policy.ErrorMessage(err))
	}
	for _, c := range changes {
		fmt.Fprintln(stdout, api.DescribeTierChange(c))
	}
	switch n := len(changes); n {
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
func readTiersFile(path string) ([]policy.Tier, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	tiers, err := api.ReadTiersFile(r)
	if err != nil {
		msg := " " + policy.ErrorMessage(err)
		if strings.Contains(msg, "\n") { // one problem a line, indented
			msg = strings.ReplaceAll("\n"+msg[1:], "\n", "\n  ")
		}
		return nil, fmt.Errorf("%s: nothing imported:%s", path, msg)
	}
	return tiers, nil
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

// logFlushInterval is how long a log line may wait in the buffer.
const logFlushInterval = 100 * time.Millisecond

// logBuffer gathers log lines and writes them out together: at most
// logFlushInterval after the first one waits, at once for a warning or an
// error (see flushingHandler), and at Close. The access log writes a line
// per request; written one by one, each line cost a system call under the
// handler's lock, which every request then queued behind. It is safe for
// concurrent use.
type logBuffer struct {
	mu       sync.Mutex
	w        *bufio.Writer
	pending  bool // a flush is scheduled
	closed   bool
	schedule func(time.Duration, func()) // time.AfterFunc, but for tests
}

func newLogBuffer(w io.Writer) *logBuffer {
	return &logBuffer{
		w:        bufio.NewWriterSize(w, 64<<10),
		schedule: func(d time.Duration, f func()) { time.AfterFunc(d, f) },
	}
}

func (b *logBuffer) Write(p []byte) (int, error) {
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
func (b *logBuffer) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending = false
	return b.w.Flush()
}

// Close flushes and makes every later write go out at once.
func (b *logBuffer) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return b.w.Flush()
}

// flushingHandler passes records to a handler that writes into a
// logBuffer, and flushes the buffer after each warning or error, so that
// those are never held back.
type flushingHandler struct {
	slog.Handler
	buf *logBuffer
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

// tuneGC applies the settings above where the environment sets none.
func tuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
}
