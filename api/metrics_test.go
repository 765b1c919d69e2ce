package api_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

// metrics is one scrape of GET /metrics, parsed as Prometheus parses it.
type metrics map[string]*dto.MetricFamily

func scrape(t *testing.T, h http.Handler) metrics {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("GET /metrics: Content-Type %q", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// value returns the value of the sample of family name whose labels are
// exactly labels (a counter's value, a histogram's count), and whether there
// is one.
func (m metrics) value(name string, labels map[string]string) (float64, bool) {
	f := m[name]
	if f == nil {
		return 0, false
	}
next:
	for _, s := range f.Metric {
		if len(s.Label) != len(labels) {
			continue
		}
		for _, l := range s.Label {
			if v, ok := labels[l.GetName()]; !ok || v != l.GetValue() {
				continue next
			}
		}
		switch {
		case s.Counter != nil:
			return s.Counter.GetValue(), true
		case s.Histogram != nil:
			return float64(s.Histogram.GetSampleCount()), true
		case s.Gauge != nil:
			return s.Gauge.GetValue(), true
		}
	}
	return 0, false
}

// series lists the label sets of family name, for failure messages.
func (m metrics) series(name string) []string {
	var out []string
	if f := m[name]; f != nil {
		for _, s := range f.Metric {
			var ls []string
			for _, l := range s.Label {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			out = append(out, "{"+strings.Join(ls, ",")+"}")
		}
	}
	sort.Strings(out)
	return out
}

func checkLabels(tier, guardrail, outcome, window, dryRun string) map[string]string {
	return map[string]string{"tier": tier, "guardrail": guardrail, "outcome": outcome, "window": window, "dry_run": dryRun}
}

func TestMetricsCountChecks(t *testing.T) {
	e := newEnv(t, withMetrics())
	e.putTier("hourly", `{"requests_per_minute":1,"requests_per_hour":1,"requests_per_day":100,"burst_allowance":4}`)
	e.putTier("lesson", `{"requests_per_minute":1,"requests_per_hour":100,"requests_per_day":100,"burst_allowance":0}`)
	const secretUser = "user-id-that-must-not-be-a-label"
	for _, step := range []struct {
		path, body string
		status     int
	}{
		{"/v1/check", `{"context":{"user_id":"` + secretUser + `"}}`, 200},
		{"/v1/check", `{"context":{"user_id":"` + secretUser + `"}}`, 200},
		{"/v1/check?dry_run=true", `{"context":{"user_id":"` + secretUser + `"}}`, 200},
		{"/v1/check", `{"context":{"user_id":"a","feature":"search"}}`, 403},
		{"/v1/check", `{"context":{"user_id":"b","user_tier":"lesson"}}`, 200},
		{"/v1/check", `{"context":{"user_id":"b","user_tier":"lesson"}}`, 429},
		{"/v1/check?dry_run=true", `{"context":{"user_id":"b","user_tier":"lesson"}}`, 429},
		{"/v1/check", `{"context":{"user_id":"c","user_tier":"hourly"}}`, 200},
		{"/v1/check", `{"context":{"user_id":"c","user_tier":"hourly"}}`, 429},
		{"/v1/check", `{"context":{"user_tier":"unknown-tier-name"}}`, 400},
	} {
		if rec := e.do(http.MethodPost, step.path, step.body, false); rec.Code != step.status {
			t.Fatalf("%s %s: %d %s, want %d", step.path, step.body, rec.Code, rec.Body, step.status)
		}
		e.clock.Advance(time.Millisecond)
	}
	e.store.Close()
	if rec := e.do(http.MethodPost, "/v1/check", `{"context":{"user_id":"d"}}`, false); rec.Code != 503 {
		t.Fatalf("check on a closed store: %d", rec.Code)
	}
	if rec := e.do(http.MethodGet, "/healthz", "", false); rec.Code != 503 {
		t.Fatalf("health on a closed store: %d", rec.Code)
	}
	if rec := e.do(http.MethodPut, "/v1/tiers/new", `{"requests_per_minute":1,"requests_per_hour":1,"requests_per_day":1,"burst_allowance":0}`, true); rec.Code != 503 {
		t.Fatalf("tier change on a closed store: %d %s", rec.Code, rec.Body)
	}

	m := scrape(t, e.srv)
	for _, want := range []struct {
		name   string
		labels map[string]string
		value  float64
	}{
		{"policyguard_checks_total", checkLabels("free", "rate_limiter", "admitted", "", "false"), 2},
		{"policyguard_checks_total", checkLabels("free", "rate_limiter", "admitted", "", "true"), 1},
		{"policyguard_checks_total", checkLabels("free", "tier_access", "denied", "", "false"), 1},
		{"policyguard_checks_total", checkLabels("lesson", "rate_limiter", "admitted", "", "false"), 1},
		{"policyguard_checks_total", checkLabels("lesson", "rate_limiter", "rate_limited", "minute", "false"), 1},
		{"policyguard_checks_total", checkLabels("lesson", "rate_limiter", "rate_limited", "minute", "true"), 1},
		{"policyguard_checks_total", checkLabels("hourly", "rate_limiter", "admitted", "", "false"), 1},
		{"policyguard_checks_total", checkLabels("hourly", "rate_limiter", "rate_limited", "hour", "false"), 1},
		{"policyguard_checks_total", checkLabels("", "", "invalid", "", "false"), 1},
		{"policyguard_checks_total", checkLabels("", "", "error", "", "false"), 1},
		// Every check that reached the guardrails, by dry run.
		{"policyguard_check_duration_seconds", map[string]string{"dry_run": "false"}, 9},
		{"policyguard_check_duration_seconds", map[string]string{"dry_run": "true"}, 2},
		// Admitted real checks, each one row.
		{"policyguard_rows_stored_total", nil, 4},
		{"policyguard_storage_errors_total", map[string]string{"operation": "ping"}, 1},
		{"policyguard_storage_errors_total", map[string]string{"operation": "update_tiers"}, 1},
		{"policyguard_storage_errors_total", map[string]string{"operation": "forget"}, 0},
		{"policyguard_cleanup_rows_deleted_total", nil, 0},
	} {
		got, ok := m.value(want.name, want.labels)
		if !ok || got != want.value {
			t.Errorf("%s%v = %v (present %v), want %v; series: %v", want.name, want.labels, got, ok, want.value, m.series(want.name))
		}
	}
	// The failed check failed at one storage operation: reading its tier
	// or its history, whichever the store reached first.
	var failed float64
	for _, op := range []string{"tier", "admit", "view"} {
		v, _ := m.value("policyguard_storage_errors_total", map[string]string{"operation": op})
		failed += v
	}
	if failed != 1 {
		t.Errorf("storage errors of the failed check = %v, want 1; series: %v", failed, m.series("policyguard_storage_errors_total"))
	}
	if got, want := len(m["policyguard_checks_total"].Metric), 10; got != want {
		t.Errorf("%d series of policyguard_checks_total, want %d: %v", got, want, m.series("policyguard_checks_total"))
	}
	for name := range m {
		for _, s := range m.series(name) {
			if strings.Contains(s, secretUser) || strings.Contains(s, "unknown-tier-name") {
				t.Errorf("%s has a label from the request: %s", name, s)
			}
		}
	}
}

// A check an account's pooled limits refused counts under the window
// label "account", whichever pooled limit it was and however much room the
// member's own windows have; a member refused by their own limit counts
// under that limit's window, as any user does.
func TestMetricsCountAccountRefusals(t *testing.T) {
	e := newEnv(t, withMetrics())
	e.putTier("team", `{"requests_per_minute":5,"requests_per_hour":50,"requests_per_day":500,"burst_allowance":0,`+
		`"account":{"requests_per_minute":1,"tokens_per_day":100}}`)
	e.putTier("lesson", `{"requests_per_minute":1,"requests_per_hour":50,"requests_per_day":500,"burst_allowance":0}`)
	for _, step := range []struct {
		method, path, body string
		status             int
		reason             string
	}{
		{"PUT", "/v1/accounts/acme", `{"tier":"team"}`, 201, ""},
		{"PUT", "/v1/accounts/roomy", `{"tier":"team","limits":{"requests_per_minute":null}}`, 201, ""},
		{"PUT", "/v1/users/solo", `{"tier":"lesson","account":"roomy"}`, 201, ""},
		{"POST", "/v1/check", `{"context":{"user_id":"a1","account_id":"acme"},"tokens":10}`, 200, ""},
		{"POST", "/v1/check", `{"context":{"user_id":"a2","account_id":"acme"},"tokens":10}`, 429, "account per-minute limit exceeded"},
		{"POST", "/v1/check?dry_run=true", `{"context":{"user_id":"a2","account_id":"acme"}}`, 429, "account per-minute limit exceeded"},
		{"POST", "/v1/check", `{"context":{"user_id":"r1","account_id":"roomy"},"tokens":200}`, 429, "account per-day token limit exceeded"},
		{"POST", "/v1/check", `{"context":{"user_id":"solo"}}`, 200, ""},
		{"POST", "/v1/check", `{"context":{"user_id":"solo"}}`, 429, "per-minute limit exceeded"},
	} {
		rec := e.do(step.method, step.path, step.body, true)
		if rec.Code != step.status || step.reason != "" && decode[decision](t, rec).Reason == nil || step.reason != "" && *decode[decision](t, rec).Reason != step.reason {
			t.Fatalf("%s %s %s: %d %s, want %d %q", step.method, step.path, step.body, rec.Code, rec.Body, step.status, step.reason)
		}
		e.clock.Advance(time.Millisecond)
	}
	m := scrape(t, e.srv)
	for _, want := range []struct {
		labels map[string]string
		value  float64
	}{
		{checkLabels("team", "rate_limiter", "admitted", "", "false"), 1},
		{checkLabels("team", "rate_limiter", "rate_limited", "account", "false"), 2},
		{checkLabels("team", "rate_limiter", "rate_limited", "account", "true"), 1},
		{checkLabels("lesson", "rate_limiter", "admitted", "", "false"), 1},
		{checkLabels("lesson", "rate_limiter", "rate_limited", "minute", "false"), 1},
	} {
		if got, ok := m.value("policyguard_checks_total", want.labels); !ok || got != want.value {
			t.Errorf("policyguard_checks_total%v = %v (present %v), want %v; series: %v", want.labels, got, ok, want.value, m.series("policyguard_checks_total"))
		}
	}
	if got, want := len(m["policyguard_checks_total"].Metric), 5; got != want {
		t.Errorf("%d series of policyguard_checks_total, want %d: %v", got, want, m.series("policyguard_checks_total"))
	}
}

func TestMetricsExposition(t *testing.T) {
	e := newEnv(t, withMetrics())
	e.do(http.MethodPost, "/v1/check", `{}`, false)
	m := scrape(t, e.srv)
	want := []string{
		"policyguard_checks_total", "policyguard_check_duration_seconds", "policyguard_rows_stored_total",
		"policyguard_cleanup_rows_deleted_total", "policyguard_storage_errors_total",
		"go_goroutines", "go_memstats_alloc_bytes",
	}
	if runtime.GOOS == "linux" {
		want = append(want, "process_cpu_seconds_total", "process_resident_memory_bytes")
	}
	for _, name := range want {
		if m[name] == nil {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	// Prometheus's own naming rules: _total on counters, base units.
	var fams []*dto.MetricFamily
	for name, f := range m {
		if strings.HasPrefix(name, "policyguard_") {
			fams = append(fams, f)
		}
	}
	problems, err := promlint.NewWithMetricFamilies(fams).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestMetricsRegistryIsPerServer(t *testing.T) {
	a, b := newEnv(t), newEnv(t)
	a.do(http.MethodPost, "/v1/check", `{}`, false)
	labels := checkLabels("free", "rate_limiter", "admitted", "", "false")
	if got, _ := scrape(t, a.srv).value("policyguard_checks_total", labels); got != 1 {
		t.Errorf("server a counted %v checks, want 1", got)
	}
	if got, ok := scrape(t, b.srv).value("policyguard_checks_total", labels); ok {
		t.Errorf("server b counted %v checks of server a", got)
	}
}

func TestMetricsHidden(t *testing.T) {
	m := api.NewMetrics(nil)
	srv := api.NewServer(api.Config{
		Service:     policy.NewService(nil, nil),
		Admin:       policy.NewAdminGate(adminToken),
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics:     m,
		HideMetrics: true,
	})
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("GET /metrics with HideMetrics: %d, want 404", rec.Code)
	}
	// The handler for another address still serves them.
	if scrape(t, m.Handler())["policyguard_rows_stored_total"] == nil {
		t.Fatal("Metrics.Handler lacks policyguard_rows_stored_total")
	}
}

func TestMetricsObserveCleanup(t *testing.T) {
	m := api.NewMetrics(nil)
	m.ObserveCleanup(0, nil)
	m.ObserveCleanup(1500, nil)
	m.ObserveCleanup(7, &policy.Error{Code: policy.EUNAVAILABLE, Message: "storage failed: disk I/O error"})
	m.ObserveCleanup(0, context.Canceled)             // shutdown, not a failure
	m.ObserveCleanup(0, errors.New("something else")) // not storage
	got := scrape(t, m.Handler())
	if v, _ := got.value("policyguard_cleanup_rows_deleted_total", nil); v != 1507 {
		t.Errorf("rows deleted = %v, want 1507", v)
	}
	if v, _ := got.value("policyguard_storage_errors_total", map[string]string{"operation": "cleanup"}); v != 1 {
		t.Errorf("cleanup storage errors = %v, want 1", v)
	}
}

// planningStore is a request store that plans its admissions (see
// policy.Planner), counting them, and fails them with err when set.
type planningStore struct {
	policy.RequestStore
	planned int
	err     error
}

func (s *planningStore) AdmitPlanned(ctx context.Context, userID string, p *policy.Plan, decide func(policy.History) (policy.Admission, error)) error {
	s.planned++
	if s.err != nil {
		return s.err
	}
	return s.RequestStore.Admit(ctx, userID, decide)
}

// The metered wrapper keeps a store's plans: a check through it is
// admitted by AdmitPlanned, and a failure there counts as admit's.
func TestMeterStorageKeepsPlans(t *testing.T) {
	store, err := db.Open(context.Background(), dbtest.DSN(t, "test.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	inner := &planningStore{RequestStore: store}
	m := api.NewMetrics(nil)
	tiers, requests := m.MeterStorage(store, inner)
	if _, ok := requests.(policy.Planner); !ok {
		t.Fatal("the metered request store is not a policy.Planner")
	}
	svc := policy.NewService(tiers, requests, policy.WithClock(func() time.Time { return t0 }))
	ctx := context.Background()
	if d, err := svc.Check(ctx, policy.Request{UserID: "u"}, false); err != nil || !d.Allowed() || inner.planned != 1 {
		t.Fatalf("check: %+v, %v; planned %d, want 1", d, err, inner.planned)
	}
	inner.err = &policy.Error{Code: policy.EUNAVAILABLE, Message: "storage failed: down"}
	if _, err := svc.Check(ctx, policy.Request{UserID: "u"}, false); policy.ErrorCode(err) != policy.EUNAVAILABLE {
		t.Fatalf("check on a failing store: %v", err)
	}
	srv := api.NewServer(api.Config{Service: svc, Health: store.Ping, Admin: policy.NewAdminGate(adminToken),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: m})
	if v, _ := scrape(t, srv).value("policyguard_storage_errors_total", map[string]string{"operation": "admit"}); v != 1 {
		t.Fatalf("storage errors of admit = %v, want 1", v)
	}
}
