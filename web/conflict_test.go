package web_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// Two admins edit the same tier: the second to save is told, keeps what
// they typed, and replaces the first one's change only by saving again.
func TestAdminPageEditConflict(t *testing.T) {
	e := newPageEnv(t)
	alice, bob := e.signIn(), e.signIn()

	// Both open the edit form of the seeded free tier.
	aliceRead := parsePage(t, alice.get("/admin/tiers/free"), http.StatusOK).hidden("version")
	bobRead := parsePage(t, bob.get("/admin/tiers/free"), http.StatusOK).hidden("version")
	if aliceRead != "0" || bobRead != "0" {
		t.Fatalf("edit forms of the seeded tier carry versions %q and %q, want 0", aliceRead, bobRead)
	}

	// Bob saves first.
	e.clock.Advance(time.Minute)
	bobs := pageTierForm(e.tier("free"))
	bobs.Set("requests_per_minute", "20")
	bobs.Set("version", bobRead)
	bob.follow(bob.post("/admin/tiers/free", bobs), "/admin")
	afterBob := e.tier("free")

	// Alice first types a mistake: the form comes back still based on
	// what she read, not on Bob's save.
	e.clock.Advance(time.Minute)
	alices := pageTierForm(policy.Tier{Name: "free", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(30)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(1000))}, Features: []string{"chat"}})
	alices.Set("version", aliceRead)
	alices.Set("requests_per_hour", "lots")
	invalid := parsePage(t, alice.post("/admin/tiers/free", alices), http.StatusBadRequest)
	if got := invalid.hidden("version"); got != aliceRead {
		t.Fatalf("the form sent back with errors carries version %q, want %q (what was read)", got, aliceRead)
	}

	// Corrected, her save is refused: Bob's change would be lost.
	alices.Set("requests_per_hour", "100")
	conflict := parsePage(t, alice.post("/admin/tiers/free", alices), http.StatusConflict)
	if got := e.tier("free"); got.Limits.Value(policy.RequestsPerMinute) != 20 || !got.UpdatedAt.Equal(afterBob.UpdatedAt) {
		t.Fatalf("a save on a stale read replaced the tier: %+v", got)
	}
	alert := conflict.alert()
	for _, want := range []string{"not saved", "someone else changed it", "Stored now: 20/min"} {
		if !strings.Contains(alert, want) {
			t.Errorf("alert %q does not say %q", alert, want)
		}
	}
	if got := pageValue(conflict.control("Requests per minute")); got != "30" {
		t.Errorf("Requests per minute shows %q, want what Alice typed, 30", got)
	}
	next := conflict.hidden("version")
	if want := pageTierVersion(afterBob); next != want {
		t.Fatalf("the conflict page carries version %q, want Bob's, %q", next, want)
	}

	// Having seen Bob's values, she saves again, and hers win.
	alices.Set("version", next)
	doc := alice.follow(alice.post("/admin/tiers/free", alices), "/admin")
	if got := doc.cell("tier-free", "requests_per_minute"); got != "30" {
		t.Errorf("after saving again: requests_per_minute %q, want 30", got)
	}
}

// A tier deleted while an admin had its edit form open stays deleted, and
// a save that does not say which version it edits changes nothing.
func TestAdminPageSaveNeedsTheTierAsRead(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	ctx := context.Background()
	gold := policy.Tier{Name: "gold", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(5)), policy.RequestsPerHour: new(int64(50)), policy.RequestsPerDay: new(int64(500))}}
	if _, _, err := e.svc.PutTier(ctx, gold); err != nil {
		t.Fatal(err)
	}
	version := parsePage(t, b.get("/admin/tiers/gold"), http.StatusOK).hidden("version")
	if want := pageTierVersion(e.tier("gold")); version != want {
		t.Fatalf("edit form version %q, want %q", version, want)
	}
	if err := e.svc.DeleteTier(ctx, "gold"); err != nil {
		t.Fatal(err)
	}
	form := pageTierForm(gold)
	form.Set("version", version)
	parsePage(t, b.post("/admin/tiers/gold", form), http.StatusNotFound)
	if _, err := e.svc.Tier(ctx, "gold"); policy.ErrorCode(err) != policy.ENOTFOUND {
		t.Fatalf("a save brought back a deleted tier: %v", err)
	}

	for _, version := range []string{"", "yesterday", "-5"} {
		form := pageTierForm(e.tier("free"))
		form.Set("requests_per_minute", "1")
		if version == "" {
			form.Del("version")
		} else {
			form.Set("version", version)
		}
		doc := parsePage(t, b.post("/admin/tiers/free", form), http.StatusBadRequest)
		if !strings.Contains(doc.raw, "does not say which version") {
			t.Errorf("version %q: the page does not say what is wrong:\n%s", version, doc.raw)
		}
		if got := e.tier("free").Limits.Value(policy.RequestsPerMinute); got != 10 {
			t.Fatalf("version %q: requests_per_minute %d, want 10", version, got)
		}
	}
}
