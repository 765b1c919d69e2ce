package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/policyguard/policyguard/policy"
)

var _ policy.KeyStore = (*Store)(nil)

// keyColumns are the columns of gateway_keys that make a policy.Key.
const keyColumns = `id, user_id, service, note, created_at, last_used_at`

// keyRow is a row of gateway_keys, without its secret's hash.
type keyRow struct {
	ID        string
	UserID    sql.NullString
	Service   bool
	Note      string
	CreatedAt int64 // unix microseconds
	LastUsed  sql.NullInt64
}

func (r *keyRow) scanArgs() []any {
	return []any{&r.ID, &r.UserID, &r.Service, &r.Note, &r.CreatedAt, &r.LastUsed}
}

func (r *keyRow) key() policy.Key {
	k := policy.Key{ID: r.ID, UserID: r.UserID.String, Service: r.Service, Note: r.Note, CreatedAt: time.UnixMicro(r.CreatedAt).UTC()}
	if r.LastUsed.Valid {
		t := time.UnixMicro(r.LastUsed.Int64).UTC()
		k.LastUsedAt = &t
	}
	return k
}

// PutKey implements policy.KeyStore.
func (s *Store) PutKey(ctx context.Context, k policy.Key, secretHash [32]byte) error {
	userID := sql.NullString{String: k.UserID, Valid: !k.Service}
	var lastUsed sql.NullInt64
	if k.LastUsedAt != nil {
		lastUsed = sql.NullInt64{Int64: k.LastUsedAt.UnixMicro(), Valid: true}
	}
	audit := auditBy(ctx, k.CreatedAt)
	return s.writer.do(ctx, func(tx *writeTx) error {
		_, err := tx.conn.ExecContext(tx.ctx, tx.d.bind(`INSERT INTO gateway_keys (id, secret_hash, user_id, service, note, created_at, last_used_at) VALUES (?, ?, ?, ?, ?, ?, ?)`),
			k.ID, secretHash[:], userID, k.Service, k.Note, k.CreatedAt.UnixMicro(), lastUsed)
		if err != nil {
			return unavailable(err)
		}
		return audit.insert(tx, auditEntry{kind: policy.AuditKeys, subject: k.ID, action: policy.AuditCreated, new: keyAuditJSON(&k)})
	})
}

// Keys implements policy.KeyStore on the read pool.
func (s *Store) Keys(ctx context.Context, userID string) ([]policy.Key, error) {
	q, args := `SELECT `+keyColumns+` FROM gateway_keys WHERE user_id IS NULL ORDER BY created_at, id`, []any(nil)
	if userID != "" {
		q, args = `SELECT `+keyColumns+` FROM gateway_keys WHERE user_id = ? ORDER BY created_at, id`, []any{userID}
	}
	rows, err := s.db.QueryContext(ctx, s.d.bind(q), args...)
	if err != nil {
		return nil, unavailable(err)
	}
	defer rows.Close()
	out := []policy.Key{}
	for rows.Next() {
		var r keyRow
		if err := rows.Scan(r.scanArgs()...); err != nil {
			return nil, unavailable(err)
		}
		out = append(out, r.key())
	}
	return out, unavailable(rows.Err())
}

// DeleteKey implements policy.KeyStore: the row goes, and with it the
// only trace of the secret.
func (s *Store) DeleteKey(ctx context.Context, id string) error {
	audit := auditBy(ctx, policy.ChangeTime(ctx))
	return s.writer.do(ctx, func(tx *writeTx) error {
		var r keyRow
		err := tx.queryRowSQL(`SELECT `+keyColumns+` FROM gateway_keys WHERE id = ?`, id).Scan(r.scanArgs()...)
		if errors.Is(err, sql.ErrNoRows) {
			return policy.Errorf(policy.ENOTFOUND, "key %s does not exist", policy.Quote(id))
		} else if err != nil {
			return unavailable(err)
		}
		if _, err := tx.execSQL(`DELETE FROM gateway_keys WHERE id = ?`, id); err != nil {
			return unavailable(err)
		}
		k := r.key()
		return audit.insert(tx, auditEntry{kind: policy.AuditKeys, subject: id, action: policy.AuditRevoked, old: keyAuditJSON(&k)})
	})
}

// auditKey is a key as the audit log keeps it: never its secret.
type auditKey struct {
	ID      string `json:"id"`
	UserID  string `json:"user_id,omitempty"`
	Service bool   `json:"service"`
	Note    string `json:"note"`
}

func keyAuditJSON(k *policy.Key) any {
	return auditObject(auditKey{ID: k.ID, UserID: k.UserID, Service: k.Service, Note: k.Note})
}

// prepareKeyRead prepares KeyBySecretHash's statement on the read pool: it
// runs on every gateway request, and on SQLite preparing it each time
// would double its cost (about 7 µs against 13).
func (s *Store) prepareKeyRead(ctx context.Context) error {
	text := s.d.bind(`SELECT ` + keyColumns + ` FROM gateway_keys WHERE secret_hash = ?`)
	st, err := s.db.PrepareContext(ctx, text)
	if err != nil {
		return fmt.Errorf("prepare %q: %w", text, err)
	}
	s.keyRead = st
	return nil
}

// KeyBySecretHash implements policy.KeyStore: one indexed read on the read
// pool, which sees every commit made before it, this process's or
// another's.
func (s *Store) KeyBySecretHash(ctx context.Context, h [32]byte) (policy.Key, error) {
	var r keyRow
	err := s.keyRead.QueryRowContext(ctx, h[:]).Scan(r.scanArgs()...)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return policy.Key{}, policy.Errorf(policy.ENOTFOUND, "no such key")
	case err != nil:
		return policy.Key{}, unavailable(err)
	}
	return r.key(), nil
}

// TouchKey implements policy.KeyStore. A later use already recorded, by a
// replica whose clock is ahead, stays.
func (s *Store) TouchKey(ctx context.Context, id string, at time.Time) error {
	us := at.UnixMicro()
	return s.writer.do(ctx, func(tx *writeTx) error {
		_, err := tx.conn.ExecContext(tx.ctx, tx.d.bind(`UPDATE gateway_keys SET last_used_at = ?1 WHERE id = ?2 AND (last_used_at IS NULL OR last_used_at < ?1)`), us, id)
		return unavailable(err)
	})
}
