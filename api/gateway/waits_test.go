package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/policyguard/policyguard/api/gateway"
)

// attempts counts the requests an SDK client sends, retries included,
// and runs onFirst, if set, on the answer to the first before the SDK
// reads it. It is an SDK middleware of both SDKs, whose types are alike.
type attempts struct {
	n       atomic.Int64
	onFirst func(*http.Response)
}

func (a *attempts) middleware(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	n := a.n.Add(1)
	res, err := next(req)
	if n == 1 && err == nil && a.onFirst != nil {
		a.onFirst(res)
	}
	return res, err
}

// dayTier refuses a user's second call by its hour and its day windows:
// the day, whose wait is the longer, is the one Retry-After gives.
const dayTier = `{"requests_per_minute":1,"requests_per_hour":1,"requests_per_day":1,"burst_allowance":0}`

// A refusal whose wait is longer than -gateway-max-retry-wait carries
// x-should-retry: false, and the SDKs, each allowed two retries, raise
// their rate-limit error at once: one request, none sent upstream. (The
// Anthropic SDK obeys Retry-After without a cap: without the field it
// would sleep for the day.) Its reset fields promise no sooner than
// Retry-After.
func TestGatewayLongWaitIsNotRetried(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	e.putTier("daily", dayTier)
	e.assign("alice", "daily")
	oa := e.openai(key)
	if _, err := oa.Chat.Completions.New(context.Background(), chat("gpt-4o-mini")); err != nil {
		t.Fatal(err)
	}
	// As in the report: the hour frees its slot in 48m21s, the day in
	// 85,701 seconds.
	e.clock.Advance(11*time.Minute + 39*time.Second)
	for _, tc := range []struct {
		protocol string
		call     func(ctx context.Context, a *attempts) (*http.Response, error)
		reset    string // the requests' reset field, and its value
		want     string
	}{
		{gateway.ProtocolOpenAI, func(ctx context.Context, a *attempts) (*http.Response, error) {
			c := e.openai(key, option.WithMaxRetries(2), option.WithMiddleware(a.middleware))
			_, err := c.Chat.Completions.New(ctx, chat("gpt-4o-mini"))
			var oe *openai.Error
			if !errors.As(err, &oe) {
				return nil, err
			}
			return oe.Response, err
		}, "X-Ratelimit-Reset-Requests", "23h48m21s"},
		{gateway.ProtocolAnthropic, func(ctx context.Context, a *attempts) (*http.Response, error) {
			c := e.anthropic(key, anthropicoption.WithMaxRetries(2), anthropicoption.WithMiddleware(a.middleware))
			_, err := c.Messages.New(ctx, claudeMessage("claude-sonnet-4-5"))
			var ae *anthropic.Error
			if !errors.As(err, &ae) {
				return nil, err
			}
			return ae.Response, err
		}, "Anthropic-Ratelimit-Requests-Reset", "2026-03-02T12:00:00Z"},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			// A bound for the old behaviour, a day's sleep: never reached.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var a attempts
			res, err := tc.call(ctx, &a)
			if res == nil || res.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("%v, want the SDK's 429 error", err)
			}
			if n := a.n.Load(); n != 1 {
				t.Errorf("the SDK sent %d requests, want 1: no retry", n)
			}
			for name, want := range map[string]string{"X-Should-Retry": "false", "Retry-After": "85701", "Retry-After-Ms": "85701000", tc.reset: tc.want} {
				if got := res.Header.Values(name); len(got) != 1 || got[0] != want {
					t.Errorf("%s: %q, want %q", name, got, want)
				}
			}
		})
	}
	if got := len(e.fake.Requests()); got != 1 {
		t.Errorf("the upstream got %d requests, want only the first", got)
	}
	e.wantMetric(`policyguard_gateway_requests_total{outcome="rate_limited",tier="daily",upstream="openai"} 1`)
	e.wantMetric(`policyguard_gateway_requests_total{outcome="rate_limited",tier="daily",upstream="claude"} 1`)
}

// A refusal whose wait is within -gateway-max-retry-wait keeps the fields
// it had: no x-should-retry, and the SDK retries after Retry-After. Here
// a call held open fills max_concurrent; the first attempt is refused for
// a second, the held call ends while the SDK waits, and the retry passes.
func TestGatewayShortWaitIsRetried(t *testing.T) {
	e, key := newGatewayEnv(t, func(c *gateway.Config) { c.Drain = 50 * time.Millisecond })
	e.putTier("single", `{"requests_per_minute":100,"requests_per_hour":1000,"requests_per_day":10000,"burst_allowance":0,"max_concurrent":1}`)
	e.assign("alice", "single")
	ctx := context.Background()
	for _, tc := range []struct {
		protocol string
		call     func(a *attempts) error
	}{
		{gateway.ProtocolOpenAI, func(a *attempts) error {
			c := e.openai(key, option.WithMaxRetries(2), option.WithMiddleware(a.middleware))
			_, err := c.Chat.Completions.New(ctx, chat("gpt-4o-mini"))
			return err
		}},
		{gateway.ProtocolAnthropic, func(a *attempts) error {
			c := e.anthropic(key, anthropicoption.WithMaxRetries(2), anthropicoption.WithMiddleware(a.middleware))
			_, err := c.Messages.New(ctx, claudeMessage("claude-sonnet-4-5"))
			return err
		}},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			// The held call: a stream whose upstream sends one event and
			// then nothing, until its client leaves.
			holdCtx, leave := context.WithCancel(ctx)
			defer leave()
			oa := e.openai(key)
			s := oa.Chat.Completions.NewStreaming(holdCtx, chat("gpt-4o-mini"), option.WithHeader("X-Fake", "hang-stream"))
			if !s.Next() {
				t.Fatalf("the held call: %v", s.Err())
			}
			a := attempts{onFirst: func(res *http.Response) {
				if res.StatusCode != http.StatusTooManyRequests {
					t.Errorf("first attempt: %d, want 429", res.StatusCode)
					return
				}
				for name, want := range map[string]string{"X-Should-Retry": "", "Retry-After": "1", "Retry-After-Ms": "1000"} {
					if got := res.Header.Get(name); got != want {
						t.Errorf("first attempt's %s: %q, want %q", name, got, want)
					}
				}
				settled := e.settledPulse.wait()
				leave()
				s.Close()
				await(t, settled, "settle of the held call")
			}}
			if err := tc.call(&a); err != nil {
				t.Fatalf("%v, want the retry to pass", err)
			}
			if n := a.n.Load(); n != 2 {
				t.Errorf("the SDK sent %d requests, want 2: one retry", n)
			}
		})
	}
}

// A call refused by its tokens carries a tokens reset no sooner than
// Retry-After, in each protocol's words, though the window's oldest
// finished tokens leave before: two calls settle their usage 20 seconds
// apart, and a third, 30 seconds after the first, reserves so much that
// both must leave first.
func TestGatewayTokenResetCoversTheWait(t *testing.T) {
	for _, tc := range []struct {
		protocol, path    string
		body              func(out int) string
		usage             int
		resetField, reset string
	}{
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions", func(out int) string {
			return fmt.Sprintf(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello"}],"max_tokens":%d}`, out)
		}, chatTokens, "X-Ratelimit-Reset-Tokens", "50s"},
		{gateway.ProtocolAnthropic, "/llm/claude/v1/messages", func(out int) string {
			return fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":%d,"messages":[{"role":"user","content":"Say hello"}]}`, out)
		}, anthropicTokens, "Anthropic-Ratelimit-Tokens-Reset", "2026-03-01T12:01:20Z"},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			e, key := newGatewayEnv(t, nil)
			big := tc.body(500)
			// Room for the big call's reservation and 10 finished tokens:
			// fewer than one call's usage.
			limit := len(big) + 500 + 10
			e.putTier("tpm", fmt.Sprintf(`{"requests_per_minute":100,"requests_per_hour":1000,"requests_per_day":10000,"burst_allowance":0,"tokens_per_minute":%d}`, limit))
			e.assign("alice", "tpm")
			auth := map[string]string{"Authorization": "Bearer " + key}
			for _, after := range []time.Duration{20 * time.Second, 10 * time.Second} {
				if res, body := e.raw(http.MethodPost, tc.path, tc.body(1), auth); res.StatusCode != http.StatusOK {
					t.Fatalf("a small call: %d %s", res.StatusCode, body)
				}
				e.clock.Advance(after)
			}
			res, body := e.raw(http.MethodPost, tc.path, big, auth)
			if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "50" {
				t.Fatalf("the big call: %d %s, Retry-After %q; want 429 and 50", res.StatusCode, body, res.Header.Get("Retry-After"))
			}
			if got := res.Header.Get(tc.resetField); got != tc.reset {
				t.Errorf("%s: %q, want %q, Retry-After's (the oldest tokens leave in 30s)", tc.resetField, got, tc.reset)
			}
			if tokens, _, _ := e.usage("alice"); tokens != 2*int64(tc.usage) {
				t.Errorf("%d tokens used, want the two small calls' %d", tokens, 2*tc.usage)
			}
		})
	}
}
