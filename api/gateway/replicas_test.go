package gateway_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3/option"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/api/gateway"
	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

// replicas are three gateways on one PostgreSQL database, as three
// processes would run, with one fake upstream behind them.
type replicas struct {
	t         *testing.T
	urls      []string
	svc       *policy.Service // the first replica's
	fake      *fakeUpstream
	transport *countingTransport
	settled   pulse
	settles   atomic.Int64
}

// newReplicas starts the replicas, their stores opened with opts, alice
// in the tier the JSON tier describes, and the price table spendPrices in
// force.
func newReplicas(t *testing.T, tier string, opts ...db.Option) (*replicas, string) {
	dsn := dbtest.Postgres(t)
	ctx := context.Background()
	r := &replicas{t: t, fake: newFakeUpstream(t), transport: newCountingTransport(), settled: pulse{ch: make(chan struct{})}}
	base, _ := url.Parse(r.fake.srv.URL)
	clk := policy.NewTestClock(t0)
	var key string
	for i := range 3 {
		store, err := db.Open(ctx, dsn, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		svcOpts := []policy.Option{policy.WithClock(clk.Now), policy.WithUsers(store), policy.WithKeys(store), policy.WithPrices(store)}
		svc := policy.NewService(store, store, svcOpts...)
		if i == 0 {
			r.svc = svc
			var shared policy.Tier
			if err := jsonTier(tier, &shared); err != nil {
				t.Fatal(err)
			}
			// Before the other replicas open their stores, which then
			// load the prices at once.
			f, err := api.ReadPricesFile([]byte(spendPrices))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := svc.PutPrices(ctx, nil, f.Prices); err != nil {
				t.Fatal(err)
			}
			if _, _, err := svc.PutTier(ctx, shared); err != nil {
				t.Fatal(err)
			}
			if _, _, err := svc.PutUser(ctx, policy.UserRecord{UserID: "alice", Tier: "shared"}); err != nil {
				t.Fatal(err)
			}
			if _, key, err = svc.CreateKey(ctx, "alice", false, ""); err != nil {
				t.Fatal(err)
			}
		}
		cfg := &gateway.Config{
			Upstreams: []gateway.Upstream{
				{Name: "openai", Protocol: gateway.ProtocolOpenAI, BaseURL: base.JoinPath("/v1"), Key: openAIUpstreamKey},
				{Name: "claude", Protocol: gateway.ProtocolAnthropic, BaseURL: base, Key: anthropicUpstreamKey},
			},
			Transport: r.transport, Drain: 200 * time.Millisecond,
		}
		gateway.SetHooks(cfg, nil, nil, func() { r.settles.Add(1); r.settled.fire() })
		// 64 clients of one user queue on its lock across the replicas:
		// on a loaded machine a settle may wait past the default 5 s,
		// and fail, leaving its call to expire; not what these tests are
		// about.
		gateway.SetSettleTimeout(cfg, time.Minute)
		srv := api.NewServer(api.Config{Service: svc, Logger: slog.New(slog.DiscardHandler), Gateway: cfg})
		hs := httptest.NewServer(srv)
		t.Cleanup(hs.Close)
		r.urls = append(r.urls, hs.URL)
	}
	t.Cleanup(func() { r.fake.Close() })
	return r, key
}

// jsonTier reads a tier as PUT /v1/tiers takes it.
func jsonTier(body string, t *policy.Tier) error {
	tiers, err := api.ReadTiersFile(strings.NewReader(`{"tiers":[` + strings.Replace(body, "{", `{"name":"shared",`, 1) + `]}`))
	if err != nil {
		return err
	}
	*t = tiers[0]
	return nil
}

// On PostgreSQL three replicas enforce one user's max_concurrent in
// total, not each its own, across streams that finish and clients that
// leave, and free every slot.
func TestGatewayReplicasShareMaxConcurrent(t *testing.T) {
	r, key := newReplicas(t, gwTier)
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := &gwEnv{env: &env{t: t}}
			base := r.urls[i%len(r.urls)]
			for range 100 {
				freed := r.settled.wait()
				ctx, cancel := context.WithCancel(context.Background())
				var status int
				if i%2 == 0 {
					an := e.anthropicAt(base+"/llm/claude", key)
					s := an.Messages.NewStreaming(ctx, claudeMessage("claude-sonnet-4-5"), anthropicoption.WithHeader("X-Fake", "slow"))
					for s.Next() {
					}
					status = max(statusOf(s.Err()), 200)
				} else {
					oa := e.openAIAt(base+"/llm/openai", key)
					s := oa.Chat.Completions.NewStreaming(ctx, chat("gpt-4o-mini"), option.WithHeader("X-Fake", "hang-stream"))
					status = 200
					if !s.Next() {
						status = max(statusOf(s.Err()), 200)
					}
				}
				cancel()
				if status != http.StatusTooManyRequests {
					admitted.Add(1)
					return
				}
				select {
				case <-freed:
				case <-time.After(10 * time.Second):
					t.Error("no slot freed within 10s")
					return
				}
			}
		}()
	}
	wg.Wait()
	for deadline := time.Now().Add(10 * time.Second); r.settles.Load() < admitted.Load(); {
		select { // the clients that left return before their exchanges end
		case <-r.settled.wait():
		case <-time.After(time.Until(deadline)):
			t.Fatalf("%d of %d exchanges settled", r.settles.Load(), admitted.Load())
		}
	}
	if live, peak := r.transport.counts(); live != 0 || peak != 2 {
		t.Errorf("exchanges with the upstream: %d live at the end, at most %d at once over three replicas; want 0 and 2", live, peak)
	}
	u, err := r.svc.UsageReport(context.Background(), "alice", "")
	if err != nil || u.CallsInFlight != 0 {
		t.Errorf("calls in flight at the end: %d (%v), want 0", u.CallsInFlight, err)
	}
}

// On PostgreSQL three replicas enforce one user's token budget exactly:
// calls whose usage is their reservation, five of which fill the day's
// budget, sent fifteen at once over three replicas, admit exactly five.
func TestGatewayReplicasShareTheTokenBudget(t *testing.T) {
	reservation := int64(len(messageBody)) + 100
	r, key := newReplicas(t, fmt.Sprintf(`{"requests_per_minute":1000,"requests_per_hour":10000,"requests_per_day":100000,"burst_allowance":0,"tokens_per_day":%d}`, 5*reservation))
	var wg sync.WaitGroup
	var ok, refused atomic.Int64
	for i := range 15 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, r.urls[i%len(r.urls)]+"/llm/claude/v1/messages", strings.NewReader(messageBody))
			req.Header.Set("X-Api-Key", key)
			req.Header.Set("X-Fake", "usage-is-reservation")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			switch res.StatusCode {
			case 200:
				ok.Add(1)
			case 429:
				refused.Add(1)
			default:
				t.Errorf("status %d", res.StatusCode)
			}
		}()
	}
	wg.Wait()
	u, err := r.svc.UsageReport(context.Background(), "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	if ok.Load() != 5 || refused.Load() != 10 || u.Windows[policy.Day].Tokens.Used != 5*reservation || u.CallsInFlight != 0 {
		t.Errorf("%d admitted, %d refused, %d tokens used, %d in flight; want 5, 10, the budget %d and none",
			ok.Load(), refused.Load(), u.Windows[policy.Day].Tokens.Used, u.CallsInFlight, 5*reservation)
	}
}
