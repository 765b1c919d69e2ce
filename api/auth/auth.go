// Package auth checks the service's bearer tokens and counts wrong admin
// tokens per client. The JSON API and the admin page both check tokens here,
// so a wrong admin token counts the same wherever it is sent.
package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// Token is a secret kept only as its SHA-256 hash. It is compared as a hash
// in constant time, so the time a comparison takes says nothing about the
// content or the length of a guess. Its zero value matches nothing; it is
// safe for concurrent use.
type Token struct {
	hash [sha256.Size]byte
}

// NewToken returns the Token for secret. An empty secret matches nothing.
func NewToken(secret string) Token {
	return Token{hash: sha256.Sum256([]byte(secret))}
}

// Matches reports whether got is the token. An empty got never matches.
func (t Token) Matches(got string) bool {
	h := sha256.Sum256([]byte(got))
	return got != "" && subtle.ConstantTimeCompare(h[:], t.hash[:]) == 1
}

// BearerToken returns the token of r's "Authorization: Bearer <token>"
// header, or "" when it has none.
func BearerToken(r *http.Request) string {
	scheme, token, ok := strings.Cut(r.Header.Get(echo.HeaderAuthorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.Trim(token, " \t")
}

// Gate admits the holder of the admin token, and refuses a client that sent
// too many wrong ones (MaxFailures within Window) without looking at its token. It is
// safe for concurrent use.
type Gate struct {
	token    Token
	throttle throttle
}

// NewGate returns a Gate for adminToken; an empty one admits no one.
func NewGate(adminToken string) *Gate {
	return &Gate{token: NewToken(adminToken)}
}

// Admit reports whether token is the admin token, sent by client at now.
// A client with too many recent wrong tokens is refused whatever it sent:
// retryAfter is then the whole seconds, rounded up, until it may try again,
// and 0 otherwise.
func (g *Gate) Admit(client, token string, now time.Time) (ok bool, retryAfter int64) {
	wait, allowed := g.throttle.attempt(client, now)
	if !allowed {
		return false, int64((wait + time.Second - 1) / time.Second)
	}
	if !g.token.Matches(token) {
		return false, 0
	}
	g.throttle.succeeded(client)
	return true, 0
}

// Client returns the client that wrong admin tokens are counted against:
// the request's address as Echo's IP extractor gives it (the connection's,
// or the nearest untrusted one in X-Forwarded-For when the request came
// through a proxy the operator named), and for IPv6 its /64, which is what
// one subscriber usually gets.
func Client(c echo.Context) string {
	ip := net.ParseIP(c.RealIP())
	if ip == nil {
		return c.RealIP()
	}
	if ip.To4() == nil {
		return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
	return ip.String()
}
