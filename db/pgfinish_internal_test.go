package db

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

// stopFinishes ends s's finish loops, so that finishes wait in its queue
// until the test runs them.
func stopFinishes(t *testing.T, s *Store) *pgWriter {
	t.Helper()
	w := s.writer.(*pgWriter)
	close(w.finishes)
	w.finishers.Wait()
	w.finishes = make(chan *finishJob, 1024)
	return w
}

// meteredAccount stores a metered tier whose accounts pool tokens, the
// account acme on it with member m, and returns a service on s at now.
func meteredAccount(t *testing.T, s *Store, now time.Time) *policy.Service {
	t.Helper()
	ctx := context.Background()
	svc := policy.NewService(s, s, policy.WithClock(func() time.Time { return now }), policy.WithUsers(s))
	day := int64(100000)
	pool, err := policy.PoolLimitsOf(map[string]*int64{"tokens_per_day": &day})
	if err != nil {
		t.Fatal(err)
	}
	putTier(t, s, policy.Tier{Name: "meter", RequestsPerMinute: 100, RequestsPerHour: 100, RequestsPerDay: 100, TokensPerDay: &day, Account: &pool})
	if _, _, err := svc.PutAccount(ctx, policy.Account{AccountID: "acme", Tier: "meter"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.PutUser(ctx, policy.UserRecord{UserID: "m", Account: "acme"}); err != nil {
		t.Fatal(err)
	}
	return svc
}

// open checks user with a reservation of 10 tokens and returns the call.
func openCall(t *testing.T, svc *policy.Service, user string) string {
	t.Helper()
	d, err := svc.Check(context.Background(), policy.Request{UserID: user, Tier: "meter", Tokens: 10}, false)
	if err != nil || !d.Allowed() || d.CallID == "" {
		t.Fatalf("check of %s: %+v, %v", user, d, err)
	}
	return d.CallID
}

// reported returns the count the call named id was finished with, or
// "open".
func reported(t *testing.T, s *Store, id string) string {
	t.Helper()
	var n sql.NullInt64
	if err := s.db.QueryRow(`SELECT reported FROM calls WHERE id = $1`, id).Scan(&n); err != nil {
		t.Fatalf("call %s: %v", id, err)
	}
	if !n.Valid {
		return "open"
	}
	return fmt.Sprint(n.Int64)
}

// A batch of finishes answers each as finish_call would, one after the
// other, in the order queued: the same call twice, a count that differs
// from the one it was finished with, no such call, a pool's copy, and a
// member's call, whose pool copy is finished with it.
func TestFinishBatchAnswersEachInOrder(t *testing.T) {
	s := openPG(t, dbtest.Postgres(t))
	svc := meteredAccount(t, s, batchT0)
	a, b, m := openCall(t, svc, "u1"), openCall(t, svc, "u2"), openCall(t, svc, "m")
	w := stopFinishes(t, s)
	type finish struct {
		id     string
		tokens int64
		status int16
	}
	batch := []finish{
		{a, 3, 0}, {a, 3, 0}, {b, 4, 0}, {b, 9, 2}, {"nope", 1, 1}, {policy.PoolCallID(m), 5, 1}, {m, 7, 0},
	}
	var fb finishBatch
	for _, f := range batch {
		fb.jobs = append(fb.jobs, &finishJob{ctx: context.Background(), id: f.id, tokens: new(f.tokens), now: batchT0.UnixMicro(), errc: make(chan error, 1)})
	}
	fb.run(w)
	for i, j := range fb.jobs {
		if err := <-j.errc; err != nil || j.st.status != batch[i].status {
			t.Errorf("finish %d (%s with %d): status %d, %v; want %d", i, batch[i].id, batch[i].tokens, j.st.status, err, batch[i].status)
		}
	}
	if got := fb.jobs[3].st.row.reported.Int64; got != 4 {
		t.Errorf("the refused finish's call stands at %d, want 4", got)
	}
	for id, want := range map[string]string{a: "3", b: "4", m: "7", policy.PoolCallID(m): "7"} {
		if got := reported(t, s, id); got != want {
			t.Errorf("call %s: %s, want %s", id, got, want)
		}
	}
}

// A batch that fails (here a pool's copy finished with another count)
// finishes nothing: each of its callers finishes alone, and only the one
// at fault is refused.
func TestFinishBatchFailureLeavesEachAlone(t *testing.T) {
	s := openPG(t, dbtest.Postgres(t))
	svc := meteredAccount(t, s, batchT0)
	m, u := openCall(t, svc, "m"), openCall(t, svc, "u")
	if _, err := s.db.Exec(`UPDATE calls SET finished_at = opened_at, tokens = 8, reported = 8 WHERE id = $1`, policy.PoolCallID(m)); err != nil {
		t.Fatal(err)
	}
	w := stopFinishes(t, s)
	var fb finishBatch
	for _, id := range []string{u, m} {
		fb.jobs = append(fb.jobs, &finishJob{ctx: context.Background(), id: id, tokens: new(int64(2)), now: batchT0.UnixMicro(), errc: make(chan error, 1)})
	}
	fb.run(w)
	for _, j := range fb.jobs {
		if err := <-j.errc; err != errRedo {
			t.Errorf("finish of %s: %v, want it left to finish alone", j.id, err)
		}
	}
	if got := reported(t, s, u); got != "open" {
		t.Errorf("call %s after the failed batch: %s, want open", u, got)
	}
	// Through the store, each finish that a batch leaves is run alone.
	errs := make(chan error, 2)
	for _, id := range []string{u, m} {
		go func() {
			_, err := s.FinishCall(context.Background(), id, new(int64(2)), batchT0)
			errs <- err
		}()
	}
	go func() {
		for range 2 {
			j := <-w.finishes
			fb.jobs = append(fb.jobs[:0], j)
			fb.run(w)
		}
	}()
	var conflicts, done int
	for range 2 {
		err := <-errs
		switch {
		case err == nil:
			done++
		case policy.ErrorCode(err) == policy.ECONFLICT && strings.Contains(err.Error(), policy.PoolCallID(m)):
			conflicts++
		default:
			t.Errorf("finish: %v", err)
		}
	}
	if done != 1 || conflicts != 1 || reported(t, s, u) != "2" || reported(t, s, m) != "open" {
		t.Errorf("%d finished, %d refused; %s at %s, %s at %s; want %s finished with 2 and %s refused, open",
			done, conflicts, u, reported(t, s, u), m, reported(t, s, m), u, m)
	}
}

// A batch of finishes takes its locks in the order every transaction
// does: the accounts', then the users', each in ascending order of their
// keys. With the lock that comes last held elsewhere, the batch waits for
// it holding every other; with an account's held, it waits holding none.
func TestFinishBatchLocksInOrder(t *testing.T) {
	s := openPG(t, dbtest.Postgres(t))
	svc := meteredAccount(t, s, batchT0)
	ctx := context.Background()
	users := []string{"m", "u1", "u2", "u3", "u4"}
	var ids []string
	last := users[0]
	for _, u := range users {
		ids = append(ids, openCall(t, svc, u))
		if userLockKey(u) > userLockKey(last) {
			last = u
		}
	}
	// The call of the user whose lock comes last goes first: the batch
	// must not take locks in the order of its calls.
	i := slices.Index(users, last)
	ids[0], ids[i] = ids[i], ids[0]
	w := stopFinishes(t, s)
	for _, held := range []struct {
		class int
		key   string
		want  int // locks the batch holds while it waits
	}{
		{lockUser, last, len(users)}, // the account's and the other users'
		{lockAccount, policy.AccountKey("acme"), 0},
	} {
		conn, err := s.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1, $2)`, held.class, userLockKey(held.key)); err != nil {
			t.Fatal(err)
		}
		var fb finishBatch
		for _, id := range ids {
			fb.jobs = append(fb.jobs, &finishJob{ctx: ctx, id: id, now: batchT0.UnixMicro(), errc: make(chan error, 1)})
		}
		done := make(chan struct{})
		go func() { fb.run(w); close(done) }()
		// The batch's backend, once it waits for the lock held.
		var pid int
		for deadline := time.Now().Add(10 * time.Second); pid == 0; {
			err := s.db.QueryRow(`SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND classid = $1 AND objid = $2::oid`,
				held.class, uint32(userLockKey(held.key))).Scan(&pid)
			if err != nil && err != sql.ErrNoRows {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("the batch never waited for the %s lock of %s", map[int]string{lockUser: "user", lockAccount: "account"}[held.class], held.key)
			}
		}
		var holds int
		if err := s.db.QueryRow(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = $1`, pid).Scan(&holds); err != nil {
			t.Fatal(err)
		}
		if holds != held.want {
			t.Errorf("waiting for the lock of %s, the batch holds %d locks, want %d", held.key, holds, held.want)
		}
		if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_unlock($1, $2)`, held.class, userLockKey(held.key)); err != nil {
			t.Fatal(err)
		}
		conn.Close()
		<-done
		for _, j := range fb.jobs {
			if err := <-j.errc; err != nil {
				t.Errorf("finish of %s: %v", j.id, err)
			}
		}
	}
}

// Batches of finishes on two replicas, over members of two accounts and
// users of none, beside their checks, all succeed: none fails (a
// deadlock or a lock's wait would) and leaves its finishes to run alone.
func TestFinishBatchesOfReplicas(t *testing.T) {
	dsn := dbtest.Postgres(t)
	s1, s2 := openPG(t, dsn), openPG(t, dsn)
	ctx := context.Background()
	svc1 := meteredAccount(t, s1, batchT0)
	if _, _, err := svc1.PutAccount(ctx, policy.Account{AccountID: "beta", Tier: "meter"}); err != nil {
		t.Fatal(err)
	}
	users := []string{"m", "n1", "n2", "u1", "u2", "u3"}
	for _, u := range users[1:3] {
		if _, _, err := svc1.PutUser(ctx, policy.UserRecord{UserID: u, Account: "beta"}); err != nil {
			t.Fatal(err)
		}
	}
	svc2 := policy.NewService(s2, s2, policy.WithClock(func() time.Time { return batchT0 }), policy.WithUsers(s2))
	var wg sync.WaitGroup
	for c := range 16 {
		svc := []*policy.Service{svc1, svc2}[c%2]
		wg.Go(func() {
			for i := range 20 {
				user := users[(c+i)%len(users)]
				d, err := svc.Check(ctx, policy.Request{UserID: user, Tier: "meter", Tokens: 1}, false)
				if err != nil || d.CallID == "" {
					t.Errorf("check of %s: %+v, %v", user, d, err)
					return
				}
				if _, err := svc.FinishCall(ctx, d.CallID, new(int64(1))); err != nil {
					t.Errorf("finish of %s: %v", d.CallID, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for i, s := range []*Store{s1, s2} {
		w := s.writer.(*pgWriter)
		if alone := w.finishAlone.Load(); alone != 0 {
			t.Errorf("replica %d: %d finishes left to finish alone, want none", i+1, alone)
		}
		t.Logf("replica %d: %d finishes in %d batches", i+1, w.finishBatched.Load(), w.finishBatches.Load())
	}
	var open int
	if err := s1.db.QueryRow(`SELECT count(*) FROM calls WHERE finished_at IS NULL`).Scan(&open); err != nil || open != 0 {
		t.Errorf("%d calls open, %v; want none", open, err)
	}
}
