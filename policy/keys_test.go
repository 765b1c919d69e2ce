package policy_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// memKeys is a KeyStore in memory that counts its reads and writes and
// can be made to fail.
type memKeys struct {
	mu      sync.Mutex
	keys    map[[32]byte]policy.Key
	reads   int // calls of KeyBySecretHash
	touches []time.Time
	// failRead and failTouch, when set, are what those calls return.
	failRead, failTouch error
}

func newMemKeys() *memKeys { return &memKeys{keys: map[[32]byte]policy.Key{}} }

func (m *memKeys) PutKey(_ context.Context, k policy.Key, h [32]byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keys[h] = k
	return nil
}

func (m *memKeys) Keys(_ context.Context, userID string) ([]policy.Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []policy.Key
	for _, k := range m.keys {
		if k.UserID == userID {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b policy.Key) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

func (m *memKeys) DeleteKey(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for h, k := range m.keys {
		if k.ID == id {
			delete(m.keys, h)
			return nil
		}
	}
	return policy.Errorf(policy.ENOTFOUND, "no key %s", id)
}

func (m *memKeys) KeyBySecretHash(_ context.Context, h [32]byte) (policy.Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++
	if m.failRead != nil {
		return policy.Key{}, m.failRead
	}
	k, ok := m.keys[h]
	if !ok {
		return policy.Key{}, policy.Errorf(policy.ENOTFOUND, "no such key")
	}
	return k, nil
}

func (m *memKeys) TouchKey(_ context.Context, id string, at time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.touches = append(m.touches, at)
	if m.failTouch != nil {
		return m.failTouch
	}
	for h, k := range m.keys {
		if k.ID == id && (k.LastUsedAt == nil || k.LastUsedAt.Before(at)) {
			k.LastUsedAt = &at
			m.keys[h] = k
		}
	}
	return nil
}

func (m *memKeys) touchCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.touches)
}

func newKeyService(keys *memKeys, clock *policy.TestClock) *policy.Service {
	return policy.NewService(newMemStore(), newMemStore(), policy.WithKeys(keys), policy.WithClock(clock.Now))
}

func TestCreateKeyMakesASecretKeptOnlyAsItsHash(t *testing.T) {
	keys, clock := newMemKeys(), policy.NewTestClock(t0)
	svc := newKeyService(keys, clock)
	k, secret, err := svc.CreateKey(context.Background(), "alice", false, "laptop")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, policy.KeyPrefix) || len(secret) != len(policy.KeyPrefix)+32 {
		t.Fatalf("secret %q: want %s and 32 characters", secret, policy.KeyPrefix)
	}
	if raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(secret, policy.KeyPrefix)); err != nil || len(raw) != 24 {
		t.Fatalf("secret %q: not 24 bytes in base64url (%v)", secret, err)
	}
	if !strings.HasPrefix(k.ID, "key_") || len(k.ID) != 16 {
		t.Fatalf("id %q: want key_ and 12 characters", k.ID)
	}
	if k.UserID != "alice" || k.Service || k.Note != "laptop" || !k.CreatedAt.Equal(t0) || k.LastUsedAt != nil {
		t.Fatalf("key = %+v", k)
	}
	stored, ok := keys.keys[sha256.Sum256([]byte(secret))]
	if !ok || len(keys.keys) != 1 || stored.ID != k.ID {
		t.Fatalf("the store does not hold the key under the secret's SHA-256: %+v", keys.keys)
	}

	k2, secret2, err := svc.CreateKey(context.Background(), "", true, "")
	if err != nil {
		t.Fatal(err)
	}
	if secret2 == secret || k2.ID == k.ID || !k2.Service || k2.UserID != "" {
		t.Fatalf("second key %+v %q repeats or is not a service key", k2, secret2)
	}
}

func TestCreateKeyValidates(t *testing.T) {
	for _, tc := range []struct {
		name    string
		userID  string
		service bool
		note    string
		want    string
	}{
		{"neither user nor service", "", false, "", "user_id is required, or service true for a service key"},
		{"both user and service", "alice", true, "", "a key has a user_id or is a service key (service true), not both"},
		{"user id too long", strings.Repeat("u", policy.MaxUserIDBytes+1), false, "", "user_id must be at most 256 bytes"},
		{"user id with a control character", "al\nice", false, "", "user_id must not contain control characters (found U+000A)"},
		{"note too long", "alice", false, strings.Repeat("n", policy.MaxNote+1), "note must be at most 1024 bytes"},
		{"note not UTF-8", "", true, "\xff", "note must be valid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys := newMemKeys()
			svc := newKeyService(keys, policy.NewTestClock(t0))
			_, secret, err := svc.CreateKey(context.Background(), tc.userID, tc.service, tc.note)
			if policy.ErrorCode(err) != policy.EINVALID || policy.ErrorMessage(err) != tc.want {
				t.Fatalf("err = %v, want EINVALID %q", err, tc.want)
			}
			if secret != "" || len(keys.keys) != 0 {
				t.Fatalf("a refused key was made: %q, %d stored", secret, len(keys.keys))
			}
		})
	}
	// The longest note and user id are accepted.
	svc := newKeyService(newMemKeys(), policy.NewTestClock(t0))
	if _, _, err := svc.CreateKey(context.Background(), strings.Repeat("u", policy.MaxUserIDBytes), false, strings.Repeat("n", policy.MaxNote)); err != nil {
		t.Fatal(err)
	}
}

func TestAuthenticateRefusesWithoutEchoingTheSecret(t *testing.T) {
	keys := newMemKeys()
	svc := newKeyService(keys, policy.NewTestClock(t0))
	ctx := context.Background()
	k, secret, err := svc.CreateKey(ctx, "alice", false, "")
	if err != nil {
		t.Fatal(err)
	}
	other := policy.KeyPrefix + strings.Repeat("A", 32) // well formed, never issued
	for _, tc := range []struct {
		name, secret, want string
		reads              int // store reads the attempt costs
	}{
		{"missing", "", "no gateway key was sent", 0},
		{"wrong prefix", "sk-" + secret[3:], "malformed gateway key: a gateway key is pgk_ followed by 32 characters", 0},
		{"too short", secret[:len(secret)-1], "malformed gateway key", 0},
		{"too long", secret + "A", "malformed gateway key", 0},
		{"not base64url", secret[:len(secret)-1] + "+", "malformed gateway key", 0},
		{"the admin token", "test-admin-token", "malformed gateway key", 0},
		{"unknown", other, "unknown or revoked gateway key", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := keys.reads
			_, err := svc.Authenticate(ctx, tc.secret)
			if policy.ErrorCode(err) != policy.EUNAUTHORIZED || !strings.HasPrefix(policy.ErrorMessage(err), tc.want) {
				t.Fatalf("err = %v, want EUNAUTHORIZED %q", err, tc.want)
			}
			if tc.secret != "" && strings.Contains(err.Error(), tc.secret) || strings.Contains(err.Error(), secret[len(policy.KeyPrefix):]) {
				t.Fatalf("the message %q holds the secret", err)
			}
			if got := keys.reads - before; got != tc.reads {
				t.Fatalf("%d store reads, want %d", got, tc.reads)
			}
		})
	}

	got, err := svc.Authenticate(ctx, secret)
	if err != nil || got.ID != k.ID || got.UserID != "alice" {
		t.Fatalf("Authenticate = %+v, %v", got, err)
	}
	if err := svc.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Authenticate(ctx, secret); policy.ErrorCode(err) != policy.EUNAUTHORIZED {
		t.Fatalf("after revocation: %v, want EUNAUTHORIZED", err)
	}
}

func TestAuthenticateReadsTheStoreEveryTime(t *testing.T) {
	keys := newMemKeys()
	svc := newKeyService(keys, policy.NewTestClock(t0))
	ctx := context.Background()
	k, secret, err := svc.CreateKey(ctx, "alice", false, "")
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if _, err := svc.Authenticate(ctx, secret); err != nil {
			t.Fatal(err)
		}
		if keys.reads != i {
			t.Fatalf("after %d authentications, %d reads", i, keys.reads)
		}
	}
	// Another process revokes it in the shared storage: refused at once.
	if err := keys.DeleteKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Authenticate(ctx, secret); policy.ErrorCode(err) != policy.EUNAUTHORIZED {
		t.Fatalf("revoked elsewhere: %v, want EUNAUTHORIZED", err)
	}
	// A storage failure is not a wrong key.
	keys.failRead = policy.Errorf(policy.EUNAVAILABLE, "storage failed: disk on fire")
	if _, err := svc.Authenticate(ctx, secret); policy.ErrorCode(err) != policy.EUNAVAILABLE {
		t.Fatalf("storage failure: %v, want EUNAVAILABLE", err)
	}
}

func TestAuthenticateRecordsUseAtMostOnceAMinute(t *testing.T) {
	keys, clock := newMemKeys(), policy.NewTestClock(t0)
	svc := newKeyService(keys, clock)
	ctx := context.Background()
	_, secret, err := svc.CreateKey(ctx, "alice", false, "")
	if err != nil {
		t.Fatal(err)
	}
	auth := func() policy.Key {
		t.Helper()
		k, err := svc.Authenticate(ctx, secret)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	for _, step := range []struct {
		advance time.Duration
		touches int
	}{
		{0, 1},                 // first use: recorded
		{30 * time.Second, 1},  // within the minute: not
		{29 * time.Second, 1},  // 59s after: not
		{time.Second, 2},       // a minute after: recorded
		{-10 * time.Minute, 2}, // the clock went back: the later use stands
		{10 * time.Minute, 2},  // the clock came back to 9s past that use
		{time.Hour, 3},         // long after
	} {
		clock.Set(clock.Now().Add(step.advance))
		k := auth()
		if got := keys.touchCount(); got != step.touches {
			t.Fatalf("at %v: %d uses recorded, want %d", clock.Now().Sub(t0), got, step.touches)
		}
		if k.LastUsedAt == nil {
			t.Fatalf("at %v: no last use", clock.Now().Sub(t0))
		}
	}

	// Another process recorded a use a moment ago: this one records none.
	svc2 := newKeyService(keys, clock)
	clock.Advance(10 * time.Second)
	if _, err := svc2.Authenticate(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if got := keys.touchCount(); got != 3 {
		t.Fatalf("a second process recorded a use 10s after the first's: %d uses, want 3", got)
	}
}

func TestAuthenticateSucceedsWhenRecordingTheUseFails(t *testing.T) {
	keys := newMemKeys()
	svc := newKeyService(keys, policy.NewTestClock(t0))
	ctx := context.Background()
	k, secret, err := svc.CreateKey(ctx, "", true, "")
	if err != nil {
		t.Fatal(err)
	}
	keys.failTouch = errors.New("disk full")
	got, err := svc.Authenticate(ctx, secret)
	if err != nil || got.ID != k.ID || !got.Service {
		t.Fatalf("Authenticate = %+v, %v; want the key", got, err)
	}
	if keys.touchCount() != 1 || got.LastUsedAt != nil {
		t.Fatalf("touches %d, last use %v: want one attempt, none recorded", keys.touchCount(), got.LastUsedAt)
	}
}

func TestKeysAndRevokeKey(t *testing.T) {
	keys, clock := newMemKeys(), policy.NewTestClock(t0)
	svc := newKeyService(keys, clock)
	ctx := context.Background()
	a, _, _ := svc.CreateKey(ctx, "alice", false, "one")
	clock.Advance(time.Second)
	b, _, _ := svc.CreateKey(ctx, "alice", false, "two")
	s, _, _ := svc.CreateKey(ctx, "", true, "backend")
	got, err := svc.Keys(ctx, "alice")
	if err != nil || len(got) != 2 || got[0].ID != a.ID || got[1].ID != b.ID {
		t.Fatalf("alice's keys = %+v, %v", got, err)
	}
	if got, err := svc.Keys(ctx, ""); err != nil || len(got) != 1 || got[0].ID != s.ID {
		t.Fatalf("service keys = %+v, %v", got, err)
	}
	if _, err := svc.Keys(ctx, "bad\x00id"); policy.ErrorCode(err) != policy.EINVALID {
		t.Fatalf("Keys of a bad user id: %v, want EINVALID", err)
	}

	if err := svc.RevokeKey(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	// The secret pasted for the id: not found, and not repeated.
	_, secret, _ := svc.CreateKey(ctx, "alice", false, "")
	if err := svc.RevokeKey(ctx, secret); policy.ErrorCode(err) != policy.ENOTFOUND || strings.Contains(err.Error(), secret[len(policy.KeyPrefix):]) ||
		!strings.Contains(err.Error(), "it is a key's secret") {
		t.Fatalf("RevokeKey(secret) = %v, want ENOTFOUND that says so without the secret", err)
	}
	for _, id := range []string{a.ID, "key_AAAAAAAAAAAA", "nonsense", ""} {
		err := svc.RevokeKey(ctx, id)
		if policy.ErrorCode(err) != policy.ENOTFOUND || policy.ErrorMessage(err) != "key "+policy.Quote(id)+" does not exist" {
			t.Fatalf("RevokeKey(%q) = %v, want ENOTFOUND", id, err)
		}
	}
	if got, _ := svc.Keys(ctx, "alice"); len(got) != 2 || got[0].ID != b.ID && got[1].ID != b.ID || got[0].ID == a.ID || got[1].ID == a.ID {
		t.Fatalf("after revoking one, alice's keys = %+v", got)
	}
}

func TestKeyMethodsWithoutAKeyStore(t *testing.T) {
	svc := policy.NewService(newMemStore(), newMemStore())
	ctx := context.Background()
	_, _, err1 := svc.CreateKey(ctx, "alice", false, "")
	_, err2 := svc.Keys(ctx, "alice")
	err3 := svc.RevokeKey(ctx, "key_AAAAAAAAAAAA")
	_, err4 := svc.Authenticate(ctx, policy.KeyPrefix+strings.Repeat("A", 32))
	for i, err := range []error{err1, err2, err3, err4} {
		if policy.ErrorCode(err) != policy.EINTERNAL {
			t.Errorf("method %d: %v, want EINTERNAL", i+1, err)
		}
	}
}

func TestRedactKeySecrets(t *testing.T) {
	secret := policy.KeyPrefix + "Zm9vYmFyYmF6cXV4cXV1eHh5enp5eHh4"
	for _, tc := range []struct{ in, want string }{
		{"/v1/keys/key_AAAAAAAAAAAA", "/v1/keys/key_AAAAAAAAAAAA"},
		{"/v1/keys/" + secret, "/v1/keys/pgk_[redacted]"},
		{"/a/" + secret + "/b/" + secret + "x", "/a/pgk_[redacted]/b/pgk_[redacted]"},
		{"/v1/users/pgk_fan", "/v1/users/pgk_fan"},             // too short to be one
		{"/v1/keys/" + secret[:20], "/v1/keys/pgk_[redacted]"}, // half of one is still too much
		{"pgk_pgk_" + secret[4:], "pgk_[redacted]"},            // prefix then a secret
		{"/v1/keys/" + secret + "/revoke", "/v1/keys/pgk_[redacted]/revoke"},
		{"/v1/admins/" + policy.AdminTokenPrefix + secret[4:], "/v1/admins/pgadm_[redacted]"},
	} {
		if got := policy.RedactKeySecrets(tc.in); got != tc.want {
			t.Errorf("RedactKeySecrets(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
