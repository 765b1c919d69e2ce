package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

// signInWith signs in with token, as a named admin would.
func (e *pageEnv) signInWith(token string) *pageBrowser {
	e.t.Helper()
	rec := e.do(pageRequest{method: http.MethodPost, path: "/admin/login", form: url.Values{"token": {token}}})
	if rec.Code != http.StatusSeeOther {
		e.t.Fatalf("sign in: status %d, want 303\n%s", rec.Code, rec.Body)
	}
	b := &pageBrowser{e: e, cookie: pageSessionCookie(e.t, rec)}
	b.csrf = parsePage(e.t, b.get("/admin"), http.StatusOK).csrf()
	return b
}

// who returns what the header says of who is signed in.
func (d *pageDoc) who() string {
	ns := d.find(func(n *html.Node) bool { return pageAttr(n, "data-field") == "who" })
	if len(ns) == 0 {
		return ""
	}
	return pageText(ns[0])
}

func TestNamedAdminsOnThePage(t *testing.T) {
	e := newPageEnv(t)
	boss := e.signIn()
	if got := parsePage(t, boss.get("/admin"), 200).who(); got != "bootstrap (admin)" {
		t.Fatalf("header of the admin token: %q", got)
	}

	// Made on the Admins page: the token is on that answer only.
	doc := parsePage(t, boss.post("/admin/admins", url.Values{"name": {"dana"}, "role": {"viewer"}, "note": {"support desk"}}), 200)
	token := pageValue(doc.byID("new-admin-token"))
	if !strings.HasPrefix(token, policy.AdminTokenPrefix) {
		t.Fatalf("new admin's token %q", token)
	}
	doc = parsePage(t, boss.get("/admin/admins"), 200)
	if doc.byID("new-admin-token") != nil || strings.Contains(doc.raw, token) {
		t.Fatal("the token is shown again")
	}
	if got := doc.cell("admin-dana", "role"); got != "viewer" {
		t.Fatalf("dana's role: %q", got)
	}
	doc = parsePage(t, boss.post("/admin/admins", url.Values{"name": {"dana"}, "role": {"viewer"}}), 409)
	if !strings.Contains(doc.raw, "in use") {
		t.Fatal("a name in use is not said so")
	}

	// A viewer sees no form it may not use, and the server refuses them
	// anyway, naming the role needed.
	dana := e.signInWith(token)
	doc = parsePage(t, dana.get("/admin"), 200)
	if got := doc.who(); got != "dana (viewer)" {
		t.Fatalf("header: %q", got)
	}
	if doc.byID("create") != nil || strings.Contains(doc.raw, `href="/admin/admins"`) {
		t.Fatal("a viewer is shown the create form or the Admins page")
	}
	for _, tc := range []struct {
		method, path, need string
	}{
		{"POST", "/admin/tiers", "admin"},
		{"POST", "/admin/users/save", "support"},
		{"POST", "/admin/keys", "support"},
		{"GET", "/admin/admins", "admin"},
		{"POST", "/admin/admins/dana/role", "admin"},
	} {
		var rec = dana.get(tc.path)
		if tc.method == "POST" {
			rec = dana.post(tc.path, url.Values{"name": {"x"}, "user_id": {"u"}, "role": {"admin"}})
		}
		if rec.Code != 403 || !strings.Contains(rec.Body.String(), "role "+tc.need) {
			t.Errorf("%s %s as viewer: %d, want 403 naming %s", tc.method, tc.path, rec.Code, tc.need)
		}
	}
	parsePage(t, dana.get("/admin/audit"), 200)

	// A new role holds from the next request.
	boss.follow(boss.post("/admin/admins/dana/role", url.Values{"role": {"support"}}), "/admin/admins")
	if got := parsePage(t, dana.get("/admin/usage?user_id=alice"), 200).who(); got != "dana (support)" {
		t.Fatalf("after the change of role: %q", got)
	}
	boss.follow(dana.post("/admin/users/save", url.Values{"user_id": {"alice"}, "note": {"vip"}}), "/admin/usage?user_id=alice")

	// Revoked: the session is refused at its next request.
	boss.follow(boss.post("/admin/admins/dana/revoke", nil), "/admin/admins")
	if rec := dana.get("/admin"); rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/admin/login" {
		t.Fatalf("revoked admin's session: %d %s", rec.Code, rec.Header().Get("Location"))
	}

	// The Audit page names who did each, newest first, filtered.
	doc = parsePage(t, boss.get("/admin/audit?actor=bootstrap&kind=admins"), 200)
	var actions []string
	for _, n := range doc.find(func(n *html.Node) bool { return pageAttr(n, "data-field") == "action" }) {
		actions = append(actions, pageText(n))
	}
	if got := strings.Join(actions, " "); got != "revoked updated created" {
		t.Errorf("bootstrap's changes to admins, newest first: %q", got)
	}
	doc = parsePage(t, boss.get("/admin/audit?actor=dana"), 200)
	if subjects := doc.find(func(n *html.Node) bool { return pageAttr(n, "data-field") == "subject" }); len(subjects) != 1 || pageText(subjects[0]) != "alice" {
		t.Errorf("dana's changes: %d rows\n%s", len(subjects), doc.raw)
	}
	parsePage(t, boss.get("/admin/audit?since=yesterday"), 400)

	// The tiers page's recent changes say who made each.
	gold := policy.Tier{Name: "gold", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(1)), policy.RequestsPerDay: new(int64(1))}}
	if _, _, err := e.svc.PutTier(policy.WithActor(t.Context(), "erin"), gold); err != nil {
		t.Fatal(err)
	}
	doc = parsePage(t, boss.get("/admin"), 200)
	if by := doc.find(func(n *html.Node) bool { return pageAttr(n, "data-field") == "actor" }); len(by) == 0 || pageText(by[0]) != "erin" {
		t.Errorf("the latest tier change's actor: %d cells", len(by))
	}
}

// A named admin revoked through one process is refused on the next
// request of its session on another sharing the database.
func TestRevokedSessionEndsOnAnotherReplica(t *testing.T) {
	path := dbtest.DSN(t, "shared.db")
	a := newPageEnvAt(t, path, pageToken, policy.NewTestClock(pageT0))
	b := newPageEnvAt(t, path, pageToken, policy.NewTestClock(pageT0))
	_, token, err := a.svc.CreateAdmin(t.Context(), "erin", policy.RoleAdmin, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.svc.CreateAdmin(t.Context(), "frank", policy.RoleAdmin, ""); err != nil {
		t.Fatal(err)
	}
	erin := a.signInWith(token)
	parsePage(t, erin.get("/admin/admins"), 200)
	if err := b.svc.RevokeAdmin(t.Context(), "erin"); err != nil {
		t.Fatal(err)
	}
	if rec := erin.get("/admin/admins"); rec.Code != http.StatusSeeOther {
		t.Fatalf("revoked on the other replica, next request: %d, want 303 to sign in", rec.Code)
	}
	if rec := a.do(pageRequest{method: http.MethodPost, path: "/admin/login", form: url.Values{"token": {token}}}); rec.Code != http.StatusUnauthorized {
		t.Fatalf("sign in with the revoked token: %d, want 401", rec.Code)
	}
}
