package db_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

// previewRows is the number of requests a preview benchmark replays.
const previewRows = 1_000_000

// previewFixture is a store holding previewRows requests of benchTier over
// the day before now: 10,000 users of 100 requests each, in bursts, so the
// proposed limits refuse some of them.
type previewFixture struct {
	store *db.Store
	svc   *policy.Service
	now   time.Time
	users int
}

// newPreviewFixture fills the table with one bulk INSERT on a connection of
// its own: running a million checks would take minutes and measure nothing
// more. Each user's seq runs 1, 2, ... as the writer numbers it.
func newPreviewFixture(b testing.TB) *previewFixture {
	return newPreviewFixtureOf(b, 10_000, previewRows/10_000)
}

// newPreviewFixtureOf is newPreviewFixture with users users of perUser
// requests each.
func newPreviewFixtureOf(b testing.TB, users, perUser int) *previewFixture {
	b.Helper()
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "preview.db")
	store, err := db.Open(ctx, path, db.WithSynchronous(db.SyncNormal))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	if _, err := store.UpdateTiers(ctx, policy.TierUpdate{Put: []policy.Tier{benchTier}}); err != nil {
		b.Fatal(err)
	}
	tier, err := store.Tier(ctx, benchTier.Name)
	if err != nil || tier.ID == 0 {
		b.Fatalf("tier %+v: %v", tier, err)
	}
	f := &previewFixture{store: store, now: t0.Add(24 * time.Hour), users: users}
	raw, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)&_pragma=synchronous(OFF)")
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	// Rows go in key order, which SQLite appends fastest, in one
	// statement per perStmt rows.
	perStmt := min(500, users*perUser)
	args := make([]any, 0, 4*perStmt)
	var values []byte
	for i := range perStmt {
		if i > 0 {
			values = append(values, ',')
		}
		values = append(values, "(?,?,?,?)"...)
	}
	tx, err := raw.BeginTx(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	st, err := tx.PrepareContext(ctx, `INSERT INTO requests (user_id, ts, seq, tier_id) VALUES `+string(values))
	if err != nil {
		b.Fatal(err)
	}
	start := t0.Add(time.Second).UnixMicro()
	for u := range f.users {
		user := fmt.Sprintf("user-%05d", u)
		// Bursts of ten a second apart, one every 15 minutes: a limit of
		// a few a minute refuses the ends of the bursts.
		for k := range perUser {
			ts := start + int64(u%900)*int64(time.Second/time.Microsecond) +
				int64(k/10)*int64(15*time.Minute/time.Microsecond) + int64(k%10)*int64(time.Second/time.Microsecond)
			args = append(args, user, ts, k+1, tier.ID)
			if len(args) == cap(args) {
				if _, err := st.ExecContext(ctx, args...); err != nil {
					b.Fatal(err)
				}
				args = args[:0]
			}
		}
	}
	if len(args) > 0 {
		b.Fatalf("%d rows left over: users*perUser must be a multiple of %d", len(args)/4, perStmt)
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	f.svc = policy.NewService(store, store, policy.WithClock(func() time.Time { return f.now }))
	return f
}

// previewLimits refuse the last five requests of each burst of ten.
var previewLimits = policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(5)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(10000))}}

// BenchmarkPreview replays a million stored requests through proposed
// limits, as POST /v1/tiers/{name}/preview does: one read of the table in
// key order and one pass per user with three window indexes.
func BenchmarkPreview(b *testing.B) {
	f := newPreviewFixture(b)
	ctx := context.Background()
	var p policy.Preview
	defer reportCPU(b, dbtest.CPUTime())
	for b.Loop() {
		var err error
		if p, err = f.svc.PreviewTier(ctx, benchTier.Name, previewLimits); err != nil {
			b.Fatal(err)
		}
	}
	if p.Requests != previewRows || p.RequestsRefused != previewRows/2 {
		b.Fatalf("preview replayed %d requests and refused %d, want %d and %d", p.Requests, p.RequestsRefused, previewRows, previewRows/2)
	}
	b.ReportMetric(float64(p.Requests), "rows/op")
}

// BenchmarkCheckDuringPreview measures the latency of checks, one at a
// time from 4 goroutines, with no preview running and with previews of a
// million rows running back to back on the read pool. Each op is one check
// in each phase; the metrics are the p50 and p99 of each phase.
func BenchmarkCheckDuringPreview(b *testing.B) {
	f := newPreviewFixture(b)
	ctx := context.Background()
	var clock atomic.Int64
	svc := policy.NewService(f.store, f.store, policy.WithClock(func() time.Time {
		return f.now.Add(time.Duration(clock.Add(1)) * time.Microsecond)
	}))
	phase := func(n int) []time.Duration {
		var (
			mu   sync.Mutex
			all  []time.Duration
			next atomic.Int64
			wg   sync.WaitGroup
		)
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine []time.Duration
				for i := next.Add(1); i <= int64(n); i = next.Add(1) {
					start := time.Now()
					if _, err := svc.Check(ctx, policy.Request{UserID: fmt.Sprintf("user-%05d", (int(i)*7+g)%f.users), Tier: benchTier.Name}, false); err != nil {
						b.Error(err)
						return
					}
					mine = append(mine, time.Since(start))
				}
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		slices.Sort(all)
		return all
	}
	pct := func(d []time.Duration, p float64) float64 {
		if len(d) == 0 {
			return 0
		}
		return float64(d[min(len(d)-1, int(float64(len(d))*p))].Microseconds()) / 1000
	}
	b.ResetTimer()
	idle := phase(b.N)

	stop := make(chan struct{})
	var previews atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := f.svc.PreviewTier(ctx, benchTier.Name, previewLimits); err != nil {
				b.Error(err)
				return
			}
			previews.Add(1)
		}
	}()
	time.Sleep(50 * time.Millisecond) // the preview's read is under way
	busy := phase(b.N)
	close(stop)
	<-done
	b.StopTimer()
	b.ReportMetric(pct(idle, 0.50), "idle-p50-ms")
	b.ReportMetric(pct(idle, 0.99), "idle-p99-ms")
	b.ReportMetric(pct(busy, 0.50), "preview-p50-ms")
	b.ReportMetric(pct(busy, 0.99), "preview-p99-ms")
	b.ReportMetric(float64(previews.Load()), "previews")
}
