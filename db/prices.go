package db

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/policyguard/policyguard/policy"
)

var _ policy.PriceStore = (*Store)(nil)

// priceRefresh is how often a store reads whether another process saved a
// price version; PriceOf, which reads no storage, sees a version another
// replica saved within about this long.
const priceRefresh = time.Second

// priceCache is every price version, entries included, as this process
// last read them; it is immutable once stored in Store.prices. Versions
// are never changed once saved, so a reload reads only the new ones.
type priceCache struct {
	versions []policy.PriceVersion // by ID, ascending
	byID     map[int64]bool
}

// priceBatch is how many entries one INSERT writes: 7 parameters each,
// well below both databases' limits on parameters per statement.
const priceBatch = 500

// SavePrices implements policy.PriceStore. The version and its entries
// commit in one transaction; times are kept to the microsecond.
func (s *Store) SavePrices(ctx context.Context, v policy.PriceVersion, at time.Time) (policy.PriceVersion, error) {
	if v.Prices == nil {
		v.Prices, _ = policy.NewPriceTable(nil)
	}
	if v.Source == "" {
		v.Source = policy.ChangeSource(ctx)
	}
	v.EffectiveFrom = v.EffectiveFrom.Truncate(time.Microsecond).UTC()
	v.CreatedAt = at.Truncate(time.Microsecond).UTC()
	entries := v.Prices.Entries()
	audit := auditOf{at: v.CreatedAt, actor: policy.Actor(ctx), source: v.Source}
	err := s.writer.do(ctx, func(tx *writeTx) error {
		// Ids then commit in the order they are taken, on PostgreSQL too.
		if err := tx.lockAdmin(); err != nil {
			return err
		}
		err := tx.conn.QueryRowContext(tx.ctx, tx.d.bind(`INSERT INTO price_versions (effective_from, created_at, source) VALUES (?, ?, ?) RETURNING id`),
			v.EffectiveFrom.UnixMicro(), v.CreatedAt.UnixMicro(), v.Source).Scan(&v.ID)
		if err != nil {
			return unavailable(err)
		}
		for chunk := range slices.Chunk(entries, priceBatch) {
			var q strings.Builder
			q.WriteString(`INSERT INTO prices (version_id, model, upstream, input, output, cache_read, cache_write) VALUES `)
			args := make([]any, 0, 7*len(chunk))
			for i, p := range chunk {
				if i > 0 {
					q.WriteString(", ")
				}
				q.WriteString("(?, ?, ?, ?, ?, ?, ?)")
				args = append(args, v.ID, p.Model, p.Upstream, int64(p.Input), int64(p.Output), int64(p.CacheRead), int64(p.CacheWrite))
			}
			if _, err := tx.conn.ExecContext(tx.ctx, tx.d.bind(q.String()), args...); err != nil {
				return unavailable(err)
			}
		}
		return audit.insert(tx, auditEntry{kind: policy.AuditPrices, subject: strconv.FormatInt(v.ID, 10), action: policy.AuditCreated,
			new: auditObject(auditPrices{Version: v.ID, EffectiveFrom: v.EffectiveFrom.Format(time.RFC3339Nano), Entries: len(entries)})})
	})
	if err != nil {
		return policy.PriceVersion{}, err
	}
	// This process sees its own version at once, whatever the refresh.
	if err := s.reloadPrices(ctx); err != nil {
		return policy.PriceVersion{}, err
	}
	return v, nil
}

// PricesAt implements policy.PriceStore.
func (s *Store) PricesAt(ctx context.Context, t time.Time) (policy.PriceVersion, error) {
	if err := s.reloadPrices(ctx); err != nil {
		return policy.PriceVersion{}, err
	}
	v, ok := policy.InForce(s.prices.Load().versions, t)
	if !ok {
		return policy.PriceVersion{}, policy.Errorf(policy.ENOTFOUND, "no price version is in force at %s", t.UTC().Format(time.RFC3339Nano))
	}
	return v, nil
}

// PriceVersions implements policy.PriceStore.
func (s *Store) PriceVersions(ctx context.Context) ([]policy.PriceVersion, error) {
	if err := s.reloadPrices(ctx); err != nil {
		return nil, err
	}
	out := slices.Clone(s.prices.Load().versions)
	slices.Reverse(out)
	return out, nil
}

// PriceOf implements policy.PriceStore from memory. A version saved
// through this store is seen at once; one saved by another process (a
// replica, policyguard prices import) within priceRefresh.
func (s *Store) PriceOf(model, upstream string, t time.Time) (p policy.Price, version int64, ok bool) {
	v, ok := policy.InForce(s.prices.Load().versions, t)
	if !ok {
		return policy.Price{}, 0, false
	}
	p, ok = v.Prices.Lookup(model, upstream)
	return p, v.ID, ok
}

// initPrices loads every price version.
func (s *Store) initPrices(ctx context.Context) error {
	s.prices.Store(&priceCache{byID: map[int64]bool{}})
	return s.reloadPrices(ctx)
}

// refreshPricesEvery reloads the price versions every interval, so that
// PriceOf sees the versions other processes save, until ctx ends.
func (s *Store) refreshPricesEvery(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_ = s.reloadPrices(ctx) // a failure leaves the cache as it was until the next try
	}
}

// reloadPrices adds to the cache the versions committed since it was last
// read: one query of the version ids, and one of the entries of new ones.
// Reloads are serialized, so that a slower one never replaces a newer
// cache.
func (s *Store) reloadPrices(ctx context.Context) error {
	s.pricesMu.Lock()
	defer s.pricesMu.Unlock()
	old := s.prices.Load()
	var rows []struct {
		ID            int64  `db:"id"`
		EffectiveFrom int64  `db:"effective_from"`
		CreatedAt     int64  `db:"created_at"`
		Source        string `db:"source"`
	}
	if err := s.db.SelectContext(ctx, &rows, `SELECT id, effective_from, created_at, source FROM price_versions ORDER BY id`); err != nil {
		return unavailable(err)
	}
	var missing []int64
	for _, r := range rows {
		if !old.byID[r.ID] {
			missing = append(missing, r.ID)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	entries, err := s.priceEntries(ctx, missing)
	if err != nil {
		return err
	}
	c := &priceCache{versions: slices.Clone(old.versions), byID: make(map[int64]bool, len(rows))}
	for _, r := range rows {
		c.byID[r.ID] = true
		if old.byID[r.ID] {
			continue
		}
		table, err := policy.NewPriceTable(entries[r.ID])
		if err != nil {
			return err // the table's checks keep out what NewPriceTable refuses
		}
		c.versions = append(c.versions, policy.PriceVersion{
			ID:            r.ID,
			EffectiveFrom: time.UnixMicro(r.EffectiveFrom).UTC(),
			CreatedAt:     time.UnixMicro(r.CreatedAt).UTC(),
			Source:        r.Source,
			Prices:        table,
		})
	}
	slices.SortFunc(c.versions, func(a, b policy.PriceVersion) int { return cmp.Compare(a.ID, b.ID) })
	s.prices.Store(c)
	return nil
}

// priceEntries reads the entries of the versions ids.
func (s *Store) priceEntries(ctx context.Context, ids []int64) (map[int64][]policy.Price, error) {
	out := make(map[int64][]policy.Price, len(ids))
	for _, id := range ids {
		rows, err := s.db.QueryContext(ctx, s.d.bind(`SELECT model, upstream, input, output, cache_read, cache_write FROM prices WHERE version_id = ?`), id)
		if err != nil {
			return nil, unavailable(err)
		}
		for rows.Next() {
			var p policy.Price
			if err := rows.Scan(&p.Model, &p.Upstream, (*int64)(&p.Input), (*int64)(&p.Output), (*int64)(&p.CacheRead), (*int64)(&p.CacheWrite)); err != nil {
				rows.Close()
				return nil, unavailable(err)
			}
			out[id] = append(out[id], p)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, unavailable(err)
		}
	}
	return out, nil
}

// auditPrices is a price version as the audit log keeps it: which, from
// when, how many entries (the entries are the version's own rows).
type auditPrices struct {
	Version       int64  `json:"version"`
	EffectiveFrom string `json:"effective_from"`
	Entries       int    `json:"entries"`
}
