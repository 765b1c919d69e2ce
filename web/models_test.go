package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/policyguard/policyguard/policy"
)

// The tier form's Models field: comma-separated names, empty for any
// model, "none" for none; the edit form shows a tier's models so that
// saving it unchanged keeps them, and the tiers table shows them.
func TestAdminPageTierModels(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()

	form := url.Values{"name": {"team"}, "requests_per_minute": {"5"}, "requests_per_hour": {"50"},
		"requests_per_day": {"500"}, "burst_allowance": {"0"}, "features": {"chat"}, "models": {" gpt-4o-mini* , o3,, "}, "description": {""}}
	doc := b.follow(b.post("/admin/tiers", form), "/admin")
	if got := fmt.Sprintf("%#v", e.tier("team").Models); got != `[]string{"gpt-4o-mini*", "o3"}` {
		t.Fatalf("created team with models %s", got)
	}
	if got := doc.cell("tier-team", "models"); got != "gpt-4o-mini* o3" {
		t.Errorf("table shows models %q, want the two names", got)
	}
	if got := doc.cell("tier-free", "models"); got != "any" {
		t.Errorf("table shows the seeded free tier's models as %q, want any", got)
	}

	for _, tc := range []struct {
		name   string
		typed  string   // in the Models field
		stored []string // the tier's models after the save
		shown  string   // in the table
	}{
		{"none", "none", []string{}, "none"},
		{"none in capitals", " NONE ", []string{}, "none"},
		{"empty", "", nil, "any"},
		{"only commas", " , ", nil, "any"},
		{"a lone star", "*", []string{"*"}, "*"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			form := pageTierForm(e.tier("team"))
			form.Set("models", tc.typed)
			doc := b.follow(b.post("/admin/tiers/team", form), "/admin")
			got := e.tier("team").Models
			if (got == nil) != (tc.stored == nil) || fmt.Sprint(got) != fmt.Sprint(tc.stored) {
				t.Fatalf("stored models %#v, want %#v", got, tc.stored)
			}
			if got := doc.cell("tier-team", "models"); got != tc.shown {
				t.Errorf("table shows %q, want %q", got, tc.shown)
			}
			// The edit form shows them so that saving it again, untouched,
			// changes nothing: no model stays no model.
			edit := parsePage(t, b.get("/admin/tiers/team"), http.StatusOK)
			again := pageTierForm(e.tier("team"))
			again.Set("models", pageValue(edit.control("Models")))
			b.follow(b.post("/admin/tiers/team", again), "/admin")
			if after := e.tier("team").Models; (after == nil) != (tc.stored == nil) || fmt.Sprint(after) != fmt.Sprint(tc.stored) {
				t.Errorf("saving the edit form untouched (Models %q) made models %#v, want %#v", pageValue(edit.control("Models")), after, tc.stored)
			}
		})
	}
}

// A bad name is shown beside the Models field in the API's words, and the
// tier is not changed.
func TestAdminPageTierModelsValidation(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	for _, tc := range []struct{ typed, want string }{
		{"gpt-4o, *gpt", `models[1]: "*gpt" has a "*" before its end; "*" may only end a name`},
		{"o3, o3", `models[1]: "o3" is listed twice, first as models[0]`},
		{"gpt 4o", `models[0]: "gpt 4o" must be 1 to 128 printable ASCII characters without spaces`},
	} {
		form := pageTierForm(e.tier("free"))
		form.Set("models", tc.typed)
		doc := parsePage(t, b.post("/admin/tiers/free", form), http.StatusBadRequest)
		if got := doc.text("tier-models-error"); got != tc.want {
			t.Errorf("%q: beside Models %q, want %q", tc.typed, got, tc.want)
		}
		if got := pageValue(doc.control("Models")); got != tc.typed {
			t.Errorf("%q: Models shows %q, want what was typed", tc.typed, got)
		}
	}
	if got := e.tier("free").Models; got != nil {
		t.Errorf("an invalid form changed the models: %#v", got)
	}
}

// The audit log words a change of models.
func TestAdminPageChangesWordModels(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	ctx := context.Background()
	team := policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(5)), policy.RequestsPerHour: new(int64(50)), policy.RequestsPerDay: new(int64(500))}, Models: []string{"gpt-4o*"}}
	if _, _, err := e.svc.PutTier(ctx, team); err != nil {
		t.Fatal(err)
	}
	team.Models = nil
	if _, _, err := e.svc.PutTier(ctx, team); err != nil {
		t.Fatal(err)
	}
	rows := changeRows(parsePage(t, b.get("/admin"), http.StatusOK))
	if len(rows) != 2 {
		t.Fatalf("changes %v, want two", rows)
	}
	if got := rows[0]["details"]; !strings.HasPrefix(got, "models: [gpt-4o*] → any") {
		t.Errorf("the update reads %q, want models: [gpt-4o*] → any", got)
	}
	if got := rows[1]["details"]; !strings.HasPrefix(got, "5/min (+0 burst), 50/hour, 500/day; no features; models gpt-4o*") {
		t.Errorf("the creation reads %q", got)
	}
}
