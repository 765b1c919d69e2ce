package web_test

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/policyguard/policyguard/policy"
)

// putAgentsTier stores tier "agents": loose limits of its own, and a run
// object of 5 steps, 10,000 tokens, $2.50 and 3 calls at once.
func (e *pageEnv) putAgentsTier() {
	e.t.Helper()
	t := policy.Tier{Name: "agents",
		Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(100)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(10000))},
		Run: &policy.LimitSet{policy.MaxRunRequests: new(int64(5)), policy.MaxRunTokens: new(int64(10000)),
			policy.MaxRunCost: new(int64(2_500_000_000_000)), policy.MaxConcurrent: new(int64(3))}}
	if _, _, err := e.svc.PutTier(context.Background(), t); err != nil {
		e.t.Fatal(err)
	}
	// A run's max_cost needs each step's model priced; this one is free.
	if _, err := e.svc.PutPrices(context.Background(), nil, []policy.Price{{Model: "m"}}); err != nil {
		e.t.Fatal(err)
	}
}

// runCheck decides a check of user in run (with parent, when not "")
// reserving tokens, and returns its call's id.
func (e *pageEnv) runCheck(user, run, parent string, tokens int64) string {
	e.t.Helper()
	d, err := e.svc.Check(context.Background(), policy.Request{UserID: user, Tier: "agents", RunID: run, ParentRunID: parent, Tokens: tokens, Model: "m"}, false)
	if err != nil || !d.Allowed() {
		e.t.Fatalf("check in run %s: %+v, %v", run, d, err)
	}
	return d.CallID
}

// A user's page lists the user's runs, open first, each with its use
// against its limits, its state and its parent; an admin's End run
// button ends a run and its sub-runs at once, whose next request is then
// refused. The form needs the session's CSRF token and the admin role;
// a run no longer open has no button.
func TestRunsOnTheUserPage(t *testing.T) {
	e := newPageEnv(t)
	e.putAgentsTier()
	ctx := context.Background()
	b := e.signIn()

	doc := parsePage(t, b.get("/admin/usage?user_id=alice"), http.StatusOK)
	if got := doc.text("runs-heading"); got != "Agent runs of user alice" {
		t.Fatalf("runs heading %q", got)
	}
	if got := doc.cell("runs", "no-runs"); !strings.HasPrefix(got, "No runs") {
		t.Fatalf("before any run: %q", got)
	}

	// An old run used up, then a run with a sub-run and a call in flight.
	for range 5 {
		e.clock.Advance(time.Second)
		id := e.runCheck("alice", "old", "", 100)
		if _, err := e.svc.FinishCall(ctx, id, policy.Report{Tokens: new(int64(100))}); err != nil {
			t.Fatal(err)
		}
	}
	e.clock.Advance(time.Minute)
	e.runCheck("alice", "r-42", "", 1000)           // in flight
	e.runCheck("alice", "r-42-search", "r-42", 500) // in flight
	e.runCheck("bob", "b-1", "", 0)                 // another user's
	doc = parsePage(t, b.get("/admin/usage?user_id=alice"), http.StatusOK)
	var order []string
	for _, n := range doc.find(func(n *html.Node) bool { return pageAttr(n, "data-field") == "id" && n.Data == "code" }) {
		order = append(order, pageText(n))
	}
	if got := strings.Join(order, " "); got != "r-42-search r-42 old" && got != "r-42 r-42-search old" {
		t.Errorf("runs listed %q, want the open ones first, then old, and not bob's", got)
	}
	for _, tc := range []struct{ row, field, want string }{
		{"run-r-42", "state", "open"},
		{"run-r-42", "parent", "—"},
		{"run-r-42", "requests", "2 of 5"},
		{"run-r-42", "tokens", "1,500 of 10,000"},
		{"run-r-42", "cost", "$0 of $2.5"},
		{"run-r-42", "in-flight", "2 of 3"},
		{"run-r-42-search", "parent", "r-42"},
		{"run-r-42-search", "requests", "1 of 5"},
		{"run-old", "state", "exhausted"},
		{"run-old", "requests", "5 of 5"},
		{"run-old", "tokens", "500 of 10,000"},
	} {
		if got := doc.cell(tc.row, tc.field); got != tc.want {
			t.Errorf("%s %s: %q, want %q", tc.row, tc.field, got, tc.want)
		}
	}
	if got := doc.buttons(); !slices.Contains(got, "End run") || strings.Count(doc.raw, ">End run</button>") != 2 {
		t.Errorf("End run buttons: %d, want one per open run", strings.Count(doc.raw, ">End run</button>"))
	}

	// Without the CSRF token: refused, nothing ended.
	if rec := b.post("/admin/runs/end", url.Values{"run_id": {"r-42"}, "csrf": {"wrong"}}); rec.Code != http.StatusForbidden {
		t.Fatalf("end a run without the CSRF token: %d", rec.Code)
	}
	// A support admin may not end runs, and is shown no button.
	_, tok, err := e.svc.CreateAdmin(ctx, "sam", policy.RoleSupport, "")
	if err != nil {
		t.Fatal(err)
	}
	sam := e.signInWith(tok)
	if doc := parsePage(t, sam.get("/admin/usage?user_id=alice"), http.StatusOK); strings.Contains(doc.raw, ">End run</button>") {
		t.Error("a support admin is shown End run")
	}
	if rec := sam.post("/admin/runs/end", url.Values{"run_id": {"r-42"}}); rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "role admin") {
		t.Errorf("a support admin ends a run: %d, want 403 naming the role admin", rec.Code)
	}
	if r, _ := e.svc.GetRun(ctx, "r-42"); r.State != policy.RunOpen {
		t.Fatalf("r-42 is %s after the refused forms", r.State)
	}

	doc = b.follow(b.post("/admin/runs/end", url.Values{"run_id": {"r-42"}}), "/admin/usage?user_id=alice")
	if got := doc.flash(); !strings.Contains(got, `Ended run "r-42" and its sub-runs`) {
		t.Errorf("flash %q", got)
	}
	for _, id := range []string{"r-42", "r-42-search"} {
		if got := doc.cell("run-"+id, "state"); got != "ended" {
			t.Errorf("%s: %q, want ended", id, got)
		}
	}
	if strings.Contains(doc.raw, ">End run</button>") {
		t.Error("an ended run still has its End run button")
	}
	d, err := e.svc.Check(ctx, policy.Request{UserID: "alice", Tier: "agents", RunID: "r-42-search", Model: "m"}, false)
	if err != nil || d.Outcome != policy.Denied || d.Reason != `run "r-42-search" was ended` {
		t.Errorf("the sub-run's next request: %+v, %v; want refused as ended", d, err)
	}
	if r, _ := e.svc.GetRun(ctx, "b-1"); r.State != policy.RunOpen {
		t.Errorf("bob's run is %s, want open", r.State)
	}
	parsePage(t, b.post("/admin/runs/end", url.Values{"run_id": {"nope"}}), http.StatusNotFound)
}
