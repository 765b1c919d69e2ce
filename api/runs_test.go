package api_test

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// runDecision is what the tests read of a check's answer in a run.
type runDecision struct {
	Allowed    bool    `json:"allowed"`
	Reason     *string `json:"reason"`
	RetryAfter int64   `json:"retry_after"`
	CallID     *string `json:"call_id"`
	Run        *struct {
		ID            string           `json:"id"`
		Parent        *string          `json:"parent"`
		State         string           `json:"state"`
		Requests      int64            `json:"requests"`
		Tokens        int64            `json:"tokens"`
		CallsInFlight int64            `json:"calls_in_flight"`
		Limits        map[string]int64 `json:"limits"`
	} `json:"run"`
}

// TestRunsOverHTTP walks an agent's run and its sub-agent through the
// whole API: the run member of each decision, a 429 at the run's
// max_concurrent, a 403 without Retry-After once its steps are used up,
// a 409 for another user, the run as GET /v1/runs/{run_id} shows it, the
// listing, the usage, the kill switch for admins only, and the metrics.
func TestRunsOverHTTP(t *testing.T) {
	e := newEnv(t, withMetrics())
	e.putTier("agents", `{`+runTierLimits+`,"run":{"max_requests":3,"max_tokens":1000,"max_concurrent":1}}`)
	check := func(user, run, parent string, tokens int64) (int, http.Header, runDecision) {
		t.Helper()
		e.clock.Advance(time.Second)
		ctx := fmt.Sprintf(`"user_id":%q,"user_tier":"agents","run_id":%q`, user, run)
		if parent != "" {
			ctx += fmt.Sprintf(`,"parent_run_id":%q`, parent)
		}
		rec := e.do(http.MethodPost, "/v1/check", fmt.Sprintf(`{"context":{%s},"tokens":%d}`, ctx, tokens), false)
		if rec.Code != http.StatusOK && rec.Code != http.StatusForbidden && rec.Code != http.StatusTooManyRequests {
			return rec.Code, rec.Header(), runDecision{}
		}
		return rec.Code, rec.Header(), decode[runDecision](t, rec)
	}
	finish := func(d runDecision, tokens int64) {
		t.Helper()
		if rec := e.do(http.MethodPost, "/v1/calls/"+*d.CallID+"/finish", fmt.Sprintf(`{"tokens":%d}`, tokens), false); rec.Code != http.StatusOK {
			t.Fatalf("finish: %d %s", rec.Code, rec.Body)
		}
	}

	code, _, first := check("sam", "r1", "", 100)
	if code != http.StatusOK || first.Run == nil || first.Run.ID != "r1" || first.Run.Requests != 1 || first.Run.Tokens != 100 ||
		first.Run.CallsInFlight != 1 || first.Run.State != "open" || first.Run.Limits["max_requests"] != 3 {
		t.Fatalf("first step: %d %+v %+v", code, first, first.Run)
	}
	code, h, busy := check("sam", "r1", "", 100)
	if code != http.StatusTooManyRequests || str(busy.Reason) != `run "r1" concurrent call limit exceeded` || h.Get("Retry-After") != "1" {
		t.Errorf("a second call at max_concurrent 1: %d %q Retry-After %q", code, str(busy.Reason), h.Get("Retry-After"))
	}
	finish(first, 40)
	code, _, kid := check("sam", "k1", "r1", 100)
	if code != http.StatusOK || kid.Run.Requests != 1 || str(kid.Run.Parent) != "r1" {
		t.Fatalf("the sub-agent's first step: %d %+v", code, kid.Run)
	}
	finish(kid, 60)
	code, _, last := check("sam", "r1", "", 100)
	if code != http.StatusOK || last.Run.Requests != 3 || last.Run.State != "exhausted" {
		t.Fatalf("the last step: %d %+v", code, last.Run)
	}
	finish(last, 10)
	code, h, over := check("sam", "r1", "", 100)
	if code != http.StatusForbidden || over.Allowed || str(over.Reason) != `run "r1" step limit exceeded` || h.Get("Retry-After") != "" || over.RetryAfter != 0 {
		t.Errorf("past the steps: %d %+v Retry-After %q", code, over, h.Get("Retry-After"))
	}
	if code, _, d := check("sam", "k1", "", 100); code != http.StatusForbidden || str(d.Reason) != `run "r1" step limit exceeded` {
		t.Errorf("the sub-agent of a used-up run: %d %q", code, str(d.Reason))
	}
	if code, _, _ := check("ann", "r1", "", 100); code != http.StatusConflict {
		t.Errorf("another user naming r1: %d, want 409", code)
	}
	rec := e.do(http.MethodPost, "/v1/check", `{"context":{"user_id":"sam","run_id":"a\u0000b"}}`, false)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "context.run_id") {
		t.Errorf("a run id with a NUL: %d %s", rec.Code, rec.Body)
	}

	rec = e.must(http.MethodGet, "/v1/runs/r1", "", http.StatusOK)
	var got map[string]jsontext.Value
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := []string{"run_id", "user_id", "tier", "parent", "children", "opened_at", "last_at", "state", "requests", "tokens", "cost", "calls_in_flight", "limits"}
	if names := slices.Sorted(maps.Keys(got)); !slices.Equal(names, slices.Sorted(slices.Values(want))) {
		t.Errorf("GET /v1/runs/r1 has %v, want %v", names, want)
	}
	for name, v := range map[string]string{"children": `["k1"]`, "state": `"exhausted"`, "requests": "3", "tokens": "110", "parent": "null", "calls_in_flight": "0"} {
		if string(got[name]) != v {
			t.Errorf("GET /v1/runs/r1: %s = %s, want %s", name, got[name], v)
		}
	}
	e.must(http.MethodGet, "/v1/runs/nope", "", http.StatusNotFound)
	list := decode[struct {
		Runs []struct {
			RunID string `json:"run_id"`
		} `json:"runs"`
		Next *string `json:"next"`
	}](t, e.must(http.MethodGet, "/v1/runs?user_id=sam&limit=1", "", http.StatusOK))
	if len(list.Runs) != 1 || list.Runs[0].RunID != "k1" || str(list.Next) != "k1" {
		t.Errorf("the first page of sam's runs: %+v next %s", list.Runs, str(list.Next))
	}
	e.must(http.MethodGet, "/v1/runs?state=asleep", "", http.StatusBadRequest)
	usage := decode[struct {
		Run *struct {
			ID       string `json:"id"`
			Requests int64  `json:"requests"`
		} `json:"run"`
	}](t, e.must(http.MethodGet, "/v1/usage/sam?run_id=r1", "", http.StatusOK))
	if usage.Run == nil || usage.Run.ID != "r1" || usage.Run.Requests != 3 {
		t.Errorf("sam's usage in r1: %+v", usage.Run)
	}

	// The kill switch: admins only; the next request is refused.
	code, _, _ = check("sam", "r2", "", 10)
	if code != http.StatusOK {
		t.Fatal(code)
	}
	if rec := e.do(http.MethodPost, "/v1/runs/r2/end", "", false); rec.Code != http.StatusUnauthorized {
		t.Errorf("end without a token: %d", rec.Code)
	}
	ended := decode[struct{ State string }](t, e.must(http.MethodPost, "/v1/runs/r2/end", "", http.StatusOK))
	if ended.State != "ended" {
		t.Errorf("ended: %+v", ended)
	}
	if code, h, d := check("sam", "r2", "", 10); code != http.StatusForbidden || str(d.Reason) != `run "r2" was ended` || h.Get("Retry-After") != "" {
		t.Errorf("after the end: %d %q", code, str(d.Reason))
	}
	if rec := e.must(http.MethodGet, "/v1/audit?kind=runs", "", http.StatusOK); !strings.Contains(rec.Body.String(), `"kind":"runs","subject":"r2","action":"ended"`) {
		t.Errorf("the audit log of runs: %s", rec.Body)
	}

	m := scrape(t, e.srv)
	if got := m.must(t, "policyguard_runs_opened_total", nil); got != 3 {
		t.Errorf("runs opened %v, want 3", got)
	}
	for limit, n := range map[string]float64{"requests": 2, "concurrency": 1, "ended": 1} {
		if got := m.must(t, "policyguard_runs_refused_total", map[string]string{"limit": limit}); got != n {
			t.Errorf("runs refused by %s: %v, want %v", limit, got, n)
		}
	}
}
