package client_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/policyguard/policyguard/api/client"
)

// A tier's run object round-trips through the client, max_cost in
// dollars; a bad one is the service's 400 naming the field.
func TestClientTierRun(t *testing.T) {
	e := newEnv(t, nil)
	c := newClient(t, e.url, client.WithAdminToken(adminToken))
	ctx := context.Background()
	limits := client.Limits{RequestsPerMinute: client.Limit(10), RequestsPerHour: client.Limit(100), RequestsPerDay: client.Limit(1000)}
	tier := client.Tier{Name: "agents", Limits: limits, Run: &client.RunLimits{
		MaxRequests: client.Limit(50), MaxCost: client.Dollars("2.50"), MaxDuration: client.Limit(600), MaxDepth: client.Limit(3), Required: true}}
	if _, _, err := c.PutTier(ctx, tier); err != nil {
		t.Fatal(err)
	}
	got, err := c.Tier(ctx, "agents")
	if err != nil {
		t.Fatal(err)
	}
	r := got.Run
	if r == nil || *r.MaxRequests != 50 || *r.MaxCost != "2.5" || *r.MaxDuration != 600 || *r.MaxDepth != 3 || !r.Required ||
		r.MaxTokens != nil || r.MaxConcurrent != nil {
		t.Fatalf("Tier.Run = %+v", r)
	}
	got.Run = nil
	if back, _, err := c.PutTier(ctx, got); err != nil || back.Run != nil {
		t.Fatalf("PutTier without a run object = %+v, %v", back.Run, err)
	}
	tier.Run = &client.RunLimits{MaxDepth: client.Limit(0)}
	_, _, err = c.PutTier(ctx, tier)
	wantError(t, "max_depth 0", err, http.StatusBadRequest, "run.max_depth must be an integer from 1 to 64")
}
