package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api/gateway"
	"github.com/policyguard/policyguard/db/dbtest"
)

// The gateway's settings: upstreams from -upstream (repeatable) or else
// GUARDRAIL_UPSTREAMS, each with its key from its own variable, and the
// other flags over their variables over their defaults.
func TestGatewaySettings(t *testing.T) {
	keys := map[string]string{"GUARDRAIL_UPSTREAM_KEY_OPENAI": "sk-one", "GUARDRAIL_UPSTREAM_KEY_MY_CLAUDE": "sk-two"}
	getenv := func(env map[string]string) func(string) string {
		return func(k string) string {
			if v, ok := env[k]; ok {
				return v
			}
			return keys[k]
		}
	}
	cfg, err := parseConfig(nil, getenv(nil), io.Discard)
	if err != nil || cfg.Gateway != nil {
		t.Fatalf("no upstream: gateway %+v (%v), want none", cfg.Gateway, err)
	}
	args := []string{"-upstream", "openai=openai:https://api.openai.com/v1/", "-upstream", "my-claude=anthropic:https://api.anthropic.com"}
	cfg, err = parseConfig(args, getenv(map[string]string{"GUARDRAIL_UPSTREAMS": "other=openai:http://x"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	g := cfg.Gateway
	if g == nil || len(g.Upstreams) != 2 || len(g.Passthrough) != 0 || g.MaxOutput != 4096 || g.Drain != time.Minute || g.UpstreamTimeout != 10*time.Minute || g.MaxBody != 32<<20 || g.MaxRetryWait != time.Minute {
		t.Fatalf("defaults: %+v", g)
	}
	for i, want := range []gateway.Upstream{
		{Name: "openai", Protocol: "openai", Key: "sk-one"},
		{Name: "my-claude", Protocol: "anthropic", Key: "sk-two"},
	} {
		got := g.Upstreams[i]
		if got.Name != want.Name || got.Protocol != want.Protocol || got.Key != want.Key {
			t.Errorf("upstream %d: %s %s %q, want %s %s %q", i, got.Name, got.Protocol, got.Key, want.Name, want.Protocol, want.Key)
		}
	}
	if u := g.Upstreams[0].BaseURL.String(); u != "https://api.openai.com/v1" {
		t.Errorf("base URL %s, want it without the trailing slash", u)
	}

	env := map[string]string{
		"GUARDRAIL_UPSTREAMS":           "openai=openai:http://127.0.0.1:9/v1, my-claude=anthropic:http://127.0.0.1:9",
		"GUARDRAIL_GATEWAY_PASSTHROUGH": "/files, /v1/files", "GUARDRAIL_GATEWAY_MAX_OUTPUT": "100", "GUARDRAIL_GATEWAY_DRAIN": "5s",
		"GUARDRAIL_UPSTREAM_TIMEOUT": "30s", "GUARDRAIL_GATEWAY_MAX_BODY": "1024", "GUARDRAIL_GATEWAY_MAX_RETRY_WAIT": "5m",
	}
	cfg, err = parseConfig(nil, getenv(env), io.Discard)
	if g := cfg.Gateway; err != nil || g == nil || len(g.Upstreams) != 2 || strings.Join(g.Passthrough, " ") != "/files /v1/files" || g.MaxOutput != 100 || g.Drain != 5*time.Second || g.UpstreamTimeout != 30*time.Second || g.MaxBody != 1024 || g.MaxRetryWait != 5*time.Minute {
		t.Fatalf("from the environment: %+v (%v)", cfg.Gateway, err)
	}
	cfg, err = parseConfig([]string{"-gateway-passthrough=", "-gateway-max-output", "7", "-gateway-drain", "1s", "-upstream-timeout", "2m", "-gateway-max-body", "99", "-gateway-max-retry-wait", "10s"}, getenv(env), io.Discard)
	if g := cfg.Gateway; err != nil || len(g.Passthrough) != 0 || g.MaxOutput != 7 || g.Drain != time.Second || g.UpstreamTimeout != 2*time.Minute || g.MaxBody != 99 || g.MaxRetryWait != 10*time.Second {
		t.Fatalf("flags over variables: %+v (%v)", cfg.Gateway, err)
	}

	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"-upstream", "openai"}, nil, `want NAME=PROTOCOL:URL`},
		{[]string{"-upstream", "Open=openai:http://x"}, nil, `the name must match`},
		{[]string{"-upstream", "x=grpc:http://x"}, nil, `the protocol must be openai or anthropic`},
		{[]string{"-upstream", "x=openai:ftp://x"}, nil, `an absolute http or https URL`},
		{[]string{"-upstream", "x=openai:https://user:hunter2@x"}, nil, `must not hold credentials`},
		{[]string{"-upstream", "x=openai:https://x/v1?a=b"}, nil, `no query or fragment`},
		{[]string{"-upstream", "openai=openai:http://x", "-upstream", "openai=anthropic:http://y"}, nil, `upstream openai is named twice`},
		{[]string{"-upstream", "nokey=openai:http://x"}, nil, `upstream nokey has no key: set GUARDRAIL_UPSTREAM_KEY_NOKEY`},
		{[]string{"-upstream", "openai=openai:http://x"}, map[string]string{"GUARDRAIL_UPSTREAM_KEY_OPENAI": "sk-spaced "}, `the key in GUARDRAIL_UPSTREAM_KEY_OPENAI starts or ends with white space`},
		{[]string{"-gateway-max-output", "0"}, nil, `gateway max output "0": must be a whole number of tokens from 1`},
		{[]string{"-gateway-max-body", "lots"}, nil, `gateway max body "lots"`},
		{[]string{"-gateway-drain", "0s"}, nil, `gateway drain "0s": must be a duration of at least 1ms`},
		{[]string{"-gateway-max-retry-wait", "500ms"}, nil, `gateway max retry wait "500ms": must be a duration of at least 1s`},
		{nil, map[string]string{"GUARDRAIL_UPSTREAM_TIMEOUT": "forever"}, `upstream timeout "forever"`},
		{[]string{"-upstream", "openai=openai:http://x"}, map[string]string{"GUARDRAIL_UPSTREAM_KEY_OPENAI": "sk-one", "GUARDRAIL_GATEWAY_PASSTHROUGH": "maybe"}, `passthrough prefix "maybe": want a plain path`},
		{[]string{"-upstream", "openai=openai:http://x", "-gateway-passthrough", "/files, /batches"}, map[string]string{"GUARDRAIL_UPSTREAM_KEY_OPENAI": "sk-one"}, `passthrough prefix /batches would forward /batches of upstream openai (openai) unmetered`},
	} {
		_, err := parseConfig(tc.args, getenv(tc.env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: %v, want an error saying %q", tc.args, tc.env, err, tc.want)
			continue
		}
		for _, secret := range []string{"hunter2", "sk-spaced", "sk-one", "sk-two"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%v: the error shows %q: %v", tc.args, secret, err)
			}
		}
	}
}

// The service started with an upstream serves the gateway at /llm/NAME,
// says so, and shows the upstream's key nowhere: not in its output, log,
// usage message, answers, /metrics or /healthz.
func TestRunServesTheGateway(t *testing.T) {
	const upstreamKey = "sk-main-upstream-3f9a1c"
	var reached atomic.Int64
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		if r.Header.Get("Authorization") != "Bearer "+upstreamKey {
			http.Error(w, `{"error":{"message":"bad upstream key"}}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c1","object":"chat.completion","model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":5,"total_tokens":12}}`)
	}))
	defer fake.Close()
	env := map[string]string{"GUARDRAIL_UPSTREAM_KEY_OPENAI": upstreamKey}
	getenv := func(k string) string { return env[k] }
	args := []string{"-addr", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "gw.db"), "-admin-token", token,
		"-upstream", "openai=openai:" + fake.URL + "/v1"}

	var usage strings.Builder
	if _, err := parseConfig(append(args, "-nosuchflag"), getenv, &usage); err == nil || !strings.Contains(usage.String(), "-upstream") {
		t.Fatalf("a mistyped flag: %v\n%s", err, usage.String())
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout, logs := &dbtest.LockedBuffer{}, &dbtest.LockedBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, getenv, stdout, logs) }()
	var u string
	dbtest.WaitFor(t, "start-up", 30*time.Second, func() bool {
		m := dbtest.ListeningRE.FindStringSubmatch(stdout.String())
		if m != nil {
			u = m[1]
		}
		return m != nil && strings.Contains(stdout.String(), "gateway:")
	})
	if want := "gateway: " + u + "/llm/openai forwards to " + fake.URL + "/v1 (openai)"; !strings.Contains(stdout.String(), want) {
		t.Errorf("stdout lacks %q:\n%s", want, stdout)
	}
	var answers strings.Builder
	get := func(method, path, auth string) *http.Response {
		req, _ := http.NewRequest(method, u+path, strings.NewReader(`{"model":"gpt-4o-mini","messages":[]}`))
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		answers.Write(b)
		for k, vs := range res.Header {
			answers.WriteString(k + ": " + strings.Join(vs, ",") + "\n")
		}
		res.Body = io.NopCloser(strings.NewReader(string(b)))
		return res
	}
	for _, auth := range []string{"", token, upstreamKey} {
		res := get("POST", "/llm/openai/chat/completions", auth)
		var body struct {
			Error struct{ Code string } `json:"error"`
		}
		json.NewDecoder(res.Body).Decode(&body)
		if res.StatusCode != http.StatusUnauthorized || body.Error.Code != "invalid_api_key" {
			t.Errorf("a call with %q for a key: %d %+v, want 401 invalid_api_key", auth, res.StatusCode, body)
		}
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the upstream was reached %d times without a gateway key", n)
	}
	// A key made through the admin API opens the way, with the upstream's
	// own key sent upstream; the call counts for its user.
	status, made := call(t, "POST", u+"/v1/keys", `{"user_id":"alice","note":"end to end"}`, true)
	var key struct{ Key string }
	if err := json.Unmarshal([]byte(made), &key); status != http.StatusCreated || err != nil || !strings.HasPrefix(key.Key, "pgk_") {
		t.Fatalf("POST /v1/keys: %d %s %v", status, made, err)
	}
	if res := get("POST", "/llm/openai/chat/completions", key.Key); res.StatusCode != http.StatusOK || reached.Load() != 1 {
		t.Fatalf("a call with a key: %d, upstream reached %d times", res.StatusCode, reached.Load())
	}
	if n := dayCount(t, u, "alice"); n != 1 {
		t.Errorf("alice's day: %d requests, want 1", n)
	}
	get("GET", "/metrics", "")
	get("GET", "/healthz", "")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for where, text := range map[string]string{"stdout": stdout.String(), "log": logs.String(), "answers": answers.String(), "usage": usage.String()} {
		if strings.Contains(text, upstreamKey) {
			t.Errorf("%s holds the upstream key", where)
		}
	}
	if !strings.Contains(logs.String(), "path=/llm/openai/chat/completions") {
		t.Errorf("the log has no access line of the gateway:\n%s", logs)
	}
}
