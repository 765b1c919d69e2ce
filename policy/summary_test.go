package policy_test

import (
	"strings"
	"testing"

	"github.com/policyguard/policyguard/policy"
)

// The audit log's account of a change names a change of shadow limits, and
// a promotion reads as the limits taking the shadow's values.
func TestTierDiffShadow(t *testing.T) {
	before := policy.Tier{Name: "s", RequestsPerMinute: 10, RequestsPerHour: 100, RequestsPerDay: 1000,
		Shadow: &policy.RequestLimits{RequestsPerMinute: 5, RequestsPerHour: 100, RequestsPerDay: 1000}}
	after, err := before.Promoted()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(policy.TierDiff(&before, &after), "; ")
	want := "requests_per_minute: 10 → 5; shadow: 5/min (+0 burst), 100/hour, 1,000/day → none"
	if got != want {
		t.Fatalf("TierDiff = %q, want %q", got, want)
	}
	if got := policy.TierSummary(&before); !strings.HasSuffix(got, "; shadow 5/min (+0 burst), 100/hour, 1,000/day") {
		t.Fatalf("TierSummary = %q", got)
	}
}

func TestGroupDigits(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0"}, {999, "999"}, {1000, "1,000"}, {-1000, "-1,000"}, {2147483647, "2,147,483,647"},
	} {
		if got := policy.GroupDigits(tc.n); got != tc.want {
			t.Errorf("GroupDigits(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

// A record's summary names its tier and each limit it sets, "none" for a
// limit it lifts, in the order of policy.LimitNames.
func TestUserSummary(t *testing.T) {
	five := int64(5)
	for _, tc := range []struct {
		r    policy.UserRecord
		want string
	}{
		{policy.UserRecord{}, "no tier assigned"},
		{policy.UserRecord{Tier: "pro"}, "tier pro"},
		{policy.UserRecord{Tier: "pro", Limits: policy.Limits{RequestsPerMinute: &five, TokensPerDay: policy.Unlimited}},
			"tier pro; requests_per_minute 5; tokens_per_day none"},
	} {
		if got := policy.UserSummary(&tc.r); got != tc.want {
			t.Errorf("UserSummary(%+v) = %q, want %q", tc.r, got, tc.want)
		}
	}
}
