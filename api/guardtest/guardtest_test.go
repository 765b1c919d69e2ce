package guardtest_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api/client"
	"github.com/policyguard/policyguard/api/guardtest"
)

var t0 = time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)

var trial = client.Tier{Name: "trial", Limits: client.Limits{RequestsPerMinute: client.Limit(3), RequestsPerHour: client.Limit(5), RequestsPerDay: client.Limit(8)}}

// TestClockStepsBackAsAWallClockDoes walks the guard's clock forward and
// back, one check per step, with every answer spelled out: as with a wall
// clock stepped back, recorded requests stay counted, the ones recorded
// "before" the latest land at its instant, retry_after is never negative
// and no window admits past its ceiling.
func TestClockStepsBackAsAWallClockDoes(t *testing.T) {
	g := guardtest.New(t, guardtest.WithStart(t0), guardtest.WithTiers(trial))
	pg, ctx := g.Client(), context.Background()
	const minute, hour = "per-minute limit exceeded", "per-hour limit exceeded"
	for i, st := range []struct {
		set     time.Time // when not zero, Set to it; else Advance by step
		step    time.Duration
		allowed bool
		reason  string
		retry   int64
		counts  [3]int64 // minute, hour, day after the check
	}{
		{step: 0, allowed: true, counts: [3]int64{1, 1, 1}},                                          // r1 at t0
		{step: time.Second, allowed: true, counts: [3]int64{2, 2, 2}},                                // r2
		{step: time.Second, allowed: true, counts: [3]int64{3, 3, 3}},                                // r3 at t0+2s
		{step: 0, reason: minute, retry: 58, counts: [3]int64{3, 3, 3}},                              // r1 leaves at t0+60s
		{set: t0.Add(-3 * time.Hour), reason: minute, retry: 3*3600 + 60, counts: [3]int64{3, 3, 3}}, // back 3h: all three count
		{set: t0.Add(2 * time.Hour), allowed: true, counts: [3]int64{1, 1, 4}},                       // r4 at t0+2h
		{set: t0.Add(2*time.Hour - 30*time.Second), allowed: true, counts: [3]int64{2, 2, 5}},        // back 30s: r5 lands at r4's instant
		{step: 0, allowed: true, counts: [3]int64{3, 3, 6}},                                          // r6 there too
		{step: 0, reason: minute, retry: 90, counts: [3]int64{3, 3, 6}},                              // r4 leaves at t0+2h+60s
		{set: t0.Add(2*time.Hour + 2*time.Minute), allowed: true, counts: [3]int64{1, 4, 7}},         // r7
		{step: 0, allowed: true, counts: [3]int64{2, 5, 8}},                                          // r8: hour and day full
		{step: 0, reason: hour, retry: 21*3600 + 58*60, counts: [3]int64{2, 5, 8}},                   // hour and day full: admitted once r1 leaves the day
	} {
		if !st.set.IsZero() {
			g.Clock().Set(st.set)
		} else {
			g.Clock().Advance(st.step)
		}
		d, err := pg.Check(ctx, client.CheckRequest{UserID: "walker", Tier: "trial"})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if d.Allowed != st.allowed || d.Reason != st.reason || d.RetryAfter != st.retry {
			t.Fatalf("step %d: allowed=%v reason=%q retry_after=%d, want %v %q %d",
				i, d.Allowed, d.Reason, d.RetryAfter, st.allowed, st.reason, st.retry)
		}
		u, err := pg.Usage(ctx, "walker", "")
		if err != nil {
			t.Fatal(err)
		}
		if got := [3]int64{u.Windows.Minute.Count, u.Windows.Hour.Count, u.Windows.Day.Count}; got != st.counts {
			t.Fatalf("step %d: counts %v, want %v", i, got, st.counts)
		}
	}
}

// TestRequestsAtOneInstantLeaveTogether is the first test a user writes
// with the guard: fill the minute at one instant, advance exactly a
// minute, and the minute has room for as many again. The same for a day
// of 5, advanced by 24 hours.
func TestRequestsAtOneInstantLeaveTogether(t *testing.T) {
	for _, tc := range []struct {
		tier client.Tier
		n    int
		step time.Duration
	}{
		{client.Tier{Name: "three", Limits: client.Limits{RequestsPerMinute: client.Limit(3), RequestsPerHour: client.Limit(100), RequestsPerDay: client.Limit(1000)}}, 3, time.Minute},
		{client.Tier{Name: "five", Limits: client.Limits{RequestsPerMinute: client.Limit(5), RequestsPerHour: client.Limit(5), RequestsPerDay: client.Limit(5)}}, 5, 24 * time.Hour},
	} {
		t.Run(tc.tier.Name, func(t *testing.T) {
			g := guardtest.New(t, guardtest.WithStart(t0), guardtest.WithTiers(tc.tier))
			pg, ctx := g.Client(), context.Background()
			req := client.CheckRequest{UserID: "agent", Tier: tc.tier.Name}
			for round := range 2 {
				for i := range tc.n + 1 {
					d, err := pg.Check(ctx, req)
					if err != nil {
						t.Fatal(err)
					}
					if want := i < tc.n; d.Allowed != want {
						t.Fatalf("round %d, check %d: allowed=%v %q retry_after %d, want allowed=%v", round+1, i+1, d.Allowed, d.Reason, d.RetryAfter, want)
					}
					if i == tc.n && d.RetryAfter != int64(tc.step/time.Second) {
						t.Fatalf("round %d: retry_after %d, want %d", round+1, d.RetryAfter, int64(tc.step/time.Second))
					}
				}
				g.Clock().Advance(tc.step)
			}
		})
	}
}

func TestWithTiersFileAndDefaultTier(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiers.json")
	file := `{"tiers": [{"name": "team", "requests_per_minute": 1, "requests_per_hour": 10, "requests_per_day": 100, "burst_allowance": 0, "features": ["chat"], "description": "Team"}]}`
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	g := guardtest.New(t, guardtest.WithTiersFile(path), guardtest.WithDefaultTier("team"))
	pg, ctx := g.Client(), context.Background()
	for i, want := range []bool{true, false} {
		d, err := pg.Check(ctx, client.CheckRequest{UserID: "bob", Feature: "chat"})
		if err != nil {
			t.Fatal(err)
		}
		if d.Tier != "team" || d.Allowed != want {
			t.Fatalf("check %d: tier %q allowed %v, want team %v", i, d.Tier, d.Allowed, want)
		}
	}
	tier, err := pg.Tier(ctx, "team")
	if err != nil || tier.Description != "Team" {
		t.Fatalf("team = %+v, %v", tier, err)
	}
}

func TestWithAPIToken(t *testing.T) {
	g := guardtest.New(t, guardtest.WithAPIToken("agent-token"))
	if _, err := g.Client().Check(context.Background(), client.CheckRequest{UserID: "carol"}); err != nil {
		t.Fatalf("the guard's client: %v", err)
	}
	res, err := http.Post(g.URL()+"/v1/check", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a check without the token: %d, want 401", res.StatusCode)
	}
}

// TestServesTheTestClock checks that the guard answers as a -test-clock
// service does, for code under test that is not Go.
func TestServesTheTestClock(t *testing.T) {
	g := guardtest.New(t, guardtest.WithStart(t0))
	if got, want := get(t, g.URL()+"/healthz"), `{"status":"ok","test_clock":true}`; got != want {
		t.Errorf("healthz: %s, want %s", got, want)
	}
	if got := get(t, g.URL()+"/v1/test/clock"); got != `{"message":"missing or wrong admin token"}` {
		t.Errorf("test clock without the admin token: %s", got)
	}
	g.Clock().Advance(90 * time.Second)
	if got, want := g.Clock().Now(), t0.Add(90*time.Second); !got.Equal(want) {
		t.Errorf("after Advance: %v, want %v", got, want)
	}
}

func TestNewFailsTheTestOnBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []guardtest.Option
		want string
	}{
		{"bad tier", []guardtest.Option{guardtest.WithTiers(client.Tier{Name: "x", Limits: client.Limits{RequestsPerMinute: client.Limit(-1)}})}, `tier 1 ("x"): requests_per_minute`},
		{"twice", []guardtest.Option{guardtest.WithTiers(trial, trial)}, "listed twice"},
		{"no file", []guardtest.Option{guardtest.WithTiersFile("missing.json")}, "missing.json"},
		{"no default", []guardtest.Option{guardtest.WithDefaultTier("gold")}, `default tier "gold" does not exist`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := fatalMessage(t, func(tb testing.TB) { guardtest.New(tb, tc.opts...) })
			if !strings.Contains(msg, tc.want) {
				t.Fatalf("New failed with %q, want %q", msg, tc.want)
			}
		})
	}
}

// fatalT records the message of Fatalf and stops f there, as t.Fatalf
// stops a test.
type fatalT struct {
	testing.TB
	msg string
}

type stopped struct{}

func (t *fatalT) Helper() {}
func (t *fatalT) Fatalf(format string, args ...any) {
	t.msg = fmt.Sprintf(format, args...)
	panic(stopped{})
}

func fatalMessage(t *testing.T, f func(testing.TB)) (msg string) {
	ft := &fatalT{TB: t}
	defer func() {
		if r := recover(); r != nil && r != (stopped{}) {
			panic(r)
		}
		msg = ft.msg
	}()
	f(ft)
	return ""
}

func get(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
