// Command fakeupstream is the model API of the load benchmark's gateway
// phase (api/testdata/load builds and starts it): a
// fast fake of an OpenAI-compatible upstream, or with -proxy the plain
// proxy the gateway is measured beside. It prints "fakeupstream listening
// on http://ADDR" once it listens on a loopback port, and stops on SIGTERM
// or an interrupt.
//
// Without -proxy it answers POST /v1/chat/completions at once with a small
// fixed completion and its usage, and records nothing. A body with
// "stream": true is answered with server-sent events: the first chunk at
// once, flushed, its id holding the time it was sent
// (chatcmpl-sent-<Unix nanoseconds>), then, -stream-gap later, a second
// chunk, the usage chunk when stream_options.include_usage asks for it,
// and [DONE]. A relay that held events back would deliver the first one
// a gap late, so the gap shows it.
//
// With -proxy URL it is httputil.ReverseProxy to URL with nothing in it:
// the default director, and a transport that keeps up to 256 idle
// connections to the upstream, as the gateway's does, so that neither
// opens a connection per request.
//
// It lives under testdata so that go build ./... and go vet ./... leave it
// out: it is a program of the tests, not of the service.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/go-json-experiment/json"
)

func main() {
	proxy := flag.String("proxy", "", "be a plain reverse proxy to this `URL`")
	gap := flag.Duration("stream-gap", 10*time.Millisecond, "time between a stream's first event and the rest")
	flag.Parse()
	var h http.Handler
	if *proxy != "" {
		u, err := url.Parse(*proxy)
		if err != nil || u.Host == "" {
			log.Fatalf("-proxy %q: want an absolute URL", *proxy)
		}
		p := httputil.NewSingleHostReverseProxy(u)
		p.Transport = &http.Transport{MaxIdleConnsPerHost: 256}
		h = p
	} else {
		mux := http.NewServeMux()
		mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
			chat(w, r, *gap)
		})
		h = mux
	}
	if err := serve(h); err != nil {
		log.Fatal(err)
	}
}

var completion = []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o-mini",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}`)

// chat answers a chat completion, streamed when the body asks for it.
func chat(w http.ResponseWriter, r *http.Request, gap time.Duration) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		http.Error(w, `{"error":{"message":"unreadable body"}}`, http.StatusBadRequest)
		return
	}
	// A body that does not mention streaming is not parsed: the fake
	// costs the rounds as little as it can.
	var req struct {
		Stream        bool `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if bytes.Contains(body, []byte(`"stream"`)) {
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, `{"error":{"message":"body is not JSON"}}`, http.StatusBadRequest)
			return
		}
	}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		w.Write(completion)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	chunk := func(id, choices, usage string) string {
		return `data: {"id":"` + id + `","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":` + choices + `,"usage":` + usage + "}\n\n"
	}
	io.WriteString(w, chunk("chatcmpl-sent-"+strconv.FormatInt(time.Now().UnixNano(), 10),
		`[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]`, "null"))
	if rc.Flush() != nil {
		return
	}
	time.Sleep(gap)
	io.WriteString(w, chunk("chatcmpl-1", `[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]`, "null"))
	if req.StreamOptions.IncludeUsage {
		io.WriteString(w, chunk("chatcmpl-1", `[]`, `{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}`))
	}
	io.WriteString(w, "data: [DONE]\n\n")
}

// serve serves h on a loopback port, prints its URL, and returns on
// SIGTERM or an interrupt.
func serve(h http.Handler) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("fakeupstream listening on http://%s\n", ln.Addr())
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	return srv.Close()
}
