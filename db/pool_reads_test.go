package db_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

// poolReadsEnv is a service whose store keeps accounts, on one backend, with
// a clock that moves only when told.
type poolReadsEnv struct {
	t     *testing.T
	dsn   string
	store *db.Store
	svc   *policy.Service
	clk   *policy.TestClock
}

func newPoolReadsEnv(t *testing.T, bk backend, team policy.Tier) *poolReadsEnv {
	t.Helper()
	dsn := bk.newDSN(t)
	s := openStore(t, dsn)
	clk := policy.NewTestClock(t0)
	e := &poolReadsEnv{t: t, dsn: dsn, store: s, clk: clk,
		svc: policy.NewService(s, s, policy.WithClock(clk.Now), policy.WithUsers(s), policy.WithStats(s, s))}
	ctx := context.Background()
	if _, _, err := e.svc.PutTier(ctx, team); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *poolReadsEnv) putAccount(id string, overrides policy.Overrides) {
	e.t.Helper()
	if _, _, err := e.svc.PutAccount(context.Background(), policy.Account{AccountID: id, Tier: "team", Limits: overrides}); err != nil {
		e.t.Fatal(err)
	}
}

// check checks user, in account (a record's, or "" for none), n times a
// second apart; every check must be admitted. It returns the calls opened.
func (e *poolReadsEnv) check(user, account string, n int) []string {
	e.t.Helper()
	var calls []string
	for range n {
		d, err := e.svc.Check(context.Background(), policy.Request{UserID: user, Tier: "team", Account: account}, false)
		if err != nil || !d.Allowed() {
			e.t.Fatalf("check of %s in %q: %+v, %v", user, account, d, err)
		}
		if d.CallID != "" {
			calls = append(calls, d.CallID)
		}
		e.clk.Advance(time.Second)
	}
	return calls
}

// rows counts the rows of table (requests or calls) whose key is an
// account's pool, and the others.
func (e *poolReadsEnv) rows(bk backend, table string) (pools, users int64) {
	e.t.Helper()
	raw, err := bk.raw(e.dsn)
	if err != nil {
		e.t.Fatal(err)
	}
	defer raw.Close()
	from := table
	if table == "requests" && bk.name == "sqlite" {
		// A pool's newest rows wait in pool_recent (see maxStaged).
		from = `(SELECT user_id FROM requests UNION ALL SELECT user_id FROM pool_recent)`
	}
	rows, err := raw.Query(`SELECT user_id FROM ` + from)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		if err := rows.Scan(&key); err != nil {
			e.t.Fatal(err)
		}
		if policy.IsAccountKey(key) {
			pools++
		} else {
			users++
		}
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return pools, users
}

// A preview replays the pools of a tier's accounts apart from its users:
// through the proposed account object with each account's overrides (an
// account deleted since through the object alone), reported as accounts
// refused and refused by account window, and never as users.
func TestPreviewReplaysPoolsApart(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		team := policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(100)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(10000))}}
		e := newPoolReadsEnv(t, bk, team)
		ctx := context.Background()
		e.putAccount("acme", policy.Overrides{})
		e.putAccount("beta", policy.Overrides{2: policy.To(1000)}) // requests_per_day
		e.putAccount("gone", policy.Overrides{2: policy.To(1000)})
		if _, _, err := e.svc.PutUser(ctx, policy.UserRecord{UserID: "a1", Account: "acme"}); err != nil {
			t.Fatal(err)
		}
		e.check("a1", "", 3)
		e.check("a2", "acme", 2)
		e.check("b1", "beta", 3)
		e.check("g1", "gone", 3)
		e.check("solo", "", 4)
		// gone has no members with records, so it can go; its pool's
		// requests stay.
		if err := e.svc.DeleteAccount(ctx, "gone"); err != nil {
			t.Fatal(err)
		}
		if pools, users := e.rows(bk, "requests"); pools != 11 || users != 15 {
			t.Fatalf("requests: %d of pools and %d of users, want 11 and 15", pools, users)
		}

		proposed := team
		proposed.Limits[policy.RequestsPerMinute] = new(int64(2))
		proposed.Account = pooledRequests(-1, -1, 2)
		p, err := e.svc.PreviewTier(ctx, "team", proposed.PreviewLimits())
		if err != nil {
			t.Fatal(err)
		}
		// Users: a1, b1 and g1 lose their third request to the minute,
		// solo its last two. Pools: acme (5 requests) its last three to
		// the day, beta none (its own day is 1,000), gone (3) its last
		// one on the plan's day alone.
		if p.Users != 5 || p.Requests != 15 || p.UsersRefused != 4 || p.RequestsRefused != 5 || p.RefusedBy != [3]int64{5, 0, 0} {
			t.Errorf("users' figures: %+v", p)
		}
		if p.AccountsRefused != 2 || p.RefusedByAccount != [3]int64{0, 0, 4} {
			t.Errorf("accounts refused %d by window %v, want 2 and [0 0 4]", p.AccountsRefused, p.RefusedByAccount)
		}
		var top []string
		for _, u := range p.TopUsers {
			top = append(top, fmt.Sprintf("%s:%d/%d", u.UserID, u.Refused, u.Requests))
		}
		if got, want := strings.Join(top, " "), "solo:2/4 a1:1/3 b1:1/3 g1:1/3"; got != want {
			t.Errorf("top users %s, want %s", got, want)
		}
		// Without an account object, only the accounts' own limits bind:
		// beta's and gone's day of 1,000 refuse nothing.
		proposed.Account = nil
		if p, err := e.svc.PreviewTier(ctx, "team", proposed.PreviewLimits()); err != nil || p.AccountsRefused != 0 || p.RefusedByAccount != [3]int64{} || p.Users != 5 {
			t.Errorf("without an account object: %+v, %v", p, err)
		}
	})
}

// poolOf returns pooled limits of requests per minute, hour and day; a
// negative value sets none.
func pooledRequests(perMinute, perHour, perDay int64) *policy.LimitSet {
	var p policy.LimitSet
	for i, v := range []int64{perMinute, perHour, perDay} {
		if v >= 0 {
			f, _ := policy.LimitFieldNamed([]string{"requests_per_minute", "requests_per_hour", "requests_per_day"}[i])
			p.Set(f, &v)
		}
	}
	return &p
}

// A member's check records its request and opens its call twice, as its
// own and in its account's pool: the top users, the calls in flight per
// tier and the tokens settled count them once, and name no pool.
func TestStatsLeaveOutPools(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		team := policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(100)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(10000)), policy.MaxConcurrent: i64(10)}}
		e := newPoolReadsEnv(t, bk, team)
		ctx := context.Background()
		e.putAccount("acme", policy.Overrides{})
		calls := e.check("m1", "acme", 3)
		calls = append(calls, e.check("m2", "acme", 2)...)
		e.check("solo", "", 1)
		if pools, users := e.rows(bk, "calls"); pools != 5 || users != 6 {
			t.Fatalf("calls: %d of pools and %d of users, want 5 and 6", pools, users)
		}

		lists, err := e.store.TopUsers(ctx, []time.Time{t0.Add(-time.Minute)}, 10)
		if err != nil {
			t.Fatal(err)
		}
		want := []policy.UserRequests{{UserID: "m1", Requests: 3}, {UserID: "m2", Requests: 2}, {UserID: "solo", Requests: 1}}
		if !slices.Equal(lists[0], want) {
			t.Errorf("top users %+v, want %+v", lists[0], want)
		}
		top, err := e.svc.TopUsers(ctx, []policy.StatsPeriod{policy.PeriodHour}, 10)
		if err != nil || len(top[0]) != 3 {
			t.Errorf("the service's top users %+v, %v", top, err)
		}

		inFlight, err := e.store.CallsInFlight(ctx, e.clk.Now())
		if err != nil || inFlight["team"] != 6 || len(inFlight) != 1 {
			t.Errorf("calls in flight %v, %v; want team: 6", inFlight, err)
		}

		for _, id := range calls[:2] {
			if _, err := e.svc.FinishCall(ctx, id, policy.Report{Tokens: i64(7)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.store.FlushCounts(ctx); err != nil {
			t.Fatal(err)
		}
		buckets, err := e.store.Stats(ctx, t0.Add(-time.Hour), t0.Add(time.Hour), time.Hour, "team")
		if err != nil || len(buckets) != 1 || buckets[0].TokensSettled != 14 || buckets[0].Admitted != 6 {
			t.Errorf("stats %+v, %v; want 14 tokens settled and 6 checks admitted", buckets, err)
		}
		if inFlight, _ := e.store.CallsInFlight(ctx, e.clk.Now()); inFlight["team"] != 4 {
			t.Errorf("calls in flight after two finished: %v, want team: 4", inFlight)
		}
	})
}

// Prune deletes the pools' requests, calls and tokens as it does users',
// and their windows then count nothing.
func TestPrunePrunesPools(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		team := policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(100)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(10000)), policy.TokensPerDay: i64(1 << 20)}}
		e := newPoolReadsEnv(t, bk, team)
		ctx := context.Background()
		e.putAccount("acme", policy.Overrides{})
		calls := e.check("m1", "acme", 3)
		if _, err := e.svc.FinishCall(ctx, calls[0], policy.Report{Tokens: i64(5)}); err != nil {
			t.Fatal(err)
		}
		// The other two are left to expire.
		if pools, _ := e.rows(bk, "requests"); pools != 3 {
			t.Fatalf("%d requests of the pool, want 3", pools)
		}
		e.clk.Advance(policy.KeepFor + time.Hour)
		if _, err := e.store.Prune(ctx, e.clk.Now().Add(-policy.KeepFor)); err != nil {
			t.Fatal(err)
		}
		for _, table := range []string{"requests", "calls", "call_tokens"} {
			if pools, users := e.rows(bk, table); pools != 0 || users != 0 {
				t.Errorf("%s after pruning: %d of the pool, %d of users; want none", table, pools, users)
			}
		}
		u, err := e.svc.AccountUsage(ctx, "acme")
		if err != nil || u.Windows[policy.Day].Count != 0 || u.CallsInFlight != 0 || u.Windows[policy.Day].Tokens == nil || u.Windows[policy.Day].Tokens.Used != 0 {
			t.Fatalf("pooled usage after pruning: %+v, %v", u, err)
		}
	})
}

// A tier's pooled shadow limits are kept with its shadow limits: read back
// by another store, in the audit log's before and after, and a shadow
// without them stays without.
func TestShadowAccountStored(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		dsn := bk.newDSN(t)
		s := openStore(t, dsn)
		team := policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(10)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(1000))}, Features: []string{}, Shadow: &policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(5)), policy.RequestsPerHour: new(int64(50)), policy.RequestsPerDay: new(int64(500))}}}
		plain := team
		team.Shadow = &policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(5)), policy.RequestsPerHour: new(int64(50)), policy.RequestsPerDay: new(int64(500))}, Account: pooledRequests(20, -1, 400)}
		if _, err := s.UpdateTiers(ctx, policy.TierUpdate{At: t0, Put: []policy.Tier{plain}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.UpdateTiers(ctx, policy.TierUpdate{At: t0.Add(time.Second), Put: []policy.Tier{team}}); err != nil {
			t.Fatal(err)
		}
		other := openStore(t, dsn)
		got, err := other.Tier(ctx, "team")
		if err != nil {
			t.Fatal(err)
		}
		if !policy.SameLimits(&got, &team) || got.Shadow.Account == nil {
			t.Fatalf("read back %+v (shadow %+v), want %+v", got, got.Shadow, team.Shadow)
		}
		changes, err := other.TierChanges(ctx, 1)
		if err != nil || len(changes) != 1 || changes[0].Old.Shadow.Account != nil || !policy.SameLimits(changes[0].New, &team) {
			t.Fatalf("audit log %+v, %v; want the pooled shadow limits added", changes, err)
		}
		// Unchanged, the import of the same tier changes nothing.
		if changes, err := s.UpdateTiers(ctx, policy.TierUpdate{At: t0.Add(2 * time.Second), Put: []policy.Tier{team}, SkipUnchanged: true}); err != nil || len(changes) != 0 {
			t.Fatalf("the same tier again: %+v, %v", changes, err)
		}
	})
}

// A member's check is decided against the pooled shadow limits of its
// account's plan over the pool's history, in the store's admission, and
// never refused by them; statistics count it under shadow_account.
func TestShadowAccountChecks(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		team := policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(100)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(10000))}, Shadow: &policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(100)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(10000))}, Account: pooledRequests(2, -1, -1)}}
		e := newPoolReadsEnv(t, bk, team)
		ctx := context.Background()
		e.putAccount("acme", policy.Overrides{})
		for i, user := range []string{"a", "b", "a", "b"} {
			d, err := e.svc.Check(ctx, policy.Request{UserID: user, Account: "acme"}, false)
			if err != nil || !d.Allowed() || d.Shadow == nil {
				t.Fatalf("check %d: %+v, %v", i, d, err)
			}
			want := ""
			if i >= 2 {
				want = "account per-minute limit exceeded"
			}
			if got := d.Shadow.Reason(); got != want {
				t.Fatalf("check %d: shadow reason %q, want %q", i, got, want)
			}
			e.clk.Advance(time.Millisecond)
		}
		// A dry run decides it too, and records nothing.
		if d, err := e.svc.Check(ctx, policy.Request{UserID: "c", Account: "acme"}, true); err != nil || d.Shadow == nil || d.Shadow.Reason() != "account per-minute limit exceeded" {
			t.Fatalf("dry run: %+v, %v", d, err)
		}
		if err := e.store.FlushCounts(ctx); err != nil {
			t.Fatal(err)
		}
		buckets, err := e.store.Stats(ctx, t0.Add(-time.Hour), t0.Add(time.Hour), time.Hour, "team")
		if err != nil || len(buckets) != 1 || buckets[0].Admitted != 4 || buckets[0].Shadow[policy.CountAccount] != 2 || len(buckets[0].Shadow) != 1 {
			t.Fatalf("stats %+v, %v; want 4 admitted and 2 counted as shadow account", buckets, err)
		}
	})
}
