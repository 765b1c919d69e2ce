package client

import "encoding/json"

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
