package api_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

// time_zone and billing_anchor on records and accounts: answers show what
// is set, absent or null keeps the default, bad values are a 400 naming
// the field, and the usage answers show the current period they give.
// The clock stands at 2026-03-01T12:00:00Z.
func TestBillingCycleRoutes(t *testing.T) {
	e := newEnv(t, withService(func(*db.Store) policy.Option {
		loc, err := policy.LoadTimeZone("America/New_York")
		if err != nil {
			t.Fatal(err)
		}
		return policy.WithTimeZone(loc)
	}))
	e.putTier("team", `{"requests_per_minute":10,"requests_per_hour":100,"requests_per_day":1000,"burst_allowance":0,"account":{"requests_per_minute":30}}`)
	steps := []struct {
		name, method, path, body string
		status                   int
		want                     string // a fragment of the answer
	}{
		{"account with both", "PUT", "/v1/accounts/acme", `{"tier":"team","time_zone":"Australia/Sydney","billing_anchor":31}`, 201,
			`"limits":null,"time_zone":"Australia/Sydney","billing_anchor":31,"note":""`},
		{"account with neither shows neither", "PUT", "/v1/accounts/zeta", `{"tier":"team","time_zone":null,"billing_anchor":null}`, 201,
			`{"account_id":"zeta","tier":"team","limits":null,"note":"","updated_at":"2026-03-01T12:00:00Z"}`},
		{"record with a zone", "PUT", "/v1/users/ann", `{"account":"acme","time_zone":"Europe/Berlin"}`, 201,
			`"account":"acme","limits":null,"time_zone":"Europe/Berlin","note":""`},
		{"record with an anchor", "PUT", "/v1/users/bob", `{"account":"acme","billing_anchor":15}`, 201, `"limits":null,"billing_anchor":15,"note":""`},
		{"record with neither", "PUT", "/v1/users/cy", `{}`, 201, `{"user_id":"cy","tier":null,"limits":null,"note":"","updated_at":"2026-03-01T12:00:00Z"}`},
		{"an answer sent back", "PUT", "/v1/users/ann", `{"user_id":"ann","tier":null,"account":"acme","limits":null,"time_zone":"Europe/Berlin","note":"","updated_at":"2026-03-01T12:00:00Z"}`, 200,
			`"time_zone":"Europe/Berlin"`},
		{"read", "GET", "/v1/accounts/acme", "", 200, `"time_zone":"Australia/Sydney","billing_anchor":31`},
		{"listed", "GET", "/v1/users", "", 200, `"billing_anchor":15`},

		{"unknown zone", "PUT", "/v1/users/dee", `{"time_zone":"Mars/Base"}`, 400, `time_zone \"Mars/Base\" is not a known time zone`},
		{"the host's zone is no name", "PUT", "/v1/users/dee", `{"time_zone":"Local"}`, 400, `time_zone \"Local\" is not a known time zone`},
		{"empty zone", "PUT", "/v1/users/dee", `{"time_zone":""}`, 400, `time_zone \"\" is not a known time zone`},
		{"zone in the wrong case", "PUT", "/v1/accounts/dee", `{"tier":"team","time_zone":"europe/berlin"}`, 400, `time_zone \"europe/berlin\" is not a known time zone`},
		{"zone not a string", "PUT", "/v1/users/dee", `{"time_zone":1}`, 400, "time_zone must be a string"},
		{"anchor 0", "PUT", "/v1/users/dee", `{"billing_anchor":0}`, 400, "billing_anchor must be an integer from 1 to 31"},
		{"anchor 32", "PUT", "/v1/accounts/dee", `{"tier":"team","billing_anchor":32}`, 400, "billing_anchor must be an integer from 1 to 31"},
		{"anchor a fraction", "PUT", "/v1/users/dee", `{"billing_anchor":1.5}`, 400, "billing_anchor must be an integer from 1 to 31"},
		{"anchor a string", "PUT", "/v1/users/dee", `{"billing_anchor":"1"}`, 400, "billing_anchor must be an integer from 1 to 31"},
		{"nothing made by the refusals", "GET", "/v1/users/dee", "", 404, "has no record"},

		// 2026-03-01T12:00Z is 23:00 in Sydney on the 1st: the period of
		// the 31st began on 28 February there.
		{"account usage", "GET", "/v1/accounts/acme/usage", "", 200,
			`"period":{"start":"2026-02-28T00:00:00+11:00","end":"2026-03-31T00:00:00+11:00","time_zone":"Australia/Sydney","billing_anchor":31}`},
		{"account usage, the defaults", "GET", "/v1/accounts/zeta/usage", "", 200,
			`"period":{"start":"2026-03-01T00:00:00-05:00","end":"2026-04-01T00:00:00-04:00","time_zone":"America/New_York","billing_anchor":1}`},
		{"member's own zone, account's anchor", "GET", "/v1/usage/ann", "", 200,
			`"period":{"start":"2026-02-28T00:00:00+01:00","end":"2026-03-31T00:00:00+02:00","time_zone":"Europe/Berlin","billing_anchor":31}`},
		{"member's own anchor, account's zone", "GET", "/v1/usage/bob", "", 200,
			`"period":{"start":"2026-02-15T00:00:00+11:00","end":"2026-03-15T00:00:00+11:00","time_zone":"Australia/Sydney","billing_anchor":15}`},
		{"no account: the defaults", "GET", "/v1/usage/cy", "", 200,
			`"period":{"start":"2026-03-01T00:00:00-05:00","end":"2026-04-01T00:00:00-04:00","time_zone":"America/New_York","billing_anchor":1}`},
		{"no record: the defaults", "GET", "/v1/usage/nobody?tier=team", "", 200, `"time_zone":"America/New_York","billing_anchor":1}`},

		{"cleared with null", "PUT", "/v1/accounts/acme", `{"tier":"team","time_zone":null}`, 200, `{"account_id":"acme","tier":"team","limits":null,"note":""`},
		{"the member follows", "GET", "/v1/usage/bob", "", 200,
			`"period":{"start":"2026-02-15T00:00:00-05:00","end":"2026-03-15T00:00:00-04:00","time_zone":"America/New_York","billing_anchor":15}`},
	}
	for _, s := range steps {
		rec := e.do(s.method, s.path, s.body, true)
		if rec.Code != s.status || !strings.Contains(rec.Body.String(), s.want) {
			t.Fatalf("%s: %s %s: %d %s, want %d with %s", s.name, s.method, s.path, rec.Code, rec.Body, s.status, s.want)
		}
	}
	// The test clock moves the period.
	e.clock.Set(time.Date(2026, 3, 31, 4, 0, 0, 0, time.UTC)) // 00:00 in New York
	rec := e.do("GET", "/v1/usage/cy", "", true)
	if want := `"period":{"start":"2026-03-01T00:00:00-05:00","end":"2026-04-01T00:00:00-04:00"`; !strings.Contains(rec.Body.String(), want) {
		t.Errorf("on 31 March: %s, want %s", rec.Body, want)
	}
	e.clock.Set(time.Date(2026, 4, 1, 4, 0, 0, 0, time.UTC))
	rec = e.do("GET", "/v1/usage/cy", "", true)
	if want := `"period":{"start":"2026-04-01T00:00:00-04:00","end":"2026-05-01T00:00:00-04:00"`; !strings.Contains(rec.Body.String(), want) {
		t.Errorf("on 1 April: %s, want %s", rec.Body, want)
	}
}

// A tiers file carries the billing cycle of accounts and records, and
// refuses bad ones naming the entry.
func TestTiersFileBillingCycle(t *testing.T) {
	team := policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(10)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(1000))}, Features: []string{}, Account: &policy.LimitSet{}}
	f := api.TiersFile{
		Tiers:    []policy.Tier{team},
		Accounts: []policy.Account{{AccountID: "acme", Tier: "team", TimeZone: "Europe/Berlin", BillingAnchor: 31}},
		Users:    []policy.UserRecord{{UserID: "ann", Account: "acme", BillingAnchor: 15}, {UserID: "bob", TimeZone: "Asia/Tokyo"}, {UserID: "cy"}},
	}
	var buf bytes.Buffer
	if err := f.Write(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"time_zone": "Europe/Berlin",
      "billing_anchor": 31,`, `"billing_anchor": 15,`, `"time_zone": "Asia/Tokyo",`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("file:\n%s\nwant it to hold\n%s", buf.String(), want)
		}
	}
	if got := strings.Count(buf.String(), "time_zone"); got != 2 {
		t.Errorf("file holds time_zone %d times, want 2 (unset is absent):\n%s", got, buf.String())
	}
	read, err := api.ReadTiersFileAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(read.Accounts) != 1 || !policy.SameAccount(&read.Accounts[0], &f.Accounts[0]) {
		t.Errorf("accounts read back %+v", read.Accounts)
	}
	if len(read.Users) != 3 {
		t.Fatalf("users read back %+v", read.Users)
	}
	for i := range f.Users {
		if !policy.SameRecord(&read.Users[i], &f.Users[i]) {
			t.Errorf("user read back %+v, want %+v", read.Users[i], f.Users[i])
		}
	}

	_, err = api.ReadTiersFileAll(strings.NewReader(`{"tiers":[],
		"accounts":[{"account_id":"a","tier":"team","time_zone":"Mars/Base"},{"account_id":"b","tier":"team","billing_anchor":0}],
		"users":[{"user_id":"u","time_zone":"Local"},{"user_id":"v","billing_anchor":99}]}`))
	for _, want := range []string{
		`account 1 ("a"): time_zone "Mars/Base" is not a known time zone`,
		`account 2 ("b"): billing_anchor must be an integer from 1 to 31`,
		`user 1 ("u"): time_zone "Local" is not a known time zone`,
		`user 2 ("v"): billing_anchor must be an integer from 1 to 31`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v\ndoes not say %q", err, want)
		}
	}
}
