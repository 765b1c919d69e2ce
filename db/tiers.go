package db

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// tierCache holds every tier in memory, so the hot path reads no table.
// It is replaced whole after each write, never modified.
type tierCache struct {
	byName map[string]policy.Tier
	sorted []policy.Tier
}

type tierRow struct {
	Name              string `db:"name"`
	RequestsPerMinute int64  `db:"requests_per_minute"`
	RequestsPerHour   int64  `db:"requests_per_hour"`
	RequestsPerDay    int64  `db:"requests_per_day"`
	BurstAllowance    int64  `db:"burst_allowance"`
	Features          string `db:"features"`
	Description       string `db:"description"`
	UpdatedAt         int64  `db:"updated_at"`
}

func (r *tierRow) tier() (policy.Tier, error) {
	t := policy.Tier{
		Name:              r.Name,
		RequestsPerMinute: r.RequestsPerMinute,
		RequestsPerHour:   r.RequestsPerHour,
		RequestsPerDay:    r.RequestsPerDay,
		BurstAllowance:    r.BurstAllowance,
		Description:       r.Description,
		Features:          []string{},
	}
	if r.UpdatedAt != 0 {
		t.UpdatedAt = time.UnixMicro(r.UpdatedAt).UTC()
	}
	if err := json.Unmarshal([]byte(r.Features), &t.Features); err != nil {
		return t, fmt.Errorf("tier %q: features column: %w", r.Name, err)
	}
	return t, nil
}

// reloadTiers replaces the cache with the table's contents. Reloads are
// serialized so that a slower reload of an older snapshot never replaces a
// newer one.
func (s *Store) reloadTiers(ctx context.Context) error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	var rows []tierRow
	if err := s.db.SelectContext(ctx, &rows, `SELECT * FROM tiers ORDER BY name`); err != nil {
		return unavailable(err)
	}
	c := &tierCache{byName: make(map[string]policy.Tier, len(rows)), sorted: make([]policy.Tier, 0, len(rows))}
	for i := range rows {
		t, err := rows[i].tier()
		if err != nil {
			return err
		}
		c.byName[t.Name] = t
		c.sorted = append(c.sorted, t)
	}
	sort.Slice(c.sorted, func(i, j int) bool { return c.sorted[i].Name < c.sorted[j].Name })
	s.tiers.Store(c)
	return nil
}

// Tier implements policy.TierStore from memory. The returned Features slice
// is shared and must not be modified.
func (s *Store) Tier(_ context.Context, name string) (policy.Tier, error) {
	t, ok := s.tiers.Load().byName[name]
	if !ok {
		return policy.Tier{}, policy.Errorf(policy.ENOTFOUND, "tier %q not found", name)
	}
	return t, nil
}

// Tiers implements policy.TierStore from memory.
func (s *Store) Tiers(context.Context) ([]policy.Tier, error) {
	return append([]policy.Tier(nil), s.tiers.Load().sorted...), nil
}

// PutTier implements policy.TierStore. t must be valid; its UpdatedAt is
// stored as given.
func (s *Store) PutTier(ctx context.Context, t policy.Tier) (bool, error) {
	if err := t.Validate(); err != nil {
		return false, err
	}
	features := t.Features
	if features == nil {
		features = []string{}
	}
	fj, err := json.Marshal(features)
	if err != nil {
		return false, err
	}
	var created bool
	err = s.writer.do(ctx, func(tx *writeTx) error {
		var n int
		if err := tx.queryRowSQL(`SELECT count(*) FROM tiers WHERE name = ?`, t.Name).Scan(&n); err != nil {
			return unavailable(err)
		}
		created = n == 0
		_, err := tx.execSQL(`INSERT INTO tiers (name, requests_per_minute, requests_per_hour, requests_per_day, burst_allowance, features, description, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET
				requests_per_minute = excluded.requests_per_minute,
				requests_per_hour   = excluded.requests_per_hour,
				requests_per_day    = excluded.requests_per_day,
				burst_allowance     = excluded.burst_allowance,
				features            = excluded.features,
				description         = excluded.description,
				updated_at          = excluded.updated_at`,
			t.Name, t.RequestsPerMinute, t.RequestsPerHour, t.RequestsPerDay, t.BurstAllowance, string(fj), t.Description, t.UpdatedAt.UnixMicro())
		return unavailable(err)
	})
	if err != nil {
		return false, err
	}
	return created, s.reloadTiers(ctx)
}

// DeleteTier implements policy.TierStore.
func (s *Store) DeleteTier(ctx context.Context, name string) error {
	err := s.writer.do(ctx, func(tx *writeTx) error {
		res, err := tx.execSQL(`DELETE FROM tiers WHERE name = ?`, name)
		if err != nil {
			return unavailable(err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return policy.Errorf(policy.ENOTFOUND, "tier %q not found", name)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return s.reloadTiers(ctx)
}
