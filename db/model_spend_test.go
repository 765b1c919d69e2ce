package db_test

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// Money in the model: a price table with versions, spend limits and what
// calls cost. The reference keeps its own list of the versions, looks a
// model's price up in it by the version in force when the check was
// made, and prices a call exactly with math/big: the sum of tokens times
// price per million tokens, rounded up to the picodollar once per call.
// It shares no code with policy's pricing.

// Models a check names: two the versions price (or leave out), one no
// version prices; and none.
var modelModels = [...]string{"m-a", "m-b"}

const modelUnpriced = "m-none"

// refPrice is a model's price in picodollars per million tokens of each
// kind: input, output, cache read, cache write.
type refPrice [4]int64

// refVersion is one version of the price table as it was put.
type refVersion struct {
	from   time.Time // in force from, to the microsecond the store keeps
	id     int64     // the store's id, compared with the calls', never used to decide
	prices map[string]refPrice
}

// refPrices is every version the store holds, in the order they were put.
// The store keeps them across the sequences a harness runs (versions are
// never deleted), so the reference does too.
type refPrices struct{ versions []refVersion }

// inForce returns the version in force at t: of those in force from t or
// before, the latest to begin, and of those the last put; nil when none.
func (p *refPrices) inForce(t time.Time) *refVersion {
	var v *refVersion
	for i := range p.versions {
		c := &p.versions[i]
		if !c.from.After(t) && (v == nil || !c.from.Before(v.from)) {
			v = c
		}
	}
	return v
}

// refPricing is how a check's call is priced.
type refPricing struct {
	model    string
	price    *refPrice // nil: unpriced
	version  int64
	reserved int64 // the reservation's cost
}

// refMillion is how many tokens a price is quoted for.
var refMillion = big.NewInt(1_000_000)

// refCost returns what tokens of each kind cost at p, in picodollars:
// exact, rounded up once, and MaxInt64 when it is more.
func refCost(tokens [4]int64, p refPrice) int64 {
	sum := new(big.Int)
	for i := range tokens {
		sum.Add(sum, new(big.Int).Mul(big.NewInt(tokens[i]), big.NewInt(p[i])))
	}
	q, r := new(big.Int).QuoRem(sum, refMillion, new(big.Int))
	if r.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() {
		return math.MaxInt64
	}
	return q.Int64()
}

// highest returns p's highest price: what a token of no known kind costs.
func (p refPrice) highest() int64 { return max(p[0], p[1], p[2], p[3]) }

// refCostAtHighest returns what n tokens cost at p's highest price.
func refCostAtHighest(n int64, p refPrice) int64 { return refCost([4]int64{n}, refPrice{p.highest()}) }

// pricing prices a call of model at now reserving tokens, split by kind
// when split is set.
func (p *refPrices) pricing(model string, now time.Time, tokens int64, split *[4]int64) refPricing {
	pr := refPricing{model: model}
	v := p.inForce(now)
	if v == nil || model == "" {
		return pr
	}
	price, ok := v.prices[model]
	if !ok {
		return pr
	}
	pr.price, pr.version = &price, v.id
	if split != nil {
		pr.reserved = refCost(*split, price)
	} else {
		pr.reserved = refCostAtHighest(tokens, price)
	}
	return pr
}

// limitsSpend reports whether a check under l, drawing on pool, is under a
// spend limit: one it cannot be decided on without a price.
func limitsSpend(l refLimits, pool *refPool) bool {
	if l.cost != [3]int64{-1, -1, -1} {
		return true
	}
	return pool != nil && [3]int64(pool.limits[8:11]) != [3]int64{-1, -1, -1}
}

// refReport is what a finish reports: tokens (-1 for none), or usage by
// kind when set (tokens is then its total, or -1).
type refReport struct {
	tokens int64
	usage  *[4]int64
}

// settle returns the tokens and cost r reports for c.
func (c *refCall) settle(r refReport) (tokens, cost int64) {
	switch {
	case r.usage != nil:
		u := *r.usage
		tokens = u[0] + u[1] + u[2] + u[3]
		if c.price != nil {
			cost = refCost(u, *c.price)
		}
	case r.tokens >= 0:
		tokens = r.tokens
		if c.price != nil {
			cost = refCostAtHighest(tokens, *c.price)
		}
	default:
		return c.reserved, c.reservedCost
	}
	return tokens, cost
}

// refCostUnit is the step of the spend limits the model draws: a few
// hundredths of a cent, about what a call of a few dozen tokens costs at
// the prices it draws (see price).
const refCostUnit = 10_000_000

// costLimit decodes a spend limit of at most most units: unset three
// times in four, else whole units and, now and then, picodollars more.
func (r *opReader) costLimit(most int64) int64 {
	b := r.next()
	if b%4 != 1 {
		return -1
	}
	v := int64(r.next())%most*refCostUnit + int64(b/4%8)*int64(b/4%8)*12345
	return v
}

// price decodes one price per million tokens: mostly dollars with four
// decimals (up to about $6.55), now and then ten times more, or fractions
// of a cent with up to twelve decimals, or nothing.
func (r *opReader) price() int64 {
	class := r.next()
	m := int64(r.next())<<8 | int64(r.next())
	decimals := 4
	switch class % 8 {
	case 5:
		decimals = 5
	case 6:
		decimals = 3
	case 7:
		if class/8%8 == 7 {
			return 0
		}
		decimals = 6 + int(class/8%7)
	}
	return m * int64(math.Pow10(12-decimals))
}

// priceVersion decodes a version of the price table: each of the models
// priced seven times in eight.
func (r *opReader) priceVersion() map[string]refPrice {
	v := map[string]refPrice{}
	for _, model := range modelModels {
		if r.next()%8 == 0 {
			continue
		}
		v[model] = refPrice{r.price(), r.price(), r.price(), r.price()}
	}
	return v
}

// model decodes the model a check names: now and then none, or one no
// version prices.
func (r *opReader) model() string {
	switch b := r.next(); {
	case b%16 == 0:
		return ""
	case b%16 == 1:
		return modelUnpriced
	default:
		return modelModels[b%2]
	}
}

// split decodes a split of n tokens into the four kinds.
func (r *opReader) split(n int64) *[4]int64 {
	return splitOf(n, [4]byte{r.next(), r.next(), r.next(), r.next()})
}

// splitOf splits n tokens into the four kinds at cuts.
func splitOf(n int64, cuts [4]byte) *[4]int64 {
	var s [4]int64
	left := n
	for i := range 3 {
		s[i] = int64(cuts[i]) % (left + 1)
		left -= s[i]
	}
	s[3] = left
	// Which kind takes the first cut, so that each may take the most.
	k := int(cuts[3] % 4)
	s[0], s[k] = s[k], s[0]
	return &s
}

// putPrices puts a new version of the price table, in force now, on both
// sides.
func (h *modelHarness) putPrices(run *modelRun, prices map[string]refPrice) {
	run.tb.Helper()
	var entries []policy.Price
	for _, model := range modelModels {
		if p, ok := prices[model]; ok {
			entries = append(entries, policy.Price{Model: model, Input: policy.Money(p[0]), Output: policy.Money(p[1]), CacheRead: policy.Money(p[2]), CacheWrite: policy.Money(p[3])})
		}
	}
	v, err := h.svc.PutPrices(context.Background(), nil, entries)
	if err != nil {
		run.fatalf("put prices: %v", err)
	}
	from := h.now.Truncate(time.Microsecond)
	if !v.EffectiveFrom.Equal(from) || v.Prices.Len() != len(entries) {
		run.fatalf("put prices: version %d in force from %v with %d entries, reference from %v with %d", v.ID, v.EffectiveFrom, v.Prices.Len(), from, len(entries))
	}
	h.prices.versions = append(h.prices.versions, refVersion{from: from, id: v.ID, prices: prices})
}

// comparePricing compares the pricing of call got with the reference's.
func comparePricing(got *policy.Call, want *refCall) string {
	var problems []string
	if got.Model != want.model || got.PriceVersion != want.version {
		problems = append(problems, fmt.Sprintf("model %q version %d, reference %q %d", got.Model, got.PriceVersion, want.model, want.version))
	}
	switch {
	case (got.Price == nil) != (want.price == nil):
		problems = append(problems, fmt.Sprintf("price %+v, reference %v", got.Price, want.price))
	case got.Price != nil && (refPrice{int64(got.Price.Input), int64(got.Price.Output), int64(got.Price.CacheRead), int64(got.Price.CacheWrite)}) != *want.price:
		problems = append(problems, fmt.Sprintf("price %+v, reference %v", *got.Price, *want.price))
	}
	if int64(got.ReservedCost) != want.reservedCost || int64(got.Cost) != want.cost || int64(got.ReportedCost) != want.reportedCost {
		problems = append(problems, fmt.Sprintf("cost reserved %d, counted %d, reported %d; reference %d, %d, %d",
			got.ReservedCost, got.Cost, got.ReportedCost, want.reservedCost, want.cost, want.reportedCost))
	}
	return strings.Join(problems, "; ")
}

// compareStates compares a decision's or a pool's window states of one
// measure with the reference's.
func compareStates(run *modelRun, what string, i int, measure string, got *policy.TokenState, want refTokenState, allowed bool) {
	run.tb.Helper()
	switch {
	case !want.limited && got != nil:
		run.fatalf("%s: %s window has %s %+v, reference none", what, refWindows[i].name, measure, *got)
	case want.limited && (got == nil || *got != policy.TokenState{Limited: true, Limit: want.limit, Used: want.used, Remaining: want.remaining, Reset: want.reset}):
		run.fatalf("%s: %s window %s %+v, reference %+v", what, refWindows[i].name, measure, got, want)
	}
	if want.limited && want.used > want.limit && allowed {
		run.fatalf("%s: admitted with %d of %s used in the %s, limit %d", what, want.used, measure, refWindows[i].name, want.limit)
	}
}

// refNoLimits returns limits in the order of policy.LimitNames, none set.
func refNoLimits() (v [refNumLimits]int64) {
	for i := range v {
		v[i] = -1
	}
	return v
}
