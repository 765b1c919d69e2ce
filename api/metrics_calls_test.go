package api_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

// The call metrics: calls opened by admitted metered checks, finished by
// their caller (a retried finish once), expired, the tokens settled, the
// calls in flight read from the store at scrape, and refusals by the new
// reasons under the window label.
func TestMetricsCountCalls(t *testing.T) {
	e := newEnv(t, withMetrics(), withService(func(*db.Store) policy.Option { return policy.WithCallTimeout(time.Minute) }))
	store, clk, srv := e.store, e.clock, e.srv
	if v, _ := scrape(t, srv).value("policyguard_calls_in_flight", nil); !math.IsNaN(v) {
		t.Errorf("calls in flight without a source: %v, want NaN", v)
	}
	e.metrics.SetCallsInFlight(func(ctx context.Context) (int64, error) {
		byTier, err := store.CallsInFlight(ctx, clk.Now())
		return byTier["meter"], err
	})
	e.putTier("meter", `{"requests_per_minute":100,"requests_per_hour":1000,"requests_per_day":1000,"burst_allowance":0,"tokens_per_minute":1000,"tokens_per_hour":1000,"max_concurrent":2}`)

	a, b := e.openCall("u", "meter", 300), e.openCall("u", "meter", 300)
	e.do("POST", "/v1/check", `{"context":{"user_id":"u","user_tier":"meter"}}`, false)               // concurrency
	e.do("POST", "/v1/check", `{"context":{"user_id":"v","user_tier":"meter"},"tokens":1001}`, false) // tokens, minute first
	if got := scrape(t, srv); got.must(t, "policyguard_calls_in_flight", nil) != 2 {
		t.Errorf("calls in flight %v, want 2", got.must(t, "policyguard_calls_in_flight", nil))
	}
	e.do("POST", "/v1/calls/"+a+"/finish", `{"tokens":120}`, false)
	clk.Advance(time.Second)                                        // a retry is known by a finish time before it began
	e.do("POST", "/v1/calls/"+a+"/finish", `{"tokens":120}`, false) // a retry
	e.do("POST", "/v1/calls/"+a+"/finish", `{"tokens":121}`, false) // 409
	clk.Advance(time.Minute)                                        // b expires
	e.do("POST", "/v1/calls/"+b+"/finish", `{"tokens":100}`, false)

	got := scrape(t, srv)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"policyguard_calls_opened_total", nil, 2},
		{"policyguard_calls_finished_total", nil, 1},
		{"policyguard_calls_expired_total", nil, 1},
		{"policyguard_tokens_settled_total", nil, 120},
		{"policyguard_calls_in_flight", nil, 0},
		{"policyguard_checks_total", checkLabels("meter", "rate_limiter", "rate_limited", "concurrency", "false"), 1},
		{"policyguard_checks_total", checkLabels("meter", "rate_limiter", "rate_limited", "tokens_minute", "false"), 1},
		{"policyguard_checks_total", checkLabels("meter", "rate_limiter", "admitted", "", "false"), 2},
	} {
		if v := got.must(t, tc.name, tc.labels); v != tc.want {
			t.Errorf("%s %v = %v, want %v (series %v)", tc.name, tc.labels, v, tc.want, got.series(tc.name))
		}
	}
}

// must returns the value of a sample that must exist.
func (m metrics) must(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	if labels == nil {
		labels = map[string]string{}
	}
	v, ok := m.value(name, labels)
	if !ok {
		t.Fatalf("no %s %v; series %v", name, labels, m.series(name))
	}
	return v
}
