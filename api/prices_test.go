package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/api/gateway"
	"github.com/policyguard/policyguard/policy"
)

type priceVersion struct {
	ID            int64               `json:"id"`
	EffectiveFrom time.Time           `json:"effective_from"`
	CreatedAt     time.Time           `json:"created_at"`
	Source        string              `json:"source"`
	Prices        []map[string]string `json:"prices"`
}

type priceVersions struct {
	Versions []struct {
		ID            int64     `json:"id"`
		EffectiveFrom time.Time `json:"effective_from"`
		Source        string    `json:"source"`
		Entries       int       `json:"entries"`
		InForce       bool      `json:"in_force"`
	} `json:"versions"`
}

// A version made through the API is in force from its effective_from, is
// read back exactly as decimal strings, and is listed; an earlier time
// still reads the earlier version.
func TestPriceRoutes(t *testing.T) {
	e := newEnv(t)
	if rec := e.do("GET", "/v1/prices", "", true); rec.Code != 404 || !strings.Contains(rec.Body.String(), "no price version is in force") {
		t.Fatalf("GET before any version: %d %s", rec.Code, rec.Body)
	}
	if rec := e.do("GET", "/v1/prices/versions", "", true); rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != `{"versions":[]}` {
		t.Fatalf("versions before any: %d %s", rec.Code, rec.Body)
	}
	rec := e.do("PUT", "/v1/prices", `{"prices":[
		{"model":"gpt-4o-mini","input":"0.15","output":"0.60","cache_read":"0.075"},
		{"model":"claude-*","input":"3","output":"15","cache_read":"0.3","cache_write":"3.75"},
		{"model":"tiny","input":"0.000000000001","output":"9223372.036854775807"}]}`, true)
	if rec.Code != 201 {
		t.Fatalf("PUT: %d %s", rec.Code, rec.Body)
	}
	v1 := decode[priceVersion](t, rec)
	if !v1.EffectiveFrom.Equal(t0) || !v1.CreatedAt.Equal(t0) || v1.Source != "api" || len(v1.Prices) != 3 {
		t.Fatalf("made %+v", v1)
	}
	want := []map[string]string{
		{"model": "claude-*", "input": "3", "output": "15", "cache_read": "0.3", "cache_write": "3.75"},
		{"model": "gpt-4o-mini", "input": "0.15", "output": "0.6", "cache_read": "0.075", "cache_write": "0.15"}, // cache_write: the input price
		{"model": "tiny", "input": "0.000000000001", "output": "9223372.036854775807", "cache_read": "0.000000000001", "cache_write": "0.000000000001"},
	}
	for i := range want {
		for k, v := range want[i] {
			if v1.Prices[i][k] != v {
				t.Errorf("prices[%d].%s = %q, want %q", i, k, v1.Prices[i][k], v)
			}
		}
	}

	later := t0.Add(time.Hour)
	rec = e.do("PUT", "/v1/prices", `{"effective_from":"`+later.Format(time.RFC3339)+`","prices":[{"model":"gpt-4o-mini","input":"0.2","output":"0.8"}]}`, true)
	if rec.Code != 201 {
		t.Fatalf("PUT later: %d %s", rec.Code, rec.Body)
	}
	v2 := decode[priceVersion](t, rec)

	for _, tt := range []struct {
		path   string
		wantID int64
	}{
		{"/v1/prices", v1.ID},
		{"/v1/prices?at=" + later.Add(-time.Nanosecond).Format(time.RFC3339Nano), v1.ID},
		{"/v1/prices?at=" + later.Format(time.RFC3339), v2.ID},
		{"/v1/prices?at=2026-03-01T13:00:00%2B01:00", v1.ID}, // noon UTC
	} {
		rec := e.do("GET", tt.path, "", true)
		if rec.Code != 200 {
			t.Errorf("GET %s: %d %s", tt.path, rec.Code, rec.Body)
			continue
		}
		if got := decode[priceVersion](t, rec).ID; got != tt.wantID {
			t.Errorf("GET %s: version %d, want %d", tt.path, got, tt.wantID)
		}
	}
	e.clock.Set(later)
	if got := decode[priceVersion](t, e.do("GET", "/v1/prices", "", true)); got.ID != v2.ID || got.Prices[0]["input"] != "0.2" {
		t.Errorf("GET after the clock passed effective_from: %+v", got)
	}
	list := decode[priceVersions](t, e.do("GET", "/v1/prices/versions", "", true))
	if len(list.Versions) != 2 || list.Versions[0].ID != v2.ID || !list.Versions[0].InForce || list.Versions[1].InForce || list.Versions[1].Entries != 3 {
		t.Errorf("versions = %+v", list)
	}
	// The service prices from memory what the API saved. A version is the
	// whole table: v2 lists no claude-*, so nothing prices it from then.
	if p, id, ok := e.svc.PriceOf("claude-3-haiku", "", t0); !ok || id != v1.ID || p.Output.String() != "15" {
		t.Errorf("PriceOf(claude-3-haiku) at t0 = %+v, %d, %v; want v1's claude-*", p, id, ok)
	}
	if p, id, ok := e.svc.PriceOf("claude-3-haiku", "", later); ok || id != v2.ID {
		t.Errorf("PriceOf(claude-3-haiku) under v2 = %+v, %d, %v; want unpriced by v2", p, id, ok)
	}
}

// Every refusal names its problem and makes no version.
func TestPriceRoutesRefuse(t *testing.T) {
	e := newEnv(t)
	entry := `{"model":"m","input":"1","output":"2"}`
	for _, s := range []struct {
		name, method, path, body string
		admin                    bool
		status                   int
		want                     string
	}{
		{"no admin token", "PUT", "/v1/prices", `{"prices":[]}`, false, 401, "missing or wrong admin token"},
		{"read without the token", "GET", "/v1/prices", "", false, 401, "missing or wrong admin token"},
		{"list without the token", "GET", "/v1/prices/versions", "", false, 401, "missing or wrong admin token"},
		{"no prices", "PUT", "/v1/prices", `{}`, true, 400, "prices is required"},
		{"bad decimal", "PUT", "/v1/prices", `{"prices":[` + entry + `,{"model":"x","input":"0.1.5","output":"1"}]}`, true, 400, `prices[1].input: \"0.1.5\" is not a decimal amount`},
		{"a number, not a string", "PUT", "/v1/prices", `{"prices":[{"model":"x","input":0.15,"output":"1"}]}`, true, 400, "input"},
		{"finer than the unit", "PUT", "/v1/prices", `{"prices":[{"model":"x","input":"1","output":"0.0000000000001"}]}`, true, 400, "prices[0].output: \\\"0.0000000000001\\\" is finer than a picodollar"},
		{"negative", "PUT", "/v1/prices", `{"prices":[{"model":"x","input":"1","output":"1","cache_read":"-1"}]}`, true, 400, "prices[0].cache_read must not be negative"},
		{"overflow", "PUT", "/v1/prices", `{"prices":[{"model":"x","input":"10000000","output":"1"}]}`, true, 400, "prices[0].input: \\\"10000000\\\" is more than the largest amount"},
		{"missing output", "PUT", "/v1/prices", `{"prices":[{"model":"x","input":"1"}]}`, true, 400, "prices[0].output is required"},
		{"empty model", "PUT", "/v1/prices", `{"prices":[{"model":"","input":"1","output":"1"}]}`, true, 400, "prices[0].model is required"},
		{"inner star", "PUT", "/v1/prices", `{"prices":[{"model":"a*b","input":"1","output":"1"}]}`, true, 400, "prices[0].model may hold '*' only as its last character"},
		{"duplicate", "PUT", "/v1/prices", `{"prices":[` + entry + `,` + entry + `]}`, true, 400, `prices[1].model lists \"m\" again (first at prices[0])`},
		{"past", "PUT", "/v1/prices", `{"effective_from":"2026-03-01T11:59:59Z","prices":[]}`, true, 400, "effective_from 2026-03-01T11:59:59Z is before now"},
		{"unknown member", "PUT", "/v1/prices", `{"prices":[],"version":3}`, true, 400, `unknown field \"version\"`},
		{"bad at", "GET", "/v1/prices?at=yesterday", "", true, 400, "at must be one RFC 3339 time"},
		{"two ats", "GET", "/v1/prices?at=2026-03-01T12:00:00Z&at=2026-03-01T12:00:00Z", "", true, 400, "at must be one RFC 3339 time"},
	} {
		rec := e.do(s.method, s.path, s.body, s.admin)
		if rec.Code != s.status || !strings.Contains(rec.Body.String(), s.want) {
			t.Errorf("%s: %d %s, want %d with %q", s.name, rec.Code, rec.Body, s.status, s.want)
		}
	}
	if list := decode[priceVersions](t, e.do("GET", "/v1/prices/versions", "", true)); len(list.Versions) != 0 {
		t.Errorf("refused PUTs made %d versions", len(list.Versions))
	}
}

// With a gateway, an entry may name only one of its upstreams.
func TestPriceUpstreamMustExist(t *testing.T) {
	up, err := gateway.ParseUpstream("openai=openai:https://api.openai.invalid/v1")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, withConfig(func(c *api.Config) { c.Gateway = &gateway.Config{Upstreams: []gateway.Upstream{up}} }))
	rec := e.do("PUT", "/v1/prices", `{"prices":[{"model":"m","upstream":"azure","input":"1","output":"1"}]}`, true)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `prices[0].upstream \"azure\" is not an upstream of the gateway (openai)`) {
		t.Errorf("unknown upstream: %d %s", rec.Code, rec.Body)
	}
	rec = e.do("PUT", "/v1/prices", `{"prices":[{"model":"m","upstream":"openai","input":"1","output":"1"},{"model":"m","input":"2","output":"2"}]}`, true)
	if rec.Code != http.StatusCreated {
		t.Fatalf("known upstream: %d %s", rec.Code, rec.Body)
	}
	if p, _, ok := e.svc.PriceOf("m", "openai", e.clock.Now()); !ok || p.Input.String() != "1" {
		t.Errorf("PriceOf(m, openai) = %+v, %v", p, ok)
	}
	if p, _, ok := e.svc.PriceOf("m", "other", e.clock.Now()); !ok || p.Input != policy.Money(2_000_000_000_000) {
		t.Errorf("PriceOf(m, other) = %+v, %v", p, ok)
	}
}
