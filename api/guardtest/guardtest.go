// Package guardtest runs a real policyguard service inside a Go test, for
// testing the code that calls it: does the agent back off on 429, does it
// tell the user about the day limit. The service is the real one (the HTTP
// routes and middleware of package api, the SQLite store of package db on
// a database in t.TempDir()) on a clock the test moves, so a minute window
// passes with g.Clock().Advance(time.Minute) and no test sleeps.
//
//	g := guardtest.New(t, guardtest.WithTiers(client.Tier{Name: "trial", Limits: client.Limits{RequestsPerMinute: client.Limit(3), RequestsPerHour: client.Limit(100), RequestsPerDay: client.Limit(1000)}}))
//	agent := NewAgent(g.URL())
//
// The service stops, and its database is removed, when the test ends.
package guardtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/api/client"
	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

// cleanupInterval is how often, in real time, the guard deletes requests
// older than policy.KeepFor by its clock, as the service's cleanup does.
const cleanupInterval = time.Minute

// Guard is a running policyguard service. Its methods are safe for
// concurrent use.
type Guard struct {
	srv    *httptest.Server
	client *client.Client
	clock  *policy.TestClock
}

// Option configures New.
type Option func(*options)

type options struct {
	tiers       []client.Tier
	tierFiles   []string
	defaultTier string
	apiToken    string
	start       time.Time
	callTimeout time.Duration

	distrustClientTier bool
}

// WithTiers creates or replaces tiers before the service starts, as
// "policyguard tiers import" does: the seeded tiers (free, pro, ...) stay
// unless listed. A tier is a client.Tier, the type the test already uses
// with the client, so limits read the same in both places; UpdatedAt is
// ignored. Tiers from every WithTiers and WithTiersFile are imported
// together, and a name listed twice fails the test.
func WithTiers(tiers ...client.Tier) Option {
	return func(o *options) { o.tiers = append(o.tiers, tiers...) }
}

// WithTiersFile imports the tiers file at path (the format of "policyguard
// tiers export" and "policyguard tiers import") before the service starts,
// as WithTiers does.
func WithTiersFile(path string) Option {
	return func(o *options) { o.tierFiles = append(o.tierFiles, path) }
}

// WithDefaultTier sets the tier of checks that name none (default "free").
// It must be a seeded tier or one of those imported.
func WithDefaultTier(name string) Option { return func(o *options) { o.defaultTier = name } }

// WithAPIToken makes every check need token, as -api-token does. The
// Guard's Client carries it.
func WithAPIToken(token string) Option { return func(o *options) { o.apiToken = token } }

// WithCallTimeout sets how long a metered call stays open without a finish
// or keepalive before the service finishes it with its reservation, as
// -call-timeout does (default 10m). Expiry follows the guard's clock.
func WithCallTimeout(d time.Duration) Option { return func(o *options) { o.callTimeout = d } }

// WithTrustClientTier sets whether a check's context.user_tier is
// believed for a user without an assigned tier, as -trust-client-tier
// does (default true).
func WithTrustClientTier(trust bool) Option {
	return func(o *options) { o.distrustClientTier = !trust }
}

// WithStart sets the clock's first reading (default the current time).
func WithStart(t time.Time) Option { return func(o *options) { o.start = t } }

// New starts a service for the test and stops it at t.Cleanup. Any
// failure to start, including a bad tier or tiers file, fails the test
// with t.Fatal.
func New(t testing.TB, opts ...Option) *Guard {
	t.Helper()
	o := options{defaultTier: policy.DefaultTierName, start: time.Now(), callTimeout: policy.DefaultCallTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	ctx := context.Background()
	clock := policy.NewTestClock(o.start)

	// SyncNormal: a test's database need not survive a power cut, and
	// skipping the fsync of every commit keeps checks fast.
	store, err := db.Open(ctx, filepath.Join(t.TempDir(), "guardrail.db"), db.WithSynchronous(db.SyncNormal))
	if err != nil {
		t.Fatalf("guardtest: %v", err)
	}
	t.Cleanup(func() { store.Close() })
	if o.callTimeout <= 0 {
		t.Fatalf("guardtest: call timeout %v: must be positive", o.callTimeout)
	}
	svc := policy.NewService(store, store, policy.WithDefaultTier(o.defaultTier), policy.WithClock(clock.Now),
		policy.WithCallTimeout(o.callTimeout), policy.WithUsers(store), policy.WithTrustClientTier(!o.distrustClientTier),
		policy.WithKeys(store), policy.WithPrices(store), policy.WithAdmins(store), policy.WithAudit(store))
	f, err := o.readTiers()
	if err != nil {
		t.Fatalf("guardtest: %v", err)
	}
	if len(f.Tiers) > 0 || len(f.Accounts) > 0 || len(f.Users) > 0 {
		if _, err := svc.Import(ctx, f.Tiers, f.Accounts, f.Users, false); err != nil {
			t.Fatalf("guardtest: tiers: %s", policy.ErrorMessage(err))
		}
	}
	if _, err := store.Tier(ctx, o.defaultTier); err != nil {
		t.Fatalf("guardtest: default tier %q does not exist: list it with WithTiers or WithTiersFile", o.defaultTier)
	}

	adminToken := newToken(t)
	srv := httptest.NewServer(api.NewServer(api.Config{
		Service:   svc,
		Health:    store.Ping,
		Admin:     policy.NewAdminGate(adminToken),
		APIToken:  o.apiToken,
		Logger:    slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelError})),
		TestClock: clock,
	}))
	t.Cleanup(srv.Close)
	pg, err := client.New(srv.URL, client.WithHTTPClient(srv.Client()), client.WithAdminToken(adminToken), client.WithAPIToken(o.apiToken))
	if err != nil {
		t.Fatalf("guardtest: %v", err)
	}

	bg, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		store.PruneEvery(bg, cleanupInterval, policy.KeepFor, clock.Now, slog.New(slog.DiscardHandler), nil)
	}()
	t.Cleanup(func() { stop(); <-done })
	return &Guard{srv: srv, client: pg, clock: clock}
}

// readTiers returns the tiers of every WithTiers and WithTiersFile, each
// read by api.ReadTiersFile, the reader of "policyguard tiers import", so
// they are checked by the same rules as a tiers file.
//
// The accounts and user records a tiers file lists are imported too.
func (o *options) readTiers() (api.TiersFile, error) {
	var all api.TiersFile
	if len(o.tiers) > 0 {
		file := struct {
			Tiers []client.Tier `json:"tiers"`
		}{make([]client.Tier, len(o.tiers))}
		for i, t := range o.tiers {
			if t.Features == nil {
				t.Features = []string{}
			}
			file.Tiers[i] = t
		}
		data, err := json.Marshal(file)
		if err != nil {
			return api.TiersFile{}, err
		}
		tiers, err := api.ReadTiersFile(bytes.NewReader(data))
		if err != nil {
			return api.TiersFile{}, tierError("WithTiers", err)
		}
		all.Tiers = append(all.Tiers, tiers...)
	}
	for _, path := range o.tierFiles {
		f, err := os.Open(path)
		if err != nil {
			return api.TiersFile{}, err
		}
		read, err := api.ReadTiersFileAll(f)
		f.Close()
		if err != nil {
			return api.TiersFile{}, tierError(path, err)
		}
		all.Tiers = append(all.Tiers, read.Tiers...)
		all.Accounts = append(all.Accounts, read.Accounts...)
		all.Users = append(all.Users, read.Users...)
	}
	return all, nil
}

// tierError reports every problem the tiers file reader found, one a line.
func tierError(where string, err error) error {
	msg := policy.ErrorMessage(err)
	return fmt.Errorf("%s:\n  %s", where, strings.ReplaceAll(msg, "\n", "\n  "))
}

func newToken(t testing.TB) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("guardtest: %v", err)
	}
	return hex.EncodeToString(b)
}

// URL returns the service's base URL, such as http://127.0.0.1:41234, for
// the code under test.
func (g *Guard) URL() string { return g.srv.URL }

// Client returns a client of the service with the admin token (and the API
// token of WithAPIToken) set: it can check, manage tiers and read usage.
func (g *Guard) Client() *client.Client { return g.client }

// Clock returns the service's clock: windows, retry_after and the cleanup
// of old requests follow it, and it moves only when the test moves it. The
// service's POST /v1/test/clock moves the same clock.
func (g *Guard) Clock() *policy.TestClock { return g.clock }

// testLog writes the service's error log lines to the test's log, where
// they show with the test that caused them.
type testLog struct{ t testing.TB }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
