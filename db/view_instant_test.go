package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

// TestViewBeginsItsSnapshotFirst: what View shows is fixed before fn
// runs, so a write committed while fn runs is not in it, however late fn
// makes its first read.
func TestViewBeginsItsSnapshotFirst(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		s := openStore(t, bk.newDSN(t))
		now := t0
		svc := policy.NewService(s, s, policy.WithClock(func() time.Time { return now }))
		ctx := context.Background()
		if _, _, err := svc.PutTier(ctx, policy.Tier{Name: "t", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(10)), policy.RequestsPerHour: new(int64(10)), policy.RequestsPerDay: new(int64(10))}}); err != nil {
			t.Fatal(err)
		}
		check := func() {
			t.Helper()
			if d, err := svc.Check(ctx, policy.Request{UserID: "u", Tier: "t"}, false); err != nil || !d.Allowed() {
				t.Fatalf("check: %+v %v", d, err)
			}
		}
		check()
		err := s.View(ctx, "u", func(h policy.History) error {
			now = now.Add(time.Second)
			check() // committed after the view began
			n, err := h.CountAfter(t0.Add(-time.Hour))
			if err == nil && n != 1 {
				t.Errorf("the view counts %d requests, want the 1 committed before it began", n)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := count(t, s, "u", t0.Add(-time.Hour)); n != 2 {
			t.Fatalf("a later view counts %d requests, want 2", n)
		}
	})
}

// admitBeforeView is a store whose View first runs before, once: an
// admission that commits between the moment a reader chose and the one
// its view began.
type admitBeforeView struct {
	*db.Store
	before func()
}

func (s *admitBeforeView) View(ctx context.Context, user string, fn func(policy.History) error) error {
	if b := s.before; b != nil {
		s.before = nil
		b()
	}
	return s.Store.View(ctx, user, fn)
}

// TestUsageIsOfOneInstant: a usage read shows the windows at one instant,
// at or after every admission it counts. Read at an instant before the
// newest admission, it would count both that admission's reservation and
// finished tokens the admission no longer counted, over the limit no
// admission ever passed.
func TestUsageIsOfOneInstant(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		s := openStore(t, bk.newDSN(t))
		now := t0
		clock := func() time.Time { return now }
		view := &admitBeforeView{Store: s}
		reader := policy.NewService(s, view, policy.WithClock(clock))
		svc := policy.NewService(s, s, policy.WithClock(clock))
		ctx := context.Background()
		tier := policy.Tier{Name: "m", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(10)), policy.RequestsPerHour: new(int64(10)), policy.RequestsPerDay: new(int64(10)),
			policy.TokensPerHour: new(int64(100)), policy.MaxConcurrent: new(int64(5))}}
		if _, _, err := svc.PutTier(ctx, tier); err != nil {
			t.Fatal(err)
		}
		check := func() string {
			t.Helper()
			d, err := svc.Check(ctx, policy.Request{UserID: "u", Tier: "m", Tokens: 100}, false)
			if err != nil || !d.Allowed() {
				t.Fatalf("check at %v: %+v %v", now.Sub(t0), d, err)
			}
			return d.CallID
		}
		if _, err := svc.FinishCall(ctx, check(), policy.Report{Tokens: new(int64(100))}); err != nil {
			t.Fatal(err)
		}
		// A second before the finished 100 leave the hour, a reader asks;
		// before its view begins, two seconds pass and a call of 100 is
		// admitted, the finished 100 then out of its hour.
		now = t0.Add(time.Hour - time.Second)
		view.before = func() {
			now = t0.Add(time.Hour + time.Second)
			check()
		}
		u, err := reader.UsageReport(ctx, "u", "m")
		if err != nil {
			t.Fatal(err)
		}
		if got := u.Windows[policy.Hour].Tokens; got == nil || got.Used != 100 || got.Remaining != 0 {
			t.Errorf("hour tokens %+v, want the 100 reserved at the newest admission, none finished", got)
		}
	})
}
