package api

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
)

const (
	// AdminSessionTTL is how long an admin page session lasts after sign-in.
	AdminSessionTTL = 12 * time.Hour
	// adminSessionCookie names the cookie that carries the session id.
	adminSessionCookie = "policyguard_admin"
	// SignInMaxFailures is how many wrong tokens one client may send within
	// SignInWindow before further sign-ins are refused until the window
	// passes.
	SignInMaxFailures = 5
	// SignInWindow is the period over which failed sign-ins are counted.
	SignInWindow = 15 * time.Minute
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

// create starts a session lasting AdminSessionTTL from now and returns its
// id, to be sent in the cookie.
func (ss *adminSessions) create(now time.Time) (id string, sess adminSession) {
	id, sess = newSecretToken(), adminSession{csrf: newSecretToken(), expires: now.Add(AdminSessionTTL)}
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

// throttleKey returns the client that wrong admin tokens are counted
// against: the client's address as the server's IPExtractor finds it (the
// connection's, or with -trusted-proxies the nearest X-Forwarded-For
// address no trusted proxy holds, so that an untrusted sender cannot claim
// a fresh address for each attempt), and for IPv6 its /64, which is what
// one subscriber usually gets.
func throttleKey(c echo.Context) string {
	ip := net.ParseIP(c.RealIP())
	if ip == nil {
		return c.RealIP()
	}
	if ip.To4() == nil {
		return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
	return ip.String()
}

// signInThrottle limits failed sign-ins per client: after SignInMaxFailures
// within SignInWindow, attempts are refused until the oldest of them leaves
// the window. It is safe for concurrent use; its zero value is ready.
type signInThrottle struct {
	mu        sync.Mutex
	failures  map[string][]time.Time // by client, oldest first
	lastSweep time.Time
}

// attempt reports whether client may try to sign in at now, and if not, how
// long until it may. An allowed attempt counts as a failure until succeeded
// is called, so that concurrent attempts cannot slip past the limit while
// their tokens are being compared.
func (t *signInThrottle) attempt(client string, now time.Time) (wait time.Duration, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failures == nil {
		t.failures = make(map[string][]time.Time)
	}
	// Sweep when many clients are tracked, at most once a minute, so that
	// attempts from many addresses cannot make each attempt cost them all.
	if len(t.failures) > 4096 && now.Sub(t.lastSweep) >= time.Minute {
		t.sweep(now)
		t.lastSweep = now
	}
	fs := recentFailures(t.failures[client], now)
	if len(fs) >= SignInMaxFailures {
		t.failures[client] = fs
		return fs[len(fs)-SignInMaxFailures].Add(SignInWindow).Sub(now), false
	}
	t.failures[client] = append(fs, now)
	return 0, true
}

// succeeded forgets client's failures: it has signed in.
func (t *signInThrottle) succeeded(client string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.failures, client)
}

// sweep drops the clients whose failures have all left the window.
func (t *signInThrottle) sweep(now time.Time) {
	for c, fs := range t.failures {
		if len(recentFailures(fs, now)) == 0 {
			delete(t.failures, c)
		}
	}
}

// recentFailures returns the failures in fs still inside the window at now.
func recentFailures(fs []time.Time, now time.Time) []time.Time {
	cutoff := now.Add(-SignInWindow)
	i := 0
	for i < len(fs) && !fs[i].After(cutoff) {
		i++
	}
	return fs[i:]
}
