package web_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/policyguard/policyguard/policy"
)

// statsTable is one table of the overview as a reader sees it.
type statsTable struct {
	caption string
	headers []string
	rows    []map[string]string // by header
}

func pageTables(d *pageDoc) []statsTable {
	var out []statsTable
	for _, tbl := range d.find(func(n *html.Node) bool { return n.Data == "table" && pageAttr(n, "class") == "stats" }) {
		sub := &pageDoc{t: d.t, root: tbl}
		st := statsTable{}
		if cs := sub.find(func(n *html.Node) bool { return n.Data == "caption" }); len(cs) > 0 {
			st.caption = pageText(cs[0])
		}
		for _, th := range sub.find(func(n *html.Node) bool { return n.Data == "th" && pageAttr(n, "scope") == "col" }) {
			st.headers = append(st.headers, pageText(th))
		}
		for _, tr := range sub.find(func(n *html.Node) bool { return n.Data == "tr" }) {
			var cells []string
			for c := tr.FirstChild; c != nil; c = c.NextSibling {
				if c.Type == html.ElementNode && (c.Data == "td" || c.Data == "th" && pageAttr(c, "scope") == "row") {
					cells = append(cells, pageText(c))
				}
			}
			if len(cells) == 0 {
				continue
			}
			row := make(map[string]string)
			for i, v := range cells {
				if i < len(st.headers) {
					row[st.headers[i]] = v
				}
			}
			st.rows = append(st.rows, row)
		}
		out = append(out, st)
	}
	return out
}

// TestOverviewMatchesCheckAnswers runs a script of checks and reads the
// overview's tables: each bucket shows what the checks answered.
func TestOverviewMatchesCheckAnswers(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	ctx := context.Background()
	if _, _, err := e.svc.PutTier(ctx, policy.Tier{Name: "tight", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(2)), policy.RequestsPerHour: new(int64(6)), policy.RequestsPerDay: new(int64(100))}, Features: []string{"chat"}}); err != nil {
		t.Fatal(err)
	}
	type key struct{ minute, reason string }
	perMinute := map[key]int{}
	for step := range 40 {
		for _, u := range []string{"ann", "bob", "ann"}[:1+step%3] {
			perMinute[key{e.clock.Now().UTC().Format("15:04"), e.checkFeature(u, "tight", "chat")}]++
		}
		if step%5 == 0 {
			perMinute[key{e.clock.Now().UTC().Format("15:04"), e.checkFeature("cy", "tight", "search")}]++
		}
		e.clock.Advance(50 * time.Second)
	}
	if err := e.store.FlushCounts(ctx); err != nil {
		t.Fatal(err)
	}
	doc := parsePage(t, b.get("/admin/overview"), http.StatusOK)
	if nav := doc.find(func(n *html.Node) bool { return n.Data == "a" && pageAttr(n, "href") == "/admin/overview" }); len(nav) == 0 || pageText(nav[0]) != "Overview" {
		t.Error("no Overview link in the navigation")
	}
	svgs := doc.find(func(n *html.Node) bool { return n.Data == "svg" && pageAttr(n, "role") == "img" })
	if len(svgs) != 2 {
		t.Errorf("%d charts, want 2 (tier tight: hour and day)", len(svgs))
	}
	for _, s := range svgs {
		if pageAttr(s, "aria-label") == "" || pageAttr(s, "viewBox") == "" || pageAttr(s, "width") != "100%" {
			t.Errorf("chart %s: needs aria-label, viewBox and width 100%%", pageAttr(s, "id"))
		}
	}
	tables := pageTables(doc)
	var hour *statsTable
	for i := range tables {
		if strings.Contains(tables[i].caption, "tight") && strings.Contains(tables[i].caption, "last hour") {
			hour = &tables[i]
		}
	}
	if hour == nil {
		t.Fatalf("no table of tier tight, last hour; captions: %v", tables)
	}
	if got := strings.Join(hour.headers[:3], ","); got != "Time,Admitted,Refused" {
		t.Errorf("headers %v, want Time, Admitted, Refused first", hour.headers)
	}
	if len(hour.rows) != 60 {
		t.Errorf("%d rows, want 60", len(hour.rows))
	}
	columns := map[string]string{"minute": "Per-minute limit", "hour": "Per-hour limit", "feature": "Feature"}
	seen := map[string]bool{}
	for _, row := range hour.rows {
		m := row["Time"]
		admitted := perMinute[key{m, "admitted"}]
		refused := 0
		for r, col := range columns {
			n := perMinute[key{m, r}]
			refused += n
			if n > 0 {
				seen[r] = true
				if got := row[col]; got != fmt.Sprint(n) {
					t.Errorf("%s %s: %q, want %d", m, col, got, n)
				}
			}
		}
		if row["Admitted"] != fmt.Sprint(admitted) || row["Refused"] != fmt.Sprint(refused) {
			t.Errorf("%s: admitted %s refused %s, want %d and %d", m, row["Admitted"], row["Refused"], admitted, refused)
		}
	}
	for r := range columns {
		if !seen[r] {
			t.Errorf("the script produced no %s refusal", r)
		}
	}
	// The top users link to their page, which shows their day.
	links := doc.find(func(n *html.Node) bool {
		return n.Data == "a" && strings.HasPrefix(pageAttr(n, "href"), "/admin/usage?")
	})
	if len(links) == 0 {
		t.Fatal("no top user links")
	}
	user := parsePage(t, b.get(pageAttr(links[0], "href")), http.StatusOK)
	if user.byID("user-day") == nil || len(user.find(func(n *html.Node) bool { return n.Data == "svg" && pageAttr(n, "role") == "img" })) != 1 {
		t.Error("the user page has no chart of the user's day")
	}
	if !strings.Contains(user.raw, "Per-minute limit × 10: 20") {
		t.Error("the user page draws no per-minute limit line")
	}
}

// TestSessionsSurviveRestart signs in, restarts the service on the same
// database and is still signed in; a changed admin token and Sign out end
// the session.
func TestSessionsSurviveRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "test.db")
	clock := policy.NewTestClock(pageT0)
	first := newPageEnvAt(t, path, pageToken, clock)
	b := first.signIn()
	first.store.Close()

	second := newPageEnvAt(t, path, pageToken, clock)
	b.e = second
	if rec := b.get("/admin/overview"); rec.Code != http.StatusOK {
		t.Fatalf("after a restart: status %d, want 200 (still signed in)", rec.Code)
	}
	// 12 hours on, the session has expired.
	signedIn := clock.Now()
	clock.Advance(policy.Retention/2 + time.Second)
	if rec := b.get("/admin/overview"); rec.Code != http.StatusSeeOther {
		t.Fatalf("after 12 hours: status %d, want 303 to sign-in", rec.Code)
	}
	clock.Set(signedIn)
	b = second.signIn()
	other := *b
	// Sign out in one browser ends the session for every copy of it.
	if rec := b.post("/admin/logout", url.Values{}); rec.Code != http.StatusSeeOther {
		t.Fatalf("sign out: %d", rec.Code)
	}
	if rec := other.get("/admin/overview"); rec.Code != http.StatusSeeOther {
		t.Errorf("after sign out elsewhere: status %d, want 303", rec.Code)
	}
	// A new admin token ends every session of the old one.
	b = second.signIn()
	second.store.Close()
	third := newPageEnvAt(t, path, "another-token", clock)
	b.e = third
	if rec := b.get("/admin/overview"); rec.Code != http.StatusSeeOther {
		t.Errorf("after the admin token changed: status %d, want 303", rec.Code)
	}
	// The session rows are hashes: no cookie value is stored.
	third.store.Close()
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var n int
	if err := raw.QueryRow(`SELECT count(*) FROM admin_sessions WHERE id_hash = ? OR csrf = ?`, b.cookie.Value, b.cookie.Value).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Error("a session's cookie value is stored")
	}
}

// TestOverviewShowsCallsOfAnUnmeteredTier: the gateway opens a call for
// every request, whatever the tier's limits, so a tier that limits neither
// tokens nor calls still shows its calls in flight and the tokens they
// settled once it has some; a tier without any shows neither.
func TestOverviewShowsCallsOfAnUnmeteredTier(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	ctx := context.Background()
	for _, name := range []string{"plain", "quiet"} {
		if _, _, err := e.svc.PutTier(ctx, policy.Tier{Name: name, Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(10)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(1000))}}); err != nil {
			t.Fatal(err)
		}
	}
	var calls []string
	for range 3 {
		d, err := e.svc.Check(ctx, policy.Request{UserID: "ann", Tier: "plain", Tokens: 500, OpenCall: true}, false)
		if err != nil || d.CallID == "" {
			t.Fatalf("check: %v, call %q", err, d.CallID)
		}
		calls = append(calls, d.CallID)
	}
	if _, err := e.svc.Check(ctx, policy.Request{UserID: "bob", Tier: "quiet"}, false); err != nil {
		t.Fatal(err)
	}
	for _, id := range calls[:2] {
		if _, err := e.svc.FinishCall(ctx, id, policy.Report{Tokens: new(int64(120))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.store.FlushCounts(ctx); err != nil {
		t.Fatal(err)
	}
	doc := parsePage(t, b.get("/admin/overview"), http.StatusOK)
	inFlight := func(tier string) []*html.Node {
		return doc.find(func(n *html.Node) bool {
			return pageAttr(n, "data-field") == "calls_in_flight" && n.Parent != nil && pageAttr(n.Parent, "id") == "traffic-"+tier
		})
	}
	if got := inFlight("plain"); len(got) != 1 || !strings.Contains(pageText(got[0]), "1") {
		t.Errorf("tier plain: calls in flight %v, want one line saying 1", got)
	}
	if got := inFlight("quiet"); len(got) != 0 {
		t.Errorf("tier quiet opened no call, yet shows calls in flight")
	}
	settled := map[string]int{}
	for _, tbl := range pageTables(doc) {
		for _, tier := range []string{"plain", "quiet"} {
			if !strings.Contains(tbl.caption, tier) || !strings.Contains(tbl.caption, "last day") || !slices.Contains(tbl.headers, "Tokens settled") {
				continue
			}
			for _, row := range tbl.rows {
				var n int
				fmt.Sscan(row["Tokens settled"], &n)
				settled[tier] += n
			}
		}
	}
	if settled["plain"] != 240 {
		t.Errorf("tier plain: %d tokens settled in the day's table, want 240", settled["plain"])
	}
	if _, ok := settled["quiet"]; ok {
		t.Error("tier quiet settled no tokens, yet its day's table has the column")
	}
}

// TestOverviewShowsSpendPerTier: a tier whose calls cost something, or
// that limits spend, shows its spend over the last day by hour, in a chart
// and its table, each hour the cost of the calls settled in it; a tier
// whose calls cost nothing and that limits no spend shows none.
func TestOverviewShowsSpendPerTier(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	ctx := context.Background()
	usd := func(s string) policy.Money {
		m, err := policy.ParseMoney(s)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if _, err := e.svc.PutPrices(ctx, nil, []policy.Price{{Model: "m", Input: usd("1"), Output: usd("2"), CacheRead: usd("0.5"), CacheWrite: usd("1.25")}}); err != nil {
		t.Fatal(err)
	}
	limit := int64(usd("20"))
	for _, tr := range []policy.Tier{
		{Name: "paid", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(100)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(10000)), policy.CostPerDay: &limit}},
		{Name: "priced", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(100)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(10000))}},
		{Name: "free", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(100)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(10000))}},
	} {
		if _, _, err := e.svc.PutTier(ctx, tr); err != nil {
			t.Fatal(err)
		}
	}
	// call opens a call of model in tier and settles it at usage.
	call := func(user, tier, model string, u policy.TokenUsage) {
		t.Helper()
		d, err := e.svc.Check(ctx, policy.Request{UserID: user, Tier: tier, Model: model, Tokens: u.Total(), OpenCall: true}, false)
		if err != nil || d.CallID == "" {
			t.Fatalf("check: %v, call %q", err, d.CallID)
		}
		if _, err := e.svc.FinishCall(ctx, d.CallID, policy.Report{Usage: &u}); err != nil {
			t.Fatal(err)
		}
	}
	// Two hours of tier paid: 1,000 input and 500 output tokens ($0.002,
	// at $1 and $2 per million), then 4,000 input, 2,000 cache read and
	// 250 output tokens ($0.0055); tier priced's 1,000 input tokens
	// ($0.001); tier free's call of a model without a price (no cost).
	call("ann", "paid", "m", policy.TokenUsage{Input: 1000, Output: 500})
	call("cat", "priced", "m", policy.TokenUsage{Input: 1000})
	e.clock.Advance(time.Hour)
	call("ann", "paid", "m", policy.TokenUsage{Input: 4000, CacheRead: 2000, Output: 250})
	call("bob", "free", "unpriced", policy.TokenUsage{Input: 1000, Output: 500})
	if err := e.store.FlushCounts(ctx); err != nil {
		t.Fatal(err)
	}
	doc := parsePage(t, b.get("/admin/overview"), http.StatusOK)
	spend := map[string]map[string]string{} // tier → hour → spend
	for _, tbl := range pageTables(doc) {
		if !strings.Contains(tbl.caption, "spend settled") {
			continue
		}
		tier := strings.Fields(tbl.caption)[1]
		tier = strings.TrimSuffix(tier, ",")
		spend[tier] = map[string]string{}
		for _, row := range tbl.rows {
			if s := row["Spend settled"]; s != "$0" {
				spend[tier][row["Time"]] = s
			}
		}
	}
	h0, h1 := pageT0.UTC().Format("15:00"), pageT0.UTC().Add(time.Hour).Format("15:00")
	want := map[string]map[string]string{
		"paid":   {h0: "$0.002", h1: "$0.0055"},
		"priced": {h0: "$0.001"},
	}
	if fmt.Sprint(spend) != fmt.Sprint(want) {
		t.Errorf("spend tables %v, want %v", spend, want)
	}
	totals := doc.find(func(n *html.Node) bool { return pageAttr(n, "data-field") == "spend_total" })
	var got []string
	for _, n := range totals {
		got = append(got, pageText(n))
	}
	if strings.Join(got, " ") != "$0.0075 $0.001" {
		t.Errorf("spend totals %v, want $0.0075 (paid) and $0.001 (priced)", got)
	}
	charts := doc.find(func(n *html.Node) bool {
		return n.Data == "svg" && strings.HasSuffix(pageAttr(n, "id"), "-spend") && strings.Contains(pageAttr(n, "aria-label"), "per-day spend limit $20")
	})
	if len(charts) != 1 {
		t.Errorf("%d spend charts of tier paid naming its limit, want 1", len(charts))
	}
}
