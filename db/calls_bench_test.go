package db_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

// meteredBenchTier meters tokens in every window and concurrency, with
// limits nothing reaches: every check takes the metered path in full.
var meteredBenchTier = policy.Tier{Name: "bench-metered", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(policy.MaxLimit)), policy.RequestsPerHour: new(int64(policy.MaxLimit)), policy.RequestsPerDay: new(int64(policy.MaxLimit)), policy.TokensPerMinute: i64(policy.MaxLimit), policy.TokensPerHour: i64(policy.MaxLimit), policy.TokensPerDay: i64(policy.MaxLimit), policy.MaxConcurrent: i64(policy.MaxLimit)}, Features: []string{policy.AllFeatures}}

// meteredFixture is one user on a store whose day window holds about
// history requests and, on the metered tier, as many finished calls.
type meteredFixture struct {
	svc  *policy.Service
	user string
}

func newMeteredFixture(b *testing.B, tier policy.Tier, history int, finish bool, opts ...db.Option) *meteredFixture {
	b.Helper()
	ctx := context.Background()
	store, err := db.Open(ctx, filepath.Join(b.TempDir(), "bench.db"), opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	if _, err := store.UpdateTiers(ctx, policy.TierUpdate{Put: []policy.Tier{tier}}); err != nil {
		b.Fatal(err)
	}
	readings := 1 // of the clock per call: the check, and the finish if any
	if finish && tier.Metered() {
		readings = 2
	}
	now := steppingClock(t0, 24*time.Hour/time.Duration(history*readings))
	f := &meteredFixture{svc: policy.NewService(store, store, policy.WithClock(now)), user: "user"}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(history); i = next.Add(1) {
				if err := f.call(ctx, tier.Name, finish); err != nil {
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

// call checks one request of 100 tokens and, on a metered tier and when
// finish is set, finishes its call with 80.
func (f *meteredFixture) call(ctx context.Context, tier string, finish bool) error {
	d, err := f.svc.Check(ctx, policy.Request{UserID: f.user, Tier: tier, Tokens: 100}, false)
	if err != nil || !d.Allowed() {
		return fmt.Errorf("check: %+v %v", d, err)
	}
	if finish && d.CallID != "" {
		_, err = f.svc.FinishCall(ctx, d.CallID, policy.Report{Tokens: i64(80)})
	}
	return err
}

// BenchmarkMeteredCheck compares, in process, a check of an unmetered tier
// with a check of a metered one (whose call is left to expire, so the
// check also settles the calls that expired), and a metered check followed
// by its finish, each for a user with 10 and with 100,000 calls in the day
// window. The figures at 10 and 100,000 must be the same: finished tokens
// are counted from running totals by seeks, never by scanning.
func BenchmarkMeteredCheck(b *testing.B) {
	ctx := context.Background()
	for _, history := range []int{10, 100_000} {
		for _, c := range []struct {
			name   string
			tier   policy.Tier
			finish bool
		}{
			{"unmetered", benchTier, false},
			{"metered", meteredBenchTier, false},
			{"metered+finish", meteredBenchTier, true},
		} {
			// Built on the first run only, and owned by the parent: a
			// sub-benchmark runs its function more than once.
			var f *meteredFixture
			parent := b
			b.Run(fmt.Sprintf("history=%d/%s", history, c.name), func(b *testing.B) {
				if f == nil {
					f = newMeteredFixture(parent, c.tier, history, c.finish, db.WithSynchronous(db.SyncNormal))
				}
				b.ResetTimer()
				defer reportCPU(b, dbtest.CPUTime())
				for b.Loop() {
					if err := f.call(ctx, c.tier.Name, c.finish); err != nil {
						b.Fatal(err)
					}
				}
				u, err := f.svc.UsageReport(ctx, f.user, "")
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(u.Windows[policy.Day].Count), "day-window")
			})
		}
	}
}
