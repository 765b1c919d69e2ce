package policy

// Stand-in until the keys work lands; deleted at merge.
//
// It gives the gateway the names the keys work defines, with their
// signatures, and nothing else: keys live in a map of this process, not
// in any store, and are never hashed. Do not build on it.

import (
	"context"
	"crypto/rand"
	"sync"
	"time"
)

// Key is a gateway key: the user it speaks for, or a service key that
// names the user per request.
type Key struct {
	ID         string
	UserID     string // "" for a service key
	Service    bool
	Note       string
	CreatedAt  time.Time
	LastUsedAt *time.Time
}

// KeyPrefix starts every gateway key's secret.
const KeyPrefix = "pgk_"

var standinKeys sync.Map // secret -> Key

// CreateKey makes a key for userID, or a service key.
func (s *Service) CreateKey(_ context.Context, userID string, service bool, note string) (Key, string, error) {
	if service != (userID == "") {
		return Key{}, "", Errorf(EINVALID, "a key names a user or is a service key")
	}
	if err := ValidateUserID(userID); err != nil {
		return Key{}, "", err
	}
	k := Key{ID: "key_" + rand.Text()[:16], UserID: userID, Service: service, Note: note, CreatedAt: s.now()}
	secret := KeyPrefix + rand.Text()
	standinKeys.Store(secret, k)
	return k, secret, nil
}

// RevokeKey deletes the key named id.
func (s *Service) RevokeKey(_ context.Context, id string) error {
	found := false
	standinKeys.Range(func(secret, k any) bool {
		if k.(Key).ID == id {
			standinKeys.Delete(secret)
			found = true
		}
		return true
	})
	if !found {
		return Errorf(ENOTFOUND, "key %s not found", Quote(id))
	}
	return nil
}

// Authenticate returns the key whose secret this is; EUNAUTHORIZED for a
// missing, unknown or revoked secret.
func (s *Service) Authenticate(_ context.Context, secret string) (Key, error) {
	if k, ok := standinKeys.Load(secret); ok && secret != "" {
		return k.(Key), nil
	}
	return Key{}, Errorf(EUNAUTHORIZED, "unknown or revoked key")
}
