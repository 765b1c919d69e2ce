package policy

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// WithPrices makes the service keep the price table in prices.
func WithPrices(prices PriceStore) Option { return func(s *Service) { s.prices = prices } }

// KeepsPrices reports whether the service has a store of prices.
func (s *Service) KeepsPrices() bool { return s.prices != nil }

func errNoPrices() error {
	return Errorf(EINTERNAL, "this service keeps no prices (see policy.WithPrices)")
}

// PutPrices saves entries as a new version of the price table, in force
// from effectiveFrom, or from now when it is nil. A version may not begin
// before now: a call is priced by the version in force when it was
// admitted, and a version reaching back would reprice calls already made.
// Its errors are EINVALID and name the field ("prices[2].model ...",
// "effective_from ..."). The change's source comes from ctx (see
// WithChangeSource).
func (s *Service) PutPrices(ctx context.Context, effectiveFrom *time.Time, entries []Price) (PriceVersion, error) {
	if s.prices == nil {
		return PriceVersion{}, errNoPrices()
	}
	now := s.now()
	from := now
	if effectiveFrom != nil {
		from = *effectiveFrom
		// A microsecond of grace: the store keeps microseconds, and a
		// client that sends back the time it read must not be refused.
		if from.Before(now.Truncate(time.Microsecond)) {
			return PriceVersion{}, Errorf(EINVALID, "effective_from %s is before now (%s): a new version may not reprice calls already made",
				from.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
		}
	}
	table, err := NewPriceTable(entries)
	if err != nil {
		return PriceVersion{}, err
	}
	return s.prices.SavePrices(ctx, PriceVersion{EffectiveFrom: from, Source: ChangeSource(ctx), Prices: table}, now)
}

// PricesAt returns the version of the price table in force at t, or an
// ENOTFOUND error when none is.
func (s *Service) PricesAt(ctx context.Context, t time.Time) (PriceVersion, error) {
	if s.prices == nil {
		return PriceVersion{}, errNoPrices()
	}
	return s.prices.PricesAt(ctx, t)
}

// PriceVersions returns every version of the price table, newest first.
func (s *Service) PriceVersions(ctx context.Context) ([]PriceVersion, error) {
	if s.prices == nil {
		return nil, errNoPrices()
	}
	return s.prices.PriceVersions(ctx)
}

// PriceOf returns the price of model called through upstream ("" for
// none) under the version in force at t, and that version's ID, from
// memory: it reads no storage, so the check path may call it on every
// call. ok is false when nothing prices the model (or the service keeps no
// prices).
func (s *Service) PriceOf(model, upstream string, t time.Time) (p Price, version int64, ok bool) {
	if s.prices == nil {
		return Price{}, 0, false
	}
	return s.prices.PriceOf(model, upstream, t)
}

// PriceDiff lists how the table after differs from before, one line per
// entry, in entry order: "added gpt-4.1: input 2, output 8, cache_read 0.5,
// cache_write 2", "removed gpt-4", "gpt-4o: input 2.5 → 3". An entry for
// one upstream is named "model@upstream". No difference reads "no
// change". before may be nil (no earlier version).
func PriceDiff(before, after *PriceTable) []string {
	old := make(map[priceKey]Price, before.Len())
	for _, p := range before.Entries() {
		old[priceKey{p.Model, p.Upstream}] = p
	}
	var out []string
	for _, p := range after.Entries() {
		k := priceKey{p.Model, p.Upstream}
		b, had := old[k]
		delete(old, k)
		if !had {
			out = append(out, "added "+priceName(&p)+": "+PriceSummary(&p))
			continue
		}
		var parts []string
		for _, f := range priceFields(&b, &p) {
			if f.before != f.after {
				parts = append(parts, fmt.Sprintf("%s %s → %s", f.name, f.before, f.after))
			}
		}
		if len(parts) > 0 {
			out = append(out, priceName(&p)+": "+strings.Join(parts, ", "))
		}
	}
	for _, p := range before.Entries() { // entry order
		if _, gone := old[priceKey{p.Model, p.Upstream}]; gone {
			out = append(out, "removed "+priceName(&p))
		}
	}
	if len(out) == 0 {
		out = append(out, "no change")
	}
	return out
}

// PriceSummary says p's prices in one line, dollars per million tokens:
// "input 0.15, output 0.6, cache_read 0.075, cache_write 0.15".
func PriceSummary(p *Price) string {
	var parts []string
	for _, f := range priceFields(p, p) {
		parts = append(parts, f.name+" "+f.after)
	}
	return strings.Join(parts, ", ")
}

func priceName(p *Price) string {
	if p.Upstream == "" {
		return p.Model
	}
	return p.Model + "@" + p.Upstream
}

type priceFieldText struct{ name, before, after string }

// priceFields lists the four prices of before and after by their API
// names.
func priceFields(before, after *Price) []priceFieldText {
	return []priceFieldText{
		{"input", before.Input.String(), after.Input.String()},
		{"output", before.Output.String(), after.Output.String()},
		{"cache_read", before.CacheRead.String(), after.CacheRead.String()},
		{"cache_write", before.CacheWrite.String(), after.CacheWrite.String()},
	}
}
