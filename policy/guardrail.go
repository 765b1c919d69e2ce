package policy

import (
	"context"
	"slices"
	"time"
)

// Outcome classifies a Decision.
type Outcome int

const (
	// Admitted means every guardrail let the request through.
	Admitted Outcome = iota
	// RateLimited means a window is full; retrying later can succeed.
	RateLimited
	// Denied means the request is not allowed at all as it stands, such as a
	// feature outside the user's plan; retrying unchanged will not succeed.
	Denied
)

// Request is what a caller asks to be checked. Every field may be empty.
type Request struct {
	// InputText is the prompt. Policy guardrails ignore it; it is here for
	// content guardrails a deployment adds. It is never stored.
	InputText string
	UserID    string
	Tier      string
	Feature   string
	// Account names the account the check draws on when the user's record
	// names none (the API's context.account_id); believed only when the
	// service believes a check's own tier.
	Account string
	// Tokens is the most tokens the call may use, reserved when a metered
	// tier admits it (or OpenCall is set): from 0 to MaxLimit.
	Tokens int64
	// OpenCall asks that the check, when admitted, open a call reserving
	// Tokens even when neither the tier nor the account's pool limits
	// tokens or concurrent calls, so that the count its finish reports is
	// recorded: the gateway sets it on every check it makes. Without it a
	// check of such a tier opens no call, and costs no write beyond its
	// request's.
	OpenCall bool
	// Model names the model the call is for, which prices it (see
	// PriceStore): required under a spend limit, where a model the price
	// table does not price is refused (UnpricedError). Upstream names the
	// gateway's upstream the call goes to, whose own prices come first;
	// "" for none.
	Model, Upstream string
	// Reserve splits Tokens by the price each is billed at, when the
	// caller knows it (the gateway: the prompt's bound at the input price,
	// the output cap at the output price); nil prices every token at the
	// model's highest price. Its total is Tokens.
	Reserve *TokenUsage
	// NoModel reports that the request calls no model and so costs
	// nothing, whatever the tier's spend limits: the gateway's
	// passthrough requests (files, ...) and the dry runs that read a
	// user's windows for an answer's header fields. It needs no Model,
	// and its call, if any, is unpriced. A spend window already full
	// still refuses it.
	NoModel bool
	// RunID names the run the request is a step of (see Run): its first
	// request opens it. ParentRunID names the run's parent, on the run's
	// first request (and, if given, the same on every later one). Both
	// follow the rules of user ids; "" for none.
	RunID, ParentRunID string
}

// Check is a Request resolved for the guardrails: defaults applied, the tier
// looked up, the instant fixed.
type Check struct {
	Request
	Tier *Tier
	Now  time.Time
	// DryRun asks guardrails to decide without changing any state.
	DryRun bool
	// unconfirmed is set when Tier came from TierStore.CachedTier: the
	// RateLimiter must confirm it before recording anything.
	unconfirmed bool
	// base is the tier as stored when user overrides made Tier from it:
	// what the RateLimiter confirms. Nil means Tier itself.
	base *Tier
	// confirmUser asks the RateLimiter to confirm that user, the record of
	// the check's user (nil for none), is still the record as stored;
	// userUnconfirmed says it came from UserStore.CachedUser.
	confirmUser, userUnconfirmed bool
	user                         *UserRecord
	// pool is the account a member's check draws on; nil for none.
	pool *pool
	// pricing prices the call the check opens (see Service.priceCheck).
	pricing pricing
	// period is the user's billing period when Tier limits months; nil
	// otherwise.
	period *Period
}

// Decision is a guardrail's answer. A refusal is a Decision, not an error.
type Decision struct {
	Outcome Outcome
	// Reason says why the request was refused; empty when admitted.
	Reason string
	// RetryAfter is the whole seconds after which the same request would be
	// admitted, when Outcome is RateLimited; otherwise 0.
	RetryAfter int64
	// Tier is the name of the tier the request was checked under.
	Tier string
	// Guardrail names the guardrail that refused, or the last one that ran.
	Guardrail string
	// Windows is the user's window state after this check. It is nil from a
	// guardrail that does not track windows.
	Windows *[len(Windows)]WindowState
	// CallID names the call an admitted check of a metered tier (or with
	// OpenCall set) opened; empty when none was opened (refused, a dry
	// run, or not metered).
	CallID string
	// Concurrency is the user's calls in flight against the tier's
	// max_concurrent (counting the call opened); nil when the tier sets none.
	Concurrency *ConcurrencyState
	// Shadow is how the tier's shadow limits decided the check, and for a
	// member the pooled shadow limits of its account's plan (see
	// ShadowDecision.Account); nil when there are none.
	Shadow *ShadowDecision
	// Account is the pooled state of the account a member's check drew
	// on; nil for a user in no account.
	Account *AccountState
	// Month is the user's billing period after this check, when the tier
	// limits months; nil otherwise.
	Month *MonthState
	// Run is the run the check named, as the check leaves it; nil for a
	// check in no run. A refusal by a run's budget is Denied, which is
	// never worth retrying; by its max_concurrent, RateLimited.
	Run *RunUsage
	// RunRefused is what in the run refused the check; CauseNone when no
	// run refused it.
	RunRefused RunCause
}

// Allowed reports whether the request was admitted.
func (d *Decision) Allowed() bool { return d.Outcome == Admitted }

// TighterWindows returns d's windows, with the account's state in place
// of the user's in each window where the account's pool leaves fewer
// requests (or, separately, fewer tokens): the windows a client must
// respect, which the API's rate-limit fields and the gateway's both
// show. Without an account they are d's own.
func (d *Decision) TighterWindows() *[len(Windows)]WindowState {
	if d.Account == nil || d.Windows == nil {
		return d.Windows
	}
	ws := *d.Windows
	for _, w := range Windows {
		a := d.Account.Windows[w]
		if d.Account.Limited(w) && a.Remaining < ws[w].Remaining {
			tokens, cost := ws[w].Tokens, ws[w].Cost
			ws[w] = a
			ws[w].Tokens, ws[w].Cost = tokens, cost
		}
		if t, u := a.Tokens, ws[w].Tokens; tighterState(t, u) {
			ws[w].Tokens = t
		}
		if t, u := a.Cost, ws[w].Cost; tighterState(t, u) {
			ws[w].Cost = t
		}
	}
	return &ws
}

// tighterState reports whether the limited state a leaves less than u,
// which may be nil or unlimited.
func tighterState(a, u *TokenState) bool {
	return a != nil && a.Limited && (u == nil || !u.Limited || a.Remaining < u.Remaining)
}

// Guardrail is one pre-model check. Check returns a Decision for any answer,
// admitted or refused, and an error only when it could not decide.
type Guardrail interface {
	Name() string
	// Priority orders guardrails in a Chain: lower runs first.
	Priority() int
	Check(ctx context.Context, c *Check) (Decision, error)
}

// Chain runs guardrails in priority order and stops at the first refusal, so
// a request refused by an early guardrail costs nothing in a later one (it
// consumes no quota). A Chain is safe for concurrent use if its guardrails are.
type Chain struct {
	guardrails []Guardrail
}

// NewChain returns a Chain of gs ordered by priority; guardrails of equal
// priority keep the order given. A RateLimiter runs after every other
// guardrail, whatever their priorities: it records the requests it admits,
// so a guardrail after it could refuse a request whose quota was already
// spent.
func NewChain(gs ...Guardrail) *Chain {
	gs = slices.Clone(gs)
	last := func(g Guardrail) int {
		if _, ok := g.(*RateLimiter); ok {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(gs, func(a, b Guardrail) int {
		if d := last(a) - last(b); d != 0 {
			return d
		}
		return a.Priority() - b.Priority()
	})
	return &Chain{guardrails: gs}
}

// Guardrails returns the chain's guardrails in the order they run.
func (ch *Chain) Guardrails() []Guardrail { return slices.Clone(ch.guardrails) }

// Check runs the chain. The returned Decision is the first refusal, or the
// admission of the last guardrail, carrying the latest window state seen.
func (ch *Chain) Check(ctx context.Context, c *Check) (Decision, error) {
	d := Decision{Outcome: Admitted, Tier: c.Tier.Name}
	for _, g := range ch.guardrails {
		gd, err := g.Check(ctx, c)
		if err != nil {
			return Decision{}, err
		}
		d.Outcome, d.Reason, d.RetryAfter, d.Guardrail = gd.Outcome, gd.Reason, gd.RetryAfter, g.Name()
		if gd.Windows != nil {
			d.Windows = gd.Windows
		}
		d.CallID, d.Concurrency = gd.CallID, gd.Concurrency
		if gd.Shadow != nil {
			d.Shadow = gd.Shadow
		}
		if gd.Account != nil {
			d.Account = gd.Account
		}
		if gd.Month != nil {
			d.Month = gd.Month
		}
		d.Run, d.RunRefused = gd.Run, gd.RunRefused
		if !d.Allowed() {
			break
		}
	}
	return d, nil
}

// TierAccess refuses a request whose feature is not included in its tier.
type TierAccess struct{}

// Name implements Guardrail.
func (TierAccess) Name() string { return "tier_access" }

// Priority implements Guardrail: before anything that consumes quota.
func (TierAccess) Priority() int { return 1 }

// Check implements Guardrail.
func (TierAccess) Check(_ context.Context, c *Check) (Decision, error) {
	if c.Tier.Includes(c.Feature) {
		return Decision{Outcome: Admitted}, nil
	}
	return Decision{
		Outcome: Denied,
		Reason:  "feature " + Quote(c.Feature) + " is not included in tier " + Quote(c.Tier.Name),
	}, nil
}

// RateLimiter enforces the tier's three rolling windows and records each
// admitted request in its store.
type RateLimiter struct {
	Store RequestStore
	// CallTimeout is how long a call it opens stays open without a finish
	// or keepalive; 0 means DefaultCallTimeout.
	CallTimeout time.Duration
	// RunIdle is how long a run may go without a request before it
	// expires; 0 means DefaultRunIdle.
	RunIdle time.Duration
}

// Name implements Guardrail.
func (*RateLimiter) Name() string { return "rate_limiter" }

// Priority implements Guardrail: late, so that only requests every other
// guardrail admitted consume quota.
func (*RateLimiter) Priority() int { return 5 }

// Check implements Guardrail. Evaluation and recording happen in one Admit,
// so concurrent checks for a user never admit past a limit.
func (r *RateLimiter) Check(ctx context.Context, c *Check) (Decision, error) {
	// What decide finds lives in one allocation: captured one by one by
	// a closure, each was an allocation of its own (seven per check).
	a := &admission{r: r, c: c, metered: c.OpenCall || c.RunID != "" || c.Tier.Metered() || c.pool != nil && c.pool.limits.Metered()}
	if a.metered && !c.DryRun {
		// Drawn before the admission, which then spends no time on it.
		a.call = &Call{ID: newCallID(c.Now), UserID: c.UserID, Tier: c.Tier.Name, Reserved: c.Tokens,
			Model: c.pricing.model, Upstream: c.pricing.upstream, Price: c.pricing.price,
			PriceVersion: c.pricing.version, ReservedCost: c.pricing.reserved, RunID: c.RunID}
		if c.pool != nil {
			a.call.Account = c.pool.account.AccountID
		}
	}
	var err error
	switch pl, planner := r.Store.(Planner); {
	case c.pool != nil:
		err = a.admitPooled(ctx)
	case c.DryRun:
		err = r.Store.View(ctx, c.UserID, a.view)
	case planner && c.RunID == "":
		// A check in a run reads and writes the run's tree, which no
		// plan covers: it is decided in a transaction of its own.
		err = pl.AdmitPlanned(ctx, c.UserID, a.plan(), a.decide)
	default:
		err = r.Store.Admit(ctx, c.UserID, a.decide)
	}
	if err != nil {
		return Decision{}, err
	}
	switch {
	case a.stale:
		return Decision{}, errTiersChanged
	case a.unconfirmable:
		return Decision{}, errTierUnconfirmed
	case a.userUnconfirmable:
		return Decision{}, errUserUnconfirmed
	case a.accountUnconfirmable:
		return Decision{}, errAccountUnconfirmed
	}
	ev, m := &a.ev, &a.m
	ownOK := ev.Allowed && (!a.metered || m.Allowed) && a.month.ok()
	poolOK, poolReason, poolRetry := true, "", int64(0)
	if c.pool != nil {
		poolOK, poolReason, poolRetry = a.poolVerdict()
	}
	runOK := a.run.Outcome == Admitted
	admitted := ownOK && poolOK && runOK
	d := Decision{Outcome: Admitted, Windows: &ev.Windows, Shadow: mergeShadow(a.shadow, a.poolShadow)}
	switch {
	case !ev.Allowed:
		d.Outcome, d.Reason, d.RetryAfter = RateLimited, ev.Blocked.Reason(), ev.RetryAfter
	case a.metered && !m.Allowed:
		d.Outcome, d.Reason = RateLimited, m.Reason
	case !ownOK:
		d.Outcome, d.Reason = RateLimited, a.month.reason
	}
	if a.metered && !ownOK {
		d.RetryAfter = max(d.RetryAfter, m.RetryAfter)
	}
	if !a.month.ok() {
		d.RetryAfter = max(d.RetryAfter, a.month.retry)
	}
	if !poolOK && (ownOK || poolRetry > d.RetryAfter) {
		// Refused by the pool alone, or by both with the pool the
		// longer wait: the pool's reason, and the longer wait.
		d.Outcome, d.Reason, d.RetryAfter = RateLimited, poolReason, max(poolRetry, d.RetryAfter)
	}
	if !runOK && (a.run.Outcome == Denied || d.Outcome == Admitted) {
		// A budget used up is the answer whatever else refused: no
		// wait can help, and a client must not retry.
		d.Outcome, d.Reason, d.RetryAfter = a.run.Outcome, a.run.Reason, a.run.RetryAfter
	}
	if !runOK {
		d.RunRefused = a.run.Cause
	}
	if c.RunID != "" {
		d.Run = a.runUsage(admitted)
	}
	if ev.Allowed && !admitted {
		ev.withdraw()
	}
	if a.metered {
		states, conc := m.States(c.Tier, admitted, c.Now)
		setStates(&ev.Windows, &states)
		d.Concurrency = conc
		if admitted && a.call != nil {
			d.CallID = a.call.ID
		}
	}
	if c.period != nil {
		d.Month = a.month.state(c.Tier, admitted, c.Now)
	}
	if c.pool != nil {
		d.Account = a.poolState(admitted)
	}
	return d, nil
}

// admission is one check's passage through RateLimiter.Check: its decide
// runs inside the store's Admit (or View, for a dry run) and leaves what it
// found for Check.
type admission struct {
	r       *RateLimiter
	c       *Check
	metered bool
	call    *Call // the call an admitted metered check opens
	p       Plan  // for a store that is a Planner

	ev                Evaluation
	shadow            *ShadowDecision
	m                 Metering
	month             monthVerdict    // of the user's own month limits
	poolShadow        *ShadowDecision // for a member's check
	stale             bool
	unconfirmable     bool
	userUnconfirmable bool
	// accountUnconfirmable: the pool's store cannot confirm a cached
	// account (see admitPooled).
	accountUnconfirmable bool
	// run is how the check's run decided it; Admitted for a check in
	// none.
	run RunVerdict
	// runBefore is the check's run before the check.
	runBefore Run
}

// view is decide for RequestStore.View.
func (a *admission) view(h History) error {
	_, err := a.decide(h)
	return err
}

func (a *admission) decide(h History) (Admission, error) {
	c := a.c
	if ct, ok := h.(CurrentTiers); ok && !c.DryRun {
		// Confirm the tier the check began with (see Service.Check):
		// a changed tier records nothing, and the check starts again.
		base := c.Tier
		if c.base != nil {
			base = c.base
		}
		cur, found, err := ct.CurrentTier(base.Name)
		if err != nil {
			return Admission{}, err
		}
		if a.stale = !found || !SameLimits(cur, base); a.stale {
			return Admission{}, nil
		}
	} else if c.unconfirmed && !c.DryRun {
		// A cached tier that this store cannot confirm decides
		// nothing: it may be older than a change made elsewhere.
		a.unconfirmable = true
		return Admission{}, nil
	}
	if c.confirmUser && !c.DryRun {
		// The same for the user's record, which chose the tier and
		// its overrides.
		if cu, ok := h.(CurrentUsers); ok {
			cur, found, err := cu.CurrentUser(c.UserID)
			if err != nil {
				return Admission{}, err
			}
			if !found {
				cur = nil
			}
			if a.stale = !sameDecisions(cur, c.user); a.stale {
				return Admission{}, nil
			}
		} else if c.userUnconfirmed {
			a.userUnconfirmable = true
			return Admission{}, nil
		}
	}
	var err error
	if a.ev, err = Evaluate(h, c.Tier, c.Now); err != nil {
		return Admission{}, err
	}
	// The same history, in the same admission: no query of its own.
	if a.shadow, err = decideShadow(h, c.Tier, c.Now); err != nil {
		return Admission{}, err
	}
	var l Ledger
	if a.metered {
		if a.m, l, err = meter(h, c); err != nil {
			return Admission{}, err
		}
	}
	if c.period != nil {
		if a.month, err = meterMonth(h, l, a.m.reserved, c.Tier, c.period, c.want(), c.Now.Truncate(Resolution)); err != nil {
			return Admission{}, err
		}
	}
	if !a.metered {
		return Admission{At: a.ev.RecordAt, Record: a.ev.Allowed && a.month.ok() && !c.DryRun, TierID: c.Tier.ID}, nil
	}
	adm := Admission{At: a.ev.RecordAt, Record: a.ev.Allowed && a.m.Allowed && a.month.ok() && !c.DryRun, TierID: c.Tier.ID}
	if c.RunID != "" {
		if err := a.decideRun(h, &adm); err != nil {
			return Admission{}, err
		}
	}
	if adm.Record {
		now := c.Now.Truncate(Resolution)
		a.call.OpenedAt, a.call.ExpiresAt = now, now.Add(a.r.callTimeout())
		adm.Call = a.call
	}
	return adm, nil
}

// meter reads the ledger of c's user from h and meters c's call; it
// returns the ledger too, for the month's count.
func meter(h History, c *Check) (Metering, Ledger, error) {
	ch, ok := h.(CallHistory)
	if !ok {
		return Metering{}, nil, Errorf(EINTERNAL, "tier %s meters calls, which this request store does not keep", Quote(c.Tier.Name))
	}
	l, err := ch.Calls(c.Now.Truncate(Resolution))
	if err != nil {
		return Metering{}, nil, err
	}
	m, err := Meter(l, c.Tier, c.want(), c.Now)
	return m, l, err
}

// want returns what c's call reserves.
func (c *Check) want() Amounts {
	return Amounts{MeasureTokens: c.Tokens, MeasureCost: int64(c.pricing.reserved)}
}

func (r *RateLimiter) callTimeout() time.Duration {
	if r.CallTimeout > 0 {
		return r.CallTimeout
	}
	return DefaultCallTimeout
}

// Usage returns userID's window state under tier t (only counts when t is
// nil) without recording anything.
func (r *RateLimiter) Usage(ctx context.Context, userID string, t *Tier, now time.Time) ([len(Windows)]WindowState, error) {
	u, err := r.usage(ctx, userID, t, fixedClock(now), false, nil)
	return u.Windows, err
}

// fixedClock is a clock stopped at t: for a report of a check's own
// instant.
func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

// usage is Usage with, when calls is set and the store keeps them, each
// window's tokens and the calls in flight, and with period set, the
// state of that billing period (under t's month limits).
//
// The instant is read from clock inside the view, so it is at or after
// every admission the view holds. Read before the view began, it could
// precede the newest of them, and the report would count that admission's
// reservation beside finished tokens the admission had already seen leave
// the window: a total over the limit that no admission passed.
func (r *RateLimiter) usage(ctx context.Context, userID string, t *Tier, clock func() time.Time, calls bool, period *Period) (UsageReport, error) {
	var u UsageReport
	err := r.Store.View(ctx, userID, func(h History) error {
		now := clock()
		var err error
		if u.Windows, err = Usage(h, t, now); err != nil {
			return err
		}
		var l Ledger
		if ch, ok := h.(CallHistory); ok && (calls || period != nil) {
			if l, err = ch.Calls(now.Truncate(Resolution)); err != nil {
				return err
			}
		}
		if period != nil {
			if u.Month, err = monthUsage(h, l, t, period, now.Truncate(Resolution)); err != nil {
				return err
			}
		}
		if !calls || l == nil {
			return nil
		}
		states, inFlight, err := CallUsage(l, t, now)
		if err != nil {
			return err
		}
		u.CallsInFlight, u.CallsKept = inFlight, true
		for w := range u.Windows {
			u.Windows[w].Tokens, u.Windows[w].Cost = &states[MeasureTokens][w], &states[MeasureCost][w]
		}
		return nil
	})
	return u, err
}
