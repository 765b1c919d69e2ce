package client_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api/client"
)

// A tier's shadow limits round-trip through the client, show in decisions,
// are previewed and promoted.
func TestClientShadowPreviewPromote(t *testing.T) {
	e := newEnv(t, nil)
	c := newClient(t, e.url, client.WithAdminToken(adminToken))
	ctx := context.Background()
	tier := client.Tier{Name: "team", Limits: client.Limits{RequestsPerMinute: client.Limit(10), RequestsPerHour: client.Limit(100), RequestsPerDay: client.Limit(1000)}, Shadow: &client.ShadowLimits{Limits: client.Limits{RequestsPerMinute: client.Limit(1), RequestsPerHour: client.Limit(100), RequestsPerDay: client.Limit(1000)}}}
	put, _, err := c.PutTier(ctx, tier)
	if err != nil || put.Shadow == nil || *put.Shadow.RequestsPerMinute != 1 || *put.Shadow.RequestsPerDay != 1000 {
		t.Fatalf("PutTier = %+v, %v", put, err)
	}
	var last client.Decision
	for range 2 {
		if last, err = c.Check(ctx, client.CheckRequest{UserID: "u", Tier: "team"}); err != nil || !last.Allowed {
			t.Fatalf("Check = %+v, %v", last, err)
		}
		e.clock.Advance(time.Second)
	}
	if last.Shadow == nil || last.Shadow.Allowed || last.Shadow.Reason != "per-minute limit exceeded" {
		t.Fatalf("second check's shadow = %+v", last.Shadow)
	}
	p, err := c.PreviewTier(ctx, client.Tier{Name: "team", Limits: client.Limits{RequestsPerMinute: client.Limit(1), RequestsPerHour: client.Limit(100), RequestsPerDay: client.Limit(1000)}})
	if err != nil || p.Requests != 2 || p.RequestsRefused != 1 || p.RefusedByWindow.Minute != 1 || len(p.TopUsers) != 1 || p.TopUsers[0].UserID != "u" {
		t.Fatalf("PreviewTier = %+v, %v", p, err)
	}
	_, err = c.PreviewTier(ctx, client.Tier{Name: "gold"})
	wantError(t, "preview of an unknown tier", err, http.StatusNotFound, "gold")
	promoted, err := c.PromoteTier(ctx, "team")
	if err != nil || promoted.Shadow != nil || *promoted.RequestsPerMinute != 1 {
		t.Fatalf("PromoteTier = %+v, %v", promoted, err)
	}
	_, err = c.PromoteTier(ctx, "team")
	wantError(t, "promote without shadow", err, http.StatusBadRequest, "no shadow limits")
}
