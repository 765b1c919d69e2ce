package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// CallsInFlight counts every user's calls open at now, by tier: not those finished,
// nor those whose expiry has come, settled or not.
func TestCallsInFlight(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		s := openStore(t, bk.newDSN(t))
		ctx := context.Background()
		call := func(user, id string, opened time.Time) {
			t.Helper()
			err := s.Admit(ctx, user, func(policy.History) (policy.Admission, error) {
				return policy.Admission{At: opened, Record: true, Call: &policy.Call{ID: id, UserID: user, Tier: "free", Reserved: 10,
					OpenedAt: opened, ExpiresAt: opened.Add(time.Minute)}}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		call("a", "a1", t0)
		call("a", "a2", t0.Add(time.Second))
		call("b", "b1", t0.Add(2*time.Second))
		if _, err := s.FinishCall(ctx, "a2", policy.Report{}, t0.Add(3*time.Second)); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			at   time.Duration
			want int64
		}{
			{3 * time.Second, 2},                // a1, b1
			{time.Minute - time.Microsecond, 2}, // a1's last instant open
			{time.Minute, 1},                    // a1 expired, unsettled
			{time.Minute + 2*time.Second, 0},    // b1 too
		} {
			byTier, err := s.CallsInFlight(ctx, t0.Add(tc.at))
			if n := byTier["free"]; err != nil || n != tc.want || len(byTier) > 1 {
				t.Errorf("at +%v: %d (%v), want %d", tc.at, n, err, tc.want)
			}
		}
	})
}
