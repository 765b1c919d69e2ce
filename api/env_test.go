package api_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

// env is an API server on a fresh store and a test clock, as newEnv builds
// it. Tests send it requests through the whole Echo instance (do).
type env struct {
	t       *testing.T
	srv     *api.Server
	svc     *policy.Service
	store   *db.Store
	clock   *policy.TestClock
	logs    *dbtest.LockedBuffer // the JSON log, with withJSONLog; nil otherwise
	metrics *api.Metrics         // with withMetrics; nil otherwise
}

// envOptions are what newEnv's options change; the zero value is the
// default environment.
type envOptions struct {
	service []func(*db.Store) policy.Option
	logs    bool
	metrics bool
	pages   func(*echo.Echo)
	config  []func(*api.Config)
}

// An envOption changes the environment newEnv builds.
type envOption func(*envOptions)

// withService adds service options, each made from the store, to the
// defaults (the test clock, stats, user records and keys).
func withService(opts ...func(*db.Store) policy.Option) envOption {
	return func(o *envOptions) { o.service = append(o.service, opts...) }
}

// withGuardrails adds guardrails to the service's chain.
func withGuardrails(gs ...policy.Guardrail) envOption {
	return withService(func(*db.Store) policy.Option { return policy.WithGuardrails(gs...) })
}

// withJSONLog keeps the server's log, as JSON lines (-log-format json), in
// env.logs.
func withJSONLog() envOption { return func(o *envOptions) { o.logs = true } }

// withMetrics meters the storage as main wires it and serves GET /metrics.
func withMetrics() envOption { return func(o *envOptions) { o.metrics = true } }

// withPages mounts pages on the server's Echo instance, behind the API's
// middleware, as the admin page is.
func withPages(pages func(*echo.Echo)) envOption {
	return func(o *envOptions) { o.pages = pages }
}

// withConfig changes the server's configuration before it is built, after
// newEnv has filled it in.
func withConfig(change func(*api.Config)) envOption {
	return func(o *envOptions) { o.config = append(o.config, change) }
}

// newEnv returns an API server with the admin token adminToken on a fresh
// database (dbtest.DSN) and a test clock at t0, changed by opts.
func newEnv(t *testing.T, opts ...envOption) *env {
	t.Helper()
	var o envOptions
	for _, opt := range opts {
		opt(&o)
	}
	store, err := db.Open(context.Background(), dbtest.DSN(t, "test.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	e := &env{t: t, store: store, clock: policy.NewTestClock(t0)}
	cfg := api.Config{
		Health: store.Ping,
		Admin:  policy.NewAdminGate(adminToken),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Pages:  o.pages,
	}
	if o.logs {
		e.logs = &dbtest.LockedBuffer{}
		cfg.Logger = slog.New(slog.NewJSONHandler(e.logs, nil))
	}
	var tiers policy.TierStore = store
	var requests policy.RequestStore = store
	if o.metrics {
		cfg.Metrics = api.NewMetrics(nil)
		tiers, requests = cfg.Metrics.MeterStorage(store, store)
		e.metrics = cfg.Metrics
	}
	svcOpts := []policy.Option{policy.WithClock(e.clock.Now), policy.WithStats(store, store), policy.WithUsers(store), policy.WithKeys(store), policy.WithPrices(store), policy.WithAdmins(store), policy.WithAudit(store)}
	for _, opt := range o.service {
		svcOpts = append(svcOpts, opt(store))
	}
	e.svc = policy.NewService(tiers, requests, svcOpts...)
	cfg.Service = e.svc
	for _, change := range o.config {
		change(&cfg)
	}
	e.srv = api.NewServer(cfg)
	return e
}

// do sends a request through the whole Echo instance and returns the answer.
func (e *env) do(method, path, body string, admin bool) *httptest.ResponseRecorder {
	e.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if admin {
		req.Header.Set("Authorization", "Bearer "+adminToken)
	}
	rec := httptest.NewRecorder()
	e.srv.ServeHTTP(rec, req)
	return rec
}

// putTier creates or replaces a tier through the admin API.
func (e *env) putTier(name, body string) {
	e.t.Helper()
	if rec := e.do(http.MethodPut, "/v1/tiers/"+name, body, true); rec.Code != http.StatusCreated && rec.Code != http.StatusOK {
		e.t.Fatalf("put tier: %d %s", rec.Code, rec.Body)
	}
}
