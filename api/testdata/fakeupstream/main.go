// Command fakeupstream is the model API of the load benchmark's gateway
// phase (api/testdata/load builds and starts it): a
// fast fake of an OpenAI-compatible upstream, or with -proxy the plain
// proxy the gateway is measured beside. It prints "fakeupstream listening
// on http://ADDR" once it listens on a loopback port, and stops on SIGTERM
// or an interrupt.
//
// Without -proxy it is the fake upstream of the gateway's tests (package
// api/internal/fakeupstream), recording nothing: a chat completion is
// answered at once with a small completion and its usage. A body with
// "stream": true is answered with server-sent events: the first chunk at
// once, flushed, its id holding the time it was sent
// (chatcmpl-sent-<Unix nanoseconds>), then, -stream-gap later, the rest,
// the usage chunk when stream_options.include_usage asks for it, and
// [DONE]. A relay that held events back would deliver the first one a gap
// late, so the gap shows it.
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
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/policyguard/policyguard/api/internal/fakeupstream"
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
		fake := fakeupstream.New()
		fake.Record, fake.StreamGap = false, *gap
		h = fake
	}
	if err := serve(h); err != nil {
		log.Fatal(err)
	}
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
