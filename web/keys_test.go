package web_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
	"github.com/policyguard/policyguard/web"
)

// The keys of a user on their page: make one and see its secret once,
// with the warning, see it listed without it and its last use, be told
// what is wrong with a bad note, and revoke it, refused at once. Every
// form needs the session's CSRF token.
func TestKeysOnTheUserPage(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	ctx := context.Background()
	doc := parsePage(t, b.get("/admin/usage?user_id=alice"), http.StatusOK)
	if got := doc.text("keys-heading"); got != "Gateway keys of user alice" {
		t.Fatalf("keys heading %q", got)
	}
	if got := doc.cell("keys", "no-keys"); !strings.HasPrefix(got, "No keys") {
		t.Fatalf("before any key: %q", got)
	}
	if !slices.Contains(doc.buttons(), "Make a key") || doc.control("Note of a new key") == nil {
		t.Fatalf("no form to make a key; buttons %v", doc.buttons())
	}

	// Without the CSRF token: refused, nothing made.
	if rec := b.post("/admin/keys", url.Values{"user_id": {"alice"}, "csrf": {"wrong"}}); rec.Code != http.StatusForbidden {
		t.Fatalf("make a key without the CSRF token: %d", rec.Code)
	}
	// A note too long: the page again, the error beside the field, what
	// was typed kept, nothing made.
	long := strings.Repeat("n", policy.MaxNote+1)
	doc = parsePage(t, b.post("/admin/keys", url.Values{"user_id": {"alice"}, "note": {long}}), http.StatusBadRequest)
	if got := doc.text("key-note-error"); got != "note must be at most 1024 bytes" {
		t.Fatalf("error of a long note %q", got)
	}
	if got := pageValue(doc.control("Note of a new key")); got != long {
		t.Fatalf("the form lost the note typed: %d bytes", len(got))
	}
	if keys, _ := e.svc.Keys(ctx, "alice"); len(keys) != 0 {
		t.Fatalf("refused forms made keys: %+v", keys)
	}
	if rec := b.post("/admin/keys", url.Values{"note": {"x"}}); rec.Code != http.StatusBadRequest {
		t.Fatalf("make a key for no user: %d", rec.Code)
	}

	// Made: the secret on the answer, with the warning.
	doc = parsePage(t, b.post("/admin/keys", url.Values{"user_id": {"alice"}, "note": {"alice's laptop"}}), http.StatusOK)
	secret := pageAttr(doc.byID("new-key"), "value")
	if !regexp.MustCompile(`^pgk_[A-Za-z0-9_-]{32}$`).MatchString(secret) {
		t.Fatalf("the new key's secret %q", secret)
	}
	if got := doc.text("new-key-warning"); !strings.Contains(got, "this is the only time it is shown") {
		t.Fatalf("warning %q", got)
	}
	if got := doc.text("new-key-heading"); got != "New key for user alice" {
		t.Fatalf("heading %q", got)
	}
	if !strings.Contains(doc.raw, `href="/admin/usage?user_id=alice"`) {
		t.Fatal("no way back to the user's page")
	}
	if ls := doc.find(func(n *html.Node) bool { return n.Data == "label" && pageAttr(n, "for") == "new-key" }); len(ls) != 1 || !strings.HasPrefix(pageText(ls[0]), "Key key_") {
		t.Fatal("the secret has no label naming the key")
	}
	k, err := e.svc.Authenticate(ctx, secret)
	if err != nil || k.UserID != "alice" || k.Note != "alice's laptop" {
		t.Fatalf("Authenticate = %+v, %v", k, err)
	}

	// Listed without the secret, with when it was made and last used.
	e.clock.Advance(3 * time.Minute)
	doc = parsePage(t, b.get("/admin/usage?user_id=alice"), http.StatusOK)
	if strings.Contains(doc.raw, secret) || strings.Contains(doc.raw, secret[len(policy.KeyPrefix):]) {
		t.Fatal("the user's page shows the secret again")
	}
	row := "key-" + k.ID
	for field, want := range map[string]string{"id": k.ID, "note": "alice's laptop", "created": "2026-05-04 12:00 UTC", "last-used": "2026-05-04 12:00 UTC"} {
		if got := doc.cell(row, field); got != want {
			t.Errorf("%s of the key: %q, want %q", field, got, want)
		}
	}
	// A second key, never used.
	parsePage(t, b.post("/admin/keys", url.Values{"user_id": {"alice"}}), http.StatusOK)
	keys, _ := e.svc.Keys(ctx, "alice")
	if len(keys) != 2 {
		t.Fatalf("alice's keys: %+v", keys)
	}
	doc = parsePage(t, b.get("/admin/usage?user_id=alice"), http.StatusOK)
	if got := doc.cell("key-"+keys[1].ID, "last-used"); got != "never" {
		t.Fatalf("last use of a key never used: %q", got)
	}
	if got := doc.cell("key-"+keys[1].ID, "created"); got != "2026-05-04 12:03 UTC" {
		t.Fatalf("made: %q", got)
	}

	// Revoked: without the CSRF token refused; with it gone, and refused
	// by the gateway at once.
	if rec := b.post("/admin/keys/"+k.ID+"/revoke", url.Values{"user_id": {"alice"}, "csrf": {"wrong"}}); rec.Code != http.StatusForbidden {
		t.Fatalf("revoke without the CSRF token: %d", rec.Code)
	}
	if _, err := e.svc.Authenticate(ctx, secret); err != nil {
		t.Fatalf("a refused revocation revoked: %v", err)
	}
	doc = b.follow(b.post("/admin/keys/"+k.ID+"/revoke", url.Values{"user_id": {"alice"}}), "/admin/usage?user_id=alice")
	if got := doc.flash(); !strings.Contains(got, "Revoked key "+k.ID) {
		t.Fatalf("flash %q", got)
	}
	if doc.byID(row) != nil {
		t.Fatal("the revoked key is still listed")
	}
	if _, err := e.svc.Authenticate(ctx, secret); policy.ErrorCode(err) != policy.EUNAUTHORIZED {
		t.Fatalf("after the revocation: %v, want EUNAUTHORIZED", err)
	}
	doc = parsePage(t, b.post("/admin/keys/"+k.ID+"/revoke", url.Values{"user_id": {"alice"}}), http.StatusNotFound)
	if !strings.Contains(doc.raw, "does not exist") {
		t.Fatalf("revoke again:\n%s", doc.raw)
	}
}

// A service that keeps no keys shows no keys section.
func TestNoKeysSectionWithoutKeys(t *testing.T) {
	store, err := db.Open(context.Background(), dbtest.DSN(t, "test.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	clock := policy.NewTestClock(pageT0)
	svc := policy.NewService(store, store, policy.WithClock(clock.Now), policy.WithUsers(store))
	e := &pageEnv{t: t, srv: newPageServer(web.Config{Service: svc, Gate: policy.NewAdminGate(pageToken), Sessions: store}),
		svc: svc, store: store, clock: clock}
	doc := parsePage(t, e.signIn().get("/admin/usage?user_id=alice"), http.StatusOK)
	if doc.byID("keys") != nil || slices.Contains(doc.buttons(), "Make a key") {
		t.Fatal("a keys section without keys")
	}
	if doc.byID("record") == nil {
		t.Fatal("the page lost its record section")
	}
}

// The service keys on a page of their own: listed with their use and last
// use, never a user's key nor a secret; made with a note, the secret shown
// once and the way back to the list; a bad note kept beside its error;
// revoked back to the list. A user's page never lists them.
func TestServiceKeysPage(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	ctx := context.Background()
	if _, _, err := e.svc.CreateKey(ctx, "alice", false, "alice's laptop"); err != nil {
		t.Fatal(err)
	}
	doc := parsePage(t, b.get("/admin/keys"), http.StatusOK)
	if got := doc.text("keys-heading"); got != "Service keys" {
		t.Fatalf("keys heading %q", got)
	}
	if got := doc.cell("keys", "no-keys"); !strings.HasPrefix(got, "No service keys") {
		t.Fatalf("before any service key: %q", got)
	}
	if ns := doc.find(func(n *html.Node) bool {
		return n.Data == "a" && pageAttr(n, "href") == "/admin/keys" && pageAttr(n, "aria-current") == "page"
	}); len(ns) != 1 {
		t.Fatal("the navigation has no current link to the Keys page")
	}
	if !slices.Contains(doc.buttons(), "Make a service key") || doc.control("Note of a new key") == nil {
		t.Fatalf("no form to make a service key; buttons %v", doc.buttons())
	}

	// Refused: without the CSRF token, with a note too long (kept, the
	// error beside it), and naming a user as well.
	if rec := b.post("/admin/keys", url.Values{"service": {"true"}, "csrf": {"wrong"}}); rec.Code != http.StatusForbidden {
		t.Fatalf("make a service key without the CSRF token: %d", rec.Code)
	}
	long := strings.Repeat("n", policy.MaxNote+1)
	doc = parsePage(t, b.post("/admin/keys", url.Values{"service": {"true"}, "note": {long}}), http.StatusBadRequest)
	if got := doc.text("key-note-error"); got != "note must be at most 1024 bytes" {
		t.Fatalf("error of a long note %q", got)
	}
	if got := pageValue(doc.control("Note of a new key")); got != long {
		t.Fatalf("the form lost the note typed: %d bytes", len(got))
	}
	if rec := b.post("/admin/keys", url.Values{"service": {"true"}, "user_id": {"alice"}}); rec.Code != http.StatusBadRequest {
		t.Fatalf("a service key for a user: %d", rec.Code)
	}
	if keys, _ := e.svc.Keys(ctx, ""); len(keys) != 0 {
		t.Fatalf("refused forms made service keys: %+v", keys)
	}

	// Made: the secret once, a service key's, with the way back.
	doc = parsePage(t, b.post("/admin/keys", url.Values{"service": {"true"}, "note": {"support bot"}}), http.StatusOK)
	if got := doc.text("new-key-heading"); got != "New service key" {
		t.Fatalf("heading %q", got)
	}
	secret := pageAttr(doc.byID("new-key"), "value")
	k, err := e.svc.Authenticate(ctx, secret)
	if err != nil || !k.Service || k.UserID != "" || k.Note != "support bot" {
		t.Fatalf("Authenticate = %+v, %v", k, err)
	}
	if !strings.Contains(doc.raw, `href="/admin/keys"`) || !strings.Contains(doc.text("new-key-hint"), "X-Guard-User") {
		t.Fatal("the new service key's page lacks the way back or what to send with it")
	}

	// Listed with its use and its last use (Authenticate above), without
	// the secret; alice's key is not a service key and stays on her page.
	e.clock.Advance(3 * time.Minute)
	doc = parsePage(t, b.get("/admin/keys"), http.StatusOK)
	if strings.Contains(doc.raw, secret) {
		t.Fatal("the Keys page shows the secret again")
	}
	row := "key-" + k.ID
	for field, want := range map[string]string{"id": k.ID, "note": "support bot", "created": "2026-05-04 12:00 UTC", "last-used": "2026-05-04 12:00 UTC"} {
		if got := doc.cell(row, field); got != want {
			t.Errorf("%s of the service key: %q, want %q", field, got, want)
		}
	}
	if strings.Contains(doc.raw, "alice's laptop") {
		t.Fatal("the Keys page lists a user's key")
	}
	if user := parsePage(t, b.get("/admin/usage?user_id=alice"), http.StatusOK); user.byID(row) != nil {
		t.Fatal("a user's page lists a service key")
	}

	// Revoked: back to the list, gone from it, refused at once.
	doc = b.follow(b.post("/admin/keys/"+k.ID+"/revoke", url.Values{"service": {"true"}}), "/admin/keys")
	if got := doc.flash(); !strings.Contains(got, "Revoked key "+k.ID) {
		t.Fatalf("flash %q", got)
	}
	if doc.byID(row) != nil {
		t.Fatal("the revoked service key is still listed")
	}
	if _, err := e.svc.Authenticate(ctx, secret); policy.ErrorCode(err) != policy.EUNAUTHORIZED {
		t.Fatalf("after the revocation: %v, want EUNAUTHORIZED", err)
	}
}
