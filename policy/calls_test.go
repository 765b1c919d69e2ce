package policy_test

import (
	"context"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

func i64(v int64) *int64 { return &v }

// TestMeter walks the call limits over a scanned ledger: each case names
// the rule it holds to.
func TestMeter(t *testing.T) {
	rows := func(pairs ...int64) []memRow { // seconds after t0, tokens
		var out []memRow
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, memRow{t0.Add(time.Duration(pairs[i]) * time.Second), policy.Amounts{pairs[i+1], 0}})
		}
		return out
	}
	tpm := func(n int64) *policy.Tier {
		return &policy.Tier{Name: "t", Limits: policy.LimitSet{policy.TokensPerMinute: i64(n)}}
	}
	for _, tc := range []struct {
		name           string
		tier           *policy.Tier
		ledger         memLedger
		tokens         int64
		at             time.Duration // after t0
		allowed        bool
		reason         string
		retry          int64
		used, reset    int64 // minute window, after the check
		waitless       bool
		inFlightAfter  int64
		concurrencySet bool
	}{
		{name: "fits exactly", tier: tpm(100), ledger: memLedger{rows: rows(0, 50)}, tokens: 50, at: 10 * time.Second,
			allowed: true, used: 100, reset: 50},
		{name: "one over waits for the oldest finished tokens", tier: tpm(100), ledger: memLedger{rows: rows(0, 50)}, tokens: 51, at: 10 * time.Second,
			reason: "per-minute token limit exceeded", retry: 50, used: 50, reset: 50},
		{name: "reservations count as used", tier: tpm(100), ledger: memLedger{open: 1, reserved: policy.Amounts{60, 0}}, tokens: 41,
			reason: "per-minute token limit exceeded", retry: 60, used: 60, waitless: true},
		{name: "waits only as long as needed: the second row must leave too", tier: tpm(100), ledger: memLedger{rows: rows(0, 30, 5, 30, 20, 30)}, tokens: 50, at: 30 * time.Second,
			reason: "per-minute token limit exceeded", retry: 35, used: 90, reset: 30},
		{name: "a finished row at the window's edge no longer counts", tier: tpm(100), ledger: memLedger{rows: rows(0, 100)}, tokens: 100, at: time.Minute,
			allowed: true, used: 100},
		{name: "zero limit", tier: tpm(0), tokens: 1, reason: "per-minute token limit exceeded", retry: 60, waitless: true},
		{name: "zero tokens fit a zero limit", tier: tpm(0), tokens: 0, allowed: true},
		{name: "concurrency before tokens", tier: &policy.Tier{Limits: policy.LimitSet{policy.TokensPerMinute: i64(10), policy.MaxConcurrent: i64(1)}}, ledger: memLedger{open: 1, reserved: policy.Amounts{10, 0}}, tokens: 1,
			reason: "concurrent call limit exceeded", retry: 60, used: 10, waitless: true, inFlightAfter: 1, concurrencySet: true},
		{name: "concurrency alone retries after 1s", tier: &policy.Tier{Limits: policy.LimitSet{policy.MaxConcurrent: i64(2)}}, ledger: memLedger{open: 2},
			reason: "concurrent call limit exceeded", retry: 1, waitless: true, inFlightAfter: 2, concurrencySet: true},
		{name: "in flight counts the call admitted", tier: &policy.Tier{Limits: policy.LimitSet{policy.MaxConcurrent: i64(2)}}, ledger: memLedger{open: 1},
			allowed: true, inFlightAfter: 2, concurrencySet: true},
		{name: "minute before day", tier: &policy.Tier{Limits: policy.LimitSet{policy.TokensPerMinute: i64(10), policy.TokensPerDay: i64(10)}}, ledger: memLedger{rows: rows(0, 10)}, tokens: 1, at: time.Second,
			reason: "per-minute token limit exceeded", retry: 24*3600 - 1, used: 10, reset: 59},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := t0.Add(tc.at)
			m, err := policy.Meter(&tc.ledger, tc.tier, policy.Amounts{tc.tokens, 0}, now)
			if err != nil {
				t.Fatal(err)
			}
			if m.Allowed != tc.allowed || m.Reason != tc.reason || m.RetryAfter != tc.retry || m.Waitless != tc.waitless {
				t.Fatalf("got allowed=%v reason=%q retry=%d waitless=%v, want %v %q %d %v", m.Allowed, m.Reason, m.RetryAfter, m.Waitless, tc.allowed, tc.reason, tc.retry, tc.waitless)
			}
			states, conc := m.States(tc.tier, m.Allowed, now)
			tokens := states[policy.MeasureTokens]
			if tc.tier.Limits[policy.TokensPerMinute] != nil {
				if got := tokens[policy.Minute]; got.Used != tc.used || got.Reset != tc.reset || got.Remaining != max(got.Limit-got.Used, 0) {
					t.Fatalf("minute %+v, want used %d reset %d", *got, tc.used, tc.reset)
				}
			} else if tokens[policy.Minute] != nil {
				t.Fatalf("minute tokens without a limit: %+v", tokens[policy.Minute])
			}
			if (conc != nil) != tc.concurrencySet || conc != nil && conc.InFlight != tc.inFlightAfter {
				t.Fatalf("concurrency %+v, want in flight %d", conc, tc.inFlightAfter)
			}
		})
	}
}

// TestMeterSpend holds spend limits to the rules of token limits, in
// picodollars, beside the tokens: each measure against its own limits.
func TestMeterSpend(t *testing.T) {
	usd := func(s string) int64 {
		m, err := policy.ParseMoney(s)
		if err != nil {
			t.Fatal(err)
		}
		return int64(m)
	}
	row := func(sec int64, tokens int64, cost string) memRow {
		return memRow{t0.Add(time.Duration(sec) * time.Second), policy.Amounts{tokens, usd(cost)}}
	}
	spend := func(perMinute, perDay string) *policy.Tier {
		m, d := usd(perMinute), usd(perDay)
		return &policy.Tier{Name: "t", Limits: policy.LimitSet{policy.CostPerMinute: &m, policy.CostPerDay: &d, policy.TokensPerMinute: i64(1000)}}
	}
	for _, tc := range []struct {
		name            string
		tier            *policy.Tier
		ledger          memLedger
		tokens          int64
		cost            string
		at              time.Duration
		allowed         bool
		reason          string
		retry           int64
		used, remaining string // the minute's spend after the check
		reset           int64
		waitless        bool
	}{
		{name: "fits exactly", tier: spend("1", "10"), ledger: memLedger{rows: []memRow{row(0, 10, "0.4")}}, tokens: 10, cost: "0.6", at: 10 * time.Second,
			allowed: true, used: "1", remaining: "0", reset: 50},
		{name: "a picodollar over waits for the oldest spend", tier: spend("1", "10"), ledger: memLedger{rows: []memRow{row(0, 10, "0.4")}}, tokens: 10, cost: "0.600000000001", at: 10 * time.Second,
			reason: "per-minute spend limit exceeded", retry: 50, used: "0.4", remaining: "0.6", reset: 50},
		{name: "open reservations count as spent", tier: spend("1", "10"), ledger: memLedger{open: 2, reserved: policy.Amounts{20, usd("0.9")}}, tokens: 1, cost: "0.2",
			reason: "per-minute spend limit exceeded", retry: 60, used: "0.9", remaining: "0.1", waitless: true},
		{name: "rows without cost do not set the spend's reset", tier: spend("1", "10"), ledger: memLedger{rows: []memRow{row(0, 50, "0"), row(20, 5, "0.5")}}, tokens: 1, cost: "0.6", at: 30 * time.Second,
			reason: "per-minute spend limit exceeded", retry: 50, used: "0.5", remaining: "0.5", reset: 50},
		{name: "the day refuses when the minute fits", tier: spend("1", "1"), ledger: memLedger{rows: []memRow{row(0, 10, "0.9")}}, tokens: 1, cost: "0.2", at: 2 * time.Minute,
			reason: "per-day spend limit exceeded", retry: 24*3600 - 120, used: "0", remaining: "1"},
		{name: "tokens refuse before spend", tier: spend("1", "10"), ledger: memLedger{rows: []memRow{row(0, 1000, "0.9")}}, tokens: 1, cost: "0.2", at: time.Second,
			reason: "per-minute token limit exceeded", retry: 59, used: "0.9", remaining: "0.1", reset: 59},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := t0.Add(tc.at)
			m, err := policy.Meter(&tc.ledger, tc.tier, policy.Amounts{tc.tokens, usd(tc.cost)}, now)
			if err != nil {
				t.Fatal(err)
			}
			if m.Allowed != tc.allowed || m.Reason != tc.reason || m.RetryAfter != tc.retry || m.Waitless != tc.waitless {
				t.Fatalf("got allowed=%v reason=%q retry=%d waitless=%v, want %v %q %d %v", m.Allowed, m.Reason, m.RetryAfter, m.Waitless, tc.allowed, tc.reason, tc.retry, tc.waitless)
			}
			states, _ := m.States(tc.tier, m.Allowed, now)
			got := states[policy.MeasureCost][policy.Minute]
			if got == nil || got.Used != usd(tc.used) || got.Remaining != usd(tc.remaining) || got.Reset != tc.reset {
				t.Fatalf("minute spend %+v, want used %s remaining %s reset %d", got, tc.used, tc.remaining, tc.reset)
			}
			if states[policy.MeasureCost][policy.Hour] != nil {
				t.Fatalf("hour spend without a limit: %+v", states[policy.MeasureCost][policy.Hour])
			}
		})
	}
}

// TestServiceMeteredChecks goes through the service on the fake store: the
// order of reasons, what a refusal records, dry runs and validation.
func TestServiceMeteredChecks(t *testing.T) {
	ctx := context.Background()
	tier := policy.Tier{Name: "m", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(2)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(100)), policy.TokensPerMinute: i64(100), policy.MaxConcurrent: i64(2)}, Features: []string{"chat"}}
	st := newMemStore(tier)
	clk := policy.NewTestClock(t0)
	svc := policy.NewService(st, st, policy.WithClock(clk.Now), policy.WithCallTimeout(time.Minute))
	check := func(tokens int64, dryRun bool) policy.Decision {
		t.Helper()
		d, err := svc.Check(ctx, policy.Request{UserID: "u", Tier: "m", Tokens: tokens}, dryRun)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, bad := range []int64{-1, policy.MaxLimit + 1} {
		if _, err := svc.Check(ctx, policy.Request{UserID: "u", Tier: "m", Tokens: bad}, false); policy.ErrorCode(err) != policy.EINVALID || err.Error() != "tokens must be an integer from 0 to 2147483647" {
			t.Fatalf("tokens %d: %v", bad, err)
		}
	}
	if d := check(70, true); !d.Allowed() || d.CallID != "" || d.Windows[policy.Minute].Tokens.Used != 70 || len(st.calls) != 0 {
		t.Fatalf("dry run: %+v, %d calls", d, len(st.calls))
	}
	a := check(70, false)
	if !a.Allowed() || a.CallID == "" || a.Concurrency.InFlight != 1 || st.count("u") != 1 {
		t.Fatalf("first: %+v", a)
	}
	// A token refusal records nothing.
	if d := check(31, false); d.Reason != "per-minute token limit exceeded" || st.count("u") != 1 || len(st.calls) != 1 || d.Windows[policy.Minute].Count != 1 {
		t.Fatalf("over tokens: %+v, %d requests", d, st.count("u"))
	}
	// Request windows come first: the minute's ceiling of 2 is reached.
	if d := check(30, false); !d.Allowed() {
		t.Fatalf("second: %+v", d)
	}
	if d := check(0, false); d.Reason != "per-minute limit exceeded" || d.RetryAfter != 60 {
		t.Fatalf("third: %+v", d)
	}
	// A refusal before the rate limiter still reports the call state.
	d, err := svc.Check(ctx, policy.Request{UserID: "u", Tier: "m", Feature: "search"}, false)
	if err != nil || d.Outcome != policy.Denied || d.Concurrency == nil || d.Concurrency.InFlight != 2 || d.Windows[policy.Minute].Tokens.Used != 100 || d.Windows[policy.Hour].Tokens != nil {
		t.Fatalf("denied: %+v %v", d, err)
	}
	// Finishing validates before asking the store.
	if _, err := svc.FinishCall(ctx, a.CallID, policy.Report{Tokens: i64(-1)}); policy.ErrorCode(err) != policy.EINVALID {
		t.Fatalf("finish -1: %v", err)
	}
	if _, err := svc.FinishCall(ctx, "not a call id!", policy.Report{}); policy.ErrorCode(err) != policy.ENOTFOUND {
		t.Fatalf("finish bad id: %v", err)
	}
	if c, err := svc.FinishCall(ctx, a.CallID, policy.Report{Tokens: i64(10)}); err != nil || c.Tokens != 10 {
		t.Fatalf("finish: %+v %v", c, err)
	}
	u, err := svc.UsageReport(ctx, "u", "m")
	if err != nil || u.CallsInFlight != 1 || u.Windows[policy.Minute].Tokens.Used != 40 || !u.Windows[policy.Minute].Tokens.Limited {
		t.Fatalf("usage: %+v %v", u, err)
	}
	if svc.CallTimeout() != time.Minute {
		t.Fatalf("call timeout %v", svc.CallTimeout())
	}
}

// TestOpenCall: a check of a tier that limits neither tokens nor
// concurrent calls opens a call only when it asks (Request.OpenCall), and
// the tokens that call finishes with are the user's usage; it changes no
// decision and adds no token state to the windows the tier does not limit.
func TestOpenCall(t *testing.T) {
	ctx := context.Background()
	tier := policy.Tier{Name: "plain", Limits: policy.LimitSet{policy.RequestsPerMinute: i64(2), policy.RequestsPerHour: i64(100), policy.RequestsPerDay: i64(100)}}
	st := newMemStore(tier)
	svc := policy.NewService(st, st, policy.WithClock(policy.NewTestClock(t0).Now))
	check := func(open bool) policy.Decision {
		t.Helper()
		d, err := svc.Check(ctx, policy.Request{UserID: "u", Tier: "plain", Tokens: 300, OpenCall: open}, false)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := check(false); !d.Allowed() || d.CallID != "" || len(st.calls) != 0 {
		t.Fatalf("a plain check: %+v, %d calls", d, len(st.calls))
	}
	d := check(true)
	if !d.Allowed() || d.CallID == "" || len(st.calls) != 1 || d.Concurrency != nil || d.Windows[policy.Minute].Tokens != nil {
		t.Fatalf("a check asking for a call: %+v, %d calls", d, len(st.calls))
	}
	if u, err := svc.UsageReport(ctx, "u", ""); err != nil || u.CallsInFlight != 1 || u.Windows[policy.Day].Tokens.Used != 300 {
		t.Fatalf("usage with the call open: %+v %v", u, err)
	}
	if _, err := svc.FinishCall(ctx, d.CallID, policy.Report{Tokens: i64(144)}); err != nil {
		t.Fatal(err)
	}
	if u, err := svc.UsageReport(ctx, "u", ""); err != nil || u.CallsInFlight != 0 || u.Windows[policy.Day].Tokens.Used != 144 {
		t.Fatalf("usage after the finish: %+v %v", u, err)
	}
	// The request windows decide as before: the minute's third is refused,
	// and opens nothing.
	if d := check(true); d.Allowed() || d.Reason != "per-minute limit exceeded" || d.CallID != "" || len(st.calls) != 1 {
		t.Fatalf("over the minute: %+v, %d calls", d, len(st.calls))
	}
}

// TestCallIDs: ids are URL-safe, at most 64 bytes, and distinct.
func TestCallIDs(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want bool
	}{{"abc-_XYZ09", true}, {"", false}, {"a/b", false}, {"a b", false}, {string(make([]byte, 65)), false}} {
		if got := policy.ValidCallID(tc.id); got != tc.want {
			t.Errorf("ValidCallID(%q) = %v", tc.id, got)
		}
	}
}
