package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// A route of the server that policy.Routes does not list is refused to
// everyone, the built-in admin too, whatever its handler would do; a path
// no route has stays a 404, a method a path lacks a 405.
func TestUnlistedRouteIsRefused(t *testing.T) {
	svc := policy.NewService(nil, nil)
	s := NewServer(Config{Service: svc, Admin: policy.NewAdminGate("tok")})
	s.echo.GET("/v1/unlisted", func(c echo.Context) error { return c.String(http.StatusOK, "open") })
	own := map[string]bool{"GET /v1/unlisted": true}
	for _, r := range s.echo.Routes() {
		own[r.Method+" "+r.Path] = true
	}
	s.access = routeAccess(s.echo.Routes(), own)
	for _, tc := range []struct {
		method, path, token string
		want                int
	}{
		{"GET", "/v1/unlisted", "", 403},
		{"GET", "/v1/unlisted", "tok", 403},
		{"GET", "/v1/nothing", "tok", 404},
		{"PATCH", "/v1/tiers/x", "tok", 405},
	} {
		req := httptest.NewRequestWithContext(context.Background(), tc.method, tc.path, nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, rec.Code, rec.Body, tc.want)
		}
	}
}
