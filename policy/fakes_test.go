package policy_test

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// memHistory is an obviously correct History: a sorted slice, scanned.
type memHistory []time.Time

func (h memHistory) Last() (time.Time, bool, error) {
	if len(h) == 0 {
		return time.Time{}, false, nil
	}
	return h[len(h)-1], true, nil
}

func (h memHistory) after(t time.Time) []time.Time {
	i := sort.Search(len(h), func(i int) bool { return h[i].After(t) })
	return h[i:]
}

func (h memHistory) CountAfter(t time.Time) (int64, error) { return int64(len(h.after(t))), nil }

func (h memHistory) NthAfter(t time.Time, k int64) (time.Time, error) { return h.after(t)[k-1], nil }

// memStore is a RequestStore and TierStore in memory.
type memStore struct {
	mu    sync.Mutex
	users map[string]memHistory
	tiers map[string]policy.Tier
}

func newMemStore(tiers ...policy.Tier) *memStore {
	s := &memStore{users: map[string]memHistory{}, tiers: map[string]policy.Tier{}}
	for _, t := range tiers {
		s.tiers[t.Name] = t
	}
	return s
}

func (s *memStore) Admit(_ context.Context, user string, decide func(policy.History) (time.Time, bool, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok, err := decide(s.users[user])
	if ok && err == nil {
		s.users[user] = append(s.users[user], at)
	}
	return err
}

func (s *memStore) View(_ context.Context, user string, fn func(policy.History) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fn(s.users[user])
}

func (s *memStore) Forget(_ context.Context, user string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.users, user)
	return nil
}

func (s *memStore) count(user string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.users[user])
}

func (s *memStore) Tier(_ context.Context, name string) (policy.Tier, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tiers[name]
	if !ok {
		return t, policy.Errorf(policy.ENOTFOUND, "tier %q not found", name)
	}
	return t, nil
}

func (s *memStore) Tiers(context.Context) ([]policy.Tier, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []policy.Tier
	for _, t := range s.tiers {
		out = append(out, t)
	}
	return out, nil
}

func (s *memStore) PutTier(_ context.Context, t policy.Tier) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, exists := s.tiers[t.Name]
	s.tiers[t.Name] = t
	return !exists, nil
}

func (s *memStore) DeleteTier(_ context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tiers[name]; !ok {
		return policy.Errorf(policy.ENOTFOUND, "tier %q not found", name)
	}
	delete(s.tiers, name)
	return nil
}

// clock is a manual clock for tests: time moves only when told.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
