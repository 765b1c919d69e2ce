package policy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// cachingStore is a memStore whose tier cache may lag behind its tiers, as
// a store's memory lags behind a change another process made, and whose
// histories confirm tiers as they stand.
type cachingStore struct {
	*memStore
	cached map[string]policy.Tier // what CachedTier answers
	reads  int                    // calls of Tier, which reads storage
}

func (s *cachingStore) CachedTier(name string) (policy.Tier, bool) {
	t, ok := s.cached[name]
	return t, ok
}

func (s *cachingStore) Tier(ctx context.Context, name string) (policy.Tier, error) {
	s.reads++
	return s.memStore.Tier(ctx, name)
}

func (s *cachingStore) Admit(ctx context.Context, user string, decide func(policy.History) (policy.Admission, error)) error {
	return s.memStore.Admit(ctx, user, func(h policy.History) (policy.Admission, error) {
		return decide(confirmingHistory{h, s.memStore})
	})
}

type confirmingHistory struct {
	policy.History
	s *memStore
}

func (h confirmingHistory) CurrentTier(name string) (*policy.Tier, bool, error) {
	t, ok := h.s.tiers[name] // Admit holds the store's lock
	return &t, ok, nil
}

func TestRecordingCheckConfirmsCachedTier(t *testing.T) {
	ctx := context.Background()
	current := policy.Tier{Name: "t", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(10)), policy.RequestsPerDay: new(int64(10))}, Features: []string{"chat"}}
	s := &cachingStore{memStore: newMemStore(current), cached: map[string]policy.Tier{"t": current}}
	svc := policy.NewService(s, s, policy.WithClock(func() time.Time { return t0 }))
	check := func(feature string) policy.Decision {
		t.Helper()
		d, err := svc.Check(ctx, policy.Request{UserID: "u", Tier: "t", Feature: feature}, false)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	if d := check("chat"); !d.Allowed() || s.reads != 0 {
		t.Fatalf("check on a current cache: %+v after %d reads, want admitted without reading", d, s.reads)
	}
	// The cache still holds a generous tier the store no longer has.
	s.cached["t"] = policy.Tier{Name: "t", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(100)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(100))}, Features: []string{"chat"}}
	if d := check("chat"); d.Allowed() || d.Reason != "per-minute limit exceeded" || s.reads != 1 {
		t.Fatalf("check on a stale cache: %+v after %d reads, want refused by the current tier after one read", d, s.reads)
	}
	// A stale cache that refuses a feature before the rate limiter runs.
	current.Features = []string{"chat", "search"}
	current.Limits[policy.RequestsPerMinute] = new(int64(5))
	s.tiers["t"] = current
	s.cached["t"] = policy.Tier{Name: "t", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(5)), policy.RequestsPerHour: new(int64(10)), policy.RequestsPerDay: new(int64(10))}, Features: []string{"chat"}}
	if d := check("search"); !d.Allowed() {
		t.Fatalf("check of a feature only the current tier has: %+v, want admitted", d)
	}
	// A tier the store no longer has at all.
	delete(s.tiers, "t")
	if _, err := svc.Check(ctx, policy.Request{UserID: "u", Tier: "t"}, false); policy.ErrorCode(err) != policy.EINVALID {
		t.Fatalf("check of a deleted tier: %v, want unknown tier", err)
	}
	if got := s.count("u"); got != 2 {
		t.Fatalf("%d requests recorded, want 2", got)
	}
}

// A refusal before the rate limiter, on a cached tier that is current,
// stands after one read of the tier: the chain does not run twice.
func TestRefusalOnCurrentCacheRunsOnce(t *testing.T) {
	ctx := context.Background()
	current := policy.Tier{Name: "t", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(5)), policy.RequestsPerHour: new(int64(10)), policy.RequestsPerDay: new(int64(10))}, Features: []string{"chat"}}
	s := &cachingStore{memStore: newMemStore(current), cached: map[string]policy.Tier{"t": current}}
	var calls []string
	svc := policy.NewService(s, s, policy.WithClock(func() time.Time { return t0 }),
		policy.WithGuardrails(recorder{"classifier", 3, policy.Denied, &calls}))
	d, err := svc.Check(ctx, policy.Request{UserID: "u", Tier: "t", Feature: "chat"}, false)
	if err != nil || d.Allowed() || d.Guardrail != "classifier" {
		t.Fatalf("check = %+v, %v; want refused by the classifier", d, err)
	}
	if len(calls) != 1 || s.reads != 1 {
		t.Errorf("the classifier ran %d times and the tier was read %d times, want 1 and 1", len(calls), s.reads)
	}
	// The same for a feature outside the plan.
	d, err = svc.Check(ctx, policy.Request{UserID: "u", Tier: "t", Feature: "search"}, false)
	if err != nil || d.Allowed() || d.Guardrail != "tier_access" || s.reads != 2 {
		t.Fatalf("check = %+v, %v after %d reads; want refused by tier_access after one more read", d, err, s.reads)
	}
}

// lazyStore has a tier cache but hands Admit plain histories, which cannot
// confirm a tier: its cache may be stale, and the service must not trust it.
type lazyStore struct {
	*memStore
	cached     map[string]policy.Tier
	cacheCalls int
}

func (s *lazyStore) CachedTier(name string) (policy.Tier, bool) {
	s.cacheCalls++
	t, ok := s.cached[name]
	return t, ok
}

func TestCachedTierNeedsAConfirmingStore(t *testing.T) {
	ctx := context.Background()
	closed := policy.Tier{Name: "t", Features: []string{"*"}} // every limit 0
	s := &lazyStore{memStore: newMemStore(closed), cached: map[string]policy.Tier{
		"t": {Name: "t", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(100)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(100))}, Features: []string{"*"}},
	}}
	svc := policy.NewService(s, s, policy.WithClock(func() time.Time { return t0 }))
	for i := range 3 {
		d, err := svc.Check(ctx, policy.Request{UserID: "u", Tier: "t"}, false)
		if err != nil || d.Allowed() {
			t.Fatalf("check %d = %+v, %v; want refused by the stored tier, which admits nothing", i, d, err)
		}
	}
	if got := s.count("u"); got != 0 {
		t.Errorf("%d requests recorded under a stale cached tier", got)
	}
	if s.cacheCalls != 1 {
		t.Errorf("the cache was asked %d times, want once: after the first check the service reads tiers", s.cacheCalls)
	}
}

// The rate limiter records what it admits, so it runs last whatever the
// priorities of the guardrails added: a later refusal would have spent quota.
func TestRateLimiterRunsLast(t *testing.T) {
	ctx := context.Background()
	st := newMemStore(free)
	var calls []string
	svc := policy.NewService(st, st, policy.WithClock(func() time.Time { return t0 }),
		policy.WithGuardrails(recorder{"late", 9, policy.Denied, &calls}))
	var names []string
	for _, g := range svc.Chain().Guardrails() {
		names = append(names, g.Name())
	}
	if got, want := fmt.Sprint(names), "[tier_access late rate_limiter]"; got != want {
		t.Fatalf("chain order %s, want %s", got, want)
	}
	d, err := svc.Check(ctx, policy.Request{UserID: "u"}, false)
	if err != nil || d.Allowed() || d.Guardrail != "late" {
		t.Fatalf("check = %+v, %v; want refused by late", d, err)
	}
	if got := st.count("u"); got != 0 {
		t.Errorf("a refused request was recorded %d times", got)
	}
}
