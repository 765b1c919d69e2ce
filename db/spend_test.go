package db_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

// usd returns the Money of a decimal dollar string.
func usd(t *testing.T, s string) policy.Money {
	t.Helper()
	m, err := policy.ParseMoney(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSpendWalk walks one user through a spend limit on each store: a
// reservation priced at admission and counted as spent, a settlement
// priced exactly from the usage reported, a new price version between a
// call's admission and its finish, unpriced models, an expired call
// finished late with more cost than it reserved, retries, and a restart.
// Every amount is worked out by hand from the prices below.
func TestSpendWalk(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		path := bk.newDSN(t)
		now := t0
		var store *db.Store
		var svc *policy.Service
		open := func() {
			s, err := db.Open(ctx, path, db.WithSynchronous(db.SyncNormal))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			store = s
			svc = policy.NewService(s, s, policy.WithPrices(s), policy.WithClock(func() time.Time { return now }), policy.WithCallTimeout(time.Minute))
		}
		open()
		perMinute, perDay := usd(t, "0.002"), usd(t, "0.01")
		tier := policy.Tier{Name: "s", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(100)), policy.RequestsPerHour: new(int64(1000)),
			policy.RequestsPerDay: new(int64(1000)), policy.CostPerMinute: (*int64)(&perMinute), policy.CostPerDay: (*int64)(&perDay)}}
		if _, _, err := svc.PutTier(ctx, tier); err != nil {
			t.Fatal(err)
		}
		// Per million tokens: input $2, output $8, cache reads $0.50,
		// cache writes $2.50. The highest is $8: 100 tokens reserve
		// 100 × 8 / 10⁶ = $0.0008.
		v1, err := svc.PutPrices(ctx, nil, []policy.Price{{Model: "gpt-x", Input: usd(t, "2"), Output: usd(t, "8"), CacheRead: usd(t, "0.5"), CacheWrite: usd(t, "2.5")}})
		if err != nil {
			t.Fatal(err)
		}
		check := func(model string, tokens int64, split *policy.TokenUsage) (policy.Decision, error) {
			return svc.Check(ctx, policy.Request{UserID: "u", Tier: "s", Model: model, Tokens: tokens, Reserve: split}, false)
		}
		must := func(d policy.Decision, err error) policy.Decision {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		spent := func(d policy.Decision, w policy.Window) policy.TokenState {
			t.Helper()
			if d.Windows[w].Cost == nil {
				t.Fatalf("no %s spend in %+v", w, d.Windows[w])
			}
			return *d.Windows[w].Cost
		}

		a := must(check("gpt-x", 100, nil))
		b := must(check("gpt-x", 100, nil))
		if !a.Allowed() || !b.Allowed() {
			t.Fatalf("two reservations of $0.0008 under $0.002: %+v, %+v", a, b)
		}
		if got := spent(b, policy.Minute); got != (policy.TokenState{Limited: true, Limit: int64(perMinute), Used: int64(usd(t, "0.0016")), Remaining: int64(usd(t, "0.0004"))}) {
			t.Fatalf("minute spend after two reservations: %+v", got)
		}
		c := must(check("gpt-x", 100, nil))
		if c.Allowed() || c.Reason != "per-minute spend limit exceeded" || c.RetryAfter != 60 {
			t.Fatalf("a third reservation passes $0.002: %+v", c)
		}
		if k, ok := c.RefusedBy(); !ok || k != policy.KindCost {
			t.Fatalf("refused by %v %v, want spend", k, ok)
		}

		// Settled from its usage: (50×2 + 10×8 + 20×0.5) / 10⁶ = $0.00019.
		now = now.Add(time.Second)
		fa, err := svc.FinishCall(ctx, a.CallID, policy.Report{Usage: &policy.TokenUsage{Input: 50, Output: 10, CacheRead: 20}})
		if err != nil {
			t.Fatal(err)
		}
		if fa.Tokens != 80 || fa.Cost != usd(t, "0.00019") || fa.ReservedCost != usd(t, "0.0008") || fa.Model != "gpt-x" ||
			fa.PriceVersion != v1.ID || fa.Price == nil || fa.Price.Output != usd(t, "8") || fa.Overrun() != 0 {
			t.Fatalf("settled call %+v", fa)
		}
		if again, err := svc.FinishCall(ctx, a.CallID, policy.Report{Usage: &policy.TokenUsage{Input: 50, Output: 10, CacheRead: 20}}); err != nil || again.Cost != fa.Cost {
			t.Fatalf("a retry of the same finish: %+v, %v", again, err)
		}
		if _, err := svc.FinishCall(ctx, a.CallID, policy.Report{Usage: &policy.TokenUsage{Input: 10, Output: 50, CacheRead: 20}}); policy.ErrorCode(err) != policy.ECONFLICT {
			t.Fatalf("the same tokens split otherwise, after the finish: %v, want a conflict", err)
		}
		// $0.00019 + $0.0008 open + $0.0008 fits $0.002.
		d := must(check("gpt-x", 100, nil))
		if !d.Allowed() || spent(d, policy.Minute).Used != int64(usd(t, "0.00179")) {
			t.Fatalf("after the settlement: %+v", d)
		}

		// A new version in force now does not reprice b, admitted before:
		// 10 tokens at its $8 are $0.00008, not 10 at $100.
		if _, err := svc.PutPrices(ctx, nil, []policy.Price{{Model: "gpt-x", Input: usd(t, "100"), Output: usd(t, "100")}}); err != nil {
			t.Fatal(err)
		}
		fb, err := svc.FinishCall(ctx, b.CallID, policy.Report{Tokens: new(int64(10))})
		if err != nil || fb.Cost != usd(t, "0.00008") || fb.PriceVersion != v1.ID {
			t.Fatalf("b finished after a new version: %+v, %v", fb, err)
		}

		// Unpriced or unnamed models are refused under a spend limit.
		if _, err := check("other", 1, nil); err == nil {
			t.Fatal("an unpriced model passed a spend limit")
		} else if u, ok := policy.IsUnpriced(err); !ok || u.Model != "other" || policy.ErrorCode(err) != policy.EINVALID {
			t.Fatalf("unpriced model: %v", err)
		}
		if _, err := check("", 1, nil); !errors.As(err, new(*policy.UnpricedError)) {
			t.Fatalf("no model under a spend limit: %v", err)
		}

		// d settles with its reservation. The day: a $0.00019, b
		// $0.00008, d $0.0008.
		if fd, err := svc.FinishCall(ctx, d.CallID, policy.Report{}); err != nil || fd.Cost != usd(t, "0.0008") || fd.Tokens != 100 {
			t.Fatalf("d settled with its reservation: %+v, %v", fd, err)
		}

		// Back to the first prices. A call reserving 100 prompt tokens at
		// the input price ($0.0002) expires, and its reservation is
		// spent; finished later with the same 100 tokens written to the
		// cache ($0.00025), it adds the $0.00005 over its reservation: a
		// row of cost alone, the one way spend passes what was checked.
		if _, err := svc.PutPrices(ctx, nil, []policy.Price{{Model: "gpt-x", Input: usd(t, "2"), Output: usd(t, "8"), CacheRead: usd(t, "0.5"), CacheWrite: usd(t, "2.5")}}); err != nil {
			t.Fatal(err)
		}
		now = now.Add(2 * time.Minute)
		e := must(check("gpt-x", 100, &policy.TokenUsage{Input: 100}))
		if !e.Allowed() || spent(e, policy.Day).Used != int64(usd(t, "0.00127")) {
			t.Fatalf("e: %+v", e)
		}
		now = now.Add(2 * time.Minute) // e expired a minute ago
		fe, err := svc.FinishCall(ctx, e.CallID, policy.Report{Usage: &policy.TokenUsage{CacheWrite: 100}})
		if err != nil || !fe.Expired || fe.Tokens != 100 || fe.Cost != usd(t, "0.00025") || fe.ReservedCost != usd(t, "0.0002") || fe.Overrun() != usd(t, "0.00005") {
			t.Fatalf("e finished late: %+v, %v", fe, err)
		}
		usage := func() (tokens, cost int64) {
			t.Helper()
			u, err := svc.UsageReport(ctx, "u", "s")
			if err != nil {
				t.Fatal(err)
			}
			return u.Windows[policy.Day].Tokens.Used, u.Windows[policy.Day].Cost.Used
		}
		if tokens, cost := usage(); tokens != 290 || cost != int64(usd(t, "0.00132")) {
			t.Fatalf("the day: %d tokens, %s spent; want 290 and 0.00132", tokens, policy.Money(cost))
		}
		store.Close()
		open()
		if tokens, cost := usage(); tokens != 290 || cost != int64(usd(t, "0.00132")) {
			t.Fatalf("after a restart: %d tokens, %s spent; want 290 and 0.00132", tokens, policy.Money(cost))
		}

		// 1,100 tokens at $8 reserve $0.0088: more than the minute's
		// $0.002 ever holds (its reason comes first), and past the day's
		// $0.01 by $0.00012 until the oldest rows, a's $0.00019 at
		// t0+1s, leave it: the wait covers both.
		f := must(check("gpt-x", 1100, nil))
		if f.Allowed() || f.Reason != "per-minute spend limit exceeded" || f.RetryAfter != 24*3600-4*60 {
			t.Fatalf("past the day's spend: %+v", f)
		}
	})
}

// TestSpendHoldsUnderParallelCallers: 64 clients (on PostgreSQL through
// three replicas) spending from one user's budget, and from an account's
// pooled budget through 8 members, never spend past it together: every
// admission counts the open reservations of the others, and a finish
// reports at most what its call reserved, in any split of its tokens.
func TestSpendHoldsUnderParallelCallers(t *testing.T) {
	const clients, perClient = 64, 10
	eachBackend(t, func(t *testing.T, bk backend) {
		replicas := 1
		if bk.name == "postgres" {
			replicas = 3
		}
		ctx := context.Background()
		budget := usd(t, "0.01") // 12 reservations of $0.0008, and change
		for _, pooled := range []bool{false, true} {
			name := "own"
			if pooled {
				name = "pooled"
			}
			t.Run(name, func(t *testing.T) {
				stores, svcs := openReplicas(t, bk.newDSN(t), replicas, tickingClock(t0))
				for i := range svcs {
					svcs[i] = policy.NewService(stores[i], stores[i], policy.WithClock(tickingClock(t0)), policy.WithUsers(stores[i]), policy.WithAccounts(stores[i]), policy.WithPrices(stores[i]))
				}
				if _, err := svcs[0].PutPrices(ctx, nil, []policy.Price{{Model: "gpt-x", Input: usd(t, "2"), Output: usd(t, "8"), CacheRead: usd(t, "0.5"), CacheWrite: usd(t, "2.5")}}); err != nil {
					t.Fatal(err)
				}
				limits := policy.LimitSet{policy.RequestsPerMinute: new(int64(10000)), policy.RequestsPerHour: new(int64(10000)), policy.RequestsPerDay: new(int64(10000))}
				users := []string{"u"}
				if pooled {
					users = members("member", 8)
					putAccount(t, svcs[0], policy.Tier{Name: "s", Limits: limits, Account: &policy.LimitSet{policy.CostPerDay: (*int64)(&budget)}}, "acme", users)
				} else {
					limits[policy.CostPerDay] = (*int64)(&budget)
					if _, _, err := svcs[0].PutTier(ctx, policy.Tier{Name: "s", Limits: limits}); err != nil {
						t.Fatal(err)
					}
				}
				var wg sync.WaitGroup
				var mu sync.Mutex
				var spent policy.Money
				var admitted int
				for g := range clients {
					wg.Go(func() {
						svc := svcs[g%replicas]
						for i := range perClient {
							user := users[(g+i)%len(users)]
							d, err := svc.Check(ctx, policy.Request{UserID: user, Tier: "s", Model: "gpt-x", Tokens: 100}, false)
							if err != nil {
								t.Error(err)
								return
							}
							if !d.Allowed() {
								continue
							}
							// 100 tokens split between output and cache
							// reads: from $0.00005 to the $0.0008 reserved.
							out := int64((g*7 + i*13) % 101)
							c, err := svc.FinishCall(ctx, d.CallID, policy.Report{Usage: &policy.TokenUsage{Output: out, CacheRead: 100 - out}})
							if err != nil {
								t.Error(err)
								return
							}
							mu.Lock()
							spent += c.Cost
							admitted++
							mu.Unlock()
						}
					})
				}
				wg.Wait()
				if spent > budget || admitted < 12 {
					t.Fatalf("%d calls admitted spent $%s together; the budget is $%s", admitted, spent, budget)
				}
				var used int64
				if pooled {
					u, err := svcs[0].AccountUsage(ctx, "acme")
					if err != nil {
						t.Fatal(err)
					}
					used = u.Windows[policy.Day].Cost.Used
				} else {
					u, err := svcs[0].UsageReport(ctx, "u", "s")
					if err != nil {
						t.Fatal(err)
					}
					used = u.Windows[policy.Day].Cost.Used
				}
				if used != int64(spent) {
					t.Fatalf("the store counts $%s spent, the calls $%s", policy.Money(used), spent)
				}
				t.Logf("%d calls admitted, $%s of $%s spent", admitted, spent, budget)
			})
		}
	})
}
