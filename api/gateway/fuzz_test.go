package gateway

import (
	stdjson "encoding/json"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// upstreamCall is what an upstream that reads bodies as Go's
// encoding/json does (names matched ignoring case, the last of two
// winning, numbers as float64, as lax validators take 1e3 for 1000)
// reads of a metered call.
type upstreamCall struct {
	Model               *string  `json:"model"`
	Stream              *bool    `json:"stream"`
	MaxTokens           *float64 `json:"max_tokens"`
	MaxCompletionTokens *float64 `json:"max_completion_tokens"`
	MaxOutputTokens     *float64 `json:"max_output_tokens"`
	N                   *float64 `json:"n"`
	BestOf              *float64 `json:"best_of"`
}

// FuzzGatewayCall checks that whatever the path and the body, what the
// gateway decides on (the route, the model, the output cap and the
// choices its token bound counts) is what an upstream reads of the bytes
// it receives: the path as the gateway forwards it, decoded once, and the
// body as the gateway forwards it, read loosely.
func FuzzGatewayCall(f *testing.F) {
	f.Add("/chat/completions", []byte(`{"model":"gpt-4o-mini","messages":[],"max_tokens":10}`))
	f.Add("/chat/%63ompletions", []byte(`{"model":"gpt-4o-mini","Model":"gpt-4o"}`))
	f.Add("/v1/messages", []byte(`{"model":"claude","max_tokens":1e6,"stream":true}`))
	f.Add("/responses", []byte(`{"model":"m","max_output_tokens":100.0,"n":3,"stream":true,"stream_options":{"include_usage":false}}`))
	f.Add("/completions;x", []byte(`{"model":"m","ſtream":true,"best_of":2}`))
	f.Fuzz(func(t *testing.T, path string, body []byte) {
		for _, p := range protocols {
			checkPath(t, p.protocol, path)
			checkBody(t, p.protocol, path, body)
		}
	})
}

// checkPath: a path the gateway takes routes at the upstream, which
// decodes it once and may ignore letter case and trailing slashes, as it
// does at the gateway; one it would forward unmetered is no metered path
// there.
func checkPath(t *testing.T, p protocol, path string) {
	if !cleanPath(path) || ambiguous(path) != "" {
		return
	}
	decoded, err := url.PathUnescape(path)
	if err != nil {
		t.Fatalf("path %q passed, but does not decode: %v", path, err)
	}
	r := findRoute(p, http.MethodPost, path)
	if up := findRoute(p, http.MethodPost, decoded); up != r {
		t.Fatalf("path %q: route %d at the gateway, %d at the upstream (%q)", path, r, up, decoded)
	}
	metered, _ := p.paths()
	loose := strings.ToLower(strings.TrimRight(decoded, "/"))
	if _, ok := metered[loose]; ok && r == routeOther && !nearRoute(p, path) {
		t.Fatalf("path %q would be forwarded unmetered, and is %q at a loose upstream", path, loose)
	}
}

// checkBody: a body the gateway takes is read by the upstream, as the
// gateway forwards it, with the model the gateway checked, no output cap
// above the one it reserved for, no more choices, and the same stream.
func checkBody(t *testing.T, p protocol, path string, body []byte) {
	r := findRoute(p, http.MethodPost, path)
	if r == routeOther || r == routeModels {
		r = routeChat // the body is read alike on every metered route
	}
	cb, err := readCallBody(body)
	if err != nil {
		return
	}
	sent, _, err := p.prepare(&cb, r, body)
	if err != nil {
		t.Fatalf("body %q: prepare: %v", body, err)
	}
	var up upstreamCall
	if stdjson.Unmarshal(sent, &up) != nil {
		return // the upstream refuses it: nothing is spent
	}
	if up.Model != nil && *up.Model != cb.model {
		t.Fatalf("body %q: the gateway checked model %q, the upstream runs %q", body, cb.model, *up.Model)
	}
	if up.Stream != nil && *up.Stream != cb.stream {
		t.Fatalf("body %q: stream %t at the gateway, %t at the upstream", body, cb.stream, *up.Stream)
	}
	for _, c := range []*float64{up.MaxTokens, up.MaxCompletionTokens, up.MaxOutputTokens} {
		if c == nil || *c < 0 || *c != math.Trunc(*c) {
			continue // the upstream refuses it
		}
		if cb.outputCap < 0 || *c > float64(cb.outputCap) {
			t.Fatalf("body %q: output cap %v at the upstream, %d reserved for", body, *c, cb.outputCap)
		}
	}
	for _, c := range []*float64{up.N, up.BestOf} {
		if c != nil && *c >= 0 && *c == math.Trunc(*c) && *c <= maxChoices && *c > float64(cb.choices) {
			t.Fatalf("body %q: %v choices at the upstream, %d reserved for", body, *c, cb.choices)
		}
	}
	again, err := readCallBody(sent)
	if err != nil || again.model != cb.model || again.outputCap != cb.outputCap || again.choices != cb.choices || again.stream != cb.stream {
		t.Fatalf("body %q: the forwarded body %q reads %+v (%v), the gateway decided on %+v", body, sent, again, err, cb)
	}
}
