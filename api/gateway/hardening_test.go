package gateway_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/policyguard/policyguard/api/gateway"
)

// passthroughPrefixes are the passthrough prefixes of the tests that
// forward: every path they forward is under one.
var passthroughPrefixes = []string{"/files", "/audio", "/chat", "/v1/chat", "/v1/messages/count_tokens"}

// A path or query an upstream might read otherwise than the gateway (an
// escaped letter, which common servers decode before routing, a space or
// control character, an escape escaped twice, a ";" parameter) is a 400
// in the protocol's shape, even with passthrough: so no metered route is
// forwarded unmetered under another spelling, and nothing is counted or
// sent.
func TestGatewayCanonicalPath(t *testing.T) {
	e, key := newGatewayEnv(t, func(c *gateway.Config) { c.Passthrough = passthroughPrefixes })
	auth := map[string]string{"Authorization": "Bearer " + key}
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct{ protocol, path string }{
		{gateway.ProtocolOpenAI, "/llm/openai/chat/%63ompletions"},
		{gateway.ProtocolOpenAI, "/llm/openai/%63hat/completions"},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions%20"},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions;x=1"},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions%3bx=1"},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions%00"},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions%09"},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions%252e"},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completion%73"},
		{gateway.ProtocolOpenAI, "/llm/openai/files/file%2Dabc"},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions?api-version=%2561"},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions?a=%00"},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions?a=1;b=2"},
		{gateway.ProtocolOpenAI, "/llm/openai/files?purpose=%62atch"},
		{gateway.ProtocolAnthropic, "/llm/claude/v1/%6Dessages"},
		{gateway.ProtocolAnthropic, "/llm/claude/v1/messages%00"},
	} {
		sent := len(e.fake.Requests())
		_, _, before := e.usage("alice")
		res, got := e.rawURL(http.MethodPost, tc.path, body, auth)
		if res.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", tc.path, res.StatusCode, got)
			continue
		}
		wantError(t, tc.protocol, got, "invalid_request_error", "", "send it plainly")
		if n := len(e.fake.Requests()); n != sent {
			t.Errorf("%s reached the upstream", tc.path)
		}
		if _, _, after := e.usage("alice"); after != before {
			t.Errorf("%s was counted", tc.path)
		}
	}
	// An escape of a character that needs one is kept as it came, and so
	// forwarded.
	res, got := e.rawURL(http.MethodGet, "/llm/openai/files/a%3Ab?purpose=a%2Bb", "", auth)
	reqs := e.fake.Requests()
	if res.StatusCode != 200 || len(reqs) == 0 || reqs[len(reqs)-1].Path != "/v1/files/a:b" || reqs[len(reqs)-1].RawQuery != "purpose=a%2Bb" {
		t.Errorf("an escaped colon: %d %s, want it forwarded as it came", res.StatusCode, got)
	}
	if !strings.Contains(got, `"ok":true`) {
		t.Errorf("an escaped colon: answer %s", got)
	}
}

// A metered body naming a member the gateway reads (model, the output
// caps, stream, stream_options and its include_usage) in another letter
// case is a 400, as /v1/check refuses such duplicates: an upstream that
// matches names ignoring case would otherwise run another model, or
// another cap, than the one the gateway checked.
func TestGatewayCaseVariantNames(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	setTierModels(t, e.env, "gw", []string{"gpt-4o-mini", "claude-sonnet-4-5"})
	auth := map[string]string{"Authorization": "Bearer " + key}
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct{ protocol, path, body string }{
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions", `{"model":"gpt-4o-mini","Model":"gpt-4o",` + msgs + `}`},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions", `{"MODEL":"gpt-4o",` + msgs + `}`},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions", `{"model":"gpt-4o-mini","max_completion_tokens":10,"Max_Completion_Tokens":100000,` + msgs + `}`},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions", `{"model":"gpt-4o-mini","N":50,` + msgs + `}`},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions", `{"model":"gpt-4o-mini","stream":false,"Stream":true,` + msgs + `}`},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions", `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true,"Include_Usage":false},` + msgs + `}`},
		{gateway.ProtocolOpenAI, "/llm/openai/responses", `{"model":"gpt-4o-mini","max_output_tokens":10,"Max_output_tokens":100000,"input":"hi"}`},
		{gateway.ProtocolAnthropic, "/llm/claude/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":10,"Max_tokens":100000,` + msgs + `}`},
		{gateway.ProtocolAnthropic, "/llm/claude/v1/messages", `{"model":"claude-sonnet-4-5","mOdel":"claude-opus-4-1","max_tokens":10,` + msgs + `}`},
	} {
		sent := len(e.fake.Requests())
		res, got := e.raw(http.MethodPost, tc.path, tc.body, auth)
		if res.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", tc.body, res.StatusCode, got)
			continue
		}
		wantError(t, tc.protocol, got, "invalid_request_error", "", "names that differ only in case count as the same")
		if len(e.fake.Requests()) != sent {
			t.Errorf("%s reached the upstream", tc.body)
		}
	}
	if tokens, inFlight, requests := e.usage("alice"); tokens != 0 || inFlight != 0 || requests != 0 {
		t.Errorf("alice: %d tokens, %d in flight, %d requests; want nothing counted", tokens, inFlight, requests)
	}
}

// Passthrough forwards only the paths under the prefixes it lists, and
// refuses at start a prefix that would reach model calls the gateway
// cannot meter (batches, realtime sessions, assistants' runs, ...): a way
// to spend any model's tokens unmetered.
func TestGatewayPassthroughAllowlist(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	for _, tc := range []struct {
		prefixes []string
		want     string // in the error; "" for none
	}{
		{passthroughPrefixes, ""},
		{[]string{"/files", "/batches"}, "/batches"},
		{[]string{"/BATCHES"}, "/batches"},
		{[]string{"/"}, "/batches"},
		{[]string{"/realtime/sessions"}, "/realtime"},
		{[]string{"/threads"}, "/threads"},
		{[]string{"/assistants/"}, "/assistants"},
		{[]string{"/v1"}, "/v1/messages/batches"},
		{[]string{"/v1/messages"}, "/v1/messages/batches"},
		{[]string{"/v1/complete"}, "/v1/complete"},
		{[]string{"files"}, "want a plain path"},
		{[]string{"/files/../batches"}, "want a plain path"},
	} {
		cfg := gateway.Config{Upstreams: []gateway.Upstream{
			{Name: "openai", Protocol: gateway.ProtocolOpenAI, BaseURL: mustURL(t, e.server.URL), Key: "k"},
			{Name: "claude", Protocol: gateway.ProtocolAnthropic, BaseURL: mustURL(t, e.server.URL), Key: "k"},
		}, Passthrough: tc.prefixes}
		err := cfg.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Validate of %q: %v, want an error naming %q", tc.prefixes, err, tc.want)
		}
	}

	e, key = newGatewayEnv(t, func(c *gateway.Config) { c.Passthrough = []string{"/files", "/v1/files"} })
	for _, tc := range []struct {
		method, path string
		forwarded    bool
	}{
		{"GET", "/llm/openai/files", true},
		{"GET", "/llm/openai/files/file-abc/content", true},
		{"GET", "/llm/claude/v1/files", true},
		{"POST", "/llm/openai/batches", false},
		{"GET", "/llm/openai/batches/batch_1", false},
		{"POST", "/llm/claude/v1/messages/batches", false},
		{"POST", "/llm/openai/realtime/sessions", false},
		{"POST", "/llm/openai/threads/runs", false},
		{"GET", "/llm/openai/filesystem", false},
		{"GET", "/llm/openai/Files", false},
		{"POST", "/llm/openai/audio/speech", false},
	} {
		sent := len(e.fake.Requests())
		res, body := e.rawURL(tc.method, tc.path, `{}`, map[string]string{"Authorization": "Bearer " + key})
		forwarded := len(e.fake.Requests()) > sent
		if forwarded != tc.forwarded || tc.forwarded && res.StatusCode != 200 || !tc.forwarded && res.StatusCode != 404 {
			t.Errorf("%s %s: %d %s (forwarded %t), want forwarded %t", tc.method, tc.path, res.StatusCode, body, forwarded, tc.forwarded)
		}
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
