package policy_test

import (
	"context"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// planningStore is a memStore that plans its admissions: it keeps each
// plan and admits through decide, as a Planner must.
type planningStore struct {
	*memStore
	plans []policy.Plan
}

func (s *planningStore) AdmitPlanned(ctx context.Context, user string, p *policy.Plan, decide func(policy.History) (policy.Admission, error)) error {
	c := *p
	if p.Call != nil {
		call := *p.Call
		c.Call = &call
	}
	s.plans = append(s.plans, c)
	return s.Admit(ctx, user, decide)
}

// A store that plans is told, before each recording check's decide runs,
// what it decides on: the instant (to the microsecond), the tier, and the
// call an admission opens with its expiry. Dry runs plan nothing.
func TestRateLimiterPlansAdmissions(t *testing.T) {
	tier := policy.Tier{Name: "metered", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(10)), policy.RequestsPerDay: new(int64(10)), policy.TokensPerMinute: i64(100), policy.MaxConcurrent: i64(2)}, Features: []string{"*"}}
	store := &planningStore{memStore: newMemStore(tier)}
	now := time.Date(2026, 3, 1, 12, 0, 0, 1500, time.UTC) // 1.5 µs past the second
	svc := policy.NewService(store, store, policy.WithClock(func() time.Time { return now }), policy.WithCallTimeout(time.Minute))
	ctx := context.Background()
	req := policy.Request{UserID: "u", Tier: "metered", Tokens: 7}
	if _, err := svc.Check(ctx, req, true); err != nil || len(store.plans) != 0 {
		t.Fatalf("dry run: %v, %d plans; want none", err, len(store.plans))
	}
	d, err := svc.Check(ctx, req, false)
	if err != nil || !d.Allowed() || len(store.plans) != 1 {
		t.Fatalf("check: %+v, %v, %d plans; want admitted, one plan", d, err, len(store.plans))
	}
	p := store.plans[0]
	at := now.Truncate(time.Microsecond)
	if !p.Now.Equal(at) || p.Tier == nil || p.Base == nil || !policy.SameLimits(p.Tier, &tier) || !policy.SameLimits(p.Base, &tier) {
		t.Errorf("plan: now %v, tier %+v, base %+v; want %v and the tier", p.Now, p.Tier, p.Base, at)
	}
	if c := p.Call; c == nil || c.ID != d.CallID || c.Reserved != 7 || c.Tier != "metered" || !c.OpenedAt.Equal(at) || !c.ExpiresAt.Equal(at.Add(time.Minute)) {
		t.Errorf("plan's call: %+v; want call %s reserving 7, opened at %v, expiring a minute later", p.Call, d.CallID, at)
	}
	if p.ConfirmUser {
		t.Error("plan confirms a record, without user records")
	}
	// Refused (the minute holds one): planned too, and recorded by decide
	// alone, which refuses.
	if d, err := svc.Check(ctx, req, false); err != nil || d.Allowed() || len(store.plans) != 2 || store.count("u") != 1 {
		t.Fatalf("second check: %+v, %v, %d plans, %d recorded; want refused, planned, 1 recorded", d, err, len(store.plans), store.count("u"))
	}
}
