package db_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

// agentsTier is a tier with room for every request, whose runs have run.
func agentsTier(run policy.LimitSet) policy.Tier {
	return policy.Tier{Name: "agents", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(100000)),
		policy.RequestsPerHour: new(int64(100000)), policy.RequestsPerDay: new(int64(100000))}, Run: &run}
}

// TestRunTree walks a tree of runs through both stores: budgets counted
// on the run and every ancestor, settled at finish, a child too deep, a
// run of another user, the end of a subtree, the last step, idleness, and
// all of it as stored after a restart.
func TestRunTree(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		dsn := bk.newDSN(t)
		now := t0
		clock := func() time.Time { return now }
		s := openStore(t, dsn)
		svc := policy.NewService(s, s, policy.WithClock(clock), policy.WithUsers(s), policy.WithRunIdle(time.Hour))
		if _, _, err := svc.PutTier(ctx, agentsTier(policy.LimitSet{policy.MaxRunRequests: new(int64(6)),
			policy.MaxRunTokens: new(int64(1000)), policy.MaxConcurrent: new(int64(2)), policy.MaxRunDepth: new(int64(3))})); err != nil {
			t.Fatal(err)
		}
		check := func(user, run, parent string, tokens int64) policy.Decision {
			t.Helper()
			now = now.Add(time.Second)
			d, err := svc.Check(ctx, policy.Request{UserID: user, Tier: "agents", RunID: run, ParentRunID: parent, Tokens: tokens}, false)
			if err != nil {
				t.Fatalf("check %s in %s: %v", user, run, err)
			}
			return d
		}
		finish := func(d policy.Decision, tokens int64) {
			t.Helper()
			if _, err := svc.FinishCall(ctx, d.CallID, policy.Report{Tokens: &tokens}); err != nil {
				t.Fatal(err)
			}
		}
		get := func(svc *policy.Service, id string) policy.RunUsage {
			t.Helper()
			r, err := svc.GetRun(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		want := func(r policy.RunUsage, state policy.RunState, requests, tokens, inFlight int64) {
			t.Helper()
			if r.State != state || r.Requests != requests || r.Tokens != tokens || r.CallsInFlight != inFlight {
				t.Errorf("run %s: %s, %d requests, %d tokens, %d in flight; want %s, %d, %d, %d",
					r.ID, r.State, r.Requests, r.Tokens, r.CallsInFlight, state, requests, tokens, inFlight)
			}
		}

		d := check("u", "root", "", 100)
		if !d.Allowed() || d.Run == nil || d.Run.Requests != 1 || d.Run.Tokens != 100 {
			t.Fatalf("root's first step: %+v, run %+v", d, d.Run)
		}
		finish(d, 50)
		want(get(svc, "root"), policy.RunOpen, 1, 50, 0)

		kid := check("u", "kid", "root", 100)
		if !kid.Allowed() {
			t.Fatalf("the child's first step: %+v", kid)
		}
		r := get(svc, "root")
		want(r, policy.RunOpen, 2, 150, 1)
		if !slices.Equal(r.Children, []string{"kid"}) || r.Depth != 1 {
			t.Errorf("root: children %v, depth %d", r.Children, r.Depth)
		}
		finish(kid, 30)
		want(get(svc, "root"), policy.RunOpen, 2, 80, 0)
		if k := get(svc, "kid"); k.Parent != "root" || k.Root != "root" || k.Depth != 2 || k.Tokens != 30 {
			t.Errorf("kid: %+v", k.Run)
		}

		if _, err := svc.Check(ctx, policy.Request{UserID: "other", Tier: "agents", RunID: "root"}, false); policy.ErrorCode(err) != policy.ECONFLICT {
			t.Errorf("another user naming root: %v, want a conflict", err)
		}
		if d := check("u", "grandkid", "kid", 10); !d.Allowed() {
			t.Fatalf("depth 3: %+v", d)
		}
		if d := check("u", "deep", "grandkid", 10); d.Outcome != policy.Denied || d.Reason != `run "deep" depth limit exceeded (max_depth 3)` {
			t.Errorf("depth 4: %v %q", d.Outcome, d.Reason)
		}
		// Ending kid ends grandkid with it, and leaves root open.
		if _, err := svc.EndRun(ctx, "kid"); err != nil {
			t.Fatal(err)
		}
		if d := check("u", "grandkid", "", 10); d.Outcome != policy.Denied || d.Reason != `run "grandkid" was ended` {
			t.Errorf("after the end of kid: %v %q", d.Outcome, d.Reason)
		}
		// root: 3 requests so far, then the 4th to 6th; the 6th is the
		// last its budget allows.
		for i := 4; i <= 6; i++ {
			d := check("u", "root", "", 10)
			if !d.Allowed() {
				t.Fatalf("root's step %d: %+v", i, d)
			}
			finish(d, 10)
		}
		d = check("u", "root", "", 10)
		if d.Outcome != policy.Denied || d.Reason != `run "root" step limit exceeded` || d.RetryAfter != 0 {
			t.Errorf("root's 7th step: %v %q retry %d", d.Outcome, d.Reason, d.RetryAfter)
		}
		// 50 + 30 + grandkid's open 10 + 3 × 10.
		want(get(svc, "root"), policy.RunExhausted, 6, 120, 1)

		// Idle past an hour: expired, and never reopened.
		if d := check("u", "idle", "", 10); !d.Allowed() {
			t.Fatal(d)
		}
		now = now.Add(2 * time.Hour)
		for range 2 {
			if d := check("u", "idle", "", 10); d.Outcome != policy.Denied || d.Run.State != policy.RunExpired {
				t.Errorf("an idle run: %v %q %+v", d.Outcome, d.Reason, d.Run)
			}
		}

		// As stored, through another store on the same database.
		s2 := openStore(t, dsn)
		svc2 := policy.NewService(s2, s2, policy.WithClock(clock), policy.WithUsers(s2))
		// grandkid's call expired with its reservation meanwhile.
		want(get(svc2, "root"), policy.RunExhausted, 6, 120, 0)
		want(get(svc2, "grandkid"), policy.RunEnded, 1, 10, 0)
		want(get(svc2, "idle"), policy.RunExpired, 1, 10, 0)
		runs, err := svc2.ListRuns(ctx, policy.RunFilter{UserID: "u", Limit: 10})
		if err != nil || len(runs) != 4 {
			t.Fatalf("list: %d runs, %v", len(runs), err)
		}
		if runs, err := svc2.ListRuns(ctx, policy.RunFilter{UserID: "u", State: policy.RunEnded, Limit: 10}); err != nil || len(runs) != 2 {
			t.Fatalf("list ended: %d runs, %v", len(runs), err)
		}
		// Forgetting the user forgets the runs.
		if err := svc2.Forget(ctx, "u"); err != nil {
			t.Fatal(err)
		}
		if _, err := svc2.GetRun(ctx, "root"); policy.ErrorCode(err) != policy.ENOTFOUND {
			t.Errorf("after Forget: %v", err)
		}
	})
}

// TestListRunsByStateAsOfNow: a run idle past -run-idle and a run past
// its max_duration, neither asked for since, are held as open but list
// as expired, and not as open, page after page, on both stores.
func TestListRunsByStateAsOfNow(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		now := t0
		s := openStore(t, bk.newDSN(t))
		svc := policy.NewService(s, s, policy.WithClock(func() time.Time { return now }), policy.WithRunIdle(time.Hour))
		tier := agentsTier(policy.LimitSet{policy.MaxRunDuration: new(int64(3600))})
		tier.Limits[policy.TokensPerDay] = new(int64(1 << 30))
		if _, _, err := svc.PutTier(ctx, tier); err != nil {
			t.Fatal(err)
		}
		// a1 to a4 go idle; b1 is asked every 20 minutes, then passes
		// its hour; c1 and c2 stay open; d1 is ended.
		for _, run := range []string{"a1", "a2", "a3", "a4", "b1", "d1"} {
			if d, err := svc.Check(ctx, policy.Request{UserID: "u", Tier: "agents", RunID: run, Tokens: 1}, false); err != nil || !d.Allowed() {
				t.Fatalf("%s: %+v %v", run, d, err)
			}
		}
		if _, err := svc.EndRun(ctx, "d1"); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			now = now.Add(20 * time.Minute)
			for _, run := range []string{"b1", "c1", "c2"} {
				if d, err := svc.Check(ctx, policy.Request{UserID: "u", Tier: "agents", RunID: run, Tokens: 1}, false); err != nil || !d.Allowed() {
					t.Fatalf("%s at %v: %+v %v", run, now.Sub(t0), d, err)
				}
			}
		}
		now = now.Add(20*time.Minute + time.Second) // a1 to a4 idle an hour and a second, b1 open as long
		list := func(user string, state policy.RunState, limit int) []string {
			t.Helper()
			var ids []string
			f := policy.RunFilter{UserID: user, State: state, Limit: limit}
			for {
				runs, err := svc.ListRuns(ctx, f)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range runs {
					if r.State != state {
						t.Errorf("listed as %s: %s is %s", state, r.ID, r.State)
					}
					ids = append(ids, r.ID)
				}
				if len(runs) < limit {
					return ids
				}
				f.After = runs[len(runs)-1].ID
			}
		}
		for _, user := range []string{"u", ""} {
			for _, limit := range []int{1, 2, 10} {
				for state, want := range map[policy.RunState][]string{
					policy.RunExpired: {"a1", "a2", "a3", "a4", "b1"},
					policy.RunOpen:    {"c1", "c2"},
					policy.RunEnded:   {"d1"},
				} {
					if got := list(user, state, limit); !slices.Equal(got, want) {
						t.Errorf("user %q, %s, pages of %d: %v, want %v", user, state, limit, got, want)
					}
				}
			}
		}
	})
}

// TestRunBudgetsHoldUnderParallelCallers: 64 clients (on PostgreSQL
// through three replicas) drive 8 runs of one user, two roots of three
// children each, and never pass any run's budget: each admission reads
// and counts the run and its ancestors under the user's lock. Then
// ending a root on one replica refuses its child's next request on
// another.
func TestRunBudgetsHoldUnderParallelCallers(t *testing.T) {
	const clients, perClient = 64, 12
	const maxRequests, maxTokens = 40, 3000
	eachBackend(t, func(t *testing.T, bk backend) {
		replicas := 1
		if bk.name == "postgres" {
			replicas = 3
		}
		ctx := context.Background()
		_, svcs := openReplicas(t, bk.newDSN(t), replicas, tickingClock(t0))
		if _, _, err := svcs[0].PutTier(ctx, agentsTier(policy.LimitSet{policy.MaxRunRequests: new(int64(maxRequests)),
			policy.MaxRunTokens: new(int64(maxTokens)), policy.MaxConcurrent: new(int64(6))})); err != nil {
			t.Fatal(err)
		}
		type node struct{ id, parent string }
		var runs []node
		for r := range 2 {
			root := fmt.Sprintf("root-%d", r)
			runs = append(runs, node{root, ""})
			for k := range 3 {
				runs = append(runs, node{fmt.Sprintf("%s-kid-%d", root, k), root})
			}
		}
		var mu sync.Mutex
		admitted := map[string]int64{} // a run's requests, its children's included
		used := map[string]int64{}
		var wg sync.WaitGroup
		for g := range clients {
			wg.Go(func() {
				svc := svcs[g%replicas]
				n := runs[g%len(runs)]
				for i := range perClient {
					d, err := svc.Check(ctx, policy.Request{UserID: "u", Tier: "agents", RunID: n.id, ParentRunID: n.parent, Tokens: 100}, false)
					if err != nil {
						t.Error(err)
						return
					}
					if !d.Allowed() {
						continue
					}
					tokens := int64((g*7 + i*13) % 101)
					if _, err := svc.FinishCall(ctx, d.CallID, policy.Report{Tokens: &tokens}); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					for _, id := range []string{n.id, n.parent} {
						if id != "" {
							admitted[id]++
							used[id] += tokens
						}
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		for _, n := range runs {
			r, err := svcs[len(svcs)-1].GetRun(ctx, n.id)
			if err != nil {
				if n.parent != "" && admitted[n.id] == 0 {
					continue // never opened: its root was used up first
				}
				t.Fatal(err)
			}
			if r.Requests != admitted[n.id] || r.Tokens != used[n.id] {
				t.Errorf("run %s counts %d requests, %d tokens; the clients %d, %d", n.id, r.Requests, r.Tokens, admitted[n.id], used[n.id])
			}
			if r.Requests > maxRequests || r.Tokens > maxTokens || r.CallsInFlight != 0 {
				t.Errorf("run %s: %d requests, %d tokens, %d in flight: past its budget", n.id, r.Requests, r.Tokens, r.CallsInFlight)
			}
		}
		for _, root := range []string{"root-0", "root-1"} {
			if admitted[root] < maxRequests && used[root]+100 <= maxTokens {
				t.Errorf("%s stopped at %d requests, %d tokens, with budget left", root, admitted[root], used[root])
			}
			t.Logf("%s: %d requests, %d tokens admitted", root, admitted[root], used[root])
		}

		// A kill switch seen on every replica: a new tree, its root
		// ended on the first replica, its child refused on the last.
		last := svcs[len(svcs)-1]
		for _, req := range []policy.Request{{RunID: "job"}, {RunID: "job-kid", ParentRunID: "job"}} {
			req.UserID, req.Tier = "u", "agents"
			if d, err := last.Check(ctx, req, false); err != nil || !d.Allowed() {
				t.Fatalf("%+v: %+v %v", req, d, err)
			}
		}
		if _, err := svcs[0].EndRun(ctx, "job"); err != nil {
			t.Fatal(err)
		}
		d, err := last.Check(ctx, policy.Request{UserID: "u", Tier: "agents", RunID: "job-kid"}, false)
		if err != nil || d.Outcome != policy.Denied || d.Reason != `run "job-kid" was ended` {
			t.Errorf("the child after its root's end: %v %q %v", d.Outcome, d.Reason, err)
		}
	})
}

var _ policy.RunStore = (*db.Store)(nil)

// A member of an account runs as anyone does, its run counted in the
// member's admission with the pool's; the cleanup deletes runs a week
// after their last request and not before.
func TestRunsOfMembersAndCleanup(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		now := t0
		s := openStore(t, bk.newDSN(t))
		svc := policy.NewService(s, s, policy.WithClock(func() time.Time { return now }), policy.WithUsers(s), policy.WithAccounts(s))
		tier := agentsTier(policy.LimitSet{policy.MaxRunRequests: new(int64(1))})
		tier.Account = &policy.LimitSet{policy.RequestsPerMinute: new(int64(100))}
		putAccount(t, svc, tier, "acme", []string{"m"})
		for i, want := range []policy.Outcome{policy.Admitted, policy.Denied} {
			d, err := svc.Check(ctx, policy.Request{UserID: "m", RunID: "team-run"}, false)
			if err != nil || d.Outcome != want || d.Account == nil {
				t.Fatalf("step %d: %+v %v", i+1, d, err)
			}
		}
		if r, err := svc.GetRun(ctx, "team-run"); err != nil || r.Requests != 1 || r.State != policy.RunExhausted {
			t.Fatalf("the member's run: %+v %v", r, err)
		}
		for _, tc := range []struct {
			after time.Duration
			found bool
		}{{policy.RunKeepFor - time.Hour, true}, {policy.RunKeepFor + time.Hour, false}} {
			now = t0.Add(tc.after)
			if _, err := s.Prune(ctx, now.Add(-policy.KeepFor)); err != nil {
				t.Fatal(err)
			}
			_, err := svc.GetRun(ctx, "team-run")
			if found := err == nil; found != tc.found {
				t.Errorf("%v after its last request: found %v (%v), want %v", tc.after, found, err, tc.found)
			}
		}
	})
}

// Ending a tree whose root has expired, by its max_duration, and whose
// child has not: the child ends, the root stays expired as it read
// before the end, and a check in it is refused for that.
func TestEndRunLeavesExpiredRunsExpired(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		now := t0
		s := openStore(t, bk.newDSN(t))
		svc := policy.NewService(s, s, policy.WithClock(func() time.Time { return now }), policy.WithUsers(s))
		if _, _, err := svc.PutTier(ctx, agentsTier(policy.LimitSet{policy.MaxRunDuration: new(int64(1800))})); err != nil {
			t.Fatal(err)
		}
		for _, req := range []policy.Request{{RunID: "root"}, {RunID: "kid", ParentRunID: "root"}} {
			req.UserID, req.Tier = "u", "agents"
			if d, err := svc.Check(ctx, req, false); err != nil || !d.Allowed() {
				t.Fatalf("%+v: %+v %v", req, d, err)
			}
			now = now.Add(20 * time.Minute)
		}
		now = now.Add(-5 * time.Minute) // 35 minutes after root's first request, 15 after kid's
		state := func(id string) (policy.RunState, policy.RunCause) {
			t.Helper()
			r, err := svc.GetRun(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			return r.State, r.Cause
		}
		if st, cause := state("root"); st != policy.RunExpired || cause != policy.CauseDuration {
			t.Fatalf("root before the end: %s %s", st, cause)
		}
		r, err := svc.EndRun(ctx, "root")
		if err != nil || r.State != policy.RunExpired || r.Cause != policy.CauseDuration {
			t.Errorf("end root: %s %s, %v; want expired by its duration", r.State, r.Cause, err)
		}
		if st, cause := state("kid"); st != policy.RunEnded || cause != policy.CauseEnded {
			t.Errorf("kid after the end: %s %s", st, cause)
		}
		d, err := svc.Check(ctx, policy.Request{UserID: "u", Tier: "agents", RunID: "root"}, false)
		if err != nil || d.Outcome != policy.Denied || d.Reason != `run "root" duration exceeded` {
			t.Errorf("root after the end: %v %q %v", d.Outcome, d.Reason, err)
		}
	})
}
