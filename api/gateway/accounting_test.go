package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
)

// plainLimits are a tier's request windows with no token limit and no
// max_concurrent: a tier whose plain checks open no call.
const plainLimits = `"requests_per_minute":1000,"requests_per_hour":10000,"requests_per_day":100000,"burst_allowance":0`

// dayUsage is the day window of GET /v1/usage/{user_id} or
// /v1/accounts/{account_id}/usage, and the calls in flight.
type dayUsage struct {
	Windows struct {
		Day struct {
			Count  int64 `json:"count"`
			Tokens struct {
				Used int64 `json:"used"`
			} `json:"tokens"`
		} `json:"day"`
	} `json:"windows"`
	CallsInFlight int64 `json:"calls_in_flight"`
}

// getUsage reads path, a usage of the API, as an admin.
func (e *gwEnv) getUsage(path string) dayUsage {
	e.t.Helper()
	rec := e.must(http.MethodGet, path, "", http.StatusOK)
	var u dayUsage
	if err := json.Unmarshal(rec.Body.Bytes(), &u); err != nil {
		e.t.Fatalf("%s: %v in %s", path, err, rec.Body)
	}
	return u
}

// Every call through the gateway records the tokens its upstream
// reported, whatever its tier limits: on a tier that limits neither
// tokens nor concurrent calls, five calls by the SDKs, streamed and not,
// show in GET /v1/usage as /metrics counts them, and in an account's
// pool as in its member's own usage. A plain check of that tier still
// opens no call.
func TestGatewayRecordsEveryCall(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	ctx := context.Background()
	e.putTier("plain", `{`+plainLimits+`,"account":{"requests_per_minute":100}}`)
	e.assign("alice", "plain")
	oa, an := e.openai(key), e.anthropic(key)
	calls := []func() error{
		func() error { _, err := oa.Chat.Completions.New(ctx, chat("gpt-4o-mini")); return err },
		func() error { _, err := oa.Chat.Completions.New(ctx, chat("gpt-4o-mini")); return err },
		func() error {
			s := oa.Chat.Completions.NewStreaming(ctx, chat("gpt-4o-mini"))
			for s.Next() {
			}
			return s.Err()
		},
		func() error { _, err := an.Messages.New(ctx, claudeMessage("claude-sonnet-4-5")); return err },
		func() error {
			s := an.Messages.NewStreaming(ctx, claudeMessage("claude-sonnet-4-5"))
			for s.Next() {
			}
			return s.Err()
		},
	}
	for i, call := range calls {
		if err := call(); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	const openAITotal, anthropicTotal = 3 * chatTokens, 2 * anthropicTokens
	u := e.getUsage("/v1/usage/alice")
	if day := u.Windows.Day; day.Count != 5 || day.Tokens.Used != openAITotal+anthropicTotal || u.CallsInFlight != 0 {
		t.Errorf("alice's usage: %d requests, %d tokens, %d in flight; want 5, %d and 0", day.Count, day.Tokens.Used, u.CallsInFlight, openAITotal+anthropicTotal)
	}
	e.wantMetric(fmt.Sprintf(`policyguard_gateway_tokens_total{tier="plain",upstream="openai"} %d`, openAITotal))
	e.wantMetric(fmt.Sprintf(`policyguard_gateway_tokens_total{tier="plain",upstream="claude"} %d`, anthropicTotal))

	// A member's calls, in an account whose pool limits requests only:
	// recorded in the pool and in the member's own usage.
	e.must(http.MethodPut, "/v1/accounts/acme", `{"tier":"plain"}`, http.StatusCreated)
	_, service, err := e.svc.CreateKey(ctx, "", true, "back end")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		res, body := e.raw(http.MethodPost, "/llm/openai/chat/completions", chatBody,
			map[string]string{"Authorization": "Bearer " + service, "X-Guard-User": "carol", "X-Guard-Account": "acme"})
		if res.StatusCode != http.StatusOK {
			t.Fatalf("carol's call: %d %s", res.StatusCode, body)
		}
	}
	for _, path := range []string{"/v1/accounts/acme/usage", "/v1/usage/carol"} {
		u := e.getUsage(path)
		if day := u.Windows.Day; day.Count != 2 || day.Tokens.Used != 2*chatTokens || u.CallsInFlight != 0 {
			t.Errorf("%s: %d requests, %d tokens, %d in flight; want 2, %d and 0", path, day.Count, day.Tokens.Used, u.CallsInFlight, 2*chatTokens)
		}
	}

	// POST /v1/check of the same tier opens no call: it reserves nothing
	// and answers no call_id.
	rec := e.must(http.MethodPost, "/v1/check", `{"context":{"user_id":"bob","user_tier":"plain"},"tokens":500}`, http.StatusOK)
	var check map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &check); err != nil {
		t.Fatal(err)
	}
	if id := check["call_id"]; id != nil {
		t.Errorf("a plain check of an unmetered tier opened call %v", id)
	}
	if u := e.getUsage("/v1/usage/bob"); u.Windows.Day.Count != 1 || u.Windows.Day.Tokens.Used != 0 || u.CallsInFlight != 0 {
		t.Errorf("bob's usage after a plain check: %+v, want 1 request and nothing reserved", u)
	}
}
