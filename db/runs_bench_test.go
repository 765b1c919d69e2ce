package db_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/policyguard/policyguard/policy"
)

// BenchmarkRunCheck measures a metered check and its finish on SQLite,
// each caller a user of its own, outside a run and in one (each caller's
// own run, the run's budget read and written in the admission).
func BenchmarkRunCheck(b *testing.B) {
	for _, inRun := range []bool{false, true} {
		b.Run(fmt.Sprintf("run=%v", inRun), func(b *testing.B) {
			ctx := context.Background()
			s := openStore(b, "")
			svc := policy.NewService(s, s, policy.WithClock(tickingClock(t0)))
			tier := agentsTier(policy.LimitSet{policy.MaxRunRequests: new(int64(1 << 30))})
			tier.Limits[policy.TokensPerDay] = new(int64(1 << 30))
			if _, _, err := svc.PutTier(ctx, tier); err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				user := fmt.Sprintf("u%d", next.Add(1))
				req := policy.Request{UserID: user, Tier: "agents", Tokens: 10}
				if inRun {
					req.RunID = "run-" + user
				}
				for pb.Next() {
					d, err := svc.Check(ctx, req, false)
					if err != nil || !d.Allowed() {
						b.Fatalf("%+v %v", d, err)
					}
					if _, err := svc.FinishCall(ctx, d.CallID, policy.Report{}); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
