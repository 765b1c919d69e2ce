package db_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

func newUserService(s *db.Store, now *time.Time, opts ...policy.Option) *policy.Service {
	return policy.NewService(s, s, append([]policy.Option{policy.WithUsers(s), policy.WithClock(func() time.Time { return *now })}, opts...)...)
}

func ptr(v int64) *int64 { return &v }

// Records are stored, listed in user id order, survive a restart, and a
// deletion leaves nothing behind; the audit log records each change.
func TestUserRecordsCRUDAndRestart(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		path := bk.newDSN(t)
		ctx := policy.WithChangeSource(context.Background(), policy.SourceAPI)
		now := t0
		s := openStore(t, path)
		svc := newUserService(s, &now)
		rec := policy.UserRecord{UserID: "alice", Tier: "pro", Note: "trial",
			Limits: policy.Overrides{policy.RequestsPerMinute: policy.To(3), policy.TokensPerDay: policy.Unlimited, policy.MaxConcurrent: policy.To(2)}}
		got, created, err := svc.PutUser(ctx, rec)
		if err != nil || !created {
			t.Fatalf("PutUser = %v, %v, want created", created, err)
		}
		if _, created, err := svc.PutUser(ctx, policy.UserRecord{UserID: "bob"}); err != nil || !created {
			t.Fatalf("PutUser bob = %v, %v", created, err)
		}
		if _, created, err := svc.PutUser(ctx, rec); err != nil || created {
			t.Fatalf("PutUser again = %v, %v, want replaced", created, err)
		}
		s.Close()

		s = openStore(t, path)
		svc = newUserService(s, &now)
		stored, err := svc.User(ctx, "alice")
		if err != nil {
			t.Fatal(err)
		}
		if !policy.SameRecord(&stored, &got) || !stored.UpdatedAt.Equal(got.UpdatedAt) {
			t.Fatalf("after a restart: %+v, want %+v", stored, got)
		}
		if c, ok := s.CachedUser("alice"); !ok || !policy.SameRecord(&c, &got) {
			t.Fatalf("cache after a restart: %+v, %v", c, ok)
		}
		list, err := svc.Users(ctx, "", 10)
		if err != nil || len(list) != 2 || list[0].UserID != "alice" || list[1].UserID != "bob" {
			t.Fatalf("Users = %+v, %v", list, err)
		}
		if list, _ := svc.Users(ctx, "alice", 10); len(list) != 1 || list[0].UserID != "bob" {
			t.Fatalf("Users after alice = %+v", list)
		}
		if err := svc.DeleteUser(ctx, "alice"); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.User(ctx, "alice"); policy.ErrorCode(err) != policy.ENOTFOUND {
			t.Fatalf("User after delete: %v, want not found", err)
		}
		if err := svc.DeleteUser(ctx, "alice"); policy.ErrorCode(err) != policy.ENOTFOUND {
			t.Fatalf("second delete: %v, want not found", err)
		}
		changes, err := svc.UserChanges(ctx, "alice", 10)
		if err != nil || len(changes) != 3 {
			t.Fatalf("UserChanges = %d, %v, want 3", len(changes), err)
		}
		if c := changes[0]; c.New != nil || c.Old == nil || c.Source != policy.SourceAPI || !c.Old.Limits.Equal(&rec.Limits) {
			t.Fatalf("newest change %+v, want the deletion with the old limits", c)
		}
		if c := changes[2]; c.Old != nil || c.New == nil || c.New.Tier != "pro" || !c.New.Limits.Equal(&rec.Limits) {
			t.Fatalf("oldest change %+v, want the creation", c)
		}
	})
}

// An unknown tier is refused and changes nothing; a tier with users cannot
// be deleted or pruned, and the message says how many.
func TestUserRecordTierRules(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		now := t0
		s := openStore(t, bk.newDSN(t))
		svc := newUserService(s, &now)
		if _, _, err := svc.PutUser(ctx, policy.UserRecord{UserID: "a", Tier: "gold"}); policy.ErrorCode(err) != policy.EINVALID || !strings.Contains(err.Error(), `unknown tier "gold"`) {
			t.Fatalf("unknown tier: %v", err)
		}
		if _, err := svc.User(ctx, "a"); policy.ErrorCode(err) != policy.ENOTFOUND {
			t.Fatalf("after a refused put: %v", err)
		}
		for _, u := range []string{"a", "b", "c"} {
			if _, _, err := svc.PutUser(ctx, policy.UserRecord{UserID: u, Tier: "pro"}); err != nil {
				t.Fatal(err)
			}
		}
		err := svc.DeleteTier(ctx, "pro")
		if policy.ErrorCode(err) != policy.ECONFLICT || !strings.Contains(err.Error(), `tier "pro" is assigned to 3 users`) {
			t.Fatalf("DeleteTier: %v", err)
		}
		tiers, _ := svc.Tiers(ctx)
		var keep []policy.Tier
		for _, tr := range tiers {
			if tr.Name != "pro" {
				keep = append(keep, tr)
			}
		}
		if _, err := svc.ImportTiers(ctx, keep, true); policy.ErrorCode(err) != policy.ECONFLICT {
			t.Fatalf("prune of an assigned tier: %v", err)
		}
		if _, err := svc.Tier(ctx, "pro"); err != nil {
			t.Fatalf("pro after the refusals: %v", err)
		}
		for _, u := range []string{"a", "b", "c"} {
			if err := svc.DeleteUser(ctx, u); err != nil {
				t.Fatal(err)
			}
		}
		if err := svc.DeleteTier(ctx, "pro"); err != nil {
			t.Fatalf("DeleteTier without users: %v", err)
		}
	})
}

// An assignment written by another Store on the same file (another process)
// applies to this store's very next check, recorded or dry, and so does
// its removal.
func TestUserWriteByAnotherStoreAppliesToTheNextCheck(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		path := bk.newDSN(t)
		ctx := context.Background()
		now := t0
		running := openStore(t, path)
		svc := newUserService(running, &now)
		other := openStore(t, path)
		otherSvc := newUserService(other, &now)

		check := func(dry bool) policy.Decision {
			t.Helper()
			now = now.Add(time.Second)
			d, err := svc.Check(ctx, policy.Request{UserID: "u", Tier: "free", Feature: "search"}, dry)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		if d := check(false); d.Tier != "free" || d.Allowed() {
			t.Fatalf("before: %+v, want free refusing search", d)
		}
		if _, _, err := otherSvc.PutUser(ctx, policy.UserRecord{UserID: "u", Tier: "pro", Limits: policy.Overrides{policy.RequestsPerMinute: policy.To(1), policy.BurstAllowance: policy.To(0)}}); err != nil {
			t.Fatal(err)
		}
		// The recording check first: it takes the record from memory, which
		// still says none, and only the writer's confirmation can catch it.
		if d := check(false); d.Tier != "pro" || !d.Allowed() || d.Windows[policy.Minute].Limit != 1 {
			t.Fatalf("right after the assignment: %+v, want pro with the override", d)
		}
		if d := check(true); d.Allowed() || d.Reason != "per-minute limit exceeded" {
			t.Fatalf("second check: %+v, want the override of 1/min to refuse", d)
		}
		if err := otherSvc.DeleteUser(ctx, "u"); err != nil {
			t.Fatal(err)
		}
		if d := check(false); d.Tier != "free" {
			t.Fatalf("after the removal: %+v, want free again", d)
		}
		// A change made here reaches the other store's next check too.
		if _, _, err := svc.PutUser(ctx, policy.UserRecord{UserID: "u", Tier: "enterprise"}); err != nil {
			t.Fatal(err)
		}
		d, err := otherSvc.Check(ctx, policy.Request{UserID: "u", Tier: "free"}, false)
		if err != nil || d.Tier != "enterprise" {
			t.Fatalf("other store's next check: %+v, %v", d, err)
		}
	})
}

// Forget deletes a user's requests, never their record.
func TestForgetKeepsTheRecord(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		now := t0
		s := openStore(t, bk.newDSN(t))
		svc := newUserService(s, &now)
		if _, _, err := svc.PutUser(ctx, policy.UserRecord{UserID: "u", Tier: "pro"}); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Check(ctx, policy.Request{UserID: "u"}, false); err != nil {
			t.Fatal(err)
		}
		if err := svc.Forget(ctx, "u"); err != nil {
			t.Fatal(err)
		}
		if r, err := svc.User(ctx, "u"); err != nil || r.Tier != "pro" {
			t.Fatalf("after Forget: %+v, %v", r, err)
		}
	})
}
