package db_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// backend is one kind of database the store keeps its data in. The
// conformance tests, those that take one (through eachBackend), run the
// same function against each: the model test, the concurrency tests and
// every behaviour the API promises whichever database is behind it.
type backend struct {
	name string
	// newDSN returns a new, empty database for Open: a file path or a
	// URL. It is removed when the test ends.
	newDSN func(t testing.TB) string
	// driver opens a database with database/sql, as another program
	// would (the sqlite3 shell, psql).
	driver string
}

var backends = []backend{
	{"sqlite", func(t testing.TB) string { return filepath.Join(t.TempDir(), "test.db") }, "sqlite"},
	// Skipped when no PostgreSQL answers, except under CI=true.
	{"postgres", func(t testing.TB) string { return dbtest.Postgres(t) }, "pgx"},
}

// raw opens dsn without the store, as another program would.
func (b backend) raw(dsn string) (*sql.DB, error) {
	if b.driver == "sqlite" {
		dsn += "?_busy_timeout=5000"
	}
	return sql.Open(b.driver, dsn)
}

// eachBackend runs test against each backend, as subtests named after
// them.
func eachBackend(t *testing.T, test func(t *testing.T, bk backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { test(t, b) })
	}
}

// openStore opens the database at dsn, a new SQLite file when it is "".
func openStore(t testing.TB, dsn string) *db.Store {
	t.Helper()
	if dsn == "" {
		dsn = backends[0].newDSN(t)
	}
	s, err := db.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// admit records one request for user at at, unconditionally.
func admit(t *testing.T, s *db.Store, user string, at time.Time) {
	t.Helper()
	err := s.Admit(context.Background(), user, func(policy.History) (policy.Admission, error) { return policy.Admission{At: at, Record: true}, nil })
	if err != nil {
		t.Fatal(err)
	}
}

func count(t *testing.T, s *db.Store, user string, after time.Time) int64 {
	t.Helper()
	var n int64
	err := s.View(context.Background(), user, func(h policy.History) error {
		var err error
		n, err = h.CountAfter(after)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestOpenSeedsTiersAndCreatesPrivateFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new.db")
	s := openStore(t, path)
	tiers, err := s.Tiers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tr := range tiers {
		names = append(names, tr.Name)
	}
	if got := fmt.Sprint(names); got != "[enterprise free pro]" {
		t.Fatalf("seeded tiers = %s", got)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("database mode = %v, want 0600", st.Mode().Perm())
	}
}

func TestCountsSurviveReopen(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		path := bk.newDSN(t)
		s, err := db.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5; i++ {
			admit(t, s, "alice", t0.Add(time.Duration(i)*time.Second))
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = openStore(t, path)
		if got := count(t, s, "alice", t0.Add(-time.Minute)); got != 5 {
			t.Fatalf("after reopen: %d requests, want 5", got)
		}
		if got := count(t, s, "alice", t0.Add(2*time.Second)); got != 2 {
			t.Fatalf("after reopen: %d requests after +2s, want 2", got)
		}
	})
}

func TestAdmitRejectsDecreasingTimestamps(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		s := openStore(t, bk.newDSN(t))
		admit(t, s, "u", t0)
		// Requests at one instant are recorded together, at that instant.
		admit(t, s, "u", t0)
		err := s.Admit(context.Background(), "u", func(policy.History) (policy.Admission, error) {
			return policy.Admission{At: t0.Add(-time.Microsecond), Record: true}, nil
		})
		if err == nil {
			t.Fatal("a request before the newest one was recorded")
		}
		if got := count(t, s, "u", t0.Add(-time.Hour)); got != 2 {
			t.Fatalf("count = %d, want 2", got)
		}
		if got := count(t, s, "u", t0.Add(-time.Microsecond)); got != 2 {
			t.Fatalf("count after just before the instant = %d, want 2", got)
		}
		if got := count(t, s, "u", t0); got != 0 {
			t.Fatalf("count after the instant = %d, want 0: both leave together", got)
		}
	})
}

// TestHistoryMatchesReference drives random requests through the store and
// a sorted slice and compares every History answer.
func TestHistoryMatchesReference(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		s := openStore(t, bk.newDSN(t))
		rng := rand.New(rand.NewPCG(1, 2))
		ref := map[string][]time.Time{}
		now := t0
		users := []string{"a", "b", "c"}
		for i := 0; i < 400; i++ {
			if rng.IntN(4) > 0 { // else another request at the same instant
				now = now.Add(time.Millisecond + time.Duration(rng.IntN(90))*time.Second)
			}
			u := users[rng.IntN(len(users))]
			admit(t, s, u, now)
			ref[u] = append(ref[u], now)
			if i%7 == 0 {
				cut := now.Add(-time.Duration(rng.IntN(7200)) * time.Second)
				if _, err := s.Prune(context.Background(), cut.Add(-24*time.Hour)); err != nil {
					t.Fatal(err)
				}
				for _, u := range users {
					r := ref[u]
					k := sort.Search(len(r), func(i int) bool { return r[i].After(cut.Add(-24 * time.Hour)) })
					ref[u] = r[k:]
				}
			}
			for _, u := range users {
				r := ref[u]
				err := s.View(context.Background(), u, func(h policy.History) error {
					last, ok, err := h.Last()
					if err != nil {
						return err
					}
					if ok != (len(r) > 0) || (ok && !last.Equal(r[len(r)-1])) {
						return fmt.Errorf("Last = %v %v, want %v", last, ok, r)
					}
					for _, w := range []time.Duration{time.Minute, time.Hour, 24 * time.Hour} {
						cut := now.Add(-w)
						k := sort.Search(len(r), func(i int) bool { return r[i].After(cut) })
						n, err := h.CountAfter(cut)
						if err != nil {
							return err
						}
						if n != int64(len(r)-k) {
							return fmt.Errorf("CountAfter(now-%v) = %d, want %d", w, n, len(r)-k)
						}
						for _, nth := range []int64{1, 2, n} {
							if nth < 1 || nth > n {
								continue
							}
							got, err := h.NthAfter(cut, nth)
							if err != nil {
								return err
							}
							if want := r[k+int(nth)-1]; !got.Equal(want) {
								return fmt.Errorf("NthAfter(now-%v, %d) = %v, want %v", w, nth, got, want)
							}
						}
					}
					return nil
				})
				if err != nil {
					t.Fatalf("step %d user %s: %v", i, u, err)
				}
			}
		}
	})
}

func TestPruneDeletesOnlyOldRowsInBatches(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		s := openStore(t, bk.newDSN(t))
		// 2,500 old rows for one user (more than a batch), a few for others,
		// and recent rows that must stay.
		for i := 0; i < 2500; i++ {
			admit(t, s, "heavy", t0.Add(time.Duration(i)*time.Millisecond))
		}
		for u := 0; u < 30; u++ {
			admit(t, s, fmt.Sprintf("user-%02d", u), t0)
			admit(t, s, fmt.Sprintf("user-%02d", u), t0.Add(25*time.Hour))
		}
		admit(t, s, "heavy", t0.Add(25*time.Hour))
		deleted, err := s.Prune(context.Background(), t0.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if deleted != 2530 {
			t.Fatalf("deleted %d rows, want 2530", deleted)
		}
		if got := count(t, s, "heavy", t0.Add(-time.Hour)); got != 1 {
			t.Fatalf("heavy keeps %d rows, want 1", got)
		}
		if got := count(t, s, "user-07", t0.Add(-time.Hour)); got != 1 {
			t.Fatalf("user-07 keeps %d rows, want 1", got)
		}
		// A user whose every row was pruned starts again cleanly.
		admit(t, s, "gone", t0)
		if _, err := s.Prune(context.Background(), t0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		admit(t, s, "gone", t0.Add(2*time.Hour))
		if got := count(t, s, "gone", t0); got != 1 {
			t.Fatalf("gone counts %d, want 1", got)
		}
	})
}

func TestForget(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		s := openStore(t, bk.newDSN(t))
		admit(t, s, "a", t0)
		admit(t, s, "a", t0.Add(time.Second))
		admit(t, s, "b", t0)
		if err := s.Forget(context.Background(), "a"); err != nil {
			t.Fatal(err)
		}
		if count(t, s, "a", t0.Add(-time.Hour)) != 0 || count(t, s, "b", t0.Add(-time.Hour)) != 1 {
			t.Fatal("Forget removed the wrong rows")
		}
		admit(t, s, "a", t0.Add(-time.Hour)) // history may restart anywhere
		if count(t, s, "a", t0.Add(-2*time.Hour)) != 1 {
			t.Fatal("history after Forget is wrong")
		}
	})
}

func TestTiersCRUDAndCache(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		path := bk.newDSN(t)
		s := openStore(t, path)
		ctx := context.Background()
		team := policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(7)), policy.RequestsPerHour: new(int64(70)), policy.RequestsPerDay: new(int64(700)), policy.BurstAllowance: new(int64(3))}, Features: []string{"chat", "search"}, Description: "<b>team</b>", UpdatedAt: t0}
		changes, err := s.UpdateTiers(ctx, policy.TierUpdate{At: t0, Put: []policy.Tier{team}})
		if err != nil || !changes[0].Created() {
			t.Fatalf("create: %v %v", changes, err)
		}
		team.ID = 4 // numbered after the three seeded tiers
		got, err := s.Tier(ctx, "team")
		if err != nil || fmt.Sprint(got) != fmt.Sprint(team) {
			t.Fatalf("Tier = %+v, %v; want %+v", got, err, team)
		}
		team.Limits[policy.RequestsPerMinute] = new(int64(8))
		if changes, err := s.UpdateTiers(ctx, policy.TierUpdate{At: t0, Put: []policy.Tier{team}}); err != nil || changes[0].Created() {
			t.Fatalf("replace: %v %v", changes, err)
		}
		if got, _ := s.Tier(ctx, "team"); got.Limits.Value(policy.RequestsPerMinute) != 8 {
			t.Fatalf("cache not refreshed: %+v", got)
		}
		if _, err := s.UpdateTiers(ctx, policy.TierUpdate{Put: []policy.Tier{{Name: "x", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(-1))}}}}); policy.ErrorCode(err) != policy.EINVALID {
			t.Fatalf("invalid tier stored: %v", err)
		}
		// A second store on the same file sees the change.
		other := openStore(t, path)
		if got, _ := other.Tier(ctx, "team"); got.Limits.Value(policy.RequestsPerMinute) != 8 {
			t.Fatalf("not persisted: %+v", got)
		}
		if _, err := s.UpdateTiers(ctx, policy.TierUpdate{Delete: []string{"team"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Tier(ctx, "team"); policy.ErrorCode(err) != policy.ENOTFOUND {
			t.Fatalf("after delete: %v", err)
		}
		if _, err := s.UpdateTiers(ctx, policy.TierUpdate{Delete: []string{"team"}}); policy.ErrorCode(err) != policy.ENOTFOUND {
			t.Fatalf("second delete: %v", err)
		}
	})
}

func TestConcurrentChecksAdmitExactly(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		s := openStore(t, bk.newDSN(t))
		ctx := context.Background()
		tier := policy.Tier{Name: "hammer", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(40)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(1000)), policy.BurstAllowance: new(int64(10))}}
		if _, err := s.UpdateTiers(ctx, policy.TierUpdate{Put: []policy.Tier{tier}}); err != nil {
			t.Fatal(err)
		}
		var clockMu sync.Mutex
		now := t0
		tick := func() time.Time { // every check a microsecond later, still inside a minute
			clockMu.Lock()
			defer clockMu.Unlock()
			now = now.Add(time.Microsecond)
			return now
		}
		svc := policy.NewService(s, s, policy.WithClock(tick))
		var admitted, refused atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 32; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					d, err := svc.Check(ctx, policy.Request{UserID: "hot", Tier: "hammer"}, false)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed() {
						admitted.Add(1)
					} else {
						refused.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if admitted.Load() != 50 || refused.Load() != 32*20-50 {
			t.Fatalf("admitted %d, refused %d; want exactly 50 admitted", admitted.Load(), refused.Load())
		}
		if got := count(t, s, "hot", t0.Add(-time.Minute)); got != 50 {
			t.Fatalf("stored %d, want 50", got)
		}
	})
}

func TestClosedStoreFailsUnavailable(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		s := openStore(t, bk.newDSN(t))
		s.Close()
		err := s.Admit(context.Background(), "u", func(policy.History) (policy.Admission, error) { return policy.Admission{At: t0, Record: true}, nil })
		if policy.ErrorCode(err) != policy.EUNAVAILABLE {
			t.Fatalf("err = %v, want EUNAVAILABLE", err)
		}
	})
}

func TestOpenRefusesUnusableFiles(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.db")
	data := []byte("this is not a database, and opening it must not change it; ")
	for len(data) < 8192 {
		data = append(data, data...)
	}
	if err := os.WriteFile(garbage, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Open(context.Background(), garbage); err == nil {
		t.Fatal("opened a garbage file")
	}
	after, _ := os.ReadFile(garbage)
	if string(after) != string(data) {
		t.Fatal("opening a garbage file changed it")
	}
	if _, err := db.Open(context.Background(), dir); err == nil {
		t.Fatal("opened a directory")
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		path := bk.newDSN(t)
		s := openStore(t, path)
		s.Close()
		raw, err := bk.raw(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Exec(`INSERT INTO goose_db_version (version_id, is_applied) VALUES (99999, true)`); err != nil {
			t.Fatal(err)
		}
		raw.Close()
		if _, err := db.Open(context.Background(), path); err == nil || !strings.Contains(err.Error(), "newer than this binary") {
			t.Fatalf("opened a database from a newer binary: %v", err)
		}
	})
}

// The cleanup deletes by the clock of the moment. A clock that ran up to an
// hour fast then and is set back after must still find every request that
// counts, or the day window would admit past its limit.
func TestCleanupOnAFastClockKeepsWhatCounts(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		s := openStore(t, bk.newDSN(t))
		now := t0
		svc := policy.NewService(s, s, policy.WithClock(func() time.Time { return now }))
		day := policy.Tier{Name: "day", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(3)), policy.RequestsPerHour: new(int64(3)), policy.RequestsPerDay: new(int64(3))}}
		if _, _, err := svc.PutTier(ctx, day); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			now = t0.Add(time.Duration(i) * time.Second)
			if d, err := svc.Check(ctx, policy.Request{UserID: "u", Tier: "day"}, false); err != nil || !d.Allowed() {
				t.Fatalf("check %d: %+v, %v", i, d, err)
			}
		}
		// The cleanup runs on a clock an hour fast, just before the first
		// request would leave the day window by it...
		fast := t0.Add(policy.Retention + time.Hour - time.Second)
		if _, err := s.Prune(ctx, fast.Add(-policy.KeepFor)); err != nil {
			t.Fatal(err)
		}
		// ...and the clock is set back an hour: all three still count.
		now = fast.Add(-time.Hour)
		d, err := svc.Check(ctx, policy.Request{UserID: "u", Tier: "day"}, false)
		if err != nil || d.Allowed() {
			t.Fatalf("a 4th request within the day: %+v, %v; want refused", d, err)
		}
		if got := d.Windows[policy.Day].Count; got != 3 {
			t.Errorf("the day window counts %d, want 3", got)
		}
	})
}

// A PostgreSQL URL's password is in no error Open returns, nor in Redact.
func TestPostgresPasswordStaysOutOfErrors(t *testing.T) {
	for _, dsn := range []string{
		"postgres://guard:topsecret-41@127.0.0.1:1/none?sslmode=disable&connect_timeout=1", // nothing listens
		"postgresql://guard:topsecret-41@[::1/none",                                        // does not parse
	} {
		_, err := db.Open(context.Background(), dsn)
		if err == nil || strings.Contains(err.Error(), "topsecret-41") {
			t.Errorf("Open(%s): %v; want an error without the password", db.Redact(dsn), err)
		}
		if r := db.Redact(dsn); strings.Contains(r, "topsecret-41") {
			t.Errorf("Redact: %s", r)
		}
	}
	if got := db.Redact("guardrail.db"); got != "guardrail.db" {
		t.Errorf("Redact of a file path: %q", got)
	}
}
