package db

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/policyguard/policyguard/policy"
)

var _ policy.AdminStore = (*Store)(nil)

// adminColumns are the columns of admins that make a policy.Admin.
const adminColumns = `name, role, note, created_at, last_used_at, revoked_at`

type adminRow struct {
	Name      string
	Role      string
	Note      string
	CreatedAt int64 // unix microseconds
	LastUsed  sql.NullInt64
	Revoked   sql.NullInt64
}

func (r *adminRow) scanArgs() []any {
	return []any{&r.Name, &r.Role, &r.Note, &r.CreatedAt, &r.LastUsed, &r.Revoked}
}

func (r *adminRow) admin() policy.Admin {
	role, _ := policy.ParseRole(r.Role) // the table's CHECK allows only roles
	a := policy.Admin{Name: r.Name, Role: role, Note: r.Note, CreatedAt: time.UnixMicro(r.CreatedAt).UTC()}
	if r.LastUsed.Valid {
		t := time.UnixMicro(r.LastUsed.Int64).UTC()
		a.LastUsedAt = &t
	}
	if r.Revoked.Valid {
		t := time.UnixMicro(r.Revoked.Int64).UTC()
		a.RevokedAt = &t
	}
	return a
}

// auditAdmin is an admin as the audit log keeps it: never its token.
type auditAdmin struct {
	Name string `json:"name"`
	Role string `json:"role"`
	Note string `json:"note"`
}

func adminAuditJSON(a *policy.Admin) any {
	if a == nil {
		return nil
	}
	return auditObject(auditAdmin{Name: a.Name, Role: a.Role.String(), Note: a.Note})
}

// adminInTx reads the admin name in tx, revoked or not; nil for none.
func adminInTx(tx *writeTx, name string) (*policy.Admin, error) {
	var r adminRow
	err := tx.queryRowSQL(`SELECT `+adminColumns+` FROM admins WHERE name = ?`, name).Scan(r.scanArgs()...)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, unavailable(err)
	}
	a := r.admin()
	return &a, nil
}

// CreateAdmin implements policy.AdminStore.
func (s *Store) CreateAdmin(ctx context.Context, a policy.Admin, tokenHash [32]byte) error {
	if err := policy.ValidateAdmin(&a); err != nil {
		return err
	}
	audit := auditBy(ctx, a.CreatedAt)
	return s.writer.do(ctx, func(tx *writeTx) error {
		if err := tx.lockAdmin(); err != nil {
			return err
		}
		old, err := adminInTx(tx, a.Name)
		if err != nil {
			return err
		}
		if old != nil && old.RevokedAt == nil {
			return policy.Errorf(policy.ECONFLICT, "name %s is in use by another admin", policy.Quote(a.Name))
		}
		if old != nil {
			// A revoked admin's name is given anew: the row, and with it
			// the only trace of the old token, goes.
			if _, err := tx.execSQL(`DELETE FROM admins WHERE name = ?`, a.Name); err != nil {
				return unavailable(err)
			}
		}
		_, err = tx.execSQL(`INSERT INTO admins (name, role, note, token_hash, created_at) VALUES (?, ?, ?, ?, ?)`,
			a.Name, a.Role.String(), a.Note, tokenHash[:], a.CreatedAt.UnixMicro())
		if err != nil {
			return unavailable(err)
		}
		return audit.insert(tx, auditEntry{kind: policy.AuditAdmins, subject: a.Name, action: policy.AuditCreated, new: adminAuditJSON(&a)})
	})
}

// Admins implements policy.AdminStore on the read pool.
func (s *Store) Admins(ctx context.Context) ([]policy.Admin, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+adminColumns+` FROM admins ORDER BY name`)
	if err != nil {
		return nil, unavailable(err)
	}
	defer rows.Close()
	out := []policy.Admin{}
	for rows.Next() {
		var r adminRow
		if err := rows.Scan(r.scanArgs()...); err != nil {
			return nil, unavailable(err)
		}
		out = append(out, r.admin())
	}
	return out, unavailable(rows.Err())
}

// AdminByTokenHash implements policy.AdminStore: one indexed read on the
// read pool, which sees every commit made before it, this process's or
// another replica's, so a revocation holds from the next request on.
func (s *Store) AdminByTokenHash(ctx context.Context, h [32]byte) (policy.Admin, error) {
	var r adminRow
	err := s.db.QueryRowContext(ctx, s.d.bind(`SELECT `+adminColumns+` FROM admins WHERE token_hash = ? AND revoked_at IS NULL`), h[:]).Scan(r.scanArgs()...)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return policy.Admin{}, policy.Errorf(policy.ENOTFOUND, "no such admin")
	case err != nil:
		return policy.Admin{}, unavailable(err)
	}
	return r.admin(), nil
}

// UpdateAdmin implements policy.AdminStore in one writer transaction under
// the admin lock, so that two admins demoting each other at once cannot
// both succeed and leave no one of RoleAdmin.
func (s *Store) UpdateAdmin(ctx context.Context, name string, role policy.Role, revoke bool, at time.Time) (policy.Admin, error) {
	audit := auditBy(ctx, at)
	var out policy.Admin
	err := s.writer.do(ctx, func(tx *writeTx) error {
		if err := tx.lockAdmin(); err != nil {
			return err
		}
		old, err := adminInTx(tx, name)
		if err != nil {
			return err
		}
		if old == nil || old.RevokedAt != nil {
			return policy.Errorf(policy.ENOTFOUND, "admin %s not found", policy.Quote(name))
		}
		a := *old
		if revoke {
			a.RevokedAt = &at
		} else {
			a.Role = role
		}
		if old.Role == policy.RoleAdmin && (revoke || role != policy.RoleAdmin) {
			var n int64
			if err := tx.queryRowSQL(`SELECT count(*) FROM admins WHERE role = 'admin' AND revoked_at IS NULL`).Scan(&n); err != nil {
				return unavailable(err)
			}
			if n <= 1 {
				return policy.Errorf(policy.ECONFLICT, "admin %s is the last of role admin: make another admin first", policy.Quote(name))
			}
		}
		e := auditEntry{kind: policy.AuditAdmins, subject: name, old: adminAuditJSON(old)}
		if revoke {
			_, err = tx.execSQL(`UPDATE admins SET revoked_at = ? WHERE name = ?`, at.UnixMicro(), name)
			if err == nil {
				// Its page sessions end with it (the page also asks for the
				// admin on every request, so none outlives this commit).
				_, err = tx.execSQL(`DELETE FROM admin_sessions WHERE admin_name = ?`, name)
			}
			e.action = policy.AuditRevoked
		} else {
			_, err = tx.execSQL(`UPDATE admins SET role = ? WHERE name = ?`, role.String(), name)
			e.action, e.new = policy.AuditUpdated, adminAuditJSON(&a)
		}
		if err != nil {
			return unavailable(err)
		}
		out = a
		return audit.insert(tx, e)
	})
	return out, err
}

// TouchAdmin implements policy.AdminStore. A later use already recorded,
// by a replica whose clock is ahead, stays.
func (s *Store) TouchAdmin(ctx context.Context, name string, at time.Time) error {
	us := at.UnixMicro()
	return s.writer.do(ctx, func(tx *writeTx) error {
		_, err := tx.execSQL(`UPDATE admins SET last_used_at = ?1 WHERE name = ?2 AND (last_used_at IS NULL OR last_used_at < ?1)`, us, name)
		return unavailable(err)
	})
}
