package web_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"golang.org/x/net/html"
)

// field returns the text of the element whose data-field is name.
func (d *pageDoc) field(name string) string {
	d.t.Helper()
	ns := d.find(func(n *html.Node) bool { return pageAttr(n, "data-field") == name })
	if len(ns) == 0 {
		d.t.Fatalf("no %s field", name)
	}
	return pageText(ns[0])
}

// The record and account forms set a time zone and a billing day, show
// them as stored and refuse bad ones beside their field; the pages show
// the billing period they give. The clock stands at 4 May 2026, 12:00 UTC.
func TestBillingCycleForms(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	ctx := context.Background()
	e.putTeamTier(pagePool(t, map[string]int64{"requests_per_minute": 3}))

	doc := parsePage(t, b.get("/admin/usage?user_id=nobody"), http.StatusOK)
	if got, want := doc.field("record-period"), "Billing period: 1 May 2026 00:00 to 1 Jun 2026 00:00, UTC, billing day 1."; got != want {
		t.Errorf("no record: %q, want %q", got, want)
	}

	doc = b.follow(b.post("/admin/accounts", url.Values{"account_id": {"acme"}, "tier": {"team"}, "time_zone": {" Asia/Tokyo "}, "billing_anchor": {"31"}}), "/admin/accounts")
	if a, err := e.svc.Account(ctx, "acme"); err != nil || a.TimeZone != "Asia/Tokyo" || a.BillingAnchor != 31 {
		t.Fatalf("stored %+v, %v", a, err)
	}
	doc = parsePage(t, b.get("/admin/account?account_id=acme"), http.StatusOK)
	if got, want := doc.field("account-period"), "Billing period: 30 Apr 2026 00:00 to 31 May 2026 00:00, Asia/Tokyo, billing day 31."; got != want {
		t.Errorf("account page: %q, want %q", got, want)
	}
	if got := pageValue(doc.control("Time zone")); got != "Asia/Tokyo" {
		t.Errorf("the account form shows time zone %q", got)
	}
	if got := pageValue(doc.control("Billing day")); got != "31" {
		t.Errorf("the account form shows billing day %q", got)
	}

	doc = b.follow(b.post("/admin/users/save", url.Values{"user_id": {"carol"}, "account": {"acme"}, "billing_anchor": {"15"}}), "/admin/usage?user_id=carol")
	if got, want := doc.field("record-summary"), "no tier assigned; account acme; billing_anchor 15"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
	if got, want := doc.field("record-period"), "Billing period: 15 Apr 2026 00:00 to 15 May 2026 00:00, Asia/Tokyo, billing day 15."; got != want {
		t.Errorf("member's period %q, want %q", got, want)
	}
	if got := pageValue(doc.control("Billing day")); got != "15" {
		t.Errorf("the record form shows billing day %q", got)
	}

	for _, tc := range []struct{ field, value, want string }{
		{"time_zone", "Mars/Base", `time_zone "Mars/Base" is not a known time zone`},
		{"billing_anchor", "0", "billing_anchor must be an integer from 1 to 31"},
		{"billing_anchor", "first", "billing_anchor must be an integer from 1 to 31"},
	} {
		id := map[string]string{"time_zone": "time-zone", "billing_anchor": "billing-anchor"}[tc.field]
		doc := parsePage(t, b.post("/admin/users/save", url.Values{"user_id": {"carol"}, tc.field: {tc.value}}), http.StatusBadRequest)
		if got := doc.text("record-" + id + "-error"); got != tc.want {
			t.Errorf("record %s %q: %q, want %q", tc.field, tc.value, got, tc.want)
		}
		doc = parsePage(t, b.post("/admin/accounts/save", url.Values{"account_id": {"acme"}, "tier": {"team"}, tc.field: {tc.value}}), http.StatusBadRequest)
		if got := doc.text("account-" + id + "-error"); got != tc.want {
			t.Errorf("account %s %q: %q, want %q", tc.field, tc.value, got, tc.want)
		}
	}
	if r, err := e.svc.User(ctx, "carol"); err != nil || r.BillingAnchor != 15 || r.TimeZone != "" {
		t.Errorf("a refused form changed the record: %+v, %v", r, err)
	}

	// Emptied, the account's fields keep the default again.
	b.follow(b.post("/admin/accounts/save", url.Values{"account_id": {"acme"}, "tier": {"team"}, "time_zone": {""}, "billing_anchor": {""}}), "/admin/account?account_id=acme")
	if a, err := e.svc.Account(ctx, "acme"); err != nil || a.TimeZone != "" || a.BillingAnchor != 0 {
		t.Errorf("emptied: %+v, %v", a, err)
	}
}
