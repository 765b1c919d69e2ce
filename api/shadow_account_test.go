package api_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/api/client"
	"github.com/policyguard/policyguard/policy"
)

// shadowTeamTier has room for its members and their pool; its shadow limits
// hold each account's pool to two requests a minute.
const shadowTeamTier = `{"requests_per_minute":100,"requests_per_hour":1000,"requests_per_day":10000,"burst_allowance":0,` +
	`"account":{"requests_per_minute":100},` +
	`"shadow":{"requests_per_minute":100,"requests_per_hour":1000,"requests_per_day":10000,"burst_allowance":0,` +
	`"account":{"requests_per_minute":2,"requests_per_hour":null}}}`

func (e *env) putPlanAccount(id, body string) {
	e.t.Helper()
	if rec := e.do(http.MethodPut, "/v1/accounts/"+id, body, true); rec.Code != http.StatusCreated && rec.Code != http.StatusOK {
		e.t.Fatalf("put account %s: %d %s", id, rec.Code, rec.Body)
	}
}

func TestTierShadowAccountOverHTTP(t *testing.T) {
	e := newEnv(t)
	limits := `"requests_per_minute":1,"requests_per_hour":1,"requests_per_day":1,"burst_allowance":0`
	shadow := func(account string) string {
		return `{` + limits + `,"shadow":{` + limits + `,"account":` + account + `}}`
	}
	for _, tc := range []struct {
		name, body, want string
	}{
		{"negative", shadow(`{"requests_per_minute":-1}`), "shadow.account.requests_per_minute must be an integer from 0 to 2147483647"},
		{"a string", shadow(`{"requests_per_day":"5"}`), "shadow.account.requests_per_day must be an integer from 0 to 2147483647"},
		{"cannot bind", shadow(`{"requests_per_minute":10,"requests_per_day":5}`),
			"shadow.account.requests_per_day (5) is below shadow.account.requests_per_minute (10): the day would refuse first"},
		{"a token limit", shadow(`{"tokens_per_minute":5}`), "tokens_per_minute"},
		{"not an object", shadow(`5`), "account"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := e.do(http.MethodPut, "/v1/tiers/s", tc.body, true)
			if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), tc.want) {
				t.Fatalf("PUT: %d %s, want 400 naming %s", rec.Code, rec.Body, tc.want)
			}
		})
	}
	// null is none, and none is left out; a pool's limits left out are
	// none, written null.
	e.putTier("s", shadow(`null`))
	if rec := e.do(http.MethodGet, "/v1/tiers/s", "", true); strings.Contains(rec.Body.String(), `"account"`) {
		t.Fatalf("GET without pooled shadow limits: %s", rec.Body)
	}
	e.putTier("team", shadowTeamTier)
	rec := e.do(http.MethodGet, "/v1/tiers/team", "", true)
	if want := `"account":{"requests_per_minute":2,"requests_per_hour":null,"requests_per_day":null,"burst_allowance":null}}`; !strings.Contains(rec.Body.String(), want) {
		t.Fatalf("GET %s, want the shadow ending %s", rec.Body, want)
	}
	// What GET answers, PUT takes back unchanged.
	before := rec.Body.String()
	e.putTier("team", before)
	if after := e.do(http.MethodGet, "/v1/tiers/team", "", true).Body.String(); after != before {
		t.Fatalf("a round trip changed the tier:\n%s\n%s", before, after)
	}
}

// A member's decision carries the pooled shadow limits' verdict in the
// account's words; metrics and statistics count it as the account's.
func TestDecisionShadowAccount(t *testing.T) {
	e := newEnv(t)
	e.putTier("team", shadowTeamTier)
	e.putPlanAccount("acme", `{"tier":"team"}`)
	for i, user := range []string{"a", "b", "a"} {
		rec := e.do(http.MethodPost, "/v1/check", `{"context":{"user_id":"`+user+`","account_id":"acme"}}`, false)
		want := `"shadow":{"allowed":true,"reason":null}`
		if i == 2 {
			want = `"shadow":{"allowed":false,"reason":"account per-minute limit exceeded"}`
		}
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), want) {
			t.Fatalf("check %d: %d %s, want admitted with %s", i+1, rec.Code, rec.Body, want)
		}
		e.clock.Advance(time.Millisecond)
	}
	m := scrape(t, e.srv)
	if v, ok := m.value("policyguard_shadow_refusals_total", map[string]string{"tier": "team", "window": "account"}); !ok || v != 1 {
		t.Fatalf("policyguard_shadow_refusals_total{team,account} = %v (%v), want 1", v, ok)
	}
	if err := e.store.FlushCounts(t.Context()); err != nil {
		t.Fatal(err)
	}
	rec := e.do(http.MethodGet, "/v1/stats?period=hour&tier=team", "", true)
	if !strings.Contains(rec.Body.String(), `"shadow_refused":{"account":1}`) {
		t.Fatalf("stats: %s, want one shadow refusal by the account", rec.Body)
	}
}

// A preview reports the pools of the tier's accounts apart from its users,
// and never lists a pool as a user.
func TestPreviewAccountsOverHTTP(t *testing.T) {
	e := newEnv(t)
	e.putTier("team", shadowTeamTier)
	e.putPlanAccount("acme", `{"tier":"team"}`)
	e.putPlanAccount("beta", `{"tier":"team","limits":{"requests_per_minute":null}}`)
	for _, c := range []struct {
		user, account string
		n             int
	}{{"a1", "acme", 3}, {"a2", "acme", 2}, {"b1", "beta", 4}, {"solo", "", 1}} {
		for range c.n {
			body := fmt.Sprintf(`{"context":{"user_id":%q,"user_tier":"team","account_id":%q}}`, c.user, c.account)
			if c.account == "" {
				body = fmt.Sprintf(`{"context":{"user_id":%q,"user_tier":"team"}}`, c.user)
			}
			if rec := e.do(http.MethodPost, "/v1/check", body, false); rec.Code != http.StatusOK {
				t.Fatalf("check: %d %s", rec.Code, rec.Body)
			}
			e.clock.Advance(time.Second)
		}
	}
	// Users at 3 a minute lose b1's last; pools at 3 a minute lose two of
	// acme's five, and none of beta's, whose own limit has none.
	proposed := `{"requests_per_minute":3,"requests_per_hour":1000,"requests_per_day":10000,"burst_allowance":0,` +
		`"account":{"requests_per_minute":3,"tokens_per_day":1000}}`
	rec := e.do(http.MethodPost, "/v1/tiers/team/preview", proposed, true)
	want := `"users":4,"requests":10,"users_refused":1,"requests_refused":1,"refused_by_window":{"minute":1,"hour":0,"day":0},` +
		`"top_users":[{"user_id":"b1","requests":4,"refused":1}],"accounts_refused":1,"refused_by_account_window":{"minute":2,"hour":0,"day":0},"users_over":0,"accounts_over":0}`
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), want) {
		t.Fatalf("preview: %d %s, want %s", rec.Code, rec.Body, want)
	}
	if strings.Contains(rec.Body.String(), "account:") {
		t.Fatalf("preview names a pool: %s", rec.Body)
	}
	// The client reads the new figures.
	p := decode[client.Preview](t, rec)
	if p.AccountsRefused != 1 || p.RefusedByAccountWindow.Minute != 2 {
		t.Fatalf("client preview %+v", p)
	}
	bad := `{"requests_per_minute":3,"requests_per_hour":1000,"requests_per_day":10000,"burst_allowance":0,"account":{"requests_per_minute":-3}}`
	if rec := e.do(http.MethodPost, "/v1/tiers/team/preview", bad, true); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "account.requests_per_minute") {
		t.Fatalf("preview of a bad account object: %d %s", rec.Code, rec.Body)
	}
}

// Promote moves the pooled shadow limits into the tier's account object,
// whose other limits stay.
func TestPromoteShadowAccountOverHTTP(t *testing.T) {
	e := newEnv(t)
	e.putTier("team", strings.Replace(shadowTeamTier, `"account":{"requests_per_minute":100}`, `"account":{"requests_per_minute":100,"tokens_per_day":5000}`, 1))
	rec := e.do(http.MethodPost, "/v1/tiers/team/promote", "", true)
	want := `"account":{"requests_per_minute":2,"requests_per_hour":null,"requests_per_day":null,"burst_allowance":null,` +
		`"tokens_per_minute":null,"tokens_per_hour":null,"tokens_per_day":5000,"max_concurrent":null,"cost_per_minute":null,"cost_per_hour":null,"cost_per_day":null,"requests_per_month":null,"tokens_per_month":null,"cost_per_month":null}`
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), want) || strings.Contains(rec.Body.String(), "shadow") {
		t.Fatalf("promote: %d %s, want %s and no shadow", rec.Code, rec.Body, want)
	}
	changes, err := e.store.TierChanges(t.Context(), 1)
	if err != nil || len(changes) != 1 || changes[0].Old.Shadow.Account == nil || changes[0].New.Account == nil {
		t.Fatalf("audit log %+v, %v", changes, err)
	}
	if rpm, _ := policy.LimitFieldNamed("requests_per_minute"); *changes[0].New.Account.Get(rpm) != 2 {
		t.Fatalf("audit log's new account %+v", changes[0].New.Account)
	}
}

// Pooled shadow limits go through a tiers file and back, and a file's
// problems with them name each field in full.
func TestTiersFileShadowAccount(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	var pool policy.LimitSet
	rpm, _ := policy.LimitFieldNamed("requests_per_minute")
	pool.Set(rpm, n(20))
	tiers := []policy.Tier{{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(10)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(1000))}, Features: []string{}, Shadow: &policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(5)), policy.RequestsPerHour: new(int64(50)), policy.RequestsPerDay: new(int64(500))}, Account: &pool}}}
	var buf bytes.Buffer
	if err := api.WriteTiersFile(&buf, tiers); err != nil {
		t.Fatal(err)
	}
	read, err := api.ReadTiersFile(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(read) != 1 || !policy.SameLimits(&read[0], &tiers[0]) {
		t.Fatalf("read back %+v, want %+v", read[0].Shadow, tiers[0].Shadow)
	}
	_, err = api.ReadTiersFile(strings.NewReader(`{"tiers":[{"name":"bad","requests_per_minute":1,"requests_per_hour":1,"requests_per_day":1,"burst_allowance":0,` +
		`"shadow":{"requests_per_minute":1,"requests_per_hour":1,"requests_per_day":1,"burst_allowance":"x","account":{"requests_per_hour":"two","requests_per_day":-1}}}]}`))
	for _, want := range []string{"shadow.burst_allowance must be", "shadow.account.requests_per_hour must be", "shadow.account.requests_per_day must be"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bad pooled shadow limits: %v, want it to say %s", err, want)
		}
	}
}
