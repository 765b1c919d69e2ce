package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/policyguard/policyguard/api/gateway"
	"github.com/policyguard/policyguard/policy"
)

const (
	chatBody    = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello"}]}`
	messageBody = `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"Say hello"}]}`
)

// gatewayError is an error answer of the gateway in either protocol's
// shape: openai's {"error": {...}} or anthropic's {"type": "error",
// "error": {...}}.
type gatewayError struct {
	Type  string `json:"type"`
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// wantError fails the test unless body is an error of protocol's shape
// with errType (and for openai, code; "" for null) and a message holding
// msg.
func wantError(t *testing.T, protocol, body, errType, code, msg string) {
	t.Helper()
	var got gatewayError
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("answer %q: %v", body, err)
	}
	if got.Error.Type != errType || !strings.Contains(got.Error.Message, msg) {
		t.Errorf("answer %s: want type %q and a message saying %q", body, errType, msg)
	}
	switch protocol {
	case gateway.ProtocolOpenAI:
		if gotCode := ""; got.Error.Code != nil && *got.Error.Code != code || got.Error.Code == nil && code != gotCode || got.Type != "" {
			t.Errorf("answer %s: want the OpenAI shape with code %q", body, code)
		}
	case gateway.ProtocolAnthropic:
		if got.Type != "error" || got.Error.Code != nil {
			t.Errorf("answer %s: want the Anthropic shape", body)
		}
	}
}

// A request passes with a key the service knows, sent as the SDKs send
// it, and names its user only with a service key; anything else is
// answered in the protocol's shape and never reaches the upstream.
func TestGatewayKeys(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	ctx := context.Background()
	_, service, err := e.svc.CreateKey(ctx, "", true, "back end")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, body string
		header           map[string]string
		status           int
		errType, code    string
		msg              string
	}{
		{"openai, no key", "/llm/openai/chat/completions", chatBody, nil, 401, "invalid_request_error", "invalid_api_key", "missing gateway key: send it as Authorization: Bearer <key>"},
		{"anthropic, no key", "/llm/claude/v1/messages", messageBody, nil, 401, "authentication_error", "", "Authorization: Bearer <key> or x-api-key: <key>"},
		{"unknown key", "/llm/openai/chat/completions", chatBody, map[string]string{"Authorization": "Bearer " + policy.KeyPrefix + "nosuchkey"}, 401, "invalid_request_error", "invalid_api_key", "unknown or was revoked"},
		{"the admin token", "/llm/openai/chat/completions", chatBody, map[string]string{"Authorization": "Bearer " + adminToken}, 401, "invalid_request_error", "invalid_api_key", "invalid gateway key"},
		{"another scheme", "/llm/openai/chat/completions", chatBody, map[string]string{"Authorization": "Basic " + key}, 401, "invalid_request_error", "invalid_api_key", "missing gateway key"},
		{"x-api-key on openai", "/llm/openai/chat/completions", chatBody, map[string]string{"X-Api-Key": key}, 401, "invalid_request_error", "invalid_api_key", "missing gateway key"},
		{"bearer on openai", "/llm/openai/chat/completions", chatBody, map[string]string{"Authorization": "Bearer " + key}, 200, "", "", ""},
		{"x-api-key on anthropic", "/llm/claude/v1/messages", messageBody, map[string]string{"X-Api-Key": key}, 200, "", "", ""},
		{"bearer on anthropic", "/llm/claude/v1/messages", messageBody, map[string]string{"Authorization": "Bearer " + key}, 200, "", "", ""},
		{"a user key naming a user", "/llm/openai/chat/completions", chatBody, map[string]string{"Authorization": "Bearer " + key, "X-Guard-User": "alice"}, 400, "invalid_request_error", "", "X-Guard-User is for service keys"},
		{"a service key naming none", "/llm/claude/v1/messages", messageBody, map[string]string{"X-Api-Key": service}, 400, "invalid_request_error", "", "a service key must name the user in X-Guard-User"},
		{"a service key naming an empty user", "/llm/openai/chat/completions", chatBody, map[string]string{"Authorization": "Bearer " + service, "X-Guard-User": ""}, 400, "invalid_request_error", "", "X-Guard-User must not be empty"},
		{"a service key naming a user too long", "/llm/openai/chat/completions", chatBody, map[string]string{"Authorization": "Bearer " + service, "X-Guard-User": strings.Repeat("b", 257)}, 400, "invalid_request_error", "", "X-Guard-User: user_id must be at most 256 bytes"},
		{"a service key naming bob", "/llm/openai/chat/completions", chatBody, map[string]string{"Authorization": "Bearer " + service, "X-Guard-User": "bob"}, 200, "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sent := len(e.fake.Requests())
			res, body := e.raw(http.MethodPost, tc.path, tc.body, tc.header)
			if res.StatusCode != tc.status {
				t.Fatalf("%d %s, want %d", res.StatusCode, body, tc.status)
			}
			if tc.status == 200 {
				if got := len(e.fake.Requests()); got != sent+1 {
					t.Errorf("the upstream got %d requests, want 1", got-sent)
				}
				return
			}
			protocol := gateway.ProtocolOpenAI
			if strings.HasPrefix(tc.path, "/llm/claude") {
				protocol = gateway.ProtocolAnthropic
			}
			wantError(t, protocol, body, tc.errType, tc.code, tc.msg)
			if got := len(e.fake.Requests()); got != sent {
				t.Errorf("a refused request reached the upstream")
			}
		})
	}
	// The service key's call was bob's, under the default tier.
	if _, _, requests := e.usage("bob"); requests != 1 {
		t.Errorf("bob's requests: %d, want 1", requests)
	}
	e.wantMetric(`policyguard_gateway_requests_total{outcome="forwarded",tier="free",upstream="openai"} 1`)
}

// A revoked key is refused at its very next request.
func TestGatewayRevokedKeyIsRefusedAtOnce(t *testing.T) {
	e, _ := newGatewayEnv(t, nil)
	ctx := context.Background()
	k, secret, err := e.svc.CreateKey(ctx, "alice", false, "to revoke")
	if err != nil {
		t.Fatal(err)
	}
	oa := e.openai(secret)
	if _, err := oa.Chat.Completions.New(ctx, chat("gpt-4o-mini")); err != nil {
		t.Fatalf("before revoking: %v", err)
	}
	if err := e.svc.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	_, err = oa.Chat.Completions.New(ctx, chat("gpt-4o-mini"))
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != http.StatusUnauthorized || oe.Code != "invalid_api_key" {
		t.Fatalf("after revoking: %v, want 401 invalid_api_key", err)
	}
	if got := len(e.fake.Requests()); got != 1 {
		t.Errorf("the upstream got %d requests, want only the first", got)
	}
}

// A call over the user's limits is answered 429 in the protocol's shape,
// with the decision's reason and the wait in Retry-After and
// retry-after-ms, as the SDKs read them; it never reaches the upstream.
func TestGatewayRateLimited(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	e.putTier("tight", `{"requests_per_minute":1,"requests_per_hour":10,"requests_per_day":10,"burst_allowance":0,"tokens_per_minute":1000}`)
	e.assign("alice", "tight")
	ctx := context.Background()
	oa, an := e.openai(key), e.anthropic(key)
	if _, err := oa.Chat.Completions.New(ctx, chat("gpt-4o-mini"), option.WithMaxRetries(0)); err == nil {
		t.Fatal("a chat reserving 4096 output tokens passed a limit of 1000 a minute")
	} else {
		var oe *openai.Error
		if !errors.As(err, &oe) || oe.StatusCode != 429 || oe.Type != "tokens" || oe.Code != "rate_limit_exceeded" || oe.Message != "per-minute token limit exceeded" {
			t.Fatalf("over the token limit: %v %s, want 429 of type tokens", err, rawError(err))
		}
	}
	small := chat("gpt-4o-mini")
	small.MaxCompletionTokens = openai.Int(100)
	if _, err := oa.Chat.Completions.New(ctx, small); err != nil {
		t.Fatalf("first call: %v", err)
	}
	_, err := oa.Chat.Completions.New(ctx, small)
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != 429 || oe.Type != "requests" || oe.Code != "rate_limit_exceeded" || oe.Message != "per-minute limit exceeded" {
		t.Fatalf("second call: %v %s, want 429 rate_limit_exceeded", err, rawError(err))
	}
	h := oe.Response.Header
	if h.Get("Retry-After") != "60" || h.Get("Retry-After-Ms") != "60000" || h.Get("X-Ratelimit-Remaining-Requests") != "0" {
		t.Errorf("429 header fields: %v", h)
	}
	_, err = an.Messages.New(ctx, claudeMessage("claude-sonnet-4-5"))
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != 429 || ae.Response.Header.Get("Retry-After") != "60" {
		t.Fatalf("anthropic: %v, want 429 with Retry-After", err)
	}
	wantError(t, gateway.ProtocolAnthropic, ae.RawJSON(), "rate_limit_error", "", "per-minute limit exceeded")
	if got := len(e.fake.Requests()); got != 1 {
		t.Errorf("the upstream got %d requests, want only the admitted one", got)
	}
	// Refusals are checks like any other: counted where checks are.
	e.wantMetric(`policyguard_checks_total{dry_run="false",guardrail="rate_limiter",outcome="rate_limited",tier="tight",window="minute"} 2`)
	e.wantMetric(`policyguard_gateway_requests_total{outcome="rate_limited",tier="tight",upstream="openai"} 2`)
}

// Every answer carries the protocol's own rate-limit fields, computed
// from the tightest window, in place of the upstream's.
func TestGatewayRateLimitHeaders(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	ctx := context.Background()
	var res *http.Response
	oa := e.openai(key)
	if _, err := oa.Chat.Completions.New(ctx, chat("gpt-4o-mini"), option.WithResponseInto(&res)); err != nil {
		t.Fatal(err)
	}
	reserved := e.reservation(gateway.DefaultMaxOutput)
	for name, want := range map[string]string{
		"X-Ratelimit-Limit-Requests":     "1000",
		"X-Ratelimit-Remaining-Requests": "999",
		"X-Ratelimit-Reset-Requests":     "1m0s",
		"X-Ratelimit-Limit-Tokens":       "100000000",
		"X-Ratelimit-Remaining-Tokens":   fmt.Sprint(100000000 - reserved),
		"X-Ratelimit-Reset-Tokens":       "0s",
	} {
		if got := res.Header.Values(name); len(got) != 1 || got[0] != want {
			t.Errorf("openai %s: %q, want %q", name, got, want)
		}
	}
	an := e.anthropic(key)
	if _, err := an.Messages.New(ctx, claudeMessage("claude-sonnet-4-5"), anthropicoption.WithResponseInto(&res)); err != nil {
		t.Fatal(err)
	}
	reserved = e.reservation(100)
	for name, want := range map[string]string{
		"Anthropic-Ratelimit-Requests-Limit":     "1000",
		"Anthropic-Ratelimit-Requests-Remaining": "998",
		"Anthropic-Ratelimit-Requests-Reset":     "2026-03-01T12:01:00Z",
		"Anthropic-Ratelimit-Tokens-Limit":       "100000000",
		"Anthropic-Ratelimit-Tokens-Remaining":   fmt.Sprint(100000000 - chatTokens - reserved),
		"Anthropic-Ratelimit-Tokens-Reset":       "2026-03-02T12:00:00Z",
	} {
		if got := res.Header.Values(name); len(got) != 1 || got[0] != want {
			t.Errorf("anthropic %s: %q, want %q", name, got, want)
		}
	}
}

// A tier's models bound what its users call: another model is a 403 in
// the protocol's shape naming model and tier, consuming nothing and sent
// nowhere, and the model lists show only the tier's models.
func TestGatewayModels(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	setTierModels(t, e.env, "gw", []string{"gpt-4o-mini*", "claude-sonnet-4-5"})
	ctx := context.Background()
	oa, an := e.openai(key), e.anthropic(key)
	var res *http.Response
	_, err := oa.Chat.Completions.New(ctx, chat("gpt-4o"), option.WithResponseInto(&res))
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != 403 || oe.Code != "model_not_allowed" || oe.Message != `model "gpt-4o" is not included in tier "gw"` {
		t.Fatalf("gpt-4o: %v %s, want 403 naming model and tier", err, rawError(err))
	}
	if res.Header.Get("X-Ratelimit-Remaining-Requests") != "1000" {
		t.Errorf("the 403 lacks the rate-limit fields, or consumed a request: %v", res.Header)
	}
	_, err = an.Messages.New(ctx, claudeMessage("claude-opus-4"))
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != 403 {
		t.Fatalf("claude-opus-4: %v, want 403", err)
	}
	wantError(t, gateway.ProtocolAnthropic, ae.RawJSON(), "permission_error", "", `model "claude-opus-4" is not included in tier "gw"`)
	if len(e.fake.Requests()) != 0 {
		t.Fatal("a refused model reached the upstream")
	}
	if tokens, _, requests := e.usage("alice"); tokens != 0 || requests != 0 {
		t.Fatalf("refused models consumed %d tokens and %d requests", tokens, requests)
	}
	if _, err := oa.Chat.Completions.New(ctx, chat("gpt-4o-mini-2024-07-18")); err != nil {
		t.Fatalf("a model under the wildcard: %v", err)
	}
	if res, body := e.raw(http.MethodPost, "/llm/openai/chat/completions", `{"messages":[]}`, map[string]string{"Authorization": "Bearer " + key}); res.StatusCode != 403 {
		t.Errorf("a call naming no model: %d %s, want 403", res.StatusCode, body)
	}

	list, err := oa.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	if got := strings.Join(ids, " "); got != "gpt-4o-mini claude-sonnet-4-5" {
		t.Errorf("openai models: %s, want the tier's of the upstream's %d", got, fakeModelListSize)
	}
	alist, err := an.Models.List(ctx, anthropic.ModelListParams{})
	if err != nil {
		t.Fatal(err)
	}
	ids = ids[:0]
	for _, m := range alist.Data {
		ids = append(ids, m.ID)
	}
	if got := strings.Join(ids, " "); got != "gpt-4o-mini claude-sonnet-4-5" {
		t.Errorf("anthropic models: %s", got)
	}
	setTierModels(t, e.env, "gw", nil)
	if list, err := oa.Models.List(ctx); err != nil || len(list.Data) != fakeModelListSize {
		t.Errorf("a tier of any model: %v models (%v), want all %d", list, err, fakeModelListSize)
	}
}

// Only the metered routes and the model lists are forwarded, and only
// as their exact paths; other paths are a 404 in the protocol's shape,
// unless passthrough is on, when they are forwarded as requests with no
// tokens (but no variant of a metered path).
func TestGatewayRoutes(t *testing.T) {
	for _, passthrough := range []bool{false, true} {
		t.Run(fmt.Sprintf("passthrough=%t", passthrough), func(t *testing.T) {
			e, key := newGatewayEnv(t, func(c *gateway.Config) {
				if passthrough {
					c.Passthrough = passthroughPrefixes
				}
			})
			auth := map[string]string{"Authorization": "Bearer " + key}
			for _, tc := range []struct {
				method, path string
				forwarded    bool // with passthrough
				upstream     string
			}{
				{"GET", "/llm/openai/files?purpose=batch", true, "/v1/files"},
				{"POST", "/llm/openai/audio/speech", true, "/v1/audio/speech"},
				{"GET", "/llm/openai/chat/completions", true, "/v1/chat/completions"},
				{"POST", "/llm/claude/v1/messages/count_tokens", true, "/v1/messages/count_tokens"},
				{"POST", "/llm/openai/v1/chat/completions", true, "/v1/v1/chat/completions"},
				{"POST", "/llm/openai/chat/completions/", false, ""},
				{"POST", "/llm/openai/Chat/Completions", false, ""},
				{"GET", "/llm/claude/v1/models/", false, ""},
				{"POST", "/llm/openai/files/../chat/completions", false, ""},
				{"POST", "/llm/openai/chat%2Fcompletions", false, ""},
				{"POST", "/llm/openai//chat/completions", false, ""},
			} {
				sent := len(e.fake.Requests())
				_, _, requests := e.usage("alice")
				res, body := e.rawURL(tc.method, tc.path, `{}`, auth)
				if passthrough && tc.forwarded {
					reqs := e.fake.Requests()
					if res.StatusCode != 200 || len(reqs) != sent+1 || reqs[sent].Path != tc.upstream {
						t.Errorf("%s %s: %d %s, want it forwarded to %s", tc.method, tc.path, res.StatusCode, body, tc.upstream)
						continue
					}
					if q := reqs[sent].RawQuery; strings.Contains(tc.path, "?") && q != "purpose=batch" {
						t.Errorf("%s %s: query %q, want it kept", tc.method, tc.path, q)
					}
					if tokens, inFlight, after := e.usage("alice"); tokens != 0 || inFlight != 0 || after != requests+1 {
						t.Errorf("%s %s: %d tokens, %d in flight, %d more requests; want a request with no tokens", tc.method, tc.path, tokens, inFlight, after-requests)
					}
					continue
				}
				protocol := gateway.ProtocolOpenAI
				if strings.HasPrefix(tc.path, "/llm/claude") {
					protocol = gateway.ProtocolAnthropic
				}
				if res.StatusCode != 404 {
					t.Errorf("%s %s: %d %s, want 404", tc.method, tc.path, res.StatusCode, body)
					continue
				}
				wantError(t, protocol, body, map[string]string{gateway.ProtocolOpenAI: "invalid_request_error", gateway.ProtocolAnthropic: "not_found_error"}[protocol], "unknown_url", "no route")
				if len(e.fake.Requests()) != sent {
					t.Errorf("%s %s reached the upstream", tc.method, tc.path)
				}
			}
			res, body := e.raw("POST", "/llm/nope/chat/completions", chatBody, auth)
			if res.StatusCode != 404 {
				t.Fatalf("unknown upstream: %d %s", res.StatusCode, body)
			}
			wantError(t, gateway.ProtocolAnthropic, body, "not_found_error", "", `no upstream named "nope"`)
		})
	}
}

// rawURL is raw for a path sent exactly as written, dot segments and
// escapes included.
func (e *gwEnv) rawURL(method, path, body string, header map[string]string) (*http.Response, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.server.URL, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	p, q, _ := strings.Cut(path, "?")
	req.URL.Opaque = "//" + req.URL.Host + p
	req.URL.RawQuery = q
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	return res, string(data)
}

// Hop-by-hop header fields go neither way; nor do the client's
// credentials, cookies and X-Guard-* fields, nor the upstream's cookies and
// rate-limit fields. The upstream gets its key as its protocol expects.
func TestGatewayHeaders(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	res, body := e.raw(http.MethodPost, "/llm/openai/chat/completions", chatBody, map[string]string{
		"Authorization":       "Bearer " + key,
		"Connection":          "keep-alive, X-Client-Hop",
		"X-Client-Hop":        "1",
		"Keep-Alive":          "timeout=5",
		"Proxy-Authorization": "Basic eDp5",
		"Proxy-Connection":    "keep-alive",
		"X-Guard-Trace":       "1",
		"Cookie":              "policyguard_session=admin",
		"X-Forwarded-For":     "198.51.100.7",
		"X-Client-Kept":       "yes",
		"Openai-Organization": "org-1",
	})
	if res.StatusCode != 200 {
		t.Fatalf("%d %s", res.StatusCode, body)
	}
	got := e.fake.Requests()[0].Header
	for _, name := range []string{"X-Client-Hop", "Keep-Alive", "Proxy-Authorization", "Proxy-Connection", "X-Guard-Trace", "Cookie", "X-Forwarded-For", "X-Api-Key"} {
		if v, ok := got[name]; ok {
			t.Errorf("the upstream got %s: %q", name, v)
		}
	}
	for name, want := range map[string]string{
		"Authorization": "Bearer " + openAIUpstreamKey, "X-Client-Kept": "yes", "Openai-Organization": "org-1", "Accept-Encoding": "gzip",
	} {
		if v := got.Get(name); v != want {
			t.Errorf("the upstream got %s %q, want %q", name, v, want)
		}
	}
	for _, name := range []string{"X-Upstream-Hop", "Keep-Alive", "Set-Cookie"} {
		if v, ok := res.Header[name]; ok {
			t.Errorf("the client got %s: %q", name, v)
		}
	}
	for name, want := range map[string]string{
		"X-Upstream-Kept": "yes", "X-Upstream-Request-Id": "req_upstream_1", "X-Ratelimit-Limit-Requests": "1000",
	} {
		if v := res.Header.Values(name); len(v) != 1 || v[0] != want {
			t.Errorf("the client got %s %q, want %q", name, v, want)
		}
	}
	if id := res.Header.Get("X-Request-Id"); len(id) != 32 {
		t.Errorf("X-Request-Id %q: want the gateway's own", id)
	}
	if res.Header.Get("Anthropic-Ratelimit-Requests-Limit") != "" {
		t.Error("the upstream's anthropic rate-limit field reached an openai client")
	}

	for _, version := range []string{"", "2024-10-22"} {
		header := map[string]string{"X-Api-Key": key}
		want := "2023-06-01"
		if version != "" {
			header["Anthropic-Version"], want = version, version
		}
		if res, body := e.raw(http.MethodPost, "/llm/claude/v1/messages", messageBody, header); res.StatusCode != 200 {
			t.Fatalf("%d %s", res.StatusCode, body)
		}
		reqs := e.fake.Requests()
		got := reqs[len(reqs)-1].Header
		if got.Get("X-Api-Key") != anthropicUpstreamKey || got.Get("Authorization") != "" || got.Get("Anthropic-Version") != want {
			t.Errorf("anthropic upstream got x-api-key %q, authorization %q, anthropic-version %q; want its key only and version %s",
				got.Get("X-Api-Key"), got.Get("Authorization"), got.Get("Anthropic-Version"), want)
		}
	}
}

// A body over the gateway's limit is a 413 in the protocol's shape,
// whether its length is declared or not; nothing is checked or sent.
func TestGatewayBodyLimit(t *testing.T) {
	e, key := newGatewayEnv(t, func(c *gateway.Config) { c.MaxBody = 1024; c.Passthrough = passthroughPrefixes })
	big := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + strings.Repeat("a", 2000) + `"}]}`
	for _, tc := range []struct {
		name, path string
		header     map[string]string
		chunked    bool
	}{
		{"openai, declared", "/llm/openai/chat/completions", map[string]string{"Authorization": "Bearer " + key}, false},
		{"openai, chunked", "/llm/openai/chat/completions", map[string]string{"Authorization": "Bearer " + key}, true},
		{"anthropic, declared", "/llm/claude/v1/messages", map[string]string{"X-Api-Key": key}, false},
		{"passthrough, declared", "/llm/openai/files", map[string]string{"Authorization": "Bearer " + key}, false},
		{"passthrough, chunked", "/llm/openai/files", map[string]string{"Authorization": "Bearer " + key}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader = strings.NewReader(big)
			if tc.chunked {
				body = io.MultiReader(body) // no length: sent chunked
			}
			req, _ := http.NewRequest(http.MethodPost, e.server.URL+tc.path, body)
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 413 {
				t.Fatalf("%d %s, want 413", res.StatusCode, data)
			}
			if res.Header.Get("X-Ratelimit-Remaining-Requests")+res.Header.Get("Anthropic-Ratelimit-Requests-Remaining") != "1000" {
				t.Errorf("the 413 lacks the rate-limit fields, or consumed a request: %v", res.Header)
			}
			if strings.Contains(tc.path, "claude") {
				wantError(t, gateway.ProtocolAnthropic, string(data), "request_too_large", "", "request body is larger than 1024 bytes")
			} else {
				wantError(t, gateway.ProtocolOpenAI, string(data), "invalid_request_error", "request_too_large", "request body is larger than 1024 bytes")
			}
		})
	}
	if n := len(e.fake.Requests()); n != 0 {
		t.Errorf("the upstream got %d requests", n)
	}
	if tokens, inFlight, _ := e.usage("alice"); tokens != 0 || inFlight != 0 {
		t.Errorf("%d tokens, %d in flight after refused bodies", tokens, inFlight)
	}
}

// A redirect from the upstream is the client's to follow or not: the
// gateway passes it and follows nothing.
func TestGatewayPassesRedirects(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	res, body := e.raw(http.MethodPost, "/llm/openai/chat/completions", chatBody, map[string]string{"Authorization": "Bearer " + key, "X-Fake": "redirect"})
	if res.StatusCode != http.StatusTemporaryRedirect || res.Header.Get("Location") != "/v1/elsewhere" {
		t.Fatalf("%d %v %s, want the upstream's 307 to /v1/elsewhere", res.StatusCode, res.Header, body)
	}
	if reqs := e.fake.Requests(); len(reqs) != 1 {
		t.Fatalf("the upstream got %d requests: the gateway followed the redirect", len(reqs))
	}
	if tokens, inFlight, requests := e.usage("alice"); tokens != 0 || inFlight != 0 || requests != 1 {
		t.Errorf("%d tokens, %d in flight, %d requests; want 0, 0 and 1", tokens, inFlight, requests)
	}
}

// The upstream's key is in no answer, even one where the upstream echoes
// it, nor in /metrics or /healthz; metrics name no user and no key. (Log
// lines and every answer the SDKs and raw read are searched by the test
// environment.)
func TestGatewayNeverShowsTheUpstreamKey(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	ctx := context.Background()
	oa, an := e.openai(key), e.anthropic(key)
	_, err := oa.Chat.Completions.New(ctx, chat("gpt-4o-mini"), option.WithHeader("X-Fake", "echo-key"))
	if statusOf(err) != 401 || !strings.Contains(rawError(err), "Bearer [redacted]") {
		t.Errorf("an upstream echoing its key: %v %s, want its 401 with the key redacted", err, rawError(err))
	}
	_, err = an.Messages.New(ctx, claudeMessage("claude-sonnet-4-5"), anthropicoption.WithHeader("X-Fake", "echo-key"))
	if statusOf(err) != 401 || !strings.Contains(rawError(err), "[redacted]") {
		t.Errorf("anthropic: %v %s", err, rawError(err))
	}
	res, _ := e.raw(http.MethodPost, "/llm/openai/chat/completions", chatBody, map[string]string{"Authorization": "Bearer " + key, "X-Fake": "echo-key"})
	if got := res.Header.Get("X-Echo"); got != "Bearer [redacted]" {
		t.Errorf("X-Echo %q, want the key redacted", got)
	}
	if _, err := oa.Chat.Completions.New(ctx, chat("gpt-4o-mini")); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/metrics", "/healthz"} {
		body := e.do(http.MethodGet, path, "", false).Body.String()
		for _, secret := range []string{openAIUpstreamKey, anthropicUpstreamKey, key, "alice"} {
			if strings.Contains(body, secret) {
				t.Errorf("%s holds %q", path, secret)
			}
		}
	}
	e.wantMetric(`policyguard_gateway_tokens_total{tier="gw",upstream="openai"} 18`)
	e.wantMetric(`policyguard_gateway_upstream_latency_seconds_count{upstream="openai"} 3`)
	e.wantMetric(`policyguard_gateway_requests_total{outcome="forwarded",tier="gw",upstream="claude"} 1`)
}

// The reservation is the body's bytes, plus allowances for media and
// tools, plus the output cap (the largest the body sets, or MaxOutput)
// for each choice; an embedding has no output. A call whose upstream
// reports no usage is charged it, which shows it.
func TestGatewayReservesAnUpperBound(t *testing.T) {
	e, key := newGatewayEnv(t, func(c *gateway.Config) { c.MaxOutput = 1000 })
	msg := `"messages":[{"role":"user","content":"Say hello"}]`
	image := `"messages":[{"role":"user","content":[{"type":"text","text":"What is it?"},{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]`
	tools := `"tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"b","description":"image"}}]`
	for _, tc := range []struct {
		name, path, body string
		extra            int64 // beyond the body's bytes
	}{
		{"no cap", "/llm/openai/chat/completions", `{"model":"gpt-4o-mini",` + msg + `}`, 1000},
		{"max_completion_tokens", "/llm/openai/chat/completions", `{"model":"gpt-4o-mini",` + msg + `,"max_completion_tokens":50}`, 50},
		{"the larger cap", "/llm/openai/chat/completions", `{"model":"gpt-4o-mini",` + msg + `,"max_tokens":80,"max_completion_tokens":50}`, 80},
		{"n choices", "/llm/openai/chat/completions", `{"model":"gpt-4o-mini",` + msg + `,"max_tokens":10,"n":3}`, 30},
		{"an image", "/llm/openai/chat/completions", `{"model":"gpt-4o-mini",` + image + `,"max_tokens":10}`, 2048 + 10},
		{"tools", "/llm/openai/chat/completions", `{"model":"gpt-4o-mini",` + msg + `,` + tools + `,"max_tokens":10}`, 2*1024 + 10},
		{"completion", "/llm/openai/completions", `{"model":"gpt-3.5-turbo-instruct","prompt":"Say hello","max_tokens":20}`, 20},
		{"response", "/llm/openai/responses", `{"model":"gpt-4o-mini","input":"Say hello","max_output_tokens":40}`, 40},
		{"embedding", "/llm/openai/embeddings", `{"model":"text-embedding-3-small","input":[[1,2,3]]}`, 0},
		{"anthropic image", "/llm/claude/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}]}]}`, 2048 + 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _, _ := e.usage("alice")
			res, body := e.raw(http.MethodPost, tc.path, tc.body, map[string]string{"Authorization": "Bearer " + key, "X-Fake": "no-usage"})
			if res.StatusCode != 200 {
				t.Fatalf("%d %s", res.StatusCode, body)
			}
			after, _, _ := e.usage("alice")
			if want := int64(len(tc.body)) + tc.extra; after-before != want {
				t.Errorf("charged %d, want %d bytes + %d = %d", after-before, len(tc.body), tc.extra, want)
			}
		})
	}
	// A cap beyond every limit is refused, not wrapped around.
	res, body := e.raw(http.MethodPost, "/llm/openai/chat/completions", `{"model":"gpt-4o-mini",`+msg+`,"max_tokens":1000000000000000}`, map[string]string{"Authorization": "Bearer " + key})
	if res.StatusCode != 429 {
		t.Fatalf("an endless cap: %d %s, want 429", res.StatusCode, body)
	}
	wantError(t, gateway.ProtocolOpenAI, body, "tokens", "rate_limit_exceeded", "per-day token limit exceeded")
	// A body that names a member twice could be read otherwise upstream.
	res, body = e.raw(http.MethodPost, "/llm/openai/chat/completions", `{"model":"gpt-4o-mini","model":"gpt-4o",`+msg+`}`, map[string]string{"Authorization": "Bearer " + key})
	if res.StatusCode != 400 {
		t.Fatalf("a duplicate model: %d %s, want 400", res.StatusCode, body)
	}
	wantError(t, gateway.ProtocolOpenAI, body, "invalid_request_error", "", `duplicate key "model"`)
	for _, bad := range []string{`[1]`, `{"model":5}`, `{"model":"x"} {}`, `{"model":`} {
		if res, body := e.raw(http.MethodPost, "/llm/openai/chat/completions", bad, map[string]string{"Authorization": "Bearer " + key}); res.StatusCode != 400 {
			t.Errorf("body %s: %d %s, want 400", bad, res.StatusCode, body)
		}
	}
}

// Gateway calls are checks: the stats count them admitted and refused,
// and a tier's shadow limits decide them too.
func TestGatewayCallsCountAsChecks(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	e.putTier("shadowed", `{"requests_per_minute":3,"requests_per_hour":1000,"requests_per_day":10000,"burst_allowance":0,`+
		`"shadow":{"requests_per_minute":1,"requests_per_hour":1000,"requests_per_day":10000,"burst_allowance":0}}`)
	e.assign("alice", "shadowed")
	oa := e.openai(key)
	for i := range 4 {
		_, err := oa.Chat.Completions.New(context.Background(), chat("gpt-4o-mini"))
		if want := map[bool]int{true: 429, false: 0}[i == 3]; statusOf(err) != want {
			t.Fatalf("call %d: %v, want status %d", i+1, err, want)
		}
	}
	if err := e.store.FlushCounts(context.Background()); err != nil {
		t.Fatal(err)
	}
	var stats struct {
		Tiers []struct {
			Tier    string `json:"tier"`
			Buckets []struct {
				Admitted int64            `json:"admitted"`
				Refused  int64            `json:"refused"`
				Shadow   map[string]int64 `json:"shadow_refused"`
			} `json:"buckets"`
		} `json:"tiers"`
	}
	if rec := e.do(http.MethodGet, "/v1/stats?period=hour", "", true); rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &stats) != nil {
		t.Fatalf("stats: %d %s", rec.Code, rec.Body)
	}
	var admitted, refused, shadow int64
	for _, tier := range stats.Tiers {
		if tier.Tier != "shadowed" {
			continue
		}
		for _, b := range tier.Buckets {
			admitted, refused = admitted+b.Admitted, refused+b.Refused
			for _, n := range b.Shadow {
				shadow += n
			}
		}
	}
	// The shadow limit of one a minute refuses every call but the first,
	// the one the real limits refused included.
	if admitted != 3 || refused != 1 || shadow != 3 {
		t.Errorf("stats of tier shadowed: %d admitted, %d refused, %d shadow refusals; want 3, 1 and 3", admitted, refused, shadow)
	}
	e.wantMetric(`policyguard_shadow_refusals_total{tier="shadowed",window="minute"} 3`)
}
