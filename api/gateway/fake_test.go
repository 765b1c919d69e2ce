package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/api/gateway"
	"github.com/policyguard/policyguard/api/internal/fakeupstream"
	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

// The upstreams' keys in the gateway tests: no answer, log line or metric
// may hold them.
const (
	openAIUpstreamKey    = "sk-upstream-openai-6f1d2c9e8b7a"
	anthropicUpstreamKey = "sk-ant-upstream-4e3d2c1b0a99"
)

// The usage the fake upstream reports for each route, and its total as
// the gateway must settle it.
const (
	chatTokens        = fakeupstream.ChatTokens
	completionTokens  = fakeupstream.CompletionTokens
	responseTokens    = fakeupstream.ResponseTokens
	embeddingTokens   = fakeupstream.EmbeddingTokens
	anthropicTokens   = fakeupstream.AnthropicTokens
	errorUsageTokens  = fakeupstream.ErrorUsageTokens
	fakeStreamChunks  = fakeupstream.StreamChunks
	fakeModelListSize = fakeupstream.ModelListSize
)

// fakeUpstream is the fake upstream (package fakeupstream, whose doc
// lists what X-Fake makes it do) served on a loopback port.
type fakeUpstream struct {
	*fakeupstream.Fake
	srv *httptest.Server
}

func newFakeUpstream(t *testing.T) *fakeUpstream {
	f := &fakeUpstream{Fake: fakeupstream.New()}
	f.srv = httptest.NewServer(f.Fake)
	t.Cleanup(f.srv.Close)
	return f
}

// countingTransport sends the gateway's requests upstream and counts the
// exchanges live at once: from the request until the gateway closed the
// answer's body, or the request failed.
type countingTransport struct {
	base http.RoundTripper

	mu         sync.Mutex
	live, peak int
}

func newCountingTransport() *countingTransport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DisableCompression = true
	return &countingTransport{base: t}
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.live++
	c.peak = max(c.peak, c.live)
	c.mu.Unlock()
	res, err := c.base.RoundTrip(r)
	if err != nil {
		c.done()
		return nil, err
	}
	res.Body = &countedBody{ReadCloser: res.Body, done: c.done}
	return res, nil
}

func (c *countingTransport) done() {
	c.mu.Lock()
	c.live--
	c.mu.Unlock()
}

// counts returns the exchanges live now and the most ever live at once.
func (c *countingTransport) counts() (live, peak int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live, c.peak
}

type countedBody struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *countedBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.done)
	return err
}

// gwEnv is a service with the gateway in front of a fake upstream, served
// on a real listener for the SDKs, and its own clock.
type gwEnv struct {
	*env
	svc       *policy.Service
	server    *httptest.Server
	fake      *fakeUpstream
	transport *countingTransport
	logs      *dbtest.LockedBuffer
	// settled and gone receive a value as each exchange is settled and
	// as each exchange's client goes away.
	settled, gone chan struct{}
	settledPulse  pulse
}

// gwTier is the tier of the gateway tests' users: metered, with room for
// every test but the one that fills it.
const gwTier = `{"requests_per_minute":1000,"requests_per_hour":10000,"requests_per_day":100000,"burst_allowance":0,"tokens_per_day":100000000,"max_concurrent":2}`

// newGatewayEnv starts a gateway with two upstreams of the fake, openai
// (openai) and claude (anthropic), both under configure's changes, and
// puts alice, whose key it returns, in tier "gw".
func newGatewayEnv(t *testing.T, configure func(*gateway.Config)) (*gwEnv, string) {
	t.Helper()
	store, err := db.Open(context.Background(), dbtest.DSN(t, "test.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	clk := policy.NewTestClock(t0)
	opts := []policy.Option{policy.WithClock(clk.Now), policy.WithStats(store, store), policy.WithUsers(store), policy.WithKeys(store), policy.WithPrices(store)}
	svc := policy.NewService(store, store, opts...)
	fake := newFakeUpstream(t)
	base, _ := url.Parse(fake.srv.URL)
	openAIBase := base.JoinPath("/v1")
	ct := newCountingTransport()
	cfg := &gateway.Config{
		Upstreams: []gateway.Upstream{
			{Name: "openai", Protocol: gateway.ProtocolOpenAI, BaseURL: openAIBase, Key: openAIUpstreamKey},
			{Name: "claude", Protocol: gateway.ProtocolAnthropic, BaseURL: base, Key: anthropicUpstreamKey},
		},
		Transport: ct,
	}
	e := &gwEnv{svc: svc, fake: fake, transport: ct,
		settled: make(chan struct{}, 100), gone: make(chan struct{}, 100), settledPulse: pulse{ch: make(chan struct{})}}
	gateway.SetHooks(cfg, nil,
		func() { e.gone <- struct{}{} },
		func() {
			select {
			case e.settled <- struct{}{}:
			default:
			}
			e.settledPulse.fire()
		})
	if configure != nil {
		configure(cfg)
	}
	logs := &dbtest.LockedBuffer{}
	srv := api.NewServer(api.Config{
		Service: svc,
		Health:  store.Ping,
		Admin:   policy.NewAdminGate(adminToken),
		Logger:  slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Gateway: cfg,
	})
	e.env, e.logs = &env{t: t, srv: srv, store: store, clock: clk}, logs
	t.Cleanup(func() {
		// Whatever the test did, the keys went nowhere.
		for _, key := range []string{openAIUpstreamKey, anthropicUpstreamKey} {
			if strings.Contains(logs.String(), key) {
				t.Errorf("a log line holds an upstream key:\n%s", logs)
			}
		}
	})
	e.server = httptest.NewServer(srv)
	t.Cleanup(e.server.Close)
	t.Cleanup(fake.Close) // first: nothing hangs on the fake
	e.putTier("gw", gwTier)
	e.assign("alice", "gw")
	return e, e.newKey("alice")
}

// assign puts user in tier.
func (e *gwEnv) assign(user, tier string) {
	e.t.Helper()
	if rec := e.do(http.MethodPut, "/v1/users/"+user, `{"tier":"`+tier+`"}`, true); rec.Code != http.StatusOK && rec.Code != http.StatusCreated {
		e.t.Fatalf("assign %s to %s: %d %s", user, tier, rec.Code, rec.Body)
	}
}

// newKey creates a key for user and returns its secret.
func (e *gwEnv) newKey(user string) string {
	e.t.Helper()
	_, secret, err := e.svc.CreateKey(context.Background(), user, false, "test")
	if err != nil {
		e.t.Fatal(err)
	}
	return secret
}

// openai returns an OpenAI client of the gateway's upstream "openai" that
// sends secret, and does not retry.
func (e *gwEnv) openai(secret string, opts ...option.RequestOption) openai.Client {
	return e.openAIAt(e.server.URL+"/llm/openai", secret, opts...)
}

// anthropic returns an Anthropic client of the gateway's upstream
// "claude" that sends secret, and does not retry.
func (e *gwEnv) anthropic(secret string, opts ...anthropicoption.RequestOption) anthropic.Client {
	return e.anthropicAt(e.server.URL+"/llm/claude", secret, opts...)
}

// openAIAt is openai for the base URL base. Every answer the client gets
// is searched for the upstreams' keys.
func (e *gwEnv) openAIAt(base, secret string, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{
		option.WithBaseURL(base), option.WithAPIKey(secret), option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: keySearch{e.t, http.DefaultTransport}}),
	}, opts...)...)
}

// anthropicAt is anthropic for the base URL base, its answers searched
// as openAIAt's.
func (e *gwEnv) anthropicAt(base, secret string, opts ...anthropicoption.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]anthropicoption.RequestOption{
		anthropicoption.WithBaseURL(base), anthropicoption.WithAPIKey(secret), anthropicoption.WithMaxRetries(0),
		anthropicoption.WithHTTPClient(&http.Client{Transport: keySearch{e.t, http.DefaultTransport}}),
	}, opts...)...)
}

// keySearch fails its test when an answer's header fields or body hold
// an upstream's key. It reads the body as the client does, chunk by
// chunk, so streams still come event by event.
type keySearch struct {
	t    *testing.T
	base http.RoundTripper
}

func (k keySearch) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := k.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	for name, vs := range res.Header {
		for _, v := range vs {
			k.search(name + ": " + v)
		}
	}
	res.Body = &keySearchBody{ReadCloser: res.Body, k: k}
	return res, nil
}

func (k keySearch) search(s string) {
	for _, key := range []string{openAIUpstreamKey, anthropicUpstreamKey} {
		if strings.Contains(s, key) {
			k.t.Errorf("an answer holds an upstream key: %q", s)
		}
	}
}

type keySearchBody struct {
	io.ReadCloser
	k    keySearch
	tail []byte // the end of what came before, where a key may begin
}

func (b *keySearchBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	seen := append(b.tail, p[:n]...)
	b.k.search(string(seen))
	b.tail = append([]byte(nil), seen[max(0, len(seen)-64):]...)
	return n, err
}

// usage returns user's tokens counted today, calls in flight and
// requests today.
func (e *gwEnv) usage(user string) (tokens, inFlight, requests int64) {
	e.t.Helper()
	r, err := e.svc.UsageReport(context.Background(), user, "")
	if err != nil {
		e.t.Fatal(err)
	}
	return r.Windows[policy.Day].Tokens.Used, r.CallsInFlight, r.Windows[policy.Day].Count
}

// await waits for a value on ch, failing the test after 10 seconds: what
// it waits for is an event of the exchange, never the passing of time.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10s", what)
	}
}

// raw sends a request to the gateway's server as is, without an SDK.
func (e *gwEnv) raw(method, path, body string, header map[string]string) (*http.Response, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.server.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	search := keySearch{t: e.t}
	search.search(string(data))
	for name, vs := range res.Header {
		search.search(name + ": " + strings.Join(vs, ", "))
	}
	return res, string(data)
}

// pulse wakes every waiter each time it fires.
type pulse struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed at the next fire.
func (p *pulse) wait() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ch
}

func (p *pulse) fire() {
	p.mu.Lock()
	close(p.ch)
	p.ch = make(chan struct{})
	p.mu.Unlock()
}

// chat is a chat completion request for model.
func chat(model string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello")}}
}

// claudeMessage is a message request for model with max_tokens 100.
func claudeMessage(model string) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 100,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Say hello"))}}
}

// setTierModels sets the models of the named tier (nil: any) through
// GET and PUT /v1/tiers/{name}, as an admin would.
func setTierModels(t *testing.T, e *env, tier string, models []string) {
	t.Helper()
	rec := e.do(http.MethodGet, "/v1/tiers/"+tier, "", true)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET tier %s: %d %s", tier, rec.Code, rec.Body)
	}
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	delete(body, "updated_at")
	if models == nil {
		body["models"] = nil
	} else {
		body["models"] = models
	}
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	e.putTier(tier, string(b))
}
