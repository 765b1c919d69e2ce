package db_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

// putTeam stores the tier team: 10 requests a minute per user, an account
// on it pooling 3 a minute.
func putTeam(t *testing.T, svc *policy.Service) {
	t.Helper()
	team := policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(10)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(1000))}, Features: []string{"*"}, Account: &policy.LimitSet{}}
	team.Account.Set(&policy.LimitFields[0], ptr(3))
	if _, _, err := svc.PutTier(context.Background(), team); err != nil {
		t.Fatal(err)
	}
}

// Accounts are stored, listed in id order and survive a restart; an
// account's tier must exist; one with members cannot be deleted; a record
// naming an unknown account is refused.
func TestAccountsCRUDAndRestart(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		path := bk.newDSN(t)
		now := t0
		s := openStore(t, path)
		svc := newUserService(s, &now)
		putTeam(t, svc)
		if _, _, err := svc.PutAccount(ctx, policy.Account{AccountID: "x", Tier: "gold"}); policy.ErrorCode(err) != policy.EINVALID {
			t.Fatalf("account on an unknown tier: %v, want EINVALID", err)
		}
		a := policy.Account{AccountID: "acme", Tier: "team", Note: "Acme", Limits: policy.Overrides{4: policy.To(500), 7: policy.Unlimited}}
		if _, created, err := svc.PutAccount(ctx, a); err != nil || !created {
			t.Fatalf("create: %v, created %v", err, created)
		}
		if _, created, err := svc.PutAccount(ctx, policy.Account{AccountID: "beta", Tier: "free"}); err != nil || !created {
			t.Fatalf("create beta: %v, created %v", err, created)
		}
		if _, created, err := svc.PutAccount(ctx, a); err != nil || created {
			t.Fatalf("replace: %v, created %v", err, created)
		}
		if _, _, err := svc.PutUser(ctx, policy.UserRecord{UserID: "ana", Account: "nope"}); policy.ErrorCode(err) != policy.EINVALID {
			t.Fatalf("record naming an unknown account: %v, want EINVALID", err)
		}
		for _, u := range []string{"ana", "ben"} {
			if _, _, err := svc.PutUser(ctx, policy.UserRecord{UserID: u, Account: "acme"}); err != nil {
				t.Fatal(err)
			}
		}
		err := svc.DeleteAccount(ctx, "acme")
		if policy.ErrorCode(err) != policy.ECONFLICT || policy.ErrorMessage(err) != `account "acme" has 2 members; move them to another account or remove it from their records first` {
			t.Fatalf("delete with members: %v", err)
		}
		if err := svc.DeleteTier(ctx, "team"); policy.ErrorCode(err) != policy.ECONFLICT {
			t.Fatalf("delete the plan of an account: %v, want ECONFLICT", err)
		}
		s.Close()

		s = openStore(t, path)
		svc = newUserService(s, &now)
		got, err := svc.Accounts(ctx, "", 10)
		if err != nil || len(got) != 2 || got[0].AccountID != "acme" || got[1].AccountID != "beta" {
			t.Fatalf("after a restart: %+v, %v", got, err)
		}
		if g := got[0]; g.Tier != "team" || g.Note != "Acme" || !g.Limits.Equal(&a.Limits) {
			t.Fatalf("acme after a restart: %+v, want %+v", g, a)
		}
		members, err := svc.Members(ctx, "acme", "", 10)
		if err != nil || len(members) != 2 || members[0].UserID != "ana" || members[1].Account != "acme" {
			t.Fatalf("members: %+v, %v", members, err)
		}
		if err := svc.DeleteAccount(ctx, "beta"); err != nil {
			t.Fatal(err)
		}
		if err := svc.DeleteAccount(ctx, "beta"); policy.ErrorCode(err) != policy.ENOTFOUND {
			t.Fatalf("delete again: %v, want ENOTFOUND", err)
		}
	})
}

// A member's checks draw on the pool with every other member's: the pool
// refuses while each member's own limit has room, and nothing is
// recorded for a refused check, in the pool or the user's history.
func TestPooledLimitCountsEveryMember(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		now := t0
		s := openStore(t, bk.newDSN(t))
		svc := newUserService(s, &now)
		putTeam(t, svc)
		if _, _, err := svc.PutAccount(ctx, policy.Account{AccountID: "acme", Tier: "team"}); err != nil {
			t.Fatal(err)
		}
		var got []string
		for i, u := range []string{"ana", "ben", "ana", "cy"} {
			now = now.Add(time.Second)
			d, err := svc.Check(ctx, policy.Request{UserID: u, Account: "acme"}, false)
			if err != nil {
				t.Fatal(err)
			}
			if d.Account == nil || d.Account.ID != "acme" {
				t.Fatalf("check %d: no account state: %+v", i, d)
			}
			got = append(got, d.Reason)
		}
		want := []string{"", "", "", "account per-minute limit exceeded"}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("reasons %q, want %q", got, want)
			}
		}
		u, err := svc.AccountUsage(ctx, "acme")
		if err != nil || u.Windows[policy.Minute].Count != 3 {
			t.Fatalf("pool: %+v, %v; want 3 in the minute", u.Windows, err)
		}
		cy, err := svc.Usage(ctx, "cy", "")
		if err != nil || cy[policy.Day].Count != 0 {
			t.Fatalf("cy, refused by the pool: %+v, %v; want nothing recorded", cy, err)
		}
		// A member's own limit refuses while the pool has room.
		if _, _, err := svc.PutUser(ctx, policy.UserRecord{UserID: "dee", Account: "acme", Limits: policy.Overrides{policy.RequestsPerMinute: policy.To(0)}}); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Minute)
		d, err := svc.Check(ctx, policy.Request{UserID: "dee"}, false)
		if err != nil || d.Reason != "per-minute limit exceeded" || d.Account.Windows[policy.Minute].Remaining != 3 {
			t.Fatalf("dee over her own limit: %+v, %v", d, err)
		}
	})
}

// An account changed by another process applies to the next check of a
// member here, although this store keeps the old one in memory: the
// writer confirms it.
func TestAccountWriteByAnotherStoreAppliesToTheNextCheck(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		path := bk.newDSN(t)
		now := t0
		running := openStore(t, path)
		svc := newUserService(running, &now)
		putTeam(t, svc)
		if _, _, err := svc.PutAccount(ctx, policy.Account{AccountID: "acme", Tier: "team"}); err != nil {
			t.Fatal(err)
		}
		check := func() policy.Decision {
			t.Helper()
			now = now.Add(time.Second)
			d, err := svc.Check(ctx, policy.Request{UserID: "ana", Account: "acme"}, false)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		if d := check(); !d.Allowed() || d.Account.Windows[policy.Minute].Limit != 3 {
			t.Fatalf("before: %+v", d)
		}
		other := openStore(t, path)
		otherSvc := newUserService(other, &now)
		if _, _, err := otherSvc.PutAccount(ctx, policy.Account{AccountID: "acme", Tier: "team", Limits: policy.Overrides{0: policy.To(1)}}); err != nil {
			t.Fatal(err)
		}
		if d := check(); d.Allowed() || d.Reason != "account per-minute limit exceeded" || d.Account.Windows[policy.Minute].Limit != 1 {
			t.Fatalf("after the other store lowered the pool to 1: %+v", d)
		}
		if err := otherSvc.DeleteUser(ctx, "ana"); policy.ErrorCode(err) != policy.ENOTFOUND {
			t.Fatal(err)
		}
		if _, _, err := otherSvc.PutAccount(ctx, policy.Account{AccountID: "acme", Tier: "free"}); err != nil {
			t.Fatal(err)
		}
		if d := check(); d.Tier != "free" {
			t.Fatalf("after the other store moved acme to free: %+v, want free", d)
		}
	})
}

// A member whose record assigns a tier of its own draws on its account's
// plan, another tier: a change of that plan's pooled limits by another
// process applies to the member's next check here, although this store
// keeps the old plan in memory: the admission confirms it.
func TestAccountPlanChangedElsewhereAppliesToTheNextCheck(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		path := bk.newDSN(t)
		now := t0
		running := openStore(t, path)
		svc := newUserService(running, &now)
		putTeam(t, svc)
		if _, _, err := svc.PutAccount(ctx, policy.Account{AccountID: "acme", Tier: "team"}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := svc.PutUser(ctx, policy.UserRecord{UserID: "ana", Tier: "pro", Account: "acme"}); err != nil {
			t.Fatal(err)
		}
		check := func() policy.Decision {
			t.Helper()
			now = now.Add(time.Second)
			d, err := svc.Check(ctx, policy.Request{UserID: "ana"}, false)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		if d := check(); !d.Allowed() || d.Tier != "pro" || d.Account.Windows[policy.Minute].Limit != 3 {
			t.Fatalf("before: %+v", d)
		}
		otherSvc := newUserService(openStore(t, path), &now)
		team, err := otherSvc.Tier(ctx, "team")
		if err != nil {
			t.Fatal(err)
		}
		team.Account.Set(&policy.LimitFields[0], ptr(1))
		if _, _, err := otherSvc.PutTier(ctx, team); err != nil {
			t.Fatal(err)
		}
		if d := check(); d.Allowed() || d.Reason != "account per-minute limit exceeded" || d.Account.Windows[policy.Minute].Limit != 1 {
			t.Fatalf("after the other store lowered team's pool to 1: %+v", d)
		}
	})
}

// BenchmarkMemberCheck is BenchmarkCheck's 10,000 users from 64
// goroutines, in no account and as members of 100 accounts (named by the
// check, as context.account_id does) whose pooled limits no check
// reaches: what the pool adds to a check.
func BenchmarkMemberCheck(b *testing.B) {
	ctx := context.Background()
	for _, accounts := range []int{0, 100} {
		f := newCheckFixture(b, 10_000, 10)
		f.svc = policy.NewService(f.store, f.store, policy.WithAccounts(f.store))
		if accounts > 0 {
			pooled := benchTier
			pooled.Account = &policy.LimitSet{}
			pooled.Account.Set(&policy.LimitFields[0], ptr(policy.MaxLimit))
			if _, err := f.store.UpdateTiers(ctx, policy.TierUpdate{Put: []policy.Tier{pooled}}); err != nil {
				b.Fatal(err)
			}
			for i := range accounts {
				if _, _, err := f.svc.PutAccount(ctx, policy.Account{AccountID: fmt.Sprintf("acct-%03d", i), Tier: pooled.Name}); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.Run(fmt.Sprintf("accounts=%d/parallel", accounts), func(b *testing.B) {
			var next atomic.Int64
			b.SetParallelism(max(64/runtime.GOMAXPROCS(0), 1))
			defer reportCPU(b, dbtest.CPUTime())
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := int(next.Add(1))
					r := f.request(i)
					if accounts > 0 {
						r.Account = fmt.Sprintf("acct-%03d", i%accounts)
					}
					if d, err := f.svc.Check(ctx, r, false); err != nil || !d.Allowed() || (accounts > 0) != (d.Account != nil) {
						b.Errorf("check: %+v %v", d, err)
						return
					}
				}
			})
		})
	}
}
