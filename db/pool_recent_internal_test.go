package db

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// A member's checks leave its pool's rows in pool_recent until it holds
// maxStaged of them; the commit that reaches it moves them all into
// requests, and the pool's windows count the same throughout.
func TestPoolRowsMergeInBulk(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "g.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	svc := policy.NewService(s, s, policy.WithClock(func() time.Time { return now }), policy.WithUsers(s))
	minute := int64(1000)
	pool, err := policy.PoolLimitsOf(map[string]*int64{"requests_per_minute": &minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.PutTier(ctx, policy.Tier{Name: "team", RequestsPerMinute: 100, RequestsPerHour: 100, RequestsPerDay: 100,
		Features: []string{"*"}, Account: &pool}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.PutAccount(ctx, policy.Account{AccountID: "acme", Tier: "team"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.PutUser(ctx, policy.UserRecord{UserID: "m", Account: "acme"}); err != nil {
		t.Fatal(err)
	}
	const every = 3
	if err := s.writer.do(ctx, func(tx *writeTx) error { tx.w.maxStaged = every; return nil }); err != nil {
		t.Fatal(err)
	}
	key := policy.AccountKey("acme")
	rows := func(table string) (n int) {
		t.Helper()
		if err := s.db.QueryRow(`SELECT count(*) FROM `+table+` WHERE user_id = ?`, key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i := 1; i <= 2*every+1; i++ {
		d, err := svc.Check(ctx, policy.Request{UserID: "m"}, false)
		if err != nil || !d.Allowed() || d.Account == nil || d.Account.Windows[policy.Minute].Count != int64(i) {
			t.Fatalf("check %d: %+v, %v; want it admitted, the pool's minute counting %d", i, d, err, i)
		}
		staged, merged := rows("pool_recent"), rows("requests")
		if want := i % every; staged != want || merged != i-want {
			t.Errorf("after check %d: %d rows in pool_recent and %d in requests, want %d and %d", i, staged, merged, want, i-want)
		}
	}
}
