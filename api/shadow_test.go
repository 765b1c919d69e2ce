package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api/client"
)

const shadowTier = `{"requests_per_minute":100,"requests_per_hour":1000,"requests_per_day":10000,"burst_allowance":0,` +
	`"shadow":{"requests_per_minute":2,"requests_per_hour":1000,"requests_per_day":10000,"burst_allowance":0}}`

func TestTierShadowValidation(t *testing.T) {
	e := newEnv(t)
	limits := `"requests_per_minute":1,"requests_per_hour":1,"requests_per_day":1,"burst_allowance":0`
	for _, tc := range []struct {
		name, body, want string
	}{
		{"minute negative", `{` + limits + `,"shadow":{"requests_per_minute":-1,"requests_per_hour":1,"requests_per_day":1,"burst_allowance":0}}`, "shadow.requests_per_minute must be an integer from 0 to 2147483647"},
		{"hour too big", `{` + limits + `,"shadow":{"requests_per_minute":1,"requests_per_hour":2147483648,"requests_per_day":1,"burst_allowance":0}}`, "shadow.requests_per_hour must be an integer from 0 to 2147483647"},
		{"day a string", `{` + limits + `,"shadow":{"requests_per_minute":1,"requests_per_hour":1,"requests_per_day":"1","burst_allowance":0}}`, "shadow.requests_per_day must be an integer from 0 to 2147483647"},
		{"burst missing", `{` + limits + `,"shadow":{"requests_per_minute":1,"requests_per_hour":1,"requests_per_day":1}}`, "shadow.burst_allowance is required"},
		{"unknown field", `{` + limits + `,"shadow":{"requests_per_minute":1,"requests_per_hour":1,"requests_per_day":1,"burst_allowance":0,"tokens":1}}`, "tokens"},
		{"not an object", `{` + limits + `,"shadow":5}`, "shadow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := e.do(http.MethodPut, "/v1/tiers/s", tc.body, true)
			if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), tc.want) {
				t.Fatalf("PUT: %d %s, want 400 naming %s", rec.Code, rec.Body, tc.want)
			}
			if rec := e.do(http.MethodGet, "/v1/tiers/s", "", true); rec.Code != http.StatusNotFound {
				t.Fatalf("a refused PUT stored the tier: %d %s", rec.Code, rec.Body)
			}
		})
	}
	// null is no shadow; a tier without one shows no shadow key.
	e.putTier("s", `{`+limits+`,"shadow":null}`)
	if rec := e.do(http.MethodGet, "/v1/tiers/s", "", true); strings.Contains(rec.Body.String(), "shadow") {
		t.Fatalf("GET without shadow: %s", rec.Body)
	}
	e.putTier("s", shadowTier)
	if rec := e.do(http.MethodGet, "/v1/tiers/s", "", true); !strings.Contains(rec.Body.String(), `"shadow":{"requests_per_minute":2,`) {
		t.Fatalf("GET with shadow: %s", rec.Body)
	}
}

func TestDecisionShadow(t *testing.T) {
	e := newEnv(t)
	e.putTier("shadowed", shadowTier)
	check := func(tier string) (int, string) {
		rec := e.do(http.MethodPost, "/v1/check", `{"context":{"user_id":"u","user_tier":"`+tier+`"}}`, false)
		e.clock.Advance(time.Millisecond)
		return rec.Code, rec.Body.String()
	}
	for i, want := range []string{
		`"shadow":{"allowed":true,"reason":null}`,
		`"shadow":{"allowed":true,"reason":null}`,
		`"shadow":{"allowed":false,"reason":"per-minute limit exceeded"}`,
		`"shadow":{"allowed":false,"reason":"per-minute limit exceeded"}`,
	} {
		code, body := check("shadowed")
		if code != http.StatusOK || !strings.Contains(body, want) || !strings.Contains(body, `"allowed":true,"reason":null`) {
			t.Fatalf("check %d: %d %s, want admitted with %s", i+1, code, body, want)
		}
	}
	if code, body := check("pro"); code != http.StatusOK || strings.Contains(body, "shadow") {
		t.Fatalf("a tier without shadow: %d %s, want no shadow key", code, body)
	}
	// Dry runs are not counted; the two refusals above are.
	e.do(http.MethodPost, "/v1/check?dry_run=true", `{"context":{"user_id":"u","user_tier":"shadowed"}}`, false)
	m := scrape(t, e.srv)
	if v, ok := m.value("policyguard_shadow_refusals_total", map[string]string{"tier": "shadowed", "window": "minute"}); !ok || v != 2 {
		t.Fatalf("policyguard_shadow_refusals_total{shadowed,minute} = %v (%v), want 2", v, ok)
	}
	if series := m.series("policyguard_shadow_refusals_total"); len(series) != 1 {
		t.Fatalf("shadow refusal series: %v, want only shadowed/minute", series)
	}
}

func TestPreviewStatuses(t *testing.T) {
	e := newEnv(t)
	e.putTier("lesson", `{"requests_per_minute":100,"requests_per_hour":1000,"requests_per_day":10000,"burst_allowance":0}`)
	for u := range 3 {
		for range 3 + u {
			if rec := e.do(http.MethodPost, "/v1/check", fmt.Sprintf(`{"context":{"user_id":"u%d","user_tier":"lesson"}}`, u), false); rec.Code != http.StatusOK {
				t.Fatalf("check: %d %s", rec.Code, rec.Body)
			}
			e.clock.Advance(time.Second)
		}
	}
	e.do(http.MethodPost, "/v1/check", `{"context":{"user_id":"u9","user_tier":"pro"}}`, false) // another tier
	before := e.do(http.MethodGet, "/v1/tiers/lesson", "", true).Body.String()
	proposed := `{"requests_per_minute":2,"requests_per_hour":1000,"requests_per_day":10000,"burst_allowance":1}`
	for _, tc := range []struct {
		name, path, body string
		admin            bool
		status           int
		want             string
	}{
		{"replayed", "/v1/tiers/lesson/preview", proposed, true, 200,
			`"users":3,"requests":12,"users_refused":2,"requests_refused":3,"refused_by_window":{"minute":3,"hour":0,"day":0},` +
				`"top_users":[{"user_id":"u2","requests":5,"refused":2},{"user_id":"u1","requests":4,"refused":1}],` +
				`"accounts_refused":0,"refused_by_account_window":{"minute":0,"hour":0,"day":0},"users_over":0,"accounts_over":0}`},
		{"nothing refused", "/v1/tiers/lesson/preview", `{"name":"lesson","requests_per_minute":9,"requests_per_hour":9,"requests_per_day":9,"burst_allowance":0}`, true, 200,
			`"users":3,"requests":12,"users_refused":0,"requests_refused":0,"refused_by_window":{"minute":0,"hour":0,"day":0},"top_users":[],`},
		{"bad body", "/v1/tiers/lesson/preview", `{"requests_per_minute":-1}`, true, 400, "requests_per_minute must be"},
		{"missing field", "/v1/tiers/lesson/preview", `{"requests_per_minute":1}`, true, 400, "requests_per_hour is required"},
		{"no token", "/v1/tiers/lesson/preview", proposed, false, 401, ""},
		{"unknown tier", "/v1/tiers/gold/preview", proposed, true, 404, "gold"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := e.do(http.MethodPost, tc.path, tc.body, tc.admin)
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.want) {
				t.Fatalf("%d %s, want %d with %s", rec.Code, rec.Body, tc.status, tc.want)
			}
		})
	}
	if after := e.do(http.MethodGet, "/v1/tiers/lesson", "", true).Body.String(); after != before {
		t.Fatalf("a preview changed the tier:\n%s\n%s", before, after)
	}
	// A user's overrides apply to their replay as they would to their checks.
	if rec := e.do(http.MethodPut, "/v1/users/u2", `{"limits":{"requests_per_minute":10}}`, true); rec.Code != http.StatusCreated {
		t.Fatalf("put user: %d %s", rec.Code, rec.Body)
	}
	if rec := e.do(http.MethodPost, "/v1/tiers/lesson/preview", proposed, true); !strings.Contains(rec.Body.String(),
		`"users":3,"requests":12,"users_refused":1,"requests_refused":1,"refused_by_window":{"minute":1,"hour":0,"day":0},`+
			`"top_users":[{"user_id":"u1","requests":4,"refused":1}],`) {
		t.Fatalf("preview with u2's override: %s", rec.Body)
	}
	// Requests older than a day are left out.
	e.clock.Advance(25 * time.Hour)
	if rec := e.do(http.MethodPost, "/v1/tiers/lesson/preview", proposed, true); !strings.Contains(rec.Body.String(), `"users":0,"requests":0`) {
		t.Fatalf("a day later: %s", rec.Body)
	}
}

func TestPromoteOverHTTP(t *testing.T) {
	e := newEnv(t)
	e.putTier("shadowed", shadowTier)
	rec := e.do(http.MethodPost, "/v1/tiers/shadowed/promote", "", true)
	got := decode[client.Tier](t, rec)
	if rec.Code != http.StatusOK || got.Shadow != nil || *got.RequestsPerMinute != 2 || *got.RequestsPerHour != 1000 {
		t.Fatalf("promote: %d %s", rec.Code, rec.Body)
	}
	if rec := e.do(http.MethodPost, "/v1/tiers/shadowed/promote", "", true); rec.Code != http.StatusBadRequest {
		t.Fatalf("promote again: %d %s, want 400", rec.Code, rec.Body)
	}
	changes, err := e.store.TierChanges(t.Context(), 1)
	if err != nil || len(changes) != 1 || changes[0].Old.Shadow == nil || changes[0].New.Shadow != nil || changes[0].Source != "api" {
		t.Fatalf("audit log: %+v, %v; want one change from shadow to none", changes, err)
	}
}
