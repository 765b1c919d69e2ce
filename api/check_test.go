package api_test

import (
	"net/http"
	"testing"

	"github.com/policyguard/policyguard/api"
)

// TestCheckBodyMistakes sends the mistakes a new client makes in a check
// body: each is a 400 whose message says what to do, and records nothing.
// What stays open is context: an agent sends its whole context there.
func TestCheckBodyMistakes(t *testing.T) {
	e := newGuardEnv(t, api.Config{})
	const other = `: a check body holds only input_text, context, tokens, model and dry_run; anything else goes in "context"`
	for _, tc := range []struct {
		name, path, body string
		status           int
		message          string // the whole message of a 400
	}{
		// Context's members at the top level were once read as absent: the
		// check went through as anonymous, on the default tier, so every
		// user of such a client shared one quota.
		{"user_id at the top level", "", `{"user_id":"x","user_tier":"pro"}`, 400, `unknown field "user_id": user_id belongs in "context"`},
		{"user_tier at the top level", "", `{"context":{"user_id":"x"},"user_tier":"pro"}`, 400, `unknown field "user_tier": user_tier belongs in "context"`},
		{"feature at the top level", "", `{"input_text":"hi","feature":"search"}`, 400, `unknown field "feature": feature belongs in "context"`},
		{"names match whatever their case", "", `{"User_ID":"x"}`, 400, `unknown field "User_ID": user_id belongs in "context"`},
		{"upper case", "", `{"FEATURE":"search","context":{}}`, 400, `unknown field "FEATURE": feature belongs in "context"`},
		{"the first unknown member is named", "", `{"session":"m","user_id":"x"}`, 400, `unknown field "session"` + other},
		{"model is a string", "", `{"model":4}`, 400, `model must be a string, not number`},
		{"any other member", "", `{"session":{"id":1},"context":{"user_id":"x"}}`, 400, `unknown field "session"` + other},
		{"a delimiter is not a case", "", `{"user-id":"x"}`, 400, `unknown field "user-id"` + other},
		{"a misspelt field", "", `{"input":"hi"}`, 400, `unknown field "input"` + other},
		{"null is a value", "", `{"user_id":null}`, 400, `unknown field "user_id": user_id belongs in "context"`},
		{"tokens inside context", "", `{"context":{"user_id":"x","tokens":100}}`, 400, `context.tokens: tokens is a top-level field, beside "context", not inside it`},
		{"tokens inside context in another case", "", `{"context":{"Tokens":null}}`, 400, `context.tokens: tokens is a top-level field, beside "context", not inside it`},
		// Type errors come first: they are the library's, from the one
		// reading of the body.
		{"a wrong type before an unknown member", "", `{"user_id":"x","context":{"user_id":1}}`, 400, `context.user_id must be a string, not number`},

		// dry_run, in the body or the query: exactly true or false.
		{"dry_run a string", "", `{"dry_run":"true"}`, 400, `dry_run must be true or false`},
		{"dry_run a number", "", `{"dry_run":1}`, 400, `dry_run must be true or false`},
		{"dry_run null", "", `{"dry_run":null}`, 400, `dry_run must be true or false`},
		{"dry_run in context is context's", "", `{"context":{"user_id":"ctx-dry","dry_run":true}}`, 200, ""},
		{"query dry_run=1", "/v1/check?dry_run=1", `{}`, 400, `dry_run must be true or false`},
		{"query dry_run=TRUE", "/v1/check?dry_run=TRUE", `{}`, 400, `dry_run must be true or false`},
		{"query dry_run=f", "/v1/check?dry_run=f", `{}`, 400, `dry_run must be true or false`},
		{"query dry_run empty", "/v1/check?dry_run=", `{}`, 400, `dry_run must be true or false`},
		{"query dry_run twice", "/v1/check?dry_run=true&dry_run=true", `{}`, 400, `dry_run must be true or false, given once`},
		{"query and body disagree", "/v1/check?dry_run=true", `{"dry_run":false}`, 400, `dry_run=true in the query and "dry_run": false in the body disagree: give one, or the same in both`},
		{"body and query disagree", "/v1/check?dry_run=false", `{"dry_run":true}`, 400, `dry_run=false in the query and "dry_run": true in the body disagree: give one, or the same in both`},
		// The query's error comes before the body is read.
		{"a bad query before a bad body", "/v1/check?dry_run=yes", `{"user_id":"x"}`, 400, `dry_run must be true or false`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path
			if path == "" {
				path = "/v1/check"
			}
			before := e.requests.recorded.Load()
			rec := e.send(http.MethodPost, path, tc.body, nil)
			if rec.Code != tc.status || message(rec) != tc.message {
				t.Fatalf("got %d %s, want %d with message %q", rec.Code, rec.Body, tc.status, tc.message)
			}
			want := int64(0)
			if tc.status == http.StatusOK {
				want = 1
			}
			if n := e.requests.recorded.Load() - before; n != want {
				t.Fatalf("recorded %d requests, want %d", n, want)
			}
		})
	}
	for _, user := range []string{"x", "anonymous"} {
		if n := e.dayCount(user); n != 0 {
			t.Errorf("%s has %d requests recorded", user, n)
		}
	}
}

// TestCheckBodyDryRun: dry_run in the body is the query's dry_run, and
// both may be given when they agree. Names of the body match whatever
// their case, as every other field's.
func TestCheckBodyDryRun(t *testing.T) {
	e := newGuardEnv(t, api.Config{})
	for _, tc := range []struct {
		path, body string
		dry        bool
	}{
		{"/v1/check", `{"context":{"user_id":"d"},"dry_run":true}`, true},
		{"/v1/check", `{"context":{"user_id":"d"},"DRY_RUN":true}`, true},
		{"/v1/check?dry_run=true", `{"context":{"user_id":"d"},"dry_run":true}`, true},
		{"/v1/check?dry_run=true", `{"context":{"user_id":"d"}}`, true},
		{"/v1/check", `{"context":{"user_id":"d"},"dry_run":false}`, false},
		{"/v1/check?dry_run=false", `{"context":{"user_id":"d"},"dry_run":false}`, false},
		{"/v1/check?dry_run=false", `{"context":{"user_id":"d"}}`, false},
		{"/v1/check", `{"context":{"user_id":"d"}}`, false},
	} {
		before := e.dayCount("d")
		rec := e.send(http.MethodPost, tc.path, tc.body, nil)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s %s: %d %s", tc.path, tc.body, rec.Code, rec.Body)
		}
		want := before + 1
		if tc.dry {
			want = before
		}
		if got := e.dayCount("d"); got != want {
			t.Errorf("%s %s: %d requests recorded, want %d", tc.path, tc.body, got, want)
		}
	}
}

// TestCheckContextStaysOpen: context takes any member beside its own, in
// any case, however nested, so an agent can send its whole context.
func TestCheckContextStaysOpen(t *testing.T) {
	e := newGuardEnv(t, api.Config{})
	rec := e.send(http.MethodPost, "/v1/check", `{"input_text":"hi","tokens":0,"context":{"User_Id":"open","session":{"id":7,"tokens_used":[1,2]},"model":"m","Model":"n","dryRun":"yes"}}`, nil)
	if rec.Code != http.StatusOK || e.dayCount("open") != 1 {
		t.Fatalf("%d %s; %d recorded", rec.Code, rec.Body, e.dayCount("open"))
	}
}
