package api_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/policy"
)

// newTestClockServer returns a server on env's store whose service runs on
// a test clock that starts at t0.
func newTestClockServer(e *env) (*api.Server, *policy.TestClock) {
	clock := policy.NewTestClock(t0)
	return api.NewServer(api.Config{
		Service:   policy.NewService(e.store, e.store, policy.WithClock(clock.Now)),
		Health:    e.store.Ping,
		Admin:     policy.NewAdminGate(adminToken),
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		TestClock: clock,
	}), clock
}

// adminSender returns a function that sends a JSON request with the admin
// token through srv and returns the answer.
func adminSender(srv http.Handler) func(method, path, body string) *httptest.ResponseRecorder {
	return func(method, path, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+adminToken)
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		return rec
	}
}

func TestTestClockRoutes(t *testing.T) {
	e := newEnv(t)
	srv, clock := newTestClockServer(e)
	const (
		start = `{"now":"2026-03-01T12:00:00.000000000Z"}`
		auth  = "Bearer " + adminToken
	)
	if got := t0.Format(time.RFC3339); got != "2026-03-01T12:00:00Z" {
		t.Fatalf("t0 is %s: the answers below assume 2026-03-01T12:00:00Z", got)
	}
	for _, tc := range []struct {
		method, body, auth string
		status             int
		want               string // the whole body, or a fragment of a message
	}{
		{"GET", "", auth, 200, start},
		{"GET", "", "", 401, "missing or wrong admin token"},
		{"POST", `{"advance":"90s"}`, "", 401, "missing or wrong admin token"},
		{"POST", `{"advance":"90s"}`, auth, 200, `{"now":"2026-03-01T12:01:30.000000000Z"}`},
		{"POST", `{"advance":"1.5µs"}`, auth, 200, `{"now":"2026-03-01T12:01:30.000001500Z"}`},
		{"POST", `{"advance":"0s"}`, auth, 200, `{"now":"2026-03-01T12:01:30.000001500Z"}`},
		{"GET", "", auth, 200, `{"now":"2026-03-01T12:01:30.000001500Z"}`},
		{"POST", `{"set":"2026-03-01T11:00:00Z"}`, auth, 200, `{"now":"2026-03-01T11:00:00.000000000Z"}`}, // back an hour
		{"POST", `{"set":"2026-03-01T13:00:00.25+01:00"}`, auth, 200, `{"now":"2026-03-01T12:00:00.250000000Z"}`},
		{"POST", `{"advance":"-1s"}`, auth, 400, "must not be negative; use set"},
		{"POST", `{"advance":"soon"}`, auth, 400, "not a Go duration"},
		{"POST", `{"advance":90}`, auth, 400, "advance must be a string"},
		{"POST", `{"set":"yesterday"}`, auth, 400, "not an RFC 3339 time"},
		{"POST", `{"set":"2026-03-01 12:00:00"}`, auth, 400, "not an RFC 3339 time"},
		{"POST", `{"advance":"1s","set":"2026-03-01T12:00:00Z"}`, auth, 400, "exactly one of"},
		{"POST", `{}`, auth, 400, "exactly one of"},
		{"POST", `{"advance":null}`, auth, 400, "exactly one of"},
		{"POST", `{"advance":"1s","by":"me"}`, auth, 400, `unknown field \"by\"`},
		{"POST", `{"Advance":"1s"}`, auth, 400, `unknown field \"Advance\"`},
		{"POST", `{"advance":"1s"}{}`, auth, 400, "single JSON object"},
		{"POST", ``, auth, 400, "request body is empty"},
		{"POST", `[]`, auth, 400, "must be a JSON object"},
		{"GET", "", auth, 200, `{"now":"2026-03-01T12:00:00.250000000Z"}`}, // no refusal moved it
	} {
		req := httptest.NewRequest(tc.method, "/v1/test/clock", strings.NewReader(tc.body))
		if tc.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		got := strings.TrimSpace(rec.Body.String())
		if rec.Code != tc.status || (tc.status == 200 && got != tc.want) || !strings.Contains(got, tc.want) {
			t.Errorf("%s %s: %d %s, want %d %s", tc.method, tc.body, rec.Code, got, tc.status, tc.want)
		}
	}
	if got, want := clock.Now(), t0.Add(250*time.Millisecond); !got.Equal(want) {
		t.Errorf("clock reads %v, want %v", got, want)
	}
}

// TestTestClockMovesWindows checks that the service decides on the test
// clock: a refusal's retry_after, waited out on the clock, admits.
func TestTestClockMovesWindows(t *testing.T) {
	e := newEnv(t)
	e.putTier("one", `{"requests_per_minute":1,"requests_per_hour":10,"requests_per_day":10,"burst_allowance":0}`)
	srv, _ := newTestClockServer(e)
	send := adminSender(srv)
	check := `{"context":{"user_id":"tc","user_tier":"one"}}`
	for i, want := range []int{200, 429} {
		if rec := send("POST", "/v1/check", check); rec.Code != want {
			t.Fatalf("check %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	if rec := send("POST", "/v1/test/clock", `{"advance":"59s"}`); rec.Code != 200 {
		t.Fatalf("advance: %d %s", rec.Code, rec.Body)
	}
	if rec := send("POST", "/v1/check", check); rec.Code != 429 || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("after 59s: %d Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
	}
	send("POST", "/v1/test/clock", `{"advance":"1s"}`)
	if rec := send("POST", "/v1/check", check); rec.Code != 200 {
		t.Fatalf("after 60s: %d %s", rec.Code, rec.Body)
	}
}

// TestNoTestClockNoRoutes checks that a server on a real clock has no test
// clock routes and says nothing of one in /healthz.
func TestNoTestClockNoRoutes(t *testing.T) {
	e := newEnv(t)
	for _, method := range []string{"GET", "POST"} {
		rec := e.do(method, "/v1/test/clock", `{"advance":"1s"}`, true)
		if rec.Code != http.StatusNotFound {
			t.Errorf("%s /v1/test/clock: %d, want 404", method, rec.Code)
		}
	}
	if rec := e.do("GET", "/healthz", "", false); strings.TrimSpace(rec.Body.String()) != `{"status":"ok"}` {
		t.Errorf("healthz: %s", rec.Body)
	}
	srv, _ := newTestClockServer(e)
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if got := strings.TrimSpace(rec.Body.String()); got != `{"status":"ok","test_clock":true}` {
		t.Errorf("healthz on a test clock: %s", got)
	}
}

// testClockServer is newTestClockServer's server: it answers every route
// of the service, the test clock's included.
func testClockServer(e *env) *api.Server {
	srv, _ := newTestClockServer(e)
	return srv
}

// throttledTestClockServer is a test clock server this client has already
// sent too many wrong admin tokens.
func throttledTestClockServer(e *env) *api.Server {
	srv := testClockServer(e)
	for range policy.MaxAdminFailures {
		send(srv, "GET", "/v1/test/clock", "", map[string]string{"Authorization": "Bearer wrong"})
	}
	return srv
}

// TestTestClockRequestsAtOneInstantLeaveTogether fills a window with
// checks at one instant and moves the clock by exactly the window, in one
// step or in steps that add up to it: the requests leave together, as the
// lesson's t > now - window counts them, and the window admits its ceiling
// again.
func TestTestClockRequestsAtOneInstantLeaveTogether(t *testing.T) {
	for _, tc := range []struct {
		name, limits string
		ceiling      int
		steps        []string
		retry        string // the full window's Retry-After at the first instant
	}{
		{"minute", `{"requests_per_minute":3,"requests_per_hour":100,"requests_per_day":1000,"burst_allowance":0}`, 3, []string{"60s"}, "60"},
		{"minute in halves", `{"requests_per_minute":3,"requests_per_hour":100,"requests_per_day":1000,"burst_allowance":0}`, 3, []string{"30s", "30s"}, "60"},
		{"hour", `{"requests_per_minute":3,"requests_per_hour":3,"requests_per_day":1000,"burst_allowance":0}`, 3, []string{"1h"}, "3600"},
		{"hour in steps", `{"requests_per_minute":3,"requests_per_hour":3,"requests_per_day":1000,"burst_allowance":0}`, 3, []string{"59m", "59s", "1s"}, "3600"},
		{"day", `{"requests_per_minute":5,"requests_per_hour":5,"requests_per_day":5,"burst_allowance":0}`, 5, []string{"24h"}, "86400"},
		{"day in steps", `{"requests_per_minute":5,"requests_per_hour":5,"requests_per_day":5,"burst_allowance":0}`, 5, []string{"12h", "11h59m", "60s"}, "86400"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.putTier("instant", tc.limits)
			srv, _ := newTestClockServer(e)
			send := adminSender(srv)
			check := `{"context":{"user_id":"burst","user_tier":"instant"}}`
			fill := func(when string) {
				t.Helper()
				for i := range tc.ceiling {
					if rec := send("POST", "/v1/check", check); rec.Code != 200 {
						t.Fatalf("%s, check %d: %d %s", when, i+1, rec.Code, rec.Body)
					}
				}
				// Every window that is full frees at once, a whole window on.
				rec := send("POST", "/v1/check", check)
				if rec.Code != 429 || rec.Header().Get("Retry-After") != tc.retry {
					t.Fatalf("%s, check %d: %d Retry-After %q %s, want 429 and %s", when, tc.ceiling+1, rec.Code, rec.Header().Get("Retry-After"), rec.Body, tc.retry)
				}
			}
			fill("at the first instant")
			for i, step := range tc.steps {
				if rec := send("POST", "/v1/test/clock", `{"advance":"`+step+`"}`); rec.Code != 200 {
					t.Fatalf("advance %s: %d %s", step, rec.Code, rec.Body)
				}
				if i < len(tc.steps)-1 {
					// Not yet a whole window: the first instant still counts.
					if rec := send("POST", "/v1/check", check); rec.Code != 429 {
						t.Fatalf("after step %d (%s): %d %s, want 429", i+1, step, rec.Code, rec.Body)
					}
				}
			}
			fill("a whole window later")
		})
	}
}
