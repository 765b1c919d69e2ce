package policy_test

import (
	"testing"

	"github.com/policyguard/policyguard/policy"
)

// TestTightest: the fewest remaining; the shorter on a tie, but of windows
// with none remaining, the one that frees last.
func TestTightest(t *testing.T) {
	ws := func(m, h, d policy.WindowState) *[len(policy.Windows)]policy.WindowState {
		return &[len(policy.Windows)]policy.WindowState{m, h, d}
	}
	for _, tc := range []struct {
		name string
		ws   *[len(policy.Windows)]policy.WindowState
		want policy.Window
	}{
		{"the fewest remaining", ws(policy.WindowState{Remaining: 5, Reset: 60}, policy.WindowState{Remaining: 2, Reset: 3600}, policy.WindowState{Remaining: 9, Reset: 9}), policy.Hour},
		{"a tie with some remaining: the shorter", ws(policy.WindowState{Remaining: 1, Reset: 10}, policy.WindowState{Remaining: 1, Reset: 3000}, policy.WindowState{Remaining: 4}), policy.Minute},
		{"a tie with none remaining: the one that frees last", ws(policy.WindowState{Remaining: 3, Reset: 60}, policy.WindowState{Remaining: 0, Reset: 2901}, policy.WindowState{Remaining: 0, Reset: 85701}), policy.Day},
		{"none remaining, the shorter frees last", ws(policy.WindowState{Remaining: 0, Reset: 50}, policy.WindowState{Remaining: 0, Reset: 40}, policy.WindowState{Remaining: 1}), policy.Minute},
	} {
		if got := policy.TightestWindow(tc.ws); got != tc.want {
			t.Errorf("%s: TightestWindow = %v, want %v", tc.name, got, tc.want)
		}
		// The same rule for tokens, on the same numbers.
		var tws [len(policy.Windows)]policy.WindowState
		for w := range tws {
			tws[w].Tokens = &policy.TokenState{Limited: true, Remaining: tc.ws[w].Remaining, Reset: tc.ws[w].Reset}
		}
		if got := policy.TightestTokens(&tws); got != tws[tc.want].Tokens {
			t.Errorf("%s: TightestTokens = %+v, want the %v's", tc.name, got, tc.want)
		}
	}
	var none [len(policy.Windows)]policy.WindowState
	none[policy.Day].Tokens = &policy.TokenState{Used: 5} // counted, not limited
	if got := policy.TightestTokens(&none); got != nil {
		t.Errorf("no token limit: TightestTokens = %+v, want nil", got)
	}
}

// TestMinReset: a refusal's wait bounds the resets of the kind of limit
// that refused, a user's or an account's, and no other.
func TestMinReset(t *testing.T) {
	for _, tc := range []struct {
		d                policy.Decision
		requests, tokens int64
	}{
		{policy.Decision{Outcome: policy.Admitted}, 0, 0},
		{policy.Decision{Outcome: policy.RateLimited, Reason: "per-hour limit exceeded", RetryAfter: 85701}, 85701, 0},
		{policy.Decision{Outcome: policy.RateLimited, Reason: "account per-day limit exceeded", RetryAfter: 70}, 70, 0},
		{policy.Decision{Outcome: policy.RateLimited, Reason: "per-minute token limit exceeded", RetryAfter: 60}, 0, 60},
		{policy.Decision{Outcome: policy.RateLimited, Reason: "account per-day token limit exceeded", RetryAfter: 9}, 0, 9},
		{policy.Decision{Outcome: policy.RateLimited, Reason: policy.ConcurrencyReason, RetryAfter: 1}, 0, 0},
		{policy.Decision{Outcome: policy.RateLimited, Reason: "a guardrail of its own", RetryAfter: 5}, 0, 0},
		{policy.Decision{Outcome: policy.Denied, Reason: "per-hour limit exceeded"}, 0, 0},
	} {
		if got := tc.d.MinReset(policy.KindRequests); got != tc.requests {
			t.Errorf("%q: MinReset(requests) = %d, want %d", tc.d.Reason, got, tc.requests)
		}
		if got := tc.d.MinReset(policy.KindTokens); got != tc.tokens {
			t.Errorf("%q: MinReset(tokens) = %d, want %d", tc.d.Reason, got, tc.tokens)
		}
	}
}
