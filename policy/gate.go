package policy

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"time"
)

// Secret is a bearer token kept only as its SHA-256 hash. It is compared
// as a hash in constant time, so the time a comparison takes says nothing
// about the content or the length of a guess. Its zero value matches
// nothing; it is safe for concurrent use.
type Secret struct {
	hash [sha256.Size]byte
}

// NewSecret returns the Secret for token. An empty token matches nothing.
func NewSecret(token string) Secret {
	return Secret{hash: sha256.Sum256([]byte(token))}
}

// Matches reports whether got is the secret. An empty got never matches.
func (s Secret) Matches(got string) bool {
	h := sha256.Sum256([]byte(got))
	return got != "" && subtle.ConstantTimeCompare(h[:], s.hash[:]) == 1
}

// AdminGate admits the holder of the admin token, and refuses a client
// that sent too many wrong ones (MaxAdminFailures within
// AdminFailureWindow) without looking at its token. The JSON API and the
// admin page check the admin token through one AdminGate, so that a wrong
// token counts the same wherever it is sent and neither is a way around
// the other's throttle. The failures are kept in memory: a restart forgets
// them. It is safe for concurrent use.
type AdminGate struct {
	token    Secret
	throttle throttle
}

// NewAdminGate returns an AdminGate for adminToken; an empty one admits no
// one.
func NewAdminGate(adminToken string) *AdminGate {
	return &AdminGate{token: NewSecret(adminToken)}
}

// Admit reports whether token is the admin token, sent at now from the
// client at address addr (an IP address, as the HTTP layer determined it).
// Wrong tokens are counted per client: an IPv4 address, or for IPv6 its
// /64, which is what one subscriber usually gets. A client with too many
// recent wrong tokens is refused whatever it sent: retryAfter is then the
// whole seconds, rounded up, until it may try again, and 0 otherwise.
//
// A request with no token is refused without counting: it guesses
// nothing, and counting it would let anyone sharing an address (behind NAT,
// or a proxy not named as trusted) lock out the admins there for free.
func (g *AdminGate) Admit(addr, token string, now time.Time) (ok bool, retryAfter int64) {
	if token == "" {
		return false, 0
	}
	client := clientKey(addr)
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

// SignIn returns the admin whose token this is, sent at now from the
// client at addr: BootstrapAdmin, of RoleAdmin, for the admin token, or
// the live named admin svc finds (Service.AdminByToken). Wrong tokens are
// counted and throttled as by Admit, whichever kind of token was meant:
// retryAfter is then positive and the error EUNAUTHORIZED. A missing,
// wrong or revoked token is an EUNAUTHORIZED error; a storage failure
// is returned as it is, and counts as a wrong token.
func (g *AdminGate) SignIn(ctx context.Context, svc *Service, addr, token string, now time.Time) (a Admin, retryAfter int64, err error) {
	unauthorized := Errorf(EUNAUTHORIZED, "missing or wrong admin token")
	if token == "" {
		return Admin{}, 0, unauthorized
	}
	client := clientKey(addr)
	wait, allowed := g.throttle.attempt(client, now)
	if !allowed {
		return Admin{}, int64((wait + time.Second - 1) / time.Second), unauthorized
	}
	if g.token.Matches(token) {
		g.throttle.succeeded(client)
		return Admin{Name: BootstrapAdmin, Role: RoleAdmin}, 0, nil
	}
	a, err = svc.AdminByToken(ctx, token)
	switch {
	case ErrorCode(err) == ENOTFOUND:
		return Admin{}, 0, unauthorized
	case err != nil:
		return Admin{}, 0, err
	}
	g.throttle.succeeded(client)
	return a, 0, nil
}

// Fingerprint returns a hash of the admin token for records that must end
// when the token changes, such as admin page sessions. It reveals no more
// of the token than the SHA-256 the AdminGate holds.
func (g *AdminGate) Fingerprint() [sha256.Size]byte {
	return sha256.Sum256(append([]byte("policyguard admin session\x00"), g.token.hash[:]...))
}

// clientKey returns what wrong admin tokens from addr are counted against:
// the address itself, or for IPv6 its /64. Anything that does not parse
// as an address counts as itself.
func clientKey(addr string) string {
	ip := net.ParseIP(addr)
	if ip == nil {
		return addr
	}
	if ip.To4() == nil {
		return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
	return ip.String()
}
