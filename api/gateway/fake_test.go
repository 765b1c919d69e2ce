package gateway_test

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
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
	chatTokens        = 11 + 7
	completionTokens  = 15 + 8
	responseTokens    = 13 + 8
	embeddingTokens   = 5
	anthropicTokens   = 17 + 9 + 3 + 2 // input, output, cache creation, cache read
	errorUsageTokens  = 4
	fakeStreamChunks  = 2 // content events before the usage in every stream
	fakeModelListSize = 3
)

// fakeUpstream speaks both protocols as the providers do, streaming
// included, and misbehaves when a request's X-Fake header says so (a
// comma-separated list):
//
//	gzip         answers gzip-encoded
//	fail         answers 500 with an error body and no usage
//	fail-usage   answers 400 with an error body that reports usage
//	redirect     answers 307 to /v1/elsewhere
//	echo-key     answers 401 echoing the key it was sent, in a field and the body
//	hang         never answers
//	hang-stream  sends a stream's first event, then nothing more
//	cut          sends a stream's first event, then drops the connection
//	hold         sends a stream's first event, then waits for release
//	slow         waits 150 ms before each event
//	no-usage     answers 200 with a body that reports no usage
//	usage-is-reservation  answers an Anthropic message whose usage is the
//	             gateway's reservation for it: its body's bytes and max_tokens
type fakeUpstream struct {
	srv     *httptest.Server
	closing chan struct{}

	mu      sync.Mutex
	reqs    []fakeRequest
	release chan struct{} // closed by the test: "hold" streams go on
	arrived chan struct{} // a value for each request, when there is room
}

// fakeRequest is a request as the fake upstream received it.
type fakeRequest struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   []byte
}

func newFakeUpstream(t *testing.T) *fakeUpstream {
	f := &fakeUpstream{closing: make(chan struct{}), release: make(chan struct{}), arrived: make(chan struct{}, 100)}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// requests returns what the fake received so far.
func (f *fakeUpstream) requests() []fakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeRequest(nil), f.reqs...)
}

// releaseHeld lets every "hold" stream go on.
func (f *fakeUpstream) releaseHeld() { close(f.release) }

func (f *fakeUpstream) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.reqs = append(f.reqs, fakeRequest{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), body})
	f.mu.Unlock()
	select {
	case f.arrived <- struct{}{}:
	default:
	}
	flags := map[string]bool{}
	for _, fl := range strings.Split(r.Header.Get("X-Fake"), ",") {
		flags[strings.TrimSpace(fl)] = true
	}
	wait := func(release <-chan struct{}) {
		select {
		case <-release:
		case <-r.Context().Done():
		case <-f.closing:
		}
	}
	// Fields of the provider's own, which the gateway must replace or drop.
	h := w.Header()
	h.Set("X-Ratelimit-Limit-Requests", "999")
	h.Set("Anthropic-Ratelimit-Requests-Limit", "999")
	h.Set("X-Request-Id", "req_upstream_1")
	h.Set("Set-Cookie", "__cf_bm=upstream; Path=/")
	h.Set("Connection", "X-Upstream-Hop")
	h.Set("X-Upstream-Hop", "1")
	h.Set("Keep-Alive", "timeout=5")
	h.Set("X-Upstream-Kept", "yes")
	switch {
	case flags["hang"]:
		wait(nil)
		return
	case flags["redirect"]:
		h.Set("Location", "/v1/elsewhere")
		w.WriteHeader(http.StatusTemporaryRedirect)
		return
	case flags["echo-key"]:
		sent := r.Header.Get("Authorization") + r.Header.Get("X-Api-Key")
		h.Set("X-Echo", sent)
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":{"message":"key %s refused","type":"invalid_request_error"}}`, sent)
		return
	case flags["fail"]:
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, `{"error":{"message":"the upstream broke","type":"server_error"}}`)
		return
	case flags["usage-is-reservation"]:
		var m struct {
			MaxTokens int `json:"max_tokens"`
		}
		json.Unmarshal(body, &m)
		h.Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"msg_1","type":"message","role":"assistant","content":[],"usage":{"input_tokens":%d,"output_tokens":0}}`, len(body)+m.MaxTokens)
		return
	case flags["no-usage"]:
		h.Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[]}`)
		return
	case flags["fail-usage"]:
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"message":"refused after reading","type":"invalid_request_error"},"usage":{"input_tokens":%d,"total_tokens":%d}}`, errorUsageTokens, errorUsageTokens)
		return
	}

	var out io.Writer = w
	flush := func() { w.(http.Flusher).Flush() }
	if flags["gzip"] {
		h.Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		defer zw.Close()
		out = zw
		flush = func() { zw.Flush(); w.(http.Flusher).Flush() }
	}
	var req struct {
		Model         string `json:"model"`
		Stream        bool   `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	json.Unmarshal(body, &req)
	if !req.Stream {
		h.Set("Content-Type", "application/json")
		io.WriteString(out, fakeAnswer(r.URL.Path, req.Model))
		return
	}
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	events := fakeStream(r.URL.Path, req.Model, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
	for i, ev := range events {
		if flags["slow"] {
			select {
			case <-time.After(150 * time.Millisecond):
			case <-r.Context().Done():
			}
		}
		io.WriteString(out, ev)
		flush()
		if i > 0 {
			continue
		}
		switch {
		case flags["cut"]:
			panic(http.ErrAbortHandler)
		case flags["hang-stream"]:
			wait(nil)
			return
		case flags["hold"]:
			f.mu.Lock()
			release := f.release
			f.mu.Unlock()
			wait(release)
		}
		if r.Context().Err() != nil {
			return
		}
	}
}

// fakeAnswer is the body of a call that is not streamed.
func fakeAnswer(path, model string) string {
	switch path {
	case "/v1/chat/completions":
		return `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"` + model + `","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}`
	case "/v1/completions":
		return `{"id":"cmpl-1","object":"text_completion","created":1,"model":"` + model + `","choices":[{"index":0,"text":"Hello","finish_reason":"stop"}],"usage":{"prompt_tokens":15,"completion_tokens":8,"total_tokens":23}}`
	case "/v1/responses":
		return `{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"` + model + `","output":[{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hello","annotations":[]}]}],"usage":{"input_tokens":13,"output_tokens":8,"total_tokens":21,"input_tokens_details":{"cached_tokens":0},"output_tokens_details":{"reasoning_tokens":0}},"metadata":{}}`
	case "/v1/embeddings":
		return `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,0.2]}],"model":"` + model + `","usage":{"prompt_tokens":5,"total_tokens":5}}`
	case "/v1/messages":
		return `{"id":"msg_1","type":"message","role":"assistant","model":"` + model + `","content":[{"type":"text","text":"Hello"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":17,"output_tokens":9,"cache_creation_input_tokens":3,"cache_read_input_tokens":2}}`
	case "/v1/models":
		return `{"object":"list","data":[{"id":"gpt-4o-mini","object":"model","created":1,"owned_by":"openai"},{"id":"gpt-4o","object":"model","created":1,"owned_by":"openai"},{"id":"claude-sonnet-4-5","type":"model","display_name":"Claude","created_at":"2025-01-01T00:00:00Z"}],"has_more":false,"first_id":"gpt-4o-mini","last_id":"claude-sonnet-4-5"}`
	}
	return `{"ok":true,"path":"` + path + `"}`
}

// fakeStream is the events of a streamed call: fakeStreamChunks content
// events, the usage (for chat and text completions only when asked for)
// and the end.
func fakeStream(path, model string, includeUsage bool) []string {
	data := func(s string) string { return "data: " + s + "\n\n" }
	event := func(name, s string) string { return "event: " + name + "\ndata: " + s + "\n\n" }
	var evs []string
	switch path {
	case "/v1/chat/completions":
		chunk := func(choices, usage string) string {
			return data(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"` + model + `","choices":` + choices + `,"usage":` + usage + `}`)
		}
		evs = append(evs,
			chunk(`[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]`, "null"),
			chunk(`[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]`, "null"))
		if includeUsage {
			evs = append(evs, chunk(`[]`, `{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}`))
		}
		evs = append(evs, data("[DONE]"))
	case "/v1/completions":
		chunk := func(choices, usage string) string {
			return data(`{"id":"cmpl-1","object":"text_completion","created":1,"model":"` + model + `","choices":` + choices + `,"usage":` + usage + `}`)
		}
		evs = append(evs,
			chunk(`[{"index":0,"text":"Hel","finish_reason":null}]`, "null"),
			chunk(`[{"index":0,"text":"lo","finish_reason":"stop"}]`, "null"))
		if includeUsage {
			evs = append(evs, chunk(`[]`, `{"prompt_tokens":15,"completion_tokens":8,"total_tokens":23}`))
		}
		evs = append(evs, data("[DONE]"))
	case "/v1/responses":
		resp := func(status, usage string) string {
			return `{"id":"resp_1","object":"response","created_at":1,"status":"` + status + `","model":"` + model + `","output":[],"usage":` + usage + `}`
		}
		evs = append(evs,
			event("response.created", `{"type":"response.created","sequence_number":0,"response":`+resp("in_progress", "null")+`}`),
			event("response.output_text.delta", `{"type":"response.output_text.delta","sequence_number":1,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hello"}`),
			event("response.completed", `{"type":"response.completed","sequence_number":2,"response":`+resp("completed", `{"input_tokens":13,"output_tokens":8,"total_tokens":21,"input_tokens_details":{"cached_tokens":0},"output_tokens_details":{"reasoning_tokens":0}}`)+`}`))
	case "/v1/messages":
		evs = append(evs,
			event("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"`+model+`","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":17,"output_tokens":1,"cache_creation_input_tokens":3,"cache_read_input_tokens":2}}}`),
			event("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
			event("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`),
			event("content_block_stop", `{"type":"content_block_stop","index":0}`),
			event("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":9}}`),
			event("message_stop", `{"type":"message_stop"}`))
	}
	return evs
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
	logs      *lockedBuffer
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
	opts := []policy.Option{policy.WithClock(clk.Now), policy.WithStats(store, store), policy.WithUsers(store), policy.WithKeys(store)}
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
	logs := &lockedBuffer{}
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
	t.Cleanup(func() { close(fake.closing) }) // first: nothing hangs on the fake
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
