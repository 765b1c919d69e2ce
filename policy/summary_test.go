package policy_test

import (
	"strings"
	"testing"

	"github.com/policyguard/policyguard/policy"
)

// The audit log's account of a change names a change of shadow limits, and
// a promotion reads as the limits taking the shadow's values.
func TestTierDiffShadow(t *testing.T) {
	before := policy.Tier{Name: "s", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(10)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(1000))}, Shadow: &policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(5)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(1000))}}}
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
		{policy.UserRecord{Tier: "pro", BillingAnchor: 15}, "tier pro; billing_anchor 15"},
		{policy.UserRecord{TimeZone: "Asia/Tokyo"}, "no tier assigned; time_zone Asia/Tokyo"},
		{policy.UserRecord{Tier: "pro", Limits: policy.Overrides{policy.RequestsPerMinute: policy.To(five), policy.TokensPerDay: policy.Unlimited}},
			"tier pro; requests_per_minute 5; tokens_per_day none"},
	} {
		if got := policy.UserSummary(&tc.r); got != tc.want {
			t.Errorf("UserSummary(%+v) = %q, want %q", tc.r, got, tc.want)
		}
	}
}

// A tier's pooled limits for accounts are in its summary and in the words
// of a change: field by field, named as a refusal names them, or by their
// presence alone when no limit differs.
func TestSummaryOfPooledLimits(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	pool := func(values map[string]*int64) *policy.LimitSet {
		p, err := policy.PoolLimitsOf(values)
		if err != nil {
			t.Fatal(err)
		}
		return &p
	}
	base := policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(5)), policy.RequestsPerHour: new(int64(50)), policy.RequestsPerDay: new(int64(500))}}
	with := func(p *policy.LimitSet) *policy.Tier { t := base; t.Account = p; return &t }
	big := pool(map[string]*int64{"requests_per_minute": n(600), "burst_allowance": n(10), "tokens_per_day": n(2000000), "max_concurrent": n(10)})

	for _, tc := range []struct {
		tier *policy.Tier
		want string
	}{
		{with(nil), "5/min (+0 burst), 50/hour, 500/day; no features"},
		{with(big), "5/min (+0 burst), 50/hour, 500/day; no features; account 600/min (+10 burst), 2,000,000 tokens/day, 10 concurrent calls"},
		{with(pool(map[string]*int64{"tokens_per_minute": n(1000)})), "5/min (+0 burst), 50/hour, 500/day; no features; account 1,000 tokens/min"},
		{with(pool(nil)), "5/min (+0 burst), 50/hour, 500/day; no features; account no limits"},
	} {
		if got := policy.TierSummary(tc.tier); got != tc.want {
			t.Errorf("TierSummary = %q, want %q", got, tc.want)
		}
	}

	for _, tc := range []struct {
		before, after *policy.LimitSet
		want          string
	}{
		{nil, big, "account.requests_per_minute: none → 600; account.burst_allowance: none → 10; account.tokens_per_day: none → 2,000,000; account.max_concurrent: none → 10"},
		{big, pool(map[string]*int64{"requests_per_minute": n(600), "burst_allowance": n(10), "tokens_per_day": n(1000000), "max_concurrent": n(10)}),
			"account.tokens_per_day: 2,000,000 → 1,000,000"},
		{big, nil, "account.requests_per_minute: 600 → none; account.burst_allowance: 10 → none; account.tokens_per_day: 2,000,000 → none; account.max_concurrent: 10 → none"},
		{nil, pool(nil), "account: none → no limits"},
		{pool(nil), nil, "account: no limits → none"},
		{big, big, "saved without a change"},
	} {
		if got := strings.Join(policy.TierDiff(with(tc.before), with(tc.after)), "; "); got != tc.want {
			t.Errorf("TierDiff = %q, want %q", got, tc.want)
		}
	}
}

// A record's summary names its account after its tier; an account's names
// its plan and the pooled limits it overrides, as a record's does.
func TestAccountSummaries(t *testing.T) {
	five := int64(5)
	if got, want := policy.UserSummary(&policy.UserRecord{Account: "acme"}), "no tier assigned; account acme"; got != want {
		t.Errorf("UserSummary = %q, want %q", got, want)
	}
	r := policy.UserRecord{Tier: "pro", Account: "acme", Limits: policy.Overrides{policy.RequestsPerMinute: policy.To(five)}}
	if got, want := policy.UserSummary(&r), "tier pro; account acme; requests_per_minute 5"; got != want {
		t.Errorf("UserSummary = %q, want %q", got, want)
	}
	o, err := policy.PoolOverridesOf(map[string]*int64{"tokens_per_day": nil, "requests_per_minute": &five})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		a    policy.Account
		want string
	}{
		{policy.Account{AccountID: "acme", Tier: "team"}, "tier team"},
		{policy.Account{AccountID: "acme", Tier: "team", Limits: o, Note: "not worded"}, "tier team; requests_per_minute 5; tokens_per_day none"},
		{policy.Account{AccountID: "acme", Tier: "team", TimeZone: "Europe/Berlin", BillingAnchor: 31}, "tier team; time_zone Europe/Berlin; billing_anchor 31"},
	} {
		if got := policy.AccountSummary(&tc.a); got != tc.want {
			t.Errorf("AccountSummary = %q, want %q", got, tc.want)
		}
	}
}
