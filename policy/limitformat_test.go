package policy_test

import (
	"strings"
	"testing"

	"github.com/policyguard/policyguard/policy"
)

// A spend limit is read from people in dollars, exactly, and shown back
// in dollars; a count limit stays an integer.
func TestParseLimitSpend(t *testing.T) {
	for _, tc := range []struct {
		field, value string
		want         int64
		msg          string
	}{
		{"cost_per_day", "20", 20_000_000_000_000, ""},
		{"cost_per_day", "20.00", 20_000_000_000_000, ""},
		{"cost_per_day", "$20", 20_000_000_000_000, ""},
		{"account.cost_per_hour", "0.15", 150_000_000_000, ""},
		{"cost_per_minute", "0.000000000001", 1, ""},
		{"cost_per_day", "9223372.036854775807", int64(policy.MaxMoney), ""},
		{"cost_per_day", "", 0, "cost_per_day is required"},
		{"cost_per_day", "twenty", 0, `cost_per_day must be a dollar amount such as "20" or "0.15"`},
		{"cost_per_day", "2e1", 0, `cost_per_day must be a dollar amount such as "20" or "0.15"`},
		{"cost_per_day", "-1", 0, "cost_per_day must be a dollar amount from $0.00 to $9223372.036854775807"},
		{"cost_per_day", "0.0000000000001", 0, `cost_per_day: "0.0000000000001" is finer than a picodollar (at most 12 decimals)`},
		{"cost_per_day", "9223372.036854775808", 0, `cost_per_day: "9223372.036854775808" is more than the largest amount, 9223372.036854775807`},
		{"tokens_per_day", "20.5", 0, "tokens_per_day must be an integer from 0 to 2147483647"},
	} {
		got, err := policy.ParseLimit(tc.field, tc.value)
		if msg := policy.ErrorMessage(err); err != nil && msg != tc.msg || err == nil && (tc.msg != "" || got != tc.want) {
			t.Errorf("ParseLimit(%q, %q) = %d, %q; want %d, %q", tc.field, tc.value, got, msg, tc.want, tc.msg)
		}
	}
}

func TestLimitFieldText(t *testing.T) {
	day, tokens := policy.CostPerDay.Field(), policy.TokensPerDay.Field()
	for _, tc := range []struct {
		f    *policy.LimitField
		v    *int64
		want string
	}{
		{day, nil, "none"},
		{day, new(int64(20_500_000_000_000)), "$20.50"},
		{day, new(int64(0)), "$0.00"},
		{day, new(int64(150_000_000_000)), "$0.15"},
		{day, new(int64(1_000_000)), "$0.000001"},
		{day, new(int64(1_234_000_000_000_000)), "$1234.00"},
		{tokens, new(int64(1_234_000)), "1,234,000"},
	} {
		if got := tc.f.Text(tc.v); got != tc.want {
			t.Errorf("%s.Text(%v) = %q, want %q", tc.f.Name, tc.v, got, tc.want)
		}
		if tc.v != nil && tc.f.Kind == policy.KindCost {
			back, err := policy.ParseDollars(tc.f.Text(tc.v))
			if err != nil || int64(back) != *tc.v {
				t.Errorf("ParseDollars(%q) = %d, %v; want %d", tc.f.Text(tc.v), back, err, *tc.v)
			}
		}
	}
}

// Every message of a spend limit, and the wording of its change, says
// dollars, never picodollars.
func TestSpendLimitWording(t *testing.T) {
	base := policy.Tier{Name: "pro", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(10)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(1000))}}
	after := base
	after.Limits[policy.CostPerHour] = new(int64(30_000_000_000_000))
	after.Limits[policy.CostPerDay] = new(int64(20_500_000_000_000))
	after.Account = &policy.LimitSet{policy.CostPerDay: new(int64(100_000_000_000_000))}
	if got, want := strings.Join(policy.TierDiff(&base, &after), "; "), "cost_per_hour: none → $30.00; cost_per_day: none → $20.50; account.cost_per_day: none → $100.00"; got != want {
		t.Errorf("TierDiff = %q, want %q", got, want)
	}
	if got, want := policy.TierSummary(&after), "10/min (+0 burst), 100/hour, 1,000/day; $30.00 spend/hour, $20.50 spend/day; no features; account $100.00 spend/day"; got != want {
		t.Errorf("TierSummary = %q, want %q", got, want)
	}
	// The day's limit below the hour's could never bind.
	var problems []string
	for _, fe := range after.ValidateFields() {
		problems = append(problems, fe.Message)
	}
	if got, want := strings.Join(problems, "; "), "cost_per_day ($20.50) is below cost_per_hour ($30.00): the day would refuse first"; got != want {
		t.Errorf("ValidateFields = %q, want %q", got, want)
	}
	r := policy.UserRecord{UserID: "u", Tier: "pro"}
	r.Limits.Set(policy.CostPerDay.Field(), policy.To(5_000_000_000_000))
	r.Limits.Set(policy.CostPerHour.Field(), policy.Unlimited)
	if got, want := policy.UserSummary(&r), "tier pro; cost_per_hour none; cost_per_day $5.00"; got != want {
		t.Errorf("UserSummary = %q, want %q", got, want)
	}
	if got, want := policy.NullRequiredLimit("shadow.cost_per_day"), "shadow.cost_per_day must be a dollar amount from $0.00 to $9223372.036854775807 (only the optional limits can be null)"; got != want {
		t.Errorf("NullRequiredLimit = %q, want %q", got, want)
	}
}
