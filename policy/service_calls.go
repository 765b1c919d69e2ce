package policy

import (
	"context"
	"time"
)

// WithCallTimeout sets how long a call stays open without a finish or a
// keepalive before the service finishes it with its reservation (default
// DefaultCallTimeout). d must be positive; others keep the default.
func WithCallTimeout(d time.Duration) Option {
	return func(s *Service) {
		if d > 0 {
			s.limiter.CallTimeout = d
		}
	}
}

// CallTimeout returns how long a call stays open without a finish or a
// keepalive.
func (s *Service) CallTimeout() time.Duration { return s.limiter.callTimeout() }

// FinishCall finishes the call named id with what it used, as r reports:
// tokens, priced at the call's highest price, or usage split by price,
// priced exactly (see Call.Settle); nothing keeps its reservation as used.
// Finishing again with the same report returns the call and changes
// nothing, so a caller may retry; a different one after the call finished
// is ECONFLICT. A call the service already expired is finished as asked
// (200 for the API): tokens or cost above its reservation add the excess,
// counted now; a call never counts less than reported. An unknown id is
// ENOTFOUND; counts outside 0 to MaxLimit, or tokens that are not the
// total of usage, are EINVALID.
func (s *Service) FinishCall(ctx context.Context, id string, r Report) (Call, error) {
	if err := r.validate(); err != nil {
		return Call{}, err
	}
	if !ValidCallID(id) || isPoolCallID(id) {
		return Call{}, callNotFound(id)
	}
	return s.limiter.Store.FinishCall(ctx, id, r, s.now().Truncate(Resolution))
}

// KeepAlive moves the expiry of the open call named id to now plus the call
// timeout and returns the call, so a long call keeps its slot. A finished or
// expired call is ECONFLICT, an unknown id ENOTFOUND.
func (s *Service) KeepAlive(ctx context.Context, id string) (Call, error) {
	if !ValidCallID(id) || isPoolCallID(id) {
		return Call{}, callNotFound(id)
	}
	now := s.now().Truncate(Resolution)
	return s.limiter.Store.KeepAlive(ctx, id, now, now.Add(s.CallTimeout()))
}

// UsageReport returns userID's window state, each window's tokens and the
// calls in flight. With a tier name, each window also carries that tier's
// limits, remaining quota and reset, for requests and, where the tier limits
// them, for tokens; otherwise only counts and tokens used.
func (s *Service) UsageReport(ctx context.Context, userID, tierName string) (UsageReport, error) {
	if err := ValidateUserID(userID); err != nil {
		return UsageReport{}, err
	}
	var tier *Tier
	if tierName != "" {
		t, err := s.readTier(ctx, tierName)
		if err != nil {
			return UsageReport{}, err
		}
		tier = &t
	}
	var period *Period
	if s.periodsKept() {
		p, err := s.UserPeriod(ctx, userID)
		if err != nil {
			return UsageReport{}, err
		}
		period = &p
	}
	return s.limiter.usage(ctx, userID, tier, s.now, true, period)
}

// callNotFound is the error for a call id that names no call.
func callNotFound(id string) error { return Errorf(ENOTFOUND, "call %s not found", Quote(id)) }

// unconsumed turns the usage u of a check refused before the rate limiter
// into a Decision's call state under t: tokens only for the windows t
// limits, and the concurrency when t sets max_concurrent.
func unconsumed(u *UsageReport, t *Tier) *ConcurrencyState {
	for w := range u.Windows {
		if cs := u.Windows[w].Cost; cs != nil && !cs.Limited {
			u.Windows[w].Cost = nil
		}
		if tk := u.Windows[w].Tokens; tk != nil && !tk.Limited {
			u.Windows[w].Tokens = nil
		}
	}
	c := t.Limits[MaxConcurrent]
	if c == nil || !u.CallsKept {
		return nil
	}
	return &ConcurrencyState{Limit: *c, InFlight: u.CallsInFlight}
}
