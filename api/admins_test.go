package api_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/api/gateway"
	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

// as sends a request with the bearer token tok ("" for none).
func as(e *env, tok, method, path, body string) (int, string) {
	e.t.Helper()
	header := map[string]string{"Content-Type": "application/json"}
	if tok != "" {
		header["Authorization"] = "Bearer " + tok
	}
	rec := send(e.srv, method, path, body, header)
	return rec.Code, rec.Body.String()
}

// makeAdmin makes a named admin through the API with the built-in token
// and returns its token.
func makeAdmin(e *env, name, role string) string {
	e.t.Helper()
	code, body := as(e, adminToken, "POST", "/v1/admins", fmt.Sprintf(`{"name":%q,"role":%q}`, name, role))
	if code != http.StatusCreated {
		e.t.Fatalf("make admin %s: %d %s", name, code, body)
	}
	m := regexp.MustCompile(`"token":"([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		e.t.Fatalf("make admin %s: no token in %s", name, body)
	}
	return m[1]
}

var adminTokenShape = regexp.MustCompile(`^pgadm_[A-Za-z0-9_-]{32}$`)

func TestAdminsAPI(t *testing.T) {
	e := newEnv(t)
	code, body := as(e, adminToken, "POST", "/v1/admins", `{"name":"dana","role":"admin","note":"on call"}`)
	if code != 201 || !strings.Contains(body, `"role":"admin"`) || !strings.Contains(body, `"note":"on call"`) {
		t.Fatalf("create: %d %s", code, body)
	}
	dana := regexp.MustCompile(`"token":"([^"]+)"`).FindStringSubmatch(body)[1]
	if !adminTokenShape.MatchString(dana) {
		t.Fatalf("token %q is not pgadm_ and 32 base64url characters", dana)
	}
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		fragment                 string
	}{
		{"name in use", "POST", "/v1/admins", `{"name":"dana","role":"viewer"}`, 409, `in use`},
		{"built-in name", "POST", "/v1/admins", `{"name":"bootstrap","role":"viewer"}`, 409, `built-in`},
		{"unknown role", "POST", "/v1/admins", `{"name":"eve","role":"superuser"}`, 400, `unknown role \"superuser\"`},
		{"no role", "POST", "/v1/admins", `{"name":"eve"}`, 400, `role is required`},
		{"no name", "POST", "/v1/admins", `{"role":"viewer"}`, 400, `name is required`},
		{"control character", "POST", "/v1/admins", `{"name":"e\u0007ve","role":"viewer"}`, 400, `name must not contain control characters`},
		{"unknown member", "POST", "/v1/admins", `{"name":"eve","role":"viewer","token":"x"}`, 400, `token`},
		{"last admin demoted", "PUT", "/v1/admins/dana", `{"role":"support"}`, 409, `last of role admin`},
		{"last admin revoked", "DELETE", "/v1/admins/dana", ``, 409, `last of role admin`},
		{"unknown admin", "PUT", "/v1/admins/nobody", `{"role":"viewer"}`, 404, `not found`},
		{"name mismatch", "PUT", "/v1/admins/dana", `{"name":"eve","role":"viewer"}`, 400, `does not match`},
	} {
		if code, body := as(e, adminToken, tc.method, tc.path, tc.body); code != tc.status || !strings.Contains(body, tc.fragment) {
			t.Errorf("%s: %d %s, want %d with %s", tc.name, code, body, tc.status, tc.fragment)
		}
	}

	// The token works at once, and its use is recorded to the minute.
	if code, body := as(e, dana, "GET", "/v1/tiers", ""); code != 200 {
		t.Fatalf("dana lists tiers: %d %s", code, body)
	}
	code, body = as(e, dana, "GET", "/v1/admins", "")
	if code != 200 || strings.Contains(body, dana) || strings.Contains(body, "token") || !strings.Contains(body, `"last_used_at":"2026`) {
		t.Fatalf("list: %d %s; want no token and a last use", code, body)
	}

	// A second admin of role admin: now either may be demoted, not both.
	erin := makeAdmin(e, "erin", "admin")
	if code, body := as(e, erin, "PUT", "/v1/admins/dana", `{"role":"support"}`); code != 200 || !strings.Contains(body, `"role":"support"`) {
		t.Fatalf("demote dana: %d %s", code, body)
	}
	if code, body := as(e, dana, "PUT", "/v1/admins/erin", `{"role":"support"}`); code != 403 || !strings.Contains(body, "admin") {
		t.Fatalf("support demotes erin: %d %s, want 403 naming the role", code, body)
	}
	if code, _ := as(e, erin, "PUT", "/v1/admins/erin", `{"role":"viewer"}`); code != 409 {
		t.Fatalf("erin demotes herself, the last admin: %d, want 409", code)
	}

	// Revoked: the next request with the token is a 401, and the name may
	// be given anew, with a new token.
	if code, body := as(e, erin, "DELETE", "/v1/admins/dana", ""); code != 204 {
		t.Fatalf("revoke dana: %d %s", code, body)
	}
	if code, _ := as(e, dana, "GET", "/v1/tiers", ""); code != 401 {
		t.Fatalf("revoked token: %d, want 401", code)
	}
	if code, _ := as(e, erin, "DELETE", "/v1/admins/dana", ""); code != 404 {
		t.Fatalf("revoke twice: %d, want 404", code)
	}
	dana2 := makeAdmin(e, "dana", "viewer")
	if code, _ := as(e, dana, "GET", "/v1/tiers", ""); code != 401 {
		t.Fatalf("old token after the name was given anew: %d, want 401", code)
	}
	if code, _ := as(e, dana2, "GET", "/v1/tiers", ""); code != 200 {
		t.Fatalf("new token: %d, want 200", code)
	}
}

// TestAdminTokensAreThrottled: a wrong token of an admin's shape counts
// against the client as any wrong token does, and a throttled client is
// refused its right named token too.
func TestAdminTokensAreThrottled(t *testing.T) {
	e := newEnv(t)
	dana := makeAdmin(e, "dana", "viewer")
	wrong := "pgadm_" + strings.Repeat("A", 32)
	for range policy.MaxAdminFailures {
		if code, _ := as(e, wrong, "GET", "/v1/tiers", ""); code != 401 {
			t.Fatalf("wrong token: %d, want 401", code)
		}
	}
	if code, _ := as(e, dana, "GET", "/v1/tiers", ""); code != 429 {
		t.Fatalf("right token from a throttled client: %d, want 429", code)
	}
}

// TestRoutesByRole walks every route of the server, from Echo's list, so
// that a route added tomorrow is walked too, with no token, a revoked one,
// a token of each role and the built-in one, and checks each answer
// against the least role policy.Routes gives the route: below it 403, none
// or revoked 401, at or above it neither. A route of its own credential
// (a check, a call, the gateway) refuses every admin token; an open one
// refuses none.
func TestRoutesByRole(t *testing.T) {
	upstream, _ := gateway.ParseUpstream("openai=openai:https://api.openai.invalid/v1")
	e := newEnv(t, withConfig(func(c *api.Config) {
		c.APIToken = "check-token"
		c.TestClock = policy.NewTestClock(t0)
		c.Gateway = &gateway.Config{Upstreams: []gateway.Upstream{upstream}}
	}))
	e.putTier("walk", `{"requests_per_minute":100,"requests_per_hour":1000,"requests_per_day":10000,"burst_allowance":0}`)
	tokens := map[string]string{"none": "", "bootstrap": adminToken}
	for _, r := range policy.Roles {
		tokens[r.String()] = makeAdmin(e, "walk-"+r.String(), r.String())
	}
	tokens["revoked"] = makeAdmin(e, "walk-revoked", "admin")
	if code, body := as(e, adminToken, "DELETE", "/v1/admins/walk-revoked", ""); code != 204 {
		t.Fatalf("revoke: %d %s", code, body)
	}
	roleOf := map[string]policy.Role{"bootstrap": policy.RoleAdmin, "viewer": policy.RoleViewer, "support": policy.RoleSupport, "admin": policy.RoleAdmin}
	param := regexp.MustCompile(`:[a-z_]+|\*`)
	walked := 0
	for _, r := range e.srv.Routes() {
		if !slices.Contains(httpMethods, strings.ToLower(r.Method)) {
			continue // Echo's own entries
		}
		access := policy.RouteAccess(r.Method, r.Path)
		if access == policy.AccessRefused {
			t.Errorf("%s %s: not in policy.Routes, so refused to everyone", r.Method, r.Path)
			continue
		}
		walked++
		path := param.ReplaceAllString(r.Path, "walk")
		if strings.HasPrefix(r.Path, "/llm/") {
			path = "/llm/openai/chat/completions"
		}
		// The least a body can be for each route to get past its checks
		// of the token: the answer may still be 400 or 404.
		body := "{}"
		for name, tok := range tokens {
			code, answer := as(e, tok, r.Method, path, body)
			need, admin := access.Role()
			var ok bool
			var want string
			switch {
			case access == policy.AccessOpen:
				ok, want = code != 401 && code != 403, "neither 401 nor 403"
			case access == policy.AccessOwn:
				ok, want = code == 401, "401"
			case !admin:
				t.Fatalf("%s: access %v", r.Path, access)
			case name == "none" || name == "revoked":
				ok, want = code == 401, "401"
			case roleOf[name] < need:
				ok, want = code == 403 && strings.Contains(answer, need.String()), "403 naming "+need.String()
			default:
				ok, want = code != 401 && code != 403, "neither 401 nor 403"
			}
			if !ok {
				t.Errorf("%s %s as %s (route %s): %d %.120s, want %s", r.Method, path, name, access, code, answer, want)
			}
		}
	}
	if walked < 40 {
		t.Fatalf("walked %d routes; the server has more", walked)
	}
}

// TestAuditNamesTheActor makes a change of every kind through the API as
// a named admin, and finds each in GET /v1/audit under that admin, with
// the kind, subject and action it made, and nothing of a secret.
func TestAuditNamesTheActor(t *testing.T) {
	e := newEnv(t)
	dana := makeAdmin(e, "dana", "admin")
	sam := makeAdmin(e, "sam", "support")
	must := func(tok, method, path, body string, want int) string {
		t.Helper()
		code, answer := as(e, tok, method, path, body)
		if code != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, code, answer, want)
		}
		return answer
	}
	must(dana, "PUT", "/v1/tiers/gold", `{"requests_per_minute":5,"requests_per_hour":50,"requests_per_day":500,"burst_allowance":0}`, 201)
	must(dana, "PUT", "/v1/tiers/gold", `{"requests_per_minute":6,"requests_per_hour":50,"requests_per_day":500,"burst_allowance":0,"shadow":{"requests_per_minute":7,"requests_per_hour":50,"requests_per_day":500,"burst_allowance":0}}`, 200)
	must(dana, "POST", "/v1/tiers/gold/promote", ``, 200)
	must(dana, "PUT", "/v1/accounts/acme", `{"tier":"gold"}`, 201)
	must(sam, "PUT", "/v1/users/alice", `{"tier":"gold","account":"acme"}`, 201)
	key := must(sam, "POST", "/v1/keys", `{"user_id":"alice"}`, 201)
	keyID := regexp.MustCompile(`"id":"([^"]+)"`).FindStringSubmatch(key)[1]
	secret := regexp.MustCompile(`"key":"([^"]+)"`).FindStringSubmatch(key)[1]
	must(sam, "DELETE", "/v1/keys/"+keyID, ``, 204)
	must(sam, "DELETE", "/v1/usage/alice", ``, 204)
	must(dana, "DELETE", "/v1/accounts/acme/usage", ``, 204)
	must(sam, "DELETE", "/v1/users/alice", ``, 204)
	must(dana, "DELETE", "/v1/accounts/acme", ``, 204)
	must(dana, "PUT", "/v1/prices", `{"prices":[{"model":"gpt-4o-mini","input":"0.15","output":"0.6"}]}`, 201)
	must(dana, "PUT", "/v1/admins/sam", `{"role":"viewer"}`, 200)
	must(dana, "DELETE", "/v1/tiers/gold", ``, 204)
	must(adminToken, "DELETE", "/v1/admins/sam", ``, 204)

	type entry struct{ actor, kind, subject, action string }
	want := []entry{
		{"dana", "tiers", "gold", "created"},
		{"dana", "tiers", "gold", "updated"},
		{"dana", "tiers", "gold", "updated"}, // promoted
		{"dana", "accounts", "acme", "created"},
		{"sam", "users", "alice", "created"},
		{"sam", "keys", keyID, "created"},
		{"sam", "keys", keyID, "revoked"},
		{"sam", "usage", "alice", "forgotten"},
		{"dana", "usage", policy.AccountKey("acme"), "forgotten"},
		{"sam", "users", "alice", "deleted"},
		{"dana", "accounts", "acme", "deleted"},
		{"dana", "prices", "1", "created"},
		{"dana", "admins", "sam", "updated"},
		{"dana", "tiers", "gold", "deleted"},
		{"bootstrap", "admins", "sam", "revoked"},
	}
	// Newest first, one page of two at a time, as a client pages.
	var got []entry
	after := ""
	for page := 0; page < 20; page++ {
		path := "/v1/audit?limit=2"
		if after != "" {
			path += "&after=" + after
		}
		res := decode[struct {
			Entries []struct{ Actor, Kind, Subject, Action, Source string }
			Next    *string
		}](t, send(e.srv, "GET", path, "", map[string]string{"Authorization": "Bearer " + dana}))
		for _, x := range res.Entries {
			if x.Actor == "bootstrap" && x.Kind == "admins" && x.Action == "created" {
				continue // the admins the test made
			}
			got = append(got, entry{x.Actor, x.Kind, x.Subject, x.Action})
		}
		if res.Next == nil {
			break
		}
		after = *res.Next
	}
	slices.Reverse(got)
	if !slices.Equal(got, want) {
		t.Errorf("audit, oldest first:\n got %v\nwant %v", got, want)
	}

	// The filters, and no secret anywhere in the log.
	for _, tc := range []struct {
		query string
		n     int
	}{
		{"actor=sam", 5},
		{"actor=sam&kind=keys", 2},
		{"kind=usage", 2},
		{"kind=admins&actor=bootstrap", 3}, // dana and sam made, sam revoked
		{"since=" + t0.Add(time.Hour).Format(time.RFC3339), 0},
		{"until=" + t0.Format(time.RFC3339), 0},
	} {
		code, body := as(e, dana, "GET", "/v1/audit?"+tc.query, "")
		if code != 200 {
			t.Fatalf("%s: %d %s", tc.query, code, body)
		}
		if n := strings.Count(body, `"actor":`); n != tc.n {
			t.Errorf("%s: %d entries, want %d: %s", tc.query, n, tc.n, body)
		}
		for _, s := range []string{secret, dana, sam, adminToken} {
			if strings.Contains(body, s) {
				t.Errorf("%s: the log holds a secret", tc.query)
			}
		}
	}
}

// TestAuditPreexisting: the log's entries from before it named actors say
// "unknown", and a change made with no actor named (a Go program calling
// the service) too.
func TestAuditWithoutActor(t *testing.T) {
	e := newEnv(t)
	if _, _, err := e.svc.PutTier(t.Context(), policy.Tier{Name: "lib", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(1)), policy.RequestsPerDay: new(int64(1))}}); err != nil {
		t.Fatal(err)
	}
	code, body := as(e, adminToken, "GET", "/v1/audit?kind=tiers", "")
	if code != 200 || !strings.Contains(body, `"actor":"unknown","kind":"tiers","subject":"lib","action":"created","source":"library"`) {
		t.Fatalf("%d %s", code, body)
	}
}

// A named admin revoked through one replica is refused by another sharing
// the database at its very next request: the token is looked up in the
// store every time, never cached.
func TestRevokedTokenRefusedOnAnotherReplica(t *testing.T) {
	dsn := dbtest.DSN(t, "shared.db")
	var srvs [2]*api.Server
	var svcs [2]*policy.Service
	for i := range srvs {
		store, err := db.Open(t.Context(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		svcs[i] = policy.NewService(store, store, policy.WithAdmins(store), policy.WithAudit(store))
		srvs[i] = api.NewServer(api.Config{Service: svcs[i], Admin: policy.NewAdminGate(adminToken), Logger: slog.New(slog.DiscardHandler)})
	}
	_, tok, err := svcs[0].CreateAdmin(t.Context(), "gus", policy.RoleViewer, "")
	if err != nil {
		t.Fatal(err)
	}
	get := func(srv *api.Server) int {
		return send(srv, "GET", "/v1/tiers", "", map[string]string{"Authorization": "Bearer " + tok}).Code
	}
	if a, b := get(srvs[0]), get(srvs[1]); a != 200 || b != 200 {
		t.Fatalf("before: %d %d", a, b)
	}
	if rec := send(srvs[0], "DELETE", "/v1/admins/gus", "", map[string]string{"Authorization": "Bearer " + adminToken}); rec.Code != 204 {
		t.Fatalf("revoke: %d %s", rec.Code, rec.Body)
	}
	if code := get(srvs[1]); code != 401 {
		t.Fatalf("the other replica's next request: %d, want 401", code)
	}
}
