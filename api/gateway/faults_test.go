package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3/option"
	"github.com/policyguard/policyguard/api/gateway"
)

// A client that leaves mid-stream does not end the exchange: the gateway
// reads on to learn the usage and settles with it; when none comes within
// the drain time, the call is charged its reservation. Either way the
// slot is freed and the drain counted.
func TestGatewayDrainsAfterTheClientLeaves(t *testing.T) {
	t.Run("the usage comes", func(t *testing.T) {
		e, key := newGatewayEnv(t, nil)
		ctx, cancel := context.WithCancel(context.Background())
		oa := e.openai(key)
		s := oa.Chat.Completions.NewStreaming(ctx, chat("gpt-4o-mini"), option.WithHeader("X-Fake", "hold"))
		if !s.Next() {
			t.Fatalf("first chunk: %v", s.Err())
		}
		cancel()
		s.Close()
		await(t, e.gone, "disconnect seen by the gateway")
		e.fake.ReleaseHeld() // the upstream goes on after the client left
		await(t, e.settled, "settle")
		if tokens, inFlight, _ := e.usage("alice"); tokens != chatTokens || inFlight != 0 {
			t.Errorf("tokens %d, in flight %d; want the upstream's %d and none", tokens, inFlight, chatTokens)
		}
		e.wantMetric(`policyguard_gateway_drained_total{settled="usage",upstream="openai"} 1`)
	})
	t.Run("no usage within the drain time", func(t *testing.T) {
		e, key := newGatewayEnv(t, func(c *gateway.Config) { c.Drain = 200 * time.Millisecond })
		ctx, cancel := context.WithCancel(context.Background())
		an := e.anthropic(key)
		s := an.Messages.NewStreaming(ctx, claudeMessage("claude-sonnet-4-5"), anthropicoption.WithHeader("X-Fake", "hang-stream"))
		if !s.Next() {
			t.Fatalf("first event: %v", s.Err())
		}
		cancel()
		s.Close()
		await(t, e.settled, "settle after the drain time")
		want := e.reservation(100)
		if tokens, inFlight, _ := e.usage("alice"); tokens != want || inFlight != 0 {
			t.Errorf("tokens %d, in flight %d; want the reservation %d and none", tokens, inFlight, want)
		}
		e.wantMetric(`policyguard_gateway_drained_total{settled="reservation",upstream="claude"} 1`)
	})
	t.Run("before the answer", func(t *testing.T) {
		e, key := newGatewayEnv(t, func(c *gateway.Config) { c.Drain = 200 * time.Millisecond })
		ctx, cancel := context.WithCancel(context.Background())
		oa := e.openai(key)
		failed := make(chan error, 1)
		go func() {
			_, err := oa.Chat.Completions.New(ctx, chat("gpt-4o-mini"), option.WithHeader("X-Fake", "hang"))
			failed <- err
		}()
		await(t, e.fake.Arrived(), "the request upstream")
		cancel()
		if err := <-failed; err == nil {
			t.Fatal("a call whose client left succeeded")
		}
		await(t, e.settled, "settle after the drain time")
		want := e.reservation(gateway.DefaultMaxOutput)
		if tokens, inFlight, _ := e.usage("alice"); tokens != want || inFlight != 0 {
			t.Errorf("tokens %d, in flight %d; want the reservation %d and none", tokens, inFlight, want)
		}
		e.wantMetric(`policyguard_gateway_drained_total{settled="reservation",upstream="openai"} 1`)
	})
}

// reservation returns what the gateway reserved for the last request the
// fake received, unchanged from the client's (not a stream whose usage the
// gateway asked for), with output cap out and no media or tools: its
// bytes plus out.
func (e *gwEnv) reservation(out int64) int64 {
	reqs := e.fake.Requests()
	return int64(len(reqs[len(reqs)-1].Body)) + out
}

// wantMetric fails the test unless GET /metrics has line.
func (e *gwEnv) wantMetric(line string) {
	e.t.Helper()
	rec := e.do(http.MethodGet, "/metrics", "", false)
	if !strings.Contains(rec.Body.String(), "\n"+line+"\n") {
		name, _, _ := strings.Cut(line, "{")
		e.t.Errorf("/metrics lacks %s:\n%s", line, grepLines(rec.Body.String(), name))
	}
}

// grepLines returns the lines of s that hold substr.
func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// One user's calls never hold more than max_concurrent exchanges with the
// upstream at once, whatever becomes of them: finished, their client gone
// mid-stream, failed upstream, hung until the upstream timeout, or cut.
// Every slot is freed at the end.
func TestGatewayConcurrencyHoldsAcrossFaults(t *testing.T) {
	e, key := newGatewayEnv(t, func(c *gateway.Config) {
		c.Drain = 200 * time.Millisecond
		c.UpstreamTimeout = 300 * time.Millisecond
	})
	kinds := []string{"ok", "disconnect", "fail", "hang", "cut", "claude"}
	var wg sync.WaitGroup
	done := make(chan string, 24)
	for i := range 18 {
		kind := kinds[i%len(kinds)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				freed := e.settledPulse.wait()
				if status := e.attempt(kind, key); status != http.StatusTooManyRequests {
					done <- kind
					return
				}
				select { // refused: the limit held; try again once a slot frees
				case <-freed:
				case <-time.After(10 * time.Second):
					done <- "stuck"
					return
				}
			}
			done <- "never admitted"
		}()
	}
	wg.Wait()
	close(done)
	for range 18 { // a client that left may return before its exchange ends
		await(t, e.settled, "settle")
	}
	for kind := range done {
		if kind == "stuck" || kind == "never admitted" {
			t.Errorf("a %s call", kind)
		}
	}
	if live, peak := e.transport.counts(); live != 0 || peak != 2 {
		t.Errorf("exchanges with the upstream: %d live at the end, at most %d at once; want 0 and max_concurrent, 2", live, peak)
	}
	if _, inFlight, _ := e.usage("alice"); inFlight != 0 {
		t.Errorf("%d calls in flight at the end, want 0", inFlight)
	}
}

// attempt makes one call of kind for the user of key and returns its
// status as the client saw it: 200 when the answer began.
func (e *gwEnv) attempt(kind, key string) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	oa, an := e.openai(key), e.anthropic(key)
	fake := func(flag string) option.RequestOption { return option.WithHeader("X-Fake", flag) }
	switch kind {
	case "fail", "hang":
		_, err := oa.Chat.Completions.New(ctx, chat("gpt-4o-mini"), fake(kind))
		return statusOf(err)
	case "claude":
		s := an.Messages.NewStreaming(ctx, claudeMessage("claude-sonnet-4-5"))
		for s.Next() {
		}
		return max(statusOf(s.Err()), 200)
	}
	flag := map[string]string{"ok": "", "disconnect": "hang-stream", "cut": "cut"}[kind]
	s := oa.Chat.Completions.NewStreaming(ctx, chat("gpt-4o-mini"), fake(flag))
	if !s.Next() {
		return max(statusOf(s.Err()), 200)
	}
	if kind == "disconnect" {
		cancel()
		s.Close()
		return 200
	}
	for s.Next() {
	}
	return 200
}

// A call longer than the call timeout keeps its slot: the gateway keeps it
// alive while its exchange is live, so another call of the same user is
// refused past the first's expiry, and the first settles as reported
// rather than expiring.
func TestGatewayKeepsLongCallsAlive(t *testing.T) {
	ticks := make(chan time.Time)
	e, key := newGatewayEnv(t, func(cfg *gateway.Config) {
		gateway.SetHooks(cfg, func(time.Duration) (<-chan time.Time, func()) { return ticks, func() {} }, nil, nil)
	})
	e.putTier("solo", strings.Replace(gwTier, `"max_concurrent":2`, `"max_concurrent":1`, 1))
	e.assign("alice", "solo")
	ctx := context.Background()
	an := e.anthropic(key)
	long := an.Messages.NewStreaming(ctx, claudeMessage("claude-sonnet-4-5"), anthropicoption.WithHeader("X-Fake", "hold"))
	if !long.Next() {
		t.Fatalf("first event: %v", long.Err())
	}
	e.clock.Advance(8 * time.Minute)
	for range 2 { // the second is taken once the first keepalive is done
		select {
		case ticks <- e.clock.Now():
		case <-time.After(10 * time.Second):
			t.Fatal("the call has no keepalive loop")
		}
	}
	e.clock.Advance(8 * time.Minute)
	if _, err := an.Messages.New(ctx, claudeMessage("claude-sonnet-4-5")); statusOf(err) != http.StatusTooManyRequests {
		t.Fatalf("a second call 16 minutes into the first: %v, want 429: the first kept its slot", err)
	}
	e.fake.ReleaseHeld()
	for long.Next() {
	}
	if err := long.Err(); err != nil {
		t.Fatal(err)
	}
	if tokens, inFlight, _ := e.usage("alice"); tokens != anthropicTokens || inFlight != 0 {
		t.Errorf("tokens %d, in flight %d; want the upstream's %d (an expired call counts its reservation) and none", tokens, inFlight, anthropicTokens)
	}
	if _, err := an.Messages.New(ctx, claudeMessage("claude-sonnet-4-5")); err != nil {
		t.Fatalf("a call after the first: %v", err)
	}
}

// An upstream that fails, reports usage in its error, hangs, cuts its
// answer, answers without usage or cannot be reached: each call is
// answered, settled as the gateway's rules say, and counted as admitted.
func TestGatewayUpstreamFaults(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	downURL, _ := url.Parse(down.URL)
	e, key := newGatewayEnv(t, func(c *gateway.Config) {
		c.UpstreamTimeout = 300 * time.Millisecond
		c.Upstreams = append(c.Upstreams, gateway.Upstream{Name: "down", Protocol: gateway.ProtocolOpenAI, BaseURL: downURL, Key: openAIUpstreamKey})
	})
	ctx := context.Background()
	oa, an := e.openai(key), e.anthropic(key)
	for _, tc := range []struct {
		name   string
		call   func() error
		status int
		tokens func() int64
		body   string // in the error the client read
	}{
		{"500 without usage", func() error {
			_, err := oa.Chat.Completions.New(ctx, chat("gpt-4o-mini"), option.WithHeader("X-Fake", "fail"))
			return err
		}, 500, func() int64 { return 0 }, "the upstream broke"},
		{"400 with usage", func() error {
			_, err := oa.Chat.Completions.New(ctx, chat("gpt-4o-mini"), option.WithHeader("X-Fake", "fail-usage"))
			return err
		}, 400, func() int64 { return errorUsageTokens }, "refused after reading"},
		{"hang", func() error {
			_, err := oa.Chat.Completions.New(ctx, chat("gpt-4o-mini"), option.WithHeader("X-Fake", "hang"))
			return err
		}, 504, func() int64 { return e.reservation(gateway.DefaultMaxOutput) }, "did not answer within 300ms"},
		{"cut stream", func() error {
			s := an.Messages.NewStreaming(ctx, claudeMessage("claude-sonnet-4-5"), anthropicoption.WithHeader("X-Fake", "cut"))
			for s.Next() {
			}
			return s.Err()
		}, 0, func() int64 { return e.reservation(100) }, ""},
		{"200 without usage", func() error {
			_, err := oa.Chat.Completions.New(ctx, chat("gpt-4o-mini"), option.WithHeader("X-Fake", "no-usage"))
			return err
		}, 200, func() int64 { return e.reservation(gateway.DefaultMaxOutput) }, ""},
		{"unreachable", func() error {
			down := e.openAIAt(e.server.URL+"/llm/down", key)
			_, err := down.Chat.Completions.New(ctx, chat("gpt-4o-mini"))
			return err
		}, 502, func() int64 { return 0 }, "upstream down could not be reached"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _, requests := e.usage("alice")
			err := tc.call()
			if got := statusOf(err); tc.status != 0 && got != tc.status && !(tc.status == 200 && err == nil) {
				t.Fatalf("status %d (%v), want %d", got, err, tc.status)
			}
			if tc.status == 0 && err == nil {
				t.Fatal("a cut stream read as whole")
			}
			if tc.body != "" && !strings.Contains(rawError(err), tc.body) {
				t.Errorf("error %q does not say %q", rawError(err), tc.body)
			}
			after, inFlight, requestsAfter := e.usage("alice")
			if want := tc.tokens(); after-before != want {
				t.Errorf("tokens settled %d, want %d", after-before, want)
			}
			if inFlight != 0 || requestsAfter != requests+1 {
				t.Errorf("in flight %d, requests %d → %d; want none in flight and the call counted", inFlight, requests, requestsAfter)
			}
		})
	}
}

// A stream longer than the server's read and write timeouts, which are
// made for checks, is relayed whole: the gateway extends both for its
// exchanges.
func TestGatewayOutlastsTheServerTimeouts(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	srv := httptest.NewUnstartedServer(e.srv)
	srv.Config.ReadTimeout, srv.Config.WriteTimeout = 100*time.Millisecond, 100*time.Millisecond
	srv.Start()
	defer srv.Close()
	an := e.anthropicAt(srv.URL+"/llm/claude", key)
	s := an.Messages.NewStreaming(context.Background(), claudeMessage("claude-sonnet-4-5"), anthropicoption.WithHeader("X-Fake", "slow"))
	n := 0
	for s.Next() {
		n++
	}
	if err := s.Err(); err != nil || n != 6 {
		t.Fatalf("%d events (%v), want all 6", n, err)
	}
	if tokens, _, _ := e.usage("alice"); tokens != anthropicTokens {
		t.Errorf("tokens %d, want %d", tokens, anthropicTokens)
	}
}
