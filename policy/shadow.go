package policy

import (
	"context"
	"time"
)

// RequestLimits are the request limits of a tier's three rolling windows
// and its burst allowance: what shadow limits, a preview and a user's
// overrides set. Limits holds only the rows of LimitFields that
// InRequestLimits, each nil read as 0; the others are unset.
type RequestLimits struct {
	Limits LimitSet
	// Account, when set, holds request limits of the pool of each account
	// on the tier's plan: the rows of LimitFields that InRequestLimits,
	// each nil for none, and no other. On a tier's Shadow they are the
	// pooled shadow limits its accounts' pools are also decided against;
	// in a preview, the pooled limits proposed for them. nil sets none. A
	// user's limits have none.
	Account *LimitSet
}

// value returns the limit l sets f to: ok is false for a limit l does not
// hold.
func (l *RequestLimits) value(f *LimitField) (int64, bool) {
	if !f.InRequestLimits() {
		return 0, false
	}
	return l.Limits.Value(f.id), true
}

// Ceiling returns the number of admitted requests window w may hold.
func (l *RequestLimits) Ceiling(w Window) int64 {
	switch w {
	case Minute:
		return l.Limits.Value(RequestsPerMinute) + l.Limits.Value(BurstAllowance)
	case Hour:
		return l.Limits.Value(RequestsPerHour)
	default:
		return l.Limits.Value(RequestsPerDay)
	}
}

// RequestLimits returns t's request limits, without its Account's.
func (t *Tier) RequestLimits() RequestLimits {
	return RequestLimits{Limits: t.Limits.requestPart()}
}

// PreviewLimits returns what a preview of t replays: its request limits
// for users, and the request limits of its Account, when it has one, for
// the pools of its accounts.
func (t *Tier) PreviewLimits() RequestLimits {
	l := t.RequestLimits()
	if t.Account != nil {
		p := t.Account.requestPart()
		l.Account = &p
	}
	return l
}

// requestPart returns the limits of s that RequestLimits holds, the
// others unset.
func (s LimitSet) requestPart() LimitSet {
	for i := range LimitFields {
		if !LimitFields[i].InRequestLimits() {
			s[i] = nil
		}
	}
	return s
}

// requestLimits returns the request limits of p as a pool is evaluated on
// them: a window without a limit admits more than any window holds (see
// LimitSet.Tier).
func (p *LimitSet) requestLimits() RequestLimits {
	t := p.Tier("", 0)
	return t.RequestLimits()
}

// WithLimits returns a copy of t whose request limits are l (l.Account
// aside); everything else, shadow limits included, is t's.
func (t *Tier) WithLimits(l RequestLimits) Tier {
	c := *t
	for i := range LimitFields {
		if LimitFields[i].InRequestLimits() {
			c.Limits[i] = l.Limits[i]
		}
	}
	return c
}

// Promoted returns a copy of t whose shadow limits are its real limits and
// which has no shadow limits: the shadow's Account, when set, replaces the
// request limits of t's Account (whose token and concurrency limits stay).
// A tier without shadow limits is EINVALID.
func (t *Tier) Promoted() (Tier, error) {
	if t.Shadow == nil {
		return Tier{}, Errorf(EINVALID, "tier %s has no shadow limits to promote", Quote(t.Name))
	}
	p := t.WithLimits(*t.Shadow)
	p.Shadow = nil
	if sa := t.Shadow.Account; sa != nil {
		var pool LimitSet // a new one: t's may be shared
		if t.Account != nil {
			pool = *t.Account
		}
		for i := range LimitFields {
			if LimitFields[i].InRequestLimits() {
				pool[i] = sa[i]
			}
		}
		p.Account = &pool
	}
	return p, nil
}

func sameShadow(a, b *Tier) bool {
	if a.Shadow == nil || b.Shadow == nil {
		return a.Shadow == b.Shadow
	}
	return a.Shadow.Equal(b.Shadow)
}

// Equal reports whether l and m set the same limits, their Accounts
// included.
func (l *RequestLimits) Equal(m *RequestLimits) bool {
	for i := range LimitFields {
		f := &LimitFields[i]
		x, xok := l.value(f)
		y, yok := m.value(f)
		if xok != yok || x != y {
			return false
		}
	}
	return (l.Account == nil) == (m.Account == nil) && (l.Account == nil || l.Account.Equal(m.Account))
}

// ShadowDecision is how a tier's shadow limits would have decided a check.
// It never refuses anything: the check's Decision is the real limits'.
type ShadowDecision struct {
	Allowed bool
	// Blocked is the first window at or over its shadow ceiling, when
	// !Allowed.
	Blocked Window
	// Account reports whether Blocked is a window of the pooled shadow
	// limits of the member's account (the Account of its plan's shadow
	// limits) rather than of the user's own.
	Account bool
	// retry is the wait the refusal would have given (see mergeShadow).
	retry int64
}

// Reason returns the refusal reason the shadow limits would have given,
// or "" when they allow the request: an account's is worded as a check's
// refusal by its account is ("account per-minute limit exceeded").
func (s *ShadowDecision) Reason() string {
	switch {
	case s.Allowed:
		return ""
	case s.Account:
		return AccountReasonPrefix + s.Blocked.Reason()
	}
	return s.Blocked.Reason()
}

// CountReason returns the reason a check the shadow limits would have
// refused is counted under beside its answer: ShadowReason of the blocked
// window, or ShadowAccountReason for an account's pooled shadow limits.
// It is "" when they allow the request.
func (s *ShadowDecision) CountReason() string {
	switch {
	case s.Allowed:
		return ""
	case s.Account:
		return ShadowAccountReason
	}
	return ShadowReason(s.Blocked)
}

// decideShadow evaluates t's shadow limits over h at now, or returns nil
// when t has none. It reads what Evaluate with t's real limits just read,
// so a store that keeps the window cursors of the admission answers from
// them.
func decideShadow(h History, t *Tier, now time.Time) (*ShadowDecision, error) {
	if t.Shadow == nil {
		return nil, nil
	}
	st := t.WithLimits(*t.Shadow)
	return shadowOf(h, &st, now, false)
}

// decidePoolShadow evaluates the pooled shadow limits of p over h, the
// pool's history, at now; nil when its plan shadows none. It reads what
// Evaluate with the pool's real limits just read.
func decidePoolShadow(h History, p *pool, now time.Time) (*ShadowDecision, error) {
	if p == nil || p.shadow == nil {
		return nil, nil
	}
	return shadowOf(h, p.shadow, now, true)
}

// shadowOf evaluates the shadow limits st over h at now.
func shadowOf(h History, st *Tier, now time.Time, account bool) (*ShadowDecision, error) {
	ev, err := Evaluate(h, st, now)
	if err != nil {
		return nil, err
	}
	return &ShadowDecision{Allowed: ev.Allowed, Blocked: ev.Blocked, Account: account, retry: ev.RetryAfter}, nil
}

// mergeShadow returns the shadow verdict of a check from its user's own
// (nil when the tier has no shadow limits) and its pool's (nil when the
// check draws on no pool with shadow limits), chosen as a real refusal
// is: the pool's when only it refuses, or when both do and it would make
// the caller wait longer.
func mergeShadow(own, pool *ShadowDecision) *ShadowDecision {
	switch {
	case pool == nil:
		return own
	case own == nil || own.Allowed && !pool.Allowed:
		return pool
	case !own.Allowed && !pool.Allowed && pool.retry > own.retry:
		return pool
	}
	return own
}

// shadowView decides the shadow limits of c, its tier's and its pool's,
// on read-only views, for a check refused before the RateLimiter ran; nil
// when there are none, which reads nothing.
func (r *RateLimiter) shadowView(ctx context.Context, c *Check) (*ShadowDecision, error) {
	var own, pooled *ShadowDecision
	if c.Tier.Shadow != nil {
		err := r.Store.View(ctx, c.UserID, func(h History) error {
			var err error
			own, err = decideShadow(h, c.Tier, c.Now)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	if p := c.pool; p != nil && p.shadow != nil {
		err := r.Store.View(ctx, p.key, func(h History) error {
			var err error
			pooled, err = decidePoolShadow(h, p, c.Now)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return mergeShadow(own, pooled), nil
}

// PromoteShadow makes the shadow limits of the named tier its real limits
// and clears them, in one change recorded in the audit log with the source
// ctx carries. readAt, when set, is the UpdatedAt the tier was read with,
// as for ReplaceTier: a tier changed since fails with ECONFLICT. Without
// it, the tier is read here and the same precondition keeps a change made
// meanwhile from being undone. A tier without shadow limits is EINVALID,
// an unknown one ENOTFOUND.
func (s *Service) PromoteShadow(ctx context.Context, name string, readAt *time.Time) (Tier, error) {
	t, err := s.tiers.Tier(ctx, name)
	if err != nil {
		return Tier{}, err
	}
	if readAt != nil && !t.UpdatedAt.Equal(readAt.Truncate(Resolution)) {
		return Tier{}, Errorf(ECONFLICT, "tier %s was changed at %s, after it was read", Quote(name), t.UpdatedAt.Format(time.RFC3339Nano))
	}
	p, err := t.Promoted()
	if err != nil {
		return Tier{}, err
	}
	return s.ReplaceTier(ctx, p, t.UpdatedAt)
}
