package api_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/policy"
)

// spendTier is a tier body with spend limits, in dollars.
const spendTier = `{"requests_per_minute":10,"requests_per_hour":100,"requests_per_day":1000,"burst_allowance":0,` +
	`"cost_per_hour":"5","cost_per_day":"20.5","account":{"cost_per_day":"100.000000000001"}}`

// A spend limit crosses every surface as a decimal string of dollars,
// exactly: a tier through PUT and GET /v1/tiers and the tiers file, a
// user's override and an account's limits.
func TestSpendLimitsRoundTripOverHTTP(t *testing.T) {
	e := newEnv(t)
	rec := e.do(http.MethodPut, "/v1/tiers/spend", spendTier, true)
	if rec.Code != http.StatusCreated {
		t.Fatalf("PUT: %d %s", rec.Code, rec.Body)
	}
	for _, want := range []string{`"cost_per_minute":null,"cost_per_hour":"5","cost_per_day":"20.5"`, `"cost_per_day":"100.000000000001","requests_per_month":null`} {
		for _, body := range []string{rec.Body.String(), e.do(http.MethodGet, "/v1/tiers/spend", "", true).Body.String()} {
			if !strings.Contains(body, want) {
				t.Errorf("tier %s, want %s", body, want)
			}
		}
	}
	tier, err := e.store.Tier(t.Context(), "spend")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tier.Limits.Value(policy.CostPerDay), int64(20_500_000_000_000); got != want {
		t.Errorf("stored cost_per_day = %d picodollars, want %d", got, want)
	}
	if got, want := tier.Account.Value(policy.CostPerDay), int64(100_000_000_000_001); got != want {
		t.Errorf("stored account.cost_per_day = %d picodollars, want %d", got, want)
	}

	rec = e.do(http.MethodPut, "/v1/accounts/acme", `{"tier":"spend","limits":{"cost_per_day":"250.75","cost_per_hour":null}}`, true)
	if want := `"limits":{"cost_per_day":"250.75","cost_per_hour":null}`; rec.Code != http.StatusCreated || !strings.Contains(rec.Body.String(), want) {
		t.Fatalf("PUT account: %d %s, want %s", rec.Code, rec.Body, want)
	}
	rec = e.do(http.MethodPut, "/v1/users/alice", `{"tier":"spend","account":"acme","limits":{"cost_per_day":"20.5","tokens_per_day":1000}}`, true)
	if want := `"limits":{"cost_per_day":"20.5","tokens_per_day":1000}`; rec.Code != http.StatusCreated || !strings.Contains(rec.Body.String(), want) {
		t.Fatalf("PUT user: %d %s, want %s", rec.Code, rec.Body, want)
	}
	if got := e.do(http.MethodGet, "/v1/users/alice", "", true).Body.String(); !strings.Contains(got, `"cost_per_day":"20.5"`) {
		t.Errorf("GET user: %s", got)
	}
	if got := e.do(http.MethodGet, "/v1/accounts/acme/usage", "", true).Body.String(); !strings.Contains(got, `"cost_per_day":"250.75"`) || !strings.Contains(got, `"cost_per_hour":null`) {
		t.Errorf("account usage: %s", got)
	}

	// The tiers file: export, then import what was exported.
	users, err := e.store.Users(t.Context(), "", 10)
	if err != nil {
		t.Fatal(err)
	}
	acct, err := e.store.Account(t.Context(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	file := api.TiersFile{Tiers: []policy.Tier{tier}, Accounts: []policy.Account{acct}, Users: users}
	var buf bytes.Buffer
	if err := file.Write(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"cost_per_day": "20.5"`, `"cost_per_day": "100.000000000001"`, `"cost_per_day": "250.75"`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("tiers file lacks %s:\n%s", want, buf.String())
		}
	}
	back, err := api.ReadTiersFileAll(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !policy.SameLimits(&back.Tiers[0], &tier) {
		t.Errorf("tiers file: tier %v, want %v", back.Tiers[0].Limits, tier.Limits)
	}
	if !back.Accounts[0].Limits.Equal(&acct.Limits) || !back.Users[0].Limits.Equal(&users[0].Limits) {
		t.Errorf("tiers file: account %v, user %v; want %v, %v", back.Accounts[0].Limits, back.Users[0].Limits, acct.Limits, users[0].Limits)
	}
	if got := policy.UserSummary(&back.Users[0]); !strings.Contains(got, "cost_per_day $20.50") {
		t.Errorf("the import's words for the user: %q", got)
	}
}

// A spend limit that is not a decimal string of dollars is a 400 naming
// its field, on every surface; one too fine or too large says why.
func TestSpendLimitsRefusedOverHTTP(t *testing.T) {
	e := newEnv(t)
	e.putTier("spend", spendTier)
	const base = `"requests_per_minute":10,"requests_per_hour":100,"requests_per_day":1000,"burst_allowance":0`
	notAmount := func(field string) string {
		return field + ` must be null or a dollar amount as a decimal string, such as \"20\" or \"0.15\"`
	}
	for _, tc := range []struct {
		path, body, want string
	}{
		{"/v1/tiers/x", `{` + base + `,"cost_per_day":20}`, notAmount("cost_per_day")},
		{"/v1/tiers/x", `{` + base + `,"cost_per_day":"$20"}`, notAmount("cost_per_day")},
		{"/v1/tiers/x", `{` + base + `,"cost_per_day":"1e3"}`, notAmount("cost_per_day")},
		{"/v1/tiers/x", `{` + base + `,"cost_per_day":"0.0000000000001"}`, `cost_per_day: \"0.0000000000001\" is finer than a picodollar (at most 12 decimals)`},
		{"/v1/tiers/x", `{` + base + `,"cost_per_day":"9223372.036854775808"}`, `cost_per_day: \"9223372.036854775808\" is more than the largest amount, 9223372.036854775807`},
		{"/v1/tiers/x", `{` + base + `,"cost_per_day":"-1"}`, `cost_per_day must be a dollar amount from $0.00 to $9223372.036854775807`},
		{"/v1/tiers/x", `{` + base + `,"cost_per_hour":"30","cost_per_day":"20.5"}`, `cost_per_day ($20.50) is below cost_per_hour ($30.00): the day would refuse first`},
		{"/v1/tiers/x", `{` + base + `,"account":{"cost_per_minute":1}}`, notAmount("account.cost_per_minute")},
		{"/v1/users/bob", `{"tier":"spend","limits":{"cost_per_day":5}}`, notAmount("limits.cost_per_day")},
		{"/v1/users/bob", `{"tier":"spend","limits":{"cost_per_day":"1"}}`, `cost_per_day ($1.00) is below cost_per_hour ($5.00): the day would refuse first`},
		{"/v1/accounts/acme", `{"tier":"spend","limits":{"cost_per_hour":true}}`, notAmount("limits.cost_per_hour")},
	} {
		rec := e.do(http.MethodPut, tc.path, tc.body, true)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("PUT %s %s: %d %s, want 400 with %s", tc.path, tc.body, rec.Code, rec.Body, tc.want)
		}
	}
	// A shadow holds request limits only: a spend limit is unknown there.
	if rec := e.do(http.MethodPut, "/v1/tiers/x", `{`+base+`,"shadow":{`+base+`,"cost_per_day":"1"}}`, true); !strings.Contains(rec.Body.String(), "cost_per_day") {
		t.Errorf("a shadow's spend limit: %d %s, want a 400 naming it", rec.Code, rec.Body)
	}
	_, err := api.ReadTiersFile(strings.NewReader(`{"tiers":[{"name":"a",` + base + `,"cost_per_day":20}]}`))
	if want := `tier 1 ("a"): cost_per_day must be null or a dollar amount as a decimal string, such as "20" or "0.15"`; policy.ErrorMessage(err) != want {
		t.Errorf("tiers file: %v, want %s", err, want)
	}
}

// TestOpenAPISpendLimitRequests holds the description of spend limits in
// a tier's, a user's and an account's body to what the service takes.
func TestOpenAPISpendLimitRequests(t *testing.T) {
	e := newEnv(t)
	s := loadSpec(t, e.srv)
	e.putTier("spend", spendTier)
	const base = `"requests_per_minute":10,"requests_per_hour":100,"requests_per_day":1000,"burst_allowance":0`
	values := []string{`"20"`, `"0.15"`, `"20.500000000001"`, `null`, `"0"`, `20`, `"$20"`, `"20."`, `".5"`, `"1e3"`, `"-1"`, `"0.0000000000001"`, `true`}
	for _, schema := range []struct{ name, path, body string }{
		{"TierInput", "/v1/tiers/x", `{` + base + `,"cost_per_hour":%s}`},
		{"TierInput", "/v1/tiers/x", `{` + base + `,"account":{"cost_per_minute":%s}}`},
		{"UserInput", "/v1/users/bob", `{"tier":"pro","limits":{"cost_per_minute":%s}}`},
		{"AccountInput", "/v1/accounts/acme", `{"tier":"pro","limits":{"cost_per_day":%s}}`},
	} {
		sch := s.schema(t, pointer("components", "schemas", schema.name))
		for _, v := range values {
			body := strings.Replace(schema.body, "%s", v, 1)
			doc, err := jsonschema.UnmarshalJSON(strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			valid := sch.Validate(doc) == nil
			rec := e.do(http.MethodPut, schema.path, body, true)
			if taken := rec.Code == http.StatusCreated || rec.Code == http.StatusOK; valid != taken || !taken && rec.Code != http.StatusBadRequest {
				t.Errorf("%s: valid by %s: %v; the service answers %d %s", body, schema.name, valid, rec.Code, rec.Body)
			}
		}
	}
}
