package db_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

// TestMonthAcrossCleanup walks one user of Europe/Berlin with billing
// anchor 29 across the end of a billing period that is also the night
// clocks spring forward (29 March 2026), with the cleanup run between
// checks and a restart: the month's count and tokens, made of rolled-up
// totals and live rows, stay exact, and the periods list says what each
// period used.
func TestMonthAcrossCleanup(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		path := bk.newDSN(t)
		berlin, err := policy.LoadTimeZone("Europe/Berlin")
		if err != nil {
			t.Fatal(err)
		}
		// 23:30 on 28 March in Berlin (CET, UTC+1): the period that
		// began on 28 February (anchor 29 in a month of 28 days) ends
		// at midnight, 23:00 UTC; the next ends at midnight of 29
		// April, summer time (UTC+2): 22:00 UTC on 28 April.
		now := time.Date(2026, 3, 28, 22, 30, 0, 0, time.UTC)
		firstStart := time.Date(2026, 2, 27, 23, 0, 0, 0, time.UTC)
		boundary := time.Date(2026, 3, 28, 23, 0, 0, 0, time.UTC)
		nextEnd := time.Date(2026, 4, 28, 22, 0, 0, 0, time.UTC)
		var store *db.Store
		var svc *policy.Service
		open := func() {
			s, err := db.Open(ctx, path, db.WithSynchronous(db.SyncNormal), db.WithTimeZone(time.UTC))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			store = s
			svc = policy.NewService(s, s, policy.WithUsers(s), policy.WithAccounts(s),
				policy.WithClock(func() time.Time { return now }), policy.WithCallTimeout(time.Minute))
		}
		open()
		tier := policy.Tier{Name: "m", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(5)), policy.RequestsPerHour: new(int64(5)),
			policy.RequestsPerDay: new(int64(5)), policy.RequestsPerMonth: new(int64(5)), policy.TokensPerMonth: new(int64(400))}}
		if _, _, err := svc.PutTier(ctx, tier); err != nil {
			t.Fatal(err)
		}
		if _, _, err := svc.PutUser(ctx, policy.UserRecord{UserID: "u", Tier: "m", TimeZone: berlin.String(), BillingAnchor: 29}); err != nil {
			t.Fatal(err)
		}
		reserve := int64(50)
		check := func() policy.Decision {
			t.Helper()
			d, err := svc.Check(ctx, policy.Request{UserID: "u", Tokens: reserve}, false)
			if err != nil {
				t.Fatal(err)
			}
			if d.Month == nil {
				t.Fatalf("no month in %+v", d)
			}
			return d
		}
		finish := func(d policy.Decision, tokens int64) {
			t.Helper()
			if _, err := svc.FinishCall(ctx, d.CallID, policy.Report{Tokens: &tokens}); err != nil {
				t.Fatal(err)
			}
		}

		// Three calls of 40 tokens in the last half hour of February's
		// period.
		for i := range 3 {
			d := check()
			if !d.Allowed() || d.Month.Count != int64(i+1) || !d.Month.Start.Equal(firstStart) || !d.Month.End.Equal(boundary) {
				t.Fatalf("check %d before the boundary: %+v %+v", i, d, d.Month)
			}
			finish(d, 40)
			now = now.Add(time.Minute)
		}
		// At the boundary a new period begins, empty, in summer time.
		now = boundary
		for i := range 2 {
			d := check()
			if !d.Allowed() || d.Month.Count != int64(i+1) || !d.Month.Start.Equal(boundary) || !d.Month.End.Equal(nextEnd) {
				t.Fatalf("check %d after the boundary: %+v %+v", i, d, d.Month)
			}
			if got, want := d.Month.Reset, int64(nextEnd.Sub(now)/time.Second); got != want {
				t.Fatalf("month reset %d, want %d", got, want)
			}
			finish(d, 100)
		}

		// A day and more later the cleanup rolls every row up.
		now = boundary.Add(26 * time.Hour)
		if n, err := store.Prune(ctx, now.Add(-policy.KeepFor)); err != nil || n == 0 {
			t.Fatalf("prune: %d rows, %v", n, err)
		}
		periods, err := svc.Periods(ctx, "u", policy.BillingCycle{Location: berlin, Anchor: 29}.Period(now), time.Time{}, 10)
		if err != nil {
			t.Fatal(err)
		}
		want := []policy.PeriodTotals{{Start: boundary, End: nextEnd, Requests: 2, Tokens: 200}, {Start: firstStart, End: boundary, Requests: 3, Tokens: 120}}
		if len(periods) != len(want) {
			t.Fatalf("periods %+v, want %+v", periods, want)
		}
		for i := range want {
			if p := periods[i]; !p.Start.Equal(want[i].Start) || !p.End.Equal(want[i].End) || p.Requests != want[i].Requests || p.Tokens != want[i].Tokens {
				t.Fatalf("period %d: %+v, want %+v", i, p, want[i])
			}
		}

		// Rolled up, the period's 2 requests and 200 tokens count on:
		// a third and a fourth request reach 4 of 5 and, finished and
		// open, 350 tokens of 400, which a reservation of 60 would pass.
		d := check()
		if !d.Allowed() || d.Month.Count != 3 || d.Month.Tokens == nil || d.Month.Tokens.Used != 250 {
			t.Fatalf("after the cleanup: %+v %+v %+v", d, d.Month, d.Month.Tokens)
		}
		finish(d, 100)
		d = check()
		if !d.Allowed() || d.Month.Count != 4 || d.Month.Tokens.Used != 350 {
			t.Fatalf("fourth: %+v %+v", d.Month, d.Month.Tokens)
		}
		reserve = 60
		d2 := check()
		reserve = 50
		if d2.Allowed() || d2.Reason != "per-month token limit exceeded" || d2.RetryAfter != int64(nextEnd.Sub(now)/time.Second) {
			t.Fatalf("a reservation past 400 tokens: %+v %+v", d2, d2.Month.Tokens)
		}
		finish(d, 0)

		// Restarted, after the cleanup of what is now a day old.
		now = now.Add(26 * time.Hour)
		if _, err := store.Prune(ctx, now.Add(-policy.KeepFor)); err != nil {
			t.Fatal(err)
		}
		store.Close()
		open()
		d = check()
		if !d.Allowed() || d.Month.Count != 5 || d.Month.Tokens.Used != 350 {
			t.Fatalf("after a restart: %+v %+v", d.Month, d.Month.Tokens)
		}
		finish(d, 10)
		d = check()
		if d.Allowed() || d.Reason != "per-month limit exceeded" || d.RetryAfter != int64(nextEnd.Sub(now)/time.Second) || d.Month.Count != 5 || d.Month.Remaining != 0 {
			t.Fatalf("the sixth request of 5: %+v %+v", d, d.Month)
		}
		if !d.RefusedByMonth() {
			t.Fatal("not refused by the month")
		}
		// The next period admits again.
		now = nextEnd
		if d := check(); !d.Allowed() || d.Month.Count != 1 || !d.Month.Start.Equal(nextEnd) {
			t.Fatalf("in the next period: %+v %+v", d, d.Month)
		}
	})
}

// TestMonthHoldsUnderParallelCallers runs 64 clients against a month limit
// on SQLite and on three PostgreSQL replicas, a user's own and an
// account's pooled, while the cleanup rolls the period's older rows up:
// together they are admitted exactly up to the limit, in requests and in
// tokens, and the period counts exactly what was admitted.
func TestMonthHoldsUnderParallelCallers(t *testing.T) {
	const clients, perClient, seeded = 64, 10, 8
	eachBackend(t, func(t *testing.T, bk backend) {
		replicas := 1
		if bk.name == "postgres" {
			replicas = 3
		}
		ctx := context.Background()
		for _, kind := range []string{"own requests", "own tokens", "pooled requests"} {
			t.Run(kind, func(t *testing.T) {
				pooled, tokens := strings.HasPrefix(kind, "pooled"), strings.HasSuffix(kind, "tokens")
				// Mid-March: the period began on the 1st; a row a day
				// from the 2nd on, which the cleanup rolls up as the
				// clients check.
				mid := time.Date(2026, 3, 11, 12, 0, 0, 0, time.UTC)
				dsn := bk.newDSN(t)
				stores, svcs := openReplicas(t, dsn, replicas, tickingClock(mid))
				for i := range svcs {
					svcs[i] = policy.NewService(stores[i], stores[i], policy.WithClock(tickingClock(mid)), policy.WithUsers(stores[i]), policy.WithAccounts(stores[i]))
				}
				// The windows' limits at the month's, which they may not
				// pass; the 20 checks the month leaves fit in them.
				limits := policy.LimitSet{policy.RequestsPerMinute: new(int64(seeded + 20)), policy.RequestsPerHour: new(int64(seeded + 20)), policy.RequestsPerDay: new(int64(seeded + 20))}
				month := policy.LimitSet{policy.RequestsPerMonth: new(int64(seeded + 20))}
				if tokens {
					month = policy.LimitSet{policy.TokensPerMonth: new(int64((seeded + 20) * 100))}
				}
				users := []string{"u"}
				if pooled {
					users = members("member", 8)
					putAccount(t, svcs[0], policy.Tier{Name: "s", Limits: limits, Account: &month}, "acme", users)
				} else {
					for i := range month {
						if month[i] != nil {
							limits[i] = month[i]
						}
					}
					if _, _, err := svcs[0].PutTier(ctx, policy.Tier{Name: "s", Limits: limits}); err != nil {
						t.Fatal(err)
					}
				}
				for day := range seeded {
					at := time.Date(2026, 3, 2+day, 9, 0, 0, 0, time.UTC)
					seed := policy.NewService(stores[0], stores[0], policy.WithClock(func() time.Time { return at }), policy.WithUsers(stores[0]), policy.WithAccounts(stores[0]))
					d, err := seed.Check(ctx, policy.Request{UserID: users[day%len(users)], Tier: "s", Tokens: 100}, false)
					if err != nil || !d.Allowed() {
						t.Fatalf("seed %d: %+v %v", day, d, err)
					}
				}
				var wg sync.WaitGroup
				var admitted atomic.Int64
				stop := make(chan struct{})
				pruned := make(chan int64, 1)
				go func() {
					var n int64
					defer func() { pruned <- n }()
					for {
						select {
						case <-stop:
							return
						default:
						}
						d, err := stores[0].Prune(ctx, mid.Add(-policy.KeepFor))
						if err != nil {
							t.Error(err)
							return
						}
						n += d
					}
				}()
				for g := range clients {
					wg.Go(func() {
						svc := svcs[g%replicas]
						for i := range perClient {
							d, err := svc.Check(ctx, policy.Request{UserID: users[(g+i)%len(users)], Tier: "s", Tokens: 100}, false)
							if err != nil {
								t.Error(err)
								return
							}
							if d.Allowed() {
								admitted.Add(1)
							}
						}
					})
				}
				wg.Wait()
				close(stop)
				if n := <-pruned; n == 0 {
					t.Error("the cleanup rolled nothing up while the clients checked")
				}
				if got := admitted.Load(); got != 20 {
					t.Fatalf("%d checks admitted together after %d seeded; the month admits %d", got, seeded, seeded+20)
				}
				var m *policy.MonthState
				if pooled {
					u, err := svcs[0].AccountUsage(ctx, "acme")
					if err != nil {
						t.Fatal(err)
					}
					m = u.Month
				} else {
					u, err := svcs[0].UsageReport(ctx, "u", "s")
					if err != nil {
						t.Fatal(err)
					}
					m = u.Month
				}
				if m == nil || m.Count != seeded+20 || tokens && (m.Tokens == nil || m.Tokens.Used != (seeded+20)*100) {
					t.Fatalf("the period counts %+v", m)
				}
			})
		}
	})
}
