// Package fakeupstream is a fake model API speaking both protocols of the
// gateway, OpenAI's and Anthropic's, streaming included, as the providers
// do: the one upstream of the gateway's tests, of its benchmark and (as
// the program api/testdata/fakeupstream) of the load benchmark.
//
// A request's X-Fake header (a comma-separated list) makes it misbehave:
//
//	gzip         answers gzip-encoded
//	fail         answers 500 with an error body and no usage
//	fail-usage   answers 400 with an error body that reports usage
//	redirect     answers 307 to /v1/elsewhere
//	echo-key     answers 401 echoing the key it was sent, in a field and the body
//	hang         never answers
//	hang-stream  sends a stream's first event, then nothing more
//	cut          sends a stream's first event, then drops the connection
//	hold         sends a stream's first event, then waits for ReleaseHeld
//	slow         waits 150 ms before each event
//	no-usage     answers 200 with a body that reports no usage
//	usage-is-reservation  answers a chat completion or a message, streamed
//	             or not, whose usage is the gateway's reservation for it:
//	             its body's bytes as prompt tokens, its max_tokens (or
//	             max_completion_tokens) as output tokens
//	cached       answers a chat completion whose prompt_tokens hold
//	             CachedTokens read from the cache, and its completion_tokens
//	             ReasoningTokens of reasoning
//	bomb-json    answers a chat completion, gzip-encoded, whose content is
//	             512 MiB of "a" (about 512 KiB sent), its usage after it
//	bomb-stream  answers an event stream, gzip-encoded, whose first event
//	             is a line of 512 MiB
package fakeupstream

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/go-json-experiment/json"
)

// The usage Answer and Stream report for each route, and its total as
// the gateway must settle it.
const (
	ChatTokens       = 11 + 7
	CompletionTokens = 15 + 8
	ResponseTokens   = 13 + 8
	EmbeddingTokens  = 5
	AnthropicTokens  = 17 + 9 + 3 + 2 // input, output, cache creation, cache read
	ErrorUsageTokens = 4
	StreamChunks     = 2 // content events before the usage in every stream
	ModelListSize    = 3
)

// What "cached" reports of a chat completion's ChatTokens: 11 prompt
// tokens, CachedTokens of them read from the cache, and 7 completion
// tokens, ReasoningTokens of them reasoning.
const (
	CachedTokens    = 4
	ReasoningTokens = 3
)

// Fake is the fake upstream, an http.Handler. Its fields are set before
// it serves; it is then safe for concurrent use.
type Fake struct {
	// Record keeps every request (Requests); the load benchmark's fake
	// keeps none.
	Record bool
	// StreamGap is the time between a stream's first event and the
	// rest; the first chunk of a chat stream then has the id
	// chatcmpl-sent-<Unix nanoseconds when sent>, so that a relay that
	// held it back shows it.
	StreamGap time.Duration
	// MaxBody is the largest body read (0: 64 MiB).
	MaxBody int64

	closing chan struct{}
	arrived chan struct{}

	mu      sync.Mutex
	reqs    []Request
	release chan struct{} // closed by ReleaseHeld: "hold" streams go on
}

// Request is a request as the fake received it.
type Request struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   []byte
}

// New returns a fake that records its requests.
func New() *Fake {
	return &Fake{Record: true, closing: make(chan struct{}), release: make(chan struct{}), arrived: make(chan struct{}, 100)}
}

// Requests returns what the fake received so far.
func (f *Fake) Requests() []Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Request(nil), f.reqs...)
}

// Arrived receives a value for each request recorded, while there is room.
func (f *Fake) Arrived() <-chan struct{} { return f.arrived }

// ReleaseHeld lets every "hold" stream go on.
func (f *Fake) ReleaseHeld() { close(f.release) }

// Close ends every request that waits, so that nothing hangs on the fake.
func (f *Fake) Close() { close(f.closing) }

func (f *Fake) maxBody() int64 {
	if f.MaxBody > 0 {
		return f.MaxBody
	}
	return 64 << 20
}

// call is what the fake reads of a call's body.
type call struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (c *call) includeUsage() bool { return c.StreamOptions != nil && c.StreamOptions.IncludeUsage }

// readCall reads body as many servers do (Go's encoding/json among
// them): names match ignoring case, and the last of two wins.
func readCall(body []byte) call {
	var c call
	json.Unmarshal(body, &c, json.MatchCaseInsensitiveNames(true), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	return c
}

// ServeHTTP answers r as the flags of its X-Fake header say.
func (f *Fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, f.maxBody()))
	if err != nil {
		http.Error(w, `{"error":{"message":"unreadable body"}}`, http.StatusBadRequest)
		return
	}
	if f.Record {
		f.mu.Lock()
		f.reqs = append(f.reqs, Request{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), body})
		f.mu.Unlock()
		select {
		case f.arrived <- struct{}{}:
		default:
		}
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
	h := w.Header()
	// Fields of the provider's own, which the gateway must replace or drop.
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
		reservationAnswer(w, r.URL.Path, body)
		return
	case flags["cached"]:
		h.Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18,"prompt_tokens_details":{"cached_tokens":4,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":3}}}`)
		return
	case flags["bomb-json"]:
		h.Set("Content-Type", "application/json")
		h.Set("Content-Encoding", "gzip")
		w.Write(bomb(`{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"`,
			`"},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}`))
		return
	case flags["bomb-stream"]:
		h.Set("Content-Type", "text/event-stream")
		h.Set("Content-Encoding", "gzip")
		w.Write(bomb(`data: {"choices":[{"index":0,"delta":{"content":"`, "\"}}]}\n\ndata: [DONE]\n\n"))
		return
	case flags["no-usage"]:
		h.Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[]}`)
		return
	case flags["fail-usage"]:
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"message":"refused after reading","type":"invalid_request_error"},"usage":{"input_tokens":%d,"total_tokens":%d}}`, ErrorUsageTokens, ErrorUsageTokens)
		return
	}

	f.relay(w, r, body, flags)
}

// reservationAnswer answers a chat completion or a message, streamed or
// not, whose usage is what the gateway reserves for body: its bytes as
// prompt tokens and its output cap as output tokens.
func reservationAnswer(w http.ResponseWriter, path string, body []byte) {
	var m struct {
		Stream              bool `json:"stream"`
		MaxTokens           int  `json:"max_tokens"`
		MaxCompletionTokens int  `json:"max_completion_tokens"`
	}
	json.Unmarshal(body, &m)
	in, out := len(body), max(m.MaxTokens, m.MaxCompletionTokens)
	if path == "/v1/messages" {
		if !m.Stream {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"msg_1","type":"message","role":"assistant","content":[],"usage":{"input_tokens":%d,"output_tokens":%d}}`, in, out)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":%d,\"output_tokens\":1}}}\n\n", in)
		fmt.Fprintf(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":%d}}\n\n", out)
		io.WriteString(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
		return
	}
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`, in, out, in+out)
	if !m.Stream {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":`+usage+`}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	io.WriteString(w, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":"stop"}],"usage":null}`+"\n\n")
	io.WriteString(w, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"choices":[],"usage":`+usage+`}`+"\n\n")
	io.WriteString(w, "data: [DONE]\n\n")
}

// relay writes the answer of a call, encoded and paced as flags say.
func (f *Fake) relay(w http.ResponseWriter, r *http.Request, body []byte, flags map[string]bool) {
	h := w.Header()
	wait := func(release <-chan struct{}) {
		select {
		case <-release:
		case <-r.Context().Done():
		case <-f.closing:
		}
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
	req := readCall(body)
	if !req.Stream {
		h.Set("Content-Type", "application/json")
		io.WriteString(out, Answer(r.URL.Path, req.Model))
		return
	}
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	events := Stream(r.URL.Path, req.Model, req.includeUsage())
	if f.StreamGap > 0 && r.URL.Path == "/v1/chat/completions" {
		events[0] = strings.Replace(events[0], `"id":"chatcmpl-1"`, `"id":"chatcmpl-sent-`+strconv.FormatInt(time.Now().UnixNano(), 10)+`"`, 1)
	}
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
		if f.StreamGap > 0 {
			select {
			case <-time.After(f.StreamGap):
			case <-r.Context().Done():
			}
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

// Answer is the body of a call that is not streamed, of the route of
// path (as the upstream sees it) for model.
func Answer(path, model string) string {
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

// Stream is the events of a streamed call: StreamChunks content events,
// the usage (for chat and text completions only when asked for) and the
// end.
func Stream(path, model string, includeUsage bool) []string {
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

// bombMiB is the size of the middle of a bomb, decompressed.
const bombMiB = 512

// bombMember is a gzip member of a MiB of "a", about a KiB compressed.
var bombMember = sync.OnceValue(func() []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zw.Write(bytes.Repeat([]byte("a"), 1<<20))
	zw.Close()
	return buf.Bytes()
})

// bomb returns a gzip body, of bombMiB+2 members that a reader joins,
// that decompresses to head, bombMiB MiB of "a", and tail.
func bomb(head, tail string) []byte {
	var buf bytes.Buffer
	member := func(s string) {
		zw := gzip.NewWriter(&buf)
		io.WriteString(zw, s)
		zw.Close()
	}
	member(head)
	for range bombMiB {
		buf.Write(bombMember())
	}
	member(tail)
	return buf.Bytes()
}
