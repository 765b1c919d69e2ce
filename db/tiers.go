package db

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-json-experiment/json"

	"github.com/policyguard/policyguard/policy"
)

// tierCache holds every tier in memory, so the hot path reads no table.
// It is replaced whole after each write, never modified.
type tierCache struct {
	// version is tier_version.version when the tiers were read: the cache is
	// current while the table holds the same number.
	version int64
	byName  map[string]policy.Tier
	sorted  []policy.Tier
}

// tierRow is a tier as the database stores it: a row of the tiers table
// and, as JSON, the before and after of an entry of the audit log
// (tier_changes), which leave out updated_at: an entry has its own time.
// The JSON names are the API's.
type tierRow struct {
	Name        string      `json:"name"`
	Features    featureList `json:"features"`
	Models      modelList   `json:"models,format:emitnull"` // NULL, and null in the audit log, for any model
	Description string      `json:"description"`
	UpdatedAt   int64       `json:"-"` // Unix microseconds; 0 for never

	Shadow *limitsRow `json:"shadow"`
	// Account is the pooled limits of an account on the tier, NULL (and
	// null in the audit log) for none.
	Account *poolRow `json:"account"`
	// Run is the tier's run object, nil (and null in the audit log) for
	// none.
	Run *runRow `json:"run"`
	// ID is tier_ids.id, read with the row and never written from it.
	ID int64 `json:"-"`

	// Limits are the tier's limits, a member each by the names of
	// policy.LimitFields (null: no limit): the limits column, a JSON
	// object, and in the audit log's JSON members of the tier's own. A
	// new limit needs no column.
	Limits limitValues `json:",inline"`
}

// limitValues are limits by the names of policy.LimitFields.
type limitValues map[string]*int64

// Scan implements sql.Scanner.
func (l *limitValues) Scan(src any) error { return scanJSON("limits", src, (*map[string]*int64)(l)) }

// Value implements driver.Valuer: every limit of policy.LimitFields is a
// member, null when unset.
func (l limitValues) Value() (driver.Value, error) {
	b, err := json.Marshal(map[string]*int64(l), json.Deterministic(true))
	return string(b), err
}

// tierColumns are the columns of the tiers table, in the order of
// tierRow.scanArgs.
const tierColumns = `name, limits, features, description, updated_at, shadow, models, account, run, run_required`

// tierSelect reads tierColumns and the tier's ID.
var tierSelect = `SELECT ` + tierColumns + `, COALESCE((SELECT id FROM tier_ids WHERE tier_ids.name = tiers.name), 0) AS id FROM tiers`

// tierUpsert creates or replaces a tier, in both dialects.
var tierUpsert = `INSERT INTO tiers (` + tierColumns + `) VALUES (?` + strings.Repeat(", ?", strings.Count(tierColumns, ",")) + `)
	ON CONFLICT (name) DO UPDATE SET ` + func() string {
	var set []string
	for _, c := range strings.Split(tierColumns, ", ")[1:] {
		set = append(set, c+" = excluded."+c)
	}
	return strings.Join(set, ", ")
}()

// scanTier reads a row of tierSelect.
func scanTier(row interface{ Scan(...any) error }) (tierRow, error) {
	var r tierRow
	var run *poolRow
	var required bool
	err := row.Scan(&r.Name, &r.Limits, &r.Features, &r.Description, &r.UpdatedAt, &r.Shadow, &r.Models, &r.Account, &run, &required, &r.ID)
	if run != nil || required {
		r.Run = &runRow{Required: required}
		if run != nil {
			r.Run.Limits = *run
		}
	}
	return r, err
}

// args returns r's values for tierUpsert.
func (r *tierRow) args() []any {
	var run *poolRow
	var required bool
	if r.Run != nil {
		required = r.Run.Required
		if r.Run.Limits != nil {
			run = &r.Run.Limits
		}
	}
	return []any{r.Name, r.Limits, r.Features, r.Description, r.UpdatedAt, r.Shadow, r.Models, r.Account, run, required}
}

// runRow is a tier's run object in the API's shape, as the audit log's
// JSON has it: every run limit a member (null: no limit) and required.
// The tiers table keeps it in two columns: run, the limits as a JSON
// object (NULL for none), and run_required.
type runRow struct {
	Required bool    `json:"required"`
	Limits   poolRow `json:",inline"`
}

// limitsRow is the shadow column: the request limits as a JSON object with
// the API's field names, or NULL. Its account member, left out when the
// shadow has none, holds the pooled shadow limits, each request limit
// present (null: no limit).
type limitsRow struct {
	Account *poolRow    `json:"account,omitzero"`
	Limits  limitValues `json:",inline"`
}

// Scan implements sql.Scanner; database/sql sets a nil *limitsRow for NULL.
func (l *limitsRow) Scan(src any) error { return scanJSON("shadow", src, l) }

// Value implements driver.Valuer; a nil *limitsRow is written NULL.
func (l limitsRow) Value() (driver.Value, error) {
	b, err := json.Marshal(l, json.Deterministic(true))
	return string(b), err
}

func rowOf(t *policy.Tier) tierRow {
	r := tierRow{Name: t.Name, Features: t.Features, Models: t.Models, Description: t.Description, ID: t.ID,
		Limits: make(limitValues, len(policy.LimitNames))}
	for f := range policy.FieldsIn(policy.ScopeTier) {
		r.Limits[f.Name] = f.Get(t)
	}
	if t.Account != nil {
		p := poolRow(t.Account.Values(policy.ScopeAccount))
		r.Account = &p
	}
	if t.Run != nil || t.RunRequired {
		r.Run = &runRow{Required: t.RunRequired}
		if t.Run != nil {
			r.Run.Limits = t.Run.Values(policy.ScopeRun)
		}
	}
	if l := t.Shadow; l != nil {
		r.Shadow = &limitsRow{Limits: limitValues{}}
		for i := range policy.LimitFields {
			if f := &policy.LimitFields[i]; f.InRequestLimits() {
				r.Shadow.Limits[f.Name] = new(l.Limits.Value(f.ID()))
			}
		}
		if a := l.Account; a != nil {
			p := poolRow{}
			for i := range policy.LimitFields {
				if f := &policy.LimitFields[i]; f.InRequestLimits() {
					p[f.Name] = a.Get(f)
				}
			}
			r.Shadow.Account = &p
		}
	}
	if !t.UpdatedAt.IsZero() {
		r.UpdatedAt = t.UpdatedAt.UnixMicro()
	}
	return r
}

func (r *tierRow) tier() policy.Tier {
	t := policy.Tier{Name: r.Name, Description: r.Description, Features: r.Features, Models: r.Models, ID: r.ID}
	for f := range policy.FieldsIn(policy.ScopeTier) {
		f.Set(&t, r.Limits[f.Name])
	}
	if l := r.Shadow; l != nil {
		t.Shadow = &policy.RequestLimits{}
		for i := range policy.LimitFields {
			if f := &policy.LimitFields[i]; f.InRequestLimits() {
				t.Shadow.Limits.Set(f, new(l.Limits.value(f.Name)))
			}
		}
		if l.Account != nil {
			p, _ := policy.PoolLimitsOf(*l.Account) // names unknown to this version are dropped
			t.Shadow.Account = &p
		}
	}
	if r.Account != nil {
		p, _ := policy.PoolLimitsOf(*r.Account) // names unknown to this version are dropped
		t.Account = &p
	}
	if r.Run != nil {
		t.RunRequired = r.Run.Required
		if r.Run.Limits != nil {
			p, _ := policy.RunLimitsOf(r.Run.Limits) // names unknown to this version are dropped
			t.Run = &p
		}
	}
	if t.Features == nil {
		t.Features = []string{}
	}
	if r.UpdatedAt != 0 {
		t.UpdatedAt = time.UnixMicro(r.UpdatedAt).UTC()
	}
	return t
}

// value returns the limit named name, 0 when unset.
func (l limitValues) value(name string) int64 {
	if v := l[name]; v != nil {
		return *v
	}
	return 0
}

// poolRow is the account column: the pooled limits as a JSON object with
// the API's field names, every field present (null: no limit).
type poolRow map[string]*int64

// Scan implements sql.Scanner; database/sql sets a nil *poolRow for NULL.
func (p *poolRow) Scan(src any) error { return scanJSON("account", src, (*map[string]*int64)(p)) }

// Value implements driver.Valuer.
func (p poolRow) Value() (driver.Value, error) {
	b, err := json.Marshal(map[string]*int64(p), json.Deterministic(true))
	return string(b), err
}

// featureList is the features column: a JSON array of strings.
type featureList []string

// Scan implements sql.Scanner.
func (f *featureList) Scan(src any) error { return scanJSON("features", src, (*[]string)(f)) }

// scanJSON reads src, the JSON text of column into v.
func scanJSON(column string, src, v any) error {
	var b []byte
	switch s := src.(type) {
	case string:
		b = []byte(s)
	case []byte:
		b = s
	default:
		return fmt.Errorf("%s column holds %T, not JSON text", column, src)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s column: %w", column, err)
	}
	return nil
}

// Value implements driver.Valuer.
func (f featureList) Value() (driver.Value, error) {
	b, err := json.Marshal([]string(f)) // nil is written []
	return string(b), err
}

// modelList is the models column: NULL for nil (any model), else a JSON
// array of strings, empty for none.
type modelList []string

// Scan implements sql.Scanner.
func (m *modelList) Scan(src any) error {
	if src == nil {
		*m = nil
		return nil
	}
	// JSON null reads nil, as NULL does; [] reads an empty list, not nil.
	return scanJSON("models", src, (*[]string)(m))
}

// Value implements driver.Valuer.
func (m modelList) Value() (driver.Value, error) {
	if m == nil {
		return nil, nil
	}
	b, err := json.Marshal([]string(m))
	return string(b), err
}

// initTiers loads the tier cache and prepares the statement that tells
// whether it is stale.
func (s *Store) initTiers(ctx context.Context) error {
	st, err := s.db.PrepareContext(ctx, `SELECT version FROM tier_version WHERE id = 1`)
	if err != nil {
		return err
	}
	s.tierVersion.query = func(ctx context.Context) (v int64, err error) {
		return v, st.QueryRowContext(ctx).Scan(&v)
	}
	return s.reloadTiers(ctx, 0)
}

// reloadTiers replaces the cache with the table's contents unless the cache
// already holds version atLeast or later. Reloads are serialized, and the version
// and the tiers are read in one transaction, so a slower reload of an older
// snapshot never replaces a newer one.
func (s *Store) reloadTiers(ctx context.Context, atLeast int64) error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if c := s.tiers.Load(); c != nil && atLeast > 0 && c.version >= atLeast {
		return nil // another caller reloaded meanwhile
	}
	var opts *sql.TxOptions // SQLite: a read transaction sees one snapshot
	if s.d.postgres {
		// The version must describe the tiers read with it (see
		// history.currentTierPG): one snapshot for both.
		opts = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}
	}
	tx, err := s.db.BeginTxx(ctx, opts)
	if err != nil {
		return unavailable(err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to lose
	c := &tierCache{}
	if err := tx.GetContext(ctx, &c.version, `SELECT version FROM tier_version WHERE id = 1`); err != nil {
		return unavailable(err)
	}
	rows, err := tx.QueryContext(ctx, tierSelect+` ORDER BY name`)
	if err != nil {
		return unavailable(err)
	}
	defer rows.Close()
	c.byName = make(map[string]policy.Tier)
	for rows.Next() {
		r, err := scanTier(rows)
		if err != nil {
			return unavailable(err)
		}
		t := r.tier()
		c.byName[t.Name] = t
		c.sorted = append(c.sorted, t)
	}
	if err := rows.Err(); err != nil {
		return unavailable(err)
	}
	sort.Slice(c.sorted, func(i, j int) bool { return c.sorted[i].Name < c.sorted[j].Name })
	s.tiers.Store(c)
	return nil
}

// freshTiers returns the tier cache after making sure it holds every tier
// write committed before the call, by this process or any other: it reads
// tier_version (which triggers bump on every write to tiers) and reloads
// when the cache is older. That read costs one short read transaction,
// shared by the calls that arrive while one is in flight (see versionReader).
func (s *Store) freshTiers(ctx context.Context) (*tierCache, error) {
	v, err := s.tierVersion.read(ctx)
	if err != nil {
		return nil, unavailable(err)
	}
	if c := s.tiers.Load(); c.version == v {
		return c, nil
	}
	if err := s.reloadTiers(ctx, v); err != nil {
		return nil, err
	}
	return s.tiers.Load(), nil
}

// versionReader reads tier_version for many concurrent callers with few
// queries. A caller needs a read that started after it arrived (an earlier
// one could miss a write that committed just before the call), so a caller
// that finds a read in flight waits for the next one, which then serves
// every caller that arrived meanwhile: under load one read serves a whole
// crowd of checks, as one commit does in the writer. It is safe for
// concurrent use.
type versionReader struct {
	query func(context.Context) (int64, error)

	mu       sync.Mutex
	cond     sync.Cond // signalled when a read finishes
	reading  bool
	waiting  int    // callers waiting for a read to finish
	started  uint64 // reads started so far
	finished uint64 // number of the last read finished
	version  int64  // its result
	err      error
}

func (r *versionReader) read(ctx context.Context) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cond.L == nil {
		r.cond.L = &r.mu
	}
	need := r.started + 1 // the first read that starts after this call
	for r.finished < need {
		if r.reading {
			r.waiting++
			r.cond.Wait()
			r.waiting--
			continue
		}
		r.reading = true
		r.started++
		n := r.started
		r.mu.Unlock()
		// Other callers wait on this read: one caller going away must not
		// fail theirs.
		v, err := r.query(context.WithoutCancel(ctx))
		r.mu.Lock()
		r.reading = false
		r.finished, r.version, r.err = n, v, err
		r.cond.Broadcast()
	}
	return r.version, r.err
}

// Tier implements policy.TierStore from memory, after making sure the
// cache is current. The returned Features and Models slices are shared and
// must not be modified.
func (s *Store) Tier(ctx context.Context, name string) (policy.Tier, error) {
	c, err := s.freshTiers(ctx)
	if err != nil {
		return policy.Tier{}, err
	}
	t, ok := c.byName[name]
	if !ok {
		return policy.Tier{}, policy.Errorf(policy.ENOTFOUND, "tier %q not found", name)
	}
	return t, nil
}

// Tiers implements policy.TierStore from memory, after making sure the
// cache is current.
func (s *Store) Tiers(ctx context.Context) ([]policy.Tier, error) {
	c, err := s.freshTiers(ctx)
	if err != nil {
		return nil, err
	}
	return slices.Clone(c.sorted), nil
}

// UpdateTiers implements policy.TierStore. It runs in one writer
// transaction: the audit rows commit with the changes they describe, and
// the comparisons of SkipUnchanged and Prune see the table as it is then,
// whatever another process changed since this one last read it.
func (s *Store) UpdateTiers(ctx context.Context, u policy.TierUpdate) ([]policy.TierChange, error) {
	listed := make(map[string]bool, len(u.Put))
	for i := range u.Put {
		if err := u.Put[i].Validate(); err != nil {
			return nil, err
		}
		if listed[u.Put[i].Name] {
			return nil, policy.Errorf(policy.EINVALID, "tier %q is listed twice", u.Put[i].Name)
		}
		listed[u.Put[i].Name] = true
	}
	for _, name := range u.Delete {
		if listed[name] {
			return nil, policy.Errorf(policy.EINVALID, "tier %q is both put and deleted", name)
		}
	}
	at := u.At.UTC().Truncate(time.Microsecond)
	actor := policy.Actor(ctx)
	var changes []policy.TierChange
	err := s.writer.do(ctx, func(tx *writeTx) error {
		if err := tx.lockAdmin(); err != nil {
			return err
		}
		var err error
		changes, err = updateTiersTx(tx, u, at, actor, listed, nil)
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(changes) > 0 {
		// The changes are committed, so they are reported whatever this
		// reload does: a caller told otherwise would retry a change that
		// was made. Not waiting on ctx, which may end now that the answer
		// is decided; a cache the reload fails to refresh is caught up by
		// the next read that sees tier_version moved, and until then the
		// writer confirms the tier of every check it records.
		_ = s.reloadTiers(context.WithoutCancel(ctx), 0)
	}
	return changes, nil
}

// updateTiersTx applies u in tx; listed names the tiers of u.Put. between,
// when set, runs after the puts and before the deletions, so that an
// import can move users off a tier it then deletes. Each change is
// logged in tier_changes and in the audit log as made by actor.
func updateTiersTx(tx *writeTx, u policy.TierUpdate, at time.Time, actor string, listed map[string]bool, between func() error) ([]policy.TierChange, error) {
	audit := auditOf{at: at, actor: actor, source: u.Source}
	var changes []policy.TierChange
	current, err := tiersInTx(tx)
	if err != nil {
		return nil, err
	}
	record := func(name string, before, after *policy.Tier) error {
		var id int64
		old, new := auditJSON(before), auditJSON(after)
		err := tx.queryRowSQL(`INSERT INTO tier_changes (at, tier, source, actor, old, new) VALUES (?, ?, ?, ?, ?, ?) RETURNING id`,
			at.UnixMicro(), name, u.Source, actor, old, new).Scan(&id)
		if err != nil {
			return unavailable(err)
		}
		changes = append(changes, policy.TierChange{ID: id, At: at, Tier: name, Source: u.Source, Actor: actor, Old: before, New: after})
		return audit.insert(tx, auditEntry{kind: policy.AuditTiers, subject: name, action: action(old, new), old: old, new: new})
	}
	for _, t := range u.Put {
		old, exists := current[t.Name]
		switch {
		case exists && u.Mode == policy.PutCreate:
			return nil, policy.Errorf(policy.ECONFLICT, "tier %q already exists", t.Name)
		case !exists && u.Mode == policy.PutReplace:
			return nil, policy.Errorf(policy.ENOTFOUND, "tier %q not found", t.Name)
		case exists && u.IfUpdatedAt != nil && !old.UpdatedAt.Equal(u.IfUpdatedAt.Truncate(time.Microsecond)):
			return nil, policy.Errorf(policy.ECONFLICT, "tier %q was changed at %s, after it was read", t.Name, old.UpdatedAt.Format(time.RFC3339Nano))
		}
		if exists && u.SkipUnchanged && policy.SameLimits(&old, &t) {
			continue
		}
		t.UpdatedAt = at
		if t.Features == nil {
			t.Features = []string{}
		}
		if err := upsertTier(tx, &t); err != nil {
			return nil, err
		}
		var oldp *policy.Tier
		if exists {
			oldp = &old
		}
		if err := record(t.Name, oldp, &t); err != nil {
			return nil, err
		}
	}
	if between != nil {
		if err := between(); err != nil {
			return nil, err
		}
	}
	deletions := slices.Clone(u.Delete)
	if u.Prune {
		for _, name := range slices.Sorted(maps.Keys(current)) {
			if !listed[name] {
				deletions = append(deletions, name)
			}
		}
	}
	for _, name := range deletions {
		old, exists := current[name]
		if !exists {
			return nil, policy.Errorf(policy.ENOTFOUND, "tier %q not found", name)
		}
		if n, err := assignedUsers(tx, name); err != nil {
			return nil, err
		} else if n > 0 {
			return nil, tierInUse(name, n)
		}
		if n, err := accountsOnTier(tx, name); err != nil {
			return nil, err
		} else if n > 0 {
			return nil, policy.Errorf(policy.ECONFLICT, "tier %s is the plan of %d %s; move them to another tier or delete them first",
				policy.Quote(name), n, plural(n, "account", "accounts"))
		}
		if _, err := tx.execSQL(`DELETE FROM tiers WHERE name = ?`, name); err != nil {
			return nil, unavailable(err)
		}
		delete(current, name)
		if err := record(name, &old, nil); err != nil {
			return nil, err
		}
	}
	return changes, nil
}

// tiersInTx reads every tier inside the writer's transaction.
func tiersInTx(tx *writeTx) (map[string]policy.Tier, error) { return queryTiers(tx, "") }

// queryTiers reads the tiers that where (a WHERE clause or "") selects
// inside the transaction.
func queryTiers(tx *writeTx, where string, args ...any) (map[string]policy.Tier, error) {
	rows, err := tx.conn.QueryContext(tx.ctx, tx.d.bind(tierSelect+where), args...)
	if err != nil {
		return nil, unavailable(err)
	}
	defer rows.Close()
	tiers := make(map[string]policy.Tier)
	for rows.Next() {
		r, err := scanTier(rows)
		if err != nil {
			return nil, unavailable(err)
		}
		t := r.tier()
		tiers[t.Name] = t
	}
	return tiers, unavailable(rows.Err())
}

func upsertTier(tx *writeTx, t *policy.Tier) error {
	r := rowOf(t)
	r.UpdatedAt = t.UpdatedAt.UnixMicro()
	_, err := tx.execSQL(tierUpsert, r.args()...)
	return unavailable(err)
}

// auditJSON returns t as the audit log stores it, or nil (NULL) for no tier.
func auditJSON(t *policy.Tier) any {
	if t == nil {
		return nil
	}
	b, _ := json.Marshal(rowOf(t), json.Deterministic(true)) // cannot fail: the row holds only strings, lists of strings and integers
	return string(b)
}

// tierFromAudit reads a tier the audit log stored, or nil for NULL. Its
// UpdatedAt is unknown: the log keeps only the time of its own entries.
func tierFromAudit(s sql.NullString) (*policy.Tier, error) {
	if !s.Valid {
		return nil, nil
	}
	var r tierRow
	if err := json.Unmarshal([]byte(s.String), &r); err != nil {
		return nil, fmt.Errorf("tier_changes: %w", err)
	}
	t := r.tier()
	return &t, nil
}

// TierChanges implements policy.TierStore.
func (s *Store) TierChanges(ctx context.Context, limit int) ([]policy.TierChange, error) {
	if limit <= 0 {
		return nil, nil
	}
	var rows []struct {
		ID     int64          `db:"id"`
		At     int64          `db:"at"`
		Tier   string         `db:"tier"`
		Source string         `db:"source"`
		Actor  string         `db:"actor"`
		Old    sql.NullString `db:"old"`
		New    sql.NullString `db:"new"`
	}
	if err := s.db.SelectContext(ctx, &rows, s.d.bind(`SELECT id, at, tier, source, actor, old, new FROM tier_changes ORDER BY id DESC LIMIT ?`), limit); err != nil {
		return nil, unavailable(err)
	}
	out := make([]policy.TierChange, len(rows))
	for i, r := range rows {
		at := time.UnixMicro(r.At).UTC()
		before, err := tierFromAudit(r.Old)
		if err != nil {
			return nil, err
		}
		after, err := tierFromAudit(r.New)
		if err != nil {
			return nil, err
		}
		if after != nil {
			after.UpdatedAt = at
		}
		out[i] = policy.TierChange{ID: r.ID, At: at, Tier: r.Tier, Source: r.Source, Actor: r.Actor, Old: before, New: after}
	}
	return out, nil
}
