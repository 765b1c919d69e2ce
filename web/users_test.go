package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/policyguard/policyguard/policy"
)

// The record form on the look-up page: save an assignment and overrides,
// see them decide the next check, be told what is wrong with a bad value
// without anything changing, find the user in the list, and remove the
// record. The form needs the session's CSRF token like every other.
func TestRecordForm(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	ctx := context.Background()
	doc := parsePage(t, b.get("/admin/usage?user_id=carol"), http.StatusOK)
	if got := doc.text("record-heading"); got != "Record of user carol" {
		t.Fatalf("record heading %q", got)
	}
	if got := doc.cell("record", "record-summary"); !strings.HasPrefix(got, "No record") {
		t.Fatalf("summary before: %q", got)
	}
	form := url.Values{"user_id": {"carol"}, "tier": {"pro"}, "requests_per_minute": {"1"}, "burst_allowance": {"0"},
		"tokens_per_day": {"none"}, "note": {"pilot customer"}}
	if rec := b.post("/admin/users/save", url.Values{"user_id": {"carol"}, "csrf": {"wrong"}}); rec.Code != http.StatusForbidden {
		t.Fatalf("save without the CSRF token: %d", rec.Code)
	}
	doc = b.follow(b.post("/admin/users/save", form), "/admin/usage?user_id=carol")
	if got := doc.flash(); !strings.Contains(got, "Created the record of user carol") {
		t.Fatalf("flash %q", got)
	}
	if got, want := doc.cell("record", "record-summary"), "tier pro; requests_per_minute 1; burst_allowance 0; tokens_per_day none"; got != want {
		t.Fatalf("summary %q, want %q", got, want)
	}
	if got := pageValue(doc.control("requests_per_minute")); got != "1" {
		t.Fatalf("the form shows requests_per_minute %q", got)
	}
	r, err := e.svc.User(ctx, "carol")
	if err != nil || r.Tier != "pro" || r.Note != "pilot customer" || !r.Limits[policy.TokensPerDay].Set || r.Limits[policy.TokensPerDay].Limit != nil {
		t.Fatalf("stored %+v, %v", r, err)
	}
	if got := e.check("carol", "free"); got != "admitted" {
		t.Fatalf("first check: %s", got)
	}
	if got := e.check("carol", "free"); got != "minute" {
		t.Fatalf("second check under the 1/min override: %s", got)
	}

	for _, tc := range []struct{ field, value, want string }{
		{"requests_per_hour", "-3", "requests_per_hour must be an integer from 0 to 2147483647"},
		{"requests_per_day", "none", "requests_per_day must be an integer"},
		{"tier", "gold", `unknown tier "gold"`},
	} {
		bad := url.Values{}
		for k, v := range form {
			bad[k] = v
		}
		bad.Set(tc.field, tc.value)
		doc := parsePage(t, b.post("/admin/users/save", bad), http.StatusBadRequest)
		if got := doc.text("record-" + tc.field + "-error"); !strings.Contains(got, tc.want) {
			t.Errorf("%s=%s: error %q, want %q", tc.field, tc.value, got, tc.want)
		}
		if got := pageValue(doc.control("requests_per_minute")); got != "1" {
			t.Errorf("%s=%s: the form lost what was typed: %q", tc.field, tc.value, got)
		}
	}
	if r2, _ := e.svc.User(ctx, "carol"); !r2.UpdatedAt.Equal(r.UpdatedAt) {
		t.Fatal("a refused form changed the record")
	}

	doc = parsePage(t, b.get("/admin/usage"), http.StatusOK)
	if !strings.Contains(doc.raw, `href="/admin/usage?user_id=carol"`) || !strings.Contains(doc.raw, "pilot customer") {
		t.Fatal("carol is not in the list of users with records")
	}
	doc = b.follow(b.post("/admin/users/delete", url.Values{"user_id": {"carol"}}), "/admin/usage?user_id=carol")
	if got := doc.cell("record", "record-summary"); !strings.HasPrefix(got, "No record") {
		t.Fatalf("summary after removal: %q", got)
	}
	if !strings.Contains(doc.raw, "No user has a record") {
		t.Fatal("the list still shows a record")
	}
}
