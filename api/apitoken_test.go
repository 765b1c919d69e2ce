package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/policyguard/policyguard/api"
)

// TestAPIToken checks that with Config.APIToken every check needs it, that
// a refused check records nothing and never echoes a token, and that the
// admin API keeps its own token.
func TestAPIToken(t *testing.T) {
	const apiToken = "service-key-for-agents"
	e := newGuardEnv(t, api.Config{APIToken: apiToken})
	body := `{"context":{"user_id":"agent"}}`
	for _, tc := range []struct {
		name, auth string
		status     int
	}{
		{"none", "", 401},
		{"wrong", "Bearer wrong-key", 401},
		{"admin token", "Bearer " + adminToken, 401},
		{"prefix", "Bearer " + apiToken[:len(apiToken)-1], 401},
		{"longer", "Bearer " + apiToken + "x", 401},
		{"other scheme", "Basic " + apiToken, 401},
		{"empty bearer", "Bearer ", 401},
		{"right", "Bearer " + apiToken, 200},
		{"scheme in lower case", "bearer " + apiToken, 200},
	} {
		for _, path := range []string{"/v1/check", "/v1/check?dry_run=true"} {
			before := e.requests.recorded.Load()
			rec := e.send("POST", path, body, map[string]string{"Authorization": tc.auth})
			if rec.Code != tc.status {
				t.Fatalf("%s %s: %d %s, want %d", tc.name, path, rec.Code, rec.Body, tc.status)
			}
			if tc.status == 401 {
				if got := message(rec); got != "missing or wrong API token" {
					t.Errorf("%s: message %q", tc.name, got)
				}
				if rec.Header().Get("WWW-Authenticate") == "" {
					t.Errorf("%s: 401 without WWW-Authenticate", tc.name)
				}
				if e.requests.recorded.Load() != before {
					t.Fatalf("%s: a refused check was recorded", tc.name)
				}
			}
			for _, secret := range []string{apiToken, adminToken} {
				if strings.Contains(rec.Body.String(), secret) || strings.Contains(strings.Join(headerValues(rec.Header()), " "), secret) {
					t.Errorf("%s: answer carries a token", tc.name)
				}
			}
		}
	}
	if got := e.dayCount("agent"); got != 2 {
		t.Fatalf("agent has %d requests, want 2 (the two right-token checks)", got)
	}
	// The API token opens checks only: the admin API still wants the admin
	// token, and health is open.
	if rec := e.send("GET", "/v1/tiers", "", map[string]string{"Authorization": "Bearer " + apiToken}); rec.Code != 401 {
		t.Fatalf("admin API with the API token: %d", rec.Code)
	}
	if rec := e.send("GET", "/v1/tiers", "", map[string]string{"Authorization": "Bearer " + adminToken}); rec.Code != 200 {
		t.Fatalf("admin API with the admin token: %d", rec.Code)
	}
	if rec := e.send("GET", "/healthz", "", nil); rec.Code != 200 {
		t.Fatalf("healthz: %d", rec.Code)
	}
	if strings.Contains(e.logs.String(), apiToken) {
		t.Fatalf("the log carries the API token:\n%s", e.logs)
	}
}

// TestNoAPITokenLeavesChecksOpen: without Config.APIToken a check needs no
// credentials, and any it carries are ignored.
func TestNoAPITokenLeavesChecksOpen(t *testing.T) {
	e := newGuardEnv(t, api.Config{})
	for _, auth := range []string{"", "Bearer anything"} {
		if rec := e.send("POST", "/v1/check", `{}`, map[string]string{"Authorization": auth}); rec.Code != 200 {
			t.Fatalf("with %q: %d %s", auth, rec.Code, rec.Body)
		}
	}
}

func headerValues(h http.Header) []string {
	var out []string
	for _, vs := range h {
		out = append(out, vs...)
	}
	return out
}
