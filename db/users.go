package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-json-experiment/json"

	"github.com/policyguard/policyguard/policy"
)

var (
	_ policy.CurrentUsers = (*history)(nil)
	_ policy.Importer     = (*Store)(nil)
)

// userCache holds every user record in memory, so that a check reads no
// table to learn that its user has none. Unlike the tier cache it is kept
// up to date entry by entry: by this process's writes once they commit, and
// by every read of a record as stored (User), which is what a check does
// when the writer found the cached record differs from the table. It may
// lag behind another process, never by more than one check of the user:
// the writer confirms the record of every check it records (see
// history.CurrentUser). It is safe for concurrent use.
type userCache struct {
	m sync.Map // user id → policy.UserRecord
}

// userColumns are the columns of the users table.
const userColumns = `user_id, tier, limits, note, updated_at, account, time_zone, billing_anchor`

// userUpsert creates or replaces a user record, in both dialects.
var userUpsert = `INSERT INTO users (` + userColumns + `) VALUES (?` + strings.Repeat(", ?", strings.Count(userColumns, ",")) + `)
	ON CONFLICT (user_id) DO UPDATE SET ` + func() string {
	var set []string
	for _, c := range strings.Split(userColumns, ", ")[1:] {
		set = append(set, c+" = excluded."+c)
	}
	return strings.Join(set, ", ")
}()

// userRow is a row of the users table.
type userRow struct {
	UserID string
	Tier   sql.NullString
	// Limits are the record's overrides as a JSON object by the names of
	// policy.LimitFields (see overridesJSON): a limit the record keeps is
	// absent, one it removes is null. A new limit needs no column.
	Limits    string
	Note      string
	UpdatedAt int64 // Unix microseconds
	Account   sql.NullString
	// TimeZone and BillingAnchor are NULL where the record keeps the
	// default.
	TimeZone      sql.NullString
	BillingAnchor sql.NullInt64
}

func (r *userRow) scanArgs() []any {
	return []any{&r.UserID, &r.Tier, &r.Limits, &r.Note, &r.UpdatedAt, &r.Account, &r.TimeZone, &r.BillingAnchor}
}

func (r *userRow) record() (policy.UserRecord, error) {
	u := policy.UserRecord{UserID: r.UserID, Tier: r.Tier.String, Account: r.Account.String, Note: r.Note, UpdatedAt: time.UnixMicro(r.UpdatedAt).UTC(),
		TimeZone: r.TimeZone.String, BillingAnchor: int(r.BillingAnchor.Int64)}
	var err error
	u.Limits, err = overridesOf(r.Limits)
	if err != nil {
		return policy.UserRecord{}, fmt.Errorf("users.limits of %s: %w", policy.Quote(r.UserID), err)
	}
	return u, nil
}

func userRowOf(u *policy.UserRecord) userRow {
	return userRow{UserID: u.UserID, Tier: sql.NullString{String: u.Tier, Valid: u.Tier != ""}, Limits: overridesJSON(&u.Limits),
		Note: u.Note, UpdatedAt: u.UpdatedAt.UnixMicro(), Account: sql.NullString{String: u.Account, Valid: u.Account != ""},
		TimeZone: nullZone(u.TimeZone), BillingAnchor: nullAnchor(u.BillingAnchor)}
}

func (r *userRow) args() []any {
	return []any{r.UserID, r.Tier, r.Limits, r.Note, r.UpdatedAt, r.Account, r.TimeZone, r.BillingAnchor}
}

// nullZone and nullAnchor return a billing cycle's field as its column
// keeps it: NULL where unset.
func nullZone(z string) sql.NullString { return sql.NullString{String: z, Valid: z != ""} }

func nullAnchor(a int) sql.NullInt64 { return sql.NullInt64{Int64: int64(a), Valid: a != 0} }

// overridesJSON returns o as the users table keeps it: a JSON object with
// a member per limit o overrides, in the order of policy.LimitFields, null
// for one it removes; {} when it overrides none. It is written by hand
// because admit_batch's record check encodes every record it confirms: it
// takes a few appends where a marshaller reflects over a map.
func overridesJSON(o *policy.Overrides) string {
	b := make([]byte, 0, 64)
	b = append(b, '{')
	for i := range policy.LimitFields {
		v := o[i]
		if !v.Set {
			continue
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, policy.LimitFields[i].Name...)
		b = append(b, '"', ':')
		if v.Limit == nil {
			b = append(b, "null"...)
		} else {
			b = strconv.AppendInt(b, *v.Limit, 10)
		}
	}
	return string(append(b, '}'))
}

// overridesOf reads overrides written by overridesJSON, or by PostgreSQL's
// jsonb, which spaces and orders members its own way. A record that
// overrides nothing, most of them, is read without a parse.
func overridesOf(s string) (policy.Overrides, error) {
	if s == "{}" {
		return policy.Overrides{}, nil
	}
	var values map[string]*int64
	if err := json.Unmarshal([]byte(s), &values); err != nil {
		return policy.Overrides{}, err
	}
	return policy.LimitsOf(values)
}

// initUsers loads every user record into the cache.
func (s *Store) initUsers(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, s.d.bind(`SELECT `+userColumns+` FROM users`))
	if err != nil {
		return unavailable(err)
	}
	defer rows.Close()
	for rows.Next() {
		var r userRow
		if err := rows.Scan(r.scanArgs()...); err != nil {
			return unavailable(err)
		}
		u, err := r.record()
		if err != nil {
			return err
		}
		s.users.m.Store(r.UserID, u)
	}
	return unavailable(rows.Err())
}

// CachedUser implements policy.UserStore from memory.
func (s *Store) CachedUser(userID string) (policy.UserRecord, bool) {
	v, ok := s.users.m.Load(userID)
	if !ok {
		return policy.UserRecord{}, false
	}
	return v.(policy.UserRecord), true
}

// User implements policy.UserStore: one read of the table, which also
// brings the cache's entry up to date.
func (s *Store) User(ctx context.Context, userID string) (policy.UserRecord, error) {
	var r userRow
	err := s.db.QueryRowContext(ctx, s.d.bind(`SELECT `+userColumns+` FROM users WHERE user_id = ?`), userID).Scan(r.scanArgs()...)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		s.users.m.Delete(userID)
		return policy.UserRecord{}, policy.Errorf(policy.ENOTFOUND, "user %s has no record", policy.Quote(userID))
	case err != nil:
		return policy.UserRecord{}, unavailable(err)
	}
	u, err := r.record()
	if err != nil {
		return policy.UserRecord{}, err
	}
	s.users.m.Store(userID, u)
	return u, nil
}

// Users implements policy.UserStore.
func (s *Store) Users(ctx context.Context, after string, limit int) ([]policy.UserRecord, error) {
	return s.queryUsers(ctx, `WHERE user_id > ? ORDER BY user_id LIMIT ?`, after, limit)
}

// queryUsers reads the records that where (a WHERE clause and what
// follows) selects.
func (s *Store) queryUsers(ctx context.Context, where string, args ...any) ([]policy.UserRecord, error) {
	rows, err := s.db.QueryContext(ctx, s.d.bind(`SELECT `+userColumns+` FROM users `+where), args...)
	if err != nil {
		return nil, unavailable(err)
	}
	defer rows.Close()
	out := []policy.UserRecord{}
	for rows.Next() {
		var r userRow
		if err := rows.Scan(r.scanArgs()...); err != nil {
			return nil, unavailable(err)
		}
		u, err := r.record()
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, unavailable(rows.Err())
}

// userInTx reads userID's record in the writer's transaction; nil when
// there is none.
func userInTx(tx *writeTx, userID string) (*policy.UserRecord, error) {
	var r userRow
	err := tx.conn.QueryRowContext(tx.ctx, tx.d.bind(`SELECT `+userColumns+` FROM users WHERE user_id = ?`), userID).Scan(r.scanArgs()...)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, unavailable(err)
	}
	u, err := r.record()
	if err != nil {
		return nil, err
	}
	return &u, nil
}

// UpdateUsers implements policy.UserStore in one writer transaction, so
// that a record's tier exists when it commits (deleting a tier counts its
// users in the same way) and its audit row commits with it.
func (s *Store) UpdateUsers(ctx context.Context, u policy.UserUpdate) ([]policy.UserChange, error) {
	listed := make(map[string]bool, len(u.Put))
	for i := range u.Put {
		if err := u.Put[i].Validate(); err != nil {
			return nil, err
		}
		if listed[u.Put[i].UserID] {
			return nil, policy.Errorf(policy.EINVALID, "user %s is listed twice", policy.Quote(u.Put[i].UserID))
		}
		listed[u.Put[i].UserID] = true
	}
	at := u.At.UTC().Truncate(time.Microsecond)
	actor := policy.Actor(ctx)
	var changes []policy.UserChange
	err := s.writer.do(ctx, func(tx *writeTx) error {
		changes = changes[:0] // a job may run again after a neighbour failed
		if err := tx.lockAdmin(); err != nil {
			return err
		}
		var err error
		changes, err = updateUsersTx(tx, u, at, actor, changes)
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, c := range changes {
		if c.New == nil {
			s.users.m.Delete(c.UserID)
		} else {
			s.users.m.Store(c.UserID, *c.New)
		}
	}
	return changes, nil
}

// updateUsersTx applies u in tx and appends its changes to changes, each
// logged in user_changes and in the audit log as made by actor.
func updateUsersTx(tx *writeTx, u policy.UserUpdate, at time.Time, actor string, changes []policy.UserChange) ([]policy.UserChange, error) {
	audit := auditOf{at: at, actor: actor, source: u.Source}
	record := func(userID string, before, after *policy.UserRecord) error {
		var id int64
		old, new := userAuditJSON(before), userAuditJSON(after)
		err := tx.conn.QueryRowContext(tx.ctx, tx.d.bind(`INSERT INTO user_changes (at, user_id, source, actor, old, new) VALUES (?, ?, ?, ?, ?, ?) RETURNING id`),
			at.UnixMicro(), userID, u.Source, actor, old, new).Scan(&id)
		if err != nil {
			return unavailable(err)
		}
		if err := audit.insert(tx, auditEntry{kind: policy.AuditUsers, subject: userID, action: action(old, new), old: old, new: new}); err != nil {
			return err
		}
		changes = append(changes, policy.UserChange{ID: id, At: at, UserID: userID, Source: u.Source, Actor: actor, Old: before, New: after})
		// The writer reads the record again at the user's next admission.
		tx.forgetUser(userID)
		return nil
	}
	for _, r := range u.Put {
		if r.Tier != "" {
			var one int
			err := tx.conn.QueryRowContext(tx.ctx, tx.d.bind(`SELECT 1 FROM tiers WHERE name = ?`), r.Tier).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				return nil, policy.Errorf(policy.EINVALID, "unknown tier %s", policy.Quote(r.Tier))
			} else if err != nil {
				return nil, unavailable(err)
			}
		}
		if r.Account != "" {
			var one int
			err := tx.conn.QueryRowContext(tx.ctx, tx.d.bind(`SELECT 1 FROM accounts WHERE account_id = ?`), r.Account).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				return nil, policy.Errorf(policy.EINVALID, "unknown account %s", policy.Quote(r.Account))
			} else if err != nil {
				return nil, unavailable(err)
			}
		}
		old, err := userInTx(tx, r.UserID)
		if err != nil {
			return nil, err
		}
		if old != nil && u.SkipUnchanged && policy.SameRecord(old, &r) {
			continue
		}
		r.UpdatedAt = at
		row := userRowOf(&r)
		if _, err := tx.conn.ExecContext(tx.ctx, tx.d.bind(userUpsert), row.args()...); err != nil {
			return nil, unavailable(err)
		}
		if err := record(r.UserID, old, &r); err != nil {
			return nil, err
		}
	}
	for _, id := range u.Delete {
		old, err := userInTx(tx, id)
		if err != nil {
			return nil, err
		}
		if old == nil {
			return nil, policy.Errorf(policy.ENOTFOUND, "user %s has no record", policy.Quote(id))
		}
		if _, err := tx.conn.ExecContext(tx.ctx, tx.d.bind(`DELETE FROM users WHERE user_id = ?`), id); err != nil {
			return nil, unavailable(err)
		}
		if err := record(id, old, nil); err != nil {
			return nil, err
		}
	}
	return changes, nil
}

// assignedUsers returns how many users are assigned tier name, in tx.
func assignedUsers(tx *writeTx, name string) (int64, error) {
	var n int64
	err := tx.conn.QueryRowContext(tx.ctx, tx.d.bind(`SELECT count(*) FROM users WHERE tier = ?`), name).Scan(&n)
	return n, unavailable(err)
}

// tierInUse is the error of deleting a tier n users are assigned.
func tierInUse(name string, n int64) error {
	return policy.Errorf(policy.ECONFLICT, "tier %s is assigned to %d %s; assign them another tier or remove their records first", policy.Quote(name), n, plural(n, "user", "users"))
}

// CurrentUser implements policy.CurrentUsers in the writer's transaction:
// the record as the transaction sees it, kept with the writer's state of
// the user, which is dropped after this process changes the record and
// after any write by another process. A History on a read connection, which
// the RateLimiter does not ask, has no records.
func (h *history) CurrentUser(userID string) (*policy.UserRecord, bool, error) {
	if h.tx == nil {
		return nil, false, nil
	}
	if err := h.load(); err != nil {
		return nil, false, err
	}
	st := h.st
	if !st.recordLoaded {
		r, err := userInTx(h.tx, userID)
		if err != nil {
			return nil, false, err
		}
		st.record, st.recordLoaded = r, true
	}
	return st.record, st.record != nil, nil
}

// userAuditJSON returns r as the audit log stores it, or nil (NULL) for no
// record: the API's field names, without updated_at (an entry has its own
// time).
func userAuditJSON(r *policy.UserRecord) any {
	if r == nil {
		return nil
	}
	b, _ := json.Marshal(auditUser{UserID: r.UserID, Tier: r.Tier, Account: r.Account, Limits: r.Limits.Values(), Note: r.Note,
		TimeZone: r.TimeZone, BillingAnchor: r.BillingAnchor}, json.Deterministic(true))
	return string(b)
}

type auditUser struct {
	UserID        string            `json:"user_id"`
	Tier          string            `json:"tier,omitempty"`
	Account       string            `json:"account,omitempty"`
	Limits        map[string]*int64 `json:"limits"`
	TimeZone      string            `json:"time_zone,omitzero"`
	BillingAnchor int               `json:"billing_anchor,omitzero"`
	Note          string            `json:"note"`
}

func userFromAudit(s sql.NullString) (*policy.UserRecord, error) {
	if !s.Valid {
		return nil, nil
	}
	var a auditUser
	if err := json.Unmarshal([]byte(s.String), &a); err != nil {
		return nil, fmt.Errorf("user_changes: %w", err)
	}
	l, err := policy.LimitsOf(a.Limits)
	if err != nil {
		return nil, fmt.Errorf("user_changes: %w", err)
	}
	return &policy.UserRecord{UserID: a.UserID, Tier: a.Tier, Account: a.Account, Limits: l, Note: a.Note,
		TimeZone: a.TimeZone, BillingAnchor: a.BillingAnchor}, nil
}

// UserChanges implements policy.UserStore.
func (s *Store) UserChanges(ctx context.Context, userID string, limit int) ([]policy.UserChange, error) {
	if limit <= 0 {
		return nil, nil
	}
	var rows []struct {
		ID     int64          `db:"id"`
		At     int64          `db:"at"`
		UserID string         `db:"user_id"`
		Source string         `db:"source"`
		Actor  string         `db:"actor"`
		Old    sql.NullString `db:"old"`
		New    sql.NullString `db:"new"`
	}
	q := `SELECT id, at, user_id, source, actor, old, new FROM user_changes ORDER BY id DESC LIMIT ?`
	args := []any{limit}
	if userID != "" {
		q = `SELECT id, at, user_id, source, actor, old, new FROM user_changes WHERE user_id = ? ORDER BY id DESC LIMIT ?`
		args = []any{userID, limit}
	}
	if err := s.db.SelectContext(ctx, &rows, s.d.bind(q), args...); err != nil {
		return nil, unavailable(err)
	}
	out := make([]policy.UserChange, len(rows))
	for i, r := range rows {
		at := time.UnixMicro(r.At).UTC()
		before, err := userFromAudit(r.Old)
		if err != nil {
			return nil, err
		}
		after, err := userFromAudit(r.New)
		if err != nil {
			return nil, err
		}
		if after != nil {
			after.UpdatedAt = at
		}
		out[i] = policy.UserChange{ID: r.ID, At: at, UserID: r.UserID, Source: r.Source, Actor: r.Actor, Old: before, New: after}
	}
	return out, nil
}

// Import implements policy.Importer: tiers, accounts and user records in
// one writer transaction, the tiers put first, then the accounts, then the
// records, then the tiers deleted or pruned, so that accounts and records
// can move to a tier the same import creates and off one it deletes, and
// records to an account it creates.
func (s *Store) Import(ctx context.Context, tu policy.TierUpdate, accounts []policy.Account, uu policy.UserUpdate) (policy.ImportChanges, error) {
	listed := make(map[string]bool, len(tu.Put))
	for i := range tu.Put {
		if err := tu.Put[i].Validate(); err != nil {
			return policy.ImportChanges{}, err
		}
		if listed[tu.Put[i].Name] {
			return policy.ImportChanges{}, policy.Errorf(policy.EINVALID, "tier %q is listed twice", tu.Put[i].Name)
		}
		listed[tu.Put[i].Name] = true
	}
	seenAccount := make(map[string]bool, len(accounts))
	for i := range accounts {
		if err := accounts[i].Validate(); err != nil {
			return policy.ImportChanges{}, err
		}
		if seenAccount[accounts[i].AccountID] {
			return policy.ImportChanges{}, policy.Errorf(policy.EINVALID, "account %s is listed twice", policy.Quote(accounts[i].AccountID))
		}
		seenAccount[accounts[i].AccountID] = true
	}
	seen := make(map[string]bool, len(uu.Put))
	for i := range uu.Put {
		if err := uu.Put[i].Validate(); err != nil {
			return policy.ImportChanges{}, err
		}
		if seen[uu.Put[i].UserID] {
			return policy.ImportChanges{}, policy.Errorf(policy.EINVALID, "user %s is listed twice", policy.Quote(uu.Put[i].UserID))
		}
		seen[uu.Put[i].UserID] = true
	}
	at := tu.At.UTC().Truncate(time.Microsecond)
	actor := policy.Actor(ctx)
	var changes policy.ImportChanges
	err := s.writer.do(ctx, func(tx *writeTx) error {
		// A job may run again after a neighbour failed.
		changes = policy.ImportChanges{}
		if err := tx.lockAdmin(); err != nil {
			return err
		}
		var err error
		changes.Tiers, err = updateTiersTx(tx, tu, at, actor, listed, func() error {
			if changes.Accounts, err = importAccountsTx(tx, accounts, auditOf{at: at, actor: actor, source: tu.Source}, nil); err != nil {
				return err
			}
			changes.Users, err = updateUsersTx(tx, uu, at, actor, nil)
			return err
		})
		return err
	})
	if err != nil {
		return policy.ImportChanges{}, err
	}
	if len(changes.Tiers) > 0 {
		_ = s.reloadTiers(context.WithoutCancel(ctx), 0) // as UpdateTiers does
	}
	for _, c := range changes.Users {
		if c.New == nil {
			s.users.m.Delete(c.UserID)
		} else {
			s.users.m.Store(c.UserID, *c.New)
		}
	}
	return changes, nil
}
