package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

const adminToken = "test-admin-token"

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func decode[T any](t *testing.T, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("decode %q: %v", rec.Body.String(), err)
	}
	return v
}

type decision struct {
	Allowed    bool    `json:"allowed"`
	Reason     *string `json:"reason"`
	RetryAfter int64   `json:"retry_after"`
	Tier       string  `json:"tier"`
	Guardrail  string  `json:"guardrail"`
	Windows    map[string]struct {
		Limit, Remaining, Reset int64
	} `json:"windows"`
}

func TestLessonCheckOverHTTP(t *testing.T) {
	e := newEnv(t)
	e.putTier("lesson", `{"requests_per_minute":3,"requests_per_hour":1000,"requests_per_day":10000,"burst_allowance":0}`)
	body := `{"input_text":"hello","context":{"user_id":"alice","user_tier":"lesson"}}`
	for i := 0; i < 3; i++ {
		rec := e.do(http.MethodPost, "/v1/check", body, false)
		d := decode[decision](t, rec)
		if rec.Code != http.StatusOK || !d.Allowed || d.Reason != nil || d.RetryAfter != 0 {
			t.Fatalf("call %d: %d %s", i+1, rec.Code, rec.Body)
		}
		if got, want := d.Windows["minute"].Remaining, int64(2-i); got != want {
			t.Fatalf("call %d: minute remaining %d, want %d", i+1, got, want)
		}
		e.clock.Advance(time.Millisecond)
	}
	rec := e.do(http.MethodPost, "/v1/check", body, false)
	d := decode[decision](t, rec)
	if rec.Code != http.StatusTooManyRequests || d.Allowed || d.Reason == nil || *d.Reason != "per-minute limit exceeded" || d.RetryAfter != 60 {
		t.Fatalf("fourth call: %d %s", rec.Code, rec.Body)
	}
	if got := rec.Header().Get("Retry-After"); got != "60" {
		t.Fatalf("Retry-After = %q, want 60", got)
	}
	if d.Tier != "lesson" || d.Guardrail != "rate_limiter" {
		t.Fatalf("tier/guardrail = %q/%q", d.Tier, d.Guardrail)
	}
	// Exactly the body the issue promises, field for field.
	var raw map[string]any
	json.Unmarshal(rec.Body.Bytes(), &raw)
	for _, k := range []string{"allowed", "reason", "retry_after", "tier", "guardrail", "windows"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("answer lacks %q: %s", k, rec.Body)
		}
	}
	// Only admitted requests were recorded.
	rec = e.do(http.MethodGet, "/v1/usage/alice", "", true)
	if !strings.Contains(rec.Body.String(), `"minute":{"count":3,"tokens":{"used":0},"cost":{"used":"0"}}`) {
		t.Fatalf("usage = %s", rec.Body)
	}
}

func TestCheckStatuses(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name   string
		path   string
		body   string
		status int
		want   string
	}{
		{"admitted with defaults", "/v1/check", `{"input_text":"hi"}`, 200, `"tier":"free"`},
		{"empty context", "/v1/check", `{"context":{}}`, 200, `"allowed":true`},
		{"null fields are missing fields", "/v1/check", `{"context":{"user_id":null,"user_tier":null}}`, 200, `"tier":"free"`},
		{"extra context fields are ignored", "/v1/check", `{"context":{"session":"x","model":"m"}}`, 200, `"allowed":true`},
		{"feature outside plan", "/v1/check", `{"context":{"user_id":"f","feature":"search"}}`, 403, `feature \"search\" is not included in tier \"free\"`},
		{"unknown tier", "/v1/check", `{"context":{"user_tier":"gold"}}`, 400, `unknown tier \"gold\"`},
		{"malformed JSON", "/v1/check", `{"context":`, 400, `malformed JSON`},
		{"not an object", "/v1/check", `[1,2]`, 400, `must be a JSON object`},
		{"string body", "/v1/check", `"hi"`, 400, `must be a JSON object`},
		{"empty body", "/v1/check", ``, 400, `request body is empty`},
		{"wrong type", "/v1/check", `{"context":{"user_id":5}}`, 400, `context.user_id must be a string`},
		{"wrong type for context", "/v1/check", `{"context":"x"}`, 400, `context must be an object`},
		{"trailing data", "/v1/check", `{} {}`, 400, `single JSON object`},
		{"user id too long", "/v1/check", `{"context":{"user_id":"` + strings.Repeat("u", 257) + `"}}`, 400, `user_id must be at most 256 bytes`},
		{"bad dry_run", "/v1/check?dry_run=maybe", `{}`, 400, `dry_run must be true or false`},
		{"oversized body", "/v1/check", `{"input_text":"` + strings.Repeat("a", 1<<20) + `"}`, 413, `larger than 1048576 bytes`},
		{"wrong method", "/v1/check", ``, 405, `message`},
		{"unknown route", "/v2/nothing", ``, 404, `message`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := http.MethodPost
			if tc.name == "wrong method" {
				method = http.MethodGet
			}
			if tc.name == "unknown route" {
				method = http.MethodGet
			}
			rec := e.do(method, tc.path, tc.body, false)
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.want) {
				t.Fatalf("got %d %s, want %d containing %s", rec.Code, rec.Body, tc.status, tc.want)
			}
			if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Fatalf("Content-Type = %q", ct)
			}
			if tc.status >= 400 && tc.status != 403 {
				var body struct{ Message string }
				if json.Unmarshal(rec.Body.Bytes(), &body); body.Message == "" {
					t.Fatalf("error without a message: %s", rec.Body)
				}
			}
		})
	}
	// None of the refused or failed requests above were recorded: only the
	// four admitted anonymous ones.
	rec := e.do(http.MethodGet, "/v1/usage/anonymous", "", true)
	if !strings.Contains(rec.Body.String(), `"day":{"count":4,"tokens":{"used":0},"cost":{"used":"0"}}`) {
		t.Fatalf("anonymous usage = %s", rec.Body)
	}
	if rec := e.do(http.MethodGet, "/v1/usage/f", "", true); !strings.Contains(rec.Body.String(), `"day":{"count":0,"tokens":{"used":0},"cost":{"used":"0"}}`) {
		t.Fatalf("a 403 consumed quota: %s", rec.Body)
	}
}

func TestDryRunRecordsNothing(t *testing.T) {
	e := newEnv(t)
	for i := 0; i < 3; i++ {
		rec := e.do(http.MethodPost, "/v1/check?dry_run=true", `{"context":{"user_id":"d"}}`, false)
		if d := decode[decision](t, rec); rec.Code != 200 || d.Windows["minute"].Remaining != 14 {
			t.Fatalf("dry run: %d %s", rec.Code, rec.Body)
		}
	}
	if rec := e.do(http.MethodGet, "/v1/usage/d", "", true); !strings.Contains(rec.Body.String(), `"day":{"count":0,"tokens":{"used":0},"cost":{"used":"0"}}`) {
		t.Fatalf("dry run recorded: %s", rec.Body)
	}
}

func TestAdminAuth(t *testing.T) {
	e := newEnv(t)
	for i, tc := range []struct {
		method, path, auth string
	}{
		{"GET", "/v1/tiers", ""},
		{"GET", "/v1/tiers", "Bearer wrong"},
		{"GET", "/v1/tiers", "Basic " + adminToken},
		{"GET", "/v1/tiers", "Bearer " + adminToken + "x"},
		{"GET", "/v1/tiers/free", ""},
		{"PUT", "/v1/tiers/free", "Bearer"},
		{"DELETE", "/v1/tiers/pro", ""},
		{"GET", "/v1/usage/u", "Bearer " + strings.ToUpper(adminToken)},
		{"DELETE", "/v1/usage/u", ""},
	} {
		req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(`{}`))
		req.RemoteAddr = fmt.Sprintf("192.0.2.%d:1234", i+10) // each its own client, below the throttle
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		rec := httptest.NewRecorder()
		e.srv.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), `"message"`) {
			t.Errorf("%s %s with %q: %d %s, want 401", tc.method, tc.path, tc.auth, rec.Code, rec.Body)
		}
		if strings.Contains(rec.Body.String(), adminToken) {
			t.Errorf("error body contains the token")
		}
	}
	if rec := e.do("GET", "/v1/tiers/pro", "", true); rec.Code != 200 {
		t.Fatalf("PRO tier with the right token: %d", rec.Code)
	}
	// The scheme is case-insensitive and the token is read without the
	// spaces and tabs around it.
	for _, header := range []string{"bearer " + adminToken, "BEARER  " + adminToken + " \t"} {
		req := httptest.NewRequest(http.MethodGet, "/v1/tiers/pro", nil)
		req.Header.Set("Authorization", header)
		rec := httptest.NewRecorder()
		e.srv.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Errorf("GET /v1/tiers/pro with %q: %d %s, want 200", header, rec.Code, rec.Body)
		}
	}
	if rec := e.do("DELETE", "/v1/tiers/pro", "", false); rec.Code != 401 {
		t.Fatal("deleted without a token")
	}
}

// A server given no admin gate admits no admin token at all, not even an
// empty one.
func TestNoAdminGateAdmitsNoOne(t *testing.T) {
	srv := api.NewServer(api.Config{Service: policy.NewService(nil, nil), Logger: slog.New(slog.DiscardHandler)})
	for _, header := range []string{"", "Bearer ", "Bearer " + adminToken} {
		req := httptest.NewRequest(http.MethodGet, "/v1/tiers", nil)
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized {
			t.Errorf("GET /v1/tiers with %q and no gate: %d, want 401", header, rec.Code)
		}
	}
}

// Wrong admin tokens on the API count in the admin page's sign-in throttle:
// after policy.MaxAdminFailures from one client (an IPv6 client being its /64),
// even the right token waits out the window, and other clients do not.
func TestAdminAPIThrottlesWrongTokens(t *testing.T) {
	e := newEnv(t)
	get := func(remote, token string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/v1/tiers/free", nil)
		req.RemoteAddr = remote
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		e.srv.ServeHTTP(rec, req)
		return rec
	}
	for i := range policy.MaxAdminFailures {
		// Addresses in one /64 are one client.
		remote := fmt.Sprintf("[2001:db8:1:2::%x]:443", i+1)
		if rec := get(remote, "guess"); rec.Code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i+1, rec.Code)
		}
	}
	rec := get("[2001:db8:1:2::99]:443", adminToken)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "900" ||
		!strings.Contains(rec.Body.String(), "too many wrong admin tokens") {
		t.Fatalf("right token after %d wrong ones: %d %s (Retry-After %q), want 429 for 900 s",
			policy.MaxAdminFailures, rec.Code, rec.Body, rec.Header().Get("Retry-After"))
	}
	if rec := get("[2001:db8:1:3::1]:443", adminToken); rec.Code != http.StatusOK {
		t.Fatalf("another /64: %d, want 200", rec.Code)
	}
	if rec := get("192.0.2.7:1234", adminToken); rec.Code != http.StatusOK {
		t.Fatalf("another client: %d, want 200", rec.Code)
	}
	e.clock.Advance(policy.AdminFailureWindow)
	if rec := get("[2001:db8:1:2::99]:443", adminToken); rec.Code != http.StatusOK {
		t.Fatalf("after the window: %d, want 200", rec.Code)
	}
}

func TestTierAPI(t *testing.T) {
	e := newEnv(t)
	limits := `"requests_per_minute":3,"requests_per_hour":30,"requests_per_day":300,"burst_allowance":1`
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		want                     string
	}{
		{"list seeded", "GET", "/v1/tiers", "", 200, `"name":"enterprise"`},
		{"get", "GET", "/v1/tiers/pro", "", 200, `"features":["chat","search","summarize"]`},
		{"get missing", "GET", "/v1/tiers/gold", "", 404, `tier \"gold\" not found`},
		{"create", "PUT", "/v1/tiers/team", `{` + limits + `,"features":["chat"],"description":"Team"}`, 201, `"name":"team"`},
		{"defaults", "PUT", "/v1/tiers/bare", `{` + limits + `}`, 201, `"features":[],"models":null,"description":""`},
		{"replace", "PUT", "/v1/tiers/team", `{"name":"team",` + limits + `}`, 200, `"features":[]`},
		{"name mismatch", "PUT", "/v1/tiers/team", `{"name":"other",` + limits + `}`, 400, `does not match`},
		{"bad name", "PUT", "/v1/tiers/Bad!", `{` + limits + `}`, 400, `tier name must match`},
		{"name too long", "PUT", "/v1/tiers/" + strings.Repeat("a", 64), `{` + limits + `}`, 400, `tier name must match`},
		{"missing limit", "PUT", "/v1/tiers/x", `{"requests_per_minute":1,"requests_per_hour":1,"requests_per_day":1}`, 400, `burst_allowance is required`},
		{"fraction", "PUT", "/v1/tiers/x", `{"requests_per_minute":1.5,"requests_per_hour":1,"requests_per_day":1,"burst_allowance":0}`, 400, `requests_per_minute must be an integer from 0 to 2147483647`},
		{"exponent", "PUT", "/v1/tiers/x", `{"requests_per_minute":1e3,"requests_per_hour":1,"requests_per_day":1,"burst_allowance":0}`, 400, `requests_per_minute must be an integer`},
		{"negative", "PUT", "/v1/tiers/x", `{"requests_per_minute":1,"requests_per_hour":-1,"requests_per_day":1,"burst_allowance":0}`, 400, `requests_per_hour must be an integer`},
		{"too large", "PUT", "/v1/tiers/x", `{"requests_per_minute":1,"requests_per_hour":1,"requests_per_day":2147483648,"burst_allowance":0}`, 400, `requests_per_day must be an integer`},
		{"string limit", "PUT", "/v1/tiers/x", `{"requests_per_minute":"5","requests_per_hour":1,"requests_per_day":1,"burst_allowance":0}`, 400, `requests_per_minute must be an integer`},
		{"null required limit", "PUT", "/v1/tiers/x", `{"requests_per_minute":1,"requests_per_hour":1,"requests_per_day":1,"burst_allowance":null}`, 400, `burst_allowance must be an integer from 0 to 2147483647 (only the optional limits can be null)`},
		{"null shadow limit", "PUT", "/v1/tiers/x", `{` + limits + `,"shadow":{"requests_per_minute":null,"requests_per_hour":1,"requests_per_day":1,"burst_allowance":0}}`, 400, `shadow.requests_per_minute must be an integer from 0 to 2147483647 (only`},
		{"unknown field", "PUT", "/v1/tiers/x", `{` + limits + `,"colour":"red"}`, 400, `unknown field \"colour\"`},
		{"field in other case", "PUT", "/v1/tiers/x", `{"requests_per_minute":1,"requests_per_hour":1,"requests_per_dAY":1,"burst_allowance":0}`, 400, `unknown field \"requests_per_dAY\"`},
		{"features wrong type", "PUT", "/v1/tiers/x", `{` + limits + `,"features":"chat"}`, 400, `features must be an array of strings`},
		{"bad feature", "PUT", "/v1/tiers/x", `{` + limits + `,"features":["a b"]}`, 400, `feature \"a b\"`},
		{"description wrong type", "PUT", "/v1/tiers/x", `{` + limits + `,"description":7}`, 400, `description must be a string`},
		{"delete", "DELETE", "/v1/tiers/bare", "", 204, ``},
		{"delete missing", "DELETE", "/v1/tiers/bare", "", 404, `not found`},
		{"delete default", "DELETE", "/v1/tiers/free", "", 409, `default tier`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := e.do(tc.method, tc.path, tc.body, true)
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.want) {
				t.Fatalf("got %d %s, want %d containing %s", rec.Code, rec.Body, tc.status, tc.want)
			}
		})
	}
	if rec := e.do("GET", "/v1/tiers/x", "", true); rec.Code != 404 {
		t.Fatal("a refused PUT created the tier")
	}
}

// PUT with If-None-Match: * creates only: it never replaces a tier that
// exists, however it got there.
func TestTierPutIfNoneMatch(t *testing.T) {
	e := newEnv(t)
	put := func(body, ifNoneMatch string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPut, "/v1/tiers/team", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+adminToken)
		req.Header.Set("If-None-Match", ifNoneMatch)
		rec := httptest.NewRecorder()
		e.srv.ServeHTTP(rec, req)
		return rec
	}
	limits := func(perMinute int) string {
		return fmt.Sprintf(`{"requests_per_minute":%d,"requests_per_hour":30,"requests_per_day":300,"burst_allowance":1}`, perMinute)
	}
	if rec := put(limits(3), "*"); rec.Code != http.StatusCreated {
		t.Fatalf("create-only PUT of a new tier: %d %s, want 201", rec.Code, rec.Body)
	}
	for _, header := range []string{"*", `"x", *`} {
		rec := put(limits(4), header)
		if rec.Code != http.StatusPreconditionFailed || !strings.Contains(rec.Body.String(), `tier \"team\" already exists`) {
			t.Fatalf("If-None-Match: %s on an existing tier: %d %s, want 412 saying it exists", header, rec.Code, rec.Body)
		}
	}
	if got := decode[map[string]any](t, e.do("GET", "/v1/tiers/team", "", true)); got["requests_per_minute"] != 3.0 {
		t.Fatalf("a refused create-only PUT changed the tier: %v", got)
	}
	// An entity tag never matches, as tiers have none: the PUT goes ahead.
	if rec := put(limits(5), `"v1"`); rec.Code != http.StatusOK {
		t.Fatalf("If-None-Match with an entity tag: %d %s, want 200", rec.Code, rec.Body)
	}
	if got := decode[map[string]any](t, e.do("GET", "/v1/tiers/team", "", true)); got["requests_per_minute"] != 5.0 {
		t.Fatalf("requests_per_minute %v, want 5", got["requests_per_minute"])
	}
}

func TestTierEditAppliesToNextCheck(t *testing.T) {
	e := newEnv(t)
	body := `{"context":{"user_id":"u","user_tier":"team"}}`
	e.putTier("team", `{"requests_per_minute":2,"requests_per_hour":100,"requests_per_day":100,"burst_allowance":0}`)
	e.do("POST", "/v1/check", body, false)
	e.clock.Advance(time.Second)
	e.do("POST", "/v1/check", body, false)
	if rec := e.do("POST", "/v1/check", body, false); rec.Code != 429 {
		t.Fatalf("third check at 2/min: %d", rec.Code)
	}
	e.putTier("team", `{"requests_per_minute":3,"requests_per_hour":100,"requests_per_day":100,"burst_allowance":0}`)
	e.clock.Advance(time.Second)
	if rec := e.do("POST", "/v1/check", body, false); rec.Code != 200 {
		t.Fatalf("check after raising the limit: %d %s", rec.Code, rec.Body)
	}
	// Lowered below the current count: refused, and retry_after is when
	// enough requests have left the window (the third, at +2s), not a
	// fixed 60.
	e.clock.Advance(30 * time.Second)
	e.putTier("team", `{"requests_per_minute":1,"requests_per_hour":100,"requests_per_day":100,"burst_allowance":0}`)
	rec := e.do("POST", "/v1/check", body, false)
	if d := decode[decision](t, rec); rec.Code != 429 || d.RetryAfter != 30 || d.Windows["minute"].Limit != 1 {
		t.Fatalf("after lowering: %d %s", rec.Code, rec.Body)
	}
}

func TestUsageAPI(t *testing.T) {
	e := newEnv(t)
	for i := 0; i < 3; i++ {
		e.do("POST", "/v1/check", `{"context":{"user_id":"u 1/é"}}`, false)
		e.clock.Advance(10 * time.Second)
	}
	path := "/v1/usage/u%201%2F%C3%A9"
	rec := e.do("GET", path, "", true)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"user_id":"u 1/é","windows":{"minute":{"count":3,"tokens":{"used":0},"cost":{"used":"0"}},"hour":{"count":3,"tokens":{"used":0},"cost":{"used":"0"}},"day":{"count":3,"tokens":{"used":0},"cost":{"used":"0"}},"month":{"start":"2026-03-01T00:00:00Z","end":"2026-04-01T00:00:00Z","count":3,"tokens":{"used":0},"cost":{"used":"0"}}},"calls_in_flight":0`) {
		t.Fatalf("usage: %d %s", rec.Code, rec.Body)
	}
	rec = e.do("GET", path+"?tier=free", "", true)
	if !strings.Contains(rec.Body.String(), `"minute":{"count":3,"limit":15,"remaining":12,"reset":30,"tokens":{"used":0},"cost":{"used":"0"}}`) {
		t.Fatalf("usage with tier: %s", rec.Body)
	}
	if rec := e.do("GET", path+"?tier=gold", "", true); rec.Code != 400 || !strings.Contains(rec.Body.String(), "unknown tier") {
		t.Fatalf("usage with unknown tier: %d %s", rec.Code, rec.Body)
	}
	if rec := e.do("DELETE", path, "", true); rec.Code != 204 {
		t.Fatalf("forget: %d", rec.Code)
	}
	if rec := e.do("GET", path, "", true); !strings.Contains(rec.Body.String(), `"day":{"count":0,"tokens":{"used":0},"cost":{"used":"0"}}`) {
		t.Fatalf("after forget: %s", rec.Body)
	}
	if rec := e.do("GET", "/v1/usage/"+strings.Repeat("u", 257), "", true); rec.Code != 400 {
		t.Fatalf("long user id: %d", rec.Code)
	}
}

func TestHealth(t *testing.T) {
	e := newEnv(t)
	if rec := e.do("GET", "/healthz", "", false); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"ok"`) {
		t.Fatalf("healthz: %d %s", rec.Code, rec.Body)
	}
	e.store.Close()
	if rec := e.do("GET", "/healthz", "", false); rec.Code != 503 {
		t.Fatalf("healthz on a closed store: %d %s", rec.Code, rec.Body)
	}
	if rec := e.do("POST", "/v1/check", `{}`, false); rec.Code != 503 || !strings.Contains(rec.Body.String(), "storage failed") {
		t.Fatalf("check on a closed store: %d %s", rec.Code, rec.Body)
	}
}

// Behind a proxy named in TrustedProxies, each client is throttled on its
// own address from X-Forwarded-For; without one, X-Forwarded-For is
// ignored, as anyone can send it.
func TestTrustedProxiesNameTheClient(t *testing.T) {
	store, err := db.Open(context.Background(), dbtest.DSN(t, "test.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	_, proxies, _ := net.ParseCIDR("10.0.0.0/8")
	newServer := func(trusted ...*net.IPNet) *api.Server {
		return api.NewServer(api.Config{
			Service:        policy.NewService(store, store, policy.WithClock(func() time.Time { return t0 })),
			Admin:          policy.NewAdminGate(adminToken),
			Logger:         slog.New(slog.DiscardHandler),
			TrustedProxies: trusted,
		})
	}
	get := func(srv *api.Server, remote, xff, token string) int {
		req := httptest.NewRequest(http.MethodGet, "/v1/tiers/free", nil)
		req.RemoteAddr = remote
		if xff != "" {
			req.Header.Set("X-Forwarded-For", xff)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		return rec.Code
	}

	behind := newServer(proxies)
	for range policy.MaxAdminFailures {
		get(behind, "10.0.0.5:3000", "198.51.100.7", "guess")
	}
	if got := get(behind, "10.0.0.5:3000", "198.51.100.7", adminToken); got != http.StatusTooManyRequests {
		t.Errorf("the guessing client through the proxy: %d, want 429", got)
	}
	if got := get(behind, "10.0.0.5:3000", "203.0.113.9", adminToken); got != http.StatusOK {
		t.Errorf("another client through the same proxy: %d, want 200", got)
	}
	// A client that claims an address is still itself when it is not a
	// trusted proxy: the address it claims is not locked out.
	for range policy.MaxAdminFailures {
		get(behind, "192.0.2.50:3000", "203.0.113.9", "guess")
	}
	if got := get(behind, "10.0.0.5:3000", "203.0.113.9", adminToken); got != http.StatusOK {
		t.Errorf("a client spoofing X-Forwarded-For locked out the address it named: %d, want 200", got)
	}

	direct := newServer()
	for i := range policy.MaxAdminFailures {
		get(direct, "192.0.2.60:3000", fmt.Sprintf("198.51.100.%d", i), "guess") // a fresh claimed address each time
	}
	if got := get(direct, "192.0.2.60:3000", "198.51.100.99", adminToken); got != http.StatusTooManyRequests {
		t.Errorf("without trusted proxies X-Forwarded-For escaped the throttle: %d, want 429", got)
	}
}

// A request without a token guesses nothing, so it is a 401 that does not
// count toward the throttle: anyone at a shared address (NAT, a proxy not
// named as trusted) sending such requests cannot lock out the admins there.
func TestAdminAPINoTokenIsNotCounted(t *testing.T) {
	e := newEnv(t)
	get := func(header string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/v1/tiers/free", nil)
		req.RemoteAddr = "192.0.2.77:443"
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		rec := httptest.NewRecorder()
		e.srv.ServeHTTP(rec, req)
		return rec
	}
	for i := range 3 * policy.MaxAdminFailures {
		header := []string{"", "Bearer ", "Basic dXNlcjpwYXNz"}[i%3]
		if rec := get(header); rec.Code != http.StatusUnauthorized || rec.Header().Get("Retry-After") != "" {
			t.Fatalf("request %d without a token (Authorization %q): %d (Retry-After %q), want 401 without Retry-After",
				i+1, header, rec.Code, rec.Header().Get("Retry-After"))
		}
	}
	if rec := get("Bearer " + adminToken); rec.Code != http.StatusOK {
		t.Fatalf("the right token after %d requests without one: %d %s, want 200", 3*policy.MaxAdminFailures, rec.Code, rec.Body)
	}
}

// openCall checks once for user under tier, reserving tokens, and returns
// the id of the call the admitted check opened.
func (e *env) openCall(user, tier string, tokens int64) string {
	e.t.Helper()
	rec := e.do(http.MethodPost, "/v1/check", fmt.Sprintf(`{"context":{"user_id":%q,"user_tier":%q},"tokens":%d}`, user, tier, tokens), false)
	d := decode[struct {
		CallID *string `json:"call_id"`
	}](e.t, rec)
	if rec.Code != http.StatusOK || d.CallID == nil {
		e.t.Fatalf("check opened no call: %d %s", rec.Code, rec.Body)
	}
	return *d.CallID
}
