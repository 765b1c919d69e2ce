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

func TestTiersFileRoundTrip(t *testing.T) {
	tiers := []policy.Tier{
		{Name: "pro", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(60)), policy.RequestsPerHour: new(int64(2000)), policy.RequestsPerDay: new(int64(20000)), policy.BurstAllowance: new(int64(10))}, Features: []string{"chat", "*"}, Description: "Pro <plan> & more"},
		{Name: "free", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(10)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(1000))}, UpdatedAt: t0},
	}
	var buf bytes.Buffer
	if err := api.WriteTiersFile(&buf, tiers); err != nil {
		t.Fatal(err)
	}
	want := `{
  "tiers": [
    {
      "name": "free",
      "requests_per_minute": 10,
      "requests_per_hour": 100,
      "requests_per_day": 1000,
      "burst_allowance": 0,
      "tokens_per_minute": null,
      "tokens_per_hour": null,
      "tokens_per_day": null,
      "max_concurrent": null,
      "cost_per_minute": null,
      "cost_per_hour": null,
      "cost_per_day": null,
      "requests_per_month": null,
      "tokens_per_month": null,
      "cost_per_month": null,
      "features": [],
      "models": null,
      "description": ""
    },
    {
      "name": "pro",
      "requests_per_minute": 60,
      "requests_per_hour": 2000,
      "requests_per_day": 20000,
      "burst_allowance": 10,
      "tokens_per_minute": null,
      "tokens_per_hour": null,
      "tokens_per_day": null,
      "max_concurrent": null,
      "cost_per_minute": null,
      "cost_per_hour": null,
      "cost_per_day": null,
      "requests_per_month": null,
      "tokens_per_month": null,
      "cost_per_month": null,
      "features": [
        "chat",
        "*"
      ],
      "models": null,
      "description": "Pro <plan> & more"
    }
  ]
}
`
	if got := buf.String(); got != want {
		t.Fatalf("file:\n%s\nwant:\n%s", got, want)
	}
	read, err := api.ReadTiersFile(&buf)
	if err != nil {
		t.Fatal(err)
	}
	// Sorted by name; updated_at is not in the file, and features is [].
	if got, want := fmt.Sprint(read), fmt.Sprint([]policy.Tier{{Name: "free", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(10)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(1000)), policy.BurstAllowance: new(int64(0))}, Features: []string{}}, tiers[0]}); got != want {
		t.Fatalf("read back\n%s\nwant\n%s", got, want)
	}
}

// The answer of GET /v1/tiers, updated_at and all, is a tiers file.
func TestTiersFileAcceptsTheListAnswer(t *testing.T) {
	e := newEnv(t)
	rec := e.do(http.MethodGet, "/v1/tiers", "", true)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /v1/tiers: %d", rec.Code)
	}
	tiers, err := api.ReadTiersFile(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	if len(tiers) != 3 || tiers[0].Name != "enterprise" || !tiers[0].UpdatedAt.IsZero() {
		t.Fatalf("tiers = %+v", tiers)
	}
}

func TestTiersFileReportsEveryProblem(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{"not an object", `[]`, []string{`not a tiers file: it must be a JSON object`}},
		{"no tiers", `{}`, []string{`not a tiers file: it needs a "tiers" array`}},
		{"unknown top-level field", `{"tiers": [], "tier": []}`, []string{`not a tiers file: unknown field "tier"`}},
		{"malformed", `{"tiers": [`, []string{`not a tiers file: malformed JSON`}},
		{"every bad tier", `{"tiers": [
			{"name": "ok", "requests_per_minute": 1, "requests_per_hour": 1, "requests_per_day": 1, "burst_allowance": 0},
			{"name": "frac", "requests_per_minute": 1.5, "requests_per_hour": 1, "requests_per_day": 1, "burst_allowance": 0},
			{"requests_per_minute": 1, "requests_per_hour": 1, "requests_per_day": 1, "burst_allowance": 0},
			{"name": "Bad Name", "requests_per_minute": 1, "requests_per_hour": 1, "requests_per_day": 1, "burst_allowance": 0},
			{"name": "extra", "requests_per_minute": 1, "requests_per_hour": 1, "requests_per_day": 1, "burst_allowance": 0, "rpm": 3},
			{"name": "ok", "requests_per_minute": 2, "requests_per_hour": 2, "requests_per_day": 2, "burst_allowance": 0},
			{"name": "nohour", "requests_per_minute": 1, "requests_per_day": 1, "burst_allowance": 0},
			{"name": "feat", "requests_per_minute": 1, "requests_per_hour": 1, "requests_per_day": 1, "burst_allowance": 0, "features": ["chat", "chat"]},
			"free",
			{"name": "many", "requests_per_minute": -1, "requests_per_hour": 1.5, "requests_per_day": 1, "features": "chat", "description": 7}
		]}`, []string{
			`tier 2 ("frac"): requests_per_minute must be an integer from 0 to 2147483647`,
			`tier 3: name is required`,
			`tier 4 ("Bad Name"): tier name must match [a-z0-9][a-z0-9_-]{0,62}`,
			`tier 5 ("extra"): unknown field "rpm"`,
			`tier 6 ("ok"): listed twice, first as tier 1`,
			`tier 7 ("nohour"): requests_per_hour is required`,
			`tier 8 ("feat"): feature "chat" is listed twice`,
			`tier 9: must be a JSON object`,
			// Every problem of a tier, each on its own line.
			`tier 10 ("many"): requests_per_minute must be an integer from 0 to 2147483647`,
			`tier 10 ("many"): requests_per_hour must be an integer from 0 to 2147483647`,
			`tier 10 ("many"): burst_allowance is required`,
			`tier 10 ("many"): features must be an array of strings`,
			`tier 10 ("many"): description must be a string`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tiers, err := api.ReadTiersFile(strings.NewReader(tc.file))
			if policy.ErrorCode(err) != policy.EINVALID || tiers != nil {
				t.Fatalf("ReadTiersFile = %v, %v; want an EINVALID error", tiers, err)
			}
			lines := strings.Split(policy.ErrorMessage(err), "\n")
			if len(lines) != len(tc.want) {
				t.Fatalf("problems:\n%s\nwant %d", policy.ErrorMessage(err), len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(lines[i], w) {
					t.Errorf("problem %d %q, want %q", i+1, lines[i], w)
				}
			}
		})
	}
}

func TestDescribeTierChange(t *testing.T) {
	pro := policy.Tier{Name: "pro", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(60)), policy.RequestsPerHour: new(int64(2000)), policy.RequestsPerDay: new(int64(20000)), policy.BurstAllowance: new(int64(10))}, Features: []string{"chat"}}
	faster := pro
	faster.Limits[policy.RequestsPerMinute], faster.Features = new(int64(100)), []string{"chat", "search"}
	for _, tc := range []struct {
		c    policy.TierChange
		want string
	}{
		{policy.TierChange{Tier: "pro", New: &pro}, "created pro: 60/min (+10 burst), 2,000/hour, 20,000/day; chat"},
		{policy.TierChange{Tier: "pro", Old: &pro, New: &faster}, "updated pro: requests_per_minute: 60 → 100; features: [chat] → [chat, search]"},
		{policy.TierChange{Tier: "pro", Old: &pro}, "deleted pro"},
	} {
		if got := api.DescribeTierChange(tc.c); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

// The metering limits go through a tiers file and back: set ones as
// numbers, unset ones as null, and an entry that leaves them out sets none.
func TestTiersFileMeteringRoundTrip(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	tiers := []policy.Tier{{Name: "metered", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(10)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(1000)), policy.TokensPerMinute: n(0), policy.TokensPerDay: n(5000), policy.MaxConcurrent: n(3)}, Features: []string{}}}
	var buf bytes.Buffer
	if err := api.WriteTiersFile(&buf, tiers); err != nil {
		t.Fatal(err)
	}
	if want := `"tokens_per_minute": 0,
      "tokens_per_hour": null,
      "tokens_per_day": 5000,
      "max_concurrent": 3,`; !strings.Contains(buf.String(), want) {
		t.Fatalf("file:\n%s\nwant it to hold\n%s", buf.String(), want)
	}
	read, err := api.ReadTiersFile(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(read) != 1 || !policy.SameLimits(&read[0], &tiers[0]) {
		t.Fatalf("read back %+v, want %+v", read, tiers)
	}
	read, err = api.ReadTiersFile(strings.NewReader(`{"tiers":[{"name":"plain","requests_per_minute":1,"requests_per_hour":1,"requests_per_day":1,"burst_allowance":0}]}`))
	if err != nil || read[0].Metered() {
		t.Fatalf("an entry without metering limits: %+v %v", read, err)
	}
	_, err = api.ReadTiersFile(strings.NewReader(`{"tiers":[{"name":"bad","requests_per_minute":1,"requests_per_hour":1,"requests_per_day":1,"burst_allowance":0,"tokens_per_hour":-1,"max_concurrent":"two"}]}`))
	if err == nil || !strings.Contains(err.Error(), "tokens_per_hour must be an integer from 0 to 2147483647") || !strings.Contains(err.Error(), "max_concurrent must be an integer from 0 to 2147483647") {
		t.Fatalf("bad metering limits: %v", err)
	}
}

// A tiers file carries a tier's pooled limits for accounts, the accounts
// and the records' accounts: written in order, read back the same, and
// each problem of an account entry listed with its position and id.
func TestTiersFileAccountsRoundTrip(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	pool, err := policy.PoolLimitsOf(map[string]*int64{"requests_per_minute": n(30), "tokens_per_day": n(2000000)})
	if err != nil {
		t.Fatal(err)
	}
	team := policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(10)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(1000))}, Features: []string{}, Account: &pool}
	overrides, err := policy.PoolOverridesOf(map[string]*int64{"requests_per_minute": n(60), "max_concurrent": nil})
	if err != nil {
		t.Fatal(err)
	}
	f := api.TiersFile{
		Tiers: []policy.Tier{team},
		Accounts: []policy.Account{
			{AccountID: "zeta", Tier: "team", UpdatedAt: t0},
			{AccountID: "acme", Tier: "team", Limits: overrides, Note: "Acme"},
		},
		Users: []policy.UserRecord{{UserID: "ann", Account: "acme"}, {UserID: "bob", Tier: "team"}},
	}
	var buf bytes.Buffer
	if err := f.Write(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"account": {
        "requests_per_minute": 30,
        "requests_per_hour": null,`,
		`"tokens_per_day": 2000000,
        "max_concurrent": null,
        "cost_per_minute": null,
        "cost_per_hour": null,
        "cost_per_day": null,
        "requests_per_month": null,
        "tokens_per_month": null,
        "cost_per_month": null
      }`,
		`"accounts": [
    {
      "account_id": "acme",
      "tier": "team",
      "limits": {
        "max_concurrent": null,
        "requests_per_minute": 60
      },
      "note": "Acme"
    },
    {
      "account_id": "zeta",
      "tier": "team",
      "limits": null,
      "note": ""
    }
  ],
  "users": [`,
		`"user_id": "ann",
      "tier": null,
      "account": "acme",`,
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("file:\n%s\nwant it to hold\n%s", buf.String(), want)
		}
	}
	if strings.Contains(buf.String(), "updated_at") {
		t.Errorf("file holds updated_at:\n%s", buf.String())
	}
	read, err := api.ReadTiersFileAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(read.Tiers) != 1 || !policy.SameLimits(&read.Tiers[0], &team) {
		t.Errorf("tiers read back %+v, want %+v", read.Tiers, team)
	}
	if len(read.Accounts) != 2 || !policy.SameAccount(&read.Accounts[0], &f.Accounts[1]) || !policy.SameAccount(&read.Accounts[1], &f.Accounts[0]) {
		t.Errorf("accounts read back %+v", read.Accounts)
	}
	if len(read.Users) != 2 || read.Users[0].Account != "acme" || read.Users[1].Account != "" || read.Users[1].Tier != "team" {
		t.Errorf("users read back %+v", read.Users)
	}

	tier := `{"name":"t","requests_per_minute":5,"requests_per_hour":50,"requests_per_day":500,"burst_allowance":0`
	_, err = api.ReadTiersFileAll(strings.NewReader(`{"tiers":[` + tier + `,"account":{"requests_per_minute":5,"requests_per_hour":1,"max_concurrent":-1}}],
		"accounts":[{"tier":"t"},{"account_id":"a","tier":"t","plan":"x"},{"account_id":"b"},{"account_id":"c","tier":"t","limits":{"tokens_per_day":-1}},
			{"account_id":"d","tier":"t"},{"account_id":"d","tier":"t"},5,{"account_id":"` + strings.Repeat("e", 257) + `","tier":"t"}],
		"users":[{"user_id":"u","account":""}]}`))
	for _, want := range []string{
		`tier 1 ("t"): account.max_concurrent must be an integer from 0 to 2147483647`,
		`account 1: account_id is required`,
		`account 2: unknown field "plan"`,
		`account 3 ("b"): tier is required`,
		`account 4 ("c"): limits.tokens_per_day must be null or an integer from 0 to 2147483647`,
		`account 6 ("d"): listed twice, first as account 5`,
		`account 7: must be a JSON object`,
		`account 8 ("eeee`, `..."): account_id must be at most 256 bytes`,
		`user 1 ("u"): account must be null or an account id`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v\ndoes not say %q", err, want)
		}
	}
	if _, err := api.ReadTiersFileAll(strings.NewReader(`{"tiers":[` + tier + `,"account":{"requests_per_minute":5,"requests_per_hour":1}}]}`)); err == nil ||
		!strings.Contains(err.Error(), `tier 1 ("t"): account.requests_per_hour (1) is below account.requests_per_minute (5): the hour would refuse first`) {
		t.Errorf("pooled limits that cannot bind: %v", err)
	}
}

// The import report words an account it created or replaced with its plan
// and overrides.
func TestDescribeAccountChange(t *testing.T) {
	n := int64(100)
	o, err := policy.PoolOverridesOf(map[string]*int64{"requests_per_minute": &n})
	if err != nil {
		t.Fatal(err)
	}
	acme := policy.Account{AccountID: "acme", Tier: "team", Limits: o}
	for _, tc := range []struct {
		c    policy.AccountChange
		want string
	}{
		{policy.AccountChange{AccountID: "acme", New: &acme}, "created account acme: tier team; requests_per_minute 100"},
		{policy.AccountChange{AccountID: "acme", Old: &policy.Account{AccountID: "acme", Tier: "free"}, New: &acme}, "updated account acme: tier team; requests_per_minute 100"},
	} {
		if got := api.DescribeAccountChange(tc.c); got != tc.want {
			t.Errorf("DescribeAccountChange = %q, want %q", got, tc.want)
		}
	}
}
