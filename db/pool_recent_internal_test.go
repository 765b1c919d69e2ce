package db

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// poolStore opens a store on a new file, its writer merging pool_recent
// once it holds every rows, and a service on it whose clock reads *now.
func poolStore(t *testing.T, every int, now *time.Time) (*Store, *policy.Service) {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "g.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.writer.do(ctx, func(tx *writeTx) error { tx.w.maxStaged = every; return nil }); err != nil {
		t.Fatal(err)
	}
	return s, policy.NewService(s, s, policy.WithClock(func() time.Time { return *now }), policy.WithUsers(s))
}

// putTeam puts tier team, 1,000 requests a window for each user and
// poolMinute a minute for an account's pool, and each account of accts on
// it with its member "m-" + account.
func putTeam(t *testing.T, svc *policy.Service, poolMinute int64, accts ...string) {
	t.Helper()
	ctx := context.Background()
	pool, err := policy.PoolLimitsOf(map[string]*int64{"requests_per_minute": &poolMinute})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.PutTier(ctx, policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1000)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(1000))}, Features: []string{"*"}, Account: &pool}); err != nil {
		t.Fatal(err)
	}
	for _, a := range accts {
		if _, _, err := svc.PutAccount(ctx, policy.Account{AccountID: a, Tier: "team"}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := svc.PutUser(ctx, policy.UserRecord{UserID: "m-" + a, Account: a}); err != nil {
			t.Fatal(err)
		}
	}
}

// A member's checks leave its pool's rows in pool_recent until it holds
// maxStaged of them; the commit that reaches it moves them all into
// requests, and the pool's windows count the same throughout.
func TestPoolRowsMergeInBulk(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const every = 3
	s, svc := poolStore(t, every, &now)
	putTeam(t, svc, 1000, "acme")
	key := policy.AccountKey("acme")
	rows := func(table string) (n int) {
		t.Helper()
		if err := s.db.QueryRow(`SELECT count(*) FROM `+table+` WHERE user_id = ?`, key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i := 1; i <= 2*every+1; i++ {
		d, err := svc.Check(ctx, policy.Request{UserID: "m-acme"}, false)
		if err != nil || !d.Allowed() || d.Account == nil || d.Account.Windows[policy.Minute].Count != int64(i) {
			t.Fatalf("check %d: %+v, %v; want it admitted, the pool's minute counting %d", i, d, err, i)
		}
		staged, merged := rows("pool_recent"), rows("requests")
		if want := i % every; staged != want || merged != i-want {
			t.Errorf("after check %d: %d rows in pool_recent and %d in requests, want %d and %d", i, staged, merged, want, i-want)
		}
	}
}

// The writer's copy of pool_recent (stagedRows) follows what commits: a
// pool's row staged by a transaction that rolls back leaves no trace in
// the next check's count, which would otherwise number its row after the
// one that never was.
func TestStagedPoolRowsFollowRollback(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s, svc := poolStore(t, maxStaged, &now)
	putTeam(t, svc, 1000, "acme")
	check := func(want int64) {
		t.Helper()
		d, err := svc.Check(ctx, policy.Request{UserID: "m-acme"}, false)
		if err != nil || !d.Allowed() || d.Account == nil || d.Account.Windows[policy.Minute].Count != want {
			t.Fatalf("check: %+v, %v; want it admitted, the pool's minute counting %d", d, err, want)
		}
	}
	check(1)
	key := policy.AccountKey("acme")
	failed := errors.New("a later job of the batch failed")
	err := s.writer.do(ctx, func(tx *writeTx) error {
		h := &tx.poolHist
		h.reset(tx, tx, key)
		if err := tx.record(h, &policy.Admission{At: now, Record: true}); err != nil {
			return err
		}
		if h.staged() == nil {
			t.Error("the pool's row is not staged in the writer's copy")
		}
		return failed
	})
	if !errors.Is(err, failed) {
		t.Fatalf("the failing job: %v", err)
	}
	check(2)
	var n int
	if err := s.db.QueryRow(`SELECT (SELECT count(*) FROM requests WHERE user_id = ?1) + (SELECT count(*) FROM pool_recent WHERE user_id = ?1)`, key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("the pool has %d rows stored, want 2", n)
	}
}

// A pool's staged rows answer as they would from requests: two stores
// take the same checks, one merging at every commit and one every 100
// rows, and decide alike after the pooled limit is lowered below the
// windows' counts, so that retry_after needs the k-th oldest row, in
// requests or in the writer's copy, stepped to or searched for.
func TestStagedPoolRowsAnswerAsRequests(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	_, merged := poolStore(t, 1, &now)
	_, staged := poolStore(t, 100, &now)
	svcs := []*policy.Service{merged, staged}
	for _, svc := range svcs {
		putTeam(t, svc, 1000, "acme", "beta")
	}
	check := func(user string) [2]policy.Decision {
		t.Helper()
		var ds [2]policy.Decision
		for i, svc := range svcs {
			d, err := svc.Check(ctx, policy.Request{UserID: user}, false)
			if err != nil || d.Account == nil {
				t.Fatalf("check of %s: %+v, %v", user, d, err)
			}
			ds[i] = d
		}
		return ds
	}
	// acme: 150 rows, the oldest 100 merged in the second store, 0.1 s
	// apart, and the newest 50 staged, 0.9 s apart, so that a search
	// aiming by the numbers of all 150 would probe past the last row in
	// requests; beta: 6 rows, all staged.
	for i := range 150 {
		check("m-acme")
		if i >= 144 {
			check("m-beta")
		}
		if i < 100 {
			now = now.Add(100 * time.Millisecond)
		} else {
			now = now.Add(900 * time.Millisecond)
		}
	}
	for _, c := range []struct {
		user  string
		limit int64 // the k-th oldest row is count - limit + 1
	}{
		{"m-acme", 140}, // k = 11: in requests, stepped to
		{"m-acme", 70},  // k = 81: in requests, searched for beside staged rows
		{"m-acme", 51},  // k = 100: the newest in requests, searched for
		{"m-acme", 50},  // k = 101: the oldest staged
		{"m-acme", 20},  // k = 131: staged
		{"m-beta", 2},   // k = 5: staged
	} {
		for _, svc := range svcs {
			putTeam(t, svc, c.limit)
		}
		ds := check(c.user)
		m, s := ds[0], ds[1]
		if m.Allowed() || m.RetryAfter <= 0 {
			t.Fatalf("%s under a pooled minute of %d: %+v, want a refusal", c.user, c.limit, m)
		}
		if s.Allowed() != m.Allowed() || s.Reason != m.Reason || s.RetryAfter != m.RetryAfter ||
			s.Account.Windows[policy.Minute] != m.Account.Windows[policy.Minute] {
			t.Errorf("%s under a pooled minute of %d: staged %+v (%+v), merged %+v (%+v)", c.user, c.limit,
				s, s.Account.Windows[policy.Minute], m, m.Account.Windows[policy.Minute])
		}
	}
}
