package api_test

import (
	"context"
	"net/http"
	"regexp"
	"testing"

	"github.com/policyguard/policyguard/api"
)

// TierJSON, which the admin page's audit log shows, is what GET
// /v1/tiers/{name} answers, less updated_at.
func TestTierJSONIsTheAPIAnswer(t *testing.T) {
	e := newEnv(t)
	e.putTier("team", `{"requests_per_minute":5,"requests_per_hour":50,"requests_per_day":500,"burst_allowance":1,`+
		`"tokens_per_day":1000,"features":["chat"],"description":"<b>",`+
		`"shadow":{"requests_per_minute":4,"requests_per_hour":40,"requests_per_day":400,"burst_allowance":0}}`)
	rec := e.do(http.MethodGet, "/v1/tiers/team", "", true)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /v1/tiers/team: %d %s", rec.Code, rec.Body)
	}
	want := regexp.MustCompile(`,"updated_at":"[^"]*"`).ReplaceAllString(rec.Body.String(), "")
	tier, err := e.store.Tier(context.Background(), "team")
	if err != nil {
		t.Fatal(err)
	}
	if got := api.TierJSON(tier) + "\n"; got != want {
		t.Errorf("TierJSON = %s, want %s", got, want)
	}
}
