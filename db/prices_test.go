package db_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

func priceTable(t *testing.T, entries ...policy.Price) *policy.PriceTable {
	t.Helper()
	table, err := policy.NewPriceTable(entries)
	if err != nil {
		t.Fatal(err)
	}
	return table
}

func money(t *testing.T, s string) policy.Money {
	t.Helper()
	m, err := policy.ParseMoney(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Versions are saved whole and read back exactly; the one in force at t
// is the latest effective_from not after t, the later made on ties.
func TestPriceVersions(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		s := openStore(t, bk.newDSN(t))
		ctx := context.Background()
		if _, err := s.PricesAt(ctx, t0); policy.ErrorCode(err) != policy.ENOTFOUND {
			t.Fatalf("PricesAt on an empty table: %v, want ENOTFOUND", err)
		}
		if _, _, ok := s.PriceOf("gpt-4o", "", t0); ok {
			t.Fatal("PriceOf priced a model with no version saved")
		}
		mini := policy.Price{Model: "gpt-4o-mini", Input: money(t, "0.15"), Output: money(t, "0.6"), CacheRead: money(t, "0.075"), CacheWrite: money(t, "0.15")}
		azure := policy.Price{Model: "gpt-*", Upstream: "azure", Input: money(t, "0.000000000001"), Output: policy.MaxMoney}
		save := func(from time.Time, entries ...policy.Price) policy.PriceVersion {
			t.Helper()
			v, err := s.SavePrices(policy.WithChangeSource(ctx, policy.SourceAPI),
				policy.PriceVersion{EffectiveFrom: from, Prices: priceTable(t, entries...)}, t0.Add(-time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		// Nanoseconds are dropped, as the store keeps microseconds.
		v1 := save(t0.Add(123), mini, azure)
		if v1.ID == 0 || v1.Source != policy.SourceAPI || !v1.EffectiveFrom.Equal(t0) || !v1.CreatedAt.Equal(t0.Add(-time.Hour)) {
			t.Fatalf("saved %+v", v1)
		}
		mini2 := mini
		mini2.Input = money(t, "0.2")
		v2 := save(t0.Add(time.Hour), mini2)
		v3 := save(t0.Add(time.Hour), mini) // same instant, made later: wins
		v4 := save(t0.Add(30*time.Minute), mini2)

		for _, tt := range []struct {
			at   time.Time
			want int64
		}{
			{t0.Add(-time.Microsecond), 0},
			{t0, v1.ID},
			{t0.Add(30*time.Minute - 1), v1.ID},
			{t0.Add(30 * time.Minute), v4.ID},
			{t0.Add(time.Hour), v3.ID},
			{t0.Add(1000 * time.Hour), v3.ID},
		} {
			v, err := s.PricesAt(ctx, tt.at)
			if tt.want == 0 {
				if policy.ErrorCode(err) != policy.ENOTFOUND {
					t.Errorf("PricesAt(%v) = %d, %v; want ENOTFOUND", tt.at, v.ID, err)
				}
				continue
			}
			if err != nil || v.ID != tt.want {
				t.Errorf("PricesAt(%v) = %d, %v; want %d", tt.at, v.ID, err, tt.want)
			}
			if _, id, ok := s.PriceOf("gpt-4o-mini", "", tt.at); !ok || id != tt.want {
				t.Errorf("PriceOf at %v: version %d, %v; want %d", tt.at, id, ok, tt.want)
			}
		}

		got, err := s.PricesAt(ctx, t0)
		if err != nil {
			t.Fatal(err)
		}
		if e := got.Prices.Entries(); fmt.Sprint(e) != fmt.Sprint([]policy.Price{azure, mini}) {
			t.Errorf("entries read back:\n%v\nwant\n%v", e, []policy.Price{azure, mini})
		}
		if p, _, ok := s.PriceOf("gpt-4.1", "azure", t0); !ok || p.Output != policy.MaxMoney || p.Input != 1 {
			t.Errorf("PriceOf(gpt-4.1, azure) = %+v, %v", p, ok)
		}

		versions, err := s.PriceVersions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, v := range versions {
			ids = append(ids, v.ID)
		}
		if fmt.Sprint(ids) != fmt.Sprint([]int64{v4.ID, v3.ID, v2.ID, v1.ID}) {
			t.Errorf("PriceVersions ids = %v", ids)
		}
	})
}

// A version is written in batches; one larger than a batch reads back
// whole, and an empty one is a version too (nothing priced).
func TestPriceVersionLargeAndEmpty(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		s := openStore(t, bk.newDSN(t))
		ctx := context.Background()
		var entries []policy.Price
		for i := range 1203 {
			entries = append(entries, policy.Price{Model: fmt.Sprintf("m-%04d", i), Input: policy.Money(i), Output: policy.Money(2 * i)})
		}
		if _, err := s.SavePrices(ctx, policy.PriceVersion{EffectiveFrom: t0, Prices: priceTable(t, entries...)}, t0); err != nil {
			t.Fatal(err)
		}
		v, err := s.PricesAt(ctx, t0)
		if err != nil {
			t.Fatal(err)
		}
		if got := v.Prices.Entries(); fmt.Sprint(got) != fmt.Sprint(entries) {
			t.Errorf("read back %d entries, want the %d saved", len(got), len(entries))
		}
		if v.Source != policy.SourceLibrary {
			t.Errorf("source = %q, want %q", v.Source, policy.SourceLibrary)
		}
		if _, err := s.SavePrices(ctx, policy.PriceVersion{EffectiveFrom: t0.Add(time.Second)}, t0); err != nil {
			t.Fatal(err)
		}
		if _, _, ok := s.PriceOf("m-0001", "", t0.Add(time.Second)); ok {
			t.Error("an empty version in force still priced a model")
		}
		if _, _, ok := s.PriceOf("m-0001", "", t0); !ok {
			t.Error("the earlier version no longer prices at its own time")
		}
	})
}

// A version another process saves (a replica, policyguard prices import)
// is seen by the next PricesAt at once, and by PriceOf, which reads no
// storage, after the store's background refresh.
func TestPriceVersionByAnotherStore(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		dsn := bk.newDSN(t)
		running, other := openStore(t, dsn), openStore(t, dsn)
		ctx := context.Background()
		table := priceTable(t, policy.Price{Model: "claude-*", Input: money(t, "3")})
		if _, err := other.SavePrices(ctx, policy.PriceVersion{EffectiveFrom: t0, Prices: table}, t0); err != nil {
			t.Fatal(err)
		}
		dbtest.WaitFor(t, "the running store's refresh", 10*time.Second, func() bool {
			_, _, ok := running.PriceOf("claude-3-haiku", "", t0)
			return ok
		})
		if _, err := other.SavePrices(ctx, policy.PriceVersion{EffectiveFrom: t0.Add(time.Minute), Prices: priceTable(t)}, t0); err != nil {
			t.Fatal(err)
		}
		v, err := running.PricesAt(ctx, t0.Add(time.Minute))
		if err != nil || v.Prices.Len() != 0 {
			t.Fatalf("PricesAt right after another store's save: %d entries, %v; want the empty version", v.Prices.Len(), err)
		}
	})
}

// BenchmarkPriceOf prices a call as the check path will: from memory,
// under 20 versions of 2,000 entries each (LiteLLM's list is about that
// size), half the lookups by exact name and half by prefix.
func BenchmarkPriceOf(b *testing.B) {
	s := openStore(b, "")
	ctx := context.Background()
	var entries []policy.Price
	for i := range 1000 {
		entries = append(entries, policy.Price{Model: fmt.Sprintf("vendor-%03d/model-%d", i%100, i), Input: 1, Output: 2},
			policy.Price{Model: fmt.Sprintf("family-%04d-*", i), Input: 3, Output: 4})
	}
	table, err := policy.NewPriceTable(entries)
	if err != nil {
		b.Fatal(err)
	}
	for v := range 20 {
		if _, err := s.SavePrices(ctx, policy.PriceVersion{EffectiveFrom: t0.Add(time.Duration(v) * time.Hour), Prices: table}, t0); err != nil {
			b.Fatal(err)
		}
	}
	at := t0.Add(30 * time.Hour)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		model := "vendor-042/model-542"
		if i%2 == 1 {
			model = "family-0999-2026"
		}
		if _, _, ok := s.PriceOf(model, "openai", at); !ok {
			b.Fatal("not priced")
		}
	}
}
