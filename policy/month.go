package policy

import (
	"context"
	"strings"
	"time"
)

// Month limits. requests_per_month, tokens_per_month and cost_per_month
// count over the subscriber's current billing period (see BillingPeriod),
// which is not a rolling Window: nothing leaves it before it ends, and
// then all of it does. The rolling windows' code knows nothing of it; a
// check of a tier with month limits decides the period beside them, in
// the same admission.
//
// A store keeps a day of rows and prunes the older ones, so a period's use
// is what its pruning rolled up into the period's totals, plus the rows
// still stored after the totals' watermark (PeriodHistory): exact, and one
// more seek than a tier without month limits pays. The rows pruned are
// bucketed by the period of their time under the key's billing cycle of
// the moment of pruning, so a change of time zone or anchor counts what
// follows in the new cycle's periods, and what was rolled up stays where
// it was.

// PeriodUse is what a key's rows rolled up into one billing period.
type PeriodUse struct {
	Requests int64
	Amounts  Amounts
	// RequestsTo and AmountsTo are the key's watermarks: every request
	// of the key recorded at or before RequestsTo, and every finished
	// amount counted at or before AmountsTo, was rolled up (and pruned).
	// Zero when none was.
	RequestsTo, AmountsTo time.Time
}

// PeriodHistory is implemented by a History whose store rolls the rows it
// prunes up into billing periods' totals.
type PeriodHistory interface {
	// PeriodTotals returns the totals rolled up into the period that
	// starts at start, and the key's watermark.
	PeriodTotals(start time.Time) (PeriodUse, error)
}

// PeriodTotals is one billing period's use, as GET .../usage/periods lists
// it.
type PeriodTotals struct {
	Start, End time.Time
	Requests   int64
	Tokens     int64
	Cost       Money
}

// PeriodLister is implemented by a RequestStore that keeps periods'
// totals: Periods returns at most limit of key's rolled-up periods that
// start before before (zero: any), newest first.
type PeriodLister interface {
	Periods(ctx context.Context, key string, before time.Time, limit int) ([]PeriodTotals, error)
}

// MonthReason returns the refusal reason of a month limit of kind k.
func MonthReason(k LimitKind) string {
	switch k {
	case KindTokens:
		return "per-month token limit exceeded"
	case KindCost:
		return "per-month spend limit exceeded"
	}
	return "per-month limit exceeded"
}

// monthFields holds the month limit of each measure, and of requests.
var monthFields = struct {
	requests *LimitField
	measures [numMeasures]*LimitField
}{RequestsPerMonth.Field(), [numMeasures]*LimitField{TokensPerMonth.Field(), CostPerMonth.Field()}}

// LimitsMonth reports whether s sets a month limit.
func (s *LimitSet) LimitsMonth() bool {
	return s[RequestsPerMonth] != nil || s[TokensPerMonth] != nil || s[CostPerMonth] != nil
}

// MonthState is a billing period's state: its Count, Limit, Remaining and
// Reset as a window's (Reset the seconds to End: nothing leaves a period
// before it ends), and its Tokens and Cost where the tier limits them.
type MonthState struct {
	Start, End time.Time
	WindowState
	// Limited reports whether requests_per_month is set: whether Limit
	// and Remaining say anything.
	Limited bool
}

// monthVerdict is how a check's month limits decided: what the period
// held before the check, and whether the check fits.
type monthVerdict struct {
	period   *Period // nil: no month limit
	allowed  bool
	reason   string
	retry    int64
	requests int64   // the period's requests, without the check's
	used     Amounts // finished and reserved, without the check's
	want     Amounts
}

// meterMonth decides whether one more request, reserving want, fits t's
// month limits in period p for the key whose history is h; l is its
// ledger, and reserved what its open calls hold (nil l: t limits no
// month's tokens or cost, which only a metered tier does).
func meterMonth(h History, l Ledger, reserved Amounts, t *Tier, p *Period, want Amounts, now time.Time) (monthVerdict, error) {
	v := monthVerdict{period: p, allowed: true, want: want}
	ph, ok := h.(PeriodHistory)
	if !ok {
		return v, Errorf(EINTERNAL, "tier %s limits months, which this request store does not count", Quote(t.Name))
	}
	use, err := ph.PeriodTotals(p.Start)
	if err != nil {
		return v, err
	}
	// Rows after both the watermark and the period's start are live;
	// the ones at or before the watermark are in the totals.
	liveAfter := func(mark time.Time) time.Time {
		if before := p.Start.Add(-Resolution); before.After(mark) {
			return before
		}
		return mark
	}
	n, err := h.CountAfter(liveAfter(use.RequestsTo))
	if err != nil {
		return v, err
	}
	v.requests = addSat(use.Requests, n)
	retry := CeilSeconds(p.End.Sub(now))
	refuse := func(k LimitKind) {
		if v.allowed {
			v.allowed, v.reason, v.retry = false, MonthReason(k), retry
		}
	}
	if lim := t.Limits[RequestsPerMonth]; lim != nil && addSat(v.requests, 1) > *lim {
		refuse(KindRequests)
	}
	if l == nil {
		return v, nil
	}
	finished, err := l.After(liveAfter(use.AmountsTo))
	if err != nil {
		return v, err
	}
	for _, ms := range Measures {
		v.used[ms] = addSat(addSat(use.Amounts[ms], finished[ms]), reserved[ms])
		if lim := t.Limits[monthFields.measures[ms].id]; lim != nil && addSat(v.used[ms], want[ms]) > *lim {
			refuse(monthFields.measures[ms].Kind)
		}
	}
	return v, nil
}

// ok reports whether v admits: true without month limits.
func (v *monthVerdict) ok() bool { return v.period == nil || v.allowed }

// state returns the period's state under t after the check: counting it
// when admitted.
func (v *monthVerdict) state(t *Tier, admitted bool, now time.Time) *MonthState {
	s := &MonthState{Start: v.period.Start, End: v.period.End}
	s.Count = v.requests
	var mine Amounts
	if admitted {
		s.Count = addSat(s.Count, 1)
		mine = v.want
	}
	reset := CeilSeconds(v.period.End.Sub(now))
	s.Reset = reset
	if lim := t.Limits[RequestsPerMonth]; lim != nil {
		s.Limited, s.Limit, s.Remaining = true, *lim, max(*lim-s.Count, 0)
	}
	for _, ms := range Measures {
		lim := t.Limits[monthFields.measures[ms].id]
		if lim == nil {
			continue
		}
		used := addSat(v.used[ms], mine[ms])
		ts := &TokenState{Limited: true, Limit: *lim, Used: used, Remaining: max(*lim-used, 0), Reset: reset}
		if ms == MeasureCost {
			s.Cost = ts
		} else {
			s.Tokens = ts
		}
	}
	return s
}

// monthUsage returns the period p's state of the key whose history is h,
// without a new request: under t's month limits when t is not nil, else
// only its counts. l is the key's ledger, nil when the store keeps no
// calls.
func monthUsage(h History, l Ledger, t *Tier, p *Period, now time.Time) (*MonthState, error) {
	var reserved Amounts
	if l != nil {
		var err error
		if _, reserved, err = l.InFlight(); err != nil {
			return nil, err
		}
	}
	limits := Tier{}
	if t != nil {
		limits.Name = t.Name
		limits.Limits[RequestsPerMonth] = t.Limits[RequestsPerMonth]
		limits.Limits[TokensPerMonth] = t.Limits[TokensPerMonth]
		limits.Limits[CostPerMonth] = t.Limits[CostPerMonth]
	}
	v, err := meterMonth(h, l, reserved, &limits, p, Amounts{}, now)
	if err != nil {
		return nil, err
	}
	s := v.state(&limits, false, now)
	if l != nil {
		// Used is known even where nothing limits it.
		for _, ms := range Measures {
			if lim := limits.Limits[monthFields.measures[ms].id]; lim == nil {
				ts := &TokenState{Used: v.used[ms]}
				if ms == MeasureCost {
					s.Cost = ts
				} else {
					s.Tokens = ts
				}
			}
		}
	}
	return s, nil
}

// periodsOf sets the billing periods of c's month limits: the user's own
// when its tier limits months, from its record rec, else its account
// acct, else the default; the pool's when its pooled limits do, from
// acct. A check without month limits resolves nothing.
func (s *Service) periodsOf(c *Check, rec *UserRecord, acct *Account) error {
	if c.Tier.Limits.LimitsMonth() {
		cy, err := rec.Cycle(acct, s.DefaultCycle())
		if err != nil {
			return err
		}
		p := cy.Period(c.Now)
		c.period = &p
	}
	if c.pool != nil && c.pool.limits.LimitsMonth() {
		cy, err := acct.Cycle(s.DefaultCycle())
		if err != nil {
			return err
		}
		p := cy.Period(c.Now)
		c.pool.period = &p
	}
	return nil
}

// periodsKept reports whether the request store counts billing periods.
func (s *Service) periodsKept() bool {
	_, ok := s.limiter.Store.(PeriodLister)
	return ok
}

// RefusedByMonth reports whether a month limit, a user's own or an
// account's pooled, refused d.
func (d *Decision) RefusedByMonth() bool {
	if d.Outcome != RateLimited {
		return false
	}
	switch strings.TrimPrefix(d.Reason, AccountReasonPrefix) {
	case MonthReason(KindRequests), MonthReason(KindTokens), MonthReason(KindCost):
		return true
	}
	return false
}

// Periods returns at most limit of the billing periods of key (a user id or
// an AccountKey), newest first, that start before before (zero: any): when
// before is zero the current one, cur, and the one before it first, each
// counted with its rows still stored, then the periods the cleanup rolled
// up. The request store must keep periods (PeriodLister).
func (s *Service) Periods(ctx context.Context, key string, cur Period, before time.Time, limit int) ([]PeriodTotals, error) {
	pl, ok := s.limiter.Store.(PeriodLister)
	if !ok {
		return nil, Errorf(EINTERNAL, "this request store keeps no billing periods")
	}
	var out []PeriodTotals
	if before.IsZero() && limit > 0 {
		loc, err := LoadTimeZone(cur.TimeZone)
		if err != nil {
			return nil, err
		}
		prev := BillingCycle{Location: loc, Anchor: cur.Anchor}.Period(cur.Start.Add(-Resolution))
		err = s.limiter.Store.View(ctx, key, func(h History) error {
			now := s.now().Truncate(Resolution) // in the view: see RateLimiter.usage
			var l Ledger
			if ch, ok := h.(CallHistory); ok {
				var err error
				if l, err = ch.Calls(now); err != nil {
					return err
				}
			}
			for i, p := range [...]*Period{&cur, &prev} {
				pt, err := periodUse(h, l, p, i == 0)
				if err != nil {
					return err
				}
				if i == 0 || pt.Requests > 0 || pt.Tokens > 0 || pt.Cost > 0 {
					out = append(out, pt)
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		before = prev.Start
	}
	if len(out) >= limit {
		return out[:max(limit, 0)], nil
	}
	older, err := pl.Periods(ctx, key, before, limit-len(out))
	if err != nil {
		return nil, err
	}
	return append(out, older...), nil
}

// periodUse returns what period p of the key whose history is h used: its
// totals and its rows still stored, and with open, the reservations of
// the calls open (l is the key's ledger, nil when the store keeps no
// calls).
func periodUse(h History, l Ledger, p *Period, open bool) (PeriodTotals, error) {
	pt := PeriodTotals{Start: p.Start, End: p.End}
	ph, ok := h.(PeriodHistory)
	if !ok {
		return pt, Errorf(EINTERNAL, "this request store keeps no billing periods")
	}
	use, err := ph.PeriodTotals(p.Start)
	if err != nil {
		return pt, err
	}
	from := func(mark time.Time) time.Time {
		if before := p.Start.Add(-Resolution); before.After(mark) {
			return before
		}
		return mark
	}
	last := p.End.Add(-Resolution)
	n, err := h.CountAfter(from(use.RequestsTo))
	if err != nil {
		return pt, err
	}
	later, err := h.CountAfter(last)
	if err != nil {
		return pt, err
	}
	pt.Requests = use.Requests + max(n-later, 0)
	amounts := use.Amounts
	if l != nil {
		a, err := l.After(from(use.AmountsTo))
		if err != nil {
			return pt, err
		}
		b, err := l.After(last)
		if err != nil {
			return pt, err
		}
		for _, m := range Measures {
			amounts[m] = addSat(amounts[m], max(a[m]-b[m], 0))
		}
		if open {
			_, reserved, err := l.InFlight()
			if err != nil {
				return pt, err
			}
			for _, m := range Measures {
				amounts[m] = addSat(amounts[m], reserved[m])
			}
		}
	}
	pt.Tokens, pt.Cost = amounts[MeasureTokens], Money(amounts[MeasureCost])
	return pt, nil
}
