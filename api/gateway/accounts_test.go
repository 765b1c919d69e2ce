package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/policyguard/policyguard/api/gateway"
	"github.com/policyguard/policyguard/policy"
)

// A gateway service key may name the account of the user it names, in
// X-Guard-Account: the call then draws on the account's pool and is
// settled there too. A user's key may not send it, and an account that does
// not exist is a 400, in the protocol's shape; neither reaches the
// upstream. A refusal by the pool is a 429 of the kind of the limit.
func TestGatewayAccountHeader(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	ctx := context.Background()
	const gwLimits = `"requests_per_minute":1000,"requests_per_hour":10000,"requests_per_day":100000,"burst_allowance":0,"tokens_per_day":100000000,"max_concurrent":2`
	e.putTier("gworg", `{`+gwLimits+`,"account":{"requests_per_minute":2}}`)
	e.putTier("gwtok", `{`+gwLimits+`,"account":{"tokens_per_minute":10}}`)
	e.must("PUT", "/v1/accounts/acme", `{"tier":"gworg"}`, 201)
	e.must("PUT", "/v1/accounts/stingy", `{"tier":"gwtok"}`, 201)
	_, service, err := e.svc.CreateKey(ctx, "", true, "back end")
	if err != nil {
		t.Fatal(err)
	}
	as := func(user, account string) map[string]string {
		h := map[string]string{"Authorization": "Bearer " + service, "X-Guard-User": user}
		if account != "-" {
			h["X-Guard-Account"] = account
		}
		return h
	}
	for _, tc := range []struct {
		name      string
		header    map[string]string
		status    int
		errType   string
		msg       string
		remaining string // X-Ratelimit-Remaining-Requests, when not ""
	}{
		{"a service key naming acme", as("carol", "acme"), 200, "", "", "1"},
		{"another user of acme", as("dave", "acme"), 200, "", "", "0"},
		{"acme's pool full", as("carol", "acme"), 429, "requests", "account per-minute limit exceeded", "0"},
		{"a user outside it, under the default tier", as("erin", "-"), 200, "", "", "14"},
		{"a user's key naming an account", map[string]string{"Authorization": "Bearer " + key, "X-Guard-Account": "acme"}, 400, "invalid_request_error", "X-Guard-Account is for service keys", ""},
		{"an unknown account", as("carol", "umbrella"), 400, "invalid_request_error", `X-Guard-Account: unknown account "umbrella"`, ""},
		{"an empty account", as("carol", ""), 400, "invalid_request_error", "X-Guard-Account must not be empty", ""},
		{"an account id too long", as("carol", strings.Repeat("a", 257)), 400, "invalid_request_error", "account_id must be at most 256 bytes", ""},
		{"a pool without room for the tokens", as("frank", "stingy"), 429, "tokens", "account per-minute token limit exceeded", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sent := len(e.fake.Requests())
			res, body := e.raw(http.MethodPost, "/llm/openai/chat/completions", chatBody, tc.header)
			if res.StatusCode != tc.status {
				t.Fatalf("%d %s, want %d", res.StatusCode, body, tc.status)
			}
			if tc.remaining != "" && res.Header.Get("X-Ratelimit-Remaining-Requests") != tc.remaining {
				t.Errorf("X-Ratelimit-Remaining-Requests %q, want %q (the tighter of the user's and the pool's)", res.Header.Get("X-Ratelimit-Remaining-Requests"), tc.remaining)
			}
			if tc.status == 200 {
				if got := len(e.fake.Requests()); got != sent+1 {
					t.Errorf("the upstream got %d requests, want 1", got-sent)
				}
				return
			}
			if tc.status == 429 {
				var got gatewayError
				if err := json.Unmarshal([]byte(body), &got); err != nil || got.Error.Type != tc.errType || got.Error.Message != tc.msg {
					t.Errorf("answer %s: want type %q and message %q", body, tc.errType, tc.msg)
				}
			} else {
				wantError(t, gateway.ProtocolOpenAI, body, tc.errType, "", tc.msg)
			}
			if got := len(e.fake.Requests()); got != sent {
				t.Errorf("a refused request reached the upstream")
			}
		})
	}
	// acme's pool holds carol's and dave's calls, settled with what the
	// upstream reported; carol's own history holds hers.
	u, err := e.svc.AccountUsage(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if day := u.Windows[policy.Day]; day.Count != 2 || day.Tokens == nil || day.Tokens.Used != 2*chatTokens || u.CallsInFlight != 0 {
		t.Errorf("acme's pool: %d requests, tokens %+v, %d in flight; want 2, %d and 0", day.Count, day.Tokens, u.CallsInFlight, 2*chatTokens)
	}
	if tokens, inFlight, requests := e.usage("carol"); tokens != chatTokens || inFlight != 0 || requests != 1 {
		t.Errorf("carol's own: %d tokens, %d in flight, %d requests", tokens, inFlight, requests)
	}
	e.wantMetric(`policyguard_gateway_requests_total{outcome="forwarded",tier="gworg",upstream="openai"} 2`)
	e.wantMetric(`policyguard_checks_total{dry_run="false",guardrail="rate_limiter",outcome="rate_limited",tier="gworg",window="account"} 1`)
}
