package web

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"sync"
	"time"

	"github.com/policyguard/policyguard/policy"
)

const (
	// SessionTTL is how long an admin page session lasts after sign-in.
	SessionTTL = 12 * time.Hour
	// adminSessionCookie names the cookie that carries the session id.
	adminSessionCookie = "policyguard_admin"
)

// adminSession is one signed-in browser.
type adminSession struct {
	csrf    string // the token every form of this session carries
	expires time.Time
	admin   policy.Admin // who signed in, as stored now
}

// adminSessions keeps admin page sessions in a policy.SessionStore (the
// database, so that they outlive a restart), keyed by the SHA-256 of the
// session id: the ids themselves are never held. A session signed in with
// another admin token than the current one is ended. Flash messages, shown
// once after a redirect, stay in memory. It is safe for concurrent use.
type adminSessions struct {
	store     policy.SessionStore
	adminHash [sha256.Size]byte
	// named returns the live named admin, read from the store on every
	// request of its session, so that a revoked admin's session ends at
	// once on every replica.
	named func(ctx context.Context, name string) (policy.Admin, error)

	mu      sync.Mutex
	flashes map[[sha256.Size]byte]string
}

func newAdminSessions(store policy.SessionStore, adminHash [sha256.Size]byte, named func(context.Context, string) (policy.Admin, error)) *adminSessions {
	if store == nil {
		store = &memSessions{}
	}
	return &adminSessions{store: store, adminHash: adminHash, named: named, flashes: make(map[[sha256.Size]byte]string)}
}

// namedHash fingerprints a named admin for its sessions: a revoked name
// given to a new admin does not inherit the sessions of the old one.
func namedHash(a policy.Admin) [sha256.Size]byte {
	return sha256.Sum256([]byte("policyguard admin session\x00" + a.Name + "\x00" + a.CreatedAt.UTC().Format(time.RFC3339Nano)))
}

// create starts a session of who lasting SessionTTL from now and returns
// its id, to be sent in the cookie.
func (ss *adminSessions) create(ctx context.Context, who policy.Admin, now time.Time) (id string, sess adminSession, err error) {
	id, sess = newSecretToken(), adminSession{csrf: newSecretToken(), expires: now.Add(SessionTTL), admin: who}
	rec := policy.AdminSession{IDHash: sha256.Sum256([]byte(id)), AdminHash: ss.adminHash, CSRF: sess.csrf, Expires: sess.expires}
	if who.Name != policy.BootstrapAdmin {
		rec.AdminName, rec.AdminHash = who.Name, namedHash(who)
	}
	err = ss.store.CreateSession(ctx, rec, now)
	return id, sess, err
}

// get returns the session with id if it exists, has not expired at now and
// was signed in with the current admin token, or by a named admin who is
// still live. It fails only when the store does.
func (ss *adminSessions) get(ctx context.Context, id string, now time.Time) (adminSession, bool, error) {
	if id == "" {
		return adminSession{}, false, nil
	}
	k := sha256.Sum256([]byte(id))
	s, err := ss.store.Session(ctx, k)
	if policy.ErrorCode(err) == policy.ENOTFOUND {
		return adminSession{}, false, nil
	} else if err != nil {
		return adminSession{}, false, err
	}
	who, want := policy.Admin{Name: policy.BootstrapAdmin, Role: policy.RoleAdmin}, ss.adminHash
	if s.AdminName != "" {
		if ss.named == nil {
			return adminSession{}, false, ss.store.EndSession(ctx, k)
		}
		who, err = ss.named(ctx, s.AdminName)
		if policy.ErrorCode(err) == policy.ENOTFOUND {
			return adminSession{}, false, ss.store.EndSession(ctx, k)
		} else if err != nil {
			return adminSession{}, false, err
		}
		want = namedHash(who)
	}
	if !now.Before(s.Expires) || subtle.ConstantTimeCompare(s.AdminHash[:], want[:]) != 1 {
		return adminSession{}, false, ss.store.EndSession(ctx, k)
	}
	return adminSession{csrf: s.CSRF, expires: s.Expires, admin: who}, true, nil
}

// end deletes the session with id, if any, wherever it is used.
func (ss *adminSessions) end(ctx context.Context, id string) error {
	k := sha256.Sum256([]byte(id))
	ss.mu.Lock()
	delete(ss.flashes, k)
	ss.mu.Unlock()
	return ss.store.EndSession(ctx, k)
}

// setFlash stores msg for the session's next page.
func (ss *adminSessions) setFlash(id, msg string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.flashes) >= 1024 { // flashes are taken by the next page: old ones are abandoned
		clear(ss.flashes)
	}
	ss.flashes[sha256.Sum256([]byte(id))] = msg
}

// takeFlash returns and clears the session's flash message.
func (ss *adminSessions) takeFlash(id string) string {
	k := sha256.Sum256([]byte(id))
	ss.mu.Lock()
	defer ss.mu.Unlock()
	msg := ss.flashes[k]
	delete(ss.flashes, k)
	return msg
}

// validCSRF reports whether token is the session's CSRF token, comparing in
// constant time.
func (s *adminSession) validCSRF(token string) bool {
	return token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(s.csrf)) == 1
}

// newSecretToken returns 32 random bytes, base64url-encoded.
func newSecretToken() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails: crypto/rand panics rather than return an error
	return base64.RawURLEncoding.EncodeToString(b)
}

// memSessions is a policy.SessionStore in memory, for an Admin given none:
// its sessions end with the process. Its zero value is empty and ready.
type memSessions struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]policy.AdminSession
}

func (ms *memSessions) CreateSession(_ context.Context, s policy.AdminSession, now time.Time) error {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.m == nil {
		ms.m = make(map[[sha256.Size]byte]policy.AdminSession)
	}
	for k, old := range ms.m {
		if !now.Before(old.Expires) {
			delete(ms.m, k)
		}
	}
	ms.m[s.IDHash] = s
	return nil
}

func (ms *memSessions) Session(_ context.Context, idHash [sha256.Size]byte) (policy.AdminSession, error) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	s, ok := ms.m[idHash]
	if !ok {
		return policy.AdminSession{}, policy.Errorf(policy.ENOTFOUND, "no such session")
	}
	return s, nil
}

func (ms *memSessions) EndSession(_ context.Context, idHash [sha256.Size]byte) error {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	delete(ms.m, idHash)
	return nil
}

func (ms *memSessions) EndSessionsExcept(_ context.Context, adminHash [sha256.Size]byte) error {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	for k, s := range ms.m {
		if s.AdminName == "" && s.AdminHash != adminHash {
			delete(ms.m, k)
		}
	}
	return nil
}
