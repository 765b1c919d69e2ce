package policy

import (
	"context"
	"errors"
	"fmt"
)

// Spend limits count what calls cost, priced by the price table, as token
// limits count their tokens: a call reserves its cost at admission, at the
// price of the version in force then, and settles at the same price from
// the usage its finish reports. A call is admitted only when, in every
// window with a spend limit, the cost of the calls finished in the window,
// plus every open reservation, plus its own, is at most the limit: calls
// admitted together can never spend past a limit. The one way spend ends
// above a limit is a finish reporting more than its call reserved (a
// prompt written to a provider's cache, a client's count above its
// reservation), which the service counts (Call.Overrun).

// Measure is one of the amounts a Ledger counts of a user's calls.
type Measure int

const (
	// MeasureTokens counts tokens.
	MeasureTokens Measure = iota
	// MeasureCost counts Money: picodollars.
	MeasureCost
	numMeasures // the number of measures, not one
)

// Measures lists every measure.
var Measures = [...]Measure{MeasureTokens, MeasureCost}

// Amounts holds an amount of each Measure.
type Amounts [numMeasures]int64

// kind returns the kind of limit that limits m.
func (m Measure) kind() LimitKind {
	if m == MeasureCost {
		return KindCost
	}
	return KindTokens
}

// reason returns the refusal reason of w's limit of m.
func (m Measure) reason(w Window) string {
	if m == MeasureCost {
		return w.SpendReason()
	}
	return w.TokenReason()
}

// SpendReason returns the refusal reason for a call whose cost window w
// cannot hold.
func (w Window) SpendReason() string { return "per-" + w.String() + " spend limit exceeded" }

// measureFields holds the limit of each measure in each window, nil for
// none.
var measureFields = func() (fs [numMeasures][len(Windows)]*LimitField) {
	for i := range LimitFields {
		f := &LimitFields[i]
		for _, m := range Measures {
			if f.Windowed && f.Kind == m.kind() {
				fs[m][f.Window] = f
			}
		}
	}
	return fs
}()

// limit returns t's limit of m in window w; ok is false when t sets none.
func (t *Tier) limit(m Measure, w Window) (limit int64, ok bool) {
	// measureFields holds only windowed rows: a month is no Window.
	if f := measureFields[m][w]; f != nil {
		return f.Value(t)
	}
	return 0, false
}

// LimitsSpend reports whether s sets a spend limit.
func (s *LimitSet) LimitsSpend() bool {
	for i := range LimitFields {
		if LimitFields[i].Kind == KindCost && s[i] != nil {
			return true
		}
	}
	return false
}

// UnpricedError is the error of a check naming a model the price table
// does not price, under a spend limit: such a call is refused, never
// counted as free. Its Code is EINVALID.
type UnpricedError struct {
	Model string
	// Tier names the tier (or "account " and the account) whose spend
	// limit needs the price.
	Tier string
}

func (e *UnpricedError) Error() string {
	if e.Model == "" {
		return fmt.Sprintf("model is required: %s limits spend, and a call is priced by its model", e.Tier)
	}
	return fmt.Sprintf("model %s has no price: %s limits spend, and an unpriced call is refused, not counted as free", Quote(e.Model), e.Tier)
}

// Unwrap makes ErrorCode and ErrorMessage see an EINVALID error.
func (e *UnpricedError) Unwrap() error { return &Error{Code: EINVALID, Message: e.Error()} }

// IsUnpriced reports whether err refuses a check for its model's price,
// and returns that error.
func IsUnpriced(err error) (*UnpricedError, bool) {
	var u *UnpricedError
	ok := errors.As(err, &u)
	return u, ok
}

// Report is what the finish of a call says it used. The zero value reports
// nothing: the reservation stands as used.
type Report struct {
	// Tokens is the tokens the call used; nil when Usage says, or to
	// keep the reservation.
	Tokens *int64
	// Usage splits the tokens by the price each is billed at; nil when
	// unknown, and then Tokens are priced at the call's highest price.
	Usage *TokenUsage
}

// Total returns the tokens u counts.
func (u *TokenUsage) Total() int64 { return u.Input + u.Output + u.CacheRead + u.CacheWrite }

// validate returns the problem of r, nil when none: every count from 0 to
// MaxLimit, and Tokens, when Usage is also set, its total.
func (r *Report) validate() error {
	if r.Tokens != nil && (*r.Tokens < 0 || *r.Tokens > MaxLimit) {
		return Errorf(EINVALID, "tokens must be an integer from 0 to 2147483647")
	}
	if u := r.Usage; u != nil {
		for _, c := range [...]struct {
			name string
			n    int64
		}{{"input_tokens", u.Input}, {"output_tokens", u.Output}, {"cache_read_tokens", u.CacheRead}, {"cache_write_tokens", u.CacheWrite}} {
			if c.n < 0 || c.n > MaxLimit {
				return Errorf(EINVALID, "usage.%s must be an integer from 0 to 2147483647", c.name)
			}
		}
		if u.Total() > MaxLimit {
			return Errorf(EINVALID, "usage counts at most 2147483647 tokens in all")
		}
		if r.Tokens != nil && *r.Tokens != u.Total() {
			return Errorf(EINVALID, "tokens (%d) is not the total of usage (%d)", *r.Tokens, u.Total())
		}
	}
	return nil
}

// Settle returns the tokens and the cost r reports for c: with Usage, its
// total and its cost at c.Price; with Tokens alone, those at c's highest
// price (see Price.MaxPrice); with neither, the reservation. An unpriced
// call costs 0. A cost past MaxMoney counts as MaxMoney.
func (c *Call) Settle(r Report) (tokens int64, cost Money) {
	switch {
	case r.Usage != nil:
		tokens = r.Usage.Total()
	case r.Tokens != nil:
		tokens = *r.Tokens
	default:
		return c.Reserved, c.ReservedCost
	}
	if c.Price == nil {
		return tokens, 0
	}
	var ok bool
	if r.Usage != nil {
		cost, ok = costSum([]int64{r.Usage.Input, r.Usage.Output, r.Usage.CacheRead, r.Usage.CacheWrite},
			[]Money{c.Price.Input, c.Price.Output, c.Price.CacheRead, c.Price.CacheWrite})
	} else {
		cost, ok = CostOf(tokens, c.Price.MaxPrice())
	}
	if !ok {
		cost = MaxMoney
	}
	return tokens, cost
}

// reserveCost returns what a reservation of tokens costs at p: split, when
// the check knows it, priced kind by kind, else every token at p's
// highest price. A cost past MaxMoney counts as MaxMoney, which no limit
// admits beside any other spend.
func reserveCost(p *Price, tokens int64, split *TokenUsage) Money {
	var cost Money
	var ok bool
	if split != nil {
		cost, ok = costSum([]int64{split.Input, split.Output, split.CacheRead, split.CacheWrite},
			[]Money{p.Input, p.Output, p.CacheRead, p.CacheWrite})
	} else {
		cost, ok = CostOf(tokens, p.MaxPrice())
	}
	if !ok {
		return MaxMoney
	}
	return cost
}

// Overrun returns how much c cost above what it reserved: the spend a
// finish added past the admission's check. 0 while c is open.
func (c *Call) Overrun() Money {
	if c.Open() || c.Cost <= c.ReservedCost {
		return 0
	}
	return c.Cost - c.ReservedCost
}

// pricing is how a check's call is priced: found by Service.Check for the
// tier the check is decided on.
type pricing struct {
	model, upstream string
	price           *Price // nil: unpriced
	version         int64
	reserved        Money
}

// priceCheck prices c's call, or returns the error of an unpriced model
// under a spend limit of c's tier or its account's pool, or in a run of a
// tier whose runs have a max_cost.
func (s *Service) priceCheck(ctx context.Context, c *Check) error {
	c.pricing = pricing{model: c.Model, upstream: c.Upstream}
	spendBy := ""
	switch {
	case c.Tier.Limits.LimitsSpend():
		spendBy = "tier " + Quote(c.Tier.Name)
	case c.pool != nil && c.pool.limits.LimitsSpend():
		spendBy = "account " + Quote(c.pool.account.AccountID)
	case c.RunID != "" && c.Tier.RunLimit(MaxRunCost) != nil:
		// A run's max_cost is a spend limit too: an unpriced step
		// would pass it for free.
		spendBy = "the run's max_cost in tier " + Quote(c.Tier.Name)
	}
	if c.NoModel {
		return nil
	}
	if c.Model == "" {
		if spendBy != "" {
			return &UnpricedError{Tier: spendBy}
		}
		return nil
	}
	p, version, ok := s.PriceOf(c.Model, c.Upstream, c.Now)
	if !ok && spendBy != "" && s.prices != nil {
		// Before refusing, the table as stored: a version another
		// replica saved a moment ago may not be in memory yet.
		v, err := s.prices.PricesAt(ctx, c.Now)
		switch {
		case err == nil:
			p, ok = v.Prices.Lookup(c.Model, c.Upstream)
			version = v.ID
		case ErrorCode(err) != ENOTFOUND:
			return err
		}
	}
	if !ok {
		if spendBy != "" {
			return &UnpricedError{Model: c.Model, Tier: spendBy}
		}
		return nil
	}
	c.pricing.price, c.pricing.version = &p, version
	c.pricing.reserved = reserveCost(&p, c.Tokens, c.Reserve)
	return nil
}
