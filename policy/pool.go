package policy

import (
	"context"
	"time"
)

// PoolCallID returns the id under which a member's call named id is open
// in its account's pool: the same call, counted in the second history.
// Callers only ever see id.
func PoolCallID(id string) string { return id + poolCallSuffix }

const poolCallSuffix = "-pool"

// isPoolCallID reports whether id names the pool's copy of a member's
// call, which only its member's finish and keepalive may change: one
// longer than every id a check gives by the suffix of PoolCallID.
func isPoolCallID(id string) bool {
	return len(id) == callIDLen+len(poolCallSuffix) && id[callIDLen:] == poolCallSuffix
}

// poolOf returns the pool of a check under acct, whose user's tier as
// stored is base: the account's plan's pooled limits with its overrides.
func (s *Service) poolOf(ctx context.Context, acct *Account, base *Tier, fromMemory bool) (*pool, error) {
	p := &pool{account: acct, key: AccountKey(acct.AccountID)}
	t := base
	if acct.Tier != base.Name {
		// The account's plan is not the member's tier, which decide
		// confirms: taken from memory as that tier is, and confirmed
		// with it in the admission (see admitPooled).
		plan, cached := Tier{}, false
		if fromMemory && !s.tiersUnconfirmable.Load() {
			plan, cached = s.tiers.CachedTier(acct.Tier)
		}
		if !cached {
			var err error
			if plan, err = s.readTier(ctx, acct.Tier); err != nil {
				return nil, err
			}
		}
		p.plan, p.planCached = &plan, cached
		t = p.plan
	}
	p.limits = acct.Pool(t)
	p.tier = p.limits.Tier(t.Name, t.ID)
	if t.Shadow != nil && t.Shadow.Account != nil {
		// As the tier sets them, without the account's overrides: a
		// user's shadow limits take none of their record's either.
		st := t.Shadow.Account.Tier(t.Name, t.ID)
		p.shadow = &st
	}
	return p, nil
}

// admitPooled is the admission of a member's check: its own history and
// its account's pool decided and recorded together.
func (a *admission) admitPooled(ctx context.Context) error {
	c, store := a.c, a.r.Store
	if c.DryRun {
		return store.View(ctx, c.UserID, func(h History) error {
			if _, err := a.decide(h); err != nil {
				return err
			}
			return store.View(ctx, c.pool.key, func(h History) error {
				_, err := a.decidePool(h, false)
				return err
			})
		})
	}
	ps, ok := store.(PoolStore)
	if !ok {
		return Errorf(EINTERNAL, "this request store cannot count an account's pooled limits")
	}
	return ps.AdmitPooled(ctx, c.pool.key, c.UserID, func(hp, hu History) (Admission, Admission, error) {
		// Confirm the account the check began with, and its plan when
		// that is not the member's tier, as decide confirms the tier and
		// the record: a changed one records nothing. First, before decide
		// reads the user's calls, which settles those that expired: a
		// check started again must not have changed anything.
		if plan := c.pool.plan; plan != nil {
			if ct, ok := hu.(CurrentTiers); ok {
				cur, found, err := ct.CurrentTier(plan.Name)
				if err != nil {
					return Admission{}, Admission{}, err
				}
				if a.stale = !found || !SameLimits(cur, plan); a.stale {
					return Admission{}, Admission{}, nil
				}
			} else if c.pool.planCached {
				a.unconfirmable = true
				return Admission{}, Admission{}, nil
			}
		}
		if ca, ok := hp.(CurrentAccounts); ok {
			cur, found, err := ca.CurrentAccount(c.pool.account.AccountID)
			if err != nil {
				return Admission{}, Admission{}, err
			}
			if a.stale = !found || !sameAccount(cur, c.pool.account); a.stale {
				return Admission{}, Admission{}, nil
			}
		} else if c.pool.cached {
			a.accountUnconfirmable = true
			return Admission{}, Admission{}, nil
		}
		own, err := a.decide(hu)
		if err != nil || a.stale || a.unconfirmable || a.userUnconfirmable {
			return Admission{}, Admission{}, err
		}
		pooled, err := a.decidePool(hp, own.Record)
		if err != nil {
			return Admission{}, Admission{}, err
		}
		if !pooled.Record {
			own.Record, own.Call, own.Run = false, nil, nil
		}
		return pooled, own, nil
	})
}

// decidePool decides the check against its pool's history h; it records
// only when the member's own limits admitted it (ownAdmits) and the pool's
// do too.
func (a *admission) decidePool(h History, ownAdmits bool) (Admission, error) {
	c, p := a.c, a.c.pool
	var err error
	if a.c.pool.ev, err = Evaluate(h, &p.tier, c.Now); err != nil {
		return Admission{}, err
	}
	// The same history, in the same admission, as the user's own.
	if a.poolShadow, err = decidePoolShadow(h, p, c.Now); err != nil {
		return Admission{}, err
	}
	if a.metered {
		ch, ok := h.(CallHistory)
		if !ok {
			return Admission{}, Errorf(EINTERNAL, "account %s meters calls, which this request store does not keep", Quote(p.account.AccountID))
		}
		l, err := ch.Calls(c.Now.Truncate(Resolution))
		if err != nil {
			return Admission{}, err
		}
		if a.c.pool.m, err = Meter(l, &p.tier, c.want(), c.Now); err != nil {
			return Admission{}, err
		}
		if p.period != nil {
			if p.month, err = meterMonth(h, l, p.m.reserved, &p.tier, p.period, c.want(), c.Now.Truncate(Resolution)); err != nil {
				return Admission{}, err
			}
		}
	} else if p.period != nil {
		if p.month, err = meterMonth(h, nil, Amounts{}, &p.tier, p.period, c.want(), c.Now.Truncate(Resolution)); err != nil {
			return Admission{}, err
		}
	}
	ok := a.c.pool.ev.Allowed && (!a.metered || a.c.pool.m.Allowed) && p.month.ok()
	adm := Admission{At: a.c.pool.ev.RecordAt, Record: ok && ownAdmits && !c.DryRun, TierID: p.tier.ID}
	if adm.Record && a.call != nil {
		pc := *a.call
		pc.ID, pc.UserID, pc.Tier, pc.Account, pc.RunID = PoolCallID(a.call.ID), p.key, p.tier.Name, "", ""
		adm.Call = &pc
	}
	return adm, nil
}

// poolVerdict is how the pool decided: whether it admits, why not and
// when to retry.
func (a *admission) poolVerdict() (ok bool, reason string, retry int64) {
	p := a.c.pool
	ok = p.ev.Allowed && (!a.metered || p.m.Allowed) && p.month.ok()
	switch {
	case !p.ev.Allowed:
		reason = AccountReasonPrefix + p.ev.Blocked.Reason()
	case a.metered && !p.m.Allowed:
		reason = AccountReasonPrefix + p.m.Reason
	case !ok:
		reason = AccountReasonPrefix + p.month.reason
	}
	retry = p.ev.RetryAfter
	if a.metered && !p.m.Allowed {
		retry = max(retry, p.m.RetryAfter)
	}
	if !p.month.ok() {
		retry = max(retry, p.month.retry)
	}
	return ok, reason, retry
}

// poolState returns the pool's state after the check.
func (a *admission) poolState(admitted bool) *AccountState {
	p := a.c.pool
	if a.c.pool.ev.Allowed && !admitted {
		a.c.pool.ev.withdraw()
	}
	s := &AccountState{ID: p.account.AccountID, Limits: p.limits, Windows: a.c.pool.ev.Windows}
	if a.metered {
		states, conc := a.c.pool.m.States(&p.tier, admitted, a.c.Now)
		setStates(&s.Windows, &states)
		s.Concurrency = conc
	}
	if p.period != nil {
		s.Month = p.month.state(&p.tier, admitted, a.c.Now)
	}
	return s
}

// poolView is the pool's state as it stands, with nothing consumed: for a
// check refused before the RateLimiter ran.
func (r *RateLimiter) poolView(ctx context.Context, p *pool, now time.Time) (*AccountState, error) {
	u, err := r.usage(ctx, p.key, &p.tier, fixedClock(now), p.limits.Metered(), p.period)
	if err != nil {
		return nil, err
	}
	conc := unconsumed(&u, &p.tier)
	return &AccountState{ID: p.account.AccountID, Limits: p.limits, Windows: u.Windows, Concurrency: conc, Month: u.Month}, nil
}
