package api_test

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// spendPrices is a price table whose model "gpt-test" costs $2, $10, $0.50
// and $2.50 a million input, output, cache-read and cache-write tokens:
// a reservation costs $10 a million, $0.00001 a token.
const spendPrices = `{"prices":[{"model":"gpt-test","input":"2","output":"10","cache_read":"0.5","cache_write":"2.5"}]}`

// putPrices makes body a new version of the price table.
func (e *env) putPrices(body string) {
	e.t.Helper()
	if rec := e.do(http.MethodPut, "/v1/prices", body, true); rec.Code != http.StatusCreated {
		e.t.Fatalf("put prices: %d %s", rec.Code, rec.Body)
	}
}

// spendCall is what the tests read of a call's answer.
type spendCall struct {
	Tokens       int64   `json:"tokens"`
	Model        *string `json:"model"`
	PriceVersion *int64  `json:"price_version"`
	ReservedCost *string `json:"reserved_cost"`
	Cost         *string `json:"cost"`
}

// spendDecision is what the tests read of a check's answer.
type spendDecision struct {
	Allowed    bool    `json:"allowed"`
	Reason     *string `json:"reason"`
	RetryAfter int64   `json:"retry_after"`
	CallID     *string `json:"call_id"`
	Windows    map[string]struct {
		Cost *struct {
			Limit, Used, Remaining string
			Reset                  int64
		} `json:"cost"`
	} `json:"windows"`
}

func str(p *string) string {
	if p == nil {
		return "null"
	}
	return *p
}

// TestSpendLimitsOverHTTP walks a user of a tier with a $0.05 day through
// spend limits: checks reserve at the model's highest price, open
// reservations count, a refusal names the spend window and when to retry,
// a finish with usage costs exactly, a bare count costs at the highest
// price and its overrun is counted, and the decision, the usage and the
// header fields show the spend in dollars.
func TestSpendLimitsOverHTTP(t *testing.T) {
	e := newEnv(t, withMetrics())
	e.putPrices(spendPrices)
	e.putTier("spend", `{"requests_per_minute":100,"requests_per_hour":1000,"requests_per_day":1000,"burst_allowance":0,"cost_per_day":"0.05"}`)
	check := func(tokens int64, model string) (*httptest.ResponseRecorder, spendDecision) {
		t.Helper()
		body := fmt.Sprintf(`{"context":{"user_id":"sam","user_tier":"spend"},"tokens":%d,"model":%q}`, tokens, model)
		rec := e.do(http.MethodPost, "/v1/check", body, false)
		return rec, decode[spendDecision](t, rec)
	}
	finish := func(id, body string) spendCall {
		t.Helper()
		rec := e.do(http.MethodPost, "/v1/calls/"+id+"/finish", body, false)
		if rec.Code != http.StatusOK {
			t.Fatalf("finish %s: %d %s", body, rec.Code, rec.Body)
		}
		return decode[spendCall](t, rec)
	}

	// 2,000 tokens reserve $0.02 each at $10 a million: two fit in $0.05,
	// the third does not while both are open.
	rec, d := check(2000, "gpt-test")
	if rec.Code != http.StatusOK || d.CallID == nil {
		t.Fatalf("first check: %d %s", rec.Code, rec.Body)
	}
	first := *d.CallID
	if c := d.Windows["day"].Cost; c == nil || c.Limit != "0.05" || c.Used != "0.02" || c.Remaining != "0.03" || c.Reset != 0 {
		t.Fatalf("first check's day cost: %s", rec.Body)
	}
	if d.Windows["minute"].Cost != nil || d.Windows["hour"].Cost != nil {
		t.Fatalf("cost shown for windows without a spend limit: %s", rec.Body)
	}
	for name, want := range map[string]string{"X-RateLimit-Limit-Cost": "0.05", "X-RateLimit-Remaining-Cost": "0.03", "X-RateLimit-Reset-Cost": "0"} {
		if got := rec.Header().Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	rec, d = check(2000, "gpt-test")
	if rec.Code != http.StatusOK || d.CallID == nil {
		t.Fatalf("second check: %d %s", rec.Code, rec.Body)
	}
	second := *d.CallID
	e.clock.Advance(time.Second)
	rec, d = check(2000, "gpt-test")
	if rec.Code != http.StatusTooManyRequests || str(d.Reason) != "per-day spend limit exceeded" || d.RetryAfter < 1 || d.CallID != nil {
		t.Fatalf("third check, past $0.05 with two reservations open: %d %s", rec.Code, rec.Body)
	}
	if got, want := rec.Header().Get("Retry-After"), fmt.Sprint(d.RetryAfter); got != want {
		t.Errorf("Retry-After = %q, want %q", got, want)
	}
	var reset int64
	fmt.Sscan(rec.Header().Get("X-RateLimit-Reset-Cost"), &reset)
	if reset < d.RetryAfter || rec.Header().Get("X-RateLimit-Remaining-Cost") != "0.01" {
		t.Errorf("X-RateLimit-Reset-Cost %q and -Remaining-Cost %q on a spend refusal with retry_after %d: want a reset of at least it, $0.01 left",
			rec.Header().Get("X-RateLimit-Reset-Cost"), rec.Header().Get("X-RateLimit-Remaining-Cost"), d.RetryAfter)
	}

	// Usage split by price costs exactly: 1000×$2 + 500×$10 + 400×$0.50 +
	// 100×$2.50 a million is $0.00745, not the reservation's $0.02.
	e.clock.Advance(time.Second)
	c := finish(first, `{"usage":{"input_tokens":1000,"output_tokens":500,"cache_read_tokens":400,"cache_write_tokens":100}}`)
	if c.Tokens != 2000 || str(c.Model) != "gpt-test" || c.PriceVersion == nil || *c.PriceVersion != 1 || str(c.ReservedCost) != "0.02" || str(c.Cost) != "0.00745" {
		t.Fatalf("finish with usage: %+v", c)
	}
	// $0.00745 spent and $0.02 reserved leave $0.02255: $0.02 fits, then
	// $0.003 does not and $0.0025 does.
	if rec, _ := check(2000, "gpt-test"); rec.Code != http.StatusOK {
		t.Fatalf("check within what the finish freed: %d %s", rec.Code, rec.Body)
	}
	if rec, d := check(300, "gpt-test"); rec.Code != http.StatusTooManyRequests || str(d.Reason) != "per-day spend limit exceeded" {
		t.Fatalf("check $0.00005 past the limit: %d %s", rec.Code, rec.Body)
	}
	rec, d = check(250, "gpt-test")
	if rec.Code != http.StatusOK || d.Windows["day"].Cost.Used != "0.04995" || d.Windows["day"].Cost.Remaining != "0.00005" {
		t.Fatalf("check that fills the day to $0.04995: %d %s", rec.Code, rec.Body)
	}

	// A bare count is priced at the highest price: 3,000 tokens cost
	// $0.03, $0.01 above the reservation: the overrun the metric counts.
	c = finish(second, `{"tokens":3000}`)
	if c.Tokens != 3000 || str(c.Cost) != "0.03" || str(c.ReservedCost) != "0.02" {
		t.Fatalf("finish with tokens: %+v", c)
	}
	// Both given must agree.
	if rec := e.do(http.MethodPost, "/v1/calls/"+*d.CallID+"/finish", `{"tokens":10,"usage":{"input_tokens":5}}`, false); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "usage") {
		t.Fatalf("finish whose tokens and usage disagree: %d %s", rec.Code, rec.Body)
	}
	if rec := e.do(http.MethodPost, "/v1/calls/"+*d.CallID+"/finish", `{"usage":{"input_tokens":-1}}`, false); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "usage.input_tokens") {
		t.Fatalf("finish with a negative count: %d %s", rec.Code, rec.Body)
	}
	if rec := e.do(http.MethodPost, "/v1/calls/"+*d.CallID+"/finish", `{"usage":{"input":5}}`, false); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `unknown field \"usage.input\"`) && !strings.Contains(rec.Body.String(), `unknown field \"input\"`) {
		t.Fatalf("finish with an unknown usage member: %d %s", rec.Code, rec.Body)
	}

	// Usage: the spend in dollars, always used; the rest with the tier.
	// Spent $0.00745 + $0.03, open $0.02 + $0.0025.
	// The first finished spend leaves the day 86,400 s after its finish.
	rec = e.do(http.MethodGet, "/v1/usage/sam?tier=spend", "", true)
	if !strings.Contains(rec.Body.String(), `"day":{"count":4,"limit":1000,"remaining":996,"reset":86398,"tokens":{"used":7250},"cost":{"used":"0.05995","limit":"0.05","remaining":"0","reset":86400}}`) {
		t.Fatalf("usage with the tier: %s", rec.Body)
	}
	if rec := e.do(http.MethodGet, "/v1/usage/sam", "", true); !strings.Contains(rec.Body.String(), `"minute":{"count":4,"tokens":{"used":7250},"cost":{"used":"0.05995"}}`) {
		t.Fatalf("usage: %s", rec.Body)
	}

	m := scrape(t, e.srv)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"policyguard_spend_dollars_total", map[string]string{"tier": "spend"}, 0.03745},
		{"policyguard_spend_overrun_dollars_total", map[string]string{"tier": "spend"}, 0.01},
		{"policyguard_checks_total", checkLabels("spend", "rate_limiter", "rate_limited", "spend_day", "false"), 2},
	} {
		if got := m.must(t, tc.name, tc.labels); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s %v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
}

// TestSpendNeedsAPricedModel: under a spend limit a check without a model,
// or with one the table does not price, is a 400 naming the model, and
// records nothing; without spend limits an unpriced model passes, and its
// call costs null.
func TestSpendNeedsAPricedModel(t *testing.T) {
	e := newEnv(t)
	e.putPrices(spendPrices)
	limits := `"requests_per_minute":100,"requests_per_hour":1000,"requests_per_day":1000,"burst_allowance":0,"tokens_per_day":100000`
	e.putTier("spend", `{`+limits+`,"cost_per_hour":"1"}`)
	e.putTier("tokens", `{`+limits+`}`)
	for _, tc := range []struct {
		name, body string
		status     int
		want       string
	}{
		{"no model", `{"context":{"user_id":"u","user_tier":"spend"},"tokens":10}`, 400, `model is required: tier \"spend\" limits spend`},
		{"an empty model", `{"context":{"user_id":"u","user_tier":"spend"},"tokens":10,"model":""}`, 400, `model is required`},
		{"an unpriced model", `{"context":{"user_id":"u","user_tier":"spend"},"tokens":10,"model":"gpt-other"}`, 400, `model \"gpt-other\" has no price: tier \"spend\" limits spend`},
		{"model in context is not the model", `{"context":{"user_id":"u","user_tier":"spend","model":"gpt-test"},"tokens":10}`, 400, `model is required`},
		{"a priced model", `{"context":{"user_id":"u","user_tier":"spend"},"tokens":10,"model":"gpt-test"}`, 200, `"cost":{"limit":"1","used":"0.0001","remaining":"0.9999","reset":0}`},
		{"unpriced without spend limits", `{"context":{"user_id":"v","user_tier":"tokens"},"tokens":10,"model":"gpt-other"}`, 200, `"allowed":true`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := e.do(http.MethodPost, "/v1/check", tc.body, false)
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.want) {
				t.Fatalf("got %d %s, want %d containing %s", rec.Code, rec.Body, tc.status, tc.want)
			}
		})
	}
	if rec := e.do(http.MethodGet, "/v1/usage/u", "", true); !strings.Contains(rec.Body.String(), `"day":{"count":1,`) {
		t.Fatalf("a refused check was recorded: %s", rec.Body)
	}
	id := e.openCallBody(`{"context":{"user_id":"w","user_tier":"tokens"},"tokens":10,"model":"gpt-other"}`)
	rec := e.do(http.MethodPost, "/v1/calls/"+id+"/finish", `{"usage":{"input_tokens":4,"output_tokens":3}}`, false)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"tokens":7,`) ||
		!strings.Contains(rec.Body.String(), `"price_version":null,"reserved_cost":null,"cost":null}`) {
		t.Fatalf("finish of an unpriced call: %d %s", rec.Code, rec.Body)
	}
	// A priced model is priced without spend limits too: 4×$2 + 3×$10 a
	// million.
	id = e.openCallBody(`{"context":{"user_id":"w","user_tier":"tokens"},"tokens":10,"model":"gpt-test"}`)
	rec = e.do(http.MethodPost, "/v1/calls/"+id+"/finish", `{"usage":{"input_tokens":4,"output_tokens":3}}`, false)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"model":"gpt-test","price_version":1,"reserved_cost":"0.0001","cost":"0.000038"}`) {
		t.Fatalf("finish of a priced call without spend limits: %d %s", rec.Code, rec.Body)
	}
}

// TestRunMaxCostNeedsAPricedModel: a run's max_cost is a spend limit
// like the tier's own: a step in such a run names a priced model or is a
// 400 that records nothing, while the same tier outside a run, whose
// limits count no money, passes an unpriced model.
func TestRunMaxCostNeedsAPricedModel(t *testing.T) {
	e := newEnv(t)
	e.putPrices(spendPrices)
	e.putTier("agents", `{"requests_per_minute":100,"requests_per_hour":1000,"requests_per_day":1000,"burst_allowance":0,"tokens_per_day":100000,"run":{"max_cost":"0.01"}}`)
	for _, tc := range []struct {
		name, body string
		status     int
		want       string
	}{
		{"no model", `{"context":{"user_id":"u","user_tier":"agents","run_id":"r-1"},"tokens":10}`, 400,
			`model is required: the run's max_cost in tier \"agents\" limits spend`},
		{"an unpriced model", `{"context":{"user_id":"u","user_tier":"agents","run_id":"r-1"},"tokens":10,"model":"gpt-other"}`, 400,
			`model \"gpt-other\" has no price: the run's max_cost in tier \"agents\" limits spend`},
		{"a priced model", `{"context":{"user_id":"u","user_tier":"agents","run_id":"r-1"},"tokens":10,"model":"gpt-test"}`, 200,
			`"run":{"id":"r-1","parent":null,"state":"open","requests":1,"tokens":10,"cost":"0.0001"`},
		{"outside a run", `{"context":{"user_id":"u","user_tier":"agents"},"tokens":10,"model":"gpt-other"}`, 200, `"allowed":true`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := e.do(http.MethodPost, "/v1/check", tc.body, false)
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.want) {
				t.Fatalf("got %d %s, want %d containing %s", rec.Code, rec.Body, tc.status, tc.want)
			}
		})
	}
	if rec := e.do(http.MethodGet, "/v1/runs/r-1", "", true); !strings.Contains(rec.Body.String(), `"requests":1,`) {
		t.Fatalf("a refused step was counted: %s", rec.Body)
	}
}

// TestSpendPricedAtAdmission: a call is priced by the version in force
// when it was admitted, at its finish too, whatever version is put
// between; a call admitted after is priced by the new one.
func TestSpendPricedAtAdmission(t *testing.T) {
	e := newEnv(t)
	e.putPrices(spendPrices)
	e.putTier("spend", `{"requests_per_minute":100,"requests_per_hour":1000,"requests_per_day":1000,"burst_allowance":0,"cost_per_day":"20"}`)
	body := `{"context":{"user_id":"p","user_tier":"spend"},"tokens":1000,"model":"gpt-test"}`
	old := e.openCallBody(body)
	e.clock.Advance(time.Minute)
	e.putPrices(`{"prices":[{"model":"gpt-*","input":"4","output":"20"}]}`) // twice the price, from now
	e.clock.Advance(time.Minute)
	fresh := e.openCallBody(body)
	usage := `{"usage":{"input_tokens":1000,"output_tokens":1000}}`
	for _, tc := range []struct {
		id, want string
	}{
		{old, `"model":"gpt-test","price_version":1,"reserved_cost":"0.01","cost":"0.012"}`},
		{fresh, `"model":"gpt-test","price_version":2,"reserved_cost":"0.02","cost":"0.024"}`},
	} {
		if rec := e.do(http.MethodPost, "/v1/calls/"+tc.id+"/finish", usage, false); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), tc.want) {
			t.Fatalf("finish: %d %s, want %s", rec.Code, rec.Body, tc.want)
		}
	}
	// The keepalive of an open call shows its price too, and its cost
	// null until it finishes.
	open := e.openCallBody(body)
	if rec := e.do(http.MethodPost, "/v1/calls/"+open+"/keepalive", "", false); rec.Code != http.StatusOK ||
		!strings.Contains(rec.Body.String(), `"model":"gpt-test","price_version":2,"reserved_cost":"0.02","cost":null}`) {
		t.Fatalf("keepalive: %d %s", rec.Code, rec.Body)
	}
}

// openCallBody sends the check body and returns the id of the call the
// admitted check opened.
func (e *env) openCallBody(body string) string {
	e.t.Helper()
	rec := e.do(http.MethodPost, "/v1/check", body, false)
	d := decode[struct {
		CallID *string `json:"call_id"`
	}](e.t, rec)
	if rec.Code != http.StatusOK || d.CallID == nil {
		e.t.Fatalf("check opened no call: %d %s", rec.Code, rec.Body)
	}
	return *d.CallID
}

// TestPooledSpendOverHTTP: an account's pooled spend limit holds over its
// members together, requires a model of them, and shows in the member's
// decision, its header fields and the account's usage.
func TestPooledSpendOverHTTP(t *testing.T) {
	e := newEnv(t)
	e.putPrices(spendPrices)
	e.putTier("team", `{"requests_per_minute":10,"requests_per_hour":100,"requests_per_day":1000,"burst_allowance":0}`)
	e.must("PUT", "/v1/accounts/acme", `{"tier":"team","limits":{"cost_per_day":"0.03"}}`, 201)
	check := func(user, model string) *httptest.ResponseRecorder {
		return e.do(http.MethodPost, "/v1/check", fmt.Sprintf(`{"context":{"user_id":%q,"account_id":"acme"},"tokens":2000,"model":%q}`, user, model), false)
	}
	if rec := check("ann", ""); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `model is required: account \"acme\" limits spend`) {
		t.Fatalf("a member's check without a model: %d %s", rec.Code, rec.Body)
	}
	rec := check("ann", "gpt-test")
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"account":{"id":"acme","windows":{`) ||
		!strings.Contains(rec.Body.String(), `"cost":{"limit":"0.03","used":"0.02","remaining":"0.01","reset":0}}}`) {
		t.Fatalf("ann's check: %d %s", rec.Code, rec.Body)
	}
	if got := rec.Header().Get("X-RateLimit-Remaining-Cost"); got != "0.01" {
		t.Errorf("ann's X-RateLimit-Remaining-Cost = %q, want the pool's 0.01", got)
	}
	rec = check("bob", "gpt-test")
	d := decode[spendDecision](t, rec)
	if rec.Code != http.StatusTooManyRequests || str(d.Reason) != "account per-day spend limit exceeded" || d.RetryAfter < 1 {
		t.Fatalf("bob's check beside ann's open call: %d %s", rec.Code, rec.Body)
	}
	var reset int64
	fmt.Sscan(rec.Header().Get("X-RateLimit-Reset-Cost"), &reset)
	if rec.Header().Get("Retry-After") != fmt.Sprint(d.RetryAfter) || reset < d.RetryAfter {
		t.Errorf("Retry-After %q, X-RateLimit-Reset-Cost %q, retry_after %d", rec.Header().Get("Retry-After"), rec.Header().Get("X-RateLimit-Reset-Cost"), d.RetryAfter)
	}
	u := e.must("GET", "/v1/accounts/acme/usage", "", 200)
	if !strings.Contains(u.Body.String(), `"cost":{"used":"0.02","limit":"0.03","remaining":"0.01","reset":0}}`) {
		t.Fatalf("the account's usage: %s", u.Body)
	}
}
