package policy_test

import (
	"context"
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

func (s *cachingStore) Admit(ctx context.Context, user string, decide func(policy.History) (time.Time, bool, error)) error {
	return s.memStore.Admit(ctx, user, func(h policy.History) (time.Time, bool, error) {
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
	current := policy.Tier{Name: "t", RequestsPerMinute: 1, RequestsPerHour: 10, RequestsPerDay: 10, Features: []string{"chat"}}
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
	s.cached["t"] = policy.Tier{Name: "t", RequestsPerMinute: 100, RequestsPerHour: 100, RequestsPerDay: 100, Features: []string{"chat"}}
	if d := check("chat"); d.Allowed() || d.Reason != "per-minute limit exceeded" || s.reads != 1 {
		t.Fatalf("check on a stale cache: %+v after %d reads, want refused by the current tier after one read", d, s.reads)
	}
	// A stale cache that refuses a feature before the rate limiter runs.
	current.Features = []string{"chat", "search"}
	current.RequestsPerMinute = 5
	s.tiers["t"] = current
	s.cached["t"] = policy.Tier{Name: "t", RequestsPerMinute: 5, RequestsPerHour: 10, RequestsPerDay: 10, Features: []string{"chat"}}
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
