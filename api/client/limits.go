package client

import (
	"encoding/json"
	"reflect"
	"strings"
)

// Limits is a set of limits by their API names, each nil for none: a
// tier's own limits (embedded in Tier), the pooled limits of an account on
// a tier (Tier.Account) and in force for an account (AccountUsage.Limits),
// and a tier's shadow limits (ShadowLimits). A new limit of the service is
// a field here.
//
// A nil limit is left out of what the client sends, which the service
// reads as no limit, except the limits a tier and its shadow require (the
// requests per minute, hour and day and the burst allowance), which a Tier
// sends as 0 when nil, as a number it would otherwise leave at its zero
// value. A shadow sets request limits and the burst allowance only.
type Limits struct {
	RequestsPerMinute *int64 `json:"requests_per_minute,omitempty"`
	RequestsPerHour   *int64 `json:"requests_per_hour,omitempty"`
	RequestsPerDay    *int64 `json:"requests_per_day,omitempty"`
	BurstAllowance    *int64 `json:"burst_allowance,omitempty"`
	// TokensPerMinute, TokensPerHour and TokensPerDay limit the tokens of
	// the calls in each window, MaxConcurrent the calls a user (or an
	// account's members together) has open at once.
	TokensPerMinute *int64 `json:"tokens_per_minute,omitempty"`
	TokensPerHour   *int64 `json:"tokens_per_hour,omitempty"`
	TokensPerDay    *int64 `json:"tokens_per_day,omitempty"`
	MaxConcurrent   *int64 `json:"max_concurrent,omitempty"`
	// CostPerMinute, CostPerHour and CostPerDay limit the model spend of
	// the calls in each window: amounts of US dollars as decimal strings,
	// exact to the picodollar ("20", "0.15"; see Dollars).
	CostPerMinute *string `json:"cost_per_minute,omitempty"`
	CostPerHour   *string `json:"cost_per_hour,omitempty"`
	CostPerDay    *string `json:"cost_per_day,omitempty"`
}

// Dollars returns a pointer to amount, an amount of US dollars as a
// decimal string ("20", "0.15"), for a spend limit: Limits.CostPerDay,
// User.Spend, Account.Spend.
func Dollars(amount string) *string { return &amount }

// spendNames are the API names of the spend limits: the limits of Limits
// whose values are amounts of dollars.
var spendNames = func() map[string]bool {
	names := map[string]bool{}
	t := reflect.TypeFor[Limits]()
	for i := range t.NumField() {
		if f := t.Field(i); f.Type == reflect.TypeFor[*string]() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			names[name] = true
		}
	}
	return names
}()

// limitValues are a user's or an account's limits on the wire, one
// object: the limits counted in integers (counts) and the spend limits,
// decimal strings of dollars (spend), by their API names, each nil to
// remove the limit. Both maps nil is null.
type limitValues struct {
	counts map[string]*int64
	spend  map[string]*string
}

// MarshalJSON implements json.Marshaler.
func (l limitValues) MarshalJSON() ([]byte, error) {
	if l.counts == nil && l.spend == nil {
		return []byte("null"), nil
	}
	m := make(map[string]any, len(l.counts)+len(l.spend))
	for name, v := range l.counts {
		m[name] = v
	}
	for name, v := range l.spend {
		m[name] = v
	}
	return json.Marshal(m)
}

// UnmarshalJSON implements json.Unmarshaler.
func (l *limitValues) UnmarshalJSON(data []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil || m == nil {
		*l = limitValues{}
		return err
	}
	for name, raw := range m {
		if spendNames[name] {
			var v *string
			if err := json.Unmarshal(raw, &v); err != nil {
				return err
			}
			if l.spend == nil {
				l.spend = map[string]*string{}
			}
			l.spend[name] = v
			continue
		}
		var v *int64
		if err := json.Unmarshal(raw, &v); err != nil {
			return err
		}
		if l.counts == nil {
			l.counts = map[string]*int64{}
		}
		l.counts[name] = v
	}
	return nil
}

// RunLimits is a tier's run object: the limits of each run of an agent
// under the tier, counted over the run and its sub-agents from the run's
// first request, each nil for none (left out of what the client sends).
type RunLimits struct {
	// MaxConcurrent limits the calls open at once in the run.
	MaxConcurrent *int64 `json:"max_concurrent,omitempty"`
	// MaxRequests limits the run's requests: its steps.
	MaxRequests *int64 `json:"max_requests,omitempty"`
	MaxTokens   *int64 `json:"max_tokens,omitempty"`
	// MaxCost limits the run's model spend: an amount of US dollars as a
	// decimal string (see Dollars).
	MaxCost *string `json:"max_cost,omitempty"`
	// MaxDuration limits the run's time, in whole seconds from its first
	// request.
	MaxDuration *int64 `json:"max_duration,omitempty"`
	// MaxDepth limits the levels of a tree of runs, the root counting as
	// one; nil reads as 4.
	MaxDepth *int64 `json:"max_depth,omitempty"`
	// Required reports whether every gateway request under the tier must
	// name a run.
	Required bool `json:"required,omitempty"`
}

// ShadowLimits are a tier's shadow: request limits every check under the
// tier is also decided against and never refused by.
type ShadowLimits struct {
	Limits
	// Account holds the pooled shadow limits of the accounts on the
	// tier; nil for none.
	Account *Limits `json:"account,omitempty"`
}

// withRequired returns l with the limits a tier requires set to 0 where
// nil.
func (l Limits) withRequired() Limits {
	for _, p := range []**int64{&l.RequestsPerMinute, &l.RequestsPerHour, &l.RequestsPerDay, &l.BurstAllowance} {
		if *p == nil {
			*p = Limit(0)
		}
	}
	return l
}

// MarshalJSON implements json.Marshaler: a required limit left nil is
// sent as 0.
func (s ShadowLimits) MarshalJSON() ([]byte, error) {
	type plain ShadowLimits
	s.Limits = s.Limits.withRequired()
	return json.Marshal(plain(s))
}

// MarshalJSON implements json.Marshaler: a required limit left nil is
// sent as 0.
func (t Tier) MarshalJSON() ([]byte, error) {
	type plain Tier
	t.Limits = t.Limits.withRequired()
	return json.Marshal(plain(t))
}
