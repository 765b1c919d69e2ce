package policy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/policyguard/policyguard/policy"
)

func TestTierAllowsModel(t *testing.T) {
	for _, tc := range []struct {
		models []string
		model  string
		want   bool
	}{
		{nil, "gpt-4o", true},
		{nil, "", true},
		{[]string{}, "gpt-4o", false},
		{[]string{}, "", false},
		{[]string{"gpt-4o"}, "gpt-4o", true},
		{[]string{"gpt-4o"}, "gpt-4o-mini", false},
		{[]string{"gpt-4o"}, "GPT-4o", false},
		{[]string{"gpt-4o"}, "gpt-4", false},
		{[]string{"gpt-4o-mini*"}, "gpt-4o-mini", true},
		{[]string{"gpt-4o-mini*"}, "gpt-4o-mini-2024-07-18", true},
		{[]string{"gpt-4o-mini*"}, "gpt-4o", false},
		{[]string{"gpt-4o-mini*"}, "xgpt-4o-mini", false},
		{[]string{"*"}, "anything", true},
		{[]string{"*"}, "", true},
		{[]string{"o3", "claude-*"}, "claude-sonnet-4-5", true},
		{[]string{"o3", "claude-*"}, "o3", true},
		{[]string{"o3", "claude-*"}, "o3-mini", false},
		{[]string{"o3", "claude-*"}, "claude", false},
	} {
		tier := policy.Tier{Name: "a", Models: tc.models}
		if got := tier.AllowsModel(tc.model); got != tc.want {
			t.Errorf("models %q: AllowsModel(%q) = %v, want %v", tc.models, tc.model, got, tc.want)
		}
	}
}

func TestTierModelsValidation(t *testing.T) {
	for _, models := range [][]string{
		nil,
		{},
		{"*"},
		{"gpt-4o", "gpt-4o-mini*", "o3", "claude-3-5-sonnet@20240620", "models/gemini-2.0-flash"},
		{strings.Repeat("m", policy.MaxModelName)},
		{strings.Repeat("m", policy.MaxModelName-1) + "*"},
		manyModels(policy.MaxModels),
	} {
		tier := policy.Tier{Name: "a", Models: models}
		if errs := tier.ValidateFields(); len(errs) != 0 {
			t.Errorf("models %.60q: %v", models, errs)
		}
	}
	for _, tc := range []struct {
		models []string
		want   string
	}{
		{[]string{""}, `models[0]: "" must be 1 to 128 printable ASCII characters without spaces`},
		{[]string{"ok", "two words"}, `models[1]: "two words" must be 1 to 128 printable ASCII characters without spaces`},
		{[]string{"tab\tbed"}, `models[0]: "tab?bed" must be 1 to 128 printable ASCII characters`},
		{[]string{"modèle"}, `models[0]: "modèle" must be 1 to 128 printable ASCII characters`},
		{[]string{"del\x7f"}, `models[0]: "del?" must be 1 to 128`},
		{[]string{strings.Repeat("m", policy.MaxModelName+1)}, `must be 1 to 128 printable ASCII characters`},
		{[]string{"a", "b", "*gpt"}, `models[2]: "*gpt" has a "*" before its end; "*" may only end a name`},
		{[]string{"gpt-*-mini"}, `models[0]: "gpt-*-mini" has a "*" before its end`},
		{[]string{"gpt**"}, `models[0]: "gpt**" has a "*" before its end`},
		{[]string{"o3", "gpt-4o", "o3"}, `models[2]: "o3" is listed twice, first as models[0]`},
		{[]string{"*", "*"}, `models[1]: "*" is listed twice, first as models[0]`},
		{manyModels(policy.MaxModels + 1), `models must list at most 256 names, not 257`},
	} {
		tier := policy.Tier{Name: "a", Models: tc.models}
		errs := tier.ValidateFields()
		if len(errs) != 1 || errs[0].Field != "models" || !strings.Contains(errs[0].Message, tc.want) {
			t.Errorf("models %.60q: errors %v, want one on models containing %q", tc.models, errs, tc.want)
		}
		if err := tier.Validate(); policy.ErrorCode(err) != policy.EINVALID {
			t.Errorf("models %.60q: Validate = %v, want EINVALID", tc.models, err)
		}
	}
}

func manyModels(n int) []string {
	models := make([]string, n)
	for i := range models {
		models[i] = fmt.Sprintf("model-%d", i)
	}
	return models
}

// Any model (nil) and no model (empty) are different tiers, and so are two
// lists: SameLimits tells them apart, so an import that changes only the
// models is not skipped as unchanged.
func TestSameLimitsComparesModels(t *testing.T) {
	base := policy.Tier{Name: "a", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(1)), policy.RequestsPerDay: new(int64(1))}}
	with := func(models []string) *policy.Tier { c := base; c.Models = models; return &c }
	for _, tc := range []struct {
		a, b []string
		same bool
	}{
		{nil, nil, true},
		{[]string{}, []string{}, true},
		{[]string{"o3"}, []string{"o3"}, true},
		{nil, []string{}, false},
		{nil, []string{"*"}, false},
		{[]string{"o3"}, []string{"o3*"}, false},
		{[]string{"o3", "o4"}, []string{"o4", "o3"}, false},
	} {
		if got := policy.SameLimits(with(tc.a), with(tc.b)); got != tc.same {
			t.Errorf("SameLimits(models %q, models %q) = %v, want %v", tc.a, tc.b, got, tc.same)
		}
	}
}

// The wording of a tier and of a change says what a tier's models are:
// nothing for any model (as the seeded tiers always read), "no models" for
// none, else the list.
func TestModelsWording(t *testing.T) {
	base := policy.Tier{Name: "a", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(5)), policy.RequestsPerHour: new(int64(50)), policy.RequestsPerDay: new(int64(500))}, Features: []string{"chat"}}
	with := func(models []string) *policy.Tier { c := base; c.Models = models; return &c }
	for _, tc := range []struct {
		models []string
		want   string
	}{
		{nil, "5/min (+0 burst), 50/hour, 500/day; chat"},
		{[]string{}, "5/min (+0 burst), 50/hour, 500/day; chat; no models"},
		{[]string{"gpt-4o*", "o3"}, "5/min (+0 burst), 50/hour, 500/day; chat; models gpt-4o*, o3"},
	} {
		if got := policy.TierSummary(with(tc.models)); got != tc.want {
			t.Errorf("TierSummary(models %q) = %q, want %q", tc.models, got, tc.want)
		}
	}
	for _, tc := range []struct {
		before, after []string
		want          string
	}{
		{[]string{"gpt-4o*"}, nil, "models: [gpt-4o*] → any"},
		{nil, []string{}, "models: any → none"},
		{[]string{"o3"}, []string{"o3", "gpt-4o*"}, "models: [o3] → [o3, gpt-4o*]"},
		{nil, nil, "saved without a change"},
	} {
		if got := strings.Join(policy.TierDiff(with(tc.before), with(tc.after)), "; "); got != tc.want {
			t.Errorf("TierDiff(models %q → %q) = %q, want %q", tc.before, tc.after, got, tc.want)
		}
	}
}

// The models of a tier survive every path a tier takes through the
// service: put, import, a user's overrides and a promotion of its shadow.
func TestServiceKeepsModels(t *testing.T) {
	ctx := context.Background()
	svc, st, _ := newService(t)
	models := []string{"gpt-4o-mini*"}
	team := policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(5)), policy.RequestsPerHour: new(int64(50)), policy.RequestsPerDay: new(int64(500))}, Models: models, Shadow: &policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(2)), policy.RequestsPerHour: new(int64(50)), policy.RequestsPerDay: new(int64(500))}}}
	if _, _, err := svc.PutTier(ctx, team); err != nil {
		t.Fatal(err)
	}
	stored, err := st.Tier(ctx, "team")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(stored.Models) != fmt.Sprint(models) {
		t.Fatalf("stored models %q, want %q", stored.Models, models)
	}
	two := int64(2)
	if o := stored.WithOverrides(policy.Overrides{policy.RequestsPerMinute: policy.To(two)}); fmt.Sprint(o.Models) != fmt.Sprint(models) {
		t.Errorf("WithOverrides: models %q, want %q", o.Models, models)
	}
	promoted, err := svc.PromoteShadow(ctx, "team", &stored.UpdatedAt)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(promoted.Models) != fmt.Sprint(models) {
		t.Errorf("promoted models %q, want %q", promoted.Models, models)
	}
	// An import that changes only the models changes the tier.
	promoted.Models = nil
	changes, err := svc.ImportTiers(ctx, []policy.Tier{promoted}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 1 || changes[0].New.Models != nil {
		t.Fatalf("import of models nil: changes %+v", changes)
	}
	if got, _ := st.Tier(ctx, "team"); got.Models != nil {
		t.Errorf("after the import: models %q, want nil", got.Models)
	}
}
