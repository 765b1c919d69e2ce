package db_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

// BenchmarkRefusedCheck measures a refused check of a user whose day window
// holds 100,000 requests, under a day limit lowered to 1,000 and under one
// equal to the count. Evaluate then asks for the (count-ceiling+1)-th
// oldest request of the window, to say when it admits again: k = 99,000 or
// so against k = 1. Both must cost about the same, recorded (in the writer,
// where every other user's admission waits behind it) or dry (on a read
// connection). Refusals are not recorded, so a client can repeat them at
// will.
func BenchmarkRefusedCheck(b *testing.B) {
	ctx := context.Background()
	const history = 100_000
	f := newCheckFixture(b, 1, history)
	now := t0.Add(24*time.Hour + time.Second)
	svc := policy.NewService(f.store, f.store, policy.WithClock(func() time.Time { return now }))
	var n int64
	err := f.store.View(ctx, f.users[0], func(h policy.History) (err error) {
		n, err = h.CountAfter(now.Add(-24 * time.Hour))
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	for _, ceiling := range []int64{n, 1000} {
		tier := benchTier
		tier.Name = fmt.Sprintf("day-%d", ceiling)
		// The minute and the hour may not be above the day (a tier's
		// limits must all bind): at the day's ceiling they refuse too,
		// and the first of them names the reason, but retry_after still
		// needs the day's k-th row, which is what this measures.
		for _, id := range []policy.LimitID{policy.RequestsPerMinute, policy.RequestsPerHour, policy.RequestsPerDay} {
			tier.Limits[id] = new(int64(ceiling))
		}
		if _, err := f.store.UpdateTiers(ctx, policy.TierUpdate{Put: []policy.Tier{tier}}); err != nil {
			b.Fatal(err)
		}
		req := policy.Request{UserID: f.users[0], Tier: tier.Name}
		for _, dry := range []bool{false, true} {
			name := fmt.Sprintf("rows=%d/k=%d/recorded", n, n-ceiling+1)
			if dry {
				name = fmt.Sprintf("rows=%d/k=%d/dry", n, n-ceiling+1)
			}
			b.Run(name, func(b *testing.B) {
				defer reportCPU(b, dbtest.CPUTime())
				for b.Loop() {
					d, err := svc.Check(ctx, req, dry)
					if err != nil || d.Allowed() || d.RetryAfter < 1 {
						b.Fatalf("check: %+v %v", d, err)
					}
				}
			})
		}
	}
}
