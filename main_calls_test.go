package main

import (
	"strings"
	"testing"
)

// TestRunCallTimeout: -call-timeout reaches the service, on the service's
// clock: a call never finished holds its max_concurrent slot until the
// timeout, and the first check after it finds the slot free. The gauge of
// calls in flight follows.
func TestRunCallTimeout(t *testing.T) {
	url, _ := startWithEnv(t, nil, "-test-clock", "-call-timeout", "2m")
	if status, body := call(t, "PUT", url+"/v1/tiers/solo", `{"requests_per_minute":100,"requests_per_hour":1000,"requests_per_day":1000,"burst_allowance":0,"max_concurrent":1}`, true); status != 201 {
		t.Fatalf("put tier: %d %s", status, body)
	}
	check := `{"context":{"user_id":"u","user_tier":"solo"},"tokens":5}`
	for _, step := range []struct {
		advance string
		status  int
		want    string
	}{
		{"", 200, `"concurrency":{"limit":1,"in_flight":1}`},
		{"119s", 429, `"reason":"concurrent call limit exceeded"`},
		{"1s", 200, `"concurrency":{"limit":1,"in_flight":1}`},
	} {
		if step.advance != "" {
			if status, body := call(t, "POST", url+"/v1/test/clock", `{"advance":"`+step.advance+`"}`, true); status != 200 {
				t.Fatalf("advance: %d %s", status, body)
			}
		}
		if status, body := call(t, "POST", url+"/v1/check", check, false); status != step.status || !strings.Contains(body, step.want) {
			t.Fatalf("after %s: %d %s, want %d %s", step.advance, status, body, step.status, step.want)
		}
	}
	if _, body := call(t, "GET", url+"/metrics", "", false); !strings.Contains(body, "\npolicyguard_calls_in_flight 1\n") || !strings.Contains(body, "\npolicyguard_calls_opened_total 2\n") {
		t.Errorf("metrics:\n%s", grepLines(body, "policyguard_calls"))
	}
}
