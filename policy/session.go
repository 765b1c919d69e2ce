package policy

import (
	"context"
	"crypto/sha256"
	"time"
)

// AdminSession is one signed-in admin page session as stored: never its
// token, only the token's SHA-256.
type AdminSession struct {
	// IDHash is the SHA-256 of the token the browser's cookie carries.
	IDHash [sha256.Size]byte
	// AdminHash fingerprints the admin token the session signed in with; a
	// session whose fingerprint is not the current token's is ended.
	AdminHash [sha256.Size]byte
	// AdminName is the named admin who signed in, "" for the built-in
	// admin (the admin token); the page asks for the admin on every
	// request, so a revoked admin's session ends at once.
	AdminName string
	// CSRF is the token every form of the session carries.
	CSRF    string
	Expires time.Time
}

// SessionStore keeps admin page sessions, so that they outlive a restart
// and end everywhere at once. Implementations are safe for concurrent use.
type SessionStore interface {
	// CreateSession stores s, and deletes the sessions expired at now.
	CreateSession(ctx context.Context, s AdminSession, now time.Time) error
	// Session returns the session whose IDHash is idHash, or an ENOTFOUND
	// error; it does not judge expiry.
	Session(ctx context.Context, idHash [sha256.Size]byte) (AdminSession, error)
	// EndSession deletes the session whose IDHash is idHash, if any.
	EndSession(ctx context.Context, idHash [sha256.Size]byte) error
	// EndSessionsExcept deletes every session of the built-in admin
	// (AdminName "") whose AdminHash is not adminHash: those of a former
	// admin token.
	EndSessionsExcept(ctx context.Context, adminHash [sha256.Size]byte) error
}
