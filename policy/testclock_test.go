package policy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// A TestClock reads its start, in UTC and without a monotonic reading,
// until it is moved: forward by Advance, either way by Set.
func TestTestClock(t *testing.T) {
	start := time.Date(2026, 5, 4, 14, 0, 0, 0, time.FixedZone("CEST", 2*3600))
	c := policy.NewTestClock(start)
	if got := c.Now(); !got.Equal(start) || got.Location() != time.UTC {
		t.Fatalf("Now = %v, want %v in UTC", got, start)
	}
	if got, want := c.Advance(90*time.Second), start.Add(90*time.Second); !got.Equal(want) || !c.Now().Equal(want) {
		t.Fatalf("Advance(90s) = %v, Now %v; want %v", got, c.Now(), want)
	}
	back := start.Add(-3 * time.Hour)
	if got := c.Set(back); !got.Equal(back) || !c.Now().Equal(back) {
		t.Fatalf("Set(%v) = %v, Now %v", back, got, c.Now())
	}
	if got := c.Set(time.Now()); got != got.Round(0) || got.Location() != time.UTC {
		t.Errorf("Set(time.Now()) = %v, want a wall reading in UTC", got)
	}
}

func TestTestClockAdvancePanicsWhenNegative(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "use Set") {
			t.Fatalf("recovered %v", r)
		}
	}()
	policy.NewTestClock(time.Unix(0, 0)).Advance(-time.Nanosecond)
}
