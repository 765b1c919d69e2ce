package api_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
)

// rateLimitHeaders are the fields every check answer carries, in the
// spelling of the drafts and of common clients.
var rateLimitHeaders = []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}

// wantHeaders is the expected value of each rate-limit field.
type wantHeaders struct {
	policy, limit              string
	xLimit, xRemaining, xReset string
}

func checkHeaders(t *testing.T, rec *httptest.ResponseRecorder, want wantHeaders) {
	t.Helper()
	for _, h := range []struct{ name, want string }{
		{"RateLimit-Policy", want.policy},
		{"RateLimit", want.limit},
		{"X-RateLimit-Limit", want.xLimit},
		{"X-RateLimit-Remaining", want.xRemaining},
		{"X-RateLimit-Reset", want.xReset},
	} {
		if got := rec.Header().Values(h.name); len(got) != 1 || got[0] != h.want {
			t.Errorf("%s = %q, want %q", h.name, got, h.want)
		}
	}
}

const freePolicy = `"minute";q=15;w=60, "hour";q=100;w=3600, "day";q=1000;w=86400`

func TestRateLimitHeaders(t *testing.T) {
	e := newEnv(t)
	// minute 2, hour 2: the two windows tie on remaining after one request.
	e.putTier("tie", `{"requests_per_minute":2,"requests_per_hour":2,"requests_per_day":5,"burst_allowance":0}`)
	// hour 3 is tighter than the minute's 3 and its burst of 7.
	e.putTier("hourly", `{"requests_per_minute":3,"requests_per_hour":3,"requests_per_day":100,"burst_allowance":7}`)

	for _, step := range []struct {
		name    string
		advance time.Duration
		body    string
		status  int
		want    wantHeaders
	}{
		{
			name:   "first admitted request: every window holds one, each frees in its whole length",
			body:   `{"context":{"user_id":"h1"}}`,
			status: 200,
			want: wantHeaders{
				policy:     freePolicy,
				limit:      `"minute";r=14;t=60, "hour";r=99;t=3600, "day";r=999;t=86400`,
				xLimit:     "15",
				xRemaining: "14",
				xReset:     "60",
			},
		},
		{
			name:    "twenty seconds later: the oldest request leaves each window twenty seconds sooner",
			advance: 20 * time.Second,
			body:    `{"context":{"user_id":"h1"}}`,
			status:  200,
			want: wantHeaders{
				policy:     freePolicy,
				limit:      `"minute";r=13;t=40, "hour";r=98;t=3580, "day";r=998;t=86380`,
				xLimit:     "15",
				xRemaining: "13",
				xReset:     "40",
			},
		},
		{
			name:   "out of plan: nothing consumed, an empty window keeps its quota for its whole length",
			body:   `{"context":{"user_id":"h2","feature":"search"}}`,
			status: 403,
			want: wantHeaders{
				policy:     freePolicy,
				limit:      `"minute";r=15;t=60, "hour";r=100;t=3600, "day";r=1000;t=86400`,
				xLimit:     "15",
				xRemaining: "15",
				xReset:     "60",
			},
		},
		{
			name:   "tie on remaining: the shorter window is the tightest",
			body:   `{"context":{"user_id":"h3","user_tier":"tie"}}`,
			status: 200,
			want: wantHeaders{
				policy:     `"minute";q=2;w=60, "hour";q=2;w=3600, "day";q=5;w=86400`,
				limit:      `"minute";r=1;t=60, "hour";r=1;t=3600, "day";r=4;t=86400`,
				xLimit:     "2",
				xRemaining: "1",
				xReset:     "60",
			},
		},
		{
			name:   "fewer remaining in the hour than in the minute: the hour is the tightest",
			body:   `{"context":{"user_id":"h4","user_tier":"hourly"}}`,
			status: 200,
			want: wantHeaders{
				policy:     `"minute";q=10;w=60, "hour";q=3;w=3600, "day";q=100;w=86400`,
				limit:      `"minute";r=9;t=60, "hour";r=2;t=3600, "day";r=99;t=86400`,
				xLimit:     "3",
				xRemaining: "2",
				xReset:     "3600",
			},
		},
		{
			name:    "second request on the tie tier, ten seconds later: of windows with none remaining, the one that frees last",
			advance: 10 * time.Second,
			body:    `{"context":{"user_id":"h3","user_tier":"tie"}}`,
			status:  200,
			want: wantHeaders{
				policy:     `"minute";q=2;w=60, "hour";q=2;w=3600, "day";q=5;w=86400`,
				limit:      `"minute";r=0;t=50, "hour";r=0;t=3590, "day";r=3;t=86390`,
				xLimit:     "2",
				xRemaining: "0",
				xReset:     "3590",
			},
		},
		{
			name:   "rate limited by the minute and the hour: the same fields, nothing consumed, and the reset is Retry-After, the hour's",
			body:   `{"context":{"user_id":"h3","user_tier":"tie"}}`,
			status: 429,
			want: wantHeaders{
				policy:     `"minute";q=2;w=60, "hour";q=2;w=3600, "day";q=5;w=86400`,
				limit:      `"minute";r=0;t=50, "hour";r=0;t=3590, "day";r=3;t=86390`,
				xLimit:     "2",
				xRemaining: "0",
				xReset:     "3590",
			},
		},
	} {
		t.Run(step.name, func(t *testing.T) {
			e.clock.Advance(step.advance)
			// A dry run at the same instant answers what the check will,
			// fields included.
			dry := e.do(http.MethodPost, "/v1/check?dry_run=true", step.body, false)
			if dry.Code != step.status {
				t.Fatalf("dry run: %d %s, want %d", dry.Code, dry.Body, step.status)
			}
			checkHeaders(t, dry, step.want)
			rec := e.do(http.MethodPost, "/v1/check", step.body, false)
			if rec.Code != step.status {
				t.Fatalf("check: %d %s, want %d", rec.Code, rec.Body, step.status)
			}
			checkHeaders(t, rec, step.want)
			if step.status == 429 {
				if got, want := rec.Header().Get("Retry-After"), strconv.FormatInt(decode[decision](t, rec).RetryAfter, 10); got != want || got == "0" {
					t.Errorf("Retry-After = %q, want %q", got, want)
				}
				if got, want := rec.Header().Get("X-RateLimit-Reset"), rec.Header().Get("Retry-After"); got != want {
					t.Errorf("X-RateLimit-Reset = %q, want Retry-After, %q: no sooner", got, want)
				}
			}
		})
	}
}

func TestRateLimitHeadersFollowTierEdits(t *testing.T) {
	e := newEnv(t)
	body := `{"context":{"user_id":"u","user_tier":"team"}}`
	e.putTier("team", `{"requests_per_minute":5,"requests_per_hour":50,"requests_per_day":500,"burst_allowance":1}`)
	checkHeaders(t, e.do("POST", "/v1/check", body, false), wantHeaders{
		policy:     `"minute";q=6;w=60, "hour";q=50;w=3600, "day";q=500;w=86400`,
		limit:      `"minute";r=5;t=60, "hour";r=49;t=3600, "day";r=499;t=86400`,
		xLimit:     "6",
		xRemaining: "5",
		xReset:     "60",
	})
	e.clock.Advance(30 * time.Second)
	// Lowered to the user's count: the next answer already carries the
	// new quotas, and every window is full; the day frees last.
	e.putTier("team", `{"requests_per_minute":1,"requests_per_hour":1,"requests_per_day":1,"burst_allowance":0}`)
	rec := e.do("POST", "/v1/check", body, false)
	if rec.Code != 429 {
		t.Fatalf("after lowering: %d %s", rec.Code, rec.Body)
	}
	checkHeaders(t, rec, wantHeaders{
		policy:     `"minute";q=1;w=60, "hour";q=1;w=3600, "day";q=1;w=86400`,
		limit:      `"minute";r=0;t=30, "hour";r=0;t=3570, "day";r=0;t=86370`,
		xLimit:     "1",
		xRemaining: "0",
		xReset:     "86370",
	})
	if got := rec.Header().Get("Retry-After"); got != "86370" {
		t.Errorf("Retry-After = %q, want 86370", got)
	}
	e.putTier("team", `{"requests_per_minute":100,"requests_per_hour":100,"requests_per_day":100,"burst_allowance":0}`)
	checkHeaders(t, e.do("POST", "/v1/check", body, false), wantHeaders{
		policy:     `"minute";q=100;w=60, "hour";q=100;w=3600, "day";q=100;w=86400`,
		limit:      `"minute";r=98;t=30, "hour";r=98;t=3570, "day";r=98;t=86370`,
		xLimit:     "100",
		xRemaining: "98",
		xReset:     "30",
	})
}

// A refused check's reset fields never promise room sooner than its
// Retry-After, even where the tightest window frees a slot before: a
// minute lowered below the user's count frees its oldest request before
// enough have left it, and a token window its oldest finished tokens
// before enough have.
func TestResetNeverBeforeRetryAfter(t *testing.T) {
	e := newEnv(t)
	body := `{"context":{"user_id":"u","user_tier":"lowered"}}`
	e.putTier("lowered", `{"requests_per_minute":5,"requests_per_hour":50,"requests_per_day":500,"burst_allowance":0}`)
	for range 3 {
		e.must("POST", "/v1/check", body, 200)
		e.clock.Advance(10 * time.Second)
	}
	e.putTier("lowered", `{"requests_per_minute":1,"requests_per_hour":50,"requests_per_day":500,"burst_allowance":0}`)
	rec := e.do("POST", "/v1/check", body, false)
	// The third request, at 20s, must leave the minute: at 80s.
	if rec.Code != 429 || rec.Header().Get("Retry-After") != "50" {
		t.Fatalf("after lowering: %d %s, Retry-After %q; want 429 and 50", rec.Code, rec.Body, rec.Header().Get("Retry-After"))
	}
	checkHeaders(t, rec, wantHeaders{
		policy:     `"minute";q=1;w=60, "hour";q=50;w=3600, "day";q=500;w=86400`,
		limit:      `"minute";r=0;t=30, "hour";r=47;t=3570, "day";r=497;t=86370`,
		xLimit:     "1",
		xRemaining: "0",
		xReset:     "50",
	})

	body = `{"context":{"user_id":"v","user_tier":"tokens"},"tokens":%d}`
	e.putTier("tokens", `{"requests_per_minute":100,"requests_per_hour":1000,"requests_per_day":10000,"burst_allowance":0,"tokens_per_minute":100}`)
	for range 2 { // 30 tokens finished at 30s, and 30 at 50s
		e.clock.Advance(10 * time.Second)
		d := decode[struct {
			CallID string `json:"call_id"`
		}](t, e.must("POST", "/v1/check", fmt.Sprintf(body, 30), 200))
		e.must("POST", "/v1/calls/"+d.CallID+"/finish", `{"tokens":30}`, 200)
		e.clock.Advance(10 * time.Second)
	}
	// At 60s, 80 more fit once 20 at most are left: at 110s, when the
	// second 30 leave. The first leave at 90s.
	rec = e.do("POST", "/v1/check", fmt.Sprintf(body, 80), false)
	if rec.Code != 429 || rec.Header().Get("Retry-After") != "50" {
		t.Fatalf("over the tokens: %d %s, Retry-After %q; want 429 and 50", rec.Code, rec.Body, rec.Header().Get("Retry-After"))
	}
	if got := rec.Header().Get("X-RateLimit-Reset-Tokens"); got != "50" {
		t.Errorf("X-RateLimit-Reset-Tokens = %q, want 50, Retry-After's", got)
	}
}

// TestRateLimitHeadersParse reads the fields the way a client library for
// HTTP structured fields (RFC 9651) does: each is a list of string items
// whose parameters are integers.
func TestRateLimitHeadersParse(t *testing.T) {
	e := newEnv(t)
	rec := e.do("POST", "/v1/check", `{"context":{"user_id":"p","user_tier":"pro"}}`, false)
	policies, err := httpsfv.UnmarshalList(rec.Header().Values("RateLimit-Policy"))
	if err != nil {
		t.Fatalf("RateLimit-Policy %q: %v", rec.Header().Values("RateLimit-Policy"), err)
	}
	limits, err := httpsfv.UnmarshalList(rec.Header().Values("RateLimit"))
	if err != nil {
		t.Fatalf("RateLimit %q: %v", rec.Header().Values("RateLimit"), err)
	}
	d := decode[decision](t, rec)
	if len(policies) != 3 || len(limits) != 3 {
		t.Fatalf("%d policies and %d limits, want 3 and 3", len(policies), len(limits))
	}
	for i, name := range []string{"minute", "hour", "day"} {
		p, ok := policies[i].(httpsfv.Item)
		if !ok || p.Value != name {
			t.Fatalf("policy %d = %#v, want the string item %q", i, policies[i], name)
		}
		l, ok := limits[i].(httpsfv.Item)
		if !ok || l.Value != name {
			t.Fatalf("limit %d = %#v, want the string item %q", i, limits[i], name)
		}
		w := d.Windows[name]
		for _, param := range []struct {
			params *httpsfv.Params
			key    string
			want   int64
		}{
			{p.Params, "q", w.Limit},
			{p.Params, "w", []int64{60, 3600, 86400}[i]},
			{l.Params, "r", w.Remaining},
			{l.Params, "t", w.Reset},
		} {
			if got, ok := param.params.Get(param.key); !ok || got != param.want {
				t.Errorf("%s: %s = %#v, want %d", name, param.key, got, param.want)
			}
		}
	}
}

func TestNoRateLimitHeadersWithoutDecision(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ name, body string }{
		{"malformed", `{"context":`},
		{"unknown tier", `{"context":{"user_tier":"gold"}}`},
	} {
		rec := e.do("POST", "/v1/check", tc.body, false)
		if rec.Code != 400 {
			t.Fatalf("%s: %d", tc.name, rec.Code)
		}
		for _, h := range rateLimitHeaders {
			if v := rec.Header().Values(h); len(v) > 0 {
				t.Errorf("%s: %s = %q on an answer without a decision", tc.name, h, v)
			}
		}
	}
	e.store.Close()
	rec := e.do("POST", "/v1/check", `{}`, false)
	if rec.Code != 503 {
		t.Fatalf("closed store: %d", rec.Code)
	}
	for _, h := range rateLimitHeaders {
		if v := rec.Header().Values(h); len(v) > 0 {
			t.Errorf("storage failure: %s = %q", h, v)
		}
	}
}
