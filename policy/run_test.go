package policy_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/policyguard/policyguard/policy"
)

func ptr(v int64) *int64 { return &v }

// The run's limits are rows of the table like every other limit: each is
// reached through Tier.Run and RunLimit, compared by SameLimits and read
// back by RunLimitsOf, and none is a tier's, a user's or an account's.
func TestRunLimitsAreRowsOfTheTable(t *testing.T) {
	var run []string
	for f := range policy.FieldsIn(policy.ScopeRun) {
		run = append(run, f.Name)
		v := int64(1 + f.ID())
		tier := policy.Tier{Run: &policy.LimitSet{}}
		tier.Run.Set(f, &v)
		if got := tier.RunLimit(f.ID()); got == nil || *got != v {
			t.Errorf("%s: RunLimit = %v after setting %d", f.Name, got, v)
		}
		if policy.SameLimits(&tier, &policy.Tier{Run: &policy.LimitSet{}}) {
			t.Errorf("%s: SameLimits does not compare it", f.Name)
		}
		back, err := policy.RunLimitsOf(map[string]*int64{f.Name: &v})
		if err != nil || !back.Equal(tier.Run) {
			t.Errorf("%s: RunLimitsOf = %v, %v, want %v", f.Name, back, err, tier.Run)
		}
		if f.In(policy.ScopeTier) {
			continue // max_concurrent: the tier's too
		}
		if f.Windowed || !f.Optional || f.InRequestLimits() {
			t.Errorf("%s: windowed %v, optional %v, in RequestLimits %v: a run's limit counts from its start and may be unset",
				f.Name, f.Windowed, f.Optional, f.InRequestLimits())
		}
		if _, err := policy.LimitsOf(map[string]*int64{f.Name: &v}); err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Errorf("%s: LimitsOf = %v, want an unknown field: no user overrides a run's limit", f.Name, err)
		}
		if _, err := policy.PoolLimitsOf(map[string]*int64{f.Name: &v}); err == nil {
			t.Errorf("%s: PoolLimitsOf accepted it", f.Name)
		}
		if _, err := policy.PoolOverridesOf(map[string]*int64{f.Name: &v}); err == nil {
			t.Errorf("%s: PoolOverridesOf accepted it", f.Name)
		}
		if tier.RunLimit(f.ID()) != nil && (&policy.LimitSet{}).Tier("pool", 1).Limits[f.ID()] != nil {
			t.Errorf("%s: a pool's tier sets it", f.Name)
		}
	}
	if want := []string{"max_concurrent", "max_requests", "max_tokens", "max_cost", "max_duration", "max_depth"}; !slices.Equal(run, want) {
		t.Errorf("run limits %v, want %v", run, want)
	}
	if slices.Contains(policy.LimitNames, "max_requests") {
		t.Errorf("LimitNames %v holds a run's limit", policy.LimitNames)
	}
	if _, err := policy.RunLimitsOf(map[string]*int64{"requests_per_minute": ptr(5)}); err == nil || !strings.Contains(err.Error(), `unknown field "requests_per_minute" in run`) {
		t.Errorf("RunLimitsOf(requests_per_minute) = %v", err)
	}
}

func TestRunLimitAndDepth(t *testing.T) {
	var none policy.Tier
	if none.RunLimit(policy.MaxRunRequests) != nil || none.RunMaxDepth() != policy.DefaultRunMaxDepth || policy.DefaultRunMaxDepth != 4 {
		t.Errorf("no run object: RunLimit %v, RunMaxDepth %d", none.RunLimit(policy.MaxRunRequests), none.RunMaxDepth())
	}
	run := policy.LimitSet{}
	run.Set(policy.MaxRunDepth.Field(), ptr(2))
	run.Set(policy.MaxConcurrent.Field(), ptr(3))
	tier := policy.Tier{Run: &run}
	tier.Limits.Set(policy.RequestsPerMinute.Field(), ptr(60))
	if got := tier.RunMaxDepth(); got != 2 {
		t.Errorf("RunMaxDepth = %d, want 2", got)
	}
	if got := tier.RunLimit(policy.MaxConcurrent); got == nil || *got != 3 {
		t.Errorf("RunLimit(MaxConcurrent) = %v, want 3", got)
	}
	if got := tier.RunLimit(policy.RequestsPerMinute); got != nil {
		t.Errorf("RunLimit(RequestsPerMinute) = %v: not a run's limit", *got)
	}
	if got := (&policy.Tier{Run: &policy.LimitSet{}}).RunMaxDepth(); got != 4 {
		t.Errorf("an empty run object: RunMaxDepth = %d, want 4", got)
	}
}

func TestSameLimitsComparesTheRunObject(t *testing.T) {
	empty := policy.LimitSet{}
	tiers := map[string]policy.Tier{
		"none":     {},
		"empty":    {Run: &empty},
		"required": {RunRequired: true},
		"both":     {Run: &empty, RunRequired: true},
	}
	for an, a := range tiers {
		for bn, b := range tiers {
			if got := policy.SameLimits(&a, &b); got != (an == bn) {
				t.Errorf("SameLimits(%s, %s) = %v", an, bn, got)
			}
		}
	}
}

func TestRunValidation(t *testing.T) {
	run := func(set map[policy.LimitID]int64) *policy.LimitSet {
		s := &policy.LimitSet{}
		for id, v := range set {
			s.Set(id.Field(), &v)
		}
		return s
	}
	for _, tc := range []struct {
		name string
		tier policy.Tier
		want string // the first problem's field and message; "" for none
	}{
		{"every limit", policy.Tier{Run: run(map[policy.LimitID]int64{policy.MaxRunRequests: 50, policy.MaxRunTokens: 200_000,
			policy.MaxRunCost: 2_000_000_000_000, policy.MaxRunDuration: 600, policy.MaxConcurrent: 4, policy.MaxRunDepth: 64})}, ""},
		{"empty", policy.Tier{Run: run(nil), RunRequired: true}, ""},
		{"required without a run object", policy.Tier{RunRequired: true}, "run.required: run.required needs a run object"},
		{"zero steps", policy.Tier{Run: run(map[policy.LimitID]int64{policy.MaxRunRequests: 0})}, ""},
		{"depth 0", policy.Tier{Run: run(map[policy.LimitID]int64{policy.MaxRunDepth: 0})},
			"run.max_depth: run.max_depth must be an integer from 1 to 64"},
		{"depth 65", policy.Tier{Run: run(map[policy.LimitID]int64{policy.MaxRunDepth: 65})},
			"run.max_depth: run.max_depth must be an integer from 1 to 64"},
		{"negative steps", policy.Tier{Run: run(map[policy.LimitID]int64{policy.MaxRunRequests: -1})},
			"run.max_requests: run.max_requests must be an integer from 0 to 2147483647"},
		{"negative cost", policy.Tier{Run: run(map[policy.LimitID]int64{policy.MaxRunCost: -1})},
			"run.max_cost: run.max_cost must be a dollar amount from $0.00 to"},
		{"duration", policy.Tier{Run: run(map[policy.LimitID]int64{policy.MaxRunDuration: policy.MaxLimit + 1})},
			"run.max_duration: run.max_duration must be an integer from 0 to 2147483647"},
		{"a tier's limit in the run", policy.Tier{Run: run(map[policy.LimitID]int64{policy.RequestsPerMinute: 5})},
			"run.requests_per_minute: run.requests_per_minute cannot be set here"},
		{"a run's limit in the tier's own", policy.Tier{Limits: *run(map[policy.LimitID]int64{policy.MaxRunRequests: 5})},
			"max_requests: max_requests cannot be set here: it is a limit of a run"},
		{"a run's limit in the account's", policy.Tier{Account: run(map[policy.LimitID]int64{policy.MaxRunDepth: 2})},
			"account.max_depth: account.max_depth cannot be set here"},
	} {
		tc.tier.Name = "agents"
		errs := tc.tier.ValidateFields()
		if tc.want == "" {
			if len(errs) > 0 {
				t.Errorf("%s: %v, want valid", tc.name, errs)
			}
			continue
		}
		if len(errs) == 0 || !strings.HasPrefix(errs[0].Field+": "+errs[0].Message, tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, errs, tc.want)
		}
	}
	// A user's record cannot override a run's limit either.
	rec := policy.UserRecord{UserID: "u"}
	rec.Limits.Set(policy.MaxRunTokens.Field(), policy.To(5))
	if errs := rec.ValidateFields(); len(errs) != 1 || errs[0].Field != "max_tokens" {
		t.Errorf("a record overriding max_tokens: %v", errs)
	}
}

func TestRunWording(t *testing.T) {
	run := &policy.LimitSet{}
	run.Set(policy.MaxRunRequests.Field(), ptr(50))
	run.Set(policy.MaxRunCost.Field(), ptr(2_000_000_000_000))
	run.Set(policy.MaxRunDepth.Field(), ptr(3))
	before := policy.Tier{Name: "agents"}
	after := policy.Tier{Name: "agents", Run: run, RunRequired: true}
	if got, want := policy.TierDiff(&before, &after), []string{
		"run.max_requests: none → 50", "run.max_cost: none → $2.00", "run.max_depth: none → 3", "run.required: false → true",
	}; !slices.Equal(got, want) {
		t.Errorf("TierDiff = %q, want %q", got, want)
	}
	if got, want := policy.TierDiff(&before, &policy.Tier{Run: &policy.LimitSet{}}), []string{"run: none → no limits"}; !slices.Equal(got, want) {
		t.Errorf("TierDiff adding an empty run object = %q, want %q", got, want)
	}
	if got, want := policy.TierSummary(&after), "; run 50 steps, $2.00 spend, depth 3, required"; !strings.HasSuffix(got, want) {
		t.Errorf("TierSummary = %q, want it to end %q", got, want)
	}
	if got := policy.TierSummary(&before); strings.Contains(got, "run") {
		t.Errorf("TierSummary of a tier without a run object = %q", got)
	}
}
