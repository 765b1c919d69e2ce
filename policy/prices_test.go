package policy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

func usd(t *testing.T, s string) policy.Money {
	t.Helper()
	m, err := policy.ParseMoney(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestPriceTableLookup(t *testing.T) {
	entry := func(model, upstream, input string) policy.Price {
		return policy.Price{Model: model, Upstream: upstream, Input: usd(t, input)}
	}
	table, err := policy.NewPriceTable([]policy.Price{
		entry("gpt-4o", "", "2.5"),
		entry("gpt-4o-mini", "", "0.15"),
		entry("gpt-4o*", "", "3"),
		entry("gpt-*", "", "4"),
		entry("*", "", "99"),
		entry("gpt-*", "azure", "5"),
		entry("claude-*", "bedrock", "6"),
		entry("gpt-4o-mini", "azure", "0.2"),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		model, upstream string
		want            string // input price; "" for none
	}{
		{"gpt-4o", "", "2.5"},                 // exact
		{"gpt-4o-mini", "", "0.15"},           // exact beats prefix
		{"gpt-4o-2024-08-06", "", "3"},        // longest prefix
		{"gpt-4.1", "", "4"},                  // shorter prefix
		{"llama", "", "99"},                   // "*" matches everything
		{"gpt-4o", "openai", "2.5"},           // no entries for this upstream: generic
		{"gpt-4o", "azure", "5"},              // the upstream's prefix beats a generic exact name
		{"gpt-4o-mini", "azure", "0.2"},       // the upstream's exact name
		{"claude-3-haiku", "bedrock", "6"},    // upstream prefix
		{"claude-3-haiku", "anthropic", "99"}, // another upstream's entry never applies
		{"gpt-4o", "GPT-4O", "2.5"},           // names are case-sensitive
		{"GPT-4O", "", "99"},                  //
	} {
		p, ok := table.Lookup(tt.model, tt.upstream)
		got := ""
		if ok {
			got = p.Input.String()
		}
		if got != tt.want {
			t.Errorf("Lookup(%q, %q) = %q, want %q", tt.model, tt.upstream, got, tt.want)
		}
	}

	noStar, err := policy.NewPriceTable([]policy.Price{entry("gpt-4o", "", "1")})
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := noStar.Lookup("gpt-4o-mini", ""); ok {
		t.Errorf("an exact entry priced another model: %+v", p)
	}
	var none *policy.PriceTable
	if _, ok := none.Lookup("gpt-4o", ""); ok || none.Len() != 0 {
		t.Error("the nil table priced a model")
	}
}

func TestNewPriceTableRefuses(t *testing.T) {
	ok := policy.Price{Model: "m", Input: 1}
	for _, tt := range []struct {
		name    string
		entries []policy.Price
		want    string
	}{
		{"empty model", []policy.Price{ok, {Model: ""}}, "prices[1].model is required"},
		{"space", []policy.Price{{Model: "a b"}}, "prices[0].model must be 1 to"},
		{"inner star", []policy.Price{{Model: "gpt-*-mini"}}, "prices[0].model may hold '*' only as its last character"},
		{"negative", []policy.Price{{Model: "m", CacheWrite: -1}}, "prices[0].cache_write must not be negative"},
		{"duplicate", []policy.Price{ok, {Model: "x"}, ok}, `prices[2].model lists "m" again (first at prices[0])`},
		{"duplicate upstream", []policy.Price{{Model: "m", Upstream: "u"}, {Model: "m", Upstream: "u"}}, `"m" for upstream "u" again`},
		{"bad upstream", []policy.Price{{Model: "m", Upstream: "a b"}}, "prices[0].upstream"},
	} {
		_, err := policy.NewPriceTable(tt.entries)
		if err == nil || !strings.Contains(err.Error(), tt.want) || policy.ErrorCode(err) != policy.EINVALID {
			t.Errorf("%s: err = %v, want EINVALID containing %q", tt.name, err, tt.want)
		}
	}
	// The same model for two upstreams, and generic, is no duplicate.
	if _, err := policy.NewPriceTable([]policy.Price{{Model: "m"}, {Model: "m", Upstream: "a"}, {Model: "m", Upstream: "b"}}); err != nil {
		t.Error(err)
	}
}

func TestPriceCost(t *testing.T) {
	// Anthropic's published Claude Sonnet prices: $3 input, $15 output,
	// $0.30 cache read, $3.75 cache write per million tokens.
	p := policy.Price{Model: "claude-sonnet", Input: usd(t, "3"), Output: usd(t, "15"), CacheRead: usd(t, "0.3"), CacheWrite: usd(t, "3.75")}
	for _, tt := range []struct {
		u    policy.TokenUsage
		want string
	}{
		{policy.TokenUsage{}, "0"},
		{policy.TokenUsage{Input: 1_000_000}, "3"},
		{policy.TokenUsage{Input: 1000, Output: 500}, "0.0105"},
		{policy.TokenUsage{Input: 1, Output: 1, CacheRead: 1, CacheWrite: 1}, "0.00002205"},
		{policy.TokenUsage{CacheRead: 10_000, CacheWrite: 2_000}, "0.0105"},
	} {
		got, err := p.Cost(tt.u)
		if err != nil || got.String() != tt.want {
			t.Errorf("Cost(%+v) = %s, %v; want %s", tt.u, got, err, tt.want)
		}
	}
	// Rounded up once for the call: 1 token at 1 picodollar per million
	// of each of the four kinds is 4e-6 picodollars, charged as one.
	tiny := policy.Price{Model: "m", Input: 1, Output: 1, CacheRead: 1, CacheWrite: 1}
	if got, err := tiny.Cost(policy.TokenUsage{Input: 1, Output: 1, CacheRead: 1, CacheWrite: 1}); err != nil || got != 1 {
		t.Errorf("tiny cost = %d, %v; want 1", int64(got), err)
	}
	// 1,000,001 tokens at 1 picodollar per million: just over one unit,
	// rounded up to two.
	if got, err := tiny.Cost(policy.TokenUsage{Input: 1_000_001}); err != nil || got != 2 {
		t.Errorf("1,000,001 tokens = %d, %v; want 2", int64(got), err)
	}
	if _, err := p.Cost(policy.TokenUsage{Output: -1}); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("negative tokens: %v", err)
	}
	huge := policy.Price{Model: "m", Output: policy.MaxMoney}
	if _, err := huge.Cost(policy.TokenUsage{Output: 2_000_000}); err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Errorf("overflowing cost: %v", err)
	}
	if got := p.MaxPrice(); got != usd(t, "15") {
		t.Errorf("MaxPrice = %s, want 15", got)
	}
}

func TestInForce(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	versions := []policy.PriceVersion{
		{ID: 1, EffectiveFrom: t0},
		{ID: 2, EffectiveFrom: t0.Add(2 * time.Hour)},
		{ID: 3, EffectiveFrom: t0.Add(time.Hour)},      // made later, in force earlier
		{ID: 4, EffectiveFrom: t0.Add(2 * time.Hour)},  // same instant as 2: the later made wins
		{ID: 5, EffectiveFrom: t0.Add(48 * time.Hour)}, // not yet
	}
	for _, tt := range []struct {
		at   time.Time
		want int64 // 0: none
	}{
		{t0.Add(-time.Nanosecond), 0},
		{t0, 1},
		{t0.Add(time.Hour - 1), 1},
		{t0.Add(time.Hour), 3},
		{t0.Add(2 * time.Hour), 4},
		{t0.Add(47 * time.Hour), 4},
		{t0.Add(48 * time.Hour), 5},
	} {
		v, ok := policy.InForce(versions, tt.at)
		if got := map[bool]int64{true: v.ID}[ok]; got != tt.want {
			t.Errorf("InForce(%v) = %d, want %d", tt.at, got, tt.want)
		}
	}
}
