package policy_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// memPrices is a PriceStore in memory: a slice of versions.
type memPrices struct{ versions []policy.PriceVersion }

func (m *memPrices) SavePrices(_ context.Context, v policy.PriceVersion, at time.Time) (policy.PriceVersion, error) {
	v.ID, v.CreatedAt = int64(len(m.versions)+1), at
	m.versions = append(m.versions, v)
	return v, nil
}

func (m *memPrices) PricesAt(_ context.Context, t time.Time) (policy.PriceVersion, error) {
	if v, ok := policy.InForce(m.versions, t); ok {
		return v, nil
	}
	return policy.PriceVersion{}, policy.Errorf(policy.ENOTFOUND, "none")
}

func (m *memPrices) PriceVersions(context.Context) ([]policy.PriceVersion, error) {
	out := slices.Clone(m.versions)
	slices.Reverse(out)
	return out, nil
}

func (m *memPrices) PriceOf(model, upstream string, t time.Time) (policy.Price, int64, bool) {
	v, ok := policy.InForce(m.versions, t)
	if !ok {
		return policy.Price{}, 0, false
	}
	p, ok := v.Prices.Lookup(model, upstream)
	return p, v.ID, ok
}

func TestPutPrices(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	clock := policy.NewTestClock(t0)
	store := &memPrices{}
	svc := policy.NewService(newMemStore(), newMemStore(), policy.WithClock(clock.Now), policy.WithPrices(store))
	ctx := policy.WithChangeSource(context.Background(), policy.SourceAPI)
	mini := policy.Price{Model: "gpt-4o-mini", Input: usd(t, "0.15"), Output: usd(t, "0.6")}

	v1, err := svc.PutPrices(ctx, nil, []policy.Price{mini})
	if err != nil {
		t.Fatal(err)
	}
	if !v1.EffectiveFrom.Equal(t0) || v1.Source != policy.SourceAPI || !v1.CreatedAt.Equal(t0) {
		t.Errorf("version %+v: want effective and made at %v, source api", v1, t0)
	}
	later := t0.Add(time.Hour)
	mini2 := mini
	mini2.Input = usd(t, "0.2")
	if _, err := svc.PutPrices(ctx, &later, []policy.Price{mini2, {Model: "o1", Output: 1}}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		at   time.Time
		want string
	}{{t0, "0.15"}, {later.Add(-1), "0.15"}, {later, "0.2"}} {
		if p, _, ok := svc.PriceOf("gpt-4o-mini", "", tt.at); !ok || p.Input.String() != tt.want {
			t.Errorf("PriceOf at %v = %s, %v; want %s", tt.at, p.Input, ok, tt.want)
		}
	}

	past := t0.Add(-time.Second)
	if _, err := svc.PutPrices(ctx, &past, nil); err == nil || !strings.Contains(err.Error(), "effective_from") || policy.ErrorCode(err) != policy.EINVALID {
		t.Errorf("a version reaching back: %v, want EINVALID naming effective_from", err)
	}
	if _, err := svc.PutPrices(ctx, nil, []policy.Price{mini, mini}); err == nil || !strings.Contains(err.Error(), "prices[1].model") {
		t.Errorf("duplicate: %v", err)
	}
	if len(store.versions) != 2 {
		t.Errorf("%d versions saved, want 2: refused ones must save nothing", len(store.versions))
	}

	none := policy.NewService(newMemStore(), newMemStore())
	if _, err := none.PutPrices(ctx, nil, nil); policy.ErrorCode(err) != policy.EINTERNAL {
		t.Errorf("PutPrices without a store: %v", err)
	}
	if _, _, ok := none.PriceOf("m", "", t0); ok {
		t.Error("PriceOf without a store priced a model")
	}
}

func TestPriceDiff(t *testing.T) {
	table := func(entries ...policy.Price) *policy.PriceTable {
		pt, err := policy.NewPriceTable(entries)
		if err != nil {
			t.Fatal(err)
		}
		return pt
	}
	a := policy.Price{Model: "a", Input: usd(t, "1"), Output: usd(t, "2")}
	a2 := a
	a2.Output, a2.CacheRead = usd(t, "2.5"), usd(t, "0.1")
	b := policy.Price{Model: "b", Upstream: "azure", Input: usd(t, "3")}
	c := policy.Price{Model: "c*"}
	for _, tt := range []struct {
		name          string
		before, after *policy.PriceTable
		want          []string
	}{
		{"first", nil, table(a), []string{"added a: input 1, output 2, cache_read 0, cache_write 0"}},
		{"same", table(a, b), table(b, a), []string{"no change"}},
		{"changed, added, removed", table(a, c), table(a2, b), []string{
			"a: output 2 → 2.5, cache_read 0 → 0.1",
			"added b@azure: input 3, output 0, cache_read 0, cache_write 0",
			"removed c*",
		}},
	} {
		if got := policy.PriceDiff(tt.before, tt.after); fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%s: PriceDiff =\n%q\nwant\n%q", tt.name, got, tt.want)
		}
	}
}
