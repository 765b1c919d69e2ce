package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/policy"
)

// A tier whose limits cannot all bind is a 400 naming both fields and the
// window that would refuse first, through PUT, a preview and a tiers file;
// equal limits, and a burst above the hour, are fine.
func TestTierLimitsMustBindOverHTTP(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name, body string
		status     int
		want       string
	}{
		{"hour below minute", `{"requests_per_minute":10,"requests_per_hour":9,"requests_per_day":100,"burst_allowance":0}`, 400,
			`{"message":"requests_per_hour (9) is below requests_per_minute (10): the hour would refuse first"}`},
		{"day below hour", `{"requests_per_minute":1,"requests_per_hour":10,"requests_per_day":5,"burst_allowance":0}`, 400,
			`{"message":"requests_per_day (5) is below requests_per_hour (10): the day would refuse first"}`},
		{"the first in field order", `{"requests_per_minute":10,"requests_per_hour":5,"requests_per_day":1,"burst_allowance":0}`, 400,
			`{"message":"requests_per_hour (5) is below requests_per_minute (10): the hour would refuse first"}`},
		{"tokens: day below minute, no hour", `{"requests_per_minute":1,"requests_per_hour":1,"requests_per_day":1,"burst_allowance":0,"tokens_per_minute":500,"tokens_per_day":400}`, 400,
			`{"message":"tokens_per_day (400) is below tokens_per_minute (500): the day would refuse first"}`},
		{"shadow", `{"requests_per_minute":1,"requests_per_hour":1,"requests_per_day":1,"burst_allowance":0,"shadow":{"requests_per_minute":3,"requests_per_hour":2,"requests_per_day":9,"burst_allowance":0}}`, 400,
			`{"message":"shadow.requests_per_hour (2) is below shadow.requests_per_minute (3): the hour would refuse first"}`},
		{"a type problem is said alone", `{"requests_per_minute":10,"requests_per_hour":"9","requests_per_day":100,"burst_allowance":0}`, 400,
			`{"message":"requests_per_hour must be an integer from 0 to 2147483647"}`},
		{"equal limits", `{"requests_per_minute":7,"requests_per_hour":7,"requests_per_day":7,"burst_allowance":0,"tokens_per_minute":9,"tokens_per_day":9}`, 201, `"name":"x"`},
		{"a burst above the hour", `{"requests_per_minute":1,"requests_per_hour":2,"requests_per_day":3,"burst_allowance":50}`, 200, `"burst_allowance":50`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.do(http.MethodGet, "/v1/tiers/x", "", true).Body.String()
			rec := e.do(http.MethodPut, "/v1/tiers/x", tc.body, true)
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.want) {
				t.Fatalf("PUT: %d %s, want %d with %s", rec.Code, rec.Body, tc.status, tc.want)
			}
			if after := e.do(http.MethodGet, "/v1/tiers/x", "", true).Body.String(); tc.status == 400 && after != before {
				t.Fatalf("a refused PUT changed the tier:\n%s\n%s", before, after)
			}
			if tc.status != 400 {
				return
			}
			if rec := e.do(http.MethodPost, "/v1/tiers/pro/preview", tc.body, true); rec.Code != 400 || rec.Body.String() != tc.want+"\n" {
				t.Fatalf("preview: %d %q, want 400 %s", rec.Code, rec.Body, tc.want)
			}
		})
	}

	_, err := api.ReadTiersFile(strings.NewReader(`{"tiers": [
		{"name": "a", "requests_per_minute": 10, "requests_per_hour": 5, "requests_per_day": 1, "burst_allowance": 0},
		{"name": "b", "requests_per_minute": 1, "requests_per_hour": 1, "requests_per_day": 1, "burst_allowance": 0, "tokens_per_hour": 2, "tokens_per_day": 1}
	]}`))
	want := `tier 1 ("a"): requests_per_hour (5) is below requests_per_minute (10): the hour would refuse first
tier 1 ("a"): requests_per_day (1) is below requests_per_hour (5): the day would refuse first
tier 2 ("b"): tokens_per_day (1) is below tokens_per_hour (2): the day would refuse first`
	if policy.ErrorCode(err) != policy.EINVALID || policy.ErrorMessage(err) != want {
		t.Fatalf("tiers file: %v, want\n%s", err, want)
	}
}

// A user record's limits are checked after merging with its tier (pro:
// 60/min, 2,000/hour, 20,000/day); without one, among themselves. A tier
// edited later is checked on its own, and the record when it is written
// again.
func TestUserLimitsMustBindOverHTTP(t *testing.T) {
	e := newEnv(t)
	for _, s := range []struct {
		name, method, path, body string
		status                   int
		want                     string
	}{
		{"below the tier's minute", "PUT", "/v1/users/alice", `{"tier":"pro","limits":{"requests_per_hour":30}}`, 400,
			`{"message":"requests_per_hour (30) is below requests_per_minute (60): the hour would refuse first"}`},
		{"above the tier's day", "PUT", "/v1/users/alice", `{"tier":"pro","limits":{"requests_per_hour":30000}}`, 400,
			`{"message":"requests_per_day (20000) is below requests_per_hour (30000): the day would refuse first"}`},
		{"no tier: among themselves", "PUT", "/v1/users/alice", `{"limits":{"requests_per_minute":10,"requests_per_day":5}}`, 400,
			`{"message":"requests_per_day (5) is below requests_per_minute (10): the day would refuse first"}`},
		{"nothing stored", "GET", "/v1/users/alice", "", 404, "has no record"},
		{"equal to the tier's minute", "PUT", "/v1/users/alice", `{"tier":"pro","limits":{"requests_per_hour":60}}`, 201, `"limits":{"requests_per_hour":60}`},
		{"the tier edited after", "PUT", "/v1/tiers/pro", `{"requests_per_minute":100,"requests_per_hour":2000,"requests_per_day":20000,"burst_allowance":10}`, 200, `"requests_per_minute":100`},
		{"the record stays", "GET", "/v1/users/alice", "", 200, `"limits":{"requests_per_hour":60}`},
		{"written again", "PUT", "/v1/users/alice", `{"tier":"pro","limits":{"requests_per_hour":60}}`, 400,
			`{"message":"requests_per_hour (60) is below requests_per_minute (100): the hour would refuse first"}`},
	} {
		rec := e.do(s.method, s.path, s.body, true)
		if rec.Code != s.status || !strings.Contains(rec.Body.String(), s.want) {
			t.Fatalf("%s: %s %s: %d %s, want %d with %s", s.name, s.method, s.path, rec.Code, rec.Body, s.status, s.want)
		}
	}
}
