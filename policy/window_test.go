package policy_test

import (
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func limits(rpm, rph, rpd, burst int64) *policy.Tier {
	return &policy.Tier{Name: "t", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(rpm)), policy.RequestsPerHour: new(int64(rph)), policy.RequestsPerDay: new(int64(rpd)), policy.BurstAllowance: new(int64(burst))}}
}

// step is one request at t0+at and what Evaluate must answer.
type step struct {
	at      time.Duration
	allowed bool
	reason  string
	retry   int64
}

// walk feeds steps through Evaluate in order, recording admitted requests
// the way a store does, and checks each answer.
func walk(t *testing.T, tier *policy.Tier, h memHistory, steps []step) memHistory {
	t.Helper()
	for i, s := range steps {
		ev, err := policy.Evaluate(h, tier, t0.Add(s.at))
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		reason := ""
		if !ev.Allowed {
			reason = ev.Blocked.Reason()
		}
		if ev.Allowed != s.allowed || reason != s.reason || ev.RetryAfter != s.retry {
			t.Fatalf("step %d at +%v: got allowed=%v reason=%q retry=%d, want allowed=%v reason=%q retry=%d",
				i, s.at, ev.Allowed, reason, ev.RetryAfter, s.allowed, s.reason, s.retry)
		}
		if ev.Allowed {
			h = append(h, ev.RecordAt)
		}
	}
	return h
}

const ms = time.Millisecond

func TestEvaluateLessonCheck(t *testing.T) {
	// Limits 3/min with no burst: the fourth quick call is refused for a minute.
	walk(t, limits(3, 1000, 10000, 0), nil, []step{
		{0, true, "", 0},
		{1 * ms, true, "", 0},
		{2 * ms, true, "", 0},
		{3 * ms, false, "per-minute limit exceeded", 60},
	})
}

func TestEvaluateBurstWidensOnlyTheMinute(t *testing.T) {
	walk(t, limits(3, 1000, 10000, 2), nil, []step{
		{0, true, "", 0}, {1 * ms, true, "", 0}, {2 * ms, true, "", 0}, {3 * ms, true, "", 0}, {4 * ms, true, "", 0},
		{5 * ms, false, "per-minute limit exceeded", 60},
	})
	// Hour limit 4 with burst 10: the hour gets no burst.
	walk(t, limits(3, 4, 10000, 10), nil, []step{
		{0, true, "", 0}, {time.Second, true, "", 0}, {2 * time.Second, true, "", 0}, {3 * time.Second, true, "", 0},
		{4 * time.Second, false, "per-hour limit exceeded", 3596},
	})
}

func TestEvaluateWindowsRoll(t *testing.T) {
	walk(t, limits(3, 1000, 10000, 0), nil, []step{
		{0, true, "", 0},
		{10 * time.Second, true, "", 0},
		{20 * time.Second, true, "", 0},
		{30 * time.Second, false, "per-minute limit exceeded", 30}, // the first leaves at +60s
		{59*time.Second + 999*ms, false, "per-minute limit exceeded", 1},
		{60 * time.Second, true, "", 0}, // strictly after now-1m: the first no longer counts
		{61 * time.Second, false, "per-minute limit exceeded", 9},
	})
}

func TestEvaluateRetryAfterRoundsUp(t *testing.T) {
	walk(t, limits(1, 1000, 10000, 0), nil, []step{
		{0, true, "", 0},
		{500 * ms, false, "per-minute limit exceeded", 60}, // 59.5s rounds up
		{59*time.Second + 1*ms, false, "per-minute limit exceeded", 1},
	})
}

func TestEvaluateRetryAfterCoversEveryBlockingWindow(t *testing.T) {
	// Minute and hour both full: the minute names the reason, but waiting
	// for the minute alone would not admit; retry_after is the hour's.
	walk(t, limits(1, 2, 100, 0), nil, []step{
		{0, true, "", 0},
		{30 * time.Minute, true, "", 0},
		{30*time.Minute + 10*time.Second, false, "per-minute limit exceeded", 1790},
		{59*time.Minute + 59*time.Second, false, "per-hour limit exceeded", 1},
		{60 * time.Minute, true, "", 0},
	})
	// Day full, minute full too: the day's wait.
	walk(t, limits(1, 100, 1, 0), nil, []step{
		{0, true, "", 0},
		{time.Second, false, "per-minute limit exceeded", 86399},
		{2 * time.Minute, false, "per-day limit exceeded", 86280},
	})
}

func TestEvaluateLoweredLimit(t *testing.T) {
	// Five requests, then the limit drops to 2: the window must lose four
	// (n-c+1) requests before one more fits, so retry waits for the 4th.
	var h memHistory
	for i := 0; i < 5; i++ {
		h = append(h, t0.Add(time.Duration(i)*10*time.Second))
	}
	tier := limits(2, 1000, 10000, 0)
	ev, err := policy.Evaluate(h, tier, t0.Add(45*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ev.RetryAfter, int64(45); got != want { // 4th at +30s leaves at +90s
		t.Fatalf("retry_after = %d, want %d", got, want)
	}
	if ev.Windows[policy.Minute].Remaining != 0 {
		t.Fatalf("remaining = %d, want 0", ev.Windows[policy.Minute].Remaining)
	}
	ev, _ = policy.Evaluate(h, tier, t0.Add(90*time.Second-time.Microsecond))
	if ev.Allowed {
		t.Fatal("admitted before retry_after elapsed")
	}
	ev, _ = policy.Evaluate(h, tier, t0.Add(90*time.Second))
	if !ev.Allowed {
		t.Fatal("refused once retry_after elapsed")
	}
}

func TestEvaluateZeroLimitNeverAdmits(t *testing.T) {
	walk(t, limits(10, 100, 0, 0), nil, []step{
		{0, false, "per-day limit exceeded", 86400},
		{time.Hour, false, "per-day limit exceeded", 86400},
	})
}

func TestEvaluateClockStepsBackwards(t *testing.T) {
	tier := limits(2, 1000, 10000, 0)
	h := walk(t, tier, nil, []step{
		{time.Hour, true, "", 0},
		{time.Hour + time.Second, true, "", 0},
	})
	// The clock jumps back an hour. Both requests still count (they are
	// after now-1m), and the wait is measured from the recorded times.
	ev, err := policy.Evaluate(h, tier, t0)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Allowed || ev.RetryAfter != 3660 {
		t.Fatalf("got allowed=%v retry=%d, want refused with retry 3660", ev.Allowed, ev.RetryAfter)
	}
	// With room left, a request is recorded at the newest one's time, so
	// history stays ordered and nothing goes negative.
	h = h[:1]
	ev, _ = policy.Evaluate(h, tier, t0)
	if !ev.Allowed {
		t.Fatal("refused with room left")
	}
	if want := h[0]; !ev.RecordAt.Equal(want) {
		t.Fatalf("RecordAt = %v, want %v", ev.RecordAt, want)
	}
	for _, w := range ev.Windows {
		if w.Reset < 0 || w.Remaining < 0 {
			t.Fatalf("negative window state %+v", w)
		}
	}
}

func TestEvaluateWindowStates(t *testing.T) {
	tier := limits(3, 10, 100, 2)
	h := memHistory{t0, t0.Add(30 * time.Second)}
	ev, err := policy.Evaluate(h, tier, t0.Add(40*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	want := [3]policy.WindowState{
		{Count: 3, Limit: 5, Remaining: 2, Reset: 20},
		{Count: 3, Limit: 10, Remaining: 7, Reset: 3560},
		{Count: 3, Limit: 100, Remaining: 97, Reset: 86360},
	}
	if ev.Windows != want {
		t.Fatalf("windows = %+v, want %+v", ev.Windows, want)
	}
	// An empty window resets in zero seconds; after an admission into an
	// empty window it frees a full window later.
	states, _ := policy.Usage(memHistory(nil), tier, t0)
	if states[policy.Minute] != (policy.WindowState{Limit: 5, Remaining: 5}) {
		t.Fatalf("empty usage = %+v", states[policy.Minute])
	}
	ev, _ = policy.Evaluate(memHistory(nil), tier, t0)
	if got := ev.Windows[policy.Minute]; got != (policy.WindowState{Count: 1, Limit: 5, Remaining: 4, Reset: 60}) {
		t.Fatalf("first admission minute = %+v", got)
	}
	// Without a tier, Usage reports only counts.
	states, _ = policy.Usage(h, nil, t0.Add(40*time.Second))
	if states[policy.Minute] != (policy.WindowState{Count: 2}) {
		t.Fatalf("count-only usage = %+v", states[policy.Minute])
	}
}
