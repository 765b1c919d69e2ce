package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
	"github.com/policyguard/policyguard/web"
)

// The Prices page: no version at first; a table typed into the form is a
// new version in force at once, shown with every price and in the
// history; a later one is scheduled; a bad line is said by its number and
// saves nothing; an older version can be looked at.
func TestPricesPage(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	doc := parsePage(t, b.get("/admin/prices"), http.StatusOK)
	if got := doc.text("shown"); !strings.Contains(got, "No version is in force") {
		t.Fatalf("before any version: %q", got)
	}

	// Without the CSRF token: refused, nothing saved.
	if rec := b.post("/admin/prices", url.Values{"prices": {"m 1 2"}, "csrf": {"wrong"}}); rec.Code != http.StatusForbidden {
		t.Fatalf("save without the CSRF token: %d", rec.Code)
	}
	for _, tt := range []struct{ name, table, from, field, want string }{
		{"too few words", "gpt-4o 2.5", "", "prices-table-error", "line 1: write MODEL[@UPSTREAM] INPUT OUTPUT [CACHE_READ [CACHE_WRITE]], not 2 words"},
		{"bad decimal", "# a comment\n\ngpt-4o 2.5 ten", "", "prices-table-error", `line 3, output price: "ten" is not a decimal amount`},
		{"finer than the unit", "gpt-4o 0.0000000000001 1", "", "prices-table-error", "line 1, input price: \"0.0000000000001\" is finer than a picodollar"},
		{"duplicate", "a 1 1\nb 1 1\na 2 2", "", "prices-table-error", "line 3: a is listed again (first on line 1)"},
		{"inner star", "a*b 1 1", "", "prices-table-error", "line 1: model may hold '*' only as its last character"},
		{"bad time", "a 1 1", "tomorrow", "effective-from-error", "must be an RFC 3339 time"},
		{"past", "a 1 1", "2026-05-04T11:00:00Z", "effective-from-error", "is before now"},
	} {
		doc := parsePage(t, b.post("/admin/prices", url.Values{"prices": {tt.table}, "effective_from": {tt.from}}), http.StatusBadRequest)
		if got := doc.text(tt.field); !strings.Contains(got, tt.want) {
			t.Errorf("%s: %s = %q, want %q", tt.name, tt.field, got, tt.want)
		}
		// pageText collapses white space, as a reader sees it.
		if got, want := pageValue(doc.control("Prices")), strings.Join(strings.Fields(tt.table), " "); got != want {
			t.Errorf("%s: the form lost the table typed: %q", tt.name, got)
		}
	}
	if versions, _ := e.svc.PriceVersions(t.Context()); len(versions) != 0 {
		t.Fatalf("refused forms saved %d versions", len(versions))
	}

	doc = b.follow(b.post("/admin/prices", url.Values{"prices": {"gpt-4o-mini 0.15 0.6 0.075\nclaude-*@anthropic 3 15 0.3 3.75\n"}}), "/admin/prices")
	if got := doc.flash(); !strings.HasPrefix(got, "Saved version 1: 2 entries, in force from 2026-05-04 12:00:00 UTC") {
		t.Errorf("flash %q", got)
	}
	if got := doc.text("shown-heading"); got != "In force: version 1" {
		t.Errorf("heading %q", got)
	}
	if got := doc.cell("shown", "cache_write"); got != "3.75" { // the first row: claude-* sorts first
		t.Errorf("claude-* cache write %q", got)
	}
	if got := doc.cell("version-1", "source"); got != "admin" {
		t.Errorf("source %q", got)
	}
	if got := doc.cell("version-1", "details"); !strings.Contains(got, "added gpt-4o-mini: input 0.15, output 0.6, cache_read 0.075, cache_write 0.15") {
		t.Errorf("history %q", got)
	}
	// The form holds the table in force, every price written out.
	if got := pageValue(doc.control("Prices")); got != "claude-*@anthropic 3 15 0.3 3.75 gpt-4o-mini 0.15 0.6 0.075 0.15" {
		t.Errorf("form table %q", got)
	}
	p, _, ok := e.svc.PriceOf("claude-3-haiku", "anthropic", e.clock.Now())
	if !ok || p.Output.String() != "15" {
		t.Errorf("PriceOf after the save: %+v, %v", p, ok)
	}
	if _, _, ok := e.svc.PriceOf("claude-3-haiku", "bedrock", e.clock.Now()); ok {
		t.Error("an entry for one upstream priced another")
	}

	later := e.clock.Now().Add(time.Hour).Format(time.RFC3339)
	doc = b.follow(b.post("/admin/prices", url.Values{"prices": {"gpt-4o-mini 0.2 0.8"}, "effective_from": {later}}), "/admin/prices")
	if got := doc.text("shown-heading"); got != "In force: version 1" {
		t.Errorf("after scheduling version 2: heading %q", got)
	}
	if got := doc.cell("version-2", "scheduled"); got != "scheduled" {
		t.Errorf("version 2 badge %q", got)
	}
	if got := doc.cell("version-2", "details"); !strings.Contains(got, "gpt-4o-mini: input 0.15 → 0.2, output 0.6 → 0.8") || !strings.Contains(got, "removed claude-*@anthropic") {
		t.Errorf("version 2 changes %q", got)
	}
	e.clock.Advance(time.Hour)
	doc = parsePage(t, b.get("/admin/prices"), http.StatusOK)
	if got := doc.text("shown-heading"); got != "In force: version 2" {
		t.Errorf("an hour later: heading %q", got)
	}
	doc = parsePage(t, b.get("/admin/prices?version=1"), http.StatusOK)
	if got := doc.text("shown-heading"); got != "Version 1" {
		t.Errorf("version 1 asked for: heading %q", got)
	}
	parsePage(t, b.get("/admin/prices?version=9"), http.StatusNotFound)
}

// With the gateway's upstreams known, an entry may name only one of them.
func TestPricesPageUpstreams(t *testing.T) {
	e := newPageEnv(t)
	e.srv = newPageServer(web.Config{Service: e.svc, Gate: policy.NewAdminGate(pageToken), Sessions: e.store, Upstreams: []string{"openai"}})
	b := e.signIn()
	doc := parsePage(t, b.post("/admin/prices", url.Values{"prices": {"m@azure 1 1"}}), http.StatusBadRequest)
	if got := doc.text("prices-table-error"); got != `line 1: "azure" is not an upstream of the gateway (openai)` {
		t.Errorf("unknown upstream: %q", got)
	}
	b.follow(b.post("/admin/prices", url.Values{"prices": {"m@openai 1 1"}}), "/admin/prices")
}
