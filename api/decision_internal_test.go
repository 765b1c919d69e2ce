package api

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/go-json-experiment/json"

	"github.com/policyguard/policyguard/policy"
)

// The shape below is the reference for appendDecision: what the library
// writes for it, with the options of every other answer, is what
// appendDecision must write byte for byte.

// decisionResponse is the body of every check answer: 200, 403 and 429.
type decisionResponse struct {
	Allowed    bool            `json:"allowed"`
	Reason     *string         `json:"reason"`
	RetryAfter int64           `json:"retry_after"`
	Tier       string          `json:"tier"`
	Guardrail  string          `json:"guardrail"`
	Windows    windowsResponse `json:"windows"`
	// CallID names the call an admitted check of a metered tier opened;
	// null otherwise.
	CallID      *string              `json:"call_id"`
	Concurrency *concurrencyResponse `json:"concurrency,omitzero"`
	// Account is left out for a user in no account.
	Account *accountResponse `json:"account,omitzero"`
	// Shadow is left out when the tier has no shadow limits.
	Shadow *shadowResponse `json:"shadow,omitzero"`
	// Run is left out for a check in no run.
	Run *runUsageJSON `json:"run,omitzero"`
}

// accountResponse is the pooled state of a member's account, in the shape
// of the user's own.
type accountResponse struct {
	ID          string                 `json:"id"`
	Windows     accountWindowsResponse `json:"windows"`
	Concurrency *concurrencyResponse   `json:"concurrency,omitzero"`
}

type accountWindowsResponse struct {
	Minute accountWindowResponse `json:"minute"`
	Hour   accountWindowResponse `json:"hour"`
	Day    accountWindowResponse `json:"day"`
	Month  *monthResponse        `json:"month,omitzero"`
}

// monthResponse is the billing period a check counted: limit and
// remaining null where requests_per_month is unset.
type monthResponse struct {
	Start     time.Time       `json:"start"`
	End       time.Time       `json:"end"`
	Limit     *int64          `json:"limit"`
	Remaining *int64          `json:"remaining"`
	Reset     int64           `json:"reset"`
	Tokens    *tokensResponse `json:"tokens,omitzero"`
	Cost      *costResponse   `json:"cost,omitzero"`
}

// accountWindowResponse is one pooled window: limit and remaining null
// where the pool sets no request limit.
type accountWindowResponse struct {
	Limit     *int64          `json:"limit"`
	Remaining *int64          `json:"remaining"`
	Reset     int64           `json:"reset"`
	Tokens    *tokensResponse `json:"tokens,omitzero"`
	Cost      *costResponse   `json:"cost,omitzero"`
}

// concurrencyResponse is a user's calls in flight against max_concurrent.
type concurrencyResponse struct {
	Limit    int64 `json:"limit"`
	InFlight int64 `json:"in_flight"`
}

// tokensResponse is one window's tokens under the tier's token limit.
type tokensResponse struct {
	Limit     int64 `json:"limit"`
	Used      int64 `json:"used"`
	Remaining int64 `json:"remaining"`
	Reset     int64 `json:"reset"`
}

// costResponse is one window's spend under a spend limit, in decimal
// dollars.
type costResponse struct {
	Limit     string `json:"limit"`
	Used      string `json:"used"`
	Remaining string `json:"remaining"`
	Reset     int64  `json:"reset"`
}

// shadowResponse is how a tier's shadow limits decided a check.
type shadowResponse struct {
	Allowed bool    `json:"allowed"`
	Reason  *string `json:"reason"`
}

type windowsResponse struct {
	Minute windowResponse `json:"minute"`
	Hour   windowResponse `json:"hour"`
	Day    windowResponse `json:"day"`
	// Month is set when the tier limits months.
	Month *monthResponse `json:"month,omitzero"`
}

type windowResponse struct {
	Limit     int64 `json:"limit"`
	Remaining int64 `json:"remaining"`
	Reset     int64 `json:"reset"`
	// Tokens is set for a window whose tokens the tier limits.
	Tokens *tokensResponse `json:"tokens,omitzero"`
	// Cost is set for a window whose spend the tier limits.
	Cost *costResponse `json:"cost,omitzero"`
}

// decisionBody returns the body of a check answer for d.
func decisionBody(d *policy.Decision) decisionResponse {
	res := decisionResponse{
		Allowed:    d.Allowed(),
		RetryAfter: d.RetryAfter,
		Tier:       d.Tier,
		Guardrail:  d.Guardrail,
	}
	if d.Reason != "" {
		res.Reason = &d.Reason
	}
	if d.CallID != "" {
		res.CallID = &d.CallID
	}
	if c := d.Concurrency; c != nil {
		res.Concurrency = &concurrencyResponse{Limit: c.Limit, InFlight: c.InFlight}
	}
	if w := d.Windows; w != nil {
		res.Windows = windowsResponse{
			Minute: windowOf(w[policy.Minute]),
			Hour:   windowOf(w[policy.Hour]),
			Day:    windowOf(w[policy.Day]),
		}
	}
	res.Windows.Month = monthOf(d.Month)
	if a := d.Account; a != nil {
		res.Account = &accountResponse{ID: a.ID}
		window := func(w policy.Window) accountWindowResponse {
			ws := a.Windows[w]
			own := windowOf(ws)
			r := accountWindowResponse{Reset: ws.Reset, Tokens: own.Tokens, Cost: own.Cost}
			if a.Limited(w) {
				r.Limit, r.Remaining = &ws.Limit, &ws.Remaining
			}
			return r
		}
		res.Account.Windows = accountWindowsResponse{Minute: window(policy.Minute), Hour: window(policy.Hour), Day: window(policy.Day),
			Month: monthOf(a.Month)}
		if c := a.Concurrency; c != nil {
			res.Account.Concurrency = &concurrencyResponse{Limit: c.Limit, InFlight: c.InFlight}
		}
	}
	if sd := d.Shadow; sd != nil {
		res.Shadow = &shadowResponse{Allowed: sd.Allowed}
		if r := sd.Reason(); r != "" {
			res.Shadow.Reason = &r
		}
	}
	res.Run = runUsageToJSON(d.Run)
	return res
}

func monthOf(m *policy.MonthState) *monthResponse {
	if m == nil {
		return nil
	}
	w := windowOf(m.WindowState)
	r := &monthResponse{Start: m.Start, End: m.End, Reset: m.Reset, Tokens: w.Tokens, Cost: w.Cost}
	if m.Limited {
		r.Limit, r.Remaining = &m.Limit, &m.Remaining
	}
	return r
}

func windowOf(w policy.WindowState) windowResponse {
	r := windowResponse{Limit: w.Limit, Remaining: w.Remaining, Reset: w.Reset}
	if t := w.Tokens; t != nil && t.Limited {
		r.Tokens = &tokensResponse{Limit: t.Limit, Used: t.Used, Remaining: t.Remaining, Reset: t.Reset}
	}
	if t := w.Cost; t != nil && t.Limited {
		r.Cost = &costResponse{Limit: policy.Money(t.Limit).String(), Used: policy.Money(t.Used).String(),
			Remaining: policy.Money(t.Remaining).String(), Reset: t.Reset}
	}
	return r
}

// decisionSamples are decisions of every kind a check answers, with
// strings that need escaping where a client's string can reach the answer.
func decisionSamples() []policy.Decision {
	windows := func(tokens bool) *[len(policy.Windows)]policy.WindowState {
		var ws [len(policy.Windows)]policy.WindowState
		for i := range ws {
			ws[i] = policy.WindowState{Count: int64(i + 3), Limit: 2147483647, Remaining: int64(i), Reset: int64(60 * (i + 1))}
			if tokens && i != 1 { // the hour's tokens unlimited
				ws[i].Tokens = &policy.TokenState{Limited: true, Limit: 1000, Used: 250, Remaining: 750, Reset: int64(i)}
			}
			if tokens && i != 0 { // $20, $1.25 spent; the minute's spend unlimited
				ws[i].Cost = &policy.TokenState{Limited: true, Limit: 20e12, Used: 1.25e12, Remaining: 18.75e12, Reset: int64(7 * i)}
			}
		}
		ws[1].Tokens = &policy.TokenState{} // set but not limited: left out
		ws[0].Cost = &policy.TokenState{Used: 5}
		return &ws
	}
	return []policy.Decision{
		{Outcome: policy.Admitted, Tier: "pro", Guardrail: "rate_limiter", Windows: windows(false)},
		{Outcome: policy.RateLimited, Reason: "per-minute limit exceeded", RetryAfter: 17, Tier: "free", Guardrail: "rate_limiter", Windows: windows(false)},
		{Outcome: policy.Denied, Reason: "feature not included in tier", Tier: "free", Guardrail: "feature_gate"},
		{Outcome: policy.Admitted, Tier: "metered", Guardrail: "rate_limiter", Windows: windows(true),
			CallID: "-P7i3qS5RDTYd1wGHcqx78", Concurrency: &policy.ConcurrencyState{Limit: 5, InFlight: 2}},
		{Outcome: policy.RateLimited, Reason: "concurrent call limit exceeded", RetryAfter: 1, Tier: "metered", Guardrail: "rate_limiter",
			Windows: windows(true), Concurrency: &policy.ConcurrencyState{Limit: 5, InFlight: 5}},
		{Outcome: policy.Admitted, Tier: "canary", Guardrail: "rate_limiter", Windows: windows(false),
			Shadow: &policy.ShadowDecision{Allowed: true}},
		{Outcome: policy.Admitted, Tier: "canary", Guardrail: "rate_limiter", Windows: windows(false),
			Shadow: &policy.ShadowDecision{Blocked: policy.Hour}},
		{Outcome: policy.Denied, Reason: "unknown tier", Tier: "q\"uote\\ <b>&amp; \u2028\x00\x1f\xff\xfe tab\t é 🙂", Guardrail: "tier"},
		{Outcome: policy.Admitted, Tier: "", Guardrail: "", Windows: &[len(policy.Windows)]policy.WindowState{{Limit: -1, Remaining: -9223372036854775808, Reset: 9223372036854775807}}},
		// Members of accounts: the pool limiting some windows' requests,
		// some tokens, and calls; or nothing at all.
		{Outcome: policy.Admitted, Tier: "team", Guardrail: "rate_limiter", Windows: windows(true), CallID: "0OmdGH_-Tk8Mdi6tqUt48L",
			Concurrency: &policy.ConcurrencyState{Limit: 5, InFlight: 2}, Account: pooled("acme", true)},
		{Outcome: policy.RateLimited, Reason: "account per-minute limit exceeded", RetryAfter: 41, Tier: "team", Guardrail: "rate_limiter",
			Windows: windows(false), Account: pooled("q\"uote\\ <b>&amp; \u2028\x00\x1f\xff\xfe tab\t é 🙂", false),
			Shadow: &policy.ShadowDecision{Blocked: policy.Minute}},
		{Outcome: policy.Denied, Reason: "feature not included in tier", Tier: "team", Guardrail: "feature_gate", Windows: windows(false),
			Account: &policy.AccountState{ID: "none", Windows: *windows(false)}},
		// Months: the user's in São Paulo, limited in requests and
		// spend, refused; the pool's in UTC+5:45, limited in tokens only.
		{Outcome: policy.RateLimited, Reason: "per-month limit exceeded", RetryAfter: 86400, Tier: "monthly", Guardrail: "rate_limiter",
			Windows: windows(false), Month: month("America/Sao_Paulo", true), Account: func() *policy.AccountState {
				a := pooled("acme", true)
				a.Month = month("Asia/Kathmandu", false)
				return a
			}()},
		// Checks in runs: a sub-agent's admitted step, and a refusal by
		// a used-up ancestor of a tier without a run object.
		{Outcome: policy.Admitted, Tier: "agents", Guardrail: "rate_limiter", Windows: windows(true), CallID: "0OmdGH_-Tk8Mdi6tqUt48M",
			Run: &policy.RunUsage{Run: policy.Run{ID: "r-42-search", Parent: "r-42", State: policy.RunOpen, Requests: 3, Tokens: 1200, Cost: 5_000_000, CallsInFlight: 1},
				Limits: &policy.LimitSet{policy.MaxRunRequests: new(int64(50)), policy.MaxRunCost: new(int64(2_500_000_000_000))}}},
		{Outcome: policy.Denied, Reason: `run "r-42" step limit exceeded`, Tier: "agents", Guardrail: "rate_limiter", Windows: windows(false),
			Run: &policy.RunUsage{Run: policy.Run{ID: "q\"uote\\ \u2028\xff", State: policy.RunExhausted, Requests: 50}}, RunRefused: policy.CauseRequests},
	}
}

// month is a billing period's state in the time zone zone: with requests,
// its requests and spend limited, else its tokens alone.
func month(zone string, requests bool) *policy.MonthState {
	loc, err := policy.LoadTimeZone(zone)
	if err != nil {
		panic(err)
	}
	start, end := policy.BillingPeriod(time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC), loc, 31)
	m := &policy.MonthState{Start: start, End: end, WindowState: policy.WindowState{Count: 1000, Reset: 86400}}
	if requests {
		m.Limited, m.Limit, m.Remaining = true, 1000, 0
		m.Cost = &policy.TokenState{Limited: true, Limit: 20e12, Used: 3.5e12, Remaining: 16.5e12, Reset: 86400}
	} else {
		m.Tokens = &policy.TokenState{Limited: true, Limit: 2000000, Used: 12, Remaining: 1999988, Reset: 86400}
	}
	return m
}

// pooled is the state of the account id after a check: its minute and day
// limited, its hour not; with metered, day tokens and calls limited too.
func pooled(id string, metered bool) *policy.AccountState {
	n := func(v int64) *int64 { return &v }
	values := map[string]*int64{"requests_per_minute": n(600), "requests_per_day": n(100000)}
	if metered {
		values["tokens_per_day"], values["max_concurrent"] = n(2000000), n(10)
	}
	limits, err := policy.PoolLimitsOf(values)
	if err != nil {
		panic(err)
	}
	a := &policy.AccountState{ID: id, Limits: limits}
	a.Windows[policy.Minute] = policy.WindowState{Count: 5, Limit: 600, Remaining: 595, Reset: 59}
	a.Windows[policy.Hour] = policy.WindowState{Count: 7, Limit: 1 << 50, Remaining: 1<<50 - 7, Reset: 3599}
	a.Windows[policy.Day] = policy.WindowState{Count: 9, Limit: 100000, Remaining: 99991, Reset: 86399}
	if metered {
		a.Windows[policy.Day].Tokens = &policy.TokenState{Limited: true, Limit: 2000000, Used: 1200, Remaining: 1998800, Reset: 17}
		a.Windows[policy.Minute].Tokens = &policy.TokenState{Used: 1200} // counted but not limited: left out
		a.Windows[policy.Hour].Cost = &policy.TokenState{Limited: true, Limit: 100e12, Used: 150_000, Remaining: 100e12 - 150_000, Reset: 3}
		a.Concurrency = &policy.ConcurrencyState{Limit: 10, InFlight: 3}
	}
	return a
}

func TestAppendDecisionMatchesTheLibrary(t *testing.T) {
	for i, d := range decisionSamples() {
		var want bytes.Buffer
		if err := json.MarshalWrite(&want, decisionBody(&d), answerOptions); err != nil {
			t.Fatal(err)
		}
		want.WriteByte('\n')
		if got := appendDecision(nil, &d); !bytes.Equal(got, want.Bytes()) {
			t.Errorf("decision %d:\n got %s\nwant %s", i, got, want.Bytes())
		}
	}
}

// FuzzAppendDecision gives the strings of an answer any bytes, the id of
// a member's account among them.
func FuzzAppendDecision(f *testing.F) {
	f.Add("free", "rate_limiter", "per-minute limit exceeded", "abc", "acme")
	f.Add("\xff<\u2028>", "", "", "", "\x00\\\"")
	f.Fuzz(func(t *testing.T, tier, guardrail, reason, callID, accountID string) {
		d := decisionSamples()[12] // a member's, metered, with months
		d.Tier, d.Guardrail, d.Reason, d.CallID = tier, guardrail, reason, callID
		a := *d.Account
		a.ID = accountID
		d.Account = &a
		// In a run named as the account is, whose parent is the call.
		r := *decisionSamples()[13].Run // the sub-agent's admitted step
		r.ID, r.Parent = accountID, callID
		d.Run = &r
		var want bytes.Buffer
		if err := json.MarshalWrite(&want, decisionBody(&d), answerOptions); err != nil {
			t.Fatal(err)
		}
		want.WriteByte('\n')
		if got := appendDecision(nil, &d); !bytes.Equal(got, want.Bytes()) {
			t.Errorf("\n got %s\nwant %s", got, want.Bytes())
		}
	})
}

// BenchmarkDecisionBody writes the answer of an unmetered check and of a
// metered one, the largest, with the library over the reference shape and
// with appendDecision.
func BenchmarkDecisionBody(b *testing.B) {
	for _, tc := range []struct {
		name string
		d    policy.Decision
	}{{"unmetered", decisionSamples()[0]}, {"metered", decisionSamples()[3]}, {"member", decisionSamples()[9]}} {
		b.Run(tc.name+"/library", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := json.MarshalWrite(io.Discard, decisionBody(&tc.d), answerOptions); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/append", func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 512)
			for b.Loop() {
				buf = appendDecision(buf[:0], &tc.d)
			}
		})
	}
}
