package db_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

// benchTier admits everything, so every check of a benchmark takes the
// expensive path: evaluate three windows, then insert.
var benchTier = policy.Tier{Name: "bench", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(policy.MaxLimit)), policy.RequestsPerHour: new(int64(policy.MaxLimit)), policy.RequestsPerDay: new(int64(policy.MaxLimit))}, Features: []string{policy.AllFeatures}}

// steppingClock returns the Now of a policy.TestClock from start that
// moves by step on every reading. With step set to a day divided by n, a
// user checked on every reading keeps n requests in the day window however
// many checks a benchmark runs: each new one pushes the oldest out.
// Benchmarks stay in a steady state instead of growing the window they
// measure.
func steppingClock(start time.Time, step time.Duration) func() time.Time {
	clock := policy.NewTestClock(start)
	return func() time.Time { return clock.Advance(step) }
}

// checkFixture is one store with users whose day window holds about
// history requests each.
type checkFixture struct {
	store *db.Store
	svc   *policy.Service
	path  string
	users []string
}

// newCheckFixture opens a store and fills the day window of each user to
// history requests by running checks, the way production fills it.
func newCheckFixture(b *testing.B, users, history int, opts ...db.Option) *checkFixture {
	b.Helper()
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "bench.db")
	store, err := db.Open(ctx, path, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	if _, err := store.UpdateTiers(ctx, policy.TierUpdate{Put: []policy.Tier{benchTier}}); err != nil {
		b.Fatal(err)
	}
	// Every user is checked once per users readings of the clock.
	now := steppingClock(t0, 24*time.Hour/time.Duration(history*users))
	f := &checkFixture{store: store, path: path, svc: policy.NewService(store, store, policy.WithClock(now))}
	for u := range users {
		f.users = append(f.users, fmt.Sprintf("user-%05d", u))
	}
	// Fill in parallel so that the writer batches, as it does under load.
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(history*users); i = next.Add(1) - 1 {
				if _, err := f.svc.Check(ctx, f.request(int(i)), false); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	return f
}

func (f *checkFixture) request(i int) policy.Request {
	return policy.Request{UserID: f.users[i%len(f.users)], Tier: benchTier.Name}
}

// reportWindow adds the first user's day count as a metric, so the output
// shows the history size each figure was measured at.
func (f *checkFixture) reportWindow(b *testing.B) {
	b.Helper()
	d, err := f.svc.Usage(context.Background(), f.users[0], "")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(d[policy.Day].Count), "day-window")
}

// reportCPU adds the process's CPU time per operation since start as a
// metric: the cost of an operation however busy the machine is.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(dbtest.CPUTime()-start)/float64(b.N), "cpu-ns/op")
}

// BenchmarkCheck measures policy.Service.Check on the SQLite store: a full
// admission (tier lookup, three windows, one insert, durable commit) for a
// user with 10 and with 100,000 requests in the day window. The two must
// cost the same: windows are counted by index seeks, never by scanning.
func BenchmarkCheck(b *testing.B) {
	for _, history := range []int{10, 100_000} {
		f := newCheckFixture(b, 1, history)
		b.Run(fmt.Sprintf("history=%d/serial", history), func(b *testing.B) {
			ctx := context.Background()
			defer reportCPU(b, dbtest.CPUTime())
			for i := 0; b.Loop(); i++ {
				d, err := f.svc.Check(ctx, f.request(i), false)
				if err != nil || !d.Allowed() {
					b.Fatalf("check: %+v %v", d, err)
				}
			}
			f.reportWindow(b)
		})
		b.Run(fmt.Sprintf("history=%d/parallel", history), func(b *testing.B) {
			benchParallelChecks(b, f)
			f.reportWindow(b)
		})
	}
	// Many users, as a real service sees them: every check a different key.
	f := newCheckFixture(b, 10_000, 10)
	b.Run("users=10000/parallel", func(b *testing.B) { benchParallelChecks(b, f) })
}

// BenchmarkCheckSync compares synchronous=FULL with NORMAL under parallel
// load, where group commit spreads each fsync over a batch of checks.
func BenchmarkCheckSync(b *testing.B) {
	for _, mode := range []string{db.SyncFull, db.SyncNormal} {
		f := newCheckFixture(b, 1000, 10, db.WithSynchronous(mode))
		b.Run("sync="+mode+"/parallel", func(b *testing.B) { benchParallelChecks(b, f) })
		b.Run("sync="+mode+"/serial", func(b *testing.B) {
			ctx := context.Background()
			defer reportCPU(b, dbtest.CPUTime())
			for i := 0; b.Loop(); i++ {
				if _, err := f.svc.Check(ctx, f.request(i), false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchParallelChecks runs checks from 64 goroutines, the connection count
// of the HTTP load benchmark.
func benchParallelChecks(b *testing.B, f *checkFixture) {
	b.Helper()
	var next atomic.Int64
	b.SetParallelism(max(64/runtime.GOMAXPROCS(0), 1))
	defer reportCPU(b, dbtest.CPUTime())
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			d, err := f.svc.Check(ctx, f.request(int(next.Add(1))), false)
			if err != nil || !d.Allowed() {
				b.Errorf("check: %+v %v", d, err)
				return
			}
		}
	})
}

// BenchmarkStore measures the store alone: Admit with a decide that reads
// what Evaluate reads (the newest request and three window counts) and
// records, and a read-only View of the same.
func BenchmarkStore(b *testing.B) {
	ctx := context.Background()
	f := newCheckFixture(b, 1000, 10)
	now := t0.Add(48 * time.Hour)
	var tick atomic.Int64
	decide := func(h policy.History) (policy.Admission, error) {
		at := now.Add(time.Duration(tick.Add(1)) * time.Microsecond)
		if err := readWindows(h, at); err != nil {
			return policy.Admission{}, err
		}
		if last, ok, err := h.Last(); err != nil || (ok && !last.Before(at)) {
			return policy.Admission{At: last.Add(time.Microsecond), Record: ok}, err
		}
		return policy.Admission{At: at, Record: true}, nil
	}
	b.Run("admit/serial", func(b *testing.B) {
		defer reportCPU(b, dbtest.CPUTime())
		for i := 0; b.Loop(); i++ {
			if err := f.store.Admit(ctx, f.users[i%len(f.users)], decide); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("admit/parallel", func(b *testing.B) {
		var next atomic.Int64
		b.SetParallelism(max(64/runtime.GOMAXPROCS(0), 1))
		defer reportCPU(b, dbtest.CPUTime())
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := f.store.Admit(ctx, f.users[int(next.Add(1))%len(f.users)], decide); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("view/serial", func(b *testing.B) {
		defer reportCPU(b, dbtest.CPUTime())
		for i := 0; b.Loop(); i++ {
			err := f.store.View(ctx, f.users[i%len(f.users)], func(h policy.History) error { return readWindows(h, now) })
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

func readWindows(h policy.History, now time.Time) error {
	for _, w := range policy.Windows {
		if _, err := h.CountAfter(now.Add(-w.Duration())); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkDayCount counts one user's day window two ways on the same
// file: the store's two index seeks, and the SQL COUNT(*) range query a
// straightforward implementation would use, which visits every row.
func BenchmarkDayCount(b *testing.B) {
	ctx := context.Background()
	for _, history := range []int{10, 10_000, 100_000} {
		f := newCheckFixture(b, 1, history)
		now := t0.Add(24*time.Hour + time.Second)
		cutoff := now.Add(-24 * time.Hour)
		var want int64
		err := f.store.View(ctx, f.users[0], func(h policy.History) (err error) { want, err = h.CountAfter(cutoff); return err })
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("rows=%d/seek", history), func(b *testing.B) {
			defer reportCPU(b, dbtest.CPUTime())
			for b.Loop() {
				var n int64
				err := f.store.View(ctx, f.users[0], func(h policy.History) (err error) { n, err = h.CountAfter(cutoff); return err })
				if err != nil || n != want {
					b.Fatalf("count = %d, %v; want %d", n, err, want)
				}
			}
		})
		raw, err := sql.Open("sqlite", f.path+"?_pragma=busy_timeout(5000)")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { raw.Close() })
		stmt, err := raw.PrepareContext(ctx, countStarSQL)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("rows=%d/count_star", history), func(b *testing.B) {
			defer reportCPU(b, dbtest.CPUTime())
			for b.Loop() {
				tx, err := raw.BeginTx(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				var n int64
				err = tx.StmtContext(ctx, stmt).QueryRowContext(ctx, f.users[0], cutoff.UnixMicro()).Scan(&n)
				tx.Rollback()
				if err != nil || n != want {
					b.Fatalf("count(*) = %d, %v; want %d", n, err, want)
				}
			}
		})
	}
}

// countStarSQL is the scanning way to count a window.
const countStarSQL = `SELECT count(*) FROM requests WHERE user_id = ? AND ts > ?`
