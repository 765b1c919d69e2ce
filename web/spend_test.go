package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/policyguard/policyguard/policy"
)

// The forms read spend limits in dollars ("$5", "20.50", "100") exactly and
// show them back in dollars, as the tiers table, an account's page and the
// audit log word them; a bad amount is refused beside its field.
func TestAdminPageSpendLimits(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	ctx := context.Background()
	const dollar = 1_000_000_000_000

	form := pageTierForm(e.tier("pro"))
	form.Set("cost_per_hour", "$5")
	form.Set("cost_per_day", " 20.50 ")
	form.Set("account", "on")
	form.Set("account.cost_per_day", "100.000000000001")
	b.follow(b.post("/admin/tiers/pro", form), "/admin")
	got := e.tier("pro")
	if got.Limits.Value(policy.CostPerHour) != 5*dollar || got.Limits.Value(policy.CostPerDay) != 20*dollar+dollar/2 ||
		got.Limits[policy.CostPerMinute] != nil || got.Account == nil || got.Account.Value(policy.CostPerDay) != 100*dollar+1 {
		t.Fatalf("stored %v, account %v; want $5 an hour, $20.50 a day and $100.000000000001 a day pooled", got.Limits, got.Account)
	}
	edit := parsePage(t, b.get("/admin/tiers/pro"), http.StatusOK)
	for label, want := range map[string]string{"Spend per minute": "", "Spend per hour": "$5.00", "Spend per day": "$20.50", "Account: spend per day": "$100.000000000001"} {
		if got := pageValue(edit.control(label)); got != want {
			t.Errorf("edit form %s %q, want %q", label, got, want)
		}
	}
	if got := pageAttr(edit.control("Spend per day"), "inputmode"); got != "decimal" {
		t.Errorf("spend per day inputmode %q, want decimal", got)
	}
	admin := parsePage(t, b.get("/admin"), http.StatusOK)
	for field, want := range map[string]string{"cost_per_minute": "none", "cost_per_hour": "$5.00", "cost_per_day": "$20.50"} {
		if got := admin.cell("tier-pro", field); got != want {
			t.Errorf("the tiers table shows %s %q, want %q", field, got, want)
		}
	}
	for _, want := range []string{"cost_per_hour: none → $5.00", "cost_per_day: none → $20.50", "account.cost_per_day: none → $100.000000000001"} {
		if !strings.Contains(admin.raw, want) {
			t.Errorf("the audit log does not say %q", want)
		}
	}

	for _, bad := range []struct{ field, value, want string }{
		{"cost_per_day", "twenty", `cost_per_day must be a dollar amount such as "20" or "0.15"`},
		{"cost_per_day", "20,000", `cost_per_day must be a dollar amount such as "20" or "0.15"`},
		{"cost_per_hour", "-1", "cost_per_hour must be a dollar amount from $0.00 to $9223372.036854775807"},
		{"cost_per_minute", "0.0000000000001", `cost_per_minute: "0.0000000000001" is finer than a picodollar (at most 12 decimals)`},
		{"cost_per_day", "4", "cost_per_day ($4.00) is below cost_per_hour ($5.00): the day would refuse first"},
	} {
		before := e.tier("pro")
		form := pageTierForm(before)
		form.Set("cost_per_hour", "5")
		form.Set(bad.field, bad.value)
		doc := parsePage(t, b.post("/admin/tiers/pro", form), http.StatusBadRequest)
		if got := doc.text("tier-" + strings.ReplaceAll(bad.field, "_", "-") + "-error"); got != bad.want {
			t.Errorf("%s %q: beside the field %q, want %q", bad.field, bad.value, got, bad.want)
		}
		if after := e.tier("pro"); !after.UpdatedAt.Equal(before.UpdatedAt) {
			t.Errorf("%s %q changed the tier", bad.field, bad.value)
		}
	}

	// A user's record overrides a spend limit in dollars.
	rec := url.Values{"user_id": {"carol"}, "tier": {"pro"}, "cost_per_day": {"$12.345"}, "cost_per_hour": {"none"}}
	doc := b.follow(b.post("/admin/users/save", rec), "/admin/usage?user_id=carol")
	if got, want := doc.cell("record", "record-summary"), "tier pro; cost_per_hour none; cost_per_day $12.345"; got != want {
		t.Errorf("record summary %q, want %q", got, want)
	}
	if got := pageValue(doc.control("cost_per_day")); got != "$12.345" {
		t.Errorf("the record form shows cost_per_day %q", got)
	}
	if r, err := e.svc.User(ctx, "carol"); err != nil || r.Limits[policy.CostPerDay].Limit == nil || *r.Limits[policy.CostPerDay].Limit != 12_345_000_000_000 {
		t.Fatalf("stored %+v, %v", r, err)
	}
	rec.Set("cost_per_day", "12.3.4")
	doc = parsePage(t, b.post("/admin/users/save", rec), http.StatusBadRequest)
	if got, want := doc.text("record-cost_per_day-error"), `cost_per_day must be a dollar amount such as "20" or "0.15"`; got != want {
		t.Errorf("record error %q, want %q", got, want)
	}

	// An account's pooled spend limit, in dollars on its page.
	acct := url.Values{"account_id": {"acme"}, "tier": {"pro"}, "limits.cost_per_day": {"250.75"}}
	doc = b.follow(b.post("/admin/accounts", acct), "/admin/accounts")
	if got := doc.flash(); !strings.Contains(got, "cost_per_day $250.75") {
		t.Errorf("flash %q", got)
	}
	doc = parsePage(t, b.get("/admin/account?account_id=acme"), http.StatusOK)
	for field, want := range map[string]string{"plan": "$100.000000000001", "override": "$250.75", "applies": "$250.75"} {
		if got := doc.cell("pool-cost_per_day", field); got != want {
			t.Errorf("pooled cost_per_day %s %q, want %q", field, got, want)
		}
	}
	if got := pageValue(doc.control("Spend per day")); got != "$250.75" {
		t.Errorf("account form spend per day %q", got)
	}
}
