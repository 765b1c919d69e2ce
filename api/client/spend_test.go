package client_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/policyguard/policyguard/api/client"
)

// Spend limits round-trip through the real API as decimal strings of
// dollars, exactly: a tier's own and its pooled ones, a user's override
// and an account's, and a wrong one is a 400 naming the field.
func TestClientSpendLimits(t *testing.T) {
	e := newEnv(t, nil)
	c := newClient(t, e.url, client.WithAdminToken(adminToken))
	ctx := context.Background()
	str := func(p *string) string {
		if p == nil {
			return "<nil>"
		}
		return *p
	}

	in := client.Tier{Name: "spend",
		Limits:  client.Limits{RequestsPerMinute: client.Limit(10), RequestsPerHour: client.Limit(100), RequestsPerDay: client.Limit(1000), CostPerHour: client.Dollars("5"), CostPerDay: client.Dollars("20.5")},
		Account: &client.Limits{CostPerDay: client.Dollars("100.000000000001")}}
	if _, _, err := c.PutTier(ctx, in); err != nil {
		t.Fatal(err)
	}
	got, err := c.Tier(ctx, "spend")
	if err != nil {
		t.Fatal(err)
	}
	if str(got.CostPerDay) != "20.5" || str(got.CostPerHour) != "5" || got.CostPerMinute != nil || got.Account == nil || str(got.Account.CostPerDay) != "100.000000000001" {
		t.Fatalf("Tier spend: cost_per_minute %s, hour %s, day %s, account %+v", str(got.CostPerMinute), str(got.CostPerHour), str(got.CostPerDay), got.Account)
	}

	acme, _, err := c.PutAccount(ctx, client.Account{AccountID: "acme", Tier: "spend",
		Limits: map[string]*int64{"requests_per_minute": client.Limit(3)},
		Spend:  map[string]*string{"cost_per_day": client.Dollars("250.75"), "cost_per_hour": nil}})
	if err != nil {
		t.Fatal(err)
	}
	if acme, err = c.Account(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if v, ok := acme.Spend["cost_per_hour"]; str(acme.Spend["cost_per_day"]) != "250.75" || !ok || v != nil || *acme.Limits["requests_per_minute"] != 3 {
		t.Fatalf("Account acme: limits %v, spend %v", acme.Limits, acme.Spend)
	}

	if _, _, err := c.PutUser(ctx, client.User{UserID: "ann", Tier: "spend", Account: "acme",
		Spend: map[string]*string{"cost_per_day": client.Dollars("12.345")}}); err != nil {
		t.Fatal(err)
	}
	ann, err := c.User(ctx, "ann")
	if err != nil || str(ann.Spend["cost_per_day"]) != "12.345" || ann.Limits != nil {
		t.Fatalf("User ann = limits %v, spend %v, %v", ann.Limits, ann.Spend, err)
	}

	_, _, err = c.PutUser(ctx, client.User{UserID: "bob", Tier: "spend", Spend: map[string]*string{"cost_per_day": client.Dollars("$5")}})
	wantError(t, "a dollar sign", err, http.StatusBadRequest, `limits.cost_per_day must be null or a dollar amount as a decimal string, such as "20" or "0.15"`)
}
