package policy_test

import (
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// prefetchHistory is a memHistory that records what Prefetch announced and
// refuses any question about a cutoff it was not told of.
type prefetchHistory struct {
	memHistory
	calls   int
	cutoffs [len(policy.Windows)]time.Time
	t       *testing.T
}

func (h *prefetchHistory) Prefetch(c *[len(policy.Windows)]time.Time) error {
	h.calls++
	h.cutoffs = *c
	return nil
}

func (h *prefetchHistory) announced(t time.Time) {
	h.t.Helper()
	if h.calls == 0 {
		h.t.Fatalf("asked about %v before Prefetch", t)
	}
	for _, c := range h.cutoffs {
		if c.Equal(t) {
			return
		}
	}
	h.t.Fatalf("asked about %v, not among the prefetched %v", t, h.cutoffs)
}

func (h *prefetchHistory) CountAfter(t time.Time) (int64, error) {
	h.announced(t)
	return h.memHistory.CountAfter(t)
}

func (h *prefetchHistory) NthAfter(t time.Time, k int64) (time.Time, error) {
	h.announced(t)
	return h.memHistory.NthAfter(t, k)
}

func TestEvaluateAndUsagePrefetchEveryWindow(t *testing.T) {
	now := t0.Add(90 * time.Minute).Add(1500 * time.Nanosecond) // truncated to the microsecond
	h := &prefetchHistory{t: t, memHistory: memHistory{t0, t0.Add(80 * time.Minute), t0.Add(89 * time.Minute)}}
	want := [len(policy.Windows)]time.Time{}
	for _, w := range policy.Windows {
		want[w] = now.Truncate(policy.Resolution).Add(-w.Duration())
	}
	ev, err := policy.Evaluate(h, limits(1, 1, 10, 0), now)
	if err != nil {
		t.Fatal(err)
	}
	if h.calls != 1 || h.cutoffs != want {
		t.Fatalf("Evaluate prefetched %d times, last %v; want once %v", h.calls, h.cutoffs, want)
	}
	if ev.Allowed || ev.Blocked != policy.Hour {
		t.Fatalf("evaluation %+v, want refused by the hour", ev)
	}
	h.calls = 0
	if _, err := policy.Usage(h, limits(1, 1, 10, 0), now); err != nil {
		t.Fatal(err)
	}
	if h.calls != 1 || h.cutoffs != want {
		t.Fatalf("Usage prefetched %d times, last %v; want once %v", h.calls, h.cutoffs, want)
	}
}
