package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/policyguard/policyguard/api/gateway"
	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

// runTier is the tier of the run tests: the user's own limits loose, a
// run's steps three and its tree two levels deep.
const runTier = `{"requests_per_minute":1000,"requests_per_hour":10000,"requests_per_day":100000,"burst_allowance":0,"max_concurrent":64,` +
	`"run":{"max_requests":3,"max_depth":2}}`

// getRun returns the run named id as the service holds it.
func getRun(t *testing.T, svc *policy.Service, id string) policy.RunUsage {
	t.Helper()
	r, err := svc.GetRun(context.Background(), id)
	if err != nil {
		t.Fatalf("run %s: %v", id, err)
	}
	return r
}

// runHeaders returns the header fields of a call by key in run (and
// parent, when not "").
func runHeaders(key, run, parent string) map[string]string {
	h := map[string]string{"Authorization": "Bearer " + key, "X-Guard-Run": run}
	if parent != "" {
		h["X-Guard-Parent-Run"] = parent
	}
	return h
}

// errorBody is what the tests read of a refusal in either protocol's
// shape.
type errorBody struct {
	Type  string `json:"type"`
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func readError(t *testing.T, body string) errorBody {
	t.Helper()
	var b errorBody
	if err := json.Unmarshal([]byte(body), &b); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return b
}

// An agent's calls through the gateway are its run's steps, and a
// sub-agent's are its own and its parent's; X-Guard-Run and
// X-Guard-Parent-Run never reach the upstream. Once the run's steps are
// used up its next call, and its sub-agent's, are 403 in the protocol's
// shape with no wait to retry after; a tree one level too deep is refused
// naming the depth; another user naming the run is 409.
func TestGatewayRunSteps(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	e.putTier("agents", runTier)
	e.assign("alice", "agents")
	e.assign("bob", "agents")
	bob := e.newKey("bob")
	const chatBody = `{"model":"gpt-4o-mini","messages":[]}`
	const chatPath, messagesPath = "/llm/openai/chat/completions", "/llm/claude/v1/messages"
	call := func(path, body string, h map[string]string) (*http.Response, string) {
		t.Helper()
		e.clock.Advance(time.Second)
		return e.raw(http.MethodPost, path, body, h)
	}
	want200 := func(res *http.Response, body string) {
		t.Helper()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%d %s, want 200", res.StatusCode, body)
		}
	}

	want200(call(chatPath, chatBody, runHeaders(key, "r-42", "")))
	want200(call(messagesPath, messageBody, runHeaders(key, "r-42-a", "r-42")))
	for _, r := range e.fake.Requests() {
		for name := range r.Header {
			if strings.HasPrefix(name, "X-Guard-") {
				t.Errorf("the upstream got %s", name)
			}
		}
	}
	if p, c := getRun(t, e.svc, "r-42"), getRun(t, e.svc, "r-42-a"); p.Requests != 2 || c.Requests != 1 || c.Parent != "r-42" ||
		p.Tokens != chatTokens+anthropicTokens || c.Tokens != anthropicTokens || p.CallsInFlight != 0 {
		t.Errorf("parent %d requests, %d tokens, %d in flight; child %d requests, %d tokens, parent %q; want 2, %d, 0; 1, %d, r-42",
			p.Requests, p.Tokens, p.CallsInFlight, c.Requests, c.Tokens, c.Parent, chatTokens+anthropicTokens, anthropicTokens)
	}
	// A grandchild would make the tree three levels deep.
	res, body := call(chatPath, chatBody, runHeaders(key, "r-42-a-i", "r-42-a"))
	if b := readError(t, body); res.StatusCode != http.StatusForbidden || b.Error.Message != `run "r-42-a-i" depth limit exceeded (max_depth 2)` {
		t.Errorf("a third level: %d %s, want 403 naming the depth", res.StatusCode, body)
	}
	// The third step, the sub-agent's, uses up the parent's budget.
	want200(call(chatPath, chatBody, runHeaders(key, "r-42-a", "")))
	upstream := len(e.fake.Requests())
	for _, tc := range []struct {
		name, path, body, run, wantMsg string
		// want checks the shape of the refusal.
		want func(b errorBody) bool
	}{
		{"openai", chatPath, chatBody, "r-42", `run "r-42" step limit exceeded`, func(b errorBody) bool {
			return b.Error.Type == "permission_denied" && b.Error.Code != nil && *b.Error.Code == "run_budget_exceeded"
		}},
		{"anthropic", messagesPath, messageBody, "r-42", `run "r-42" step limit exceeded`, func(b errorBody) bool {
			return b.Type == "error" && b.Error.Type == "permission_error"
		}},
		// The child has used one step of its own three: the parent's
		// refuses it, and the reason names the parent.
		{"openai sub-agent", chatPath, chatBody, "r-42-a", `run "r-42" step limit exceeded`, func(b errorBody) bool {
			return b.Error.Code != nil && *b.Error.Code == "run_budget_exceeded"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, body := call(tc.path, tc.body, runHeaders(key, tc.run, ""))
			if b := readError(t, body); res.StatusCode != http.StatusForbidden || b.Error.Message != tc.wantMsg || !tc.want(b) {
				t.Errorf("%d %s, want 403 %q in the protocol's permission shape", res.StatusCode, body, tc.wantMsg)
			}
			for _, name := range []string{"Retry-After", "Retry-After-Ms"} {
				if v := res.Header.Get(name); v != "" {
					t.Errorf("%s: %s on a refusal no wait lifts", name, v)
				}
			}
		})
	}
	if got := len(e.fake.Requests()); got != upstream {
		t.Errorf("%d refused calls reached the upstream", got-upstream)
	}
	if p := getRun(t, e.svc, "r-42"); p.Requests != 3 || p.State != policy.RunExhausted {
		t.Errorf("the parent: %d requests, %s; want 3, exhausted", p.Requests, p.State)
	}

	// bob names alice's run: 409, which the SDKs are told not to retry.
	for _, path := range []string{chatPath, messagesPath} {
		body := map[string]string{chatPath: chatBody, messagesPath: messageBody}[path]
		res, out := call(path, body, runHeaders(bob, "r-42", ""))
		if b := readError(t, out); res.StatusCode != http.StatusConflict || b.Error.Message != `run "r-42" belongs to another user` ||
			res.Header.Get("X-Should-Retry") != "false" {
			t.Errorf("%s, another user's run: %d %s (x-should-retry %q), want 409 naming the run, not to be retried",
				path, res.StatusCode, out, res.Header.Get("X-Should-Retry"))
		}
	}
	e.wantMetric(`policyguard_gateway_requests_total{outcome="denied",tier="agents",upstream="openai"} 3`)
	e.wantMetric(`policyguard_runs_refused_total{limit="requests"} 3`)
}

// A bad X-Guard-Run or X-Guard-Parent-Run is a 400 in the protocol's
// shape naming the field, and so is a call without X-Guard-Run of a tier
// whose run object requires it; the model list is no step of a run.
func TestGatewayRunHeaders(t *testing.T) {
	e, key := newGatewayEnv(t, func(c *gateway.Config) { c.Passthrough = []string{"/files"} })
	e.putTier("required", strings.Replace(runTier, `"run":{`, `"run":{"required":true,`, 1))
	long := strings.Repeat("r", policy.MaxUserIDBytes+1)
	bearer := "Bearer " + key
	for _, tc := range []struct {
		name, method, path string
		header             map[string]string
		status             int
		msg                string
	}{
		{"run too long", "POST", "/llm/openai/chat/completions", map[string]string{"X-Guard-Run": long},
			400, fmt.Sprintf("X-Guard-Run must be at most %d bytes", policy.MaxUserIDBytes)},
		{"parent too long", "POST", "/llm/claude/v1/messages", map[string]string{"X-Guard-Run": "r-1", "X-Guard-Parent-Run": long},
			400, fmt.Sprintf("X-Guard-Parent-Run must be at most %d bytes", policy.MaxUserIDBytes)},
		{"parent without run", "POST", "/llm/openai/chat/completions", map[string]string{"X-Guard-Parent-Run": "r-1"},
			400, "X-Guard-Parent-Run needs X-Guard-Run"},
		{"own parent", "POST", "/llm/openai/chat/completions", map[string]string{"X-Guard-Run": "r-1", "X-Guard-Parent-Run": "r-1"},
			400, "a run cannot be its own parent"},
		{"empty run", "POST", "/llm/openai/chat/completions", map[string]string{"X-Guard-Run": ""},
			400, "X-Guard-Run must not be empty"},
		{"required", "POST", "/llm/openai/chat/completions", nil,
			400, `tier "required" requires X-Guard-Run`},
		{"required anthropic", "POST", "/llm/claude/v1/messages", nil,
			400, `tier "required" requires X-Guard-Run`},
		{"required passthrough", "GET", "/llm/openai/files", nil,
			400, `tier "required" requires X-Guard-Run`},
		{"required, named", "POST", "/llm/openai/chat/completions", map[string]string{"X-Guard-Run": "r-1"}, 200, ""},
		{"required, passthrough named", "GET", "/llm/openai/files", map[string]string{"X-Guard-Run": "r-1"}, 200, ""},
		{"model list", "GET", "/llm/openai/models", nil, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.assign("alice", "required")
			body := ""
			if tc.method == "POST" {
				body = `{"model":"gpt-4o-mini","max_tokens":10,"messages":[]}`
			}
			req, err := http.NewRequest(tc.method, e.server.URL+tc.path, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", bearer)
			for k, v := range tc.header {
				req.Header[k] = []string{v} // as given: an empty value too
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			out, _ := io.ReadAll(res.Body)
			res.Body.Close()
			msg := string(out)
			if tc.status != http.StatusOK {
				msg = readError(t, msg).Error.Message
			}
			if res.StatusCode != tc.status || !strings.Contains(msg, tc.msg) {
				t.Fatalf("%d %s, want %d %q", res.StatusCode, out, tc.status, tc.msg)
			}
			if tc.status != 400 {
				return
			}
			want := "invalid_request_error"
			if b := readError(t, string(out)); b.Error.Type != want || strings.Contains(tc.path, "claude") != (b.Type == "error") {
				t.Errorf("%s, want the protocol's %s", out, want)
			}
		})
	}
	if r := getRun(t, e.svc, "r-1"); r.Requests != 2 {
		t.Errorf("run r-1: %d requests, want 2: a call and a passthrough request", r.Requests)
	}
}

// A run's max_concurrent is a 429, as the tier's is: a slot frees, and
// the wait is a second.
func TestGatewayRunConcurrentCalls(t *testing.T) {
	e, key := newGatewayEnv(t, func(c *gateway.Config) { c.Drain = 200 * time.Millisecond })
	e.putTier("agents", strings.Replace(runTier, `"run":{`, `"run":{"max_concurrent":1,`, 1))
	e.assign("alice", "agents")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	oa := e.openai(key, option.WithHeader("X-Guard-Run", "r-7"))
	s := oa.Chat.Completions.NewStreaming(ctx, chat("gpt-4o-mini"), option.WithHeader("X-Fake", "hang-stream"))
	if !s.Next() {
		t.Fatalf("the first call: %v", s.Err())
	}
	res, body := e.raw(http.MethodPost, "/llm/openai/chat/completions", `{"model":"gpt-4o-mini","messages":[]}`, runHeaders(key, "r-7", ""))
	if b := readError(t, body); res.StatusCode != http.StatusTooManyRequests || b.Error.Message != `run "r-7" concurrent call limit exceeded` ||
		res.Header.Get("Retry-After") != "1" {
		t.Errorf("a second call at once: %d %s (Retry-After %q), want 429 naming the run, after 1s", res.StatusCode, body, res.Header.Get("Retry-After"))
	}
	cancel()
	s.Close()
	await(t, e.settled, "settle after the drain time")
	if _, err := oa.Chat.Completions.New(context.Background(), chat("gpt-4o-mini")); err != nil {
		t.Errorf("after the first call ended: %v", err)
	}
}

// With the official SDKs, each allowed two retries, a run over its
// budget raises the SDK's permission error after exactly one attempt,
// and so does a run of another user (409, which they would otherwise
// retry).
func TestGatewayRunBudgetWithSDKs(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	e.putTier("agents", strings.Replace(runTier, `"max_requests":3`, `"max_requests":1`, 1))
	e.assign("alice", "agents")
	e.assign("bob", "agents")
	bob := e.newKey("bob")
	ctx := context.Background()
	for _, tc := range []struct {
		protocol string
		call     func(key, run string, a *attempts) error
		// status returns the status of the SDK's error, its message, and
		// whether it is the protocol's permission error.
		status func(err error) (int, string, bool)
	}{
		{
			protocol: "openai",
			call: func(key, run string, a *attempts) error {
				c := e.openai(key, option.WithMaxRetries(2), option.WithMiddleware(a.middleware), option.WithHeader("X-Guard-Run", run))
				_, err := c.Chat.Completions.New(ctx, chat("gpt-4o-mini"))
				return err
			},
			status: func(err error) (int, string, bool) {
				var oe *openai.Error
				if !errors.As(err, &oe) {
					return 0, "", false
				}
				return oe.StatusCode, oe.Message, oe.Type == "permission_denied" && oe.Code == "run_budget_exceeded"
			},
		},
		{
			protocol: "anthropic",
			call: func(key, run string, a *attempts) error {
				c := e.anthropic(key, anthropicoption.WithMaxRetries(2), anthropicoption.WithMiddleware(a.middleware), anthropicoption.WithHeader("X-Guard-Run", run))
				_, err := c.Messages.New(ctx, claudeMessage("claude-sonnet-4-5"))
				return err
			},
			status: func(err error) (int, string, bool) {
				var ae *anthropic.Error
				if !errors.As(err, &ae) {
					return 0, "", false
				}
				var b errorBody
				if json.Unmarshal([]byte(ae.RawJSON()), &b) != nil {
					return ae.StatusCode, "", false
				}
				return ae.StatusCode, b.Error.Message, b.Error.Type == "permission_error"
			},
		},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			run := "sdk-" + tc.protocol
			var a attempts
			if err := tc.call(key, run, &a); err != nil {
				t.Fatal(err)
			}
			upstream := len(e.fake.Requests())
			a = attempts{}
			err := tc.call(key, run, &a)
			if status, msg, permission := tc.status(err); status != http.StatusForbidden || !permission ||
				msg != `run "`+run+`" step limit exceeded` {
				t.Errorf("%v (%s), want the SDK's 403 permission error naming the run", err, rawError(err))
			}
			if n := a.n.Load(); n != 1 {
				t.Errorf("the SDK sent %d requests over budget, want 1: no retry", n)
			}
			a = attempts{}
			err = tc.call(bob, run, &a)
			if status, _, _ := tc.status(err); status != http.StatusConflict || a.n.Load() != 1 {
				t.Errorf("another user's run: %v after %d requests, want a 409 after 1", err, a.n.Load())
			}
			if got := len(e.fake.Requests()); got != upstream {
				t.Errorf("a refused call reached the upstream")
			}
		})
	}
}

// runRaceTier limits each run to 12 steps and the tokens of about 10
// calls, so that either may be what stops a tree.
func runRaceTier(maxTokens int64) string {
	return fmt.Sprintf(`{"requests_per_minute":100000,"requests_per_hour":100000,"requests_per_day":100000,"burst_allowance":0,"max_concurrent":64,`+
		`"run":{"max_requests":12,"max_tokens":%d,"max_depth":2}}`, maxTokens)
}

// runRaceReserve is the largest reservation of the calls of spendRaceCalls,
// which each use what they reserve (X-Fake: usage-is-reservation).
func runRaceReserve() int64 {
	var most int64
	for _, c := range spendRaceCalls {
		most = max(most, int64(len(c.body))+50)
	}
	return most
}

// runRace sends 64 clients at once through the gateways at urls, driving
// 8 runs of alice: 4 roots and a sub-agent of each. Every client calls in
// its run until a refusal; then no run has passed its steps or its
// tokens, each tree's root counted every call of the tree, and each root
// used its budget up to within a call.
func runRace(t *testing.T, urls []string, key string, svc *policy.Service, maxTokens int64) {
	const roots = 4
	admitted := make(map[string]int64)
	var mu sync.Mutex
	post := func(url, run, parent string, c struct{ path, body string }) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, url+c.path, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("X-Fake", "usage-is-reservation")
		req.Header.Set("X-Guard-Run", run)
		if parent != "" {
			req.Header.Set("X-Guard-Parent-Run", parent)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			mu.Lock()
			admitted[run]++
			mu.Unlock()
		}
		return res.StatusCode, string(body)
	}
	runOf := func(i int) (run, parent string) {
		root := fmt.Sprintf("root-%d", i%roots)
		if i%(2*roots) < roots {
			return root, ""
		}
		return root + "-child", root
	}
	// The roots open first: a child's parent must exist.
	for i := range roots {
		run, _ := runOf(i)
		if status, body := post(urls[0], run, "", spendRaceCalls[0]); status != http.StatusOK {
			t.Fatalf("opening %s: %d %s", run, status, body)
		}
	}
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run, parent := runOf(i)
			for j := 0; ; j++ {
				status, body := post(urls[i%len(urls)], run, parent, spendRaceCalls[(i+j)%len(spendRaceCalls)])
				switch {
				case status == http.StatusOK:
				case status == http.StatusForbidden && (strings.Contains(body, "run_budget_exceeded") || strings.Contains(body, "permission_error")):
					return
				default:
					t.Errorf("%s: status %d: %s", run, status, body)
					return
				}
			}
		}()
	}
	wg.Wait()
	reserve := runRaceReserve()
	for i := range roots {
		root, _ := runOf(i)
		child, _ := runOf(i + roots)
		r, c := getRun(t, svc, root), getRun(t, svc, child)
		t.Logf("%s: %d steps, %d tokens, %s; %s: %d steps, %d tokens", root, r.Requests, r.Tokens, r.State, child, c.Requests, c.Tokens)
		for _, x := range []policy.RunUsage{r, c} {
			if x.Requests > 12 || x.Tokens > maxTokens || x.CallsInFlight != 0 {
				t.Errorf("%s: %d steps, %d tokens, %d calls in flight; want at most 12 and %d, none in flight", x.ID, x.Requests, x.Tokens, x.CallsInFlight, maxTokens)
			}
		}
		if r.Requests != admitted[root]+admitted[child] || c.Requests != admitted[child] {
			t.Errorf("%s counted %d steps and %s %d; the gateway admitted %d and %d", root, r.Requests, child, c.Requests, admitted[root], admitted[child])
		}
		if r.Requests < 12 && r.Tokens <= maxTokens-reserve {
			t.Errorf("%s stopped at %d steps and %d tokens: within a call of neither budget", root, r.Requests, r.Tokens)
		}
	}
}

// 64 clients at once drive 8 runs of one user, two levels deep, through
// the gateway, streamed and not, over both protocols: no run passes its
// budget.
func TestGatewayRunBudgetsUnderConcurrency(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	maxTokens := 10 * runRaceReserve()
	e.putTier("agents", runRaceTier(maxTokens))
	e.assign("alice", "agents")
	runRace(t, []string{e.server.URL}, key, e.svc, maxTokens)
}

// On PostgreSQL three replicas hold the runs' budgets together, and a
// run ended on one replica refuses its sub-agent's next call on another.
func TestGatewayReplicasShareRunBudgets(t *testing.T) {
	maxTokens := 10 * runRaceReserve()
	r, key := newReplicas(t, runRaceTier(maxTokens), db.WithStatementTimeout(time.Minute), db.WithBusyTimeout(time.Minute))
	runRace(t, r.urls, key, r.svc, maxTokens)

	ctx := context.Background()
	call := func(url, run, parent string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, url+"/llm/claude/v1/messages", strings.NewReader(messageBody))
		req.Header.Set("X-Api-Key", key)
		req.Header.Set("X-Guard-Run", run)
		if parent != "" {
			req.Header.Set("X-Guard-Parent-Run", parent)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return res.StatusCode, string(body)
	}
	if status, body := call(r.urls[0], "to-end", ""); status != http.StatusOK {
		t.Fatalf("%d %s", status, body)
	}
	if status, body := call(r.urls[1], "to-end-child", "to-end"); status != http.StatusOK {
		t.Fatalf("%d %s", status, body)
	}
	if _, err := r.svc.EndRun(ctx, "to-end"); err != nil {
		t.Fatal(err)
	}
	status, body := call(r.urls[2], "to-end-child", "")
	if b := readError(t, body); status != http.StatusForbidden || b.Error.Type != "permission_error" || !strings.Contains(b.Error.Message, `run "to-end-child"`) {
		t.Errorf("the child of an ended run on another replica: %d %s, want 403 naming it", status, body)
	}
}

// An agent ends its own run with the key it calls the gateway with: the
// run's sub-agent's next call is then a 403 naming it, in the protocol's
// shape; another user's key ends nothing.
func TestGatewayRunEndedByItsAgent(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	e.putTier("agents", runTier)
	e.assign("alice", "agents")
	e.assign("bob", "agents")
	bob := e.newKey("bob")
	for _, h := range []map[string]string{runHeaders(key, "task", ""), runHeaders(key, "task-sub", "task")} {
		if res, body := e.raw(http.MethodPost, "/llm/claude/v1/messages", messageBody, h); res.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", res.StatusCode, body)
		}
	}
	if res, body := e.raw(http.MethodPost, "/v1/runs/task/end", "", map[string]string{"Authorization": "Bearer " + bob}); res.StatusCode != http.StatusNotFound {
		t.Errorf("bob ends alice's run: %d %s, want 404", res.StatusCode, body)
	}
	res, body := e.raw(http.MethodPost, "/v1/runs/task/end", "", map[string]string{"Authorization": "Bearer " + key})
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `"state":"ended"`) {
		t.Fatalf("alice ends her run: %d %s", res.StatusCode, body)
	}
	res, body = e.raw(http.MethodPost, "/llm/claude/v1/messages", messageBody, runHeaders(key, "task-sub", ""))
	if b := readError(t, body); res.StatusCode != http.StatusForbidden || b.Error.Type != "permission_error" || b.Error.Message != `run "task-sub" was ended` {
		t.Errorf("the sub-agent's next call: %d %s, want 403 naming the run", res.StatusCode, body)
	}
}
