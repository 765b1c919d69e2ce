package api_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api"
)

// TestMeteredCallsAPI walks one user through the rules of metered calls,
// step by step through the whole Echo instance: tier fields and their
// validation, tokens on checks, the call id and token windows of each
// decision, the order of refusals, finish and keepalive with every bad
// input, usage, and forgetting. {name} in a path is the call id a step
// saved under that name.
func TestMeteredCallsAPI(t *testing.T) {
	e := newEnv(t)
	limits := `"requests_per_minute":100,"requests_per_hour":1000,"requests_per_day":1000,"burst_allowance":0`
	ids := map[string]string{}
	callID := regexp.MustCompile(`"call_id":"([A-Za-z0-9_-]+)"`)
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		want                     string
		save                     string            // saves the answer's call_id under this name
		header                   map[string]string // answer header fields; "" means absent
		advance                  time.Duration     // the clock moves before the step
	}{
		// Tiers.
		{name: "tier: token limit not a number", method: "PUT", path: "/v1/tiers/meter", body: `{` + limits + `,"tokens_per_minute":"x"}`, status: 400, want: `tokens_per_minute must be an integer from 0 to 2147483647`},
		{name: "tier: negative token limit", method: "PUT", path: "/v1/tiers/meter", body: `{` + limits + `,"tokens_per_hour":-1}`, status: 400, want: `tokens_per_hour must be an integer from 0 to 2147483647`},
		{name: "tier: fractional token limit", method: "PUT", path: "/v1/tiers/meter", body: `{` + limits + `,"tokens_per_day":1.5}`, status: 400, want: `tokens_per_day must be an integer from 0 to 2147483647`},
		{name: "tier: max_concurrent too large", method: "PUT", path: "/v1/tiers/meter", body: `{` + limits + `,"max_concurrent":2147483648}`, status: 400, want: `max_concurrent must be an integer from 0 to 2147483647`},
		{name: "tier: nothing was created", method: "GET", path: "/v1/tiers/meter", status: 404, want: `not found`},
		{name: "tier: metered", method: "PUT", path: "/v1/tiers/meter", body: `{` + limits + `,"tokens_per_minute":1000,"tokens_per_hour":5000,"tokens_per_day":null,"max_concurrent":2}`, status: 201,
			want: `"tokens_per_minute":1000,"tokens_per_hour":5000,"tokens_per_day":null,"max_concurrent":2`},
		{name: "tier: GET returns all four", method: "GET", path: "/v1/tiers/meter", status: 200, want: `"tokens_per_minute":1000,"tokens_per_hour":5000,"tokens_per_day":null,"max_concurrent":2`},
		{name: "tier: absent means null", method: "PUT", path: "/v1/tiers/plain", body: `{` + limits + `}`, status: 201, want: `"tokens_per_minute":null,"tokens_per_hour":null,"tokens_per_day":null,"max_concurrent":null`},
		{name: "tier: seeded tiers meter nothing", method: "GET", path: "/v1/tiers/pro", status: 200, want: `"tokens_per_minute":null,"tokens_per_hour":null,"tokens_per_day":null,"max_concurrent":null`},

		// Checks: tokens.
		{name: "check: tokens a string", method: "POST", path: "/v1/check", body: `{"context":{"user_id":"mu","user_tier":"meter"},"tokens":"600"}`, status: 400, want: `tokens must be an integer from 0 to 2147483647`},
		{name: "check: tokens negative", method: "POST", path: "/v1/check", body: `{"context":{"user_id":"mu","user_tier":"meter"},"tokens":-1}`, status: 400, want: `tokens must be an integer`},
		{name: "check: tokens too large", method: "POST", path: "/v1/check", body: `{"context":{"user_id":"mu","user_tier":"meter"},"tokens":2147483648}`, status: 400, want: `tokens must be an integer`},
		{name: "check: tokens fractional", method: "POST", path: "/v1/check", body: `{"context":{"user_id":"mu","user_tier":"meter"},"tokens":1.5}`, status: 400, want: `tokens must be an integer`},
		{name: "check: tokens null", method: "POST", path: "/v1/check", body: `{"context":{"user_id":"mu","user_tier":"meter"},"tokens":null}`, status: 400, want: `tokens must be an integer`},
		{name: "check: tokens an object", method: "POST", path: "/v1/check", body: `{"context":{"user_id":"mu","user_tier":"meter"},"tokens":{"n":1}}`, status: 400, want: `tokens must be an integer`},
		{name: "check: unmetered tier has a null call id", method: "POST", path: "/v1/check", body: `{"context":{"user_id":"pu","user_tier":"plain"},"tokens":5}`, status: 200,
			want:   `"guardrail":"rate_limiter","windows":{"minute":{"limit":100,"remaining":99,"reset":60},"hour":{"limit":1000,"remaining":999,"reset":3600},"day":{"limit":1000,"remaining":999,"reset":86400}},"call_id":null}`,
			header: map[string]string{"X-RateLimit-Limit-Tokens": "", "X-RateLimit-Remaining-Tokens": "", "X-RateLimit-Reset-Tokens": ""}},
		{name: "check: metered admission opens a call", method: "POST", path: "/v1/check", body: `{"context":{"user_id":"mu","user_tier":"meter"},"tokens":600}`, status: 200,
			want: `"windows":{"minute":{"limit":100,"remaining":99,"reset":60,"tokens":{"limit":1000,"used":600,"remaining":400,"reset":0}},"hour":{"limit":1000,"remaining":999,"reset":3600,"tokens":{"limit":5000,"used":600,"remaining":4400,"reset":0}},"day":{"limit":1000,"remaining":999,"reset":86400}},"call_id":"`,
			save: "c1", header: map[string]string{"X-RateLimit-Limit-Tokens": "1000", "X-RateLimit-Remaining-Tokens": "400", "X-RateLimit-Reset-Tokens": "0", "X-RateLimit-Remaining": "99"}},
		{name: "check: concurrency counts the call", method: "POST", path: "/v1/check?dry_run=true", body: `{"context":{"user_id":"mu","user_tier":"meter"},"tokens":100}`, status: 200,
			want: `"call_id":null,"concurrency":{"limit":2,"in_flight":2}}`},
		{name: "check: over the minute's tokens", method: "POST", path: "/v1/check", body: `{"context":{"user_id":"mu","user_tier":"meter"},"tokens":500}`, status: 429,
			want: `"reason":"per-minute token limit exceeded","retry_after":60`, header: map[string]string{"Retry-After": "60"}},
		{name: "check: second call", method: "POST", path: "/v1/check", body: `{"context":{"user_id":"mu","user_tier":"meter"},"tokens":300}`, status: 200,
			want: `"concurrency":{"limit":2,"in_flight":2}`, save: "c2"},
		{name: "check: concurrency before tokens", method: "POST", path: "/v1/check", body: `{"context":{"user_id":"mu","user_tier":"meter"},"tokens":5000}`, status: 429,
			want: `"reason":"concurrent call limit exceeded","retry_after":3600`}, // every refusing limit: 5000 tokens never fit beside the reservations
		{name: "check: concurrency alone waits a second", method: "POST", path: "/v1/check", body: `{"context":{"user_id":"mu","user_tier":"meter"}}`, status: 429,
			want: `"reason":"concurrent call limit exceeded","retry_after":1,"tier":"meter"`, header: map[string]string{"Retry-After": "1"}},

		// Finish: bad input changes nothing.
		{name: "finish: tokens a string", method: "POST", path: "/v1/calls/{c1}/finish", body: `{"tokens":"200"}`, status: 400, want: `tokens must be an integer from 0 to 2147483647`},
		{name: "finish: tokens negative", method: "POST", path: "/v1/calls/{c1}/finish", body: `{"tokens":-5}`, status: 400, want: `tokens must be an integer`},
		{name: "finish: tokens too large", method: "POST", path: "/v1/calls/{c1}/finish", body: `{"tokens":2147483648}`, status: 400, want: `tokens must be an integer`},
		{name: "finish: tokens null", method: "POST", path: "/v1/calls/{c1}/finish", body: `{"tokens":null}`, status: 400, want: `tokens must be an integer`},
		{name: "finish: not an object", method: "POST", path: "/v1/calls/{c1}/finish", body: `[200]`, status: 400, want: `must be a JSON object`},
		{name: "finish: unknown field", method: "POST", path: "/v1/calls/{c1}/finish", body: `{"token":200}`, status: 400, want: `unknown field \"token\"`},
		{name: "finish: malformed", method: "POST", path: "/v1/calls/{c1}/finish", body: `{"tokens":`, status: 400, want: `malformed JSON`},
		{name: "finish: unknown call", method: "POST", path: "/v1/calls/nosuchcall/finish", body: `{"tokens":1}`, status: 404, want: `call \"nosuchcall\" not found`},
		{name: "finish: id no call could have", method: "POST", path: "/v1/calls/a.b/finish", status: 404, want: `not found`},
		{name: "finish: id too long", method: "POST", path: "/v1/calls/" + strings.Repeat("a", 65) + "/finish", status: 404, want: `not found`},
		{name: "finish: wrong method", method: "GET", path: "/v1/calls/{c1}/finish", status: 405, want: `message`},
		{name: "finish: still both open", method: "POST", path: "/v1/check?dry_run=true", body: `{"context":{"user_id":"mu","user_tier":"meter"}}`, status: 429,
			want: `"concurrency":{"limit":2,"in_flight":2}`},

		// Finish and keepalive.
		{name: "finish: with the real count", method: "POST", path: "/v1/calls/{c1}/finish", body: `{"tokens":200}`, status: 200,
			want: `{"call_id":"{c1}","user_id":"mu","tokens":200,"reserved":600,`, advance: 10 * time.Second},
		{name: "finish: the same again", method: "POST", path: "/v1/calls/{c1}/finish", body: `{"tokens":200}`, status: 200, want: `"tokens":200`},
		{name: "finish: another count after", method: "POST", path: "/v1/calls/{c1}/finish", body: `{"tokens":201}`, status: 409, want: `message`},
		{name: "finish: no count after a count", method: "POST", path: "/v1/calls/{c1}/finish", status: 409, want: `message`},
		{name: "keepalive: finished call", method: "POST", path: "/v1/calls/{c1}/keepalive", status: 409, want: `message`},
		{name: "keepalive: unknown call", method: "POST", path: "/v1/calls/nosuchcall/keepalive", status: 404, want: `not found`},
		{name: "keepalive: open call", method: "POST", path: "/v1/calls/{c2}/keepalive", status: 200, want: `"call_id":"{c2}","user_id":"mu","reserved":300,"opened_at":"2026-03-01T12:00:00Z","expires_at":"2026-03-01T12:10:10Z","expired":false,"model":null,"price_version":null,"reserved_cost":null,"cost":null}`},
		{name: "check: what the next check sees", method: "POST", path: "/v1/check", body: `{"context":{"user_id":"mu","user_tier":"meter"},"tokens":500}`, status: 200,
			want: `"tokens":{"limit":1000,"used":1000,"remaining":0,"reset":60}}`, save: "c3",
			header: map[string]string{"X-RateLimit-Limit-Tokens": "1000", "X-RateLimit-Remaining-Tokens": "0", "X-RateLimit-Reset-Tokens": "60"}},
		{name: "finish: no count, the reservation", method: "POST", path: "/v1/calls/{c2}/finish", status: 200, want: `"tokens":300`, advance: 5 * time.Second},
		// 200 finished at +10s, 300 at +15s, 500 reserved: 100 more fits
		// once the 200 leave the minute, at +70s.
		{name: "check: retry_after until enough finished tokens leave", method: "POST", path: "/v1/check", body: `{"context":{"user_id":"mu","user_tier":"meter"},"tokens":100}`, status: 429,
			want: `"reason":"per-minute token limit exceeded","retry_after":55`, header: map[string]string{"Retry-After": "55"}},

		// Usage and forgetting.
		{name: "usage: tokens used and calls in flight", method: "GET", path: "/v1/usage/mu", status: 200,
			want: `"minute":{"count":3,"tokens":{"used":1000},"cost":{"used":"0"}},"hour":{"count":3,"tokens":{"used":1000},"cost":{"used":"0"}},"day":{"count":3,"tokens":{"used":1000},"cost":{"used":"0"}},"month":{"start":"2026-03-01T00:00:00Z","end":"2026-04-01T00:00:00Z","count":3,"tokens":{"used":1000},"cost":{"used":"0"}}},"calls_in_flight":1,"period":{`},
		{name: "usage: with the tier", method: "GET", path: "/v1/usage/mu?tier=meter", status: 200,
			want: `"minute":{"count":3,"limit":100,"remaining":97,"reset":45,"tokens":{"used":1000,"limit":1000,"remaining":0,"reset":55},"cost":{"used":"0"}},"hour":{"count":3,"limit":1000,"remaining":997,"reset":3585,"tokens":{"used":1000,"limit":5000,"remaining":4000,"reset":3595},"cost":{"used":"0"}},"day":{"count":3,"limit":1000,"remaining":997,"reset":86385,"tokens":{"used":1000},"cost":{"used":"0"}},"month":{"start":"2026-03-01T00:00:00Z","end":"2026-04-01T00:00:00Z","count":3,"tokens":{"used":1000},"cost":{"used":"0"}}}`},
		{name: "forget", method: "DELETE", path: "/v1/usage/mu", status: 204},
		{name: "usage: calls forgotten", method: "GET", path: "/v1/usage/mu", status: 200, want: `"tokens":{"used":0},"cost":{"used":"0"}}},"calls_in_flight":0,"period":{`},
		{name: "finish: forgotten call", method: "POST", path: "/v1/calls/{c3}/finish", status: 404, want: `not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.clock.Advance(tc.advance)
			path, want := tc.path, tc.want
			for name, id := range ids {
				path = strings.ReplaceAll(path, "{"+name+"}", id)
				want = strings.ReplaceAll(want, "{"+name+"}", id)
			}
			admin := strings.HasPrefix(path, "/v1/tiers") || strings.HasPrefix(path, "/v1/usage")
			rec := e.do(tc.method, path, tc.body, admin)
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), want) {
				t.Fatalf("got %d %s\nwant %d containing %s", rec.Code, rec.Body, tc.status, want)
			}
			if tc.status >= 400 && !strings.Contains(rec.Body.String(), `"message":`) && !strings.Contains(rec.Body.String(), `"allowed":false`) {
				t.Fatalf("refused without a message: %s", rec.Body)
			}
			for k, v := range tc.header {
				if got := rec.Header().Get(k); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
			if tc.save != "" {
				m := callID.FindStringSubmatch(rec.Body.String())
				if m == nil || len(m[1]) > 64 {
					t.Fatalf("no call id in %s", rec.Body)
				}
				ids[tc.save] = m[1]
			}
		})
	}
}

// The call routes want the API token when the service has one, as checks
// do, and refuse cross-site requests from browsers.
func TestCallRoutesNeedTheAPIToken(t *testing.T) {
	const testAPIToken = "calls-api-token"
	e := newGuardEnv(t, api.Config{APIToken: testAPIToken})
	for _, path := range []string{"/v1/calls/abc/finish", "/v1/calls/abc/keepalive"} {
		if rec := e.send(http.MethodPost, path, "", nil); rec.Code != 401 || !strings.Contains(rec.Body.String(), "missing or wrong API token") {
			t.Errorf("%s without a token: %d %s", path, rec.Code, rec.Body)
		}
		if rec := e.send(http.MethodPost, path, "", map[string]string{"Authorization": "Bearer " + testAPIToken}); rec.Code != 404 {
			t.Errorf("%s with the token: %d %s", path, rec.Code, rec.Body)
		}
		if rec := e.send(http.MethodPost, path, "", map[string]string{"Authorization": "Bearer " + testAPIToken, "Sec-Fetch-Site": "cross-site"}); rec.Code != 403 {
			t.Errorf("%s cross-site: %d %s", path, rec.Code, rec.Body)
		}
		if rec := e.send(http.MethodPost, path, "tokens=1", map[string]string{"Authorization": "Bearer " + testAPIToken, "Content-Type": "application/x-www-form-urlencoded"}); rec.Code != 415 {
			t.Errorf("%s as a form: %d %s", path, rec.Code, rec.Body)
		}
	}
}

// The token header fields describe the tightest token window, the one with
// the fewest tokens remaining (the shorter on a tie), and only a tier with
// token limits has them; max_concurrent alone adds concurrency and no
// token state.
func TestTokenHeaders(t *testing.T) {
	e := newEnv(t)
	limits := `"requests_per_minute":100,"requests_per_hour":1000,"requests_per_day":1000,"burst_allowance":0`
	e.putTier("hourly", `{`+limits+`,"tokens_per_minute":500,"tokens_per_hour":700}`)
	e.putTier("tie", `{`+limits+`,"tokens_per_hour":800,"tokens_per_day":800}`)
	e.putTier("slots", `{`+limits+`,"max_concurrent":1}`)
	// The hour is the tighter window once it holds a call the minute no
	// longer does.
	id := e.openCall("h-hourly", "hourly", 300)
	if rec := e.do(http.MethodPost, "/v1/calls/"+id+"/finish", `{"tokens":300}`, false); rec.Code != 200 {
		t.Fatalf("finish: %d %s", rec.Code, rec.Body)
	}
	e.clock.Advance(time.Minute + time.Second)
	for _, tc := range []struct {
		tier                    string
		limit, remaining, reset string
		want                    string
	}{
		{"hourly", "700", "100", "3539", `"hour":{"limit":1000,"remaining":998,"reset":3539,"tokens":{"limit":700,"used":600,"remaining":100,"reset":3539}}`},
		{"tie", "800", "500", "0", `"day":{"limit":1000,"remaining":999,"reset":86400,"tokens":{"limit":800,"used":300,"remaining":500,"reset":0}}`},
		{"slots", "", "", "", `"windows":{"minute":{"limit":100,"remaining":99,"reset":60},"hour":{"limit":1000,"remaining":999,"reset":3600},"day":{"limit":1000,"remaining":999,"reset":86400}},"call_id":"`},
	} {
		rec := e.do(http.MethodPost, "/v1/check", `{"context":{"user_id":"h-`+tc.tier+`","user_tier":"`+tc.tier+`"},"tokens":300}`, false)
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("%s: %d %s, want %s", tc.tier, rec.Code, rec.Body, tc.want)
		}
		for k, want := range map[string]string{"X-RateLimit-Limit-Tokens": tc.limit, "X-RateLimit-Remaining-Tokens": tc.remaining, "X-RateLimit-Reset-Tokens": tc.reset} {
			if got := rec.Header().Get(k); got != want {
				t.Errorf("%s: %s %q, want %q", tc.tier, k, got, want)
			}
		}
	}
}
