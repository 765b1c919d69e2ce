package policy_test

import (
	"context"
	"slices"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// memCallHistory is a memHistory whose store keeps calls.
type memCallHistory struct {
	memHistory
	s    *memStore
	user string
}

// memRow is what a call used, counted at an instant.
type memRow struct {
	at   time.Time
	used policy.Amounts
}

// memLedger is an obviously correct Ledger: the finished amounts as a
// list, scanned.
type memLedger struct {
	open     int64
	reserved policy.Amounts
	rows     []memRow // in time order
}

// Calls implements policy.CallHistory: an open call past its expiry counts
// as finished at its expiry with its reservation.
func (h memCallHistory) Calls(now time.Time) (policy.Ledger, error) {
	l := &memLedger{}
	for _, c := range h.s.calls {
		if c.UserID != h.user {
			continue
		}
		reserved := policy.Amounts{c.Reserved, int64(c.ReservedCost)}
		switch {
		case c.Open() && now.Before(c.ExpiresAt):
			l.open++
			l.reserved[0] += reserved[0]
			l.reserved[1] += reserved[1]
		case c.Open():
			l.rows = append(l.rows, memRow{c.ExpiresAt, reserved})
		default:
			l.rows = append(l.rows, memRow{c.FinishedAt, policy.Amounts{c.Tokens, int64(c.Cost)}})
		}
	}
	slices.SortFunc(l.rows, func(a, b memRow) int { return a.at.Compare(b.at) })
	return l, nil
}

func (l *memLedger) InFlight() (int64, policy.Amounts, error) { return l.open, l.reserved, nil }

func (l *memLedger) After(t time.Time) (policy.Amounts, error) {
	var n policy.Amounts
	for _, r := range l.rows {
		if r.at.After(t) {
			n[0] += r.used[0]
			n[1] += r.used[1]
		}
	}
	return n, nil
}

func (l *memLedger) OldestAfter(m policy.Measure, t time.Time) (time.Time, bool, error) {
	for _, r := range l.rows {
		if r.at.After(t) && r.used[m] > 0 {
			return r.at, true, nil
		}
	}
	return time.Time{}, false, nil
}

func (l *memLedger) SettledAt(m policy.Measure, n int64) (time.Time, bool, error) {
	for _, r := range l.rows {
		if r.used[m] == 0 {
			continue
		}
		after, _ := l.After(r.at)
		if after[m] <= n {
			return r.at, true, nil
		}
	}
	return time.Time{}, false, nil
}

// FinishCall implements policy.RequestStore simply: no settling on disk,
// so a late finish only records what was reported.
func (s *memStore) FinishCall(_ context.Context, id string, r policy.Report, now time.Time) (policy.Call, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.calls[id]
	if !ok {
		return policy.Call{}, policy.Errorf(policy.ENOTFOUND, "call %q not found", id)
	}
	count, cost := c.Settle(r)
	if c.Reported != nil {
		if *c.Reported != count || c.ReportedCost != cost {
			return policy.Call{}, policy.Errorf(policy.ECONFLICT, "finished with %d", *c.Reported)
		}
		return *c, nil
	}
	c.Reported, c.ReportedCost = &count, cost
	if c.Open() && now.Before(c.ExpiresAt) {
		c.FinishedAt, c.Tokens, c.Cost = now, count, cost
	} else {
		if c.Open() {
			c.FinishedAt, c.Expired = c.ExpiresAt, true
		}
		c.Tokens, c.Cost = max(c.Reserved, count), max(c.ReservedCost, cost)
	}
	return *c, nil
}

func (s *memStore) KeepAlive(_ context.Context, id string, now, expiresAt time.Time) (policy.Call, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.calls[id]
	if !ok {
		return policy.Call{}, policy.Errorf(policy.ENOTFOUND, "call %q not found", id)
	}
	if !c.Open() || !now.Before(c.ExpiresAt) {
		return policy.Call{}, policy.Errorf(policy.ECONFLICT, "call %q is finished", id)
	}
	c.ExpiresAt = expiresAt
	return *c, nil
}
