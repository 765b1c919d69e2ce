package web

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"sync"
	"time"
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
	flash   string // shown once by the next page, after a redirect
}

// adminSessions keeps admin page sessions in memory: they end with the
// process, which only asks the admin to sign in again. It is keyed by a hash
// of the session id, so the ids themselves are never held. It is safe for
// concurrent use; its zero value is empty and ready.
type adminSessions struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]*adminSession
}

// create starts a session lasting SessionTTL from now and returns its
// id, to be sent in the cookie.
func (ss *adminSessions) create(now time.Time) (id string, sess adminSession) {
	id, sess = newSecretToken(), adminSession{csrf: newSecretToken(), expires: now.Add(SessionTTL)}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.m == nil {
		ss.m = make(map[[sha256.Size]byte]*adminSession)
	}
	// Drop ended sessions here, so that the map stays as small as the number
	// of admins signed in without a background goroutine.
	for k, s := range ss.m {
		if !now.Before(s.expires) {
			delete(ss.m, k)
		}
	}
	stored := sess
	ss.m[sha256.Sum256([]byte(id))] = &stored
	return id, sess
}

// get returns the session with id if it exists and has not expired at now.
func (ss *adminSessions) get(id string, now time.Time) (adminSession, bool) {
	if id == "" {
		return adminSession{}, false
	}
	k := sha256.Sum256([]byte(id))
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s, ok := ss.m[k]
	if !ok {
		return adminSession{}, false
	}
	if !now.Before(s.expires) {
		delete(ss.m, k)
		return adminSession{}, false
	}
	return *s, true
}

// end deletes the session with id, if any.
func (ss *adminSessions) end(id string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.m, sha256.Sum256([]byte(id)))
}

// setFlash stores msg for the session's next page.
func (ss *adminSessions) setFlash(id, msg string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if s, ok := ss.m[sha256.Sum256([]byte(id))]; ok {
		s.flash = msg
	}
}

// takeFlash returns and clears the session's flash message.
func (ss *adminSessions) takeFlash(id string) string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s, ok := ss.m[sha256.Sum256([]byte(id))]
	if !ok {
		return ""
	}
	msg := s.flash
	s.flash = ""
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
