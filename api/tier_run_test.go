package api_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/policy"
)

const runTierLimits = `"requests_per_minute":100,"requests_per_hour":1000,"requests_per_day":10000,"burst_allowance":0`

// A tier's run object goes through PUT and GET whole: its limits in the
// table's order, each null for none, max_cost in dollars, and required;
// what GET answers PUT takes back unchanged; a tier without one leaves it
// out; and each bad value is a 400 naming its field.
func TestTierRunOverHTTP(t *testing.T) {
	e := newEnv(t)
	e.putTier("agents", `{`+runTierLimits+`,"run":{"max_requests":50,"max_cost":"2.5","max_depth":3,"required":true}}`)
	rec := e.do(http.MethodGet, "/v1/tiers/agents", "", true)
	want := `"run":{"max_concurrent":null,"max_requests":50,"max_tokens":null,"max_cost":"2.5","max_duration":null,"max_depth":3,"required":true}}`
	if rec.Code != http.StatusOK || !strings.HasSuffix(strings.TrimSpace(rec.Body.String()), want) {
		t.Fatalf("GET: %d %s, want it to end %s", rec.Code, rec.Body, want)
	}
	tier, err := e.store.Tier(t.Context(), "agents")
	if err != nil || !tier.RunRequired || tier.RunMaxDepth() != 3 || *tier.RunLimit(policy.MaxRunCost) != 2_500_000_000_000 ||
		tier.RunLimit(policy.MaxRunTokens) != nil {
		t.Fatalf("stored %+v %v: run %v", tier, err, tier.Run)
	}
	before := rec.Body.String()
	e.putTier("agents", before)
	if after := e.do(http.MethodGet, "/v1/tiers/agents", "", true).Body.String(); after != before {
		t.Fatalf("a round trip changed the tier:\n%s\n%s", before, after)
	}
	changes, err := e.store.TierChanges(t.Context(), 1)
	if err != nil || len(changes) != 1 || changes[0].New.Run == nil {
		t.Fatalf("audit log %+v, %v", changes, err)
	}
	// The audit log words the run object in the API's names, required
	// within it.
	audit := e.do(http.MethodGet, "/v1/audit?kind=tiers", "", true).Body.String()
	if !strings.Contains(audit, `"run":{"required":true,"max_concurrent":null,"max_cost":2500000000000,"max_depth":3,"max_duration":null,"max_requests":50,"max_tokens":null}`) {
		t.Errorf("GET /v1/audit: %s", audit)
	}

	// An empty object is a run object without limits; null is none.
	e.putTier("agents", `{`+runTierLimits+`,"run":{}}`)
	if body := e.do(http.MethodGet, "/v1/tiers/agents", "", true).Body.String(); !strings.Contains(body,
		`"run":{"max_concurrent":null,"max_requests":null,"max_tokens":null,"max_cost":null,"max_duration":null,"max_depth":null,"required":false}`) {
		t.Fatalf("an empty run object: %s", body)
	}
	e.putTier("agents", `{`+runTierLimits+`,"run":null}`)
	if body := e.do(http.MethodGet, "/v1/tiers/agents", "", true).Body.String(); strings.Contains(body, `"run"`) {
		t.Fatalf("run null: %s", body)
	}

	for _, tc := range []struct{ name, run, want string }{
		{"depth 0", `{"max_depth":0}`, "run.max_depth must be an integer from 1 to 64"},
		{"depth 65", `{"max_depth":65}`, "run.max_depth must be an integer from 1 to 64"},
		{"negative steps", `{"max_requests":-1}`, "run.max_requests must be an integer from 0 to 2147483647"},
		{"steps a string", `{"max_requests":"5"}`, "run.max_requests must be an integer from 0 to 2147483647"},
		{"cost a number", `{"max_cost":2}`, `run.max_cost must be null or a dollar amount`},
		{"negative cost", `{"max_cost":"-1"}`, "run.max_cost must be a dollar amount from $0.00"},
		{"duration", `{"max_duration":2147483648}`, "run.max_duration must be an integer from 0 to 2147483647"},
		{"required a string", `{"required":"yes"}`, "run.required must be true or false"},
		{"a tier's limit", `{"requests_per_minute":5}`, "requests_per_minute"},
		{"not an object", `5`, "run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := e.do(http.MethodPut, "/v1/tiers/agents", `{`+runTierLimits+`,"run":`+tc.run+`}`, true)
			if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), tc.want) {
				t.Fatalf("PUT run %s: %d %s, want 400 naming %s", tc.run, rec.Code, rec.Body, tc.want)
			}
		})
	}
	// A run's limit is no tier's, user's or account's.
	for _, tc := range []struct{ path, body string }{
		{"/v1/tiers/agents", `{` + runTierLimits + `,"max_requests":5}`},
		{"/v1/tiers/agents", `{` + runTierLimits + `,"account":{"max_depth":2}}`},
		{"/v1/users/u", `{"limits":{"max_tokens":5}}`},
	} {
		if rec := e.do(http.MethodPut, tc.path, tc.body, true); rec.Code != http.StatusBadRequest {
			t.Errorf("PUT %s %s: %d %s, want 400", tc.path, tc.body, rec.Code, rec.Body)
		}
	}
}

// The run object goes through a tiers file and back; a file's problems
// with it name each field in full.
func TestTiersFileRun(t *testing.T) {
	run := &policy.LimitSet{}
	run.Set(policy.MaxRunTokens.Field(), new(int64(100_000)))
	run.Set(policy.MaxConcurrent.Field(), new(int64(2)))
	tiers := []policy.Tier{{Name: "agents", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(10)), policy.RequestsPerHour: new(int64(100)),
		policy.RequestsPerDay: new(int64(1000))}, Features: []string{}, Run: run, RunRequired: true}}
	var buf bytes.Buffer
	if err := api.WriteTiersFile(&buf, tiers); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"max_tokens": 100000`) {
		t.Errorf("the file:\n%s", buf.String())
	}
	read, err := api.ReadTiersFile(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(read) != 1 || !policy.SameLimits(&read[0], &tiers[0]) {
		t.Fatalf("read back %v %v, want %v %v", read[0].Run, read[0].RunRequired, run, true)
	}
	_, err = api.ReadTiersFile(strings.NewReader(`{"tiers":[{"name":"bad","requests_per_minute":1,"requests_per_hour":1,"requests_per_day":1,"burst_allowance":0,` +
		`"run":{"max_depth":0,"max_tokens":"x","required":1}}]}`))
	for _, want := range []string{"run.max_depth must be an integer from 1 to 64", "run.max_tokens must be", "run.required must be true or false"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bad run object: %v, want it to say %s", err, want)
		}
	}
}
