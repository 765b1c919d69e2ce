package policy_test

import (
	"testing"

	"github.com/policyguard/policyguard/policy"
)

// The month limits are rows of the table like the others, but no window:
// they bind after the day (a month below the day would refuse first),
// are optional, are no request limits a shadow holds, and a pool's unset
// month limits stay unset.
func TestMonthLimits(t *testing.T) {
	day := policy.Tier{Name: "t", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(10)), policy.RequestsPerHour: new(int64(100)),
		policy.RequestsPerDay: new(int64(1000)), policy.TokensPerDay: new(int64(5000)), policy.CostPerDay: new(int64(20e12))}}
	for _, tc := range []struct {
		name   string
		limits policy.LimitSet
		want   string
	}{
		{"above the day", policy.LimitSet{policy.RequestsPerMonth: new(int64(20000)), policy.TokensPerMonth: new(int64(100000)), policy.CostPerMonth: new(int64(200e12))}, ""},
		{"requests below the day", policy.LimitSet{policy.RequestsPerMonth: new(int64(999))},
			"requests_per_month (999) is below requests_per_day (1000): the month would refuse first"},
		{"tokens below the day", policy.LimitSet{policy.TokensPerMonth: new(int64(4999))},
			"tokens_per_month (4999) is below tokens_per_day (5000): the month would refuse first"},
		{"spend below the day", policy.LimitSet{policy.CostPerMonth: new(int64(19e12))},
			"cost_per_month ($19.00) is below cost_per_day ($20.00): the month would refuse first"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tier := day
			for i, v := range tc.limits {
				if v != nil {
					tier.Limits[i] = v
				}
			}
			if !tier.Limits.LimitsMonth() {
				t.Fatal("LimitsMonth is false")
			}
			got := ""
			if errs := tier.ValidateFields(); len(errs) > 0 {
				got = errs[0].Message
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	if day.Limits.LimitsMonth() {
		t.Error("a tier without month limits limits months")
	}
	for _, id := range []policy.LimitID{policy.RequestsPerMonth, policy.TokensPerMonth, policy.CostPerMonth} {
		f := id.Field()
		if !f.Monthly || f.Windowed || !f.Optional || f.InRequestLimits() || f.WindowName() != "month" {
			t.Errorf("%s: %+v", f.Name, f)
		}
	}
	pool := policy.LimitSet{policy.TokensPerMonth: new(int64(5))}
	pt := pool.Tier("p", 0)
	if pt.Limits[policy.RequestsPerMonth] != nil || pt.Limits[policy.RequestsPerDay] == nil {
		t.Errorf("a pool's tier: requests_per_month %v, requests_per_day %v", pt.Limits[policy.RequestsPerMonth], pt.Limits[policy.RequestsPerDay])
	}
	if got, want := policy.TierSummary(&policy.Tier{Name: "m", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(1)),
		policy.RequestsPerDay: new(int64(1)), policy.RequestsPerMonth: new(int64(30)), policy.TokensPerMonth: new(int64(2000000))}}),
		"1/min (+0 burst), 1/hour, 1/day, 30/month; 2,000,000 tokens/month; no features"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
}

// A refusal by a month limit, a user's or a pool's, is told apart from a
// window's, and counts as a refusal of its kind.
func TestRefusedByMonth(t *testing.T) {
	for _, tc := range []struct {
		reason string
		month  bool
		kind   policy.LimitKind
	}{
		{"per-month limit exceeded", true, policy.KindRequests},
		{"per-month token limit exceeded", true, policy.KindTokens},
		{"account per-month spend limit exceeded", true, policy.KindCost},
		{"per-day spend limit exceeded", false, policy.KindCost},
		{"per-minute limit exceeded", false, policy.KindRequests},
	} {
		d := policy.Decision{Outcome: policy.RateLimited, Reason: tc.reason}
		k, ok := d.RefusedBy()
		if d.RefusedByMonth() != tc.month || !ok || k != tc.kind {
			t.Errorf("%q: RefusedByMonth %v, RefusedBy %v %v", tc.reason, d.RefusedByMonth(), k, ok)
		}
	}
	if d := (policy.Decision{Outcome: policy.Admitted}); d.RefusedByMonth() {
		t.Error("an admission refused by the month")
	}
}
