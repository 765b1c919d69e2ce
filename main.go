// Command policyguard serves policy-based guardrails for AI agents: per-user
// rate limits over rolling minute, hour and day windows and the features of
// each subscription tier, checked before a request reaches the model.
package main

import (
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
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/api/config"
	"github.com/policyguard/policyguard/api/logbatch"
	"github.com/policyguard/policyguard/api/tierscmd"
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
// gracefully: in-flight checks finish and their writes commit. With "tiers"
// as its first argument it runs that command instead (see tierscmd.Run).
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "tiers" {
		return tierscmd.Run(ctx, args[1:], getenv, stdout, stderr)
	}
	cfg, err := config.Parse(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	config.TuneGC(getenv)
	logs := logbatch.NewWriter(stderr) // a line per request: written out in batches
	defer logs.Close()
	var handler slog.Handler = slog.NewTextHandler(logs, nil)
	if cfg.LogFormat == "json" {
		handler = slog.NewJSONHandler(logs, nil)
	}
	handler = logbatch.NewHandler(handler, logs)
	log := slog.New(handler)
	tlsCfg, err := cfg.TLS()
	if err != nil {
		return err
	}

	now := time.Now
	var testClock *policy.TestClock
	if cfg.TestClock {
		testClock = policy.NewTestClock(time.Now())
		now = testClock.Now
	}
	store, err := db.Open(ctx, cfg.DBPath, cfg.StoreOptions()...)
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
		policy.WithUsers(store), policy.WithTrustClientTier(cfg.TrustClientTier), policy.WithReplays(store))
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
		"tls", tlsCfg != nil, "api_token", cfg.APIToken != "", "fail_open", cfg.FailOpen, "trust_client_tier", cfg.TrustClientTier)
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
