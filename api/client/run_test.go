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

// A run through the client: the decision's run, the refusal past its
// steps (403, not rate-limited), a sub-agent, reading, listing and ending.
func TestClientRuns(t *testing.T) {
	e := newEnv(t, nil)
	c := newClient(t, e.url, client.WithAdminToken(adminToken))
	ctx := context.Background()
	limits := client.Limits{RequestsPerMinute: client.Limit(10), RequestsPerHour: client.Limit(100), RequestsPerDay: client.Limit(1000)}
	if _, _, err := c.PutTier(ctx, client.Tier{Name: "agents", Limits: limits, Run: &client.RunLimits{MaxRequests: client.Limit(2)}}); err != nil {
		t.Fatal(err)
	}
	d, err := c.Check(ctx, client.CheckRequest{UserID: "sam", Tier: "agents", RunID: "r1"})
	if err != nil || !d.Allowed || d.Run == nil || d.Run.ID != "r1" || d.Run.Requests != 1 || d.Run.Limits == nil || *d.Run.Limits.MaxRequests != 2 {
		t.Fatalf("first step: %+v %+v %v", d, d.Run, err)
	}
	if d, err := c.Check(ctx, client.CheckRequest{UserID: "sam", Tier: "agents", RunID: "k1", ParentRunID: "r1"}); err != nil || !d.Allowed || d.Run.Parent != "r1" {
		t.Fatalf("the sub-agent: %+v %v", d, err)
	}
	d, err = c.Check(ctx, client.CheckRequest{UserID: "sam", Tier: "agents", RunID: "r1"})
	if err != nil || d.Allowed || d.RateLimited() || d.StatusCode != http.StatusForbidden || d.Reason != `run "r1" step limit exceeded` {
		t.Fatalf("past the steps: %+v %v", d, err)
	}
	r, err := c.GetRun(ctx, "r1")
	if err != nil || r.UserID != "sam" || r.State != "exhausted" || r.Requests != 2 || len(r.Children) != 1 || r.Children[0] != "k1" {
		t.Fatalf("GetRun: %+v %v", r, err)
	}
	runs, next, err := c.ListRuns(ctx, "sam", "", "", 1)
	if err != nil || len(runs) != 1 || runs[0].ID != "k1" || next != "k1" {
		t.Fatalf("ListRuns: %+v %q %v", runs, next, err)
	}
	if r, err := c.EndRun(ctx, "k1"); err != nil || r.State != "ended" {
		t.Fatalf("EndRun: %+v %v", r, err)
	}
	_, err = c.GetRun(ctx, "nope")
	wantError(t, "an unknown run", err, http.StatusNotFound, `run "nope" not found`)
}
