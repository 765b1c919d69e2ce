package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-json-experiment/json"

	"github.com/policyguard/policyguard/policy"
)

var _ policy.AccountStore = (*Store)(nil)

const accountColumns = `account_id, tier, limits, note, updated_at, time_zone, billing_anchor`

// accountRow is a row of the accounts table.
type accountRow struct {
	ID        string
	Tier      string
	Limits    string // JSON: the overrides by field name
	Note      string
	UpdatedAt int64 // Unix microseconds
	// TimeZone and BillingAnchor are NULL where the account keeps the
	// default.
	TimeZone      sql.NullString
	BillingAnchor sql.NullInt64
}

func (r *accountRow) scanArgs() []any {
	return []any{&r.ID, &r.Tier, &r.Limits, &r.Note, &r.UpdatedAt, &r.TimeZone, &r.BillingAnchor}
}

func (r *accountRow) account() (policy.Account, error) {
	var values map[string]*int64
	if err := json.Unmarshal([]byte(r.Limits), &values); err != nil {
		return policy.Account{}, fmt.Errorf("accounts.limits of %q: %w", r.ID, err)
	}
	o, err := policy.PoolOverridesOf(values)
	if err != nil {
		return policy.Account{}, fmt.Errorf("accounts.limits of %q: %w", r.ID, err)
	}
	return policy.Account{AccountID: r.ID, Tier: r.Tier, Limits: o, Note: r.Note, UpdatedAt: time.UnixMicro(r.UpdatedAt).UTC(),
		TimeZone: r.TimeZone.String, BillingAnchor: int(r.BillingAnchor.Int64)}, nil
}

func accountArgs(a *policy.Account) []any {
	values := a.Limits.Values()
	if values == nil {
		values = map[string]*int64{}
	}
	b, _ := json.Marshal(values, json.Deterministic(true)) // cannot fail: names and integers
	return []any{a.AccountID, a.Tier, string(b), a.Note, a.UpdatedAt.UnixMicro(), nullZone(a.TimeZone), nullAnchor(a.BillingAnchor)}
}

// The store keeps every account in memory (Store.accounts), as it keeps
// user records: up to date entry by entry, by this process's writes once
// they commit and by every read of an account as stored (Account), which
// is what a check does when the writer found the cached account differs
// from the table. It may lag behind another process, never by more than one
// check: the writer confirms the account of every member's check it
// records (see history.CurrentAccount).

// initAccounts loads every account into memory.
func (s *Store) initAccounts(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, `SELECT `+accountColumns+` FROM accounts`)
	if err != nil {
		return unavailable(err)
	}
	defer rows.Close()
	for rows.Next() {
		var r accountRow
		if err := rows.Scan(r.scanArgs()...); err != nil {
			return unavailable(err)
		}
		a, err := r.account()
		if err != nil {
			return err
		}
		s.accounts.Store(a.AccountID, a)
	}
	return unavailable(rows.Err())
}

// CachedAccount implements policy.AccountStore from memory.
func (s *Store) CachedAccount(id string) (policy.Account, bool) {
	v, ok := s.accounts.Load(id)
	if !ok {
		return policy.Account{}, false
	}
	return v.(policy.Account), true
}

// Account implements policy.AccountStore: one read of the table, which
// also brings the memory's entry up to date.
func (s *Store) Account(ctx context.Context, id string) (policy.Account, error) {
	a, found, err := readAccount(ctx, s.db, s.d, id)
	switch {
	case err != nil:
		return policy.Account{}, err
	case !found:
		s.accounts.Delete(id)
		return policy.Account{}, policy.Errorf(policy.ENOTFOUND, "account %s not found", policy.Quote(id))
	}
	s.accounts.Store(id, a)
	return a, nil
}

// readAccount reads the account named id through q.
func readAccount(ctx context.Context, q sqlConn, d *dialect, id string) (policy.Account, bool, error) {
	var r accountRow
	err := q.QueryRowContext(ctx, d.bind(`SELECT `+accountColumns+` FROM accounts WHERE account_id = ?`), id).Scan(r.scanArgs()...)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return policy.Account{}, false, nil
	case err != nil:
		return policy.Account{}, false, unavailable(err)
	}
	a, err := r.account()
	return a, err == nil, err
}

// CurrentAccount implements policy.CurrentAccounts in the writer's
// transaction: the account as the transaction sees it, kept with the
// writer's state of its pool, which is dropped after this process changes
// the account and after any write by another process.
func (h *history) CurrentAccount(id string) (*policy.Account, bool, error) {
	if h.tx == nil {
		return nil, false, nil
	}
	if err := h.load(); err != nil {
		return nil, false, err
	}
	st := h.st
	if !st.accountLoaded {
		a, found, err := readAccount(h.tx.ctx, h.tx.conn, h.tx.d, id)
		if err != nil {
			return nil, false, err
		}
		st.account, st.accountLoaded = nil, true
		if found {
			st.account = &a
		}
	}
	return st.account, st.account != nil, nil
}

// Accounts implements policy.AccountStore.
func (s *Store) Accounts(ctx context.Context, after string, limit int) ([]policy.Account, error) {
	rows, err := s.db.QueryContext(ctx, s.d.bind(`SELECT `+accountColumns+` FROM accounts WHERE account_id > ? ORDER BY account_id LIMIT ?`), after, limit)
	if err != nil {
		return nil, unavailable(err)
	}
	defer rows.Close()
	out := []policy.Account{}
	for rows.Next() {
		var r accountRow
		if err := rows.Scan(r.scanArgs()...); err != nil {
			return nil, unavailable(err)
		}
		a, err := r.account()
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, unavailable(rows.Err())
}

// PutAccount implements policy.AccountStore in one writer transaction, so
// that the account's tier exists when it commits.
func (s *Store) PutAccount(ctx context.Context, a policy.Account) (created bool, err error) {
	if err := a.Validate(); err != nil {
		return false, err
	}
	audit := auditBy(ctx, a.UpdatedAt)
	err = s.writer.do(ctx, func(tx *writeTx) error {
		if err := tx.lockAdmin(); err != nil {
			return err
		}
		old, err := putAccountTx(tx, &a)
		if err != nil {
			return err
		}
		created = old == nil
		return audit.insert(tx, accountAudit(old, &a))
	})
	if err == nil {
		s.accounts.Store(a.AccountID, a)
	}
	return created, err
}

// putAccountTx creates or replaces a in tx, its tier as tx sees it having
// to exist, and returns the account it replaced; nil when it created one.
func putAccountTx(tx *writeTx, a *policy.Account) (*policy.Account, error) {
	var one int
	err := tx.conn.QueryRowContext(tx.ctx, tx.d.bind(`SELECT 1 FROM tiers WHERE name = ?`), a.Tier).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, policy.Errorf(policy.EINVALID, "unknown tier %s", policy.Quote(a.Tier))
	} else if err != nil {
		return nil, unavailable(err)
	}
	old, err := accountInTx(tx, a.AccountID)
	if err != nil {
		return nil, err
	}
	_, err = tx.conn.ExecContext(tx.ctx, tx.d.bind(`INSERT INTO accounts (`+accountColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (account_id) DO UPDATE SET tier = excluded.tier, limits = excluded.limits,
			note = excluded.note, updated_at = excluded.updated_at,
			time_zone = excluded.time_zone, billing_anchor = excluded.billing_anchor`), accountArgs(a)...)
	// The writer reads the account again at its pool's next admission.
	tx.forgetUser(policy.AccountKey(a.AccountID))
	return old, unavailable(err)
}

// accountInTx reads the account named id inside tx; nil when there is none.
func accountInTx(tx *writeTx, id string) (*policy.Account, error) {
	var r accountRow
	err := tx.conn.QueryRowContext(tx.ctx, tx.d.bind(`SELECT `+accountColumns+` FROM accounts WHERE account_id = ?`), id).Scan(r.scanArgs()...)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, unavailable(err)
	}
	a, err := r.account()
	return &a, err
}

// importAccountsTx puts the accounts of an import in tx, leaving alone
// those already as listed, and appends what it changed to changes, each
// logged in the audit log.
func importAccountsTx(tx *writeTx, accounts []policy.Account, audit auditOf, changes []policy.AccountChange) ([]policy.AccountChange, error) {
	for i := range accounts {
		a := accounts[i]
		old, err := accountInTx(tx, a.AccountID)
		if err != nil {
			return nil, err
		}
		if old != nil && policy.SameAccount(old, &a) {
			continue
		}
		if _, err := putAccountTx(tx, &a); err != nil {
			return nil, err
		}
		if err := audit.insert(tx, accountAudit(old, &a)); err != nil {
			return nil, err
		}
		changes = append(changes, policy.AccountChange{AccountID: a.AccountID, Old: old, New: &a})
	}
	return changes, nil
}

// DeleteAccount implements policy.AccountStore.
func (s *Store) DeleteAccount(ctx context.Context, id string) error {
	audit := auditBy(ctx, policy.ChangeTime(ctx))
	err := s.writer.do(ctx, func(tx *writeTx) error {
		if err := tx.lockAdmin(); err != nil {
			return err
		}
		old, err := accountInTx(tx, id)
		if err != nil {
			return err
		}
		var n int64
		if err := tx.conn.QueryRowContext(tx.ctx, tx.d.bind(`SELECT count(*) FROM users WHERE account = ?`), id).Scan(&n); err != nil {
			return unavailable(err)
		}
		if n > 0 {
			return policy.Errorf(policy.ECONFLICT, "account %s has %d %s; move them to another account or remove it from their records first",
				policy.Quote(id), n, plural(n, "member", "members"))
		}
		res, err := tx.conn.ExecContext(tx.ctx, tx.d.bind(`DELETE FROM accounts WHERE account_id = ?`), id)
		if err != nil {
			return unavailable(err)
		}
		if k, _ := res.RowsAffected(); k == 0 {
			return policy.Errorf(policy.ENOTFOUND, "account %s not found", policy.Quote(id))
		}
		tx.forgetUser(policy.AccountKey(id))
		return audit.insert(tx, accountAudit(old, nil))
	})
	if err == nil {
		s.accounts.Delete(id)
	}
	return err
}

// Members implements policy.AccountStore: a range of users_account.
func (s *Store) Members(ctx context.Context, id, after string, limit int) ([]policy.UserRecord, error) {
	return s.queryUsers(ctx, `WHERE account = ? AND user_id > ? ORDER BY user_id LIMIT ?`, id, after, limit)
}

// accountsOnTier returns how many accounts have tier name as their plan.
func accountsOnTier(tx *writeTx, name string) (int64, error) {
	var n int64
	err := tx.conn.QueryRowContext(tx.ctx, tx.d.bind(`SELECT count(*) FROM accounts WHERE tier = ?`), name).Scan(&n)
	return n, unavailable(err)
}

// plural returns one when n is 1, else many.
func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// auditAccount is an account as the audit log keeps it: the API's field
// names, without updated_at (an entry has its own time).
type auditAccount struct {
	AccountID string            `json:"account_id"`
	Tier      string            `json:"tier"`
	Limits    map[string]*int64 `json:"limits"`
	Note      string            `json:"note"`
}

// accountAudit returns the audit entry of a change from old to new; nil
// for none.
func accountAudit(old, new *policy.Account) auditEntry {
	obj := func(a *policy.Account) any {
		if a == nil {
			return nil
		}
		return auditObject(auditAccount{AccountID: a.AccountID, Tier: a.Tier, Limits: a.Limits.Values(), Note: a.Note})
	}
	e := auditEntry{kind: policy.AuditAccounts, old: obj(old), new: obj(new)}
	e.action = action(e.old, e.new)
	if new != nil {
		e.subject = new.AccountID
	} else if old != nil {
		e.subject = old.AccountID
	}
	return e
}
