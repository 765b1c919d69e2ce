package policy

import (
	"context"
	"time"
)

// RequestLimits are the request limits of a tier's three rolling windows: what
// shadow limits, a preview and a user's override set.
type RequestLimits struct {
	RequestsPerMinute int64
	RequestsPerHour   int64
	RequestsPerDay    int64
	// BurstAllowance widens only the minute window, as a tier's does.
	BurstAllowance int64
}

// Ceiling returns the number of admitted requests window w may hold.
func (l *RequestLimits) Ceiling(w Window) int64 {
	switch w {
	case Minute:
		return l.RequestsPerMinute + l.BurstAllowance
	case Hour:
		return l.RequestsPerHour
	default:
		return l.RequestsPerDay
	}
}

// RequestLimits returns t's request limits.
func (t *Tier) RequestLimits() RequestLimits {
	return RequestLimits{t.RequestsPerMinute, t.RequestsPerHour, t.RequestsPerDay, t.BurstAllowance}
}

// WithLimits returns a copy of t whose request limits are l; everything
// else, shadow limits included, is t's.
func (t *Tier) WithLimits(l RequestLimits) Tier {
	c := *t
	for i := range LimitFields {
		if f := &LimitFields[i]; f.InRequestLimits() {
			f.Set(&c, f.RequestLimit(&l))
		}
	}
	return c
}

// Promoted returns a copy of t whose shadow limits are its real limits and
// which has no shadow limits. A tier without shadow limits is EINVALID.
func (t *Tier) Promoted() (Tier, error) {
	if t.Shadow == nil {
		return Tier{}, Errorf(EINVALID, "tier %s has no shadow limits to promote", Quote(t.Name))
	}
	p := t.WithLimits(*t.Shadow)
	p.Shadow = nil
	return p, nil
}

func sameShadow(a, b *Tier) bool {
	if a.Shadow == nil || b.Shadow == nil {
		return a.Shadow == b.Shadow
	}
	return *a.Shadow == *b.Shadow
}

// ShadowDecision is how a tier's shadow limits would have decided a check.
// It never refuses anything: the check's Decision is the real limits'.
type ShadowDecision struct {
	Allowed bool
	// Blocked is the first window at or over its shadow ceiling, when
	// !Allowed.
	Blocked Window
}

// Reason returns the refusal reason the shadow limits would have given,
// or "" when they allow the request.
func (s *ShadowDecision) Reason() string {
	if s.Allowed {
		return ""
	}
	return s.Blocked.Reason()
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
	ev, err := Evaluate(h, &st, now)
	if err != nil {
		return nil, err
	}
	return &ShadowDecision{Allowed: ev.Allowed, Blocked: ev.Blocked}, nil
}

// shadowView decides t's shadow limits for userID at now on a read-only
// view, for a check refused before the RateLimiter ran; nil when t has
// none, which reads nothing.
func (r *RateLimiter) shadowView(ctx context.Context, userID string, t *Tier, now time.Time) (*ShadowDecision, error) {
	if t.Shadow == nil {
		return nil, nil
	}
	var sd *ShadowDecision
	err := r.Store.View(ctx, userID, func(h History) error {
		var err error
		sd, err = decideShadow(h, t, now)
		return err
	})
	return sd, err
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
