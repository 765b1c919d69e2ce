package web_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/policyguard/policyguard/policy"
)

// memberCheck checks user as a member of account, under the account's
// plan; the check must be admitted.
func (e *pageEnv) checkAsMember(user, account string) {
	e.t.Helper()
	d, err := e.svc.Check(context.Background(), policy.Request{UserID: user, Account: account}, false)
	if err != nil || !d.Allowed() {
		e.t.Fatalf("check of %s in %s: %+v, %v", user, account, d, err)
	}
}

// The preview lists what the accounts' pools would have refused apart
// from the users' figures, which never count a pool.
func TestAdminPagePreviewAccounts(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	ctx := context.Background()
	if _, _, err := e.svc.PutAccount(ctx, policy.Account{AccountID: "acme", Tier: "free"}); err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"a", "b", "a"} {
		e.checkAsMember(user, "acme")
		e.clock.Advance(time.Second)
	}
	// A pooled limit set since: the preview replays the pool through it.
	if _, _, err := e.svc.PutAccount(ctx, policy.Account{AccountID: "acme", Tier: "free", Limits: policy.Overrides{0: policy.To(1)}}); err != nil {
		t.Fatal(err)
	}
	page := parsePage(t, b.post("/admin/tiers/free/preview", pageTierForm(e.tier("free"))), http.StatusOK)
	for id, want := range map[string]string{
		"preview-users": "2", "preview-requests": "3", "preview-requests-refused": "0",
		"preview-accounts-refused": "1", "preview-account-refused-minute": "2", "preview-account-refused-hour": "0",
	} {
		if got := page.text(id); got != want {
			t.Errorf("%s = %q, want %q", id, got, want)
		}
	}
}

// The tier form edits the pooled shadow limits: each optional, and only
// beside the shadow limits they belong to; the shadow section tells what
// they would have refused in the pools.
func TestAdminPageShadowAccountFields(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	form := pageTierForm(e.tier("free"))
	form.Set("shadow.account.requests_per_minute", "2")
	bad := parsePage(t, b.post("/admin/tiers/free", form), http.StatusBadRequest)
	if got := bad.text("tier-shadow-requests-per-minute-error"); got == "" {
		t.Error("pooled shadow limits without shadow limits: no error on the shadow limits")
	}
	for k, v := range map[string]string{"shadow.requests_per_minute": "100", "shadow.requests_per_hour": "1000", "shadow.requests_per_day": "10000", "shadow.burst_allowance": "0"} {
		form.Set(k, v)
	}
	form.Set("shadow.account.requests_per_day", "1")
	bad = parsePage(t, b.post("/admin/tiers/free", form), http.StatusBadRequest)
	if got := bad.text("tier-shadow-account-requests-per-day-error"); !strings.Contains(got, "shadow.account.requests_per_day (1) is below shadow.account.requests_per_minute (2)") {
		t.Errorf("pooled shadow limits that cannot bind: error %q", got)
	}
	form.Set("shadow.account.requests_per_day", "")
	b.follow(b.post("/admin/tiers/free", form), "/admin")
	got := e.tier("free")
	rpm, _ := policy.LimitFieldNamed("requests_per_minute")
	rpd, _ := policy.LimitFieldNamed("requests_per_day")
	if got.Shadow == nil || got.Shadow.Account == nil || *got.Shadow.Account.Get(rpm) != 2 || got.Shadow.Account.Get(rpd) != nil {
		t.Fatalf("saved shadow %+v", got.Shadow)
	}

	if _, _, err := e.svc.PutAccount(context.Background(), policy.Account{AccountID: "acme", Tier: "free"}); err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"a", "b", "c"} {
		e.checkAsMember(user, "acme")
		e.clock.Advance(time.Second)
	}
	page := parsePage(t, b.get("/admin/tiers/free"), http.StatusOK)
	if got := pageValue(page.control("Shadow, each account's pool: requests per minute")); got != "2" {
		t.Errorf("the form shows %q for the pooled shadow requests per minute, want 2", got)
	}
	if got := page.text("shadow-heading"); !strings.Contains(got, "and account pools 2/min") {
		t.Errorf("shadow heading %q", got)
	}
	if got := page.text("shadow-account-refused-hour"); got != "1" {
		t.Errorf("pool requests the shadow limits would have refused in the hour: %q, want 1", got)
	}
	if got := page.text("shadow-refused-hour"); got != "0" {
		t.Errorf("users' requests the shadow limits would have refused in the hour: %q, want 0", got)
	}
}

// The overview's top users are users: an account's pool, whose requests
// are its members', is not one of them.
func TestOverviewTopUsersLeaveOutPools(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	if _, _, err := e.svc.PutAccount(context.Background(), policy.Account{AccountID: "acme", Tier: "free"}); err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"a", "b", "a"} {
		e.checkAsMember(user, "acme")
		e.clock.Advance(time.Second)
	}
	doc := parsePage(t, b.get("/admin/overview"), http.StatusOK)
	var listed []string
	for _, n := range doc.find(func(n *html.Node) bool {
		return n.Data == "a" && strings.HasPrefix(pageAttr(n, "href"), "/admin/usage?")
	}) {
		listed = append(listed, pageAttr(n, "href"))
	}
	if len(listed) == 0 {
		t.Fatal("no top users listed")
	}
	for _, href := range listed {
		if strings.Contains(href, "account") {
			t.Errorf("the overview lists a pool as a top user: %s", href)
		}
	}
	if strings.Contains(doc.raw, "account:acme") {
		t.Error("the overview names the pool of acme")
	}
}
