package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

const adminToken = "test-admin-token"

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// env is a whole server, the gateway mounted, on a real store and a test
// clock; requests go through its Echo instance.
type env struct {
	t     *testing.T
	srv   *api.Server
	store *db.Store
	clock *policy.TestClock
}

// do sends a request through the whole Echo instance and returns the answer.
func (e *env) do(method, path, body string, admin bool) *httptest.ResponseRecorder {
	e.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if admin {
		req.Header.Set("Authorization", "Bearer "+adminToken)
	}
	rec := httptest.NewRecorder()
	e.srv.ServeHTTP(rec, req)
	return rec
}

// must sends an admin request and fails the test unless it is answered
// status.
func (e *env) must(method, path, body string, status int) *httptest.ResponseRecorder {
	e.t.Helper()
	rec := e.do(method, path, body, true)
	if rec.Code != status {
		e.t.Fatalf("%s %s %s: %d %s, want %d", method, path, body, rec.Code, rec.Body, status)
	}
	return rec
}

func (e *env) putTier(name, body string) {
	e.t.Helper()
	if rec := e.do(http.MethodPut, "/v1/tiers/"+name, body, true); rec.Code != http.StatusCreated && rec.Code != http.StatusOK {
		e.t.Fatalf("put tier: %d %s", rec.Code, rec.Body)
	}
}
