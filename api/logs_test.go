package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

// logLines returns the JSON log lines written to b so far.
func logLines(t *testing.T, b *dbtest.LockedBuffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// panicGuardrail fails the way a bug in a deployment's own guardrail would.
type panicGuardrail struct{}

func (panicGuardrail) Name() string  { return "panics" }
func (panicGuardrail) Priority() int { return 2 }
func (panicGuardrail) Check(_ context.Context, c *policy.Check) (policy.Decision, error) {
	if c.UserID == "panic" {
		panic("guardrail bug")
	}
	return policy.Decision{Outcome: policy.Admitted}, nil
}

// newLogEnv is the service logging JSON into env.logs, as -log-format
// json does, with a guardrail that panics for user "panic" and a page that
// reads a form, as the admin page's sign-in does.
func newLogEnv(t *testing.T) *env {
	t.Helper()
	return newEnv(t, withJSONLog(), withGuardrails(panicGuardrail{}), withPages(func(e *echo.Echo) {
		e.POST("/page/login", func(c echo.Context) error {
			if c.FormValue("token") != adminToken {
				return c.NoContent(http.StatusUnauthorized)
			}
			return c.Redirect(http.StatusSeeOther, "/page")
		})
	}))
}

func send(h http.Handler, method, path, body string, header map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestLogsKeepSecretsOut sends prompts and credentials every way a client
// can and asserts that none of them reaches the log, while every request
// still gets its access line.
func TestLogsKeepSecretsOut(t *testing.T) {
	e := newLogEnv(t)
	logs := e.logs
	const (
		prompt      = "SECRET-PROMPT-the-user-typed-this"
		bearer      = "SECRET-BEARER-of-an-agent"
		queryToken  = "SECRET-IN-QUERY"
		cookieValue = "SECRET-COOKIE"
	)
	checkBody := `{"input_text":"` + prompt + `","context":{"user_id":"alice"}}`
	secretHeaders := map[string]string{
		"Authorization": "Bearer " + bearer,
		"Cookie":        "session=" + cookieValue,
		"X-Api-Key":     bearer,
		"Content-Type":  "application/json",
	}
	requests := []struct {
		method, path, body string
		header             map[string]string
		status             int
	}{
		{"POST", "/v1/check", checkBody, secretHeaders, 200},
		{"POST", "/v1/check?dry_run=true&token=" + queryToken, checkBody, secretHeaders, 200},
		{"POST", "/v1/check", `{"input_text":"` + prompt + `","context":{"user_id":"alice","feature":"search"}}`, secretHeaders, 403},
		{"POST", "/v1/check", `{"input_text":"` + prompt + `","context":{"user_tier":"gold"}}`, secretHeaders, 400},
		{"POST", "/v1/check", `{"input_text":"` + prompt + `","context":{"user_id":"panic"}}`, secretHeaders, 500},
		{"GET", "/v1/tiers", "", map[string]string{"Authorization": "Bearer " + adminToken}, 200},
		{"GET", "/v1/tiers", "", map[string]string{"Authorization": "Bearer " + bearer}, 401},
		{"POST", "/page/login", url.Values{"token": {adminToken}}.Encode(), map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 303},
	}
	for _, r := range requests {
		if rec := send(e.srv, r.method, r.path, r.body, r.header); rec.Code != r.status {
			t.Fatalf("%s %s: %d %s, want %d", r.method, r.path, rec.Code, rec.Body, r.status)
		}
	}
	// A storage failure logs the error, still without the prompt.
	e.store.Close()
	if rec := send(e.srv, "POST", "/v1/check", checkBody, secretHeaders); rec.Code != 503 {
		t.Fatalf("check on a closed store: %d", rec.Code)
	}

	out := logs.String()
	for _, secret := range []string{prompt, bearer, queryToken, cookieValue, adminToken, "input_text"} {
		if strings.Contains(out, secret) {
			t.Errorf("log contains %q:\n%s", secret, out)
		}
	}
	var access, failures int
	for _, l := range logLines(t, logs) {
		switch l["msg"] {
		case "request":
			access++
		case "request failed":
			failures++
		}
	}
	if got, want := access, len(requests)+1; got != want {
		t.Errorf("%d access log lines, want %d:\n%s", got, want, out)
	}
	if got, want := failures, 2; got != want { // the panic and the storage failure
		t.Errorf("%d failure lines, want %d:\n%s", got, want, out)
	}
}

// TestRequestIDOnEveryLine follows one request id from the client through
// every line logged about its request, failures included.
func TestRequestIDOnEveryLine(t *testing.T) {
	e := newLogEnv(t)
	logs := e.logs
	generated := regexp.MustCompile(`^[0-9a-f]{32}$`)
	for _, tc := range []struct {
		name, sent string
		keep       bool
		body       string
		status     int
		lines      []string // messages logged with the id, in order
	}{
		{"kept", "req-42.proxy:7/a_b", true, `{}`, 200, []string{"request"}},
		{"generated", "", false, `{}`, 200, []string{"request"}},
		{"too long", strings.Repeat("a", 129), false, `{}`, 200, []string{"request"}},
		{"space", "two words", false, `{}`, 200, []string{"request"}},
		{"control character", "id\x01", false, `{}`, 200, []string{"request"}},
		{"not ASCII", "idé", false, `{}`, 200, []string{"request"}},
		{"panic", "panic-id", true, `{"context":{"user_id":"panic"}}`, 500, []string{"panic", "request failed", "request"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(logLines(t, logs))
			header := map[string]string{}
			if tc.sent != "" {
				header["X-Request-Id"] = tc.sent
			}
			rec := send(e.srv, "POST", "/v1/check", tc.body, header)
			if rec.Code != tc.status {
				t.Fatalf("%d %s, want %d", rec.Code, rec.Body, tc.status)
			}
			id := rec.Header().Get("X-Request-Id")
			if tc.keep && id != tc.sent {
				t.Fatalf("X-Request-Id = %q, want the one sent, %q", id, tc.sent)
			}
			if !tc.keep && !generated.MatchString(id) {
				t.Fatalf("X-Request-Id = %q, want 32 hex digits in place of %q", id, tc.sent)
			}
			lines := logLines(t, logs)[before:]
			var msgs []string
			for _, l := range lines {
				msgs = append(msgs, l["msg"].(string))
				if l["id"] != id {
					t.Errorf("line %q has id %v, want %q", l["msg"], l["id"], id)
				}
			}
			if strings.Join(msgs, ",") != strings.Join(tc.lines, ",") {
				t.Errorf("lines %q, want %q", msgs, tc.lines)
			}
		})
	}

	// Storage failures: the check's error line and the health check's.
	e.store.Close()
	for _, path := range []string{"/v1/check", "/healthz"} {
		before := len(logLines(t, logs))
		method := "POST"
		if path == "/healthz" {
			method = "GET"
		}
		rec := send(e.srv, method, path, `{}`, map[string]string{"X-Request-Id": "failing-" + path})
		if rec.Code != 503 {
			t.Fatalf("%s on a closed store: %d", path, rec.Code)
		}
		lines := logLines(t, logs)[before:]
		if len(lines) != 2 {
			t.Fatalf("%s: %d lines, want an error line and an access line: %v", path, len(lines), lines)
		}
		for _, l := range lines {
			if l["id"] != "failing-"+path {
				t.Errorf("%s: line %q has id %v", path, l["msg"], l["id"])
			}
		}
		if l := lines[0]; l["level"] != "ERROR" || l["status"] == nil && path == "/v1/check" {
			t.Errorf("%s: first line %v, want the error", path, l)
		}
	}
}
