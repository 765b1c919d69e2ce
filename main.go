// Command policyguard serves policy-based guardrails for AI agents: per-user
// rate limits over rolling minute, hour and day windows and the features of
// each subscription tier, checked before a request reaches the model.
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
	"net"
	"net/http"
	"os"
	"os/signal"
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
	fs.StringVar(&cfg.adminToken, "admin-token", env("GUARDRAIL_ADMIN_TOKEN", ""), "bearer token for the admin API; empty generates one and prints it (GUARDRAIL_ADMIN_TOKEN)")
	fs.StringVar(&cfg.defaultTier, "default-tier", env("GUARDRAIL_DEFAULT_TIER", policy.DefaultTierName), "tier of requests that name none (GUARDRAIL_DEFAULT_TIER)")
	fs.StringVar(&cfg.sync, "sync", env("GUARDRAIL_SYNC", db.SyncFull), "SQLite synchronous mode: FULL survives power loss, NORMAL only a process crash (GUARDRAIL_SYNC)")
	fs.StringVar(&cfg.logFormat, "log-format", env("GUARDRAIL_LOG_FORMAT", "text"), "log format: text or json (GUARDRAIL_LOG_FORMAT)")
	fs.StringVar(&cfg.metricsAddr, "metrics-addr", env("GUARDRAIL_METRICS_ADDR", ""), "serve GET /metrics on this address instead of the API's (GUARDRAIL_METRICS_ADDR)")
	interval := env("GUARDRAIL_CLEANUP_INTERVAL", "1m")
	fs.Func("cleanup-interval", "how often rows older than a day are deleted (GUARDRAIL_CLEANUP_INTERVAL, default 1m)", func(s string) error {
		interval = s
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	d, err := time.ParseDuration(interval)
	if err != nil || d <= 0 {
		return cfg, fmt.Errorf("cleanup interval %q: must be a positive duration such as 1m or 30s", interval)
	}
	cfg.cleanupInterval = d
	if cfg.logFormat != "text" && cfg.logFormat != "json" {
		return cfg, fmt.Errorf("log format %q: must be text or json", cfg.logFormat)
	}
	return cfg, nil
}

// run starts the service and blocks until ctx ends, then shuts down
// gracefully: in-flight checks finish and their writes commit.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	var handler slog.Handler = slog.NewTextHandler(stderr, nil)
	if cfg.logFormat == "json" {
		handler = slog.NewJSONHandler(stderr, nil)
	}
	log := slog.New(handler)

	store, err := db.Open(ctx, cfg.dbPath, db.WithSynchronous(cfg.sync))
	if err != nil {
		return err
	}
	defer store.Close()

	metrics := api.NewMetrics(nil)
	tiers, requests := metrics.MeterStorage(store, store)
	svc := policy.NewService(tiers, requests, policy.WithDefaultTier(cfg.defaultTier))
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

	srv := &http.Server{
		Handler: api.NewServer(api.Config{
			Service:     svc,
			Health:      store.Ping,
			AdminToken:  cfg.adminToken,
			Logger:      log,
			Metrics:     metrics,
			HideMetrics: cfg.metricsAddr != "",
		}),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(handler, slog.LevelWarn),
	}
	if cfg.metricsAddr != "" {
		// Metrics on their own address can stay inside the network while
		// the API faces clients.
		mln, err := net.Listen("tcp", cfg.metricsAddr)
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", metrics.Handler())
		msrv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(handler, slog.LevelWarn)}
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
	url := "http://" + ln.Addr().String()
	fmt.Fprintf(stdout, "policyguard listening on %s (database %s)\n", url, cfg.dbPath)
	log.Info("serving", "addr", ln.Addr().String(), "db", cfg.dbPath, "default_tier", cfg.defaultTier, "sync", strings.ToUpper(cfg.sync))

	bg, stopBG := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		store.PruneEvery(bg, cfg.cleanupInterval, policy.Retention, time.Now, log, metrics.ObserveCleanup)
	}()

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
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
