package policy_test

import (
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

func TestCountReason(t *testing.T) {
	tests := []struct {
		d    policy.Decision
		want string
	}{
		{policy.Decision{Outcome: policy.Admitted}, policy.CountAdmitted},
		{policy.Decision{Outcome: policy.Denied, Guardrail: "tier_access", Reason: `feature "x" is not included in tier "free"`}, policy.CountFeature},
		{policy.Decision{Outcome: policy.RateLimited, Guardrail: "rate_limiter", Reason: policy.Minute.Reason()}, policy.CountMinute},
		{policy.Decision{Outcome: policy.RateLimited, Guardrail: "rate_limiter", Reason: policy.Hour.Reason()}, policy.CountHour},
		{policy.Decision{Outcome: policy.RateLimited, Guardrail: "rate_limiter", Reason: policy.Day.Reason()}, policy.CountDay},
		{policy.Decision{Outcome: policy.RateLimited, Guardrail: "rate_limiter", Reason: policy.Hour.TokenReason()}, policy.CountTokens},
		{policy.Decision{Outcome: policy.RateLimited, Guardrail: "rate_limiter", Reason: policy.ConcurrencyReason}, policy.CountConcurrency},
		{policy.Decision{Outcome: policy.Denied, Guardrail: "pii", Reason: "the prompt holds a card number"}, policy.CountOther},
	}
	for _, tt := range tests {
		if got := policy.CountReason(&tt.d); got != tt.want {
			t.Errorf("CountReason(%q by %s) = %q, want %q", tt.d.Reason, tt.d.Guardrail, got, tt.want)
		}
	}
}

func TestStatsPeriodSpan(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 34, 56, 0, time.UTC)
	from, to := policy.PeriodHour.Span(now)
	if want := time.Date(2026, 3, 1, 12, 35, 0, 0, time.UTC); !to.Equal(want) || !from.Equal(want.Add(-time.Hour)) {
		t.Errorf("hour: %v to %v", from, to)
	}
	from, to = policy.PeriodDay.Span(now)
	if want := time.Date(2026, 3, 1, 13, 0, 0, 0, time.UTC); !to.Equal(want) || !from.Equal(want.Add(-24*time.Hour)) {
		t.Errorf("day: %v to %v", from, to)
	}
	if _, err := policy.ParsePeriod("week"); policy.ErrorCode(err) != policy.EINVALID {
		t.Errorf("ParsePeriod(week): %v", err)
	}
}
