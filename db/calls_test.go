package db_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

func i64(v int64) *int64 { return &v }

// meteredEnv is a service on a temp-file store with a manual clock.
type meteredEnv struct {
	t     *testing.T
	path  string
	store *db.Store
	svc   *policy.Service
	now   time.Time
}

func newMeteredEnv(t *testing.T, bk backend, tier policy.Tier) *meteredEnv {
	t.Helper()
	e := &meteredEnv{t: t, path: bk.newDSN(t), now: t0}
	e.open()
	if _, _, err := e.svc.PutTier(context.Background(), tier); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *meteredEnv) open() {
	e.t.Helper()
	s, err := db.Open(context.Background(), e.path, db.WithSynchronous(db.SyncNormal))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { s.Close() })
	e.store = s
	e.svc = policy.NewService(s, s, policy.WithClock(func() time.Time { return e.now }), policy.WithCallTimeout(time.Minute))
}

func (e *meteredEnv) check(user, tier string, tokens int64) policy.Decision {
	e.t.Helper()
	d, err := e.svc.Check(context.Background(), policy.Request{UserID: user, Tier: tier, Tokens: tokens}, false)
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

func (e *meteredEnv) finish(id string, tokens *int64) (policy.Call, error) {
	return e.svc.FinishCall(context.Background(), id, policy.Report{Tokens: tokens})
}

// TestMeteredCallsWalk walks one user through token limits, concurrency,
// finishing, expiry and keepalive, with every answer spelled out.
func TestMeteredCallsWalk(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		tier := policy.Tier{Name: "m", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(100)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(1000)), policy.TokensPerMinute: i64(100), policy.TokensPerDay: i64(1000), policy.MaxConcurrent: i64(2)}}
		e := newMeteredEnv(t, bk, tier)
		ctx := context.Background()

		// A: 60 tokens reserved.
		a := e.check("u", "m", 60)
		if !a.Allowed() || a.CallID == "" || len(a.CallID) > policy.MaxCallIDBytes {
			t.Fatalf("first check: %+v", a)
		}
		if got := *a.Windows[policy.Minute].Tokens; got != (policy.TokenState{Limited: true, Limit: 100, Used: 60, Remaining: 40}) {
			t.Fatalf("minute tokens %+v", got)
		}
		if a.Windows[policy.Hour].Tokens != nil {
			t.Fatalf("hour has no token limit, but tokens %+v", a.Windows[policy.Hour].Tokens)
		}
		if *a.Concurrency != (policy.ConcurrencyState{Limit: 2, InFlight: 1}) {
			t.Fatalf("concurrency %+v", a.Concurrency)
		}

		// 50 more cannot fit while A's 60 are reserved, however long one waits
		// on finished tokens: the window's length.
		e.now = e.now.Add(time.Second)
		if d := e.check("u", "m", 50); d.Allowed() || d.Reason != "per-minute token limit exceeded" || d.RetryAfter != 60 || d.CallID != "" {
			t.Fatalf("over the minute: %+v", d)
		}
		// A refusal records no request.
		if got := count(t, e.store, "u", t0.Add(-time.Hour)); got != 1 {
			t.Fatalf("requests recorded: %d, want 1", got)
		}

		// B: 40 fits exactly. Then a third call is over max_concurrent.
		b := e.check("u", "m", 40)
		if !b.Allowed() || b.Windows[policy.Minute].Tokens.Used != 100 || b.Concurrency.InFlight != 2 {
			t.Fatalf("B: %+v %+v", b, b.Windows[policy.Minute].Tokens)
		}
		if d := e.check("u", "m", 0); d.Allowed() || d.Reason != "concurrent call limit exceeded" || d.RetryAfter != 1 {
			t.Fatalf("third call: %+v", d)
		}

		// A finishes with 30 at t0+2s; C of 50 then fits (30 + 40 + 50 > 100?
		// no: 30 finished + 40 reserved + 30 = 100).
		e.now = t0.Add(2 * time.Second)
		fa, err := e.finish(a.CallID, i64(30))
		if err != nil || fa.Tokens != 30 || *fa.Reported != 30 || !fa.FinishedAt.Equal(e.now) || fa.Open() {
			t.Fatalf("finish A: %+v %v", fa, err)
		}
		if d := e.check("u", "m", 31); d.Allowed() || d.Reason != "per-minute token limit exceeded" || d.RetryAfter != 60 {
			// 30 finished + 40 open + 31 = 101: waiting for A's 30 to leave
			// the minute, at t0+62s.
			t.Fatalf("31 tokens: %+v", d)
		}
		e.now = t0.Add(30 * time.Second)
		if d := e.check("u", "m", 31); d.Allowed() || d.RetryAfter != 32 || d.Windows[policy.Minute].Tokens.Reset != 32 {
			t.Fatalf("31 tokens later: %+v %+v", d, d.Windows[policy.Minute].Tokens)
		}
		c := e.check("u", "m", 30)
		if !c.Allowed() || c.Windows[policy.Minute].Tokens.Used != 100 || c.Windows[policy.Day].Tokens.Used != 100 {
			t.Fatalf("C: %+v", c)
		}

		// Finishing again with the same count changes nothing; another count
		// conflicts; unknown ids and bad counts fail.
		if again, err := e.finish(a.CallID, i64(30)); err != nil || again.Tokens != 30 {
			t.Fatalf("finish A again: %+v %v", again, err)
		}
		if _, err := e.finish(a.CallID, i64(31)); policy.ErrorCode(err) != policy.ECONFLICT {
			t.Fatalf("finish A with another count: %v", err)
		}
		if _, err := e.finish(a.CallID, nil); policy.ErrorCode(err) != policy.ECONFLICT {
			t.Fatalf("finish A with its reservation: %v", err)
		}
		if _, err := e.finish("nope", nil); policy.ErrorCode(err) != policy.ENOTFOUND {
			t.Fatalf("unknown call: %v", err)
		}
		if _, err := e.finish(b.CallID, i64(-1)); policy.ErrorCode(err) != policy.EINVALID {
			t.Fatalf("negative tokens: %v", err)
		}
		if _, err := e.svc.Check(ctx, policy.Request{UserID: "u", Tier: "m", Tokens: policy.MaxLimit + 1}, false); policy.ErrorCode(err) != policy.EINVALID {
			t.Fatalf("too many tokens: %v", err)
		}

		// KeepAlive moves B's expiry; C expires at t0+90s and, from the first
		// check after, counts as finished then with its reservation.
		e.now = t0.Add(50 * time.Second)
		kb, err := e.svc.KeepAlive(ctx, b.CallID)
		if err != nil || !kb.ExpiresAt.Equal(e.now.Add(time.Minute)) {
			t.Fatalf("keepalive B: %+v %v", kb, err)
		}
		if _, err := e.svc.KeepAlive(ctx, a.CallID); policy.ErrorCode(err) != policy.ECONFLICT {
			t.Fatalf("keepalive of a finished call: %v", err)
		}
		e.now = t0.Add(90 * time.Second)
		u, err := e.svc.UsageReport(ctx, "u", "m")
		if err != nil || u.CallsInFlight != 1 || u.Windows[policy.Minute].Tokens.Used != 70 || u.Windows[policy.Day].Tokens.Used != 100 {
			t.Fatalf("usage at C's expiry: %+v %v", u, err)
		}
		if _, err := e.svc.KeepAlive(ctx, c.CallID); policy.ErrorCode(err) != policy.ECONFLICT {
			t.Fatalf("keepalive of an expired call: %v", err)
		}
		d := e.check("u", "m", 0)
		if !d.Allowed() || d.Concurrency.InFlight != 2 || d.Windows[policy.Day].Tokens.Used != 100 {
			t.Fatalf("after C's expiry: %+v %+v", d, d.Windows[policy.Day].Tokens)
		}
		// A late finish of C with more than it reserved adds the excess now;
		// with fewer, the reservation stands.
		e.now = t0.Add(100 * time.Second)
		fc, err := e.finish(c.CallID, i64(45))
		if err != nil || !fc.Expired || fc.Tokens != 45 || *fc.Reported != 45 || !fc.FinishedAt.Equal(t0.Add(90*time.Second)) {
			t.Fatalf("late finish of C: %+v %v", fc, err)
		}
		if u, _ := e.svc.UsageReport(ctx, "u", "m"); u.Windows[policy.Day].Tokens.Used != 115 {
			t.Fatalf("day after C's late finish: %+v", u.Windows[policy.Day].Tokens)
		}
		if _, err := e.finish(c.CallID, i64(10)); policy.ErrorCode(err) != policy.ECONFLICT {
			t.Fatalf("second late finish: %v", err)
		}

		// Restart: calls, reservations and finished tokens are on disk.
		e.store.Close()
		e.open()
		u, err = e.svc.UsageReport(ctx, "u", "m")
		if err != nil || u.CallsInFlight != 2 || u.Windows[policy.Day].Tokens.Used != 115 {
			t.Fatalf("after restart: %+v %v", u, err)
		}
		// Forget clears calls and tokens.
		if err := e.svc.Forget(ctx, "u"); err != nil {
			t.Fatal(err)
		}
		u, err = e.svc.UsageReport(ctx, "u", "m")
		if err != nil || u.CallsInFlight != 0 || u.Windows[policy.Day].Tokens.Used != 0 {
			t.Fatalf("after forget: %+v %v", u, err)
		}
		if _, err := e.finish(b.CallID, nil); policy.ErrorCode(err) != policy.ENOTFOUND {
			t.Fatalf("finish after forget: %v", err)
		}
	})
}

// TestUnmeteredTierOpensNoCall: the seeded tiers meter nothing.
func TestUnmeteredTierOpensNoCall(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		e := newMeteredEnv(t, bk, policy.Tier{Name: "plain", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(5)), policy.RequestsPerHour: new(int64(5)), policy.RequestsPerDay: new(int64(5))}})
		for _, tier := range []string{"plain", "free", "pro", "enterprise"} {
			d, err := e.svc.Check(context.Background(), policy.Request{UserID: "u", Tier: tier, Tokens: 10, Feature: ""}, false)
			if err != nil || !d.Allowed() || d.CallID != "" || d.Concurrency != nil || d.Windows[policy.Minute].Tokens != nil {
				t.Fatalf("%s: %+v %v", tier, d, err)
			}
		}
	})
}

// TestMeteredTierRoundTrips: the four limits are stored, read back, cached
// and kept in the audit log.
func TestMeteredTierRoundTrips(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		tier := policy.Tier{Name: "rt", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(1)), policy.RequestsPerDay: new(int64(1)), policy.TokensPerMinute: i64(0), policy.TokensPerHour: i64(policy.MaxLimit), policy.MaxConcurrent: i64(7)}, Features: []string{}}
		e := newMeteredEnv(t, bk, tier)
		ctx := context.Background()
		got, err := e.store.Tier(ctx, "rt")
		if err != nil || !policy.SameLimits(&got, &tier) || got.Limits[policy.TokensPerDay] != nil || *got.Limits[policy.TokensPerMinute] != 0 {
			t.Fatalf("read back %+v %v", got, err)
		}
		changes, err := e.store.TierChanges(ctx, 1)
		if err != nil || len(changes) != 1 || !policy.SameLimits(changes[0].New, &tier) {
			t.Fatalf("audit log %+v %v", changes, err)
		}
		// The comparator sees each of them.
		other := tier
		other.Limits[policy.MaxConcurrent] = nil
		if policy.SameLimits(&other, &tier) {
			t.Fatal("SameLimits ignores max_concurrent")
		}
		bad := tier
		bad.Limits[policy.TokensPerDay] = i64(-1)
		if err := bad.Validate(); err == nil || err.Error() != "tokens_per_day must be an integer from 0 to 2147483647" {
			t.Fatalf("validate: %v", err)
		}
	})
}

// TestConcurrentChecksOpenExactlyMaxConcurrent: 40 parallel checks of one
// user on a tier with max_concurrent 5 admit exactly 5.
func TestConcurrentChecksOpenExactlyMaxConcurrent(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		e := newMeteredEnv(t, bk, policy.Tier{Name: "c5", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1000)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(1000)), policy.MaxConcurrent: i64(5)}})
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := e.svc.Check(context.Background(), policy.Request{UserID: "hot", Tier: "c5"}, false)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed() {
					admitted.Add(1)
				} else if d.Reason != policy.ConcurrencyReason {
					t.Errorf("refused for %q", d.Reason)
				}
			}()
		}
		wg.Wait()
		if got := admitted.Load(); got != 5 {
			t.Fatalf("admitted %d of 40, want exactly 5", got)
		}
		if got := count(t, e.store, "hot", t0.Add(-time.Hour)); got != 5 {
			t.Fatalf("recorded %d requests, want 5: a concurrency refusal records nothing", got)
		}
	})
}

// TestConcurrentChecksNeverExceedTokens: parallel checks and finishes
// against a token limit never let the used tokens exceed it.
func TestConcurrentChecksNeverExceedTokens(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		const limit = 1000
		e := newMeteredEnv(t, bk, policy.Tier{Name: "tk", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(100000)), policy.RequestsPerHour: new(int64(100000)), policy.RequestsPerDay: new(int64(100000)), policy.TokensPerMinute: i64(limit)}})
		ctx := context.Background()
		var wg sync.WaitGroup
		var admitted atomic.Int64
		for g := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 10 {
					tokens := int64(7 + (g*13+i*5)%90)
					d, err := e.svc.Check(ctx, policy.Request{UserID: "hot", Tier: "tk", Tokens: tokens}, false)
					if err != nil {
						t.Error(err)
						return
					}
					if used := d.Windows[policy.Minute].Tokens.Used; used > limit {
						t.Errorf("used %d > %d", used, limit)
					}
					if d.Allowed() {
						admitted.Add(1)
						if i%2 == 0 {
							if _, err := e.svc.FinishCall(ctx, d.CallID, policy.Report{Tokens: i64(tokens / 2)}); err != nil {
								t.Error(err)
							}
						}
					}
				}
			}()
		}
		wg.Wait()
		u, err := e.svc.UsageReport(ctx, "hot", "tk")
		if err != nil || u.Windows[policy.Minute].Tokens.Used > limit || admitted.Load() == 0 {
			t.Fatalf("usage %+v, admitted %d, %v", u.Windows[policy.Minute].Tokens, admitted.Load(), err)
		}
	})
}

// TestPruneCallsKeepsCounts: the cleanup deletes finished calls and token
// rows no window counts, settles long-expired calls, and what windows count
// afterwards is unchanged.
func TestPruneCallsKeepsCounts(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		e := newMeteredEnv(t, bk, policy.Tier{Name: "p", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1000)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(1000)), policy.TokensPerDay: i64(1 << 30)}})
		ctx := context.Background()
		var expired policy.Decision
		for i := range 30 {
			e.now = t0.Add(time.Duration(i) * time.Hour)
			d := e.check("u", "p", 10)
			if i%3 != 0 {
				if _, err := e.finish(d.CallID, i64(int64(i))); err != nil {
					t.Fatal(err)
				}
			} else {
				expired = d // left to expire
			}
		}
		e.now = t0.Add(30 * time.Hour)
		before, err := e.svc.UsageReport(ctx, "u", "p")
		if err != nil {
			t.Fatal(err)
		}
		deleted, err := e.store.Prune(ctx, e.now.Add(-policy.KeepFor))
		if err != nil || deleted == 0 {
			t.Fatalf("prune deleted %d, %v", deleted, err)
		}
		after, err := e.svc.UsageReport(ctx, "u", "p")
		if err != nil || *after.Windows[policy.Day].Tokens != *before.Windows[policy.Day].Tokens || after.CallsInFlight != before.CallsInFlight {
			t.Fatalf("before %+v, after %+v (%v)", before.Windows[policy.Day].Tokens, after.Windows[policy.Day].Tokens, err)
		}
		// New rows continue the totals: a late finish of 15 for a call that
		// expired with 10 reserved adds 5.
		if _, err := e.finish(expired.CallID, i64(15)); err != nil {
			t.Fatal(err)
		}
		d := e.check("u", "p", 1)
		if want := before.Windows[policy.Day].Tokens.Used + 5 + 1; d.Windows[policy.Day].Tokens.Used != want {
			t.Fatalf("day used %d, want %d", d.Windows[policy.Day].Tokens.Used, want)
		}
	})
}

// TestPruneAndForgetFindFinishedCalls: the cleanup deletes the calls of
// every user finished by its cutoff, more than one step of it deletes, and
// those that expired by then, and keeps the later ones; Forget deletes a
// user's finished calls too, and no one else's.
func TestPruneAndForgetFindFinishedCalls(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		e := newMeteredEnv(t, bk, policy.Tier{Name: "p", Limits: policy.LimitSet{policy.RequestsPerMinute: i64(1 << 20), policy.RequestsPerHour: i64(1 << 20), policy.RequestsPerDay: i64(1 << 20), policy.TokensPerDay: i64(1 << 30)}})
		ctx := context.Background()
		users := []string{"a", "b", "c"}
		var old []string
		for i := range 350 { // 1,050 calls, more than a step deletes
			e.now = t0.Add(time.Duration(i) * time.Second)
			for _, u := range users {
				d := e.check(u, "p", 1)
				if _, err := e.finish(d.CallID, i64(1)); err != nil {
					t.Fatal(err)
				}
				old = append(old, d.CallID)
			}
		}
		e.now = t0.Add(time.Hour)
		expired := e.check("b", "p", 1).CallID // expires 10 minutes later, unfinished
		e.now = t0.Add(3 * time.Hour)
		recent := map[string]string{}
		for _, u := range users {
			d := e.check(u, "p", 1)
			if _, err := e.finish(d.CallID, i64(1)); err != nil {
				t.Fatal(err)
			}
			recent[u] = d.CallID
		}
		if _, err := e.store.Prune(ctx, t0.Add(2*time.Hour)); err != nil {
			t.Fatal(err)
		}
		for _, id := range append(old, expired) {
			if c, err := e.finish(id, i64(1)); policy.ErrorCode(err) != policy.ENOTFOUND {
				t.Fatalf("call %s after the cleanup: %+v %v", id, c, err)
			}
		}
		// A finished call's finish, repeated, answers the call.
		for u, id := range recent {
			if c, err := e.finish(id, i64(1)); err != nil || c.UserID != u || c.Tokens != 1 {
				t.Fatalf("%s's recent call after the cleanup: %+v %v", u, c, err)
			}
		}
		if err := e.svc.Forget(ctx, "b"); err != nil {
			t.Fatal(err)
		}
		if c, err := e.finish(recent["b"], i64(1)); policy.ErrorCode(err) != policy.ENOTFOUND {
			t.Fatalf("b's finished call after Forget: %+v %v", c, err)
		}
		if c, err := e.finish(recent["c"], i64(1)); err != nil || c.UserID != "c" {
			t.Fatalf("c's call after b's Forget: %+v %v", c, err)
		}
	})
}
