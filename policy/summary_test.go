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
		{policy.UserRecord{Account: "acme"}, "no tier assigned; account acme"},
		{policy.UserRecord{Tier: "pro", Account: "acme", Limits: policy.Limits{RequestsPerMinute: &five}},
			"tier pro; account acme; requests_per_minute 5"},
	} {
		if got := policy.UserSummary(&tc.r); got != tc.want {
			t.Errorf("UserSummary(%+v) = %q, want %q", tc.r, got, tc.want)
		}
	}
}

// poolOf returns pooled limits setting each named limit to its value.
func poolOf(t *testing.T, values map[string]int64) *policy.PoolLimits {
	t.Helper()
	m := make(map[string]*int64, len(values))
	for name, v := range values {
		m[name] = &v
	}
	p, err := policy.PoolLimitsOf(m)
	if err != nil {
		t.Fatal(err)
	}
	return &p
}

// A tier's pooled limits are worded with its own: the summary names them
// after the tier's, and a change lists each pooled limit that changed
// under the name the API's errors give it, or says that the tier gained
// or lost its account object.
func TestTierWordsAccount(t *testing.T) {
	base := policy.Tier{Name: "team", RequestsPerMinute: 10, RequestsPerHour: 100, RequestsPerDay: 1000}
	pool := poolOf(t, map[string]int64{"requests_per_minute": 100, "tokens_per_day": 2000000, "max_concurrent": 8})
	withPool := base
	withPool.Account = pool
	if got, want := policy.TierSummary(&withPool), "; account 100/min; 2,000,000 tokens/day, 8 concurrent calls"; !strings.HasSuffix(got, want) {
		t.Errorf("TierSummary = %q, want it to end %q", got, want)
	}
	empty := base
	empty.Account = &policy.PoolLimits{}
	if got := policy.TierSummary(&empty); !strings.HasSuffix(got, "; account no limits") {
		t.Errorf("TierSummary of an account object without limits = %q", got)
	}
	changed := base
	changed.Account = poolOf(t, map[string]int64{"requests_per_minute": 50, "requests_per_day": 5000, "max_concurrent": 8})
	for _, tc := range []struct {
		before, after *policy.Tier
		want          string
	}{
		{&base, &withPool, "account: none → 100/min; 2,000,000 tokens/day, 8 concurrent calls"},
		{&withPool, &base, "account: 100/min; 2,000,000 tokens/day, 8 concurrent calls → none"},
		{&base, &empty, "account: none → no limits"},
		{&withPool, &changed, "account.requests_per_minute: 100 → 50; account.requests_per_day: none → 5,000; account.tokens_per_day: 2,000,000 → none"},
		{&withPool, &withPool, "saved without a change"},
	} {
		if got := strings.Join(policy.TierDiff(tc.before, tc.after), "; "); got != tc.want {
			t.Errorf("TierDiff = %q, want %q", got, tc.want)
		}
	}
}

// An account's summary names its plan and each override, "none" for a
// pooled limit it removes.
func TestAccountSummary(t *testing.T) {
	o, err := policy.PoolOverridesOf(map[string]*int64{"requests_per_day": new(int64(5000)), "max_concurrent": nil})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		a    policy.Account
		want string
	}{
		{policy.Account{AccountID: "acme", Tier: "team"}, "tier team"},
		{policy.Account{AccountID: "acme", Tier: "team", Limits: o}, "tier team; requests_per_day 5,000; max_concurrent none"},
	} {
		if got := policy.AccountSummary(&tc.a); got != tc.want {
			t.Errorf("AccountSummary(%+v) = %q, want %q", tc.a, got, tc.want)
		}
	}
}
