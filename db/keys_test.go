package db_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"strconv"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

func newKeyService(s *db.Store, now *time.Time) *policy.Service {
	return policy.NewService(s, s, policy.WithKeys(s), policy.WithClock(func() time.Time { return *now }))
}

// Keys are stored with their secret's hash only, listed per user or as
// service keys, survive a restart, and a revoked key is gone for good.
func TestKeysStoreListAndRevoke(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		dsn := bk.newDSN(t)
		now := t0
		s := openStore(t, dsn)
		svc := newKeyService(s, &now)
		a, secretA, err := svc.CreateKey(ctx, "alice", false, "laptop ☕")
		if err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Second)
		b, _, err := svc.CreateKey(ctx, "alice", false, "")
		if err != nil {
			t.Fatal(err)
		}
		sk, secretS, err := svc.CreateKey(ctx, "", true, "backend")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := svc.CreateKey(ctx, "bob", false, ""); err != nil {
			t.Fatal(err)
		}

		// Only the hash is stored: no column of any row holds the secret.
		raw, err := bk.raw(dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		rows, err := raw.QueryContext(ctx, `SELECT id, secret_hash, coalesce(user_id, ''), note FROM gateway_keys`)
		if err != nil {
			t.Fatal(err)
		}
		hashes := map[string][]byte{}
		for rows.Next() {
			var id, user, note string
			var hash []byte
			if err := rows.Scan(&id, &hash, &user, &note); err != nil {
				t.Fatal(err)
			}
			for _, col := range [][]byte{[]byte(id), hash, []byte(user), []byte(note)} {
				if bytes.Contains(col, []byte(secretA)) || bytes.Contains(col, []byte(secretS)) {
					t.Fatalf("row %s holds a secret", id)
				}
			}
			hashes[id] = hash
		}
		rows.Close()
		if h := sha256.Sum256([]byte(secretA)); !bytes.Equal(hashes[a.ID], h[:]) {
			t.Fatalf("stored hash of alice's key %x, want the secret's SHA-256", hashes[a.ID])
		}
		s.Close()

		s = openStore(t, dsn)
		svc = newKeyService(s, &now)
		got, err := svc.Keys(ctx, "alice")
		if err != nil || len(got) != 2 || got[0] != a || got[1] != b {
			t.Fatalf("alice's keys after a restart = %+v, %v; want %+v, %+v", got, err, a, b)
		}
		if got[0].Note != "laptop ☕" || !got[0].CreatedAt.Equal(t0) || got[0].LastUsedAt != nil {
			t.Fatalf("alice's first key = %+v", got[0])
		}
		if got, err := svc.Keys(ctx, ""); err != nil || len(got) != 1 || got[0] != sk || !got[0].Service || got[0].UserID != "" {
			t.Fatalf("service keys = %+v, %v; want %+v", got, err, sk)
		}
		if got, err := svc.Keys(ctx, "carol"); err != nil || got == nil || len(got) != 0 {
			t.Fatalf("carol's keys = %#v, %v; want an empty list", got, err)
		}

		// A use is recorded, and shows in the list.
		now = now.Add(time.Minute)
		k, err := svc.Authenticate(ctx, secretA)
		if err != nil || k.ID != a.ID || k.UserID != "alice" {
			t.Fatalf("Authenticate = %+v, %v", k, err)
		}
		if got, _ := svc.Keys(ctx, "alice"); got[0].LastUsedAt == nil || !got[0].LastUsedAt.Equal(now) || got[1].LastUsedAt != nil {
			t.Fatalf("after a use, alice's keys = %+v", got)
		}
		if k, err := svc.Authenticate(ctx, secretS); err != nil || k.ID != sk.ID || !k.Service {
			t.Fatalf("Authenticate a service key = %+v, %v", k, err)
		}

		if err := svc.RevokeKey(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Authenticate(ctx, secretA); policy.ErrorCode(err) != policy.EUNAUTHORIZED {
			t.Fatalf("a revoked key: %v, want EUNAUTHORIZED", err)
		}
		if err := svc.RevokeKey(ctx, a.ID); policy.ErrorCode(err) != policy.ENOTFOUND {
			t.Fatalf("revoked twice: %v, want ENOTFOUND", err)
		}
		if err := s.DeleteKey(ctx, a.ID); policy.ErrorCode(err) != policy.ENOTFOUND {
			t.Fatalf("DeleteKey of a deleted key: %v, want ENOTFOUND", err)
		}
		if got, _ := svc.Keys(ctx, "alice"); len(got) != 1 || got[0].ID != b.ID {
			t.Fatalf("after the revocation, alice's keys = %+v", got)
		}
		var n int
		if err := raw.QueryRowContext(ctx, `SELECT count(*) FROM gateway_keys`).Scan(&n); err != nil || n != 3 {
			t.Fatalf("%d rows left, %v; want 3 (the revoked row deleted)", n, err)
		}
	})
}

// A second store on the same database, as a second replica (or a second
// process on the SQLite file), sees a key as soon as it is made and
// refuses it as soon as it is revoked, with nothing to wait for.
func TestKeyRevocationIsSeenAtOnceByAnotherReplica(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		dsn := bk.newDSN(t)
		now := t0
		one, two := openStore(t, dsn), openStore(t, dsn)
		svc1, svc2 := newKeyService(one, &now), newKeyService(two, &now)
		k, secret, err := svc1.CreateKey(ctx, "alice", false, "")
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ { // the second replica has read it a few times
			if got, err := svc2.Authenticate(ctx, secret); err != nil || got.ID != k.ID {
				t.Fatalf("the second replica: %+v, %v", got, err)
			}
		}
		if err := svc1.RevokeKey(ctx, k.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := svc2.Authenticate(ctx, secret); policy.ErrorCode(err) != policy.EUNAUTHORIZED {
			t.Fatalf("revoked on the first, the second says %v, want EUNAUTHORIZED", err)
		}

		// And the other way round, with a use recorded by the second.
		k, secret, err = svc1.CreateKey(ctx, "", true, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc2.Authenticate(ctx, secret); err != nil {
			t.Fatal(err)
		}
		if got, _ := svc1.Keys(ctx, ""); len(got) != 1 || got[0].LastUsedAt == nil || !got[0].LastUsedAt.Equal(now) {
			t.Fatalf("the use the second recorded, seen by the first: %+v", got)
		}
		if err := svc2.RevokeKey(ctx, k.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := svc1.Authenticate(ctx, secret); policy.ErrorCode(err) != policy.EUNAUTHORIZED {
			t.Fatalf("revoked on the second, the first says %v, want EUNAUTHORIZED", err)
		}
	})
}

// TouchKey never moves a key's last use back: a replica whose clock is
// behind leaves the later use recorded.
func TestTouchKeyKeepsTheLatestUse(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		s := openStore(t, bk.newDSN(t))
		now := t0
		svc := newKeyService(s, &now)
		k, _, err := svc.CreateKey(ctx, "alice", false, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, step := range []struct{ at, want time.Time }{
			{t0.Add(time.Hour), t0.Add(time.Hour)},
			{t0.Add(time.Minute), t0.Add(time.Hour)},
			{t0.Add(2 * time.Hour), t0.Add(2 * time.Hour)},
		} {
			if err := s.TouchKey(ctx, k.ID, step.at); err != nil {
				t.Fatal(err)
			}
			got, err := s.Keys(ctx, "alice")
			if err != nil || len(got) != 1 || got[0].LastUsedAt == nil || !got[0].LastUsedAt.Equal(step.want) {
				t.Fatalf("after a use at %v: %+v, %v; want last use %v", step.at, got, err, step.want)
			}
		}
		if err := s.TouchKey(ctx, "key_unknownnnnnn", t0); err != nil {
			t.Fatalf("TouchKey of an unknown key: %v, want nil", err)
		}
	})
}

// BenchmarkAuthenticate is what a gateway request pays to know its key: a
// read of gateway_keys by the secret's hash on the read pool (the use is
// recorded once a minute, so not here).
func BenchmarkAuthenticate(b *testing.B) {
	ctx := context.Background()
	s := openStore(b, "")
	now := t0
	svc := newKeyService(s, &now)
	secrets := make([]string, 256)
	for i := range secrets {
		_, secret, err := svc.CreateKey(ctx, "user"+strconv.Itoa(i), false, "")
		if err != nil {
			b.Fatal(err)
		}
		secrets[i] = secret
	}
	for _, secret := range secrets { // each use recorded now, none below
		if _, err := svc.Authenticate(ctx, secret); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := svc.Authenticate(ctx, secrets[i%len(secrets)]); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}
