package db

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

// On PostgreSQL the cleanup runs on one replica at a time: while another
// session holds its lock, Prune deletes nothing; once released, it does.
func TestPruneOneReplicaAtATime(t *testing.T) {
	dsn := dbtest.Postgres(t)
	ctx := context.Background()
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i := range 3 {
		at := t0.Add(time.Duration(i) * time.Second)
		if err := s.Admit(ctx, "old", func(policy.History) (policy.Admission, error) { return policy.Admission{At: at, Record: true}, nil }); err != nil {
			t.Fatal(err)
		}
	}
	other, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1, 0)`, lockPrune); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(ctx, t0.Add(time.Hour)); err != nil || n != 0 {
		t.Fatalf("Prune while another replica cleans up: %d deleted, %v; want 0, nil", n, err)
	}
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_unlock($1, 0)`, lockPrune); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(ctx, t0.Add(time.Hour)); err != nil || n != 3 {
		t.Fatalf("Prune once the lock is free: %d deleted, %v; want 3", n, err)
	}
	// Prune let the lock go when it returned.
	var held int
	if err := other.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = $1`, lockPrune).Scan(&held); err != nil || held != 0 {
		t.Fatalf("cleanup locks held after Prune returned: %d, %v", held, err)
	}
}

// Replicas started at once on a new database migrate it once: each waits
// for the migration lock, and the later ones find nothing to do.
func TestReplicasStartedTogetherMigrateOnce(t *testing.T) {
	dsn := dbtest.Postgres(t)
	errs := make(chan error, 4)
	stores := make(chan *Store, 4)
	for range 4 {
		go func() {
			s, err := Open(context.Background(), dsn)
			errs <- err
			stores <- s
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Errorf("a replica failed to start: %v", err)
		}
		if s := <-stores; s != nil {
			defer s.Close()
		}
	}
	raw, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var tiers int
	if err := raw.QueryRow(`SELECT count(*) FROM tiers`).Scan(&tiers); err != nil || tiers != 3 {
		t.Fatalf("seeded tiers: %d, %v; want 3", tiers, err)
	}
}

// lock_key (migration 14) numbers locks as userLockKey does: finish_call
// takes the locks Go's transactions take, so that the two exclude each
// other. Ids of every kind: empty, ASCII, an account pool's key (a control
// character), multi-byte UTF-8, long. The migration also spells out the
// lock classes, an account's key and a pool copy's id, which are part of
// the database's format: they must not move.
func TestLockKeyInSQLIsUserLockKey(t *testing.T) {
	if lockUser != 1 || lockAccount != 5 || policy.AccountKey("a") != "\x01account:a" || policy.PoolCallID("c") != "c-pool" {
		t.Fatalf("lock classes %d and %d, account key %q, pool copy %q: migration 14 has 1, 5, \"\\x01account:a\", \"c-pool\"",
			lockUser, lockAccount, policy.AccountKey("a"), policy.PoolCallID("c"))
	}
	s := openPG(t, dbtest.Postgres(t))
	ids := []string{"", "a", "alice", "user-00042", policy.AccountKey("acme"), "Zoë", "用户", "🙂", strings.Repeat("x9", 128)}
	for _, id := range ids {
		var got int32
		if err := s.db.QueryRow(`SELECT lock_key($1)`, id).Scan(&got); err != nil {
			t.Fatalf("lock_key(%q): %v", id, err)
		}
		if want := userLockKey(id); got != want {
			t.Errorf("lock_key(%q) = %d, userLockKey = %d", id, got, want)
		}
	}
}
