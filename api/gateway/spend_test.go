package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"net/http"
	"os"
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
	"github.com/policyguard/policyguard/policy"
)

// spendPrices are the prices of the spend tests, dollars per million
// tokens: whole micro-dollars per token, so that the expected costs below
// are sums of integers.
const spendPrices = `{"prices":[
	{"model":"gpt-4o-mini","input":"1","output":"2","cache_read":"0.5","cache_write":"1.25"},
	{"model":"claude-sonnet-4-5","input":"3","output":"15","cache_read":"0.3","cache_write":"3.75"}]}`

// microDollars is n millionths of a dollar, to the picodollar.
func microDollars(n float64) policy.Money { return policy.Money(math.Round(n * 1e6)) }

// putPrices makes body (PUT /v1/prices) the price table in force.
func (e *gwEnv) putPrices(body string) {
	e.t.Helper()
	if rec := e.do(http.MethodPut, "/v1/prices", body, true); rec.Code != http.StatusOK && rec.Code != http.StatusCreated {
		e.t.Fatalf("put prices: %d %s", rec.Code, rec.Body)
	}
}

// setSpendPerDay sets the cost_per_day of the named tier through GET and
// PUT /v1/tiers/{name}, as an admin would: dollars, a decimal string.
func (e *gwEnv) setSpendPerDay(tier string, limit policy.Money) {
	e.t.Helper()
	rec := e.do(http.MethodGet, "/v1/tiers/"+tier, "", true)
	if rec.Code != http.StatusOK {
		e.t.Fatalf("GET tier %s: %d %s", tier, rec.Code, rec.Body)
	}
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		e.t.Fatal(err)
	}
	delete(body, "updated_at")
	body["cost_per_day"] = limit.String()
	b, err := json.Marshal(body)
	if err != nil {
		e.t.Fatal(err)
	}
	e.putTier(tier, string(b))
}

// spent returns user's spend counted today, its calls settled and open.
func spent(t *testing.T, svc *policy.Service, user string) policy.Money {
	t.Helper()
	u, err := svc.UsageReport(context.Background(), user, "")
	if err != nil {
		t.Fatal(err)
	}
	if u.Windows[policy.Day].Cost == nil {
		t.Fatal("the usage report counts no spend")
	}
	return policy.Money(u.Windows[policy.Day].Cost.Used)
}

// spendTier limits requests loosely and spend per day.
const spendTier = `{"requests_per_minute":1000,"requests_per_hour":10000,"requests_per_day":100000,"burst_allowance":0,"max_concurrent":64}`

// With the official SDKs as clients, a spend-limited tier admits calls
// while the day's spend plus the call's reservation fits, to the
// picodollar; the next is refused at once, not retried, with the
// protocol's answer to an exhausted quota. Each call costs the price of
// the usage the upstream reported, exactly.
func TestGatewaySpendLimitWithSDKs(t *testing.T) {
	e, _ := newGatewayEnv(t, nil)
	e.putPrices(spendPrices)
	ctx := context.Background()
	for _, tc := range []struct {
		protocol string
		// call makes one call through a client counting its attempts.
		call func(key string, a *attempts) error
		// cost is what the usage the fake reports costs; reserveAt is
		// the reserved cost of a call whose body is bodyLen bytes.
		cost      policy.Money
		reserveAt func(bodyLen int64) policy.Money
		// check fails t unless err is the protocol's spend refusal.
		check func(t *testing.T, err error)
	}{
		{
			protocol: gateway.ProtocolOpenAI,
			call: func(key string, a *attempts) error {
				params := chat("gpt-4o-mini")
				params.MaxCompletionTokens = openai.Int(10)
				c := e.openai(key, option.WithMaxRetries(2), option.WithMiddleware(a.middleware))
				_, err := c.Chat.Completions.New(ctx, params)
				return err
			},
			// 11 prompt tokens at $1, 7 completion tokens at $2 per
			// million.
			cost:      microDollars(11*1 + 7*2),
			reserveAt: func(n int64) policy.Money { return microDollars(float64(n)*1 + 10*2) },
			check: func(t *testing.T, err error) {
				var oe *openai.Error
				if !errors.As(err, &oe) || oe.StatusCode != http.StatusTooManyRequests || oe.Type != "insufficient_quota" || oe.Code != "insufficient_quota" ||
					oe.Message != "per-day spend limit exceeded" || !strings.Contains(oe.RawJSON(), `"param":null`) {
					t.Errorf("%v (%s), want OpenAI's 429 insufficient_quota", err, rawError(err))
				}
			},
		},
		{
			protocol: gateway.ProtocolAnthropic,
			call: func(key string, a *attempts) error {
				c := e.anthropic(key, anthropicoption.WithMaxRetries(2), anthropicoption.WithMiddleware(a.middleware))
				_, err := c.Messages.New(ctx, claudeMessage("claude-sonnet-4-5"))
				return err
			},
			// 17 input tokens at $3, 9 output at $15, 3 written to the
			// cache at $3.75 and 2 read from it at $0.30 per million.
			cost:      microDollars(17*3 + 9*15 + 3*3.75 + 2*0.3),
			reserveAt: func(n int64) policy.Money { return microDollars(float64(n)*3 + 100*15) },
			check: func(t *testing.T, err error) {
				var ae *anthropic.Error
				if !errors.As(err, &ae) || ae.StatusCode != http.StatusTooManyRequests ||
					!strings.Contains(ae.RawJSON(), `"type":"rate_limit_error"`) || !strings.Contains(ae.RawJSON(), "per-day spend limit exceeded") {
					t.Errorf("%v (%s), want Anthropic's 429 rate_limit_error", err, rawError(err))
				}
			},
		},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			user, tier := "spender-"+tc.protocol, "spend-"+tc.protocol
			e.putTier(tier, spendTier)
			e.setSpendPerDay(tier, microDollars(1e9)) // $1,000
			e.assign(user, tier)
			key := e.newKey(user)
			var a attempts
			if err := tc.call(key, &a); err != nil {
				t.Fatal(err)
			}
			if got := spent(t, e.svc, user); got != tc.cost {
				t.Fatalf("the first call cost %s, want %s", got, tc.cost)
			}
			// The reservation of the next calls, whose bodies are the
			// first's: the prompt's bound, its bytes, at the input price,
			// and the output cap at the output price. Three more calls fit
			// the limit, the last to the picodollar; a fifth does not.
			reqs := e.fake.Requests()
			reserve := tc.reserveAt(int64(len(reqs[len(reqs)-1].Body)))
			e.setSpendPerDay(tier, 3*tc.cost+reserve)
			for i := 2; i <= 4; i++ {
				if err := tc.call(key, &a); err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
			}
			upstream := len(e.fake.Requests())
			a = attempts{}
			a.onFirst = func(res *http.Response) {
				for name, want := range map[string]string{"X-Should-Retry": "false", "Retry-After": "86400"} {
					if got := res.Header.Values(name); len(got) != 1 || got[0] != want {
						t.Errorf("%s: %q, want %q", name, got, want)
					}
				}
			}
			tc.check(t, tc.call(key, &a))
			if n := a.n.Load(); n != 1 {
				t.Errorf("the SDK sent %d requests, want 1: no retry", n)
			}
			if got := len(e.fake.Requests()); got != upstream {
				t.Errorf("the refused call reached the upstream")
			}
			if got := spent(t, e.svc, user); got != 4*tc.cost {
				t.Errorf("spent %s, want 4 calls of %s", got, tc.cost)
			}
			e.wantMetric(fmt.Sprintf(`policyguard_gateway_requests_total{outcome="rate_limited",tier=%q,upstream=%q} 1`, tier, map[string]string{"openai": "openai", "anthropic": "claude"}[tc.protocol]))
		})
	}
}

// A model the price table does not price is refused under a spend limit,
// 403 in the protocol's shape naming it, never counted as free; without a
// spend limit it passes and costs nothing. Requests that call no model
// (passthrough) pass under a spend limit.
func TestGatewayUnpricedModel(t *testing.T) {
	e, key := newGatewayEnv(t, func(c *gateway.Config) { c.Passthrough = []string{"/files"} })
	e.putPrices(spendPrices)
	ctx := context.Background()
	oa, an := e.openai(key), e.anthropic(key)

	// alice's tier limits no spend: an unpriced model passes, at no cost.
	if _, err := oa.Chat.Completions.New(ctx, chat("gpt-unpriced")); err != nil {
		t.Fatal(err)
	}
	if tokens, _, _ := e.usage("alice"); tokens != chatTokens || spent(t, e.svc, "alice") != 0 {
		t.Errorf("unpriced without a spend limit: %d tokens, %s spent; want %d and 0", tokens, spent(t, e.svc, "alice"), chatTokens)
	}

	e.putTier("spend", spendTier)
	e.setSpendPerDay("spend", microDollars(1e6))
	e.assign("alice", "spend")
	upstream := len(e.fake.Requests())
	_, err := oa.Chat.Completions.New(ctx, chat("gpt-unpriced"))
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != http.StatusForbidden || oe.Type != "permission_denied" || oe.Code != "model_not_priced" ||
		!strings.Contains(oe.Message, `model "gpt-unpriced" has no price`) {
		t.Fatalf("openai: %v (%s), want a 403 model_not_priced naming the model", err, rawError(err))
	}
	// The answer has the rate-limit fields of every answer to a known
	// user, from a dry run that names no model.
	if got := oe.Response.Header.Get("X-Ratelimit-Limit-Requests"); got != "1000" {
		t.Errorf("the refusal's x-ratelimit-limit-requests: %q, want 1000", got)
	}
	_, err = an.Messages.New(ctx, claudeMessage("claude-unpriced"))
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusForbidden || !strings.Contains(ae.RawJSON(), `"type":"permission_error"`) ||
		!strings.Contains(ae.RawJSON(), `model \"claude-unpriced\" has no price`) {
		t.Errorf("anthropic: %v (%s), want a 403 permission_error naming the model", err, rawError(err))
	}
	if got := len(e.fake.Requests()); got != upstream {
		t.Errorf("an unpriced call reached the upstream")
	}
	// A body without a model cannot be priced either: the client's error.
	res, body := e.raw(http.MethodPost, "/llm/openai/chat/completions", `{"messages":[]}`, map[string]string{"Authorization": "Bearer " + key})
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(body, "model is required") {
		t.Errorf("no model: %d %s, want 400 model is required", res.StatusCode, body)
	}
	// A passthrough request calls no model: it passes, and costs nothing.
	res, body = e.raw(http.MethodGet, "/llm/openai/files", "", map[string]string{"Authorization": "Bearer " + key})
	if res.StatusCode != http.StatusOK {
		t.Errorf("passthrough under a spend limit: %d %s", res.StatusCode, body)
	}
	// Priced calls pass.
	if _, err := oa.Chat.Completions.New(ctx, chat("gpt-4o-mini")); err != nil {
		t.Fatal(err)
	}
	if got, want := spent(t, e.svc, "alice"), microDollars(11*1+7*2); got != want {
		t.Errorf("spent %s, want %s", got, want)
	}
	e.wantMetric(`policyguard_gateway_requests_total{outcome="model_denied",tier="spend",upstream="openai"} 1`)
}

// Every metered route and stream settles at the price of the usage its
// upstream reported, each kind of token at its price: OpenAI's cached
// prompt tokens at the cache read price, its reasoning tokens as output.
func TestGatewaySpendSettlesByKind(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	e.putPrices(spendPrices)
	e.putTier("spend", spendTier)
	e.setSpendPerDay("spend", microDollars(1e6))
	e.assign("alice", "spend")
	bearer := map[string]string{"Authorization": "Bearer " + key}
	for _, tc := range []struct {
		name, path, body, fake string
		want                   policy.Money
	}{
		{"chat", "/llm/openai/chat/completions", `{"model":"gpt-4o-mini","messages":[]}`, "", microDollars(11*1 + 7*2)},
		{"chat stream", "/llm/openai/chat/completions", `{"model":"gpt-4o-mini","stream":true,"messages":[]}`, "", microDollars(11*1 + 7*2)},
		// 11 prompt tokens, 4 of them cached; 7 completion tokens, 3
		// of them reasoning.
		{"chat cached", "/llm/openai/chat/completions", `{"model":"gpt-4o-mini","messages":[]}`, "cached", microDollars(7*1 + 4*0.5 + 7*2)},
		{"completion stream", "/llm/openai/completions", `{"model":"gpt-4o-mini","stream":true,"prompt":"hi"}`, "", microDollars(15*1 + 8*2)},
		{"response", "/llm/openai/responses", `{"model":"gpt-4o-mini","input":"hi"}`, "", microDollars(13*1 + 8*2)},
		{"response stream", "/llm/openai/responses", `{"model":"gpt-4o-mini","stream":true,"input":"hi"}`, "", microDollars(13*1 + 8*2)},
		{"embedding", "/llm/openai/embeddings", `{"model":"gpt-4o-mini","input":"hi"}`, "", microDollars(5 * 1)},
		{"message", "/llm/claude/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[]}`, "", microDollars(17*3 + 9*15 + 3*3.75 + 2*0.3)},
		{"message stream", "/llm/claude/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":100,"stream":true,"messages":[]}`, "", microDollars(17*3 + 9*15 + 3*3.75 + 2*0.3)},
		{"error with usage", "/llm/claude/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[]}`, "fail-usage", microDollars(4 * 3)},
		// No usage: the reservation, at its reserved cost.
		{"no usage", "/llm/openai/chat/completions", `{"model":"gpt-4o-mini","max_tokens":10,"messages":[]}`, "no-usage",
			microDollars(float64(len(`{"model":"gpt-4o-mini","max_tokens":10,"messages":[]}`))*1 + 10*2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := spent(t, e.svc, "alice")
			h := map[string]string{"Authorization": bearer["Authorization"], "X-Fake": tc.fake}
			res, body := e.raw(http.MethodPost, tc.path, tc.body, h)
			if res.StatusCode >= 500 {
				t.Fatalf("%d %s", res.StatusCode, body)
			}
			if got := spent(t, e.svc, "alice") - before; got != tc.want {
				t.Errorf("the call cost %s, want %s", got, tc.want)
			}
		})
	}
}

// A price file as LiteLLM publishes it (the excerpt in api/testdata)
// imports, and a call through the gateway costs what the file says: the
// expected cost is worked out here from the file's per-token prices, as
// exact decimals.
func TestGatewayPricedByLiteLLMFile(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	data, err := os.ReadFile("../testdata/litellm_model_prices.json")
	if err != nil {
		t.Fatal(err)
	}
	f, err := api.ReadPricesFile(data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.PutPrices(context.Background(), nil, f.Prices); err != nil {
		t.Fatal(err)
	}
	var file map[string]map[string]json.RawMessage
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	// perToken returns the file's price of field for model, in dollars.
	perToken := func(model, field string) *big.Rat {
		raw, ok := file[model][field]
		if !ok {
			t.Fatalf("%s has no %s", model, field)
		}
		r, ok := new(big.Rat).SetString(string(raw))
		if !ok {
			t.Fatalf("%s %s: %s is not a number", model, field, raw)
		}
		return r
	}
	dollars := func(parts ...any) *big.Rat { // count, price, count, price, ...
		sum := new(big.Rat)
		for i := 0; i < len(parts); i += 2 {
			sum.Add(sum, new(big.Rat).Mul(big.NewRat(int64(parts[i].(int)), 1), parts[i+1].(*big.Rat)))
		}
		return sum
	}
	e.putTier("spend", spendTier)
	e.setSpendPerDay("spend", microDollars(1e6))
	e.assign("alice", "spend")
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		call func() error
		want *big.Rat
	}{
		{"anthropic", func() error {
			c := e.anthropic(key)
			_, err := c.Messages.New(ctx, claudeMessage("claude-3-haiku-20240307"))
			return err
		}, dollars(
			17, perToken("claude-3-haiku-20240307", "input_cost_per_token"),
			9, perToken("claude-3-haiku-20240307", "output_cost_per_token"),
			3, perToken("claude-3-haiku-20240307", "cache_creation_input_token_cost"),
			2, perToken("claude-3-haiku-20240307", "cache_read_input_token_cost"))},
		{"openai cached", func() error {
			c := e.openai(key)
			_, err := c.Chat.Completions.New(ctx, chat("claude-haiku-4-5"), option.WithHeader("X-Fake", "cached"))
			return err
		}, dollars(
			11-4, perToken("claude-haiku-4-5", "input_cost_per_token"),
			4, perToken("claude-haiku-4-5", "cache_read_input_token_cost"),
			7, perToken("claude-haiku-4-5", "output_cost_per_token"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := spent(t, e.svc, "alice")
			if err := tc.call(); err != nil {
				t.Fatal(err)
			}
			cost := spent(t, e.svc, "alice") - before
			got, _ := new(big.Rat).SetString(cost.String())
			if got.Cmp(tc.want) != 0 || cost == 0 {
				t.Errorf("the call cost $%s, want $%s as the file prices it", cost, tc.want.FloatString(12))
			}
		})
	}
}

// The bodies of the concurrent spend test: each call's usage is its
// reservation (X-Fake: usage-is-reservation), so that it costs exactly
// what it reserved. The stream of a chat asks for its usage itself, so
// the body the upstream gets is the one the gateway reserved for.
var spendRaceCalls = []struct{ path, body string }{
	{"/llm/openai/chat/completions", `{"model":"gpt-4o-mini","max_completion_tokens":50,"messages":[{"role":"user","content":"hi"}]}`},
	{"/llm/openai/chat/completions", `{"model":"gpt-4o-mini","max_completion_tokens":50,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`},
	{"/llm/claude/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`},
	{"/llm/claude/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"hi"}]}`},
}

// spendRaceLimit is the day's spend limit of the concurrent spend test:
// about 25 calls.
var spendRaceLimit = microDollars(20_000)

// spendRace sends 64 clients at once through the gateways at urls, each
// calling, streamed and not, until a spend refusal, and checks that the
// calls admitted together never spent past spendRaceLimit, and that the
// budget was used up to within one call.
func spendRace(t *testing.T, urls []string, key string, svc *policy.Service) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	var maxReserve policy.Money
	for _, c := range spendRaceCalls {
		in, out := policy.Money(len(c.body)), policy.Money(50)
		r := in*microDollars(1) + out*microDollars(2)
		if strings.Contains(c.path, "claude") {
			r = in*microDollars(3) + out*microDollars(15)
		}
		maxReserve = max(maxReserve, r)
	}
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ; j++ {
				c := spendRaceCalls[(i+j)%len(spendRaceCalls)]
				req, _ := http.NewRequest(http.MethodPost, urls[i%len(urls)]+c.path, strings.NewReader(c.body))
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("X-Fake", "usage-is-reservation")
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				switch {
				case res.StatusCode == http.StatusOK:
					mu.Lock()
					admitted++
					mu.Unlock()
				case res.StatusCode == http.StatusTooManyRequests && strings.Contains(string(body), "per-day spend limit exceeded"):
					if res.Header.Get("X-Should-Retry") != "false" {
						t.Errorf("a spend refusal without x-should-retry: false")
					}
					return
				default:
					t.Errorf("status %d: %s", res.StatusCode, body)
					return
				}
			}
		}()
	}
	wg.Wait()
	u, err := svc.UsageReport(context.Background(), "alice", "")
	if err != nil {
		t.Fatal(err)
	}
	used := policy.Money(u.Windows[policy.Day].Cost.Used)
	t.Logf("%d calls admitted, %s of %s spent", admitted, used, spendRaceLimit)
	if used > spendRaceLimit || used <= spendRaceLimit-maxReserve || u.CallsInFlight != 0 {
		t.Errorf("%d calls admitted spent %s, %d in flight; want at most the limit %s, and more than the limit less a call (%s), none in flight",
			admitted, used, u.CallsInFlight, spendRaceLimit, maxReserve)
	}
}

// 64 clients at once, streamed and not, over both protocols, never spend
// past the day's budget together.
func TestGatewaySpendBudgetUnderConcurrency(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	e.putPrices(spendPrices)
	e.putTier("spend", spendTier)
	e.setSpendPerDay("spend", spendRaceLimit)
	e.assign("alice", "spend")
	spendRace(t, []string{e.server.URL}, key, e.svc)
}

// On PostgreSQL, three replicas hold one user's spend budget together.
// The 64 admissions of one user queue on its lock: on a loaded 2-core
// machine the last of them waited past the default statement timeout
// (5 s) and was answered 503, which is not what this test is about.
func TestGatewayReplicasShareTheSpendBudget(t *testing.T) {
	tier := strings.Replace(spendTier, "{", `{"cost_per_day":"`+spendRaceLimit.String()+`",`, 1)
	r, key := newReplicas(t, tier, db.WithStatementTimeout(time.Minute), db.WithBusyTimeout(time.Minute))
	spendRace(t, r.urls, key, r.svc)
}

// A month limit's refusal is answered as a spend limit's: the protocol's
// exhausted quota, not retried, Retry-After the seconds to the period's
// end, whatever the month counts.
func TestGatewayMonthLimitIsAnExhaustedQuota(t *testing.T) {
	e, _ := newGatewayEnv(t, nil)
	ctx := context.Background()
	// The windows admit what the month does; a day apart, they are empty
	// and the month alone refuses.
	e.putTier("monthly", `{"requests_per_minute":1,"requests_per_hour":1,"requests_per_day":1,"burst_allowance":0,"requests_per_month":1}`)
	e.assign("mo", "monthly")
	key := e.newKey("mo")
	e.clock.Set(time.Date(2026, 3, 30, 12, 0, 0, 0, time.UTC))
	call := func(a *attempts) error {
		params := chat("gpt-4o-mini")
		c := e.openai(key, option.WithMaxRetries(2), option.WithMiddleware(a.middleware))
		_, err := c.Chat.Completions.New(ctx, params)
		return err
	}
	var a attempts
	if err := call(&a); err != nil {
		t.Fatal(err)
	}
	e.clock.Set(time.Date(2026, 3, 31, 13, 0, 0, 0, time.UTC)) // 11 hours to 1 April
	a = attempts{}
	a.onFirst = func(res *http.Response) {
		for name, want := range map[string]string{"X-Should-Retry": "false", "Retry-After": "39600"} {
			if got := res.Header.Values(name); len(got) != 1 || got[0] != want {
				t.Errorf("%s: %q, want %q", name, got, want)
			}
		}
	}
	err := call(&a)
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != http.StatusTooManyRequests || oe.Code != "insufficient_quota" || oe.Message != "per-month limit exceeded" {
		t.Errorf("%v (%s), want OpenAI's 429 insufficient_quota", err, rawError(err))
	}
	if n := a.n.Load(); n != 1 {
		t.Errorf("the SDK sent %d requests, want 1: no retry", n)
	}
}
