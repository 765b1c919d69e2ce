package web

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// A page route policy.Routes does not list is refused to everyone, the
// built-in admin's session too, whatever its handler would do.
func TestUnlistedPageIsRefused(t *testing.T) {
	svc := policy.NewService(nil, nil)
	a := NewAdmin(Config{Service: svc, Gate: policy.NewAdminGate("tok")})
	e := echo.New()
	a.Register(e)
	e.GET("/admin/unlisted", func(c echo.Context) error { return c.String(http.StatusOK, "open") }, a.authorize)
	a.routes["GET /admin/unlisted"] = true

	req := httptest.NewRequest(http.MethodPost, "/admin/login", strings.NewReader(url.Values{"token": {"tok"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	if rec.Code != http.StatusSeeOther {
		t.Fatalf("sign in: %d", rec.Code)
	}
	cookie := rec.Result().Cookies()[0]
	for _, c := range []*http.Cookie{nil, cookie} {
		req := httptest.NewRequest(http.MethodGet, "/admin/unlisted", nil)
		if c != nil {
			req.AddCookie(c)
		}
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		if rec.Code != http.StatusForbidden || strings.Contains(rec.Body.String(), "open") {
			t.Errorf("unlisted page, session %v: %d %.80s, want 403", c != nil, rec.Code, rec.Body)
		}
	}
}
