package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/api/client"
)

func ptr(v int64) *int64 { return &v }

// The client carries the metering limits of a tier, the tokens of a check,
// the call id of its decision, and finishes and keeps calls alive, with the
// API token where the service wants one.
func TestClientMeteredCalls(t *testing.T) {
	e := newEnv(t, func(c *api.Config) { c.APIToken = "calls-token" })
	admin := newClient(t, e.url, client.WithAdminToken(adminToken), client.WithAPIToken("calls-token"))
	ctx := context.Background()
	tier, created, err := admin.PutTier(ctx, client.Tier{Name: "metered", Limits: client.Limits{RequestsPerMinute: client.Limit(100), RequestsPerHour: client.Limit(1000), RequestsPerDay: client.Limit(1000), TokensPerMinute: ptr(1000), TokensPerDay: ptr(5000), MaxConcurrent: ptr(1)}})
	if err != nil || !created {
		t.Fatalf("put: %v %v", created, err)
	}
	if tier.TokensPerMinute == nil || *tier.TokensPerMinute != 1000 || tier.TokensPerHour != nil || *tier.MaxConcurrent != 1 {
		t.Fatalf("tier as stored: %+v", tier)
	}
	req := client.CheckRequest{UserID: "u", Tier: "metered", Tokens: 600}
	d, err := admin.Check(ctx, req)
	if err != nil || !d.Allowed || d.CallID == "" {
		t.Fatalf("check: %+v %v", d, err)
	}
	if tk := d.Windows.Minute.Tokens; tk == nil || tk.Used != 600 || tk.Remaining != 400 || d.Windows.Hour.Tokens != nil {
		t.Fatalf("token windows: %+v %+v", d.Windows.Minute.Tokens, d.Windows.Hour.Tokens)
	}
	if d.Concurrency == nil || d.Concurrency.InFlight != 1 {
		t.Fatalf("concurrency: %+v", d.Concurrency)
	}
	refused, err := admin.Check(ctx, req)
	if err != nil || refused.Allowed || refused.Reason != "concurrent call limit exceeded" || refused.CallID != "" || !refused.RateLimited() {
		t.Fatalf("second check: %+v %v", refused, err)
	}
	kept, err := admin.KeepAlive(ctx, d.CallID)
	if err != nil || kept.ID != d.CallID || kept.ExpiresAt.IsZero() || !kept.FinishedAt.IsZero() {
		t.Fatalf("keepalive: %+v %v", kept, err)
	}
	call, err := admin.FinishCall(ctx, d.CallID, ptr(250))
	if err != nil || call.Tokens != 250 || call.UserID != "u" || call.FinishedAt.IsZero() {
		t.Fatalf("finish: %+v %v", call, err)
	}
	if _, err := admin.FinishCall(ctx, d.CallID, ptr(250)); err != nil {
		t.Fatalf("the same finish again: %v", err)
	}
	if _, err := admin.FinishCall(ctx, d.CallID, ptr(251)); client.StatusCode(err) != 409 {
		t.Fatalf("another count: %v", err)
	}
	if _, err := admin.KeepAlive(ctx, d.CallID); client.StatusCode(err) != 409 {
		t.Fatalf("keepalive of a finished call: %v", err)
	}
	if _, err := admin.FinishCall(ctx, "unknown", nil); client.StatusCode(err) != 404 {
		t.Fatalf("unknown call: %v", err)
	}
	u, err := admin.Usage(ctx, "u", "metered")
	if err != nil || u.CallsInFlight != 0 || u.Windows.Minute.Tokens.Used != 250 || u.Windows.Minute.Tokens.Remaining != 750 {
		t.Fatalf("usage: %+v %v", u, err)
	}
	// A nil count lets the reservation stand.
	d, err = admin.Check(ctx, req)
	if err != nil || !d.Allowed {
		t.Fatalf("check after the finish: %+v %v", d, err)
	}
	if call, err := admin.FinishCall(ctx, d.CallID, nil); err != nil || call.Tokens != 600 {
		t.Fatalf("finish without a count: %+v %v", call, err)
	}
	// Without the API token the call routes answer 401.
	anon := newClient(t, e.url)
	if _, err := anon.FinishCall(ctx, d.CallID, nil); client.StatusCode(err) != 401 {
		t.Fatalf("finish without the API token: %v", err)
	}
}

// The client carries a check's model, the spend windows of its decision,
// a finish's usage, a call's price and costs, and the spend of a usage.
func TestClientSpend(t *testing.T) {
	e := newEnv(t, nil)
	admin := newClient(t, e.url, client.WithAdminToken(adminToken))
	ctx := context.Background()
	if _, err := admin.PutPrices(ctx, time.Time{}, []client.Price{{Model: "gpt-test", Input: "2", Output: "10"}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := admin.PutTier(ctx, client.Tier{Name: "budget", Limits: client.Limits{RequestsPerMinute: client.Limit(100), RequestsPerHour: client.Limit(1000), RequestsPerDay: client.Limit(1000), CostPerDay: client.Dollars("1")}}); err != nil {
		t.Fatal(err)
	}
	req := client.CheckRequest{UserID: "u", Tier: "budget", Tokens: 1000}
	wantError(t, "a check without a model", func() error { _, err := admin.Check(ctx, req); return err }(), 400, "model is required")
	req.Model = "gpt-test"
	d, err := admin.Check(ctx, req)
	if c := d.Windows.Day.Cost; err != nil || !d.Allowed || c == nil || c.Limit != "1" || c.Used != "0.01" || c.Remaining != "0.99" || d.Windows.Hour.Cost != nil {
		t.Fatalf("check: %+v %+v %v", d, d.Windows.Day.Cost, err)
	}
	call, err := admin.FinishCallUsage(ctx, d.CallID, client.CallUsage{InputTokens: 300, OutputTokens: 200})
	if err != nil || call.Tokens != 500 || call.Model != "gpt-test" || call.PriceVersion != 1 || call.ReservedCost != "0.01" || call.Cost != "0.0026" {
		t.Fatalf("finish with usage: %+v %v", call, err)
	}
	u, err := admin.Usage(ctx, "u", "budget")
	if c := u.Windows.Day.Cost; err != nil || c == nil || c.Used != "0.0026" || c.Limit != "1" || c.Remaining != "0.9974" {
		t.Fatalf("usage: %+v %v", u.Windows.Day.Cost, err)
	}
}
