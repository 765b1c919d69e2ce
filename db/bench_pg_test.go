package db_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

// BenchmarkCheckPostgres is a recording check on PostgreSQL: one caller
// (the latency of one check, mostly round trips to the server and its
// commit) and 16 (the pool's size; what a replica sustains). Each of 1,000
// users keeps about 100 requests in the day window. Skipped without a
// server.
func BenchmarkCheckPostgres(b *testing.B) {
	ctx := context.Background()
	store, err := db.Open(ctx, dbtest.Postgres(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	if _, err := store.UpdateTiers(ctx, policy.TierUpdate{Put: []policy.Tier{benchTier}}); err != nil {
		b.Fatal(err)
	}
	now := steppingClock(time.Now(), 24*time.Hour/100_000)
	svc := policy.NewService(store, store, policy.WithClock(now), policy.WithUsers(store))
	users := make([]string, 1000)
	for i := range users {
		users[i] = fmt.Sprintf("user-%04d", i)
	}
	check := func(i int) {
		if _, err := svc.Check(ctx, policy.Request{UserID: users[i%len(users)], Tier: benchTier.Name}, false); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 100 * len(users) / 10 { // a tenth of the history: enough for steady seeks
		check(i)
	}
	b.Run("serial", func(b *testing.B) {
		defer reportCPU(b, dbtest.CPUTime())
		for i := range b.N {
			check(i)
		}
	})
	b.Run("16 callers", func(b *testing.B) {
		b.SetParallelism(max(16/runtime.GOMAXPROCS(0), 1))
		defer reportCPU(b, dbtest.CPUTime())
		var next atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				check(int(next.Add(1)))
			}
		})
	})
}

// BenchmarkBusyAccountPostgres is what one very busy account costs on
// PostgreSQL: 16 callers check 1,000 users, all members of one account
// (each check takes the account's lock, then its user's, so the
// account's checks are decided one at a time), beside the same users in no
// account. Skipped without a server.
func BenchmarkBusyAccountPostgres(b *testing.B) {
	ctx := context.Background()
	store, err := db.Open(ctx, dbtest.Postgres(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	pooled := benchTier
	pooled.Account = &policy.LimitSet{}
	pooled.Account.Set(&policy.LimitFields[0], &[]int64{policy.MaxLimit}[0])
	if _, err := store.UpdateTiers(ctx, policy.TierUpdate{Put: []policy.Tier{pooled}}); err != nil {
		b.Fatal(err)
	}
	svc := policy.NewService(store, store, policy.WithUsers(store))
	if _, _, err := svc.PutAccount(ctx, policy.Account{AccountID: "busy", Tier: pooled.Name}); err != nil {
		b.Fatal(err)
	}
	for _, in := range []string{"", "busy"} {
		name := "no account"
		if in != "" {
			name = "one account"
		}
		b.Run(name+", 16 callers", func(b *testing.B) {
			b.SetParallelism(max(16/runtime.GOMAXPROCS(0), 1))
			defer reportCPU(b, dbtest.CPUTime())
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					user := fmt.Sprintf("%s-user-%04d", name[:2], next.Add(1)%1000)
					if _, err := svc.Check(ctx, policy.Request{UserID: user, Tier: pooled.Name, Account: in}, false); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkCallPostgres is a metered call on PostgreSQL as the gateway
// makes one: a check that opens it, then its finish with the tokens used,
// over 1,000 users; "check" and "finish" split the two. One caller gives
// the latency of each, round trips and commits; 16 what a replica
// sustains. Skipped without a server.
func BenchmarkCallPostgres(b *testing.B) {
	ctx := context.Background()
	store, err := db.Open(ctx, dbtest.Postgres(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	if _, err := store.UpdateTiers(ctx, policy.TierUpdate{Put: []policy.Tier{meteredBenchTier}}); err != nil {
		b.Fatal(err)
	}
	svc := policy.NewService(store, store)
	var next atomic.Int64
	used := int64(80)
	call := func(b *testing.B, checkNS, finishNS *atomic.Int64) bool {
		start := time.Now()
		d, err := svc.Check(ctx, policy.Request{UserID: fmt.Sprintf("user-%04d", next.Add(1)%1000), Tier: meteredBenchTier.Name, Tokens: 100}, false)
		if err != nil || d.CallID == "" {
			b.Errorf("check: %+v %v", d, err)
			return false
		}
		mid := time.Now()
		if _, err := svc.FinishCall(ctx, d.CallID, policy.Report{Tokens: &used}); err != nil {
			b.Error(err)
			return false
		}
		checkNS.Add(int64(mid.Sub(start)))
		finishNS.Add(int64(time.Since(mid)))
		return true
	}
	for _, callers := range []int{1, 16} {
		name := "serial"
		if callers > 1 {
			name = fmt.Sprintf("%d callers", callers)
		}
		b.Run(name, func(b *testing.B) {
			var checkNS, finishNS atomic.Int64
			b.SetParallelism(max(callers/runtime.GOMAXPROCS(0), 1))
			defer reportCPU(b, dbtest.CPUTime())
			if callers == 1 {
				for range b.N {
					if !call(b, &checkNS, &finishNS) {
						return
					}
				}
			} else {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() && call(b, &checkNS, &finishNS) {
					}
				})
			}
			b.ReportMetric(float64(checkNS.Load())/float64(b.N), "check-ns/op")
			b.ReportMetric(float64(finishNS.Load())/float64(b.N), "finish-ns/op")
		})
	}
}
