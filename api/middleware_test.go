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

// embedEnv is someone else's Echo app with one guarded route, beside the
// policyguard API on the same service, so their answers can be compared.
type embedEnv struct {
	t       *testing.T
	app     *echo.Echo
	api     *api.Server
	svc     *policy.Service
	store   *db.Store
	clock   *policy.TestClock
	handled int // times the guarded handler ran
}

func newEmbedEnv(t *testing.T, mutate func(*api.GuardConfig)) *embedEnv {
	t.Helper()
	ctx := context.Background()
	store, err := db.Open(ctx, dbtest.DSN(t, "guard.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	clk := policy.NewTestClock(t0)
	svc := policy.NewService(store, store, policy.WithClock(clk.Now))
	lesson := policy.Tier{Name: "lesson", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(2)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(100))}, Features: []string{"summarize"}}
	if _, _, err := svc.PutTier(ctx, lesson); err != nil {
		t.Fatal(err)
	}
	e := &embedEnv{t: t, svc: svc, store: store, clock: clk}
	e.api = api.NewServer(api.Config{Service: svc, Admin: policy.NewAdminGate(adminToken), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})

	cfg := api.GuardConfig{
		Service: svc,
		Request: func(c echo.Context) (policy.Request, error) {
			user := c.Request().Header.Get("X-User")
			if user == "" {
				return policy.Request{}, echo.ErrUnauthorized
			}
			return policy.Request{UserID: user, Tier: c.Request().Header.Get("X-Tier"), Feature: c.Param("feature")}, nil
		},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	e.app = echo.New()
	e.app.GET("/do/:feature", func(c echo.Context) error {
		e.handled++
		d, ok := api.GuardDecision(c)
		if !ok {
			return c.String(http.StatusOK, "done, unguarded")
		}
		return c.String(http.StatusOK, "done, "+d.Tier)
	}, api.Guard(cfg))
	return e
}

func (e *embedEnv) get(user, tier, feature string) *httptest.ResponseRecorder {
	e.t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/do/"+feature, nil)
	if user != "" {
		req.Header.Set("X-User", user)
	}
	req.Header.Set("X-Tier", tier)
	rec := httptest.NewRecorder()
	e.app.ServeHTTP(rec, req)
	return rec
}

// check asks /v1/check the same question, as a client of the API would.
func (e *embedEnv) check(user, tier, feature string) *httptest.ResponseRecorder {
	e.t.Helper()
	body := `{"context":{"user_id":"` + user + `","user_tier":"` + tier + `","feature":"` + feature + `"}}`
	req := httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	e.api.ServeHTTP(rec, req)
	return rec
}

func (e *embedEnv) dayCount(user string) int64 {
	e.t.Helper()
	w, err := e.svc.Usage(context.Background(), user, "")
	if err != nil {
		e.t.Fatal(err)
	}
	return w[policy.Day].Count
}

// decisionHeaders are the header fields a check answer carries.
var decisionHeaders = []string{"Content-Type", "Retry-After", "RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}

// A guarded route answers exactly as /v1/check does: the same status, body
// and header fields for the same state, step by step.
func TestGuardAnswersAsTheCheckDoes(t *testing.T) {
	e := newEmbedEnv(t, nil)
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests, http.StatusTooManyRequests} {
		guarded := e.get("alice", "lesson", "summarize")
		checked := e.check("bob", "lesson", "summarize") // same history, another user
		if guarded.Code != want || checked.Code != want {
			t.Fatalf("request %d: guard %d, check %d, want %d", i+1, guarded.Code, checked.Code, want)
		}
		for _, h := range decisionHeaders {
			if h == "Content-Type" && want == http.StatusOK {
				continue // the handler's own answer
			}
			if g, c := guarded.Header().Get(h), checked.Header().Get(h); g != c {
				t.Errorf("request %d: %s %q from the guard, %q from the check", i+1, h, g, c)
			}
		}
		if want == http.StatusOK {
			if got := guarded.Body.String(); got != "done, lesson" {
				t.Errorf("request %d: handler said %q", i+1, got)
			}
		} else if g, c := guarded.Body.String(), checked.Body.String(); g != c {
			t.Errorf("request %d: body from the guard\n%s\nfrom the check\n%s", i+1, g, c)
		}
		e.clock.Advance(1) // distinct instants, still in the same minute
	}
	if got := guardedRetryAfter(t, e); got == "" {
		t.Error("a refusal without Retry-After")
	}
	if e.handled != 2 {
		t.Errorf("handler ran %d times, want 2", e.handled)
	}
	if got := e.dayCount("alice"); got != 2 {
		t.Errorf("alice has %d recorded requests, want 2", got)
	}
}

func guardedRetryAfter(t *testing.T, e *embedEnv) string {
	t.Helper()
	return e.get("alice", "lesson", "summarize").Header().Get("Retry-After")
}

func TestGuardRefusalsAndErrors(t *testing.T) {
	for _, tc := range []struct {
		name, user, tier, feature string
		status                    int
		body                      string // a fragment
	}{
		{"feature outside the plan", "alice", "lesson", "search", http.StatusForbidden, `"reason":"feature \"search\" is not included in tier \"lesson\""`},
		{"unknown tier", "alice", "gold", "summarize", http.StatusBadRequest, `{"message":"unknown tier \"gold\""}`},
		{"no user", "", "lesson", "summarize", http.StatusUnauthorized, `{"message":"Unauthorized"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEmbedEnv(t, nil)
			rec := e.get(tc.user, tc.tier, tc.feature)
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.body) {
				t.Fatalf("%d %s, want %d with %s", rec.Code, rec.Body, tc.status, tc.body)
			}
			if e.handled != 0 {
				t.Error("the handler ran")
			}
			if tc.user != "" && e.dayCount(tc.user) != 0 {
				t.Error("a refused request consumed quota")
			}
		})
	}
}

func TestGuardStorageFailure(t *testing.T) {
	e := newEmbedEnv(t, nil)
	e.store.Close()
	if rec := e.get("alice", "lesson", "summarize"); rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "storage failed") {
		t.Fatalf("closed store: %d %s, want 503", rec.Code, rec.Body)
	}
	if e.handled != 0 {
		t.Error("the handler ran although nothing was decided")
	}

	// An ErrorHandler that returns nil fails open.
	var seen error
	e = newEmbedEnv(t, func(cfg *api.GuardConfig) {
		cfg.ErrorHandler = func(err error, c echo.Context) error { seen = err; return nil }
	})
	e.store.Close()
	if rec := e.get("alice", "lesson", "summarize"); rec.Code != http.StatusOK || rec.Body.String() != "done, unguarded" {
		t.Fatalf("fail open: %d %s", rec.Code, rec.Body)
	}
	if policy.ErrorCode(seen) != policy.EUNAVAILABLE {
		t.Errorf("ErrorHandler got %v, want a storage failure", seen)
	}
}

func TestGuardSkipperAndDryRun(t *testing.T) {
	e := newEmbedEnv(t, func(cfg *api.GuardConfig) {
		cfg.Skipper = func(c echo.Context) bool { return c.Request().Header.Get("X-User") == "ops" }
	})
	for i := 0; i < 3; i++ {
		if rec := e.get("ops", "lesson", "summarize"); rec.Code != http.StatusOK || rec.Header().Get("RateLimit") != "" {
			t.Fatalf("skipped request %d: %d, RateLimit %q", i, rec.Code, rec.Header().Get("RateLimit"))
		}
	}
	if e.dayCount("ops") != 0 {
		t.Error("a skipped request consumed quota")
	}

	e = newEmbedEnv(t, func(cfg *api.GuardConfig) { cfg.DryRun = true })
	for i := 0; i < 3; i++ {
		if rec := e.get("alice", "lesson", "summarize"); rec.Code != http.StatusOK {
			t.Fatalf("dry run %d: %d", i, rec.Code)
		}
	}
	if e.dayCount("alice") != 0 {
		t.Error("a dry run consumed quota")
	}
	if rec := e.get("alice", "lesson", "search"); rec.Code != http.StatusForbidden {
		t.Errorf("dry run outside the plan: %d, want 403", rec.Code)
	}
}

func TestGuardNeedsServiceAndRequest(t *testing.T) {
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("Guard without a Request function did not panic")
		}
	}()
	api.Guard(api.GuardConfig{Service: policy.NewService(nil, nil)})
}

// With Metrics set, Guard counts its checks in the same series as POST
// /v1/check; requests that never became checks are not counted.
func TestGuardMetrics(t *testing.T) {
	m := api.NewMetrics(nil)
	e := newEmbedEnv(t, func(cfg *api.GuardConfig) { cfg.Metrics = m })
	for range 3 { // the lesson tier admits 2 a minute
		e.get("alice", "lesson", "summarize")
	}
	e.get("alice", "lesson", "search")  // outside the plan
	e.get("alice", "gold", "summarize") // unknown tier
	e.get("", "lesson", "summarize")    // no user: Request fails
	got := scrape(t, m.Handler())
	for _, want := range []struct {
		labels map[string]string
		n      float64
	}{
		{checkLabels("lesson", "rate_limiter", "admitted", "", "false"), 2},
		{checkLabels("lesson", "rate_limiter", "rate_limited", "minute", "false"), 1},
		{checkLabels("lesson", "tier_access", "denied", "", "false"), 1},
		{checkLabels("", "", "invalid", "", "false"), 1},
	} {
		if n, _ := got.value("policyguard_checks_total", want.labels); n != want.n {
			t.Errorf("policyguard_checks_total%v = %v, want %v; series: %v", want.labels, n, want.n, got.series("policyguard_checks_total"))
		}
	}
	if n, _ := got.value("policyguard_check_duration_seconds", map[string]string{"dry_run": "false"}); n != 5 {
		t.Errorf("%v check durations observed, want 5 (the request without a user is not a check)", n)
	}
	if n, _ := got.value("policyguard_rows_stored_total", nil); n != 2 {
		t.Errorf("policyguard_rows_stored_total = %v, want 2", n)
	}
}
