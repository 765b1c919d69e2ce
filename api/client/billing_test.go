package client_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api/client"
)

// An account's and a record's time zone and billing anchor are put, read
// back as set, refused when bad, and give the period of the usage answers.
func TestClientBillingCycle(t *testing.T) {
	e := newEnv(t, nil)
	c := newClient(t, e.url, client.WithAdminToken(adminToken))
	ctx := context.Background()
	if _, _, err := c.PutTier(ctx, client.Tier{Name: "team", Limits: client.Limits{RequestsPerMinute: client.Limit(10), RequestsPerHour: client.Limit(100), RequestsPerDay: client.Limit(1000)}, Account: &client.Limits{}}); err != nil {
		t.Fatal(err)
	}
	acme, _, err := c.PutAccount(ctx, client.Account{AccountID: "acme", Tier: "team", TimeZone: "Europe/Berlin", BillingAnchor: 31})
	if err != nil || acme.TimeZone != "Europe/Berlin" || acme.BillingAnchor != 31 {
		t.Fatalf("PutAccount = %+v, %v", acme, err)
	}
	ann, _, err := c.PutUser(ctx, client.User{UserID: "ann", Account: "acme", BillingAnchor: 15})
	if err != nil || ann.TimeZone != "" || ann.BillingAnchor != 15 {
		t.Fatalf("PutUser = %+v, %v", ann, err)
	}
	if got, err := c.User(ctx, "ann"); err != nil || got.BillingAnchor != 15 {
		t.Fatalf("User = %+v, %v", got, err)
	}
	_, _, err = c.PutUser(ctx, client.User{UserID: "bob", TimeZone: "Mars/Base"})
	wantError(t, "unknown zone", err, http.StatusBadRequest, `time_zone "Mars/Base" is not a known time zone`)
	_, _, err = c.PutAccount(ctx, client.Account{AccountID: "zeta", Tier: "team", BillingAnchor: 32})
	wantError(t, "anchor 32", err, http.StatusBadRequest, "billing_anchor must be an integer from 1 to 31")

	// t0 is 1 June 2026, 11:00 in Berlin.
	at := func(s string) time.Time { v, _ := time.Parse(time.RFC3339, s); return v }
	u, err := c.Usage(ctx, "ann", "")
	if p := u.Period; err != nil || !p.Start.Equal(at("2026-05-15T00:00:00+02:00")) || !p.End.Equal(at("2026-06-15T00:00:00+02:00")) ||
		p.TimeZone != "Europe/Berlin" || p.BillingAnchor != 15 {
		t.Errorf("ann's period: %+v, %v", p, err)
	}
	au, err := c.AccountUsage(ctx, "acme")
	if p := au.Period; err != nil || !p.Start.Equal(at("2026-05-31T00:00:00+02:00")) || !p.End.Equal(at("2026-06-30T00:00:00+02:00")) ||
		p.TimeZone != "Europe/Berlin" || p.BillingAnchor != 31 {
		t.Errorf("acme's period: %+v, %v", p, err)
	}
}
