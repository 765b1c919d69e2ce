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

// memRow is tokens counted at an instant.
type memRow struct {
	at     time.Time
	tokens int64
}

// memLedger is an obviously correct Ledger: the finished tokens as a list,
// scanned.
type memLedger struct {
	open, reserved int64
	rows           []memRow // in time order
}

// Calls implements policy.CallHistory: an open call past its expiry counts
// as finished at its expiry with its reservation.
func (h memCallHistory) Calls(now time.Time) (policy.Ledger, error) {
	l := &memLedger{}
	for _, c := range h.s.calls {
		if c.UserID != h.user {
			continue
		}
		switch {
		case c.Open() && now.Before(c.ExpiresAt):
			l.open++
			l.reserved += c.Reserved
		case c.Open():
			l.rows = append(l.rows, memRow{c.ExpiresAt, c.Reserved})
		default:
			l.rows = append(l.rows, memRow{c.FinishedAt, c.Tokens})
		}
	}
	slices.SortFunc(l.rows, func(a, b memRow) int { return a.at.Compare(b.at) })
	return l, nil
}

func (l *memLedger) InFlight() (int64, int64, error) { return l.open, l.reserved, nil }

func (l *memLedger) TokensAfter(t time.Time) (int64, error) {
	var n int64
	for _, r := range l.rows {
		if r.at.After(t) {
			n += r.tokens
		}
	}
	return n, nil
}

func (l *memLedger) OldestAfter(t time.Time) (time.Time, bool, error) {
	for _, r := range l.rows {
		if r.at.After(t) && r.tokens > 0 {
			return r.at, true, nil
		}
	}
	return time.Time{}, false, nil
}

func (l *memLedger) SettledAt(n int64) (time.Time, bool, error) {
	for _, r := range l.rows {
		if r.tokens == 0 {
			continue
		}
		after, _ := l.TokensAfter(r.at)
		if after <= n {
			return r.at, true, nil
		}
	}
	return time.Time{}, false, nil
}

// FinishCall implements policy.RequestStore simply: no settling on disk,
// so a late finish only records what was reported.
func (s *memStore) FinishCall(_ context.Context, id string, tokens *int64, now time.Time) (policy.Call, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.calls[id]
	if !ok {
		return policy.Call{}, policy.Errorf(policy.ENOTFOUND, "call %q not found", id)
	}
	count := c.Reserved
	if tokens != nil {
		count = *tokens
	}
	if c.Reported != nil {
		if *c.Reported != count {
			return policy.Call{}, policy.Errorf(policy.ECONFLICT, "finished with %d", *c.Reported)
		}
		return *c, nil
	}
	c.Reported = &count
	if c.Open() && now.Before(c.ExpiresAt) {
		c.FinishedAt, c.Tokens = now, count
	} else {
		if c.Open() {
			c.FinishedAt, c.Expired = c.ExpiresAt, true
		}
		c.Tokens = max(c.Reserved, count)
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
