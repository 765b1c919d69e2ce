package web_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/policyguard/policyguard/policy"
)

// The tier form carries the tier's run object as it does its account
// object: a checkbox, a field per run limit (max_cost in dollars) whose
// empty value sets none, and "Run required". It round-trips, refuses bad
// run limits beside their field in the words of Tier.ValidateFields and
// run limits typed without the checkbox; the tiers table and the audit log
// word it.
func TestAdminPageTierRunFields(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	doc := parsePage(t, b.get("/admin/tiers/free"), http.StatusOK)
	for _, label := range []string{"Run budget for each agent run", "Run required"} {
		if box := doc.control(label); pageAttr(box, "type") != "checkbox" || pageHasAttr(box, "checked") {
			t.Fatalf("%s of a tier without a run object: type %q, checked %v", label, pageAttr(box, "type"), pageHasAttr(box, "checked"))
		}
	}
	for f := range policy.FieldsIn(policy.ScopeRun) {
		label := "Run: " + strings.ToLower(f.Label[:1]) + f.Label[1:]
		if c := doc.control(label); pageAttr(c, "name") != "run."+f.Name || pageValue(c) != "" {
			t.Errorf("%s: name %q value %q", label, pageAttr(c, "name"), pageValue(c))
		}
	}

	form := pageTierForm(e.tier("free"))
	form.Set("run", "on")
	form.Set("run.max_requests", "50")
	form.Set("run.max_cost", " $2.50 ")
	form.Set("run.max_depth", "3")
	form.Set("run.required", "on")
	b.follow(b.post("/admin/tiers/free", form), "/admin")
	stored := e.tier("free")
	if r := stored.Run; r == nil || !stored.RunRequired || *stored.RunLimit(policy.MaxRunRequests) != 50 ||
		*stored.RunLimit(policy.MaxRunCost) != 2_500_000_000_000 || stored.RunMaxDepth() != 3 || stored.RunLimit(policy.MaxRunTokens) != nil {
		t.Fatalf("stored run %v, required %v", r, stored.RunRequired)
	}
	doc = parsePage(t, b.get("/admin/tiers/free"), http.StatusOK)
	for _, label := range []string{"Run budget for each agent run", "Run required"} {
		if !pageHasAttr(doc.control(label), "checked") {
			t.Errorf("%s is not ticked for a tier with a run object that requires runs", label)
		}
	}
	for label, want := range map[string]string{"Run: max steps": "50", "Run: max spend": "$2.50", "Run: max depth": "3", "Run: max tokens": "", "Run: max concurrent calls": ""} {
		if got := pageValue(doc.control(label)); got != want {
			t.Errorf("edit form %s %q, want %q", label, got, want)
		}
	}
	page := b.get("/admin").Body.String()
	for _, want := range []string{"run.max_requests: none → 50", "run.max_cost: none → $2.50", "run.required: false → true", "50 steps, $2.50 spend, depth 3, required"} {
		if !strings.Contains(page, want) {
			t.Errorf("the tiers page does not say %q", want)
		}
	}

	for _, tc := range []struct {
		set         map[string]string
		field, want string
	}{
		{map[string]string{"run": "on", "run.max_depth": "0"}, "run.max_depth", "run.max_depth must be an integer from 1 to 64"},
		{map[string]string{"run": "on", "run.max_cost": "-1"}, "run.max_cost", "run.max_cost must be a dollar amount from $0.00 to $9223372.036854775807"},
		{map[string]string{"run.max_requests": "5"}, "run", "tick this box to give the tier a run budget, or empty the run fields below"},
		{map[string]string{"run.required": "on"}, "run.required", "run.required needs a run object (one with no limits will do)"},
	} {
		before := e.tier("free")
		form := pageTierForm(before)
		for k, v := range tc.set {
			form.Set(k, v)
		}
		doc := parsePage(t, b.post("/admin/tiers/free", form), http.StatusBadRequest)
		if got := doc.text("tier-" + pageFieldID(tc.field) + "-error"); got != tc.want {
			t.Errorf("beside %s: %q, want %q", tc.field, got, tc.want)
		}
		if after := e.tier("free"); !after.UpdatedAt.Equal(before.UpdatedAt) {
			t.Errorf("%v changed the tier", tc.set)
		}
	}

	// Unticked, the tier has none.
	b.follow(b.post("/admin/tiers/free", pageTierForm(e.tier("free"))), "/admin")
	if got := e.tier("free"); got.Run != nil || got.RunRequired {
		t.Fatalf("unticked, the tier keeps run %v, required %v", got.Run, got.RunRequired)
	}
	if page := b.get("/admin").Body.String(); !strings.Contains(page, "run.max_requests: 50 → none") || !strings.Contains(page, "run.required: true → false") {
		t.Error("the audit log does not word the run object's removal")
	}
}
