package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// TestClockStepsHoursEitherWay walks a wall clock that jumps hours back and
// forth, one check per step, on the real store. Every answer is spelled out:
// retry_after is never negative, every recorded request stays counted, and
// no window admits past its ceiling.
func TestClockStepsHoursEitherWay(t *testing.T) {
	s := openStore(t, "")
	ctx := context.Background()
	if _, err := s.UpdateTiers(ctx, policy.TierUpdate{Put: []policy.Tier{{Name: "clock", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(3)), policy.RequestsPerHour: new(int64(5)), policy.RequestsPerDay: new(int64(8))}}}}); err != nil {
		t.Fatal(err)
	}
	now := t0
	svc := policy.NewService(s, s, policy.WithClock(func() time.Time { return now }))

	const (
		minute = "per-minute limit exceeded"
		hour   = "per-hour limit exceeded"
	)
	for i, st := range []struct {
		step    time.Duration
		allowed bool
		reason  string
		retry   int64
		counts  [3]int64 // minute, hour, day after the check
	}{
		{0, true, "", 0, [3]int64{1, 1, 1}},                                    // r1 at t0
		{time.Second, true, "", 0, [3]int64{2, 2, 2}},                          // r2
		{time.Second, true, "", 0, [3]int64{3, 3, 3}},                          // r3 at t0+2s
		{0, false, minute, 58, [3]int64{3, 3, 3}},                              // r1 leaves the minute at t0+60s
		{-3 * time.Hour, false, minute, 3*3600 + 58, [3]int64{3, 3, 3}},        // back 3h: all three still count
		{5 * time.Hour, true, "", 0, [3]int64{1, 1, 4}},                        // r4 at t0+2h+2s
		{time.Microsecond, true, "", 0, [3]int64{2, 2, 5}},                     // r5
		{0, true, "", 0, [3]int64{3, 3, 6}},                                    // same instant: r6 one microsecond after r5
		{0, false, minute, 60, [3]int64{3, 3, 6}},                              // r4 leaves in 60s - 1µs
		{-25 * time.Hour, false, minute, 25*3600 + 60, [3]int64{6, 6, 6}},      // back 25h: six in every window
		{48 * time.Hour, true, "", 0, [3]int64{1, 1, 4}},                       // r7 at t0+25h+2s+1µs
		{time.Minute, true, "", 0, [3]int64{1, 2, 5}},                          // r7 sits exactly on the edge: not counted
		{time.Minute, true, "", 0, [3]int64{1, 3, 6}},                          //
		{time.Minute, true, "", 0, [3]int64{1, 4, 7}},                          //
		{time.Minute, true, "", 0, [3]int64{1, 5, 8}},                          // r11: hour and day full
		{time.Minute, false, hour, 55 * 60, [3]int64{0, 5, 8}},                 // both free a slot in 55m (day: 55m - 1µs)
		{-30 * time.Hour, false, minute, 31*3600 - 5*60, [3]int64{11, 11, 11}}, // back 30h: all eleven count; the hour frees one at r7+1h
	} {
		now = now.Add(st.step)
		d, err := svc.Check(ctx, policy.Request{UserID: "walker", Tier: "clock"}, false)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if d.Allowed() != st.allowed || d.Reason != st.reason || d.RetryAfter != st.retry {
			t.Fatalf("step %d (%+v): allowed=%v reason=%q retry_after=%d, want %v %q %d",
				i, st.step, d.Allowed(), d.Reason, d.RetryAfter, st.allowed, st.reason, st.retry)
		}
		states, err := svc.Usage(ctx, "walker", "")
		if err != nil {
			t.Fatal(err)
		}
		for w, want := range st.counts {
			if got := states[w].Count; got != want {
				t.Fatalf("step %d: %s window counts %d, want %d", i, policy.Window(w), got, want)
			}
		}
	}
}
