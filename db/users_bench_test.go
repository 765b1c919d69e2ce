package db_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

// BenchmarkUserRecord measures what reading user records costs where the
// hot path reads them, on each backend: a read of one record from the
// table (User, what a check does when the cached record is stale), and a
// check of a user with a record that overrides two limits, whose record
// the admission confirms (on PostgreSQL, admit_batch reads and compares
// it every time). The records override two limits, so their limits
// column is parsed, not read as the {} of a record that overrides none.
func BenchmarkUserRecord(b *testing.B) {
	for _, bk := range backends {
		b.Run(bk.name, func(b *testing.B) {
			ctx := context.Background()
			s := openStore(b, bk.newDSN(b))
			if _, err := s.UpdateTiers(ctx, policy.TierUpdate{Put: []policy.Tier{benchTier}}); err != nil {
				b.Fatal(err)
			}
			users := make([]string, 1000)
			var put []policy.UserRecord
			for i := range users {
				users[i] = fmt.Sprintf("user-%04d", i)
				r := policy.UserRecord{UserID: users[i], Tier: benchTier.Name, Note: "bench"}
				r.Limits[policy.TokensPerDay] = policy.To(1_000_000)
				r.Limits[policy.MaxConcurrent] = policy.Unlimited
				put = append(put, r)
			}
			if _, err := s.UpdateUsers(ctx, policy.UserUpdate{Put: put, At: t0}); err != nil {
				b.Fatal(err)
			}
			b.Run("read", func(b *testing.B) {
				defer reportCPU(b, dbtest.CPUTime())
				for i := 0; b.Loop(); i++ {
					if _, err := s.User(ctx, users[i%len(users)]); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("check", func(b *testing.B) {
				now := steppingClock(t0, 24*time.Hour/100_000)
				svc := policy.NewService(s, s, policy.WithClock(now), policy.WithUsers(s))
				defer reportCPU(b, dbtest.CPUTime())
				for i := 0; b.Loop(); i++ {
					if d, err := svc.Check(ctx, policy.Request{UserID: users[i%len(users)]}, false); err != nil || !d.Allowed() {
						b.Fatalf("check: %+v %v", d, err)
					}
				}
			})
		})
	}
}
