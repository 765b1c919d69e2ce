package db

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"time"

	"github.com/policyguard/policyguard/policy"
)

var _ policy.SessionStore = (*Store)(nil)

// CreateSession implements policy.SessionStore.
func (s *Store) CreateSession(ctx context.Context, sess policy.AdminSession, now time.Time) error {
	return s.writer.do(ctx, func(tx *writeTx) error {
		if _, err := tx.conn.ExecContext(tx.ctx, tx.d.bind(`DELETE FROM admin_sessions WHERE expires_at <= ?`), now.UnixMicro()); err != nil {
			return unavailable(err)
		}
		_, err := tx.conn.ExecContext(tx.ctx, tx.d.bind(`INSERT INTO admin_sessions (id_hash, admin_hash, admin_name, csrf, expires_at) VALUES (?, ?, ?, ?, ?)`),
			sess.IDHash[:], sess.AdminHash[:], sess.AdminName, sess.CSRF, sess.Expires.UnixMicro())
		return unavailable(err)
	})
}

// Session implements policy.SessionStore.
func (s *Store) Session(ctx context.Context, idHash [sha256.Size]byte) (policy.AdminSession, error) {
	var (
		admin   []byte
		name    string
		csrf    string
		expires int64
	)
	err := s.db.QueryRowContext(ctx, s.d.bind(`SELECT admin_hash, admin_name, csrf, expires_at FROM admin_sessions WHERE id_hash = ?`), idHash[:]).
		Scan(&admin, &name, &csrf, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return policy.AdminSession{}, policy.Errorf(policy.ENOTFOUND, "no such session")
	} else if err != nil {
		return policy.AdminSession{}, unavailable(err)
	}
	sess := policy.AdminSession{IDHash: idHash, AdminName: name, CSRF: csrf, Expires: time.UnixMicro(expires).UTC()}
	copy(sess.AdminHash[:], admin)
	return sess, nil
}

// EndSession implements policy.SessionStore.
func (s *Store) EndSession(ctx context.Context, idHash [sha256.Size]byte) error {
	return s.writer.do(ctx, func(tx *writeTx) error {
		_, err := tx.conn.ExecContext(tx.ctx, tx.d.bind(`DELETE FROM admin_sessions WHERE id_hash = ?`), idHash[:])
		return unavailable(err)
	})
}

// EndSessionsExcept implements policy.SessionStore.
func (s *Store) EndSessionsExcept(ctx context.Context, adminHash [sha256.Size]byte) error {
	return s.writer.do(ctx, func(tx *writeTx) error {
		_, err := tx.conn.ExecContext(tx.ctx, tx.d.bind(`DELETE FROM admin_sessions WHERE admin_name = '' AND admin_hash <> ?`), adminHash[:])
		return unavailable(err)
	})
}

// pruneSessions deletes the sessions expired at now.
func (s *Store) pruneSessions(ctx context.Context, now time.Time) (int64, error) {
	var n int64
	err := s.writer.do(ctx, func(tx *writeTx) error {
		res, err := tx.conn.ExecContext(tx.ctx, tx.d.bind(`DELETE FROM admin_sessions WHERE expires_at <= ?`), now.UnixMicro())
		if err != nil {
			return unavailable(err)
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return n, err
}
