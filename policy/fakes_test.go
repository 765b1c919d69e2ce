package policy_test

import (
	"context"
	"maps"
	"slices"
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

func (memHistory) Prefetch(*[len(policy.Windows)]time.Time) error { return nil }

// memStore is a RequestStore and TierStore in memory.
type memStore struct {
	mu    sync.Mutex
	users map[string]memHistory
	tiers map[string]policy.Tier
	log   []policy.TierChange
	// updates are the tier updates asked for, in order. The preconditions
	// of Mode and IfUpdatedAt are the store's to check (db tests them);
	// tests of the service check that it asks for them.
	updates []policy.TierUpdate
	// calls by id. An open call past its expiry counts as finished then;
	// this fake never settles it on disk, and keeps no time order of
	// finished tokens beyond the finish times.
	calls map[string]*policy.Call
}

func newMemStore(tiers ...policy.Tier) *memStore {
	s := &memStore{users: map[string]memHistory{}, tiers: map[string]policy.Tier{}}
	for _, t := range tiers {
		s.tiers[t.Name] = t
	}
	return s
}

func (s *memStore) Admit(_ context.Context, user string, decide func(policy.History) (policy.Admission, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, err := decide(memCallHistory{s.users[user], s, user})
	if a.Record && err == nil {
		s.users[user] = append(s.users[user], a.At)
		if a.Call != nil {
			if s.calls == nil {
				s.calls = map[string]*policy.Call{}
			}
			c := *a.Call
			c.UserID = user
			s.calls[c.ID] = &c
		}
	}
	return err
}

func (s *memStore) View(_ context.Context, user string, fn func(policy.History) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fn(memCallHistory{s.users[user], s, user})
}

func (s *memStore) Forget(_ context.Context, user string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.users, user)
	for id, c := range s.calls {
		if c.UserID == user {
			delete(s.calls, id)
		}
	}
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

// CachedTier implements policy.TierStore: memStore keeps no copy apart.
func (s *memStore) CachedTier(string) (policy.Tier, bool) { return policy.Tier{}, false }

func (s *memStore) Tiers(context.Context) ([]policy.Tier, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []policy.Tier
	for _, t := range s.tiers {
		out = append(out, t)
	}
	return out, nil
}

// UpdateTiers applies u under the lock: all or none, as a transaction.
func (s *memStore) UpdateTiers(_ context.Context, u policy.TierUpdate) ([]policy.TierChange, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.updates = append(s.updates, u)
	next := maps.Clone(s.tiers)
	var changes []policy.TierChange
	change := func(name string, before, after *policy.Tier) {
		changes = append(changes, policy.TierChange{At: u.At, Tier: name, Source: u.Source, Old: before, New: after})
	}
	listed := map[string]bool{}
	for _, t := range u.Put {
		listed[t.Name] = true
		old, ok := next[t.Name]
		if ok && u.SkipUnchanged && policy.SameLimits(&old, &t) {
			continue
		}
		t.UpdatedAt = u.At
		next[t.Name] = t
		if ok {
			change(t.Name, &old, &t)
		} else {
			change(t.Name, nil, &t)
		}
	}
	for _, name := range u.Delete {
		old, ok := next[name]
		if !ok {
			return nil, policy.Errorf(policy.ENOTFOUND, "tier %q not found", name)
		}
		delete(next, name)
		change(name, &old, nil)
	}
	if u.Prune {
		for _, name := range slices.Sorted(maps.Keys(next)) {
			if !listed[name] {
				old := next[name]
				delete(next, name)
				change(name, &old, nil)
			}
		}
	}
	s.tiers = next
	s.log = append(s.log, changes...)
	return changes, nil
}

func (s *memStore) TierChanges(_ context.Context, limit int) ([]policy.TierChange, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.log[max(len(s.log)-limit, 0):])
	slices.Reverse(out)
	return out, nil
}
