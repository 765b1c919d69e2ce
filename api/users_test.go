package api_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The user record routes, one scenario after another on one server: every
// refusal names its problem and changes nothing.
func TestUserRecordRoutes(t *testing.T) {
	e := newEnv(t)
	steps := []struct {
		name, method, path, body string
		admin                    bool
		status                   int
		want                     string // a fragment of the answer
	}{
		{"no token", "GET", "/v1/users", "", false, 401, "admin token"},
		{"none yet", "GET", "/v1/users/alice", "", true, 404, `user \"alice\" has no record`},
		{"empty list", "GET", "/v1/users", "", true, 200, `{"users":[],"next":null}`},
		{"create", "PUT", "/v1/users/alice", `{"tier":"pro","limits":{"requests_per_minute":2,"tokens_per_day":null,"max_concurrent":3},"note":"pilot"}`, true, 201,
			`{"user_id":"alice","tier":"pro","limits":{"max_concurrent":3,"requests_per_minute":2,"tokens_per_day":null},"note":"pilot","updated_at":"2026-03-01T12:00:00Z"}`},
		{"read", "GET", "/v1/users/alice", "", true, 200, `"tier":"pro"`},
		{"replace", "PUT", "/v1/users/alice", `{"tier":"enterprise","user_id":"alice","updated_at":"2020-01-01T00:00:00Z"}`, true, 200, `"tier":"enterprise","limits":null,"note":""`},
		{"every field optional", "PUT", "/v1/users/bob", `{}`, true, 201, `{"user_id":"bob","tier":null,"limits":null,"note":"","updated_at":"2026-03-01T12:00:00Z"}`},
		{"unknown tier", "PUT", "/v1/users/alice", `{"tier":"gold"}`, true, 400, `unknown tier \"gold\"`},
		{"unknown field", "PUT", "/v1/users/alice", `{"tier":"pro","plan":"x"}`, true, 400, `unknown field \"plan\"`},
		{"unknown limit", "PUT", "/v1/users/alice", `{"limits":{"requests_per_week":1}}`, true, 400, `unknown field \"requests_per_week\" in limits`},
		{"case matters", "PUT", "/v1/users/alice", `{"Tier":"pro"}`, true, 400, `unknown field \"Tier\"`},
		{"negative limit", "PUT", "/v1/users/alice", `{"limits":{"requests_per_hour":-1}}`, true, 400, "limits.requests_per_hour must be an integer from 0 to 2147483647"},
		{"too large", "PUT", "/v1/users/alice", `{"limits":{"tokens_per_minute":2147483648}}`, true, 400, "limits.tokens_per_minute must be an integer from 0 to 2147483647"},
		{"fraction", "PUT", "/v1/users/alice", `{"limits":{"burst_allowance":1.5}}`, true, 400, "limits.burst_allowance must be an integer"},
		{"string limit", "PUT", "/v1/users/alice", `{"limits":{"max_concurrent":"3"}}`, true, 400, "limits.max_concurrent must be an integer"},
		{"null request limit", "PUT", "/v1/users/alice", `{"limits":{"requests_per_day":null}}`, true, 400, "requests_per_day must be an integer from 0 to 2147483647 (only the optional limits can be null)"},
		{"limits not an object", "PUT", "/v1/users/alice", `{"limits":[1]}`, true, 400, "limits must be an object"},
		{"tier not a string", "PUT", "/v1/users/alice", `{"tier":5}`, true, 400, "tier must be a string"},
		{"empty tier", "PUT", "/v1/users/alice", `{"tier":""}`, true, 400, "tier must be null or a tier name"},
		{"bad tier name", "PUT", "/v1/users/alice", `{"tier":"Pro!"}`, true, 400, "tier must be null or match"},
		{"long note", "PUT", "/v1/users/alice", `{"note":"` + strings.Repeat("n", 1025) + `"}`, true, 400, "note must be at most 1024 bytes"},
		{"note not a string", "PUT", "/v1/users/alice", `{"note":1}`, true, 400, "note must be a string"},
		{"id mismatch", "PUT", "/v1/users/alice", `{"user_id":"bob"}`, true, 400, `user_id \"bob\" in the body does not match \"alice\" in the path`},
		{"duplicate key", "PUT", "/v1/users/alice", `{"note":"a","note":"b"}`, true, 400, "duplicate key"},
		{"not JSON", "PUT", "/v1/users/alice", `tier=pro`, true, 400, "must be a JSON object"},
		{"control character in id", "PUT", "/v1/users/a%01b", `{}`, true, 400, "control characters"},
		{"long id", "PUT", "/v1/users/" + strings.Repeat("u", 257), `{}`, true, 400, "at most 256 bytes"},
		{"nothing changed by the refusals", "GET", "/v1/users/alice", "", true, 200, `"tier":"enterprise","limits":null,"note":""`},
		{"tier in use", "DELETE", "/v1/tiers/enterprise", "", true, 409, `tier \"enterprise\" is assigned to 1 user;`},
		{"list", "GET", "/v1/users", "", true, 200, `"user_id":"alice"`},
		{"page of one", "GET", "/v1/users?limit=1", "", true, 200, `"next":"alice"`},
		{"next page", "GET", "/v1/users?limit=1&after=alice", "", true, 200, `{"users":[{"user_id":"bob","tier":null,"limits":null,"note":"","updated_at":"2026-03-01T12:00:00Z"}],"next":null}`},
		{"limit zero", "GET", "/v1/users?limit=0", "", true, 400, "limit must be an integer from 1 to 1000"},
		{"limit too large", "GET", "/v1/users?limit=1001", "", true, 400, "limit must be an integer from 1 to 1000"},
		{"limit not a number", "GET", "/v1/users?limit=ten", "", true, 400, "limit must be an integer from 1 to 1000"},
		{"delete", "DELETE", "/v1/users/alice", "", true, 204, ""},
		{"deleted", "GET", "/v1/users/alice", "", true, 404, "has no record"},
		{"delete again", "DELETE", "/v1/users/alice", "", true, 404, "has no record"},
		{"tier free again", "DELETE", "/v1/tiers/enterprise", "", true, 204, ""},
	}
	for _, s := range steps {
		rec := e.do(s.method, s.path, s.body, s.admin)
		if rec.Code != s.status || !strings.Contains(rec.Body.String(), s.want) {
			t.Fatalf("%s: %s %s: %d %s, want %d with %s", s.name, s.method, s.path, rec.Code, rec.Body, s.status, s.want)
		}
	}
}

// A check of a user with an assigned tier is decided under it whatever the
// check names, with the record's overrides; deleting the record restores
// the check's own tier.
func TestAssignedTierDecidesTheCheck(t *testing.T) {
	e := newEnv(t)
	check := func(want int, fragment string) {
		t.Helper()
		e.clock.Advance(time.Millisecond)
		rec := e.do("POST", "/v1/check", `{"context":{"user_id":"carol","user_tier":"free","feature":"search"}}`, false)
		if rec.Code != want || !strings.Contains(rec.Body.String(), fragment) {
			t.Fatalf("check: %d %s, want %d with %s", rec.Code, rec.Body, want, fragment)
		}
	}
	check(403, `"tier":"free"`)
	if rec := e.do("PUT", "/v1/users/carol", `{"tier":"pro","limits":{"requests_per_minute":1,"burst_allowance":0}}`, true); rec.Code != 201 {
		t.Fatalf("put: %d %s", rec.Code, rec.Body)
	}
	check(200, `"tier":"pro"`)
	check(429, `"reason":"per-minute limit exceeded"`)
	if rec := e.do("DELETE", "/v1/users/carol", "", true); rec.Code != 204 {
		t.Fatalf("delete: %d %s", rec.Code, rec.Body)
	}
	check(403, `"tier":"free"`)
	for i := range 3 {
		if rec := e.do("PUT", fmt.Sprintf("/v1/users/u%d", i), `{"tier":"pro"}`, true); rec.Code != 201 {
			t.Fatalf("put: %d %s", rec.Code, rec.Body)
		}
	}
	if rec := e.do("DELETE", "/v1/tiers/pro", "", true); rec.Code != 409 || !strings.Contains(rec.Body.String(), `tier \"pro\" is assigned to 3 users`) {
		t.Fatalf("delete pro: %d %s", rec.Code, rec.Body)
	}
}
