package db_test

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// TestCountsFlushWithCommits counts checks in memory and finds them stored
// after the next commit, added to (one row per minute, tier and reason),
// kept for 8 days and then deleted by Prune.
func TestCountsFlushWithCommits(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		path := bk.newDSN(t)
		s := openStore(t, path)
		for i := range 5 {
			s.CountCheck(t0.Add(time.Duration(i)*time.Second), "u", "free", policy.CountAdmitted)
		}
		s.CountCheck(t0, "u", "free", policy.CountMinute)
		s.CountCheck(t0.Add(time.Minute), "u", "free", policy.CountFeature)
		// An admission commits, and with it the counts.
		admit(t, s, "u", t0)
		s.CountCheck(t0, "v", "pro", policy.CountShadowPrefix+"minute")
		s.CountCheck(t0, "u", "free", policy.CountAdmitted)
		if err := s.FlushCounts(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := s.Stats(ctx, t0.Add(-time.Hour), t0.Add(time.Hour), time.Minute, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 {
			t.Fatalf("got %d buckets %+v, want 3", len(got), got)
		}
		if b := got[0]; b.Tier != "free" || !b.Start.Equal(t0) || b.Admitted != 6 || b.Refused != 1 || b.RefusedBy[policy.CountMinute] != 1 {
			t.Errorf("free at t0: %+v", b)
		}
		if b := got[1]; b.Tier != "free" || !b.Start.Equal(t0.Add(time.Minute)) || b.Refused != 1 || b.RefusedBy[policy.CountFeature] != 1 {
			t.Errorf("free at t0+1m: %+v", b)
		}
		if b := got[2]; b.Tier != "pro" || b.Refused != 0 || b.Shadow["minute"] != 1 {
			t.Errorf("pro at t0: %+v", b)
		}
		// Per hour, from one row per key.
		hourly, err := s.Stats(ctx, t0, t0.Add(time.Hour), time.Hour, "free")
		if err != nil {
			t.Fatal(err)
		}
		if len(hourly) != 1 || hourly[0].Admitted != 6 || hourly[0].Refused != 2 {
			t.Errorf("free per hour: %+v", hourly)
		}
		// Close flushes what is pending; a new store finds it.
		s.CountCheck(t0, "u", "free", policy.CountHour)
		s.Close()
		s = openStore(t, path)
		got, err = s.Stats(ctx, t0, t0.Add(time.Minute), time.Minute, "free")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].RefusedBy[policy.CountHour] != 1 {
			t.Errorf("after a restart: %+v", got)
		}
		// Kept 8 days.
		if _, err := s.Prune(ctx, t0.Add(policy.StatsKeepFor-policy.KeepFor)); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Stats(ctx, t0, t0.Add(2*time.Minute), time.Minute, ""); len(got) != 3 {
			t.Errorf("8 days on: %d buckets, want 3", len(got))
		}
		if _, err := s.Prune(ctx, t0.Add(policy.StatsKeepFor-policy.KeepFor+time.Minute+time.Second)); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Stats(ctx, t0, t0.Add(2*time.Minute), time.Minute, ""); len(got) != 1 || !got[0].Start.Equal(t0.Add(time.Minute)) {
			t.Errorf("8 days and a minute on: %+v, want the second minute alone", got)
		}
	})
}

// TestTopUsersAndUserRequests counts from the requests table.
func TestTopUsersAndUserRequests(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		s := openStore(t, bk.newDSN(t))
		for i := range 30 {
			at := t0.Add(time.Duration(i) * time.Minute)
			admit(t, s, "heavy", at)
			if i%2 == 0 {
				admit(t, s, "medium", at)
			}
			if i < 5 {
				admit(t, s, "early", at)
			}
		}
		lists, err := s.TopUsers(ctx, []time.Time{t0.Add(10 * time.Minute), t0.Add(-time.Minute)}, 10)
		if err != nil {
			t.Fatal(err)
		}
		top := lists[0]
		if all := lists[1]; len(all) != 3 || all[0] != (policy.UserRequests{UserID: "heavy", Requests: 30}) || all[2] != (policy.UserRequests{UserID: "early", Requests: 5}) {
			t.Errorf("top since the start: %+v", all)
		}
		want := []policy.UserRequests{{UserID: "heavy", Requests: 19}, {UserID: "medium", Requests: 9}}
		if len(top) != len(want) {
			t.Fatalf("top %+v, want %+v", top, want)
		}
		for i := range want {
			if top[i] != want[i] {
				t.Errorf("top[%d] = %+v, want %+v", i, top[i], want[i])
			}
		}
		if lists, _ := s.TopUsers(ctx, []time.Time{t0.Add(-time.Minute)}, 1); len(lists) != 1 || len(lists[0]) != 1 || lists[0][0].UserID != "heavy" || lists[0][0].Requests != 30 {
			t.Errorf("top 1 = %+v", lists)
		}
		buckets, err := s.UserRequests(ctx, "medium", t0, t0.Add(30*time.Minute), 10*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(buckets) != 3 || buckets[0] != 5 || buckets[1] != 5 || buckets[2] != 5 {
			t.Errorf("medium per 10 minutes: %v, want [5 5 5]", buckets)
		}
	})
}

// TestSessions stores hashes, outlives a restart, and ends sessions of a
// former admin token and expired ones.
func TestSessions(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		path := bk.newDSN(t)
		s := openStore(t, path)
		id, other := sha256.Sum256([]byte("session")), sha256.Sum256([]byte("other"))
		admin, former := sha256.Sum256([]byte("admin")), sha256.Sum256([]byte("former"))
		if err := s.CreateSession(ctx, policy.AdminSession{IDHash: id, AdminHash: admin, CSRF: "c", Expires: t0.Add(time.Hour)}, t0); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateSession(ctx, policy.AdminSession{IDHash: other, AdminHash: former, CSRF: "d", Expires: t0.Add(time.Hour)}, t0); err != nil {
			t.Fatal(err)
		}
		s.Close()
		s = openStore(t, path)
		got, err := s.Session(ctx, id)
		if err != nil || got.CSRF != "c" || got.AdminHash != admin || !got.Expires.Equal(t0.Add(time.Hour)) {
			t.Fatalf("after a restart: %+v, %v", got, err)
		}
		if err := s.EndSessionsExcept(ctx, admin); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Session(ctx, other); policy.ErrorCode(err) != policy.ENOTFOUND {
			t.Errorf("session of a former token: %v, want ENOTFOUND", err)
		}
		if _, err := s.Prune(ctx, t0.Add(time.Hour-policy.KeepFor)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Session(ctx, id); policy.ErrorCode(err) != policy.ENOTFOUND {
			t.Errorf("expired session after cleanup: %v, want ENOTFOUND", err)
		}
	})
}

// LastTier names the tier of a user's newest request, whatever process
// recorded it, and nothing for a user without requests or whose newest
// request carries no tier.
func TestLastTier(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		s := openStore(t, bk.newDSN(t))
		record := func(user, tier string, at time.Time) {
			t.Helper()
			var id int64
			if tier != "" {
				tr, err := s.Tier(ctx, tier)
				if err != nil {
					t.Fatal(err)
				}
				id = tr.ID
			}
			if err := s.Admit(ctx, user, func(policy.History) (policy.Admission, error) {
				return policy.Admission{At: at, Record: true, TierID: id}, nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		record("v", "free", t0)
		record("v", "pro", t0.Add(time.Second))
		record("w", "", t0)
		for _, tc := range []struct {
			user, want string
			ok         bool
		}{
			{"v", "pro", true},
			{"w", "", false},
			{"nobody", "", false},
		} {
			if got, ok, err := s.LastTier(ctx, tc.user); err != nil || got != tc.want || ok != tc.ok {
				t.Errorf("LastTier(%s) = %q, %v, %v; want %q, %v", tc.user, got, ok, err, tc.want, tc.ok)
			}
		}
	})
}

// TestStatsCostSettled: the buckets count what the calls finished in them
// cost, each at the price it was admitted at, beside their tokens; an
// unpriced call counts its tokens and no cost.
func TestStatsCostSettled(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		s := openStore(t, bk.newDSN(t))
		clk := policy.NewTestClock(t0)
		svc := policy.NewService(s, s, policy.WithClock(clk.Now), policy.WithPrices(s))
		usd := func(v string) policy.Money {
			m, err := policy.ParseMoney(v)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		if _, err := svc.PutPrices(ctx, nil, []policy.Price{{Model: "m", Input: usd("1"), Output: usd("2"), CacheRead: usd("0.5"), CacheWrite: usd("1.25")}}); err != nil {
			t.Fatal(err)
		}
		tier := policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(100)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(10000))}}
		if _, _, err := svc.PutTier(ctx, tier); err != nil {
			t.Fatal(err)
		}
		call := func(model string, u policy.TokenUsage) {
			t.Helper()
			d, err := svc.Check(ctx, policy.Request{UserID: "ann", Tier: "team", Model: model, Tokens: u.Total(), OpenCall: true}, false)
			if err != nil || d.CallID == "" {
				t.Fatalf("check: %v, call %q", err, d.CallID)
			}
			if _, err := svc.FinishCall(ctx, d.CallID, policy.Report{Usage: &u}); err != nil {
				t.Fatal(err)
			}
		}
		// $0.002 and $0.0055, by hand: dollars per million tokens.
		call("m", policy.TokenUsage{Input: 1000, Output: 500})
		call("unpriced", policy.TokenUsage{Input: 300})
		clk.Advance(time.Hour)
		call("m", policy.TokenUsage{Input: 4000, CacheRead: 2000, Output: 250})
		buckets, err := s.Stats(ctx, t0.Add(-time.Hour), t0.Add(2*time.Hour), time.Hour, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(buckets) != 2 || buckets[0].CostSettled != usd("0.002") || buckets[0].TokensSettled != 1800 ||
			buckets[1].CostSettled != usd("0.0055") || buckets[1].TokensSettled != 6250 {
			t.Errorf("buckets %+v, want $0.002 and 1,800 tokens, then $0.0055 and 6,250", buckets)
		}
	})
}
