package api_test

// What the API gives the admin page, which main mounts on it: the
// middleware of its Echo instance (Config.Pages) and its tier JSON.

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/policy"
)

// Routes that Config.Pages adds (the admin page, in main) are served
// behind the API's middleware: each gets a request id and an access-log
// line, a body over the limit is refused, their errors are answered by
// the API's error handler, a panic is logged as one, and the client's
// address is the one the API's trusted proxies settle.
func TestPagesShareTheMiddleware(t *testing.T) {
	_, proxies, err := net.ParseCIDR("10.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	// The client behind a trusted proxy is the one X-Forwarded-For names,
	// on the pages too: the sign-in throttle counts it.
	e := newEnv(t, withJSONLog(), withConfig(func(c *api.Config) { c.TrustedProxies = []*net.IPNet{proxies} }),
		withPages(func(e *echo.Echo) {
			e.GET("/page/ok", func(c echo.Context) error { return c.String(http.StatusOK, "client "+c.RealIP()) })
			e.POST("/page/read", func(c echo.Context) error {
				if err := c.Request().ParseForm(); err != nil {
					return echo.NewHTTPError(http.StatusRequestEntityTooLarge)
				}
				return c.NoContent(http.StatusNoContent)
			})
			e.GET("/page/missing", func(echo.Context) error { return policy.Errorf(policy.ENOTFOUND, "no such page thing") })
			e.GET("/page/panic", func(echo.Context) error { panic("page bug") })
		}))
	srv, logs := e.srv, e.logs
	for _, tc := range []struct {
		method, path, body string
		status             int
		answer             string // a fragment of the body
		lines              []string
	}{
		{"GET", "/page/ok", "", 200, "client 192.0.2.1", []string{"request"}},
		{"POST", "/page/read", "a=" + strings.Repeat("x", api.MaxBodyBytes), 413, `{"message":"request body is larger than`, []string{"request"}},
		{"GET", "/page/missing", "", 404, `{"message":"no such page thing"}`, []string{"request"}},
		{"GET", "/page/panic", "", 500, `{"message":"internal error"}`, []string{"panic", "request failed", "request"}},
	} {
		before := len(logLines(t, logs))
		header := map[string]string{"X-Request-Id": "page-" + tc.path[len("/page/"):]}
		if tc.body != "" {
			header["Content-Type"] = "application/x-www-form-urlencoded"
		}
		rec := send(srv, tc.method, tc.path, tc.body, header)
		if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.answer) {
			t.Errorf("%s %s: %d %s, want %d with %q", tc.method, tc.path, rec.Code, rec.Body, tc.status, tc.answer)
		}
		if got := rec.Header().Get("X-Request-Id"); got != header["X-Request-Id"] {
			t.Errorf("%s %s: X-Request-Id %q, want %q", tc.method, tc.path, got, header["X-Request-Id"])
		}
		var msgs []string
		for _, l := range logLines(t, logs)[before:] {
			msgs = append(msgs, l["msg"].(string))
			if l["id"] != header["X-Request-Id"] {
				t.Errorf("%s %s: line %q has id %v", tc.method, tc.path, l["msg"], l["id"])
			}
		}
		if strings.Join(msgs, ",") != strings.Join(tc.lines, ",") {
			t.Errorf("%s %s: lines %q, want %q", tc.method, tc.path, msgs, tc.lines)
		}
	}
	req := httptest.NewRequest(http.MethodGet, "/page/ok", nil)
	req.RemoteAddr = "10.0.0.5:4000"
	req.Header.Set("X-Forwarded-For", "198.51.100.7")
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	if got, want := rec.Body.String(), "client 198.51.100.7"; got != want {
		t.Errorf("through a trusted proxy the page saw %q, want %q", got, want)
	}
}

// TierJSON, which the admin page's audit log shows, is what GET
// /v1/tiers/{name} answers, less updated_at.
func TestTierJSONIsTheAPIAnswer(t *testing.T) {
	e := newEnv(t)
	e.putTier("team", `{"requests_per_minute":5,"requests_per_hour":50,"requests_per_day":500,"burst_allowance":1,`+
		`"tokens_per_day":1000,"features":["chat"],"description":"<b>",`+
		`"shadow":{"requests_per_minute":4,"requests_per_hour":40,"requests_per_day":400,"burst_allowance":0}}`)
	rec := e.do(http.MethodGet, "/v1/tiers/team", "", true)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /v1/tiers/team: %d %s", rec.Code, rec.Body)
	}
	want := regexp.MustCompile(`,"updated_at":"[^"]*"`).ReplaceAllString(rec.Body.String(), "")
	tier, err := e.store.Tier(context.Background(), "team")
	if err != nil {
		t.Fatal(err)
	}
	if got := api.TierJSON(tier) + "\n"; got != want {
		t.Errorf("TierJSON = %s, want %s", got, want)
	}
}
