package db_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

// The tests of accounts' pooled limits: both levels hold at once, exactly,
// under parallel checks of many members and across replicas. The model
// test (model_accounts_test.go) covers the rules sequence by sequence.

// poolOf returns the pooled limits values sets, by field name.
func poolOf(t testing.TB, values map[string]int64) *policy.LimitSet {
	t.Helper()
	m := make(map[string]*int64, len(values))
	for name, v := range values {
		m[name] = &v
	}
	p, err := policy.PoolLimitsOf(m)
	if err != nil {
		t.Fatal(err)
	}
	return &p
}

// tickingClock returns a clock that moves a microsecond on every reading,
// safe for concurrent use: every check at its own instant, all inside one
// minute.
func tickingClock(start time.Time) func() time.Time {
	var mu sync.Mutex
	now := start
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Microsecond)
		return now
	}
}

// openReplicas opens n stores on the database at dsn, as n replicas of the
// service would, each with its own service on clock.
func openReplicas(t *testing.T, dsn string, n int, clock func() time.Time, opts ...policy.Option) ([]*db.Store, []*policy.Service) {
	t.Helper()
	stores := make([]*db.Store, n)
	svcs := make([]*policy.Service, n)
	for i := range stores {
		stores[i] = openStore(t, dsn)
		svcs[i] = policy.NewService(stores[i], stores[i], append([]policy.Option{policy.WithClock(clock), policy.WithUsers(stores[i])}, opts...)...)
	}
	return stores, svcs
}

// putAccount stores tier, the account id on it and a record naming the
// account for each of members, through svc.
func putAccount(t *testing.T, svc *policy.Service, tier policy.Tier, id string, members []string) {
	t.Helper()
	ctx := context.Background()
	if _, _, err := svc.PutTier(ctx, tier); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.PutAccount(ctx, policy.Account{AccountID: id, Tier: tier.Name}); err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		if _, _, err := svc.PutUser(ctx, policy.UserRecord{UserID: m, Account: id}); err != nil {
			t.Fatal(err)
		}
	}
}

// members returns n user ids named after prefix.
func members(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return ids
}

// TestMembersAreRefusedByEitherLevel walks three members of one account
// through both levels' limits: a member over its own limit is refused
// while the account has room, a member with room is refused by the full
// account, and each refusal names the level that refused, with its wait,
// records nothing in either history, and reports both.
func TestMembersAreRefusedByEitherLevel(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		now := t0
		s := openStore(t, bk.newDSN(t))
		svc := policy.NewService(s, s, policy.WithClock(func() time.Time { return now }), policy.WithUsers(s))
		seat := policy.Tier{Name: "seat", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(2)), policy.RequestsPerHour: new(int64(50)), policy.RequestsPerDay: new(int64(50))}, Account: poolOf(t, map[string]int64{"requests_per_minute": 5, "requests_per_hour": 6})}
		putAccount(t, svc, seat, "acme", []string{"m1", "m2", "m3"})

		steps := []struct {
			at     time.Duration
			user   string
			reason string // "" for admitted
			retry  int64
			// The member's and the account's minute after the check.
			own, pooled policy.WindowState
		}{
			{0, "m1", "", 0, policy.WindowState{Count: 1, Limit: 2, Remaining: 1, Reset: 60}, policy.WindowState{Count: 1, Limit: 5, Remaining: 4, Reset: 60}},
			{0, "m1", "", 0, policy.WindowState{Count: 2, Limit: 2, Remaining: 0, Reset: 60}, policy.WindowState{Count: 2, Limit: 5, Remaining: 3, Reset: 60}},
			// Over its own limit, with room in the account.
			{0, "m1", "per-minute limit exceeded", 60, policy.WindowState{Count: 2, Limit: 2, Remaining: 0, Reset: 60}, policy.WindowState{Count: 2, Limit: 5, Remaining: 3, Reset: 60}},
			{10 * time.Second, "m2", "", 0, policy.WindowState{Count: 1, Limit: 2, Remaining: 1, Reset: 60}, policy.WindowState{Count: 3, Limit: 5, Remaining: 2, Reset: 50}},
			{10 * time.Second, "m2", "", 0, policy.WindowState{Count: 2, Limit: 2, Remaining: 0, Reset: 60}, policy.WindowState{Count: 4, Limit: 5, Remaining: 1, Reset: 50}},
			{20 * time.Second, "m3", "", 0, policy.WindowState{Count: 1, Limit: 2, Remaining: 1, Reset: 60}, policy.WindowState{Count: 5, Limit: 5, Remaining: 0, Reset: 40}},
			// With room of its own, in a full account: until m1's first
			// leaves the account's minute.
			{20 * time.Second, "m3", "account per-minute limit exceeded", 40, policy.WindowState{Count: 1, Limit: 2, Remaining: 1, Reset: 60}, policy.WindowState{Count: 5, Limit: 5, Remaining: 0, Reset: 40}},
			// The account's hour takes its sixth request and is full.
			{61 * time.Second, "m3", "", 0, policy.WindowState{Count: 2, Limit: 2, Remaining: 0, Reset: 19}, policy.WindowState{Count: 4, Limit: 5, Remaining: 1, Reset: 9}},
			{62 * time.Second, "m1", "account per-hour limit exceeded", 3600 - 62, policy.WindowState{Count: 0, Limit: 2, Remaining: 2, Reset: 0}, policy.WindowState{Count: 4, Limit: 5, Remaining: 1, Reset: 8}},
			// Both refuse: the account's wait is the longer, and is given.
			{62 * time.Second, "m3", "account per-hour limit exceeded", 3600 - 62, policy.WindowState{Count: 2, Limit: 2, Remaining: 0, Reset: 18}, policy.WindowState{Count: 4, Limit: 5, Remaining: 1, Reset: 8}},
		}
		for i, st := range steps {
			now = t0.Add(st.at)
			d, err := svc.Check(ctx, policy.Request{UserID: st.user}, false)
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			reason := d.Reason
			if d.Allowed() {
				reason = ""
			}
			if reason != st.reason || d.RetryAfter != st.retry || d.Tier != "seat" {
				t.Fatalf("step %d, %s at %v: %q retry %d tier %q; want %q retry %d tier seat", i, st.user, st.at, reason, d.RetryAfter, d.Tier, st.reason, st.retry)
			}
			if d.Account == nil || d.Account.ID != "acme" {
				t.Fatalf("step %d: account %+v, want acme's", i, d.Account)
			}
			own, pooled := d.Windows[policy.Minute], d.Account.Windows[policy.Minute]
			if own != st.own || pooled != st.pooled {
				t.Fatalf("step %d, %s at %v: own minute %+v, account's %+v; want %+v, %+v", i, st.user, st.at, own, pooled, st.own, st.pooled)
			}
		}
		// Refusals recorded nothing, in either history.
		for key, want := range map[string]int64{"m1": 2, "m2": 2, "m3": 2, policy.AccountKey("acme"): 6} {
			if got := count(t, s, key, t0.Add(-time.Hour)); got != want {
				t.Errorf("%q holds %d requests, want %d", key, got, want)
			}
		}
	})
}

// TestPooledLimitHoldsUnderParallelMembers: 64 clients checking 8 members
// of one account at once (on PostgreSQL through three replicas) admit
// exactly the account's pooled limit, which is below the sum of the
// members' own; and with calls, never more open at once than its
// max_concurrent, nor more tokens than its budget.
func TestPooledLimitHoldsUnderParallelMembers(t *testing.T) {
	const clients, perClient = 64, 20
	eachBackend(t, func(t *testing.T, bk backend) {
		replicas := 1
		if bk.name == "postgres" {
			replicas = 3
		}
		ctx := context.Background()
		team := members("member", 8)

		t.Run("requests", func(t *testing.T) {
			stores, svcs := openReplicas(t, bk.newDSN(t), replicas, tickingClock(t0))
			// 8 members of 10 a minute could make 80; the account
			// admits 50 of them.
			const own, pooled = 10, 50
			putAccount(t, svcs[0], policy.Tier{Name: "seat", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(own)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(1000))}, Account: poolOf(t, map[string]int64{"requests_per_minute": pooled})}, "acme", team)
			var mu sync.Mutex
			admitted := map[string]int64{}
			var wg sync.WaitGroup
			for g := range clients {
				wg.Go(func() {
					svc := svcs[g%replicas]
					for i := range perClient {
						user := team[(g+i)%len(team)]
						d, err := svc.Check(ctx, policy.Request{UserID: user}, false)
						if err != nil {
							t.Error(err)
							return
						}
						switch {
						case d.Allowed():
							mu.Lock()
							admitted[user]++
							mu.Unlock()
						case d.Reason != "per-minute limit exceeded" && d.Reason != "account per-minute limit exceeded":
							t.Errorf("%s refused for %q", user, d.Reason)
						}
						if d.Account == nil || d.Account.Windows[policy.Minute].Count > pooled || d.Windows[policy.Minute].Count > own {
							t.Errorf("%s: own minute %+v, account %+v", user, d.Windows[policy.Minute], d.Account)
						}
					}
				})
			}
			wg.Wait()
			var total int64
			for _, m := range team {
				n := count(t, stores[0], m, t0.Add(-time.Hour))
				if n > own || n != admitted[m] {
					t.Errorf("%s: %d admitted, %d recorded; own limit %d", m, admitted[m], n, own)
				}
				total += n
			}
			if got := count(t, stores[0], policy.AccountKey("acme"), t0.Add(-time.Hour)); total != pooled || got != pooled {
				t.Errorf("members admitted %d, the account recorded %d; want exactly the pooled limit, %d", total, got, pooled)
			}
		})

		t.Run("calls", func(t *testing.T) {
			stores, svcs := openReplicas(t, bk.newDSN(t), replicas, tickingClock(t0))
			// Each member may have 2 calls open, 16 in all; the account
			// 6, and 2,000 tokens a minute.
			const ownCalls, pooledCalls, budget = 2, 6, 2000
			putAccount(t, svcs[0], policy.Tier{Name: "seat", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(10000)), policy.RequestsPerHour: new(int64(10000)), policy.RequestsPerDay: new(int64(10000)), policy.MaxConcurrent: new(int64(ownCalls))}, Account: poolOf(t, map[string]int64{"max_concurrent": pooledCalls, "tokens_per_minute": budget})}, "acme", team)
			var open, peak, admitted atomic.Int64
			var wg sync.WaitGroup
			for g := range clients {
				wg.Go(func() {
					svc := svcs[g%replicas]
					for i := range perClient {
						user, tokens := team[(g+i)%len(team)], int64(1+(g*7+i*13)%20)
						d, err := svc.Check(ctx, policy.Request{UserID: user, Tokens: tokens}, false)
						if err != nil {
							t.Error(err)
							return
						}
						if a := d.Account; a == nil || a.Concurrency == nil || a.Concurrency.InFlight > pooledCalls || a.Windows[policy.Minute].Tokens.Used > budget {
							t.Errorf("%s: account %+v", user, a)
						}
						if d.Concurrency == nil || d.Concurrency.InFlight > ownCalls {
							t.Errorf("%s: own calls %+v", user, d.Concurrency)
						}
						if !d.Allowed() {
							continue
						}
						// Counted after the admission and uncounted
						// before the finish: never more than the
						// calls the store has open.
						admitted.Add(1)
						n := open.Add(1)
						for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
						}
						open.Add(-1)
						if _, err := svc.FinishCall(ctx, d.CallID, policy.Report{Tokens: new(tokens / 2)}); err != nil {
							t.Error(err)
						}
					}
				})
			}
			wg.Wait()
			if p := peak.Load(); p > pooledCalls || admitted.Load() < pooledCalls {
				t.Errorf("%d calls open at once at most, %d admitted; want at most %d open", p, admitted.Load(), pooledCalls)
			}
			u, err := svcs[0].AccountUsage(ctx, "acme")
			if err != nil {
				t.Fatal(err)
			}
			if u.CallsInFlight != 0 || u.Windows[policy.Minute].Tokens.Used > budget {
				t.Errorf("the account at the end: %d calls in flight, %d tokens used; want 0 and at most %d", u.CallsInFlight, u.Windows[policy.Minute].Tokens.Used, budget)
			}
			var calls int64
			for _, m := range team {
				calls += count(t, stores[0], m, t0.Add(-time.Hour))
			}
			if pooled := count(t, stores[0], policy.AccountKey("acme"), t0.Add(-time.Hour)); calls != admitted.Load() || pooled != calls {
				t.Errorf("%d admitted, members recorded %d, the account %d; want all equal", admitted.Load(), calls, pooled)
			}
		})
	})
}

// TestPooledChecksOfReplicasNeverDeadlock: on PostgreSQL, members of two
// accounts check and finish calls through three replicas while plain
// users' checks run in batches beside them and a cleanup walks every
// history: every admission takes its account's lock before its user's, a
// finish too, and batches take users' only, so nothing waits in a cycle
// (PostgreSQL would break one with an error) and every limit holds
// exactly.
func TestPooledChecksOfReplicasNeverDeadlock(t *testing.T) {
	dsn := dbtest.Postgres(t)
	ctx := context.Background()
	stores, svcs := openReplicas(t, dsn, 3, tickingClock(t0))
	const own, pooled, plain = 30, 60, 40
	calls := new(int64(1000))
	accounts := map[string][]string{"acme": members("acme", 4), "globex": members("globex", 4)}
	for id, team := range accounts {
		putAccount(t, svcs[0], policy.Tier{Name: "seat-" + id, Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(own)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(1000)), policy.MaxConcurrent: calls}, Account: poolOf(t, map[string]int64{"requests_per_minute": pooled, "max_concurrent": 1000})}, id, team)
	}
	if _, _, err := svcs[0].PutTier(ctx, policy.Tier{Name: "plain", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(plain)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(1000)), policy.MaxConcurrent: calls}}); err != nil {
		t.Fatal(err)
	}
	var users []string
	users = append(users, accounts["acme"]...)
	users = append(users, accounts["globex"]...)
	users = append(users, members("plain", 8)...)
	// Enough checks of every user to fill every limit.
	const perUser, callers = 120, 24
	var mu sync.Mutex
	admitted := map[string]int64{}
	next := 0
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			svc := svcs[c%len(svcs)]
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= len(users)*perUser {
					return
				}
				u := users[(i*7)%len(users)]
				d, err := svc.Check(ctx, policy.Request{UserID: u, Tier: "plain", Tokens: 1}, false)
				if err != nil {
					t.Errorf("check %s: %v", u, err)
					return
				}
				if !d.Allowed() {
					continue
				}
				mu.Lock()
				admitted[u]++
				mu.Unlock()
				if i%2 == 0 {
					if _, err := svc.FinishCall(ctx, d.CallID, policy.Report{}); err != nil {
						t.Errorf("finish %s's call: %v", u, err)
						return
					}
				}
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			if _, err := stores[1].Prune(ctx, t0.Add(-time.Hour)); err != nil {
				t.Errorf("prune: %v", err)
				return
			}
		}
	})
	wg.Wait()
	for id, team := range accounts {
		var total int64
		for _, m := range team {
			if admitted[m] > own {
				t.Errorf("%s: %d admitted, own limit %d", m, admitted[m], own)
			}
			total += admitted[m]
		}
		if got := count(t, stores[2], policy.AccountKey(id), t0.Add(-time.Hour)); total != pooled || got != pooled {
			t.Errorf("%s: members admitted %d, the account recorded %d; want the pooled limit, %d", id, total, got, pooled)
		}
	}
	for _, u := range users[8:] {
		if admitted[u] != plain {
			t.Errorf("%s: %d admitted, want the limit, %d", u, admitted[u], plain)
		}
	}
	for i, s := range stores {
		if batched, _, disagreements := db.PlanCounts(s); batched == 0 || disagreements != 0 {
			t.Errorf("replica %d: %d admissions batched, %d disagreements; want some and none", i, batched, disagreements)
		}
	}
}

// TestCheckSeesAnAccountRecordedElsewhere: a record that another replica
// changed to name an account decides the next check on this one as a
// member's, though this one's memory still holds the record without it:
// whether the check names no account (on PostgreSQL, a check a batch
// would decide, which confirms the record's account too) or one that does
// not exist (an error this replica's memory alone would give).
func TestCheckSeesAnAccountRecordedElsewhere(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		now := t0
		stores, svcs := openReplicas(t, bk.newDSN(t), 2, func() time.Time { return now })
		here, elsewhere := svcs[0], svcs[1]
		// The account admits one request a minute; its plan is the
		// user's own tier, so moving changes nothing else.
		putAccount(t, here, policy.Tier{Name: "t", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(100)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(100))}, Account: poolOf(t, map[string]int64{"requests_per_minute": 1})}, "acme", nil)
		for _, u := range []string{"u", "v"} {
			if _, _, err := here.PutUser(ctx, policy.UserRecord{UserID: u, Tier: "t", Note: "before"}); err != nil {
				t.Fatal(err)
			}
			// Decided as no member's, and remembered so.
			if d, err := here.Check(ctx, policy.Request{UserID: u}, false); err != nil || !d.Allowed() || d.Account != nil {
				t.Fatalf("%s before joining: %+v, %v", u, d, err)
			}
			if _, _, err := elsewhere.PutUser(ctx, policy.UserRecord{UserID: u, Tier: "t", Account: "acme", Note: "after"}); err != nil {
				t.Fatal(err)
			}
		}
		if batched, _, _ := db.PlanCounts(stores[0]); bk.name == "postgres" && batched == 0 {
			t.Fatal("no check was decided in a batch")
		}

		d, err := here.Check(ctx, policy.Request{UserID: "u"}, false)
		if err != nil || !d.Allowed() || d.Account == nil || d.Account.ID != "acme" || d.Account.Windows[policy.Minute].Count != 1 {
			t.Fatalf("u, moved to acme elsewhere: %+v (account %+v), %v; want admitted as acme's first", d, d.Account, err)
		}
		d, err = here.Check(ctx, policy.Request{UserID: "v", Account: "ghost"}, false)
		if err != nil || d.Allowed() || d.Reason != "account per-minute limit exceeded" || d.Account == nil || d.Account.ID != "acme" {
			t.Fatalf("v, moved to acme elsewhere, naming an unknown account: %+v (account %+v), %v; want refused by acme, full", d, d.Account, err)
		}
		for key, want := range map[string]int64{"u": 2, "v": 1, policy.AccountKey("acme"): 1} {
			if got := count(t, stores[0], key, t0.Add(-time.Hour)); got != want {
				t.Errorf("%q holds %d requests, want %d", key, got, want)
			}
		}
	})
}

// TestPoolCopyOfACallIsNoCallers: a member's call is counted in its
// account's pool under a second id, which a caller cannot finish or keep
// alive on its own: finished alone, it would free the account's slot
// while the call went on. The call's own id does both.
func TestPoolCopyOfACallIsNoCallers(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		now := t0
		s := openStore(t, bk.newDSN(t))
		svc := policy.NewService(s, s, policy.WithClock(func() time.Time { return now }), policy.WithUsers(s))
		putAccount(t, svc, policy.Tier{Name: "t", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(10)), policy.RequestsPerHour: new(int64(10)), policy.RequestsPerDay: new(int64(10))}, Account: poolOf(t, map[string]int64{"max_concurrent": 1})}, "acme", []string{"m1", "m2"})
		d, err := svc.Check(ctx, policy.Request{UserID: "m1", Tokens: 5}, false)
		if err != nil || !d.Allowed() || d.CallID == "" {
			t.Fatalf("first call: %+v, %v", d, err)
		}
		copyID := policy.PoolCallID(d.CallID)
		if _, err := svc.FinishCall(ctx, copyID, policy.Report{Tokens: new(int64(0))}); policy.ErrorCode(err) != policy.ENOTFOUND {
			t.Errorf("finish the account's copy: %v, want not found", err)
		}
		if _, err := svc.KeepAlive(ctx, copyID); policy.ErrorCode(err) != policy.ENOTFOUND {
			t.Errorf("keep the account's copy alive: %v, want not found", err)
		}
		// The store refuses it too, whoever asks.
		if _, err := s.FinishCall(ctx, copyID, policy.Report{Tokens: new(int64(0))}, now); policy.ErrorCode(err) != policy.ENOTFOUND {
			t.Errorf("the store finishes the account's copy: %v, want not found", err)
		}
		if _, err := s.KeepAlive(ctx, copyID, now, now.Add(time.Minute)); policy.ErrorCode(err) != policy.ENOTFOUND {
			t.Errorf("the store keeps the account's copy alive: %v, want not found", err)
		}
		if d, err := svc.Check(ctx, policy.Request{UserID: "m2"}, false); err != nil || d.Allowed() || !strings.HasPrefix(d.Reason, policy.AccountReasonPrefix) {
			t.Fatalf("second call, the account's slot taken: %+v, %v; want refused by the account", d, err)
		}
		now = now.Add(time.Second)
		if c, err := svc.KeepAlive(ctx, d.CallID); err != nil || c.Account != "acme" {
			t.Fatalf("keep the call alive: %+v, %v", c, err)
		}
		if _, err := svc.FinishCall(ctx, d.CallID, policy.Report{Tokens: new(int64(3))}); err != nil {
			t.Fatal(err)
		}
		u, err := svc.AccountUsage(ctx, "acme")
		if err != nil || u.CallsInFlight != 0 || u.Windows[policy.Minute].Tokens.Used != 3 {
			t.Fatalf("the account after the finish: %+v, %v; want no call in flight, 3 tokens", u, err)
		}
		if d, err := svc.Check(ctx, policy.Request{UserID: "m2"}, false); err != nil || !d.Allowed() {
			t.Fatalf("second call, the slot free: %+v, %v", d, err)
		}
	})
}

// TestPreviewReplaysMembersNotPools: an account's pool records its
// members' requests under its plan's tier too; a preview of the tier
// replays the members, each under the proposed limits, and not the pool,
// which is no user.
func TestPreviewReplaysMembersNotPools(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		now := t0
		s := openStore(t, bk.newDSN(t))
		svc := policy.NewService(s, s, policy.WithClock(func() time.Time { return now }), policy.WithUsers(s))
		putAccount(t, svc, policy.Tier{Name: "t", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(10)), policy.RequestsPerHour: new(int64(10)), policy.RequestsPerDay: new(int64(10))}, Account: poolOf(t, map[string]int64{"requests_per_minute": 10})}, "acme", []string{"m1", "m2"})
		for _, u := range []string{"m1", "m2", "m2"} {
			if d, err := svc.Check(ctx, policy.Request{UserID: u}, false); err != nil || !d.Allowed() {
				t.Fatalf("%s: %+v, %v", u, d, err)
			}
		}
		p, err := svc.PreviewTier(ctx, "t", policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(10)), policy.RequestsPerDay: new(int64(10))}})
		if err != nil {
			t.Fatal(err)
		}
		if p.Users != 2 || p.Requests != 3 || p.RequestsRefused != 1 || len(p.TopUsers) != 1 || p.TopUsers[0].UserID != "m2" {
			t.Fatalf("preview: %+v; want 2 users, 3 requests, m2's second refused", p)
		}
	})
}

// A member's call whose pool copy was finished with another count (by
// hand, say) cannot be finished: the conflict is the copy's, and nothing
// of the finish is kept, on either store.
func TestFinishConflictingPoolCopyKeepsNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		now := t0
		dsn := bk.newDSN(t)
		s := openStore(t, dsn)
		svc := policy.NewService(s, s, policy.WithClock(func() time.Time { return now }), policy.WithUsers(s))
		putAccount(t, svc, policy.Tier{Name: "t", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(10)), policy.RequestsPerHour: new(int64(10)), policy.RequestsPerDay: new(int64(10))}, Account: poolOf(t, map[string]int64{"max_concurrent": 5})}, "acme", []string{"m1"})
		d, err := svc.Check(ctx, policy.Request{UserID: "m1", Tokens: 5}, false)
		if err != nil || !d.Allowed() || d.CallID == "" {
			t.Fatalf("check: %+v, %v", d, err)
		}
		raw, err := bk.raw(dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		copyID := policy.PoolCallID(d.CallID)
		if _, err := raw.Exec(`UPDATE calls SET finished_at = opened_at, tokens = 7, reported = 7 WHERE id = '` + copyID + `'`); err != nil {
			t.Fatal(err)
		}
		_, err = s.FinishCall(ctx, d.CallID, policy.Report{Tokens: new(int64(3))}, now)
		if policy.ErrorCode(err) != policy.ECONFLICT || !strings.Contains(err.Error(), copyID) {
			t.Fatalf("finish: %v, want a conflict naming %q", err, copyID)
		}
		// Open, its reservation of 5 counted; finished, 3.
		if u, err := svc.UsageReport(ctx, "m1", "t"); err != nil || u.CallsInFlight != 1 || u.Windows[policy.Minute].Tokens.Used != 5 {
			t.Fatalf("m1 after the refused finish: %d calls in flight, %d tokens used, %v; want the call open, 5 reserved",
				u.CallsInFlight, u.Windows[policy.Minute].Tokens.Used, err)
		}
	})
}
