package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/policyguard/policyguard/policy"
)

// A run's own user ends it with its gateway key, and the run's sub-agent
// with it; another user's key is answered as for an unknown run and ends
// nothing; a service key, an unknown key and a revoked one are refused,
// and a key opens no other admin route. Admins of the admin role still
// end runs; a viewer does not.
func TestEndRunWithGatewayKey(t *testing.T) {
	e := newEnv(t)
	e.putTier("agents", `{`+runTierLimits+`,"run":{"max_requests":10}}`)
	ctx := context.Background()
	key := func(user string, service bool) (policy.Key, string) {
		k, secret, err := e.svc.CreateKey(ctx, user, service, "runs")
		if err != nil {
			t.Fatal(err)
		}
		return k, secret
	}
	aliceKey, alice := key("alice", false)
	_, bob := key("bob", false)
	_, service := key("", true)
	revokedKey, revoked := key("alice", false)
	if err := e.svc.RevokeKey(ctx, revokedKey.ID); err != nil {
		t.Fatal(err)
	}
	viewer := makeAdmin(e, "watcher", "viewer")
	open := func(user, run, parent string) {
		t.Helper()
		body := fmt.Sprintf(`{"context":{"user_id":%q,"user_tier":"agents","run_id":%q,"parent_run_id":%q}}`, user, run, parent)
		if parent == "" {
			body = fmt.Sprintf(`{"context":{"user_id":%q,"user_tier":"agents","run_id":%q}}`, user, run)
		}
		if rec := e.do(http.MethodPost, "/v1/check", body, false); rec.Code != http.StatusOK {
			t.Fatalf("check in %s: %d %s", run, rec.Code, rec.Body)
		}
	}
	state := func(id string) policy.RunState {
		t.Helper()
		r, err := e.svc.GetRun(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return r.State
	}
	open("alice", "a-1", "")
	open("alice", "a-1-sub", "a-1")
	open("alice", "a-2", "")
	open("bob", "b-1", "")

	for _, tc := range []struct {
		name, token, method, path string
		status                    int
		msg                       string
	}{
		{"another user's run", bob, "POST", "/v1/runs/a-1/end", 404, `run \"a-1\" not found`},
		{"an unknown run", alice, "POST", "/v1/runs/nope/end", 404, `run \"nope\" not found`},
		{"a service key", service, "POST", "/v1/runs/a-1/end", 403, "a service key cannot end runs"},
		{"a revoked key", revoked, "POST", "/v1/runs/a-1/end", 401, ""},
		{"an unknown key", policy.KeyPrefix + strings.Repeat("x", len(alice)-len(policy.KeyPrefix)), "POST", "/v1/runs/a-1/end", 401, ""},
		{"a viewer", viewer, "POST", "/v1/runs/a-1/end", 403, "admin"},
		{"a key reading its run", alice, "GET", "/v1/runs/a-1", 401, ""},
		{"a key listing runs", alice, "GET", "/v1/runs?user_id=alice", 401, ""},
		{"a key on an admin route", alice, "DELETE", "/v1/usage/alice", 401, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := as(e, tc.token, tc.method, tc.path, "")
			if code != tc.status || !strings.Contains(body, tc.msg) {
				t.Errorf("%d %s, want %d %s", code, body, tc.status, tc.msg)
			}
		})
	}
	if s := state("a-1"); s != policy.RunOpen {
		t.Fatalf("a-1 is %s after the refusals, want open", s)
	}

	code, body := as(e, alice, "POST", "/v1/runs/a-1/end", "")
	if code != http.StatusOK || !strings.Contains(body, `"state":"ended"`) {
		t.Fatalf("alice ends a-1: %d %s", code, body)
	}
	if s, sub, other := state("a-1"), state("a-1-sub"), state("a-2"); s != policy.RunEnded || sub != policy.RunEnded || other != policy.RunOpen {
		t.Errorf("a-1 %s, a-1-sub %s, a-2 %s; want ended, ended, open", s, sub, other)
	}
	rec := e.do(http.MethodPost, "/v1/check", `{"context":{"user_id":"alice","user_tier":"agents","run_id":"a-1-sub"}}`, false)
	if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), `run \"a-1-sub\" was ended`) {
		t.Errorf("a check in the ended sub-agent's run: %d %s, want 403", rec.Code, rec.Body)
	}
	// The audit log names the key that ended the run.
	code, body = as(e, adminToken, "GET", "/v1/audit?kind=runs", "")
	if code != http.StatusOK || !strings.Contains(body, `"actor":"`+aliceKey.ID+`"`) || !strings.Contains(body, `"subject":"a-1"`) {
		t.Errorf("the audit log of runs: %d %s, want a-1 ended by key %s", code, body, aliceKey.ID)
	}
	// Admins end any user's run, as before.
	if code, body := as(e, adminToken, "POST", "/v1/runs/b-1/end", ""); code != http.StatusOK || state("b-1") != policy.RunEnded {
		t.Errorf("an admin ends b-1: %d %s", code, body)
	}
}
