package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api/client"
)

// The price methods against the real API: no version, one now, one later,
// each read back at its time, and the list.
func TestPrices(t *testing.T) {
	e := newEnv(t, nil)
	c := newClient(t, e.url, client.WithAdminToken(adminToken))
	ctx := context.Background()

	if _, err := c.Prices(ctx, time.Time{}); client.StatusCode(err) != 404 {
		t.Fatalf("Prices with none: %v, want a 404", err)
	}
	v1, err := c.PutPrices(ctx, time.Time{}, []client.Price{{Model: "gpt-4o-mini", Input: "0.15", Output: "0.6"}})
	if err != nil {
		t.Fatal(err)
	}
	want := client.Price{Model: "gpt-4o-mini", Input: "0.15", Output: "0.6", CacheRead: "0.15", CacheWrite: "0.15"}
	if v1.ID == 0 || !v1.EffectiveFrom.Equal(t0) || v1.Source != "api" || len(v1.Prices) != 1 || v1.Prices[0] != want {
		t.Fatalf("PutPrices = %+v", v1)
	}
	later := t0.Add(24 * time.Hour)
	v2, err := c.PutPrices(ctx, later, []client.Price{{Model: "gpt-*", Upstream: "", Input: "1", Output: "2", CacheRead: "0.5"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Prices(ctx, time.Time{}); err != nil || got.ID != v1.ID {
		t.Errorf("Prices now = %+v, %v; want version %d", got, err, v1.ID)
	}
	if got, err := c.Prices(ctx, later); err != nil || got.ID != v2.ID || got.Prices[0].CacheRead != "0.5" || got.Prices[0].CacheWrite != "1" {
		t.Errorf("Prices at %v = %+v, %v; want version %d", later, got, err, v2.ID)
	}
	if _, err := c.PutPrices(ctx, t0.Add(-time.Hour), nil); client.StatusCode(err) != 400 {
		t.Errorf("a version beginning in the past: %v, want a 400", err)
	}
	list, err := c.PriceVersions(ctx)
	if err != nil || len(list) != 2 || list[0].ID != v2.ID || list[0].InForce || !list[1].InForce || list[1].Entries != 1 {
		t.Errorf("PriceVersions = %+v, %v", list, err)
	}
}
