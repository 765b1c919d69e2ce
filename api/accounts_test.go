package api_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/policy"
)

// accountDecision is a check answer with the account member, as a client
// reads it.
type accountDecision struct {
	Allowed    bool    `json:"allowed"`
	Reason     *string `json:"reason"`
	RetryAfter int64   `json:"retry_after"`
	Tier       string  `json:"tier"`
	CallID     *string `json:"call_id"`
	Windows    map[string]struct {
		Limit, Remaining, Reset int64
	} `json:"windows"`
	Account *struct {
		ID      string `json:"id"`
		Windows map[string]struct {
			Limit, Remaining *int64
			Reset            int64
			Tokens           *struct{ Limit, Used, Remaining, Reset int64 }
		} `json:"windows"`
		Concurrency *struct {
			Limit    int64 `json:"limit"`
			InFlight int64 `json:"in_flight"`
		} `json:"concurrency"`
	} `json:"account"`
}

// reason is d's reason, "" when admitted.
func (d *accountDecision) reason() string {
	if d.Reason == nil {
		return ""
	}
	return *d.Reason
}

// accountUsage is the body of GET /v1/accounts/{id}/usage.
type accountUsage struct {
	AccountID string            `json:"account_id"`
	Tier      string            `json:"tier"`
	Limits    map[string]*int64 `json:"limits"`
	Windows   map[string]struct {
		Count                   int64
		Limit, Remaining, Reset *int64
		Tokens                  struct {
			Used  int64
			Limit *int64
		}
	} `json:"windows"`
	CallsInFlight int64 `json:"calls_in_flight"`
}

// must sends a request and fails the test unless it is answered status.
func (e *env) must(method, path, body string, status int) *httptest.ResponseRecorder {
	e.t.Helper()
	rec := e.do(method, path, body, true)
	if rec.Code != status {
		e.t.Fatalf("%s %s %s: %d %s, want %d", method, path, body, rec.Code, rec.Body, status)
	}
	return rec
}

// checkAs sends a check and returns its status and decision.
func (e *env) checkAs(body string) (int, accountDecision) {
	e.t.Helper()
	rec := e.do(http.MethodPost, "/v1/check", body, false)
	if rec.Code == http.StatusBadRequest {
		return rec.Code, accountDecision{}
	}
	return rec.Code, decode[accountDecision](e.t, rec)
}

func (e *env) accountUsage(id string) accountUsage {
	e.t.Helper()
	return decode[accountUsage](e.t, e.must(http.MethodGet, "/v1/accounts/"+id+"/usage", "", http.StatusOK))
}

// The account routes: create, replace, read, list a page at a time, and
// delete, with every refusal the description lists.
func TestAccountRoutes(t *testing.T) {
	e := newEnv(t)
	e.putTier("team", `{"requests_per_minute":10,"requests_per_hour":100,"requests_per_day":1000,"burst_allowance":0,"account":{"requests_per_minute":30}}`)
	long := strings.Repeat("a", 257)
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		want                     string
	}{
		{"create", "PUT", "/v1/accounts/acme", `{"tier":"team","limits":{"requests_per_minute":60,"max_concurrent":null},"note":"Acme"}`, 201,
			`{"account_id":"acme","tier":"team","limits":{"max_concurrent":null,"requests_per_minute":60},"note":"Acme","updated_at":"2026-03-01T12:00:00Z"}`},
		{"replace", "PUT", "/v1/accounts/acme", `{"account_id":"acme","tier":"team","limits":null,"note":"Acme Corp","updated_at":"2020-01-01T00:00:00Z"}`, 200,
			`{"account_id":"acme","tier":"team","limits":null,"note":"Acme Corp","updated_at":"2026-03-01T12:00:01Z"}`},
		{"another", "PUT", "/v1/accounts/initech", `{"tier":"free"}`, 201, `"account_id":"initech"`},
		{"an escaped id", "PUT", "/v1/accounts/a%2Fb%20c", `{"tier":"free"}`, 201, `"account_id":"a/b c"`},
		{"read", "GET", "/v1/accounts/acme", "", 200, `{"account_id":"acme","tier":"team","limits":null,"note":"Acme Corp","updated_at":"2026-03-01T12:00:01Z"}`},
		{"read escaped", "GET", "/v1/accounts/a%2Fb%20c", "", 200, `"account_id":"a/b c"`},
		{"first page", "GET", "/v1/accounts?limit=2", "", 200, `"accounts":[{"account_id":"a/b c",`},
		{"first page's next", "GET", "/v1/accounts?limit=2", "", 200, `"next":"acme"}`},
		{"last page", "GET", "/v1/accounts?limit=2&after=acme", "", 200, `{"accounts":[{"account_id":"initech","tier":"free","limits":null,"note":"","updated_at":"2026-03-01T12:00:02Z"}],"next":null}`},
		{"past the end", "GET", "/v1/accounts?after=zzz", "", 200, `{"accounts":[],"next":null}`},
		{"unknown tier", "PUT", "/v1/accounts/acme", `{"tier":"gold"}`, 400, `unknown tier \"gold\"`},
		{"no tier", "PUT", "/v1/accounts/acme", `{"note":"x"}`, 400, `tier is required`},
		{"another id in the body", "PUT", "/v1/accounts/acme", `{"account_id":"other","tier":"team"}`, 400, `account_id \"other\" in the body does not match \"acme\" in the path`},
		{"unknown limit", "PUT", "/v1/accounts/acme", `{"tier":"team","limits":{"requests_per_second":1}}`, 400, `unknown field \"requests_per_second\" in limits`},
		{"negative limit", "PUT", "/v1/accounts/acme", `{"tier":"team","limits":{"tokens_per_day":-1}}`, 400, `limits.tokens_per_day must be null or an integer from 0 to 2147483647`},
		{"pooled limits that cannot bind on the plan", "PUT", "/v1/accounts/acme", `{"tier":"team","limits":{"requests_per_hour":20}}`, 400,
			`limits.requests_per_hour (20) is below limits.requests_per_minute (30): the hour would refuse first`},
		{"unknown member", "PUT", "/v1/accounts/acme", `{"tier":"team","plan":"x"}`, 400, `unknown field \"plan\"`},
		{"an id too long", "PUT", "/v1/accounts/" + long, `{"tier":"team"}`, 400, `account_id must be at most 256 bytes`},
		{"read an id too long", "GET", "/v1/accounts/" + long, "", 400, `account_id must be at most 256 bytes`},
		{"a control character", "GET", "/v1/accounts/a%01b", "", 400, `account_id must not contain control characters`},
		{"delete an id too long", "DELETE", "/v1/accounts/" + long, "", 400, `account_id must be at most 256 bytes`},
		{"a bad page size", "GET", "/v1/accounts?limit=0", "", 400, `limit must be an integer from 1 to 1000`},
		{"a bad after", "GET", "/v1/accounts?after=" + long, "", 400, `after: account_id must be at most 256 bytes`},
		{"read unknown", "GET", "/v1/accounts/umbrella", "", 404, `account \"umbrella\" not found`},
		{"delete unknown", "DELETE", "/v1/accounts/umbrella", "", 404, `account \"umbrella\" not found`},
		{"without the admin token", "GET", "/v1/accounts", "", 401, `admin token`},
		{"a member", "PUT", "/v1/users/ann", `{"account":"acme"}`, 201, `"account":"acme"`},
		{"another member", "PUT", "/v1/users/bob", `{"tier":"free","account":"acme"}`, 201, `"account":"acme"`},
		{"delete with members", "DELETE", "/v1/accounts/acme", "", 409, `account \"acme\" has 2 members; move them to another account or remove it from their records first`},
		{"delete a plan", "DELETE", "/v1/tiers/team", "", 409, `tier \"team\" is the plan of 1 account`},
		{"one member left", "PUT", "/v1/users/bob", `{"tier":"free"}`, 200, `{"user_id":"bob","tier":"free","limits":null`},
		{"delete with a member", "DELETE", "/v1/accounts/acme", "", 409, `has 1 member;`},
		{"none left", "DELETE", "/v1/users/ann", "", 204, ``},
		{"delete", "DELETE", "/v1/accounts/acme", "", 204, ``},
		{"read deleted", "GET", "/v1/accounts/acme", "", 404, `account \"acme\" not found`},
		{"delete twice", "DELETE", "/v1/accounts/acme", "", 404, `not found`},
		{"the plan free again", "DELETE", "/v1/tiers/team", "", 204, ``},
	} {
		rec := e.do(tc.method, tc.path, tc.body, tc.name != "without the admin token")
		if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("%s: %s %s: %d %s, want %d with %s", tc.name, tc.method, tc.path, rec.Code, rec.Body, tc.status, tc.want)
		}
		e.clock.Advance(time.Second)
	}
}

// A record names its account: an unknown one is refused and changes
// nothing, null or absent names none, and the record's answer leaves
// account out when it has none.
func TestUserRecordAccount(t *testing.T) {
	e := newEnv(t)
	e.must("PUT", "/v1/accounts/acme", `{"tier":"pro"}`, 201)
	for _, tc := range []struct {
		name, body string
		status     int
		want       string
	}{
		{"an unknown account", `{"account":"umbrella"}`, 400, `unknown account \"umbrella\"`},
		{"an empty account", `{"account":""}`, 400, `account must be null or an account id, not \"\"`},
		{"an account id too long", `{"account":"` + strings.Repeat("a", 257) + `"}`, 400, `account must be at most 256 bytes`},
		{"a member", `{"account":"acme","note":"n"}`, 201, `{"user_id":"ann","tier":null,"account":"acme","limits":null,"note":"n",`},
		{"an unknown account for a record that exists", `{"account":"umbrella"}`, 400, `unknown account \"umbrella\"`},
		{"no account", `{"account":null,"tier":"pro"}`, 200, `{"user_id":"ann","tier":"pro","limits":null,"note":"",`},
	} {
		if rec := e.do(http.MethodPut, "/v1/users/ann", tc.body, true); rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("%s: %d %s, want %d with %s", tc.name, rec.Code, rec.Body, tc.status, tc.want)
		}
		if tc.status == 400 && strings.Contains(tc.name, "exists") {
			if rec := e.do(http.MethodGet, "/v1/users/ann", "", true); !strings.Contains(rec.Body.String(), `"account":"acme"`) {
				t.Errorf("%s: a refused PUT changed the record: %s", tc.name, rec.Body)
			}
		}
	}
	if rec := e.do(http.MethodGet, "/v1/users/ann", "", true); strings.Contains(rec.Body.String(), `"account"`) {
		t.Errorf("a record without an account: %s", rec.Body)
	}
}

// context.account_id names the account of a user whose record names
// none: the check draws on its pool and a user without a tier of their own
// is checked under the account's. An unknown account is a 400 and records
// nothing; a record's account wins; a service that distrusts clients
// ignores the member altogether.
func TestCheckContextAccount(t *testing.T) {
	e := newEnv(t)
	e.putTier("team", `{"requests_per_minute":5,"requests_per_hour":50,"requests_per_day":500,"burst_allowance":0,"account":{"requests_per_minute":20}}`)
	e.putTier("big", `{"requests_per_minute":50,"requests_per_hour":500,"requests_per_day":5000,"burst_allowance":0,"account":{"requests_per_minute":40}}`)
	e.must("PUT", "/v1/accounts/acme", `{"tier":"team"}`, 201)
	e.must("PUT", "/v1/accounts/initech", `{"tier":"big"}`, 201)
	e.must("PUT", "/v1/users/ann", `{"account":"acme"}`, 201)
	e.must("PUT", "/v1/users/bob", `{"tier":"pro","account":"acme"}`, 201)

	for _, tc := range []struct {
		name, body  string
		status      int
		tier        string
		account     string // "" for none
		minuteLimit int64  // of the pool
	}{
		{"named by the check, under its plan", `{"context":{"user_id":"cat","account_id":"acme"}}`, 200, "team", "acme", 20},
		{"the plan wins over the check's tier", `{"context":{"user_id":"cat","user_tier":"pro","account_id":"acme"}}`, 200, "team", "acme", 20},
		{"the record's account wins", `{"context":{"user_id":"ann","account_id":"initech"}}`, 200, "team", "acme", 20},
		{"the record's own tier wins", `{"context":{"user_id":"bob"}}`, 200, "pro", "acme", 20},
		{"null names none", `{"context":{"user_id":"cat","account_id":null}}`, 200, "free", "", 0},
		{"an unknown account", `{"context":{"user_id":"cat","account_id":"umbrella"}}`, 400, "", "", 0},
		{"an account id too long", `{"context":{"user_id":"cat","account_id":"` + strings.Repeat("a", 257) + `"}}`, 400, "", "", 0},
		{"at the top level", `{"account_id":"acme"}`, 400, "", "", 0},
	} {
		status, d := e.checkAs(tc.body)
		if status != tc.status {
			t.Errorf("%s: status %d, want %d", tc.name, status, tc.status)
			continue
		}
		if status != 200 {
			continue
		}
		switch {
		case d.Tier != tc.tier:
			t.Errorf("%s: tier %q, want %q", tc.name, d.Tier, tc.tier)
		case tc.account == "" && d.Account != nil:
			t.Errorf("%s: account %+v, want none", tc.name, d.Account)
		case tc.account != "" && (d.Account == nil || d.Account.ID != tc.account || *d.Account.Windows["minute"].Limit != tc.minuteLimit):
			t.Errorf("%s: account %+v, want %s with a minute of %d", tc.name, d.Account, tc.account, tc.minuteLimit)
		}
	}
	rec := e.do(http.MethodPost, "/v1/check", `{"context":{"user_id":"dan","account_id":"umbrella"}}`, false)
	if !strings.Contains(rec.Body.String(), `unknown account \"umbrella\"`) {
		t.Errorf("unknown account: %s", rec.Body)
	}
	rec = e.do(http.MethodPost, "/v1/check", `{"account_id":"acme"}`, false)
	if !strings.Contains(rec.Body.String(), `context`) {
		t.Errorf("account_id at the top level: %s", rec.Body)
	}
	// Nothing was recorded for dan, or in a pool, by the refused checks:
	// acme counted cat's two checks, ann's and bob's; initech none.
	if u := e.accountUsage("acme"); u.Windows["minute"].Count != 4 {
		t.Errorf("acme's pool counts %d, want 4", u.Windows["minute"].Count)
	}
	if u := e.accountUsage("initech"); u.Windows["minute"].Count != 0 {
		t.Errorf("initech's pool counts %d, want 0", u.Windows["minute"].Count)
	}
	if rec := e.do(http.MethodGet, "/v1/usage/dan", "", true); !strings.Contains(rec.Body.String(), `"day":{"count":0,`) {
		t.Errorf("a refused check was recorded: %s", rec.Body)
	}

	// -trust-client-tier=false: context.account_id is ignored, even an
	// unknown one; a record's account still holds.
	svc := policy.NewService(e.store, e.store, policy.WithClock(e.clock.Now), policy.WithUsers(e.store), policy.WithTrustClientTier(false))
	distrust := &env{t: t, store: e.store, clock: e.clock, srv: api.NewServer(api.Config{Service: svc, Admin: policy.NewAdminGate(adminToken),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})}
	for _, body := range []string{`{"context":{"user_id":"cat","account_id":"acme"}}`, `{"context":{"user_id":"cat","account_id":"umbrella"}}`} {
		if status, d := distrust.checkAs(body); status != 200 || d.Account != nil || d.Tier != "free" {
			t.Errorf("distrusting clients, %s: %d %+v, want a plain check under free", body, status, d)
		}
	}
	if status, d := distrust.checkAs(`{"context":{"user_id":"ann","account_id":"initech"}}`); status != 200 || d.Account == nil || d.Account.ID != "acme" {
		t.Errorf("distrusting clients, a record's account: %d %+v", status, d.Account)
	}
	if u := e.accountUsage("acme"); u.Windows["minute"].Count != 5 {
		t.Errorf("acme's pool counts %d after the distrusting checks, want 5 (ann's)", u.Windows["minute"].Count)
	}
}

// A member's check passes its own limits and its account's pooled ones:
// refused by the pool while its own windows have room, and by its own
// limit while the pool has room; each refusal names its limit and the
// wait of that window, and when both refuse, the longer wait's. Nothing a
// refused check asked for is recorded in either history.
func TestMemberAndAccountLimits(t *testing.T) {
	e := newEnv(t)
	// The members' own limits: one a minute, a hundred an hour, or one an
	// hour; concurrency and tokens unlimited.
	e.putTier("minutely", `{"requests_per_minute":1,"requests_per_hour":100,"requests_per_day":1000,"burst_allowance":0}`)
	e.putTier("hourly", `{"requests_per_minute":1,"requests_per_hour":1,"requests_per_day":1000,"burst_allowance":0}`)
	e.putTier("roomy", `{"requests_per_minute":100,"requests_per_hour":1000,"requests_per_day":10000,"burst_allowance":0}`)
	// The plans: the accounts' pooled limits.
	e.putTier("org", `{"requests_per_minute":100,"requests_per_hour":1000,"requests_per_day":10000,"burst_allowance":0,`+
		`"account":{"requests_per_minute":2,"tokens_per_day":100,"max_concurrent":1}}`)
	e.putTier("orghour", `{"requests_per_minute":100,"requests_per_hour":1000,"requests_per_day":10000,"burst_allowance":0,"account":{"requests_per_hour":2}}`)
	e.putTier("orgminute", `{"requests_per_minute":100,"requests_per_hour":1000,"requests_per_day":10000,"burst_allowance":0,"account":{"requests_per_minute":1}}`)
	e.must("PUT", "/v1/accounts/minute", `{"tier":"org","limits":{"tokens_per_day":null,"max_concurrent":null}}`, 201)
	e.must("PUT", "/v1/accounts/tokens", `{"tier":"org","limits":{"requests_per_minute":null,"max_concurrent":null}}`, 201)
	e.must("PUT", "/v1/accounts/calls", `{"tier":"org","limits":{"requests_per_minute":null,"tokens_per_day":null}}`, 201)
	e.must("PUT", "/v1/accounts/hour", `{"tier":"orghour"}`, 201)
	e.must("PUT", "/v1/accounts/brief", `{"tier":"orgminute"}`, 201)
	member := func(user, tier, account string) {
		e.must("PUT", "/v1/users/"+user, `{"tier":"`+tier+`","account":"`+account+`"}`, 201)
	}
	member("m1", "roomy", "minute")
	member("m2", "roomy", "minute")
	member("t1", "roomy", "tokens")
	member("c1", "roomy", "calls")
	member("c2", "roomy", "calls")
	member("own", "minutely", "minute")
	member("h1", "minutely", "hour")
	member("h2", "roomy", "hour")
	member("b1", "hourly", "brief")
	member("b2", "roomy", "brief")

	type step struct {
		advance time.Duration // before the check
		body    string
		status  int
		reason  string
		retry   int64
	}
	run := func(name string, steps []step) {
		t.Helper()
		for i, s := range steps {
			e.clock.Advance(s.advance)
			status, d := e.checkAs(s.body)
			if status != s.status || d.reason() != s.reason || d.RetryAfter != s.retry {
				t.Errorf("%s, check %d %s: %d %q retry_after %d, want %d %q retry_after %d", name, i+1, s.body, status, d.reason(), d.RetryAfter, s.status, s.reason, s.retry)
			}
		}
	}
	// The pool's minute, full of two members' requests, refuses a member
	// whose own minute is empty, until the pool's oldest request leaves.
	run("the account's minute", []step{
		{0, `{"context":{"user_id":"m1"}}`, 200, "", 0},
		{10 * time.Second, `{"context":{"user_id":"m2"}}`, 200, "", 0},
		{10 * time.Second, `{"context":{"user_id":"m1"}}`, 429, "account per-minute limit exceeded", 40},
		{40 * time.Second, `{"context":{"user_id":"m1"}}`, 200, "", 0},
	})
	// A member's own minute refuses while the pool has room.
	run("the member's own minute", []step{
		{time.Hour, `{"context":{"user_id":"own"}}`, 200, "", 0},
		{time.Second, `{"context":{"user_id":"own"}}`, 429, "per-minute limit exceeded", 59},
	})
	if u := e.accountUsage("minute"); u.Windows["day"].Count != 4 {
		t.Errorf("the pool counts %d requests today, want the 4 admitted", u.Windows["day"].Count)
	}
	// The pool's day of tokens: a finished call's 90 tokens leave no room
	// for 20 more until they leave the day.
	e.clock.Advance(time.Hour)
	status, d := e.checkAs(`{"context":{"user_id":"t1"},"tokens":90}`)
	if status != 200 || d.CallID == nil || d.Account.Windows["day"].Tokens == nil || d.Account.Windows["day"].Tokens.Used != 90 {
		t.Fatalf("t1's first call: %d %+v", status, d)
	}
	e.must("POST", "/v1/calls/"+*d.CallID+"/finish", `{"tokens":90}`, 200)
	run("the account's tokens", []step{
		{time.Hour, `{"context":{"user_id":"t1"},"tokens":20}`, 429, "account per-day token limit exceeded", 23 * 3600},
		{0, `{"context":{"user_id":"t1"},"tokens":10}`, 200, "", 0},
	})
	// The pool's calls: one open at a time over all members.
	e.clock.Advance(time.Hour)
	status, d = e.checkAs(`{"context":{"user_id":"c1"}}`)
	if status != 200 || d.CallID == nil || d.Account.Concurrency == nil || d.Account.Concurrency.InFlight != 1 {
		t.Fatalf("c1's call: %d %+v", status, d)
	}
	run("the account's calls", []step{
		{time.Second, `{"context":{"user_id":"c2"}}`, 429, "account concurrent call limit exceeded", 1},
	})
	e.must("POST", "/v1/calls/"+*d.CallID+"/finish", ``, 200)
	run("the account's calls, one finished", []step{
		{time.Second, `{"context":{"user_id":"c2"}}`, 200, "", 0},
	})
	// Both refuse, the pool's wait the longer: the pool's hour is full of
	// h2's and h1's requests when h1's own minute is too.
	e.clock.Advance(time.Hour)
	run("both, the account's longer", []step{
		{0, `{"context":{"user_id":"h2"}}`, 200, "", 0},
		{time.Second, `{"context":{"user_id":"h1"}}`, 200, "", 0},
		{time.Second, `{"context":{"user_id":"h1"}}`, 429, "account per-hour limit exceeded", 3598},
	})
	// Both refuse, the member's wait the longer: b1's own hour is full
	// when b2 has just filled the pool's minute.
	e.clock.Advance(time.Hour)
	run("both, the member's longer", []step{
		{0, `{"context":{"user_id":"b1"}}`, 200, "", 0},
		{2*time.Minute - time.Second, `{"context":{"user_id":"b2"}}`, 200, "", 0},
		{time.Second, `{"context":{"user_id":"b1"}}`, 429, "per-hour limit exceeded", 3480},
	})
	// Refused checks recorded nothing: the pools and the members hold
	// only what was admitted.
	for account, want := range map[string]int64{"minute": 4, "tokens": 2, "calls": 2, "hour": 2, "brief": 2} {
		if u := e.accountUsage(account); u.Windows["day"].Count != want {
			t.Errorf("pool %s counts %d requests today, want %d", account, u.Windows["day"].Count, want)
		}
	}
	for user, want := range map[string]string{"m1": `"day":{"count":2,`, "own": `"day":{"count":1,`, "c2": `"day":{"count":1,`, "h1": `"day":{"count":1,`, "b1": `"day":{"count":1,`} {
		if rec := e.do(http.MethodGet, "/v1/usage/"+user, "", true); !strings.Contains(rec.Body.String(), want) {
			t.Errorf("%s's usage %s, want %s", user, rec.Body, want)
		}
	}
}

// A member's answer names the account's policies apart from the user's in
// RateLimit-Policy and RateLimit, only for the windows the pool limits,
// and X-RateLimit-* (requests and tokens) give the tighter of the two.
func TestAccountRateLimitHeaders(t *testing.T) {
	e := newEnv(t)
	e.putTier("team", `{"requests_per_minute":10,"requests_per_hour":100,"requests_per_day":1000,"burst_allowance":0,`+
		`"account":{"requests_per_minute":3,"requests_per_day":500,"tokens_per_minute":1000}}`)
	e.putTier("single", `{"requests_per_minute":1,"requests_per_hour":100,"requests_per_day":1000,"burst_allowance":0,"tokens_per_minute":5000}`)
	e.must("PUT", "/v1/accounts/acme", `{"tier":"team"}`, 201)
	e.must("PUT", "/v1/users/solo", `{"tier":"single","account":"acme"}`, 201)
	const policyFields = `"minute";q=10;w=60, "hour";q=100;w=3600, "day";q=1000;w=86400, "account-minute";q=3;w=60, "account-day";q=500;w=86400`
	for _, step := range []struct {
		name    string
		advance time.Duration
		body    string
		status  int
		want    wantHeaders
		tokens  [3]string // X-RateLimit-{Limit,Remaining,Reset}-Tokens
	}{
		{
			name:   "the pool's minute is tighter than the user's, and only the pool limits tokens",
			body:   `{"context":{"user_id":"ann","account_id":"acme"},"tokens":100}`,
			status: 200,
			want: wantHeaders{
				policy:     policyFields,
				limit:      `"minute";r=9;t=60, "hour";r=99;t=3600, "day";r=999;t=86400, "account-minute";r=2;t=60, "account-day";r=499;t=86400`,
				xLimit:     "3",
				xRemaining: "2",
				xReset:     "60",
			},
			tokens: [3]string{"1000", "900", "0"},
		},
		{
			name:    "the user's minute is tighter, and the user's tokens have more room than the pool's",
			advance: 20 * time.Second,
			body:    `{"context":{"user_id":"solo"},"tokens":200}`,
			status:  200,
			want: wantHeaders{
				policy:     `"minute";q=1;w=60, "hour";q=100;w=3600, "day";q=1000;w=86400, "account-minute";q=3;w=60, "account-day";q=500;w=86400`,
				limit:      `"minute";r=0;t=60, "hour";r=99;t=3600, "day";r=999;t=86400, "account-minute";r=1;t=40, "account-day";r=498;t=86380`,
				xLimit:     "1",
				xRemaining: "0",
				xReset:     "60",
			},
			tokens: [3]string{"1000", "700", "0"},
		},
		{
			name:    "refused by the pool: nothing consumed, the pool's minute the tightest",
			advance: 10 * time.Second,
			body:    `{"context":{"user_id":"ann","account_id":"acme"},"tokens":800}`,
			status:  429,
			want: wantHeaders{
				policy:     policyFields,
				limit:      `"minute";r=9;t=30, "hour";r=99;t=3570, "day";r=999;t=86370, "account-minute";r=1;t=30, "account-day";r=498;t=86370`,
				xLimit:     "3",
				xRemaining: "1",
				xReset:     "30",
			},
			// The pool's tokens refused: their reset is the wait, not
			// the 0 of a window that counts only reservations.
			tokens: [3]string{"1000", "700", "60"},
		},
	} {
		t.Run(step.name, func(t *testing.T) {
			e.clock.Advance(step.advance)
			rec := e.do(http.MethodPost, "/v1/check", step.body, false)
			if rec.Code != step.status {
				t.Fatalf("%d %s, want %d", rec.Code, rec.Body, step.status)
			}
			checkHeaders(t, rec, step.want)
			for i, name := range []string{"X-RateLimit-Limit-Tokens", "X-RateLimit-Remaining-Tokens", "X-RateLimit-Reset-Tokens"} {
				if got := rec.Header().Values(name); len(got) != 1 || got[0] != step.tokens[i] {
					t.Errorf("%s = %q, want %q", name, got, step.tokens[i])
				}
			}
			if step.status == 429 {
				d := decode[accountDecision](t, rec)
				// Open calls' reservations, not finished tokens, fill the
				// pool's minute: a minute is the wait the meter gives.
				if d.reason() != "account per-minute token limit exceeded" || rec.Header().Get("Retry-After") != "60" || d.RetryAfter != 60 {
					t.Errorf("refusal %q retry_after %d, Retry-After %q", d.reason(), d.RetryAfter, rec.Header().Get("Retry-After"))
				}
			}
		})
	}
	// A user in no account has no account policy.
	rec := e.do(http.MethodPost, "/v1/check", `{"context":{"user_id":"plain"}}`, false)
	if got := rec.Header().Get("RateLimit-Policy"); got != freePolicy {
		t.Errorf("a plain user's RateLimit-Policy = %q, want %q", got, freePolicy)
	}
}

// GET /v1/accounts/{id}/usage gives the pool in the shape of a user's
// usage: every member's requests, tokens and open calls, with limit,
// remaining and reset where the pool limits. Finishing a member's call
// settles the pool's tokens as well as the member's; a member who moves to
// another account leaves their past requests with the first; DELETE
// forgets the pool and leaves the members' own windows.
func TestAccountUsage(t *testing.T) {
	e := newEnv(t)
	e.putTier("team", `{"requests_per_minute":10,"requests_per_hour":100,"requests_per_day":1000,"burst_allowance":0,`+
		`"account":{"requests_per_minute":5,"tokens_per_day":1000,"max_concurrent":4}}`)
	e.must("PUT", "/v1/accounts/acme", `{"tier":"team","limits":{"requests_per_minute":6}}`, 201)
	e.must("PUT", "/v1/accounts/initech", `{"tier":"team"}`, 201)
	e.must("PUT", "/v1/users/ann", `{"account":"acme"}`, 201)

	_, first := e.checkAs(`{"context":{"user_id":"ann"},"tokens":300}`)
	e.clock.Advance(10 * time.Second)
	_, second := e.checkAs(`{"context":{"user_id":"bob","account_id":"acme"},"tokens":200}`)
	if first.CallID == nil || second.CallID == nil {
		t.Fatalf("the checks opened no calls: %+v %+v", first, second)
	}
	u := e.accountUsage("acme")
	if u.AccountID != "acme" || u.Tier != "team" || *u.Limits["requests_per_minute"] != 6 || *u.Limits["max_concurrent"] != 4 || u.Limits["requests_per_hour"] != nil {
		t.Errorf("usage names %+v", u)
	}
	if m := u.Windows["minute"]; m.Count != 2 || *m.Limit != 6 || *m.Remaining != 4 || *m.Reset != 50 || m.Tokens.Used != 500 || m.Tokens.Limit != nil {
		t.Errorf("the pool's minute: %+v", m)
	}
	if h := u.Windows["hour"]; h.Count != 2 || h.Limit != nil || h.Remaining != nil || h.Reset != nil {
		t.Errorf("the pool's hour, which it does not limit: %+v", h)
	}
	if d := u.Windows["day"]; d.Count != 2 || d.Tokens.Used != 500 || *d.Tokens.Limit != 1000 || u.CallsInFlight != 2 {
		t.Errorf("the pool's day: %+v, calls in flight %d", d, u.CallsInFlight)
	}

	// ann's call finished with 120 of its 300 tokens: the pool counts 120,
	// and ann's own usage too.
	e.clock.Advance(time.Second)
	e.must("POST", "/v1/calls/"+*first.CallID+"/finish", `{"tokens":120}`, 200)
	if u := e.accountUsage("acme"); u.Windows["day"].Tokens.Used != 120+200 || u.CallsInFlight != 1 {
		t.Errorf("the pool after ann's finish: %d tokens, %d calls in flight; want 320 and 1", u.Windows["day"].Tokens.Used, u.CallsInFlight)
	}
	if rec := e.do(http.MethodGet, "/v1/usage/ann", "", true); !strings.Contains(rec.Body.String(), `"day":{"count":1,"tokens":{"used":120},"cost":{"used":"0"}}`) || !strings.Contains(rec.Body.String(), `"calls_in_flight":0`) {
		t.Errorf("ann's own usage: %s", rec.Body)
	}
	// A finish again changes nothing, in either history.
	e.must("POST", "/v1/calls/"+*first.CallID+"/finish", `{"tokens":120}`, 200)
	if u := e.accountUsage("acme"); u.Windows["day"].Tokens.Used != 320 {
		t.Errorf("the pool after a repeated finish: %d tokens", u.Windows["day"].Tokens.Used)
	}
	// A keepalive of bob's call keeps the pool's copy from expiring too:
	// finished after its first expiry, it counts its 50 tokens there (see
	// below), not the 200 it reserved.
	e.clock.Advance(time.Minute)
	e.must("POST", "/v1/calls/"+*second.CallID+"/keepalive", ``, 200)
	e.clock.Advance(policy.DefaultCallTimeout - time.Second)
	if u := e.accountUsage("acme"); u.CallsInFlight != 1 {
		t.Errorf("bob's call, kept alive: %d calls in flight in the pool", u.CallsInFlight)
	}
	e.must("POST", "/v1/calls/"+*second.CallID+"/finish", `{"tokens":50}`, 200)

	// ann moves to initech: her past requests stay with acme.
	e.must("PUT", "/v1/users/ann", `{"account":"initech"}`, 200)
	e.checkAs(`{"context":{"user_id":"ann"}}`)
	if a, i := e.accountUsage("acme"), e.accountUsage("initech"); a.Windows["day"].Count != 2 || a.Windows["day"].Tokens.Used != 170 || i.Windows["day"].Count != 1 {
		t.Errorf("after ann moved: acme counts %d requests and %d tokens, initech %d requests; want 2, 170 and 1",
			a.Windows["day"].Count, a.Windows["day"].Tokens.Used, i.Windows["day"].Count)
	}

	// Forgetting the pool leaves the members' own windows.
	e.must("DELETE", "/v1/accounts/acme/usage", "", 204)
	if u := e.accountUsage("acme"); u.Windows["day"].Count != 0 || u.Windows["day"].Tokens.Used != 0 || u.CallsInFlight != 0 {
		t.Errorf("the pool after DELETE: %+v", u)
	}
	if rec := e.do(http.MethodGet, "/v1/usage/bob", "", true); !strings.Contains(rec.Body.String(), `"day":{"count":1,"tokens":{"used":50},"cost":{"used":"0"}}`) {
		t.Errorf("bob's own usage after the pool was forgotten: %s", rec.Body)
	}
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/v1/accounts/umbrella/usage", 404},
		{"DELETE", "/v1/accounts/umbrella/usage", 404},
		{"GET", "/v1/accounts/a%01b/usage", 400},
		{"DELETE", "/v1/accounts/" + strings.Repeat("a", 257) + "/usage", 400},
	} {
		if rec := e.do(tc.method, tc.path, "", true); rec.Code != tc.status {
			t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, rec.Code, rec.Body, tc.status)
		}
	}
}

// GET /v1/stats counts a refusal by an account's pooled limits under
// "account", beside the member's own refusals under their windows.
func TestStatsCountAccountRefusals(t *testing.T) {
	e := newEnv(t)
	e.putTier("team", `{"requests_per_minute":1,"requests_per_hour":100,"requests_per_day":1000,"burst_allowance":0,"account":{"requests_per_minute":2}}`)
	e.must("PUT", "/v1/accounts/acme", `{"tier":"team"}`, 201)
	for _, step := range []struct {
		user   string
		status int
	}{{"a", 200}, {"b", 200}, {"c", 429}, {"a", 429}} {
		if status, d := e.checkAs(`{"context":{"user_id":"` + step.user + `","account_id":"acme"}}`); status != step.status {
			t.Fatalf("%s: %d %+v, want %d", step.user, status, d, step.status)
		}
	}
	if err := e.store.FlushCounts(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got statsAnswer
	if err := json.Unmarshal(e.must("GET", "/v1/stats?period=hour&tier=team", "", 200).Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	last := got.Tiers[0].Buckets[len(got.Tiers[0].Buckets)-1]
	// c was refused by the pool alone; a's second check by both, with the
	// same wait, which names the member's own minute.
	if last.Admitted != 2 || last.Refused != 2 || last.RefusedBy["account"] != 1 || last.RefusedBy["minute"] != 1 {
		t.Errorf("the bucket of the checks: %+v, want 2 admitted, 1 refused by the account and 1 by the minute", last)
	}
}
