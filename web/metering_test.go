package web_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/policyguard/policyguard/policy"
)

// The tier form carries the metering limits: a number sets one, an empty
// field means no limit, and a bad value is refused beside its field with
// the JSON API's words. The audit log names what changed.
func TestAdminPageMeteringLimits(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()

	form := pageTierForm(e.tier("free"))
	form.Set("tokens_per_minute", " 1000 ")
	form.Set("tokens_per_hour", "")
	form.Set("max_concurrent", "2")
	b.follow(b.post("/admin/tiers/free", form), "/admin")
	got := e.tier("free")
	if got.Limits[policy.TokensPerMinute] == nil || *got.Limits[policy.TokensPerMinute] != 1000 || got.Limits[policy.MaxConcurrent] == nil || *got.Limits[policy.MaxConcurrent] != 2 ||
		got.Limits[policy.TokensPerHour] != nil || got.Limits[policy.TokensPerDay] != nil {
		t.Fatalf("stored %+v, want 1000 tokens a minute, 2 at once and nothing else", got)
	}
	edit := parsePage(t, b.get("/admin/tiers/free"), http.StatusOK)
	for label, want := range map[string]string{"Tokens per minute": "1000", "Tokens per hour": "", "Tokens per day": "", "Max concurrent calls": "2"} {
		if got := pageValue(edit.control(label)); got != want {
			t.Errorf("edit form %s %q, want %q", label, got, want)
		}
	}
	page := b.get("/admin").Body.String()
	for _, want := range []string{"tokens_per_minute: none → 1,000", "max_concurrent: none → 2"} {
		if !strings.Contains(page, want) {
			t.Errorf("the audit log does not say %q", want)
		}
	}

	// Emptied, the field sets no limit again.
	form = pageTierForm(e.tier("free"))
	form.Set("tokens_per_minute", "")
	form.Set("max_concurrent", "2")
	b.follow(b.post("/admin/tiers/free", form), "/admin")
	if got := e.tier("free"); got.Limits[policy.TokensPerMinute] != nil || got.Limits[policy.MaxConcurrent] == nil {
		t.Fatalf("stored %+v, want no token limit and 2 at once", got)
	}

	for _, bad := range []struct{ field, value string }{
		{"tokens_per_minute", "ten"}, {"tokens_per_hour", "-1"}, {"tokens_per_day", "1.5"}, {"max_concurrent", "2147483648"},
	} {
		before := e.tier("free")
		form := pageTierForm(before)
		form.Set(bad.field, bad.value)
		doc := parsePage(t, b.post("/admin/tiers/free", form), http.StatusBadRequest)
		id := "tier-" + strings.ReplaceAll(bad.field, "_", "-")
		if got, want := doc.text(id+"-error"), bad.field+" must be an integer from 0 to 2147483647"; got != want {
			t.Errorf("%s %q: beside the field %q, want %q", bad.field, bad.value, got, want)
		}
		if after := e.tier("free"); !after.UpdatedAt.Equal(before.UpdatedAt) {
			t.Errorf("%s %q changed the tier", bad.field, bad.value)
		}
	}
}

// The tiers table has a column for every limit of the table, and one for
// the pooled limits of the accounts on each tier: a limit seen only by
// opening a tier's form is one an admin misses.
func TestTiersTableShowsEveryLimit(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	tier := e.tier("free")
	// value is the limit of row i, and want its cell: a spend limit in
	// dollars.
	value := func(i int) (int64, string) {
		if policy.LimitFields[i].Kind == policy.KindCost {
			return int64(i+1) * 1_000_000_000_000, fmt.Sprintf("$%d.00", i+1)
		}
		return int64(1000 * (i + 1)), policy.GroupDigits(int64(1000 * (i + 1)))
	}
	for f := range policy.FieldsIn(policy.ScopeTier) {
		v, _ := value(int(f.ID()))
		f.Set(&tier, &v)
	}
	tier.Account = &policy.LimitSet{policy.RequestsPerMinute: new(int64(50)), policy.TokensPerDay: new(int64(9000))}
	tier.Models = []string{"gpt-4o-mini*"}
	if _, err := e.svc.ReplaceTier(context.Background(), tier, tier.UpdatedAt); err != nil {
		t.Fatal(err)
	}
	page := parsePage(t, b.get("/admin"), http.StatusOK)
	for f := range policy.FieldsIn(policy.ScopeTier) {
		_, want := value(int(f.ID()))
		if got := page.cell("tier-free", f.Name); got != want {
			t.Errorf("%s: the tiers table shows %q, want %q", f.Name, got, want)
		}
	}
	if got, want := page.cell("tier-free", "account"), "50/min, 9,000 tokens/day"; got != want {
		t.Errorf("pooled limits: %q, want %q", got, want)
	}
	if got := page.cell("tier-pro", "account"); got != "none" {
		t.Errorf("a tier without pooled limits shows %q", got)
	}
	if got := page.cell("tier-free", "models"); got != "gpt-4o-mini*" {
		t.Errorf("models: %q", got)
	}
}
