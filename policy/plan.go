package policy

import (
	"context"
	"time"
)

// Plan is what a RateLimiter's admission decides on, known before its
// decide runs: the instant, the limits, what it confirms and the call it
// opens. A store that implements Planner may act on it ahead of decide,
// for instance to decide many admissions in one statement of a database;
// decide remains the rule, and the store must give up what it did
// whenever decide disagrees (see Planner).
type Plan struct {
	// Now is the check's instant, truncated to Resolution.
	Now time.Time
	// Tier is the tier Evaluate and Meter decide on: Base with the
	// user's overrides. Its ID is recorded with the request.
	Tier *Tier
	// Base is the tier as stored, which decide confirms through
	// CurrentTiers.
	Base *Tier
	// ConfirmUser says that decide confirms, through CurrentUsers, that
	// the user's record is still User (nil: the user has none).
	ConfirmUser bool
	User        *UserRecord
	// Call is the call an admitted check opens, its OpenedAt and
	// ExpiresAt set; nil when the tier meters nothing.
	Call *Call
}

// Planner is implemented by a RequestStore that can use a Plan.
// AdmitPlanned is Admit, told the plan of decide ahead: it records
// exactly what Admit would, whatever the plan says. A store may decide the
// admission from the plan before it runs decide, but decide's Admission is
// the one that counts: when they differ, the store must undo its own and
// record decide's, as Admit does. It is safe for concurrent use.
type Planner interface {
	AdmitPlanned(ctx context.Context, userID string, p *Plan, decide func(History) (Admission, error)) error
}

// plan returns the plan of a's admission.
func (a *admission) plan() *Plan {
	c := a.c
	p := &a.p
	*p = Plan{Now: c.Now.Truncate(Resolution), Tier: c.Tier, Base: c.Tier, ConfirmUser: c.confirmUser, User: c.user, Call: a.call}
	if c.base != nil {
		p.Base = c.base
	}
	if a.call != nil {
		a.call.OpenedAt, a.call.ExpiresAt = p.Now, p.Now.Add(a.r.callTimeout())
	}
	return p
}
