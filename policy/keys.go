package policy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// KeyPrefix begins the secret of every gateway key, so that one is known
// for what it is wherever it turns up (a log, a paste, a secret scanner).
// A secret is KeyPrefix and 32 base64url characters: 192 random bits.
const KeyPrefix = "pgk_"

// keyIDPrefix begins the public id of every gateway key.
const keyIDPrefix = "key_"

const (
	keySecretBytes = 24 // random bytes of a secret
	keyIDBytes     = 9  // random bytes of an id: a name, not a secret
)

var (
	keySecretLen = len(KeyPrefix) + base64.RawURLEncoding.EncodedLen(keySecretBytes)
	keyIDLen     = len(keyIDPrefix) + base64.RawURLEncoding.EncodedLen(keyIDBytes)
)

// KeyUseInterval is how often at most a process records that a key was
// used (Key.LastUsedAt): once within it is enough to tell a live key from
// a forgotten one, and more would be a write per gateway request.
const KeyUseInterval = time.Minute

// Key is a gateway key: the user it speaks for, or a service key that names
// the user per request. Its secret is not part of it: the service shows the
// secret once, when it creates the key, and keeps only its SHA-256.
type Key struct {
	ID         string // public id, "key_" and 12 base64url characters; used in URLs
	UserID     string // "" for a service key
	Service    bool
	Note       string
	CreatedAt  time.Time
	LastUsedAt *time.Time // nil until first used
}

// KeyStore keeps gateway keys; only the SHA-256 of a secret is ever
// stored. Implementations are safe for concurrent use, and a change is
// seen at once by every process sharing the storage.
type KeyStore interface {
	// PutKey stores k, whose secret's SHA-256 is secretHash.
	PutKey(ctx context.Context, k Key, secretHash [32]byte) error
	// Keys returns userID's keys, or the service keys when userID is
	// empty, oldest first.
	Keys(ctx context.Context, userID string) ([]Key, error)
	// DeleteKey removes the key with this id for good: its secret can
	// never be used again. An unknown id is an ENOTFOUND error.
	DeleteKey(ctx context.Context, id string) error
	// KeyBySecretHash returns the key whose secret's SHA-256 is h, as
	// stored now, or an ENOTFOUND error (a revoked key is gone).
	KeyBySecretHash(ctx context.Context, h [32]byte) (Key, error)
	// TouchKey records that the key with this id was used at at, unless
	// a later use is recorded already; an unknown id is no error.
	TouchKey(ctx context.Context, id string, at time.Time) error
}

// WithKeys makes the service keep gateway keys in ks. Without it the
// service has none, and its key methods fail with EINTERNAL.
func WithKeys(ks KeyStore) Option { return func(s *Service) { s.keys = ks } }

// KeepsKeys reports whether the service has a store of gateway keys
// (WithKeys); without one its key methods fail.
func (s *Service) KeepsKeys() bool { return s.keys != nil }

// errNoKeys is the error of the key methods of a service without a store.
func errNoKeys() error {
	return Errorf(EINTERNAL, "this service keeps no gateway keys (see policy.WithKeys)")
}

// Validate reports the first problem with k as a new key, or nil: an
// EINVALID *Error whose message names the field.
func (k *Key) Validate() error {
	if errs := k.ValidateFields(); len(errs) > 0 {
		return &Error{Code: EINVALID, Message: errs[0].Message}
	}
	return nil
}

// ValidateFields returns every problem with k as a new key, in field
// order: a key has a user id or is a service key, never both, and its note
// is at most MaxNote bytes of UTF-8.
func (k *Key) ValidateFields() []FieldError {
	var errs []FieldError
	switch {
	case k.UserID != "" && k.Service:
		errs = append(errs, FieldError{"user_id", "a key has a user_id or is a service key (service true), not both"})
	case k.UserID == "" && !k.Service:
		errs = append(errs, FieldError{"user_id", "user_id is required, or service true for a service key"})
	case k.UserID != "":
		if err := ValidateUserID(k.UserID); err != nil {
			errs = append(errs, FieldError{"user_id", ErrorMessage(err)})
		}
	}
	if len(k.Note) > MaxNote {
		errs = append(errs, FieldError{"note", "note must be at most 1024 bytes"})
	} else if !utf8.ValidString(k.Note) {
		errs = append(errs, FieldError{"note", "note must be valid UTF-8"})
	}
	return errs
}

// CreateKey creates a key for userID, or a service key when service is set
// (userID must then be empty), and returns it with its secret. The secret
// is not kept: this is the only time anyone sees it.
func (s *Service) CreateKey(ctx context.Context, userID string, service bool, note string) (k Key, secret string, err error) {
	if s.keys == nil {
		return Key{}, "", errNoKeys()
	}
	k = Key{UserID: userID, Service: service, Note: note}
	if err := k.Validate(); err != nil {
		return Key{}, "", err
	}
	k.ID = keyIDPrefix + randomText(keyIDBytes)
	secret = KeyPrefix + randomText(keySecretBytes)
	k.CreatedAt = s.now().UTC().Truncate(Resolution)
	if err := s.keys.PutKey(ctx, k, sha256.Sum256([]byte(secret))); err != nil {
		return Key{}, "", err
	}
	return k, secret, nil
}

// randomText returns n bytes from crypto/rand in base64url, unpadded.
func randomText(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails: it crashes the program instead
	return base64.RawURLEncoding.EncodeToString(b)
}

// Keys returns userID's keys, or the service keys when userID is empty,
// oldest first.
func (s *Service) Keys(ctx context.Context, userID string) ([]Key, error) {
	if s.keys == nil {
		return nil, errNoKeys()
	}
	if err := ValidateUserID(userID); err != nil {
		return nil, err
	}
	return s.keys.Keys(ctx, userID)
}

// RevokeKey deletes the key with this id: from the next request on, its
// secret is refused, by every process sharing the storage. An unknown id
// is an ENOTFOUND error.
func (s *Service) RevokeKey(ctx context.Context, id string) error {
	if s.keys == nil {
		return errNoKeys()
	}
	if strings.HasPrefix(id, KeyPrefix) {
		// Someone pasted the secret: say so without repeating it.
		return Errorf(ENOTFOUND, "no key has that id: it is a key's secret (%s...), not its id (%s...)", KeyPrefix, keyIDPrefix)
	}
	notFound := Errorf(ENOTFOUND, "key %s does not exist", Quote(id))
	if !wellFormedKeyText(id, keyIDPrefix, keyIDLen) {
		return notFound
	}
	err := s.keys.DeleteKey(WithChangeTime(ctx, s.now().UTC().Truncate(Resolution)), id)
	if ErrorCode(err) == ENOTFOUND {
		return notFound
	}
	return err
}

// Authenticate returns the key whose secret this is; EUNAUTHORIZED for a
// missing, malformed, unknown or revoked secret, with a message that never
// holds the secret. It reads the store every time (a revoked key is
// refused at once on every replica) and records last_used_at at most once
// per KeyUseInterval per key, best effort: a failure to record it does not
// fail the authentication.
func (s *Service) Authenticate(ctx context.Context, secret string) (Key, error) {
	if s.keys == nil {
		return Key{}, errNoKeys()
	}
	switch {
	case secret == "":
		return Key{}, Errorf(EUNAUTHORIZED, "no gateway key was sent")
	case !wellFormedKeyText(secret, KeyPrefix, keySecretLen):
		return Key{}, Errorf(EUNAUTHORIZED, "malformed gateway key: a gateway key is %s followed by %d characters", KeyPrefix, keySecretLen-len(KeyPrefix))
	}
	k, err := s.keys.KeyBySecretHash(ctx, sha256.Sum256([]byte(secret)))
	switch {
	case ErrorCode(err) == ENOTFOUND:
		return Key{}, Errorf(EUNAUTHORIZED, "unknown or revoked gateway key")
	case err != nil:
		return Key{}, err
	}
	now := s.now().UTC().Truncate(Resolution)
	if s.keyUses.due(k.ID, k.LastUsedAt, now) {
		if s.keys.TouchKey(ctx, k.ID, now) == nil {
			k.LastUsedAt = &now
		}
	}
	return k, nil
}

// RedactKeySecrets returns s with what looks like a key's secret or an
// admin's token in it (KeyPrefix or AdminTokenPrefix followed by 16
// base64url characters or more) cut to its prefix and "[redacted]", for a
// line of a log about a URL where someone pasted one, say in place of a
// key's id or an admin's name.
func RedactKeySecrets(s string) string {
	return redactAfter(redactAfter(s, KeyPrefix), AdminTokenPrefix)
}

// redactAfter is RedactKeySecrets for one prefix.
func redactAfter(s, prefix string) string {
	i := strings.Index(s, prefix)
	if i < 0 {
		return s
	}
	var b strings.Builder
	for ; i >= 0; i = strings.Index(s, prefix) {
		n := i + len(prefix)
		j := n
		for j < len(s) && isBase64URL(s[j]) {
			j++
		}
		if j-n < 16 {
			b.WriteString(s[:j])
		} else {
			b.WriteString(s[:n] + "[redacted]")
		}
		s = s[j:]
	}
	b.WriteString(s)
	return b.String()
}

// isBase64URL reports whether c is a character of base64url.
func isBase64URL(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

// wellFormedKeyText reports whether s is prefix followed by base64url
// characters, n bytes in all: the shape of a key's id or secret.
func wellFormedKeyText(s, prefix string, n int) bool {
	if len(s) != n || s[:len(prefix)] != prefix {
		return false
	}
	for i := len(prefix); i < len(s); i++ {
		if !isBase64URL(s[i]) {
			return false
		}
	}
	return true
}

// maxKeyUses bounds keyUses: past it, a key's last recorded use may be
// forgotten, which costs at most one more write for it.
const maxKeyUses = 1 << 16

// keyUses remembers when this process last recorded each key's use, so
// that it records one at most once per KeyUseInterval. It is safe for
// concurrent use; its zero value is ready.
type keyUses struct {
	mu        sync.Mutex
	at        map[string]time.Time // key id → use last recorded
	lastSweep time.Time
}

// due reports whether a use of key id at now is to be recorded, and if so
// counts it as recorded. stored is the last use the store holds (nil for
// none), which another process may have recorded.
func (u *keyUses) due(id string, stored *time.Time, now time.Time) bool {
	// A use recorded "after" now, by a clock that went back, is recent:
	// the store keeps the later one anyway.
	recent := func(t time.Time) bool { return now.Sub(t) < KeyUseInterval }
	if stored != nil && recent(*stored) {
		return false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if last, ok := u.at[id]; ok && recent(last) {
		return false
	}
	if u.at == nil {
		u.at = make(map[string]time.Time)
	}
	if _, ok := u.at[id]; !ok && len(u.at) >= maxKeyUses {
		if now.Sub(u.lastSweep) >= KeyUseInterval {
			for k, t := range u.at {
				if !recent(t) {
					delete(u.at, k)
				}
			}
			u.lastSweep = now
		}
		for k := range u.at { // still full: forget one, in effect at random
			if len(u.at) < maxKeyUses {
				break
			}
			delete(u.at, k)
		}
	}
	u.at[id] = now
	return true
}
