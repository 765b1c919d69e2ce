package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/policyguard/policyguard/policy"
	"github.com/policyguard/policyguard/web"
)

// pagePool returns pooled limits setting each named limit to its value.
func pagePool(t *testing.T, values map[string]int64) *policy.LimitSet {
	t.Helper()
	m := make(map[string]*int64, len(values))
	for name, v := range values {
		m[name] = &v
	}
	p, err := policy.PoolLimitsOf(m)
	if err != nil {
		t.Fatal(err)
	}
	return &p
}

// putTeamTier stores tier "team", 10 a minute, 100 an hour and 1,000 a
// day per member, with pool as the pooled limits of an account on it.
func (e *pageEnv) putTeamTier(pool *policy.LimitSet) {
	e.t.Helper()
	t := policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(10)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(1000))}, Account: pool}
	if _, _, err := e.svc.PutTier(context.Background(), t); err != nil {
		e.t.Fatal(err)
	}
}

// putAccount stores account id on tier.
func (e *pageEnv) putAccount(id, tier string) {
	e.t.Helper()
	if _, _, err := e.svc.PutAccount(context.Background(), policy.Account{AccountID: id, Tier: tier}); err != nil {
		e.t.Fatal(err)
	}
}

// putMember stores user's record: a member of account, assigned tier ("" for none).
func (e *pageEnv) putMember(user, account, tier string) {
	e.t.Helper()
	if _, _, err := e.svc.PutUser(context.Background(), policy.UserRecord{UserID: user, Account: account, Tier: tier}); err != nil {
		e.t.Fatal(err)
	}
}

// checkTokens decides one check of user reserving tokens and returns
// "admitted" or the reason it was refused.
func (e *pageEnv) checkTokens(user string, tokens int64) string {
	e.t.Helper()
	d, err := e.svc.Check(context.Background(), policy.Request{UserID: user, Tokens: tokens}, false)
	if err != nil {
		e.t.Fatalf("check of %s: %v", user, err)
	}
	if d.Outcome == policy.Admitted {
		return "admitted"
	}
	return d.Reason
}

// The Accounts page, reachable from the navigation, creates an account
// with overrides of its plan's pooled limits and lists it; the account's
// page edits it; a form with bad values is sent back with the service's
// words beside each field and changes nothing; and deleting an account
// with members is refused with the service's message, which says how many.
func TestAccountsPageCreateEditDelete(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	ctx := context.Background()
	e.putTeamTier(pagePool(t, map[string]int64{"requests_per_minute": 3, "max_concurrent": 4}))

	for _, path := range []string{"/admin", "/admin/usage", "/admin/overview", "/admin/accounts"} {
		doc := parsePage(t, b.get(path), http.StatusOK)
		nav := doc.find(func(n *html.Node) bool { return n.Data == "a" && pageAttr(n, "href") == "/admin/accounts" })
		if len(nav) != 1 || pageText(nav[0]) != "Accounts" {
			t.Fatalf("%s: no Accounts link in the navigation", path)
		}
		if current := pageAttr(nav[0], "aria-current") == "page"; current != (path == "/admin/accounts") {
			t.Errorf("%s: the Accounts link is current: %v", path, current)
		}
	}
	doc := parsePage(t, b.get("/admin/accounts"), http.StatusOK)
	if !strings.Contains(doc.raw, "No accounts yet") {
		t.Error("the empty list does not say so")
	}

	form := url.Values{"account_id": {"acme"}, "tier": {"team"}, "limits.requests_per_day": {"500"},
		"limits.max_concurrent": {"none"}, "note": {"Acme Corp"}}
	if rec := b.post("/admin/accounts", url.Values{"account_id": {"acme"}, "tier": {"team"}, "csrf": {"wrong"}}); rec.Code != http.StatusForbidden {
		t.Fatalf("create without the CSRF token: %d", rec.Code)
	}
	doc = b.follow(b.post("/admin/accounts", form), "/admin/accounts")
	if got, want := doc.flash(), "Created account acme — tier team; requests_per_day 500; max_concurrent none; it applies to its members' next checks"; got != want {
		t.Errorf("flash %q, want %q", got, want)
	}
	for field, want := range map[string]string{"tier": "team", "pool": "3/min, 500/day", "note": "Acme Corp"} {
		if got := doc.cell("acct-acme", field); got != want {
			t.Errorf("listed %s %q, want %q", field, got, want)
		}
	}
	acct, err := e.svc.Account(ctx, "acme")
	if err != nil || acct.Tier != "team" || acct.Note != "Acme Corp" || policy.AccountSummary(&acct) != "tier team; requests_per_day 500; max_concurrent none" {
		t.Fatalf("stored %+v, %v", acct, err)
	}

	for _, tc := range []struct{ field, value, want string }{
		{"account_id", "acme", `an account named "acme" already exists: edit it on its page instead`},
		{"account_id", "", "account_id must not be empty"},
		{"tier", "gold", `unknown tier "gold"`},
		{"limits.requests_per_minute", "-1", "limits.requests_per_minute must be an integer from 0 to 2147483647"},
		{"limits.requests_per_hour", "2", "limits.requests_per_hour (2) is below limits.requests_per_minute (3): the hour would refuse first"},
	} {
		bad := url.Values{"account_id": {"globex"}, "tier": {"team"}, "limits.requests_per_day": {"500"}}
		bad.Set(tc.field, tc.value)
		doc := parsePage(t, b.post("/admin/accounts", bad), http.StatusBadRequest)
		id := "account-" + strings.ReplaceAll(strings.TrimPrefix(tc.field, "limits."), "_", "-")
		if tc.field == "account_id" {
			id = "account-id"
		}
		if got := doc.text(id + "-error"); got != tc.want {
			t.Errorf("%s=%q: error %q, want %q", tc.field, tc.value, got, tc.want)
		}
		if got := pageValue(doc.control("Requests per day")); got != "500" {
			t.Errorf("%s=%q: the form lost what was typed: %q", tc.field, tc.value, got)
		}
		if !strings.HasPrefix(doc.alert(), "The account was not created") {
			t.Errorf("%s=%q: alert %q", tc.field, tc.value, doc.alert())
		}
	}
	if accounts, err := e.svc.Accounts(ctx, "", 10); err != nil || len(accounts) != 1 {
		t.Fatalf("after refused forms: %d accounts, %v; want acme alone", len(accounts), err)
	}

	// The account's page shows the form as stored, and saves a change.
	doc = parsePage(t, b.get(pageAttr(doc.find(func(n *html.Node) bool { return n.Data == "a" && pageText(n) == "acme" })[0], "href")), http.StatusOK)
	if got := doc.text("account-heading"); got != "Account acme" {
		t.Fatalf("account page heading %q", got)
	}
	for label, want := range map[string]string{"Requests per minute": "", "Requests per day": "500", "Max concurrent calls": "none", "Note": "Acme Corp"} {
		if got := pageValue(doc.control(label)); got != want {
			t.Errorf("edit form %s %q, want %q", label, got, want)
		}
	}
	edit := url.Values{"account_id": {"acme"}, "tier": {"team"}, "limits.requests_per_minute": {"5"}, "note": {"Acme Corp, EU"}}
	doc = b.follow(b.post("/admin/accounts/save", edit), "/admin/account?account_id=acme")
	if got := doc.flash(); !strings.HasPrefix(got, "Saved account acme — tier team; requests_per_minute 5") {
		t.Errorf("flash %q", got)
	}
	for field, want := range map[string]string{"plan": "3", "override": "5", "applies": "5"} {
		if got := doc.cell("pool-requests_per_minute", field); got != want {
			t.Errorf("pooled requests_per_minute %s %q, want %q", field, got, want)
		}
	}
	for field, want := range map[string]string{"plan": "4", "override": "—", "applies": "4"} {
		if got := doc.cell("pool-max_concurrent", field); got != want {
			t.Errorf("pooled max_concurrent %s %q, want %q", field, got, want)
		}
	}
	bad := url.Values{"account_id": {"acme"}, "tier": {"team"}, "limits.requests_per_minute": {"5"}, "limits.tokens_per_hour": {"many"}}
	doc = parsePage(t, b.post("/admin/accounts/save", bad), http.StatusBadRequest)
	if got, want := doc.text("account-tokens-per-hour-error"), "limits.tokens_per_hour must be an integer from 0 to 2147483647"; got != want {
		t.Errorf("edit error %q, want %q", got, want)
	}
	if got := pageValue(doc.control("Tokens per hour")); got != "many" {
		t.Errorf("the edit form lost what was typed: %q", got)
	}
	if rec := b.post("/admin/accounts/save", url.Values{"account_id": {"nobody"}, "tier": {"team"}}); rec.Code != http.StatusNotFound {
		t.Errorf("saving an account that does not exist: %d, want 404", rec.Code)
	}

	// Deleting is refused while a user belongs to the account.
	e.putMember("ann", "acme", "")
	doc = parsePage(t, b.post("/admin/accounts/delete", url.Values{"account_id": {"acme"}}), http.StatusConflict)
	if got, want := doc.alert(), `The account was not deleted: account "acme" has 1 member; move them to another account or remove it from their records first.`; got != want {
		t.Errorf("alert %q, want %q", got, want)
	}
	if _, err := e.svc.Account(ctx, "acme"); err != nil {
		t.Fatalf("a refused deletion deleted the account: %v", err)
	}
	if err := e.svc.DeleteUser(ctx, "ann"); err != nil {
		t.Fatal(err)
	}
	doc = b.follow(b.post("/admin/accounts/delete", url.Values{"account_id": {"acme"}}), "/admin/accounts")
	if got := doc.flash(); !strings.HasPrefix(got, "Deleted account acme") {
		t.Errorf("flash %q", got)
	}
	if _, err := e.svc.Account(ctx, "acme"); policy.ErrorCode(err) != policy.ENOTFOUND {
		t.Errorf("after deletion: %v, want ENOTFOUND", err)
	}
	if !strings.Contains(doc.raw, "No accounts yet") {
		t.Error("the list still shows an account")
	}
}

// The list pages through the accounts as the users page does through the
// records: 50 at a time, with a link to the next.
func TestAccountsPagePages(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	for i := range 51 {
		e.putAccount(fmt.Sprintf("org-%02d", i), "pro")
	}
	doc := parsePage(t, b.get("/admin/accounts"), http.StatusOK)
	if doc.byID("acct-org-49") == nil || doc.byID("acct-org-50") != nil {
		t.Fatal("the first page does not hold exactly the first 50 accounts")
	}
	next := doc.find(func(n *html.Node) bool { return n.Data == "a" && pageAttr(n, "rel") == "next" })
	if len(next) != 1 {
		t.Fatal("no link to the next accounts")
	}
	doc = parsePage(t, b.get(pageAttr(next[0], "href")), http.StatusOK)
	if doc.byID("acct-org-50") == nil || doc.byID("acct-org-49") != nil {
		t.Error("the second page does not hold the 51st account alone")
	}
}

// An account's page shows its pooled usage against its pooled limits
// (requests, tokens, open calls) and each member with their own usage,
// linking to their page; clearing the pooled history keeps the members'.
func TestAccountPageMembersAndUsage(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	e.putTeamTier(pagePool(t, map[string]int64{"requests_per_minute": 3, "tokens_per_day": 10000, "max_concurrent": 4}))
	e.putAccount("acme", "team")
	e.putMember("ann", "acme", "")
	e.putMember("bob", "acme", "pro")
	e.putAccount("globex", "team")
	for _, c := range []struct {
		user   string
		tokens int64
		want   string
	}{
		{"ann", 100, "admitted"}, {"ann", 100, "admitted"}, {"bob", 50, "admitted"},
		{"bob", 50, "account per-minute limit exceeded"},
	} {
		if got := e.checkTokens(c.user, c.tokens); got != c.want {
			t.Fatalf("check of %s: %q, want %q", c.user, got, c.want)
		}
	}

	doc := parsePage(t, b.get("/admin/account?account_id=acme"), http.StatusOK)
	for _, tc := range []struct{ row, field, want string }{
		{"pool-window-minute", "count", "3"},
		{"pool-window-minute", "limit", "3"},
		{"pool-window-minute", "remaining", "0"},
		{"pool-window-hour", "count", "3"},
		{"pool-window-hour", "limit", "none"},
		{"pool-window-minute", "tokens_used", "250"},
		{"pool-window-minute", "token_limit", "none"},
		{"pool-window-day", "token_limit", "10,000"},
		{"pool-window-day", "tokens_remaining", "9,750"},
		{"pool-usage", "calls_in_flight", "3"},
		{"pool-usage", "calls_limit", "4"},
		{"member-ann", "tier", "team (the account's)"},
		{"member-ann", "minute", "2 of 10"},
		{"member-ann", "tokens_day", "200"},
		{"member-ann", "calls_in_flight", "2"},
		{"member-bob", "tier", "pro"},
		{"member-bob", "tokens_day", "50"},
	} {
		if got := doc.cell(tc.row, tc.field); got != tc.want {
			t.Errorf("#%s %s: %q, want %q", tc.row, tc.field, got, tc.want)
		}
	}
	if got := doc.cell("member-bob", "day"); got != "1 of "+policy.GroupDigits(e.tier("pro").Limits.Value(policy.RequestsPerDay)) {
		t.Errorf("bob's day %q: not against pro's limit", got)
	}
	link := doc.find(func(n *html.Node) bool { return n.Data == "a" && pageText(n) == "ann" })
	if len(link) != 1 {
		t.Fatal("no link to ann's page")
	}
	user := parsePage(t, b.get(pageAttr(link[0], "href")), http.StatusOK)
	if got := user.cell("window-minute", "count"); got != "2" {
		t.Errorf("ann's page: minute count %q, want 2", got)
	}
	if got := user.cell("record", "record-account"); !strings.HasPrefix(got, "Member of account acme") {
		t.Errorf("ann's page: %q", got)
	}

	// Another account's page is its own: no members, nothing counted.
	other := parsePage(t, b.get("/admin/account?account_id=globex"), http.StatusOK)
	if got := other.cell("pool-window-minute", "count"); got != "0" {
		t.Errorf("globex minute count %q, want 0", got)
	}
	if other.byID("members") == nil || !strings.Contains(pageText(other.byID("members")), "No members") {
		t.Error("globex's page does not say it has no members")
	}
	if rec := b.get("/admin/account?account_id=nobody"); rec.Code != http.StatusNotFound {
		t.Errorf("an account that does not exist: %d, want 404", rec.Code)
	}

	doc = b.follow(b.post("/admin/accounts/clear", url.Values{"account_id": {"acme"}}), "/admin/account?account_id=acme")
	if got := doc.cell("pool-window-minute", "count"); got != "0" {
		t.Errorf("pooled minute count after clearing %q, want 0", got)
	}
	if got := doc.cell("member-ann", "minute"); got != "2 of 10" {
		t.Errorf("ann's minute after clearing the pool %q, want her own 2 kept", got)
	}
	if got := e.checkTokens("bob", 50); got != "admitted" {
		t.Errorf("bob after clearing the pool: %q", got)
	}
}

// The tier form carries the tier's account object: a checkbox, and a
// field per limit whose empty value sets no pooled limit. It round-trips,
// refuses bad pooled limits beside their field in the words of
// Tier.ValidateFields, refuses pooled limits typed without the checkbox,
// and the audit log words each change.
func TestAdminPageTierAccountFields(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	doc := parsePage(t, b.get("/admin/tiers/free"), http.StatusOK)
	box := doc.control("Pooled limits for accounts on this plan")
	if pageAttr(box, "type") != "checkbox" || pageHasAttr(box, "checked") {
		t.Fatalf("the checkbox of a tier without an account object: type %q, checked %v", pageAttr(box, "type"), pageHasAttr(box, "checked"))
	}
	for f := range policy.FieldsIn(policy.ScopeAccount) {
		label := "Account: " + strings.ToLower(f.Label[:1]) + f.Label[1:]
		if c := doc.control(label); pageAttr(c, "name") != "account."+f.Name || pageValue(c) != "" {
			t.Errorf("%s: name %q value %q", label, pageAttr(c, "name"), pageValue(c))
		}
	}

	form := pageTierForm(e.tier("free"))
	form.Set("account", "on")
	form.Set("account.requests_per_minute", "100")
	form.Set("account.tokens_per_day", " 2000000 ")
	b.follow(b.post("/admin/tiers/free", form), "/admin")
	want := pagePool(t, map[string]int64{"requests_per_minute": 100, "tokens_per_day": 2000000})
	if got := e.tier("free").Account; got == nil || !got.Equal(want) {
		t.Fatalf("stored account %v, want %v", got, want)
	}
	doc = parsePage(t, b.get("/admin/tiers/free"), http.StatusOK)
	if !pageHasAttr(doc.control("Pooled limits for accounts on this plan"), "checked") {
		t.Error("the checkbox is not ticked for a tier with an account object")
	}
	for label, want := range map[string]string{"Account: requests per minute": "100", "Account: requests per hour": "", "Account: tokens per day": "2000000", "Account: max concurrent calls": ""} {
		if got := pageValue(doc.control(label)); got != want {
			t.Errorf("edit form %s %q, want %q", label, got, want)
		}
	}
	if page := b.get("/admin").Body.String(); !strings.Contains(page, "account.requests_per_minute: none → 100") || !strings.Contains(page, "account.tokens_per_day: none → 2,000,000") {
		t.Error("the audit log does not word the new account object")
	}

	for _, tc := range []struct {
		set         map[string]string
		field, want string
	}{
		{map[string]string{"account": "on", "account.requests_per_minute": "100", "account.requests_per_hour": "50"}, "account.requests_per_hour",
			"account.requests_per_hour (50) is below account.requests_per_minute (100): the hour would refuse first"},
		{map[string]string{"account": "on", "account.max_concurrent": "x"}, "account.max_concurrent",
			"account.max_concurrent must be an integer from 0 to 2147483647"},
		{map[string]string{"account.requests_per_day": "5000"}, "account",
			"tick this box to give the tier pooled limits, or empty the account fields below"},
	} {
		before := e.tier("free")
		form := pageTierForm(before)
		for k, v := range tc.set {
			form.Set(k, v)
		}
		doc := parsePage(t, b.post("/admin/tiers/free", form), http.StatusBadRequest)
		if got := doc.text("tier-" + pageFieldID(tc.field) + "-error"); got != tc.want {
			t.Errorf("beside %s: %q, want %q", tc.field, got, tc.want)
		}
		if after := e.tier("free"); !after.UpdatedAt.Equal(before.UpdatedAt) {
			t.Errorf("%v changed the tier", tc.set)
		}
	}

	// Changed field by field, then removed with the checkbox.
	form = pageTierForm(e.tier("free"))
	form.Set("account", "on")
	form.Set("account.requests_per_minute", "80")
	form.Set("account.tokens_per_day", "2000000")
	b.follow(b.post("/admin/tiers/free", form), "/admin")
	b.follow(b.post("/admin/tiers/free", pageTierForm(e.tier("free"))), "/admin")
	if got := e.tier("free").Account; got != nil {
		t.Fatalf("unticked, the tier keeps account %v", got)
	}
	page := b.get("/admin").Body.String()
	for _, want := range []string{"account.requests_per_minute: 100 → 80", "account.requests_per_minute: 80 → none", "account.tokens_per_day: 2,000,000 → none"} {
		if !strings.Contains(page, want) {
			t.Errorf("the audit log does not say %q", want)
		}
	}
}

// The record form names the user's account: saved, it makes the user a
// member (the record's summary says so and links to the account); an
// account that does not exist is refused beside the field with the
// service's message, and changes nothing.
func TestRecordFormAccount(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	ctx := context.Background()
	e.putAccount("acme", "pro")
	doc := b.follow(b.post("/admin/users/save", url.Values{"user_id": {"carol"}, "account": {" acme "}, "note": {"seat 1"}}), "/admin/usage?user_id=carol")
	if got, want := doc.cell("record", "record-summary"), "no tier assigned; account acme"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
	if got := pageValue(doc.control("Account")); got != "acme" {
		t.Errorf("the form shows account %q", got)
	}
	if link := doc.find(func(n *html.Node) bool {
		return n.Data == "a" && pageAttr(n, "href") == "/admin/account?account_id=acme"
	}); len(link) == 0 {
		t.Error("the record does not link to its account")
	}
	r, err := e.svc.User(ctx, "carol")
	if err != nil || r.Account != "acme" {
		t.Fatalf("stored %+v, %v", r, err)
	}
	if d, err := e.svc.Check(ctx, policy.Request{UserID: "carol"}, true); err != nil || d.Account == nil || d.Account.ID != "acme" || d.Tier != "pro" {
		t.Fatalf("carol's check: %+v, %v; want drawn on acme under pro", d, err)
	}

	doc = parsePage(t, b.post("/admin/users/save", url.Values{"user_id": {"carol"}, "account": {"nope"}, "note": {"seat 1"}}), http.StatusBadRequest)
	if got, want := doc.text("record-account-error"), `unknown account "nope"`; got != want {
		t.Errorf("error beside the account %q, want %q", got, want)
	}
	if got := doc.text("record-tier-error"); got != "" {
		t.Errorf("an unknown account is blamed on the tier: %q", got)
	}
	if got := pageValue(doc.control("Account")); got != "nope" {
		t.Errorf("the form lost what was typed: %q", got)
	}
	if r2, _ := e.svc.User(ctx, "carol"); !r2.UpdatedAt.Equal(r.UpdatedAt) || r2.Account != "acme" {
		t.Fatal("a refused form changed the record")
	}

	// Saved again untouched, the record keeps its account.
	doc = parsePage(t, b.get("/admin/usage?user_id=carol"), http.StatusOK)
	again := url.Values{"user_id": {"carol"}, "tier": {"free"}, "account": {pageValue(doc.control("Account"))}}
	b.follow(b.post("/admin/users/save", again), "/admin/usage?user_id=carol")
	if r, _ := e.svc.User(ctx, "carol"); r.Account != "acme" || r.Tier != "free" {
		t.Errorf("after saving again: %+v", r)
	}
}

// The overview counts a member's check refused by the account's pooled
// limits with the rest: in its own column of the tier's table, and in its
// own series of the chart, hatched and named in the legend.
func TestOverviewCountsAccountRefusals(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	e.putTeamTier(pagePool(t, map[string]int64{"requests_per_minute": 1}))
	e.putAccount("acme", "team")
	e.putMember("ann", "acme", "")
	e.putMember("bob", "acme", "")
	minute := e.clock.Now().UTC().Format("15:04")
	for _, c := range []struct{ user, want string }{
		{"ann", "admitted"}, {"bob", "account per-minute limit exceeded"}, {"ann", "account per-minute limit exceeded"},
	} {
		if got := e.checkTokens(c.user, 0); got != c.want {
			t.Fatalf("check of %s: %q, want %q", c.user, got, c.want)
		}
	}
	if err := e.store.FlushCounts(context.Background()); err != nil {
		t.Fatal(err)
	}
	doc := parsePage(t, b.get("/admin/overview"), http.StatusOK)
	var hour *statsTable
	tables := pageTables(doc)
	for i := range tables {
		if strings.Contains(tables[i].caption, "Tier team, last hour") {
			hour = &tables[i]
		}
	}
	if hour == nil {
		t.Fatal("no table of tier team, last hour")
	}
	found := false
	for _, row := range hour.rows {
		if row["Time"] == minute {
			found = true
			if row["Admitted"] != "1" || row["Refused"] != "2" || row["Account's pooled limits"] != "2" {
				t.Errorf("minute %s: %v; want 1 admitted, 2 refused by the account", minute, row)
			}
		}
	}
	if !found {
		t.Fatalf("no row for %s in %v", minute, hour.headers)
	}
	chart := doc.byID("chart-0-hour")
	if chart == nil {
		t.Fatal("no chart of tier team, last hour")
	}
	sub := &pageDoc{t: t, root: chart.Parent}
	if len(sub.find(func(n *html.Node) bool { return n.Data == "pattern" && pageAttr(n, "id") == "chart-0-hour-account" })) != 1 {
		t.Error("the chart has no hatching of account refusals")
	}
	if !strings.Contains(pageText(chart.Parent), minute+", Refused: account's pooled limits: 2") {
		t.Error("no bar of account refusals")
	}
	if legend := sub.find(func(n *html.Node) bool { return n.Data == "li" && pageText(n) == "Refused: account's pooled limits" }); len(legend) != 1 {
		t.Error("the legend does not name account refusals")
	}
	if strings.Contains(pageText(chart.Parent), "another guardrail") {
		t.Error("account refusals are drawn as another guardrail's")
	}
}

// A service without accounts says so on the Accounts page, and its record
// form has no Account field.
func TestAccountsPageWithoutAccounts(t *testing.T) {
	e := newPageEnv(t)
	// Records kept in a store that does not keep accounts.
	users := struct{ policy.UserStore }{e.store}
	e.svc = policy.NewService(e.store, e.store, policy.WithClock(e.clock.Now), policy.WithUsers(users))
	e.srv = newPageServer(web.Config{Service: e.svc, Gate: policy.NewAdminGate(pageToken), Sessions: e.store})
	b := e.signIn()
	doc := parsePage(t, b.get("/admin/usage?user_id=carol"), http.StatusOK)
	if doc.byID("record-heading") == nil || doc.byID("record-account") != nil {
		t.Error("the record form of a service without accounts: want no Account field")
	}
	doc = parsePage(t, b.get("/admin/accounts"), http.StatusOK)
	if got := doc.alert(); got != "This service keeps no accounts." {
		t.Errorf("alert %q", got)
	}
	if doc.byID("create") != nil {
		t.Error("a service without accounts offers to create one")
	}
	if rec := b.post("/admin/accounts/save", url.Values{"account_id": {"acme"}}); rec.Code != http.StatusNotFound {
		t.Errorf("saving an account: %d, want 404", rec.Code)
	}
}

// An account id is any user id, so the pages name it in the query and in
// hidden fields rather than the path: ids with a slash, of dots only or
// with markup reach their own page, are escaped on it, and its forms act
// on them; and no id makes a row of the list share an id with a control.
func TestAccountPageOddIDs(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	for _, id := range []string{"a/b", "..", `<b>x</b> & "y"`, "é ?#", "id", "tier"} {
		t.Run(id, func(t *testing.T) {
			e.putAccount(id, "pro")
			list := parsePage(t, b.get("/admin/accounts"), http.StatusOK)
			links := list.find(func(n *html.Node) bool { return n.Data == "a" && pageText(n) == id })
			if len(links) != 1 {
				t.Fatalf("%q is not listed with a link", id)
			}
			// A listed account's row never takes the id of a form control.
			if c := list.control("Account id"); pageAttr(c, "name") != "account_id" {
				t.Errorf("the Account id label leads to a %s", c.Data)
			}
			if c := list.control("Plan"); pageAttr(c, "name") != "tier" {
				t.Errorf("the Plan label leads to a %s", c.Data)
			}
			doc := parsePage(t, b.get(pageAttr(links[0], "href")), http.StatusOK)
			if got := doc.text("account-heading"); got != "Account "+id {
				t.Errorf("heading %q", got)
			}
			if strings.Contains(doc.raw, "<b>x") {
				t.Error("the id is not escaped")
			}
			form := url.Values{"account_id": {doc.hidden("account_id")}, "tier": {"pro"}, "note": {"edited"}}
			b.follow(b.post("/admin/accounts/save", form), "/admin/account?"+url.Values{"account_id": {id}}.Encode())
			if a, err := e.svc.Account(t.Context(), id); err != nil || a.Note != "edited" {
				t.Errorf("after saving: %+v, %v", a, err)
			}
			b.follow(b.post("/admin/accounts/delete", url.Values{"account_id": {id}}), "/admin/accounts")
			if _, err := e.svc.Account(t.Context(), id); policy.ErrorCode(err) != policy.ENOTFOUND {
				t.Errorf("after deleting: %v", err)
			}
		})
	}
}
