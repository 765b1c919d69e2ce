package policy_test

import (
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// runTier returns a tier whose run object sets limits.
func runTier(limits map[policy.LimitID]int64) *policy.Tier {
	t := &policy.Tier{Name: "agents", Run: &policy.LimitSet{}}
	for id, v := range limits {
		t.Run.Set(id.Field(), &v)
	}
	return t
}

func TestDecideRun(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC)
	open := func(id string, depth int64, parent string, requests, tokens, inFlight int64) policy.Run {
		return policy.Run{ID: id, UserID: "u", Tier: "agents", Parent: parent, Root: "root", Depth: depth,
			OpenedAt: t0, LastAt: t0, State: policy.RunOpen, Requests: requests, Tokens: tokens, CallsInFlight: inFlight}
	}
	tier := runTier(map[policy.LimitID]int64{policy.MaxRunRequests: 3, policy.MaxRunTokens: 100,
		policy.MaxRunDuration: 3600, policy.MaxConcurrent: 2, policy.MaxRunDepth: 2})
	cases := []struct {
		name         string
		q            policy.RunQuery
		now          time.Time
		want         policy.Outcome
		reason       string
		retry        int64
		closes       []policy.RunClose
		opens, count bool
		requests     int64 // of the named run after
	}{
		{name: "first request opens the run", q: policy.RunQuery{RunID: "root"}, now: t0,
			want: policy.Admitted, opens: true, count: true, requests: 1},
		{name: "a step within budget", q: policy.RunQuery{RunID: "root", Chain: []policy.Run{open("root", 1, "", 1, 10, 0)}, Want: policy.Amounts{10}},
			now: t0.Add(time.Minute), want: policy.Admitted, count: true, requests: 2},
		{name: "the last step exhausts the run", q: policy.RunQuery{RunID: "root", Chain: []policy.Run{open("root", 1, "", 2, 10, 0)}},
			now: t0.Add(time.Minute), want: policy.Admitted, count: true, requests: 3,
			closes: []policy.RunClose{{ID: "root", State: policy.RunExhausted, Cause: policy.CauseRequests, At: t0.Add(time.Minute)}}},
		{name: "steps used up", q: policy.RunQuery{RunID: "root", Chain: []policy.Run{open("root", 1, "", 3, 10, 0)}},
			now: t0.Add(time.Minute), want: policy.Denied, reason: `run "root" step limit exceeded`, requests: 3,
			closes: []policy.RunClose{{ID: "root", State: policy.RunExhausted, Cause: policy.CauseRequests, At: t0.Add(time.Minute)}}},
		{name: "tokens past the budget, a call open", q: policy.RunQuery{RunID: "root", Chain: []policy.Run{open("root", 1, "", 1, 95, 1)}, Want: policy.Amounts{10}},
			now: t0.Add(time.Minute), want: policy.Denied, reason: `run "root" token limit exceeded`, requests: 1},
		{name: "tokens used up, nothing open", q: policy.RunQuery{RunID: "root", Chain: []policy.Run{open("root", 1, "", 1, 100, 0)}},
			now: t0.Add(time.Minute), want: policy.Denied, reason: `run "root" token limit exceeded`, requests: 1,
			closes: []policy.RunClose{{ID: "root", State: policy.RunExhausted, Cause: policy.CauseTokens, At: t0.Add(time.Minute)}}},
		{name: "calls in flight at max_concurrent", q: policy.RunQuery{RunID: "root", Chain: []policy.Run{open("root", 1, "", 1, 10, 2)}},
			now: t0.Add(time.Minute), want: policy.RateLimited, reason: `run "root" concurrent call limit exceeded`, retry: 1, requests: 1},
		{name: "past max_duration", q: policy.RunQuery{RunID: "root", Chain: []policy.Run{open("root", 1, "", 1, 10, 0)}},
			now: t0.Add(time.Hour), want: policy.Denied, reason: `run "root" duration exceeded`, requests: 1,
			closes: []policy.RunClose{{ID: "root", State: policy.RunExpired, Cause: policy.CauseDuration, At: t0.Add(time.Hour)}}},
		{name: "idle too long", q: policy.RunQuery{RunID: "root", Idle: time.Minute, Chain: []policy.Run{open("root", 1, "", 1, 10, 0)}},
			now: t0.Add(2 * time.Minute), want: policy.Denied, reason: `run "root" expired: no request for longer than the idle limit`, requests: 1,
			closes: []policy.RunClose{{ID: "root", State: policy.RunExpired, Cause: policy.CauseIdle, At: t0.Add(2 * time.Minute)}}},
		{name: "a child opens under its parent", q: policy.RunQuery{RunID: "kid", ParentRunID: "root", ParentChain: []policy.Run{open("root", 1, "", 1, 10, 0)}},
			now: t0.Add(time.Minute), want: policy.Admitted, opens: true, count: true, requests: 1},
		{name: "an ancestor refuses for its child", q: policy.RunQuery{RunID: "kid", Chain: []policy.Run{open("kid", 2, "root", 0, 0, 0), open("root", 1, "", 3, 10, 0)}},
			now: t0.Add(time.Minute), want: policy.Denied, reason: `run "root" step limit exceeded`,
			closes: []policy.RunClose{{ID: "root", State: policy.RunExhausted, Cause: policy.CauseRequests, At: t0.Add(time.Minute)}}},
		{name: "too deep", q: policy.RunQuery{RunID: "grandkid", ParentRunID: "kid", ParentChain: []policy.Run{open("kid", 2, "root", 0, 0, 0), open("root", 1, "", 1, 0, 0)}},
			now: t0, want: policy.Denied, reason: `run "grandkid" depth limit exceeded (max_depth 2)`},
		{name: "unknown parent", q: policy.RunQuery{RunID: "kid", ParentRunID: "nobody"},
			now: t0, want: policy.Denied, reason: `parent run "nobody" not found`},
		{name: "an ended run", q: policy.RunQuery{RunID: "root", Chain: []policy.Run{func() policy.Run {
			r := open("root", 1, "", 1, 0, 0)
			r.State, r.Cause = policy.RunEnded, policy.CauseEnded
			return r
		}()}}, now: t0, want: policy.Denied, reason: `run "root" was ended`, requests: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.q.UserID = "u"
			v, err := policy.DecideRun(&tc.q, tier, tc.now)
			if err != nil {
				t.Fatal(err)
			}
			if v.Outcome != tc.want || v.Reason != tc.reason || v.RetryAfter != tc.retry {
				t.Errorf("verdict %v %q retry %d, want %v %q retry %d", v.Outcome, v.Reason, v.RetryAfter, tc.want, tc.reason, tc.retry)
			}
			if got := v.Admission.Open != nil; got != tc.opens {
				t.Errorf("opens %v, want %v", got, tc.opens)
			}
			if got := v.Admission.ID != ""; got != tc.count {
				t.Errorf("counts %v, want %v", got, tc.count)
			}
			if len(v.Admission.Close) != len(tc.closes) {
				t.Fatalf("closes %+v, want %+v", v.Admission.Close, tc.closes)
			}
			for i := range tc.closes {
				if v.Admission.Close[i] != tc.closes[i] {
					t.Errorf("close %d = %+v, want %+v", i, v.Admission.Close[i], tc.closes[i])
				}
			}
			if v.Outcome != policy.Denied || tc.requests != 0 {
				if v.Run.Requests != tc.requests {
					t.Errorf("run requests %d, want %d", v.Run.Requests, tc.requests)
				}
			}
		})
	}
}

// A run of another user, a parent of another user and a parent other
// than the run's own are conflicts, not refusals.
func TestDecideRunConflicts(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC)
	theirs := policy.Run{ID: "r", UserID: "other", Root: "r", Depth: 1, OpenedAt: t0, LastAt: t0, State: policy.RunOpen}
	mine := policy.Run{ID: "r", UserID: "u", Root: "r", Depth: 1, OpenedAt: t0, LastAt: t0, State: policy.RunOpen}
	for _, q := range []policy.RunQuery{
		{UserID: "u", RunID: "r", Chain: []policy.Run{theirs}},
		{UserID: "u", RunID: "kid", ParentRunID: "r", ParentChain: []policy.Run{theirs}},
		{UserID: "u", RunID: "r", ParentRunID: "p", Chain: []policy.Run{mine}},
	} {
		if _, err := policy.DecideRun(&q, runTier(nil), t0); policy.ErrorCode(err) != policy.ECONFLICT {
			t.Errorf("%+v: %v, want a conflict", q, err)
		}
	}
}

// Run ids follow the rules of user ids, and a parent needs a run.
func TestCheckValidatesRunIDs(t *testing.T) {
	for _, req := range []policy.Request{
		{UserID: "u", RunID: "bad\nid"},
		{UserID: "u", RunID: "r", ParentRunID: "bad\x00"},
		{UserID: "u", ParentRunID: "p"},
		{UserID: "u", RunID: "r", ParentRunID: "r"},
	} {
		svc := policy.NewService(nil, nil)
		_, err := svc.Check(t.Context(), req, false)
		if policy.ErrorCode(err) != policy.EINVALID {
			t.Errorf("%+v: %v, want EINVALID", req, err)
		}
	}
}
