package db_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

// BenchmarkRefusedCheckCounting measures a check refused by the per-minute window,
// counted (the service's wiring) and uncounted: the difference is what
// counting refusals costs a check. Counting is a map update under a mutex;
// the counts are stored with the writer's next commit.
func BenchmarkRefusedCheckCounting(b *testing.B) {
	for _, counted := range []bool{false, true} {
		name := "uncounted"
		if counted {
			name = "counted"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			s, err := db.Open(ctx, filepath.Join(b.TempDir(), "bench.db"), db.WithSynchronous(db.SyncNormal))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			tier := policy.Tier{Name: "one", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(10)), policy.RequestsPerDay: new(int64(10))}}
			if _, err := s.UpdateTiers(ctx, policy.TierUpdate{At: t0, Source: policy.SourceAPI, Put: []policy.Tier{tier}}); err != nil {
				b.Fatal(err)
			}
			now := func() time.Time { return t0 }
			opts := []policy.Option{policy.WithClock(now)}
			if counted {
				opts = append(opts, policy.WithStats(s, s))
			}
			svc := policy.NewService(s, s, opts...)
			req := policy.Request{UserID: "u", Tier: "one"}
			if d, err := svc.Check(ctx, req, false); err != nil || !d.Allowed() {
				b.Fatalf("first check: %+v, %v", d, err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				d, err := svc.Check(ctx, req, false)
				if err != nil || d.Allowed() {
					b.Fatalf("%+v, %v: want a refusal", d, err)
				}
			}
		})
	}
}

// BenchmarkCountCheck measures counting one check alone, from parallel
// goroutines as the checks of a busy service do.
func BenchmarkCountCheck(b *testing.B) {
	s := openStore(b, "")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.CountCheck(t0, "user-1", "free", policy.CountMinute)
		}
	})
}
