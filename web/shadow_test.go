package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// Preview answers with the figures and the form as typed, and saves
// nothing; a bad value is marked on its field and previews nothing.
func TestAdminPagePreview(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	for range 4 {
		e.check("p", "free")
		e.clock.Advance(time.Second)
	}
	before := e.tier("free")
	form := pageTierForm(before)
	form.Set("requests_per_minute", "1")
	form.Set("burst_allowance", "0")
	page := parsePage(t, b.post("/admin/tiers/free/preview", form), http.StatusOK)
	for id, want := range map[string]string{"preview-requests": "4", "preview-requests-refused": "3", "preview-refused-minute": "3", "preview-users-refused": "1"} {
		if got := page.text(id); got != want {
			t.Errorf("%s = %q, want %q", id, got, want)
		}
	}
	if got := pageValue(page.control("Requests per minute")); got != "1" {
		t.Errorf("the form shows %q after Preview, want what was typed", got)
	}
	if got := page.hidden("version"); got != pageTierVersion(before) {
		t.Errorf("the form after Preview carries version %q, want the one read", got)
	}
	if got := e.tier("free"); !policy.SameLimits(&got, &before) {
		t.Fatalf("Preview changed the tier: %+v", got)
	}
	form.Set("shadow.requests_per_hour", "ten")
	bad := parsePage(t, b.post("/admin/tiers/free/preview", form), http.StatusBadRequest)
	if got := bad.text("tier-shadow-requests-per-hour-error"); got != "shadow.requests_per_hour must be an integer from 0 to 2147483647" {
		t.Errorf("shadow field error %q", got)
	}
	if bad.byID("preview") != nil {
		t.Error("a form with errors was previewed")
	}
	form.Set("csrf", "forged")
	if rec := b.post("/admin/tiers/free/preview", form); rec.Code != http.StatusForbidden {
		t.Errorf("Preview without the CSRF token: %d, want 403", rec.Code)
	}
}

// Promote takes the shadow limits, unless the tier changed since the page
// was read; the audit log records it as an admin page change.
func TestAdminPagePromote(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	form := pageTierForm(e.tier("free"))
	for k, v := range map[string]string{"shadow.requests_per_minute": "2", "shadow.requests_per_hour": "20", "shadow.requests_per_day": "200", "shadow.burst_allowance": "1"} {
		form.Set(k, v)
	}
	b.follow(b.post("/admin/tiers/free", form), "/admin")
	e.clock.Advance(time.Minute)
	page := parsePage(t, b.get("/admin/tiers/free"), http.StatusOK)
	if got := page.text("shadow-heading"); !strings.Contains(got, "2/min (+1 burst), 20/hour, 200/day") {
		t.Fatalf("shadow section %q", got)
	}
	read := e.tier("free")
	stale := url.Values{"version": {pageTierVersion(policy.Tier{UpdatedAt: read.UpdatedAt.Add(-time.Second)})}}
	conflict := parsePage(t, b.post("/admin/tiers/free/promote", stale), http.StatusConflict)
	if !strings.Contains(conflict.alert(), "not promoted") {
		t.Errorf("alert %q", conflict.alert())
	}
	done := b.follow(b.post("/admin/tiers/free/promote", url.Values{"version": {pageTierVersion(read)}}), "/admin")
	if !strings.HasPrefix(done.flash(), "Promoted the shadow limits of tier free") {
		t.Errorf("flash %q", done.flash())
	}
	if got := e.tier("free"); got.Shadow != nil || got.Limits.Value(policy.RequestsPerMinute) != 2 || got.Limits.Value(policy.BurstAllowance) != 1 || got.Limits.Value(policy.RequestsPerDay) != 200 {
		t.Fatalf("promoted tier %+v", got)
	}
	none := parsePage(t, b.post("/admin/tiers/free/promote", url.Values{"version": {pageTierVersion(e.tier("free"))}}), http.StatusBadRequest)
	if !strings.Contains(none.alert(), "no shadow limits") {
		t.Errorf("promote without shadow: alert %q", none.alert())
	}
}
