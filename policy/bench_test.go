package policy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// benchHistories are the day-window sizes the benchmarks compare.
var benchHistories = []int{0, 10, 10_000, 100_000}

// steadyHistory returns history requests one day/history apart, ending just
// before start, and the step: a check every step keeps the day window at
// history requests, so a benchmark measures one size however long it runs.
// For an empty history the step is longer than a day: every check finds
// the window empty.
func steadyHistory(history int, start time.Time) (memHistory, time.Duration) {
	step := 25 * time.Hour
	if history > 0 {
		step = 24 * time.Hour / time.Duration(history)
	}
	h := make(memHistory, 0, history)
	for i := history - 1; i >= 0; i-- {
		h = append(h, start.Add(-time.Duration(i)*step))
	}
	return h, step
}

// BenchmarkEvaluate measures the rolling-window decision alone over a
// history that answers by binary search, as the store answers by index
// seeks: the cost must not grow with the window.
func BenchmarkEvaluate(b *testing.B) {
	tier := limits(policy.MaxLimit, policy.MaxLimit, policy.MaxLimit, 0)
	for _, history := range benchHistories {
		b.Run(fmt.Sprintf("history=%d", history), func(b *testing.B) {
			h, step := steadyHistory(history, t0)
			now := t0
			for b.Loop() {
				now = now.Add(step)
				ev, err := policy.Evaluate(h, tier, now)
				if err != nil || !ev.Allowed {
					b.Fatalf("evaluate: %+v %v", ev, err)
				}
				h = append(h, ev.RecordAt)
			}
		})
	}
}

// scanLimiter is the naive rolling-window limiter: a list of timestamps per
// user in memory, trimmed to the day and counted by scanning on every
// check. It keeps nothing on disk. It is the reference the README's
// Performance section compares against, not part of the service. It is
// kinder than the usual version: integer timestamps and trimming in place
// instead of a new list per call.
type scanLimiter struct {
	requests map[string][]int64 // unix nanoseconds
}

func (l *scanLimiter) check(user string, t *policy.Tier, now time.Time) bool {
	const minute, hour, day = int64(time.Minute), int64(time.Hour), int64(24 * time.Hour)
	at := now.UnixNano()
	kept := l.requests[user][:0]
	for _, ts := range l.requests[user] {
		if at-ts < day {
			kept = append(kept, ts)
		}
	}
	var inMinute, inHour int64
	for _, ts := range kept {
		if at-ts < minute {
			inMinute++
		}
	}
	for _, ts := range kept {
		if at-ts < hour {
			inHour++
		}
	}
	l.requests[user] = kept
	if inMinute >= t.Ceiling(policy.Minute) || inHour >= t.Ceiling(policy.Hour) || int64(len(kept)) >= t.Ceiling(policy.Day) {
		return false
	}
	l.requests[user] = append(kept, at)
	return true
}

func unixNanos(h memHistory) []int64 {
	out := make([]int64, len(h))
	for i, t := range h {
		out[i] = t.UnixNano()
	}
	return out
}

// BenchmarkScanningLimiter measures the naive scan at the same
// history sizes as BenchmarkEvaluate: its cost grows with the window.
func BenchmarkScanningLimiter(b *testing.B) {
	tier := limits(policy.MaxLimit, policy.MaxLimit, policy.MaxLimit, 0)
	for _, history := range benchHistories {
		b.Run(fmt.Sprintf("history=%d", history), func(b *testing.B) {
			h, step := steadyHistory(history, t0)
			l := &scanLimiter{requests: map[string][]int64{"u": unixNanos(h)}}
			now := t0
			for b.Loop() {
				now = now.Add(step)
				if !l.check("u", tier, now) {
					b.Fatal("refused")
				}
			}
			if got := len(l.requests["u"]); history > 0 && (got < history-1 || got > history+1) {
				b.Fatalf("window holds %d, want about %d", got, history)
			}
		})
	}
}

func TestScanningLimiterMatchesEvaluate(t *testing.T) {
	tier := limits(3, 5, 8, 1)
	l := &scanLimiter{requests: map[string][]int64{}}
	var h memHistory
	now := t0
	for i := range 400 {
		now = now.Add(time.Duration(i%7) * 7 * time.Minute)
		ev, err := policy.Evaluate(h, tier, now)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.check("u", tier, now); got != ev.Allowed {
			t.Fatalf("step %d at %v: scanning says %v, Evaluate %v", i, now, got, ev.Allowed)
		}
		if ev.Allowed {
			h = append(h, ev.RecordAt)
		}
	}
}

// BenchmarkServiceCheck is a recording check through Service.Check on the
// in-memory store, for 1,000 rotating users on a tier that admits
// everything: what the service costs around the store.
func BenchmarkServiceCheck(b *testing.B) {
	tier := *limits(policy.MaxLimit, policy.MaxLimit, policy.MaxLimit, 0)
	tier.Name, tier.Features = "bench", []string{policy.AllFeatures}
	st := newMemStore(tier)
	clk := policy.NewTestClock(t0)
	svc := policy.NewService(st, st, policy.WithClock(clk.Now))
	users := make([]string, 1000)
	for i := range users {
		users[i] = fmt.Sprintf("user-%05d", i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		clk.Advance(time.Millisecond)
		d, err := svc.Check(ctx, policy.Request{UserID: users[i%len(users)], Tier: "bench", Feature: "summarize", Tokens: 100}, false)
		if err != nil || !d.Allowed() {
			b.Fatalf("check: %+v %v", d, err)
		}
		i++
	}
}
