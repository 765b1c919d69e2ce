package web_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
	"github.com/policyguard/policyguard/web"
)

// changeRows returns the rows of the Recent changes table, each as its
// data-field cells plus "tier".
func changeRows(d *pageDoc) []map[string]string {
	d.t.Helper()
	section := d.byID("changes")
	if section == nil {
		d.t.Fatal("no Recent changes section")
	}
	sub := &pageDoc{t: d.t, root: section}
	var rows []map[string]string
	for _, tr := range sub.find(func(n *html.Node) bool { return n.Data == "tr" }) {
		row := &pageDoc{t: d.t, root: tr}
		ths := row.find(func(n *html.Node) bool { return n.Data == "th" && pageAttr(n, "scope") == "row" })
		if len(ths) == 0 {
			continue // the header row, or "No changes yet"
		}
		r := map[string]string{"tier": pageText(ths[0])}
		for _, n := range row.find(func(n *html.Node) bool { return pageAttr(n, "data-field") != "" }) {
			r[pageAttr(n, "data-field")] = pageText(n)
		}
		rows = append(rows, r)
	}
	return rows
}

// The tiers page lists every change, from the admin page, the JSON API and
// an import by another process on the same file, newest first, with what
// changed and the tier before and after in Config.TierJSON's words, and
// escapes what it shows.
func TestAdminPageShowsRecentChanges(t *testing.T) {
	path := dbtest.DSN(t, "audit.db")
	ctx := context.Background()
	store, err := db.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	clock := policy.NewTestClock(pageT0)
	svc := policy.NewService(store, store, policy.WithClock(clock.Now))
	srv := newPageServer(web.Config{Service: svc, Gate: policy.NewAdminGate(pageToken), TierJSON: pageTierJSON})
	e := &pageEnv{t: t, srv: srv, svc: svc, clock: clock}
	b := e.signIn()

	if rows := changeRows(parsePage(t, b.get("/admin"), http.StatusOK)); len(rows) != 0 {
		t.Fatalf("changes before any: %v", rows)
	}

	// Through the admin page.
	form := pageTierForm(e.tier("free"))
	form.Set("requests_per_minute", "12")
	form.Set("description", `<script>alert("x")</script>`)
	b.follow(b.post("/admin/tiers/free", form), "/admin")

	// Through the JSON API, which deletes a tier so.
	clock.Advance(time.Minute)
	if err := svc.DeleteTier(policy.WithChangeSource(ctx, policy.SourceAPI), "enterprise"); err != nil {
		t.Fatal(err)
	}

	// Through an import by another process on the same file.
	other, err := db.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	importer := policy.NewService(other, other, policy.WithClock(func() time.Time { return pageT0.Add(2 * time.Minute) }))
	team := policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(5)), policy.RequestsPerHour: new(int64(50)), policy.RequestsPerDay: new(int64(500))}, Features: []string{"chat"}}
	if _, err := importer.ImportTiers(ctx, []policy.Tier{team}, false); err != nil {
		t.Fatal(err)
	}

	doc := parsePage(t, b.get("/admin"), http.StatusOK)
	if doc.byID("tier-team") == nil {
		t.Error("the imported tier is not in the tiers table")
	}
	rows := changeRows(doc)
	want := []map[string]string{
		{"tier": "team", "kind": "created", "source": "import"},
		{"tier": "enterprise", "kind": "deleted", "source": "api"},
		{"tier": "free", "kind": "updated", "source": "admin"},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d: %v", len(rows), len(want), rows)
	}
	for i, w := range want {
		for k, v := range w {
			if rows[i][k] != v {
				t.Errorf("row %d %s = %q, want %q", i, k, rows[i][k], v)
			}
		}
	}
	for _, s := range []string{"requests_per_minute: 10 → 12", `description: "Free plan: chat only, low limits." → "<script>alert(\"x\")</script>"`} {
		if !strings.Contains(rows[2]["details"], s) {
			t.Errorf("free's change %q does not say %q", rows[2]["details"], s)
		}
	}
	if !strings.Contains(rows[0]["details"], `After: {"name":"team","requests_per_minute":5`) {
		t.Errorf("team's change %q lacks its JSON", rows[0]["details"])
	}
	if strings.Contains(doc.raw, "<script>") {
		t.Error("the page carries an unescaped <script> from a tier description")
	}
}

// Without Config.TierJSON the audit log lists the changes without their
// JSON.
func TestAdminPageChangesWithoutTierJSON(t *testing.T) {
	store, err := db.Open(context.Background(), dbtest.DSN(t, "audit.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	clock := policy.NewTestClock(pageT0)
	svc := policy.NewService(store, store, policy.WithClock(clock.Now))
	e := &pageEnv{t: t, srv: newPageServer(web.Config{Service: svc, Gate: policy.NewAdminGate(pageToken)}), svc: svc, clock: clock}
	if err := svc.DeleteTier(context.Background(), "enterprise"); err != nil {
		t.Fatal(err)
	}
	doc := parsePage(t, e.signIn().get("/admin"), http.StatusOK)
	rows := changeRows(doc)
	if len(rows) != 1 || rows[0]["kind"] != "deleted" {
		t.Fatalf("rows %v, want the deletion", rows)
	}
	if strings.Contains(rows[0]["details"], "Before:") || strings.Contains(doc.raw, "<summary>JSON</summary>") {
		t.Errorf("the change shows JSON without Config.TierJSON: %q", rows[0]["details"])
	}
}
