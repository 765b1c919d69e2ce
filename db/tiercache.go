package db

import "github.com/policyguard/policyguard/policy"

var _ policy.CurrentTiers = (*history)(nil)

// CachedTier implements policy.TierStore: the named tier as the cache holds
// it, without reading the database. The writer confirms it when a request
// is recorded (see history.CurrentTier). The returned Features and Models
// slices are shared and must not be modified.
func (s *Store) CachedTier(name string) (policy.Tier, bool) {
	t, ok := s.tiers.Load().byName[name]
	return t, ok
}

// CurrentTier implements policy.CurrentTiers in the writer's transaction:
// the named tier as the transaction sees it. On SQLite it comes from the
// writer's own copy of the tiers table, which it reads again after any
// write to the tiers by this process or another; on PostgreSQL, where any
// replica may write, from the table, one seek. A History on a read
// connection, which the RateLimiter does not ask, has no tiers.
func (h *history) CurrentTier(name string) (*policy.Tier, bool, error) {
	if h.tx == nil {
		return nil, false, nil
	}
	w := h.tx.w
	if w == nil {
		return h.currentTierPG(name)
	}
	if w.tiersStale || w.tierView == nil {
		tiers, err := tiersInTx(h.tx)
		if err != nil {
			return nil, false, err
		}
		view := make(map[string]*policy.Tier, len(tiers))
		for name, t := range tiers {
			view[name] = &t
		}
		w.tierView, w.tiersStale = view, false
	}
	t, ok := w.tierView[name]
	return t, ok, nil
}
