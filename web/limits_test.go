package web_test

import (
	"net/http"
	"net/url"
	"testing"
)

// The tier form refuses limits that cannot all bind, with the message
// beside the longer window's field, in the words of the JSON API, and
// changes nothing.
func TestAdminPageTierLimitsMustBind(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	for _, tc := range []struct {
		name   string
		set    map[string]string
		field  string
		want   string
		create bool
	}{
		{"hour below minute", map[string]string{"requests_per_hour": "9"}, "requests_per_hour",
			"requests_per_hour (9) is below requests_per_minute (10): the hour would refuse first", false},
		{"tokens: day below minute, no hour", map[string]string{"tokens_per_minute": "500", "tokens_per_day": "400"}, "tokens_per_day",
			"tokens_per_day (400) is below tokens_per_minute (500): the day would refuse first", false},
		{"shadow", map[string]string{"shadow.requests_per_minute": "5", "shadow.requests_per_hour": "50", "shadow.requests_per_day": "40", "shadow.burst_allowance": "0"},
			"shadow.requests_per_day", "shadow.requests_per_day (40) is below shadow.requests_per_hour (50): the day would refuse first", false},
		{"create", map[string]string{"name": "team", "requests_per_minute": "5", "requests_per_hour": "50", "requests_per_day": "10", "burst_allowance": "0"},
			"requests_per_day", "requests_per_day (10) is below requests_per_hour (50): the day would refuse first", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.tier("free") // 10/min, 100/hour, 1,000/day
			form, path := pageTierForm(before), "/admin/tiers/free"
			if tc.create {
				form, path = url.Values{}, "/admin/tiers"
			}
			for k, v := range tc.set {
				form.Set(k, v)
			}
			doc := parsePage(t, b.post(path, form), http.StatusBadRequest)
			id := "tier-" + pageFieldID(tc.field)
			if got := doc.text(id + "-error"); got != tc.want {
				t.Errorf("beside %s: %q, want %q", tc.field, got, tc.want)
			}
			if after := e.tier("free"); !after.UpdatedAt.Equal(before.UpdatedAt) {
				t.Error("a refused form changed the tier")
			}
			if _, err := e.svc.Tier(t.Context(), "team"); err == nil {
				t.Error("a refused form created the tier")
			}
		})
	}
}

// The record form checks the overrides on the tier the record assigns,
// and says so beside the field the admin set.
func TestRecordFormLimitsMustBind(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	for _, tc := range []struct {
		name  string
		form  url.Values
		field string
		want  string
	}{
		{"below the tier's minute", url.Values{"user_id": {"dora"}, "tier": {"pro"}, "requests_per_hour": {"30"}}, "requests_per_hour",
			"requests_per_hour (30) is below requests_per_minute (60): the hour would refuse first"},
		{"above the tier's hour", url.Values{"user_id": {"dora"}, "tier": {"free"}, "requests_per_minute": {"101"}}, "requests_per_minute",
			"requests_per_hour (100) is below requests_per_minute (101): the hour would refuse first"},
		{"no tier: among themselves", url.Values{"user_id": {"dora"}, "tokens_per_minute": {"10"}, "tokens_per_hour": {"5"}}, "tokens_per_hour",
			"tokens_per_hour (5) is below tokens_per_minute (10): the hour would refuse first"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := parsePage(t, b.post("/admin/users/save", tc.form), http.StatusBadRequest)
			if got := doc.text("record-" + tc.field + "-error"); got != tc.want {
				t.Errorf("beside %s: %q, want %q", tc.field, got, tc.want)
			}
			if _, err := e.svc.User(t.Context(), "dora"); err == nil {
				t.Error("a refused form stored the record")
			}
		})
	}
}

// pageFieldID is the id the tier form gives field's control, after "tier-".
func pageFieldID(field string) string {
	id := []byte(field)
	for i, c := range id {
		if c == '_' || c == '.' {
			id[i] = '-'
		}
	}
	return string(id)
}
