package api_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/policy"
)

// A tier's models go through PUT and GET as sent: null (or left out) for
// any model, [] for none, else the list in order; a PUT that leaves them
// out sets null, as it does the token limits.
func TestTierModelsAPI(t *testing.T) {
	e := newEnv(t)
	limits := `"requests_per_minute":3,"requests_per_hour":30,"requests_per_day":300,"burst_allowance":0`
	for _, tc := range []struct {
		name, body, want string
	}{
		{"list", `{` + limits + `,"models":["gpt-4o-mini*","o3","*"]}`, `"models":["gpt-4o-mini*","o3","*"]`},
		{"none", `{` + limits + `,"models":[]}`, `"models":[]`},
		{"null", `{` + limits + `,"models":null}`, `"models":null`},
		{"left out", `{` + limits + `}`, `"models":null`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.putTier("team", `{`+limits+`,"models":["before"]}`)
			rec := e.do(http.MethodPut, "/v1/tiers/team", tc.body, true)
			if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), tc.want) {
				t.Fatalf("PUT: %d %s, want 200 with %s", rec.Code, rec.Body, tc.want)
			}
			for _, path := range []string{"/v1/tiers/team", "/v1/tiers"} {
				if rec := e.do(http.MethodGet, path, "", true); !strings.Contains(rec.Body.String(), tc.want) {
					t.Errorf("GET %s: %s, want %s", path, rec.Body, tc.want)
				}
			}
		})
	}
	// Every answer carries models, null for the seeded tiers.
	if rec := e.do(http.MethodGet, "/v1/tiers/pro", "", true); !strings.Contains(rec.Body.String(), `"models":null`) {
		t.Errorf("GET /v1/tiers/pro: %s, want models null", rec.Body)
	}
	// What a GET answers, sent back, changes nothing.
	e.putTier("team", `{`+limits+`,"models":["o3"]}`)
	answer := e.do(http.MethodGet, "/v1/tiers/team", "", true).Body.String()
	if rec := e.do(http.MethodPut, "/v1/tiers/team", answer, true); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"models":["o3"]`) {
		t.Fatalf("PUT of the GET answer: %d %s", rec.Code, rec.Body)
	}
	// A preview takes models, valid ones, and replays no model.
	if rec := e.do(http.MethodPost, "/v1/tiers/team/preview", `{`+limits+`,"models":["o3"]}`, true); rec.Code != http.StatusOK {
		t.Errorf("preview with models: %d %s", rec.Code, rec.Body)
	}
}

// Each refusal of a model list is a 400 naming the entry.
func TestTierModelsAPIRefusals(t *testing.T) {
	e := newEnv(t)
	limits := `"requests_per_minute":3,"requests_per_hour":30,"requests_per_day":300,"burst_allowance":0`
	many := make([]string, policy.MaxModels+1)
	for i := range many {
		many[i] = fmt.Sprintf(`"m%d"`, i)
	}
	for _, tc := range []struct {
		name, models, want string
	}{
		{"wildcard first", `["gpt-4o","o3","*gpt"]`, `models[2]: "*gpt" has a "*" before its end; "*" may only end a name`},
		{"wildcard inside", `["gpt-*-mini"]`, `models[0]: "gpt-*-mini" has a "*" before its end; "*" may only end a name`},
		{"space", `["gpt 4o"]`, `models[0]: "gpt 4o" must be 1 to 128 printable ASCII characters without spaces`},
		{"empty name", `[""]`, `models[0]: "" must be 1 to 128 printable ASCII characters without spaces`},
		{"not ASCII", `["modèle"]`, `models[0]: "modèle" must be 1 to 128 printable ASCII characters without spaces`},
		{"too long", `["` + strings.Repeat("m", 129) + `"]`, `models[0]: "` + strings.Repeat("m", 64) + `..." must be 1 to 128 printable ASCII characters without spaces`},
		{"twice", `["o3","gpt-4o","o3"]`, `models[2]: "o3" is listed twice, first as models[0]`},
		{"too many", `[` + strings.Join(many, ",") + `]`, `models must list at most 256 names, not 257`},
		{"not an array", `"gpt-4o"`, `models must be an array of strings`},
		{"not strings", `["gpt-4o",4]`, `models must be an array of strings`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := e.do(http.MethodPut, "/v1/tiers/x", `{`+limits+`,"models":`+tc.models+`}`, true)
			if rec.Code != http.StatusBadRequest || !strings.HasPrefix(message(rec), tc.want) {
				t.Fatalf("got %d %q, want 400 %q", rec.Code, message(rec), tc.want)
			}
		})
	}
	if rec := e.do(http.MethodGet, "/v1/tiers/x", "", true); rec.Code != http.StatusNotFound {
		t.Fatal("a refused PUT created the tier")
	}
	// A problem of models comes after one of features, before one of the
	// description: the order of the fields.
	rec := e.do(http.MethodPut, "/v1/tiers/x", `{`+limits+`,"description":7,"models":["*x"],"features":["a b"]}`, true)
	if got := message(rec); !strings.HasPrefix(got, `feature "a b"`) {
		t.Errorf("first problem %q, want the feature's", got)
	}
	rec = e.do(http.MethodPut, "/v1/tiers/x", `{`+limits+`,"description":7,"models":["*x"]}`, true)
	if got := message(rec); !strings.HasPrefix(got, `models[0]: "*x"`) {
		t.Errorf("first problem %q, want the model's", got)
	}
}

// A tiers file writes models as the API answers them, null included, and
// reads them back; an entry without models allows any model, and every
// bad entry is reported with its tier.
func TestTiersFileModels(t *testing.T) {
	tiers := []policy.Tier{
		{Name: "any", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(1)), policy.RequestsPerDay: new(int64(1))}, Features: []string{}},
		{Name: "none", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(1)), policy.RequestsPerDay: new(int64(1))}, Features: []string{}, Models: []string{}},
		{Name: "some", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(1)), policy.RequestsPerDay: new(int64(1))}, Features: []string{}, Models: []string{"o3", "gpt-4o*"}},
	}
	var buf bytes.Buffer
	if err := api.WriteTiersFile(&buf, tiers); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"models": null,`, `"models": [],`, `"models": [
        "o3",
        "gpt-4o*"
      ],`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("file:\n%s\nwant it to hold\n%s", buf.String(), want)
		}
	}
	read, err := api.ReadTiersFile(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(read) != len(tiers) {
		t.Fatalf("read %d tiers, want %d", len(read), len(tiers))
	}
	for i := range tiers {
		if !policy.SameLimits(&read[i], &tiers[i]) {
			t.Errorf("read back %s: models %#v, want %#v", read[i].Name, read[i].Models, tiers[i].Models)
		}
	}
	_, err = api.ReadTiersFile(strings.NewReader(`{"tiers":[
		{"name":"bad","requests_per_minute":1,"requests_per_hour":1,"requests_per_day":1,"burst_allowance":0,"models":["a","a*b"]},
		{"name":"worse","requests_per_minute":1,"requests_per_hour":1,"requests_per_day":1,"burst_allowance":0,"models":{"a":1}}]}`))
	want := `tier 1 ("bad"): models[1]: "a*b" has a "*" before its end; "*" may only end a name` + "\n" +
		`tier 2 ("worse"): models must be an array of strings`
	if policy.ErrorCode(err) != policy.EINVALID || policy.ErrorMessage(err) != want {
		t.Fatalf("ReadTiersFile: %v, want\n%s", err, want)
	}
}

// The import report and the admin page word a change of models.
func TestDescribeTierChangeModels(t *testing.T) {
	team := policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(5)), policy.RequestsPerHour: new(int64(50)), policy.RequestsPerDay: new(int64(500))}, Features: []string{"chat"}, Models: []string{"gpt-4o*"}}
	anyModel := team
	anyModel.Models = nil
	for _, tc := range []struct {
		c    policy.TierChange
		want string
	}{
		{policy.TierChange{Tier: "team", New: &team}, "created team: 5/min (+0 burst), 50/hour, 500/day; chat; models gpt-4o*"},
		{policy.TierChange{Tier: "team", Old: &team, New: &anyModel}, "updated team: models: [gpt-4o*] → any"},
	} {
		if got := api.DescribeTierChange(tc.c); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}
