package gateway_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/api/gateway"
	"github.com/policyguard/policyguard/api/internal/fakeupstream"
	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

// BenchmarkGatewayChat measures non-streamed chat completions from 64
// goroutines over loopback, through the gateway (a metered tier on a
// SQLite store with synchronous=FULL: each call a check that opens a call
// and a finish that settles it) and, beside it, through
// httputil.ReverseProxy with nothing in it, both to one fast upstream
// that answers at once. 200 users take turns, each with its own key; in
// gateway-run each user's calls are steps of a run of its own
// (X-Guard-Run), under a run budget they never reach.
func BenchmarkGatewayChat(b *testing.B) {
	fake := fakeupstream.New()
	fake.Record = false // a fast upstream: it keeps nothing
	upstream := httptest.NewServer(fake)
	b.Cleanup(upstream.Close)
	base, _ := url.Parse(upstream.URL + "/v1")
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Summarize the attached report in three sentences."}],"max_completion_tokens":200}`

	gatewayIn := func(b *testing.B, run *policy.LimitSet) (http.Handler, string, []string) {
		store, err := db.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { store.Close() })
		svc := policy.NewService(store, store, []policy.Option{policy.WithStats(store, store), policy.WithUsers(store), policy.WithKeys(store)}...)
		tokens := int64(policy.MaxLimit)
		if _, _, err := svc.PutTier(context.Background(), policy.Tier{Name: "bench", Run: run, Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(100000)), policy.RequestsPerHour: new(int64(1000000)), policy.RequestsPerDay: new(int64(10000000)), policy.TokensPerDay: &tokens}}); err != nil {
			b.Fatal(err)
		}
		keys := make([]string, 200)
		for i := range keys {
			user := fmt.Sprintf("user-%03d", i)
			if _, _, err := svc.PutUser(context.Background(), policy.UserRecord{UserID: user, Tier: "bench"}); err != nil {
				b.Fatal(err)
			}
			if _, keys[i], err = svc.CreateKey(context.Background(), user, false, ""); err != nil {
				b.Fatal(err)
			}
		}
		srv := api.NewServer(api.Config{Service: svc, Logger: slog.New(slog.DiscardHandler),
			Gateway: &gateway.Config{Upstreams: []gateway.Upstream{{Name: "openai", Protocol: gateway.ProtocolOpenAI, BaseURL: base, Key: "sk-bench"}}}})
		return srv, "/llm/openai/chat/completions", keys
	}
	for _, tc := range []struct {
		name  string
		setup func(b *testing.B) (http.Handler, string, []string)
		// run sends each user's calls in a run of its own.
		run bool
	}{
		{"proxy", func(*testing.B) (http.Handler, string, []string) {
			p := httputil.NewSingleHostReverseProxy(base)
			p.Transport = &http.Transport{MaxIdleConnsPerHost: 256}
			return p, "/chat/completions", []string{"none"}
		}, false},
		{"gateway", func(b *testing.B) (http.Handler, string, []string) { return gatewayIn(b, nil) }, false},
		{"gateway-run", func(b *testing.B) (http.Handler, string, []string) {
			return gatewayIn(b, &policy.LimitSet{policy.MaxRunRequests: new(int64(policy.MaxLimit)), policy.MaxRunTokens: new(int64(policy.MaxLimit))})
		}, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h, path, keys := tc.setup(b)
			srv := httptest.NewServer(h)
			defer srv.Close()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
			var next atomic.Int64
			b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					k := next.Add(1) % int64(len(keys))
					req.Header.Set("Authorization", "Bearer "+keys[k])
					if tc.run {
						req.Header.Set("X-Guard-Run", fmt.Sprintf("run-%03d", k))
					}
					res, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode != http.StatusOK {
						b.Errorf("status %d", res.StatusCode)
						return
					}
				}
			})
		})
	}
}
