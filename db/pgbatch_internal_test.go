package db

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

var batchT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// openPG opens a store on dsn, a PostgreSQL database, closed when t ends.
func openPG(t *testing.T, dsn string) *Store {
	t.Helper()
	s, err := Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// putTier stores tier through s.
func putTier(t *testing.T, s *Store, tier policy.Tier) {
	t.Helper()
	if tier.Features == nil {
		tier.Features = []string{"*"}
	}
	if _, err := s.UpdateTiers(context.Background(), policy.TierUpdate{Put: []policy.Tier{tier}}); err != nil {
		t.Fatal(err)
	}
}

// stopBatches ends s's batch loops, so that planned admissions wait in
// its queue until the test runs them (see runQueued).
func stopBatches(t *testing.T, s *Store) *pgWriter {
	t.Helper()
	w := s.writer.(*pgWriter)
	close(w.jobs)
	w.batchers.Wait()
	w.jobs = make(chan *pgJob, 1024)
	return w
}

// runQueued waits for n planned admissions in w's queue and runs them as
// one batch, in the order queued.
func runQueued(t *testing.T, w *pgWriter, n int) {
	t.Helper()
	jobs := make([]*pgJob, n)
	for i := range jobs {
		select {
		case jobs[i] = <-w.jobs:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d admissions queued, want %d", i, n)
		}
	}
	b := &pgBatch{w: w}
	b.run(jobs)
	b.run(nil) // the commit
	b.release()
}

// rowsOf returns user's requests as (ts, seq) pairs in order.
func rowsOf(t *testing.T, s *Store, user string) [][2]int64 {
	t.Helper()
	rows, err := s.db.Query(`SELECT ts, seq FROM requests WHERE user_id = $1 ORDER BY ts, seq`, user)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out [][2]int64
	for rows.Next() {
		var r [2]int64
		if err := rows.Scan(&r[0], &r[1]); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// Admissions of one user in one batch are decided in order, each on the
// rows the ones before it recorded: of five checks against a minute limit
// of three, the first three are admitted, counting 1, 2 and 3, and the
// other two refused, in the same statement as another user's.
func TestBatchDecidesOneUsersAdmissionsInOrder(t *testing.T) {
	s := openPG(t, dbtest.Postgres(t))
	putTier(t, s, policy.Tier{Name: "three", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(3)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(100))}})
	w := stopBatches(t, s)
	svc := policy.NewService(s, s, policy.WithClock(func() time.Time { return batchT0 }), policy.WithUsers(s))
	users := []string{"a", "b", "a", "a", "b", "a", "a", "b"}
	decisions := make(chan policy.Decision, len(users))
	var wg sync.WaitGroup
	for i, u := range users {
		wg.Go(func() {
			d, err := svc.Check(context.Background(), policy.Request{UserID: u, Tier: "three"}, false)
			if err != nil {
				t.Errorf("check %d of %s: %v", i, u, err)
			}
			d.Tier = u // which user it was
			decisions <- d
		})
	}
	runQueued(t, w, len(users))
	wg.Wait()
	close(decisions)
	counts := map[string][]int64{}
	refused := map[string]int{}
	for d := range decisions {
		if d.Allowed() {
			counts[d.Tier] = append(counts[d.Tier], d.Windows[policy.Minute].Count)
			continue
		}
		refused[d.Tier]++
		if d.Reason != policy.Minute.Reason() || d.Windows[policy.Minute].Count != 3 || d.RetryAfter != 60 {
			t.Errorf("refused check of %s: %q, minute count %d, retry after %d; want the minute's 3 and 60", d.Tier, d.Reason, d.Windows[policy.Minute].Count, d.RetryAfter)
		}
	}
	for _, u := range []string{"a", "b"} {
		got := map[int64]bool{}
		for _, n := range counts[u] {
			got[n] = true
		}
		if len(counts[u]) != 3 || !got[1] || !got[2] || !got[3] {
			t.Errorf("admitted checks of %s counted %v, want 1, 2 and 3", u, counts[u])
		}
		if rows := rowsOf(t, s, u); len(rows) != 3 || rows[0][1] != 1 || rows[2][1] != 3 {
			t.Errorf("%s's rows: %v, want three numbered 1 to 3", u, rows)
		}
	}
	if refused["a"] != 2 || refused["b"] != 0 {
		t.Errorf("refused: %v, want a twice", refused)
	}
	if batched, alone, disagreements := w.batched.Load(), w.alone.Load(), w.disagreements.Load(); batched != 8 || alone != 0 || disagreements != 0 {
		t.Errorf("%d decided in the batch, %d alone, %d disagreements; want 8, 0, 0", batched, alone, disagreements)
	}
}

// A decide that disagrees with what admit_batch recorded wins: the batch
// rolls back and the admission is decided alone, as decide says.
func TestBatchGivesWayToDecide(t *testing.T) {
	s := openPG(t, dbtest.Postgres(t))
	ctx := context.Background()
	w := s.writer.(*pgWriter)
	base, ok := s.CachedTier("pro")
	if !ok {
		t.Fatal("no tier pro")
	}
	// The plan says nothing fits (ceilings of 0); decide records.
	closed := base.WithLimits(policy.RequestLimits{})
	p := &policy.Plan{Now: batchT0, Tier: &closed, Base: &base}
	record := func(h policy.History) (policy.Admission, error) {
		return policy.Admission{At: batchT0, Record: true, TierID: base.ID}, nil
	}
	if err := s.AdmitPlanned(ctx, "u", p, record); err != nil {
		t.Fatal(err)
	}
	if rows := rowsOf(t, s, "u"); len(rows) != 1 {
		t.Fatalf("after a decide that records against the plan: %d rows, want 1", len(rows))
	}
	// The plan says it fits; decide refuses.
	open := base.WithLimits(policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(10)), policy.RequestsPerHour: new(int64(10)), policy.RequestsPerDay: new(int64(10))}})
	p = &policy.Plan{Now: batchT0.Add(time.Second), Tier: &open, Base: &base}
	refuse := func(h policy.History) (policy.Admission, error) { return policy.Admission{}, nil }
	if err := s.AdmitPlanned(ctx, "u", p, refuse); err != nil {
		t.Fatal(err)
	}
	if rows := rowsOf(t, s, "u"); len(rows) != 1 {
		t.Fatalf("after a decide that refuses against the plan: %d rows, want 1", len(rows))
	}
	// The plan and decide agree.
	if err := s.AdmitPlanned(ctx, "u", p, func(h policy.History) (policy.Admission, error) {
		return policy.Admission{At: p.Now, Record: true, TierID: base.ID}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if rows := rowsOf(t, s, "u"); len(rows) != 2 {
		t.Fatalf("after a decide that agrees: %d rows, want 2", len(rows))
	}
	if batched, alone, disagreements := w.batched.Load(), w.alone.Load(), w.disagreements.Load(); batched != 1 || alone != 2 || disagreements != 2 {
		t.Errorf("%d decided in a batch, %d alone, %d disagreements; want 1, 2, 2", batched, alone, disagreements)
	}
}

// An admission whose tier or record changed since its check read them
// (through another replica) is left to decide alone, with nothing
// recorded by the batch, and the store reads the tiers again.
func TestBatchLeavesChangedTiersAndRecordsAlone(t *testing.T) {
	dsn := dbtest.Postgres(t)
	s, other := openPG(t, dsn), openPG(t, dsn)
	ctx := context.Background()
	w := s.writer.(*pgWriter)
	putTier(t, s, policy.Tier{Name: "t", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(5)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(100))}})
	base, _ := s.CachedTier("t")
	var seen []bool // whether each decide was told the plan's tier is current
	decide := func(at time.Time) func(h policy.History) (policy.Admission, error) {
		return func(h policy.History) (policy.Admission, error) {
			cur, ok, err := h.(policy.CurrentTiers).CurrentTier("t")
			if err != nil {
				return policy.Admission{}, err
			}
			seen = append(seen, ok && policy.SameLimits(cur, &base))
			return policy.Admission{At: at, Record: true, TierID: base.ID}, nil
		}
	}
	changed := base
	changed.Limits[policy.RequestsPerMinute] = new(int64(6))
	putTier(t, other, changed)
	if err := s.AdmitPlanned(ctx, "u", &policy.Plan{Now: batchT0, Tier: &base, Base: &base}, decide(batchT0)); err != nil {
		t.Fatal(err)
	}
	if cur, _ := s.CachedTier("t"); cur.Limits.Value(policy.RequestsPerMinute) != 6 {
		t.Errorf("the store's tier after a batch found it changed: %d a minute, want 6", cur.Limits.Value(policy.RequestsPerMinute))
	}
	if len(seen) != 1 || seen[0] {
		t.Errorf("decide saw the plan's tier as current: %v; want one decide, alone, that did not", seen)
	}

	// A record made through the other replica, which this one's check
	// did not see.
	base, _ = s.CachedTier("t")
	rec := policy.UserRecord{UserID: "u", Limits: policy.Overrides{policy.RequestsPerMinute: policy.To(1)}}
	if _, err := other.UpdateUsers(ctx, policy.UserUpdate{Put: []policy.UserRecord{rec}}); err != nil {
		t.Fatal(err)
	}
	p := &policy.Plan{Now: batchT0.Add(time.Second), Tier: &base, Base: &base, ConfirmUser: true}
	var found bool
	if err := s.AdmitPlanned(ctx, "u", p, func(h policy.History) (policy.Admission, error) {
		r, ok, err := h.(policy.CurrentUsers).CurrentUser("u")
		found = ok && r.Limits[policy.RequestsPerMinute].Limit != nil
		return policy.Admission{}, err
	}); err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Error("decide, alone, did not see the record made through the other replica")
	}
	if rows := rowsOf(t, s, "u"); len(rows) != 1 {
		t.Errorf("u's rows: %d, want the one the first decide recorded", len(rows))
	}
	if batched, alone, disagreements := w.batched.Load(), w.alone.Load(), w.disagreements.Load(); batched != 0 || alone != 2 || disagreements != 0 {
		t.Errorf("%d decided in a batch, %d alone, %d disagreements; want 0, 2, 0", batched, alone, disagreements)
	}
}

// Batches of three replicas that share users take their locks in one
// order, and the cleanup, which walks users in another, waits only while
// holding none: under load with a cleanup running, no batch ever fails
// (each would be left to decide alone), no user is admitted past the
// limit and none short of it.
func TestBatchesOfReplicasNeverDeadlock(t *testing.T) {
	dsn := dbtest.Postgres(t)
	stores := []*Store{openPG(t, dsn), openPG(t, dsn), openPG(t, dsn)}
	ctx := context.Background()
	// Metered, with calls that expire at once: the cleanup settles them,
	// taking each user's lock.
	limit := int64(40)
	putTier(t, stores[0], policy.Tier{Name: "m", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(limit)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(1000)), policy.MaxConcurrent: new(int64(1000))}})
	var now sync.Mutex
	clock := batchT0
	tick := func() time.Time {
		now.Lock()
		defer now.Unlock()
		clock = clock.Add(time.Microsecond)
		return clock
	}
	const users, perUser, callers = 12, 60, 24
	for _, s := range stores {
		if _, err := s.freshTiers(ctx); err != nil {
			t.Fatal(err)
		}
	}
	svcs := make([]*policy.Service, len(stores))
	for i, s := range stores {
		svcs[i] = policy.NewService(s, s, policy.WithClock(tick), policy.WithUsers(s), policy.WithCallTimeout(time.Microsecond))
	}
	var mu sync.Mutex
	admitted := map[string]int64{}
	next := 0
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= users*perUser {
					return
				}
				u := fmt.Sprintf("user-%d", (i*7)%users)
				d, err := svcs[c%len(svcs)].Check(ctx, policy.Request{UserID: u, Tier: "m", Tokens: 1}, false)
				if err != nil {
					t.Errorf("check: %v", err)
					return
				}
				if d.Allowed() {
					mu.Lock()
					admitted[u]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			if _, err := stores[1].Prune(ctx, batchT0.Add(-time.Hour)); err != nil {
				t.Errorf("prune: %v", err)
				return
			}
		}
	})
	wg.Wait()
	for u := range users {
		if got := admitted[fmt.Sprintf("user-%d", u)]; got != limit {
			t.Errorf("user-%d: %d admitted, want the limit, %d", u, got, limit)
		}
	}
	for i, s := range stores {
		w := s.writer.(*pgWriter)
		if alone, disagreements := w.alone.Load(), w.disagreements.Load(); alone != 0 || disagreements != 0 {
			t.Errorf("replica %d: %d admissions left to decide alone, %d disagreements; want none", i, alone, disagreements)
		}
	}
}

// A caller that goes away before its admission joins a batch has nothing
// recorded.
func TestBatchDropsAbandonedAdmissions(t *testing.T) {
	s := openPG(t, dbtest.Postgres(t))
	w := stopBatches(t, s)
	base, _ := s.CachedTier("pro")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- s.AdmitPlanned(ctx, "gone", &policy.Plan{Now: batchT0, Tier: &base, Base: &base}, func(h policy.History) (policy.Admission, error) {
			return policy.Admission{At: batchT0, Record: true, TierID: base.ID}, nil
		})
	}()
	var j *pgJob
	select {
	case j = <-w.jobs:
	case <-time.After(10 * time.Second):
		t.Fatal("the admission was never queued")
	}
	cancel()
	b := &pgBatch{w: w}
	b.run([]*pgJob{j})
	b.release()
	if err := <-errc; err != context.Canceled {
		t.Fatalf("abandoned admission: %v, want context.Canceled", err)
	}
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM requests`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows after an abandoned admission: %d, %v", n, err)
	}
}

// A batch that fails for one of its users (a lock held elsewhere past
// lock_timeout) fails nobody else: each admission is decided alone, and
// only the held user's fails.
func TestBatchFailureFailsOnlyItsCause(t *testing.T) {
	dsn := dbtest.Postgres(t)
	ctx := context.Background()
	s, err := Open(ctx, dsn, WithBusyTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	held, err := s.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if _, err := held.ExecContext(ctx, `SELECT pg_advisory_lock($1, $2)`, lockUser, userLockKey("held")); err != nil {
		t.Fatal(err)
	}
	w := stopBatches(t, s)
	base, _ := s.CachedTier("pro")
	errs := map[string]chan error{"held": make(chan error, 1), "free": make(chan error, 1)}
	for user, errc := range errs {
		go func() {
			errc <- s.AdmitPlanned(ctx, user, &policy.Plan{Now: batchT0, Tier: &base, Base: &base}, func(h policy.History) (policy.Admission, error) {
				return policy.Admission{At: batchT0, Record: true, TierID: base.ID}, nil
			})
		}()
	}
	runQueued(t, w, 2)
	if err := <-errs["free"]; err != nil {
		t.Errorf("free user: %v", err)
	}
	if err := <-errs["held"]; policy.ErrorCode(err) != policy.EUNAVAILABLE {
		t.Errorf("held user: %v, want EUNAVAILABLE", err)
	}
	if got := len(rowsOf(t, s, "free")); got != 1 {
		t.Errorf("free user's rows: %d, want 1", got)
	}
	if got := len(rowsOf(t, s, "held")); got != 0 {
		t.Errorf("held user's rows: %d, want 0", got)
	}
	if alone := w.alone.Load(); alone != 2 {
		t.Errorf("%d admissions decided alone, want 2", alone)
	}
}

// A store with a pool of one connection opens (migrating takes two), and
// under load on it a check decided alone (its record changed through
// another replica) gets the connection too: the batch loop lets it go
// whenever it is idle.
func TestPoolOfOne(t *testing.T) {
	dsn := dbtest.Postgres(t)
	ctx := context.Background()
	octx, ocancel := context.WithTimeout(ctx, 10*time.Second)
	defer ocancel()
	s, err := Open(octx, dsn, WithPoolSize(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	other := openPG(t, dsn)
	for _, u := range []struct {
		s     *Store
		limit int64
	}{{s, 100}, {other, 50}} {
		rec := policy.UserRecord{UserID: "changed", Limits: policy.Overrides{policy.RequestsPerMinute: policy.To(u.limit)}}
		if _, err := u.s.UpdateUsers(ctx, policy.UserUpdate{Put: []policy.UserRecord{rec}}); err != nil {
			t.Fatal(err)
		}
	}
	svc := policy.NewService(s, s, policy.WithClock(func() time.Time { return batchT0 }), policy.WithUsers(s))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := svc.Check(ctx, policy.Request{UserID: fmt.Sprintf("busy-%d-%d", g, i%10)}, false); err != nil {
					t.Errorf("check: %v", err)
					return
				}
			}
		})
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := svc.Check(cctx, policy.Request{UserID: "changed"}, false)
	close(stop)
	wg.Wait()
	if err != nil || !d.Allowed() || d.Windows[policy.Minute].Limit != 50+5 {
		t.Fatalf("check of a user whose record changed elsewhere, under load on one connection: %+v, %v; want admitted under the limit of 50 and the burst of 5", d, err)
	}
	if alone := s.writer.(*pgWriter).alone.Load(); alone == 0 {
		t.Fatal("no admission was decided alone")
	}
}
