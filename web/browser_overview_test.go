package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
	"github.com/policyguard/policyguard/web"
)

// browserService is the admin page over real HTTP on the database at
// path, on clock, with the service it shows; stop closes the server and
// the store, as a shutdown does.
func browserService(t *testing.T, path, token string, clock *policy.TestClock) (url string, svc *policy.Service, store *db.Store, stop func()) {
	t.Helper()
	store, err := db.Open(context.Background(), path, db.WithSynchronous(db.SyncNormal))
	if err != nil {
		t.Fatal(err)
	}
	svc = policy.NewService(store, store, policy.WithClock(clock.Now), policy.WithStats(store, store))
	srv := httptest.NewServer(newPageServer(web.Config{Service: svc, Gate: policy.NewAdminGate(token), TierJSON: pageTierJSON, Sessions: store}))
	return srv.URL, svc, store, func() { srv.Close(); store.Close() }
}

// TestBrowserOverview drives a scripted run of checks on a test clock,
// reads the overview's tables in headless Chromium and compares them with
// what the checks answered, opens a user's page from the top users, then
// restarts the service on the same database and finds the admin still
// signed in.
func TestBrowserOverview(t *testing.T) {
	chromium := chromiumPath(t)
	path := filepath.Join(t.TempDir(), "test.db")
	const token = "browser-test-token"
	clock := policy.NewTestClock(time.Date(2026, 5, 4, 9, 0, 0, 0, time.UTC))
	base, svc, store, stop := browserService(t, path, token, clock)
	defer func() { stop() }()
	ctx := context.Background()
	if _, err := store.UpdateTiers(ctx, policy.TierUpdate{At: clock.Now(), Source: policy.SourceAPI, Put: []policy.Tier{
		{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(4)), policy.RequestsPerHour: new(int64(60)), policy.RequestsPerDay: new(int64(400)), policy.BurstAllowance: new(int64(1))}, Features: []string{"chat"}, UpdatedAt: clock.Now()},
	}}); err != nil {
		t.Fatal(err)
	}

	// The script: six hours of traffic on two tiers, in steps of two
	// minutes, each answer tallied per minute and per hour.
	type key struct {
		per    string // "hour" tables count per minute, "day" tables per hour
		tier   string
		bucket time.Time
		reason string
	}
	tally := map[key]int{}
	check := func(user, tier, feature string) {
		t.Helper()
		d, err := svc.Check(ctx, policy.Request{UserID: user, Tier: tier, Feature: feature}, false)
		if err != nil {
			t.Fatal(err)
		}
		reason := map[policy.Outcome]string{policy.Admitted: "admitted", policy.Denied: "feature"}[d.Outcome]
		if d.Outcome == policy.RateLimited {
			reason = strings.TrimSuffix(strings.TrimPrefix(d.Reason, "per-"), " limit exceeded")
		}
		now := clock.Now()
		tally[key{"hour", tier, now.Truncate(time.Minute), reason}]++
		tally[key{"day", tier, now.Truncate(time.Hour), reason}]++
	}
	for step := range 180 {
		burst := 1 + step%5
		if step > 150 {
			burst = 9 // a busy last hour: past the hour's limit
		}
		if step%20 == 0 {
			burst = 12 // a spike: past the minute's limit
		}
		for i := range burst {
			check(fmt.Sprintf("agent-%d", i%3), "team", "chat")
		}
		check("free-user", "free", "")
		if step%9 == 0 {
			check("agent-0", "team", "search")
		}
		clock.Advance(2 * time.Minute)
	}
	if err := store.FlushCounts(ctx); err != nil {
		t.Fatal(err)
	}

	bctx := newBrowser(t, chromium)
	step := stepper(t, bctx)
	step("sign in",
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(base+"/admin"),
		chromedp.WaitVisible(chromedp.CSS("#admin-token")),
		chromedp.SendKeys(chromedp.CSS("#admin-token"), token),
		chromedp.Click(chromedp.Search(`//button[normalize-space(.)="Sign in"]`)),
		chromedp.WaitVisible(chromedp.CSS("#tier-free")),
	)
	step("open the overview",
		chromedp.Click(chromedp.Search(`//nav//a[normalize-space(.)="Overview"]`)),
		chromedp.WaitVisible(chromedp.CSS("#traffic-team")),
	)

	// Read every table as a screen reader would find it.
	raw, err := chromedp.Run(bctx, chromedp.Evaluate[string](`JSON.stringify([...document.querySelectorAll("table.stats")].map(t => ({
		caption: t.caption.textContent.trim(),
		headers: [...t.tHead.rows[0].cells].map(c => c.textContent.trim()),
		rows: [...t.tBodies[0].rows].map(r => [...r.cells].map(c => c.textContent.trim())),
		times: [...t.tBodies[0].rows].map(r => r.querySelector("time").getAttribute("datetime")),
	})))`))
	if err != nil {
		t.Fatal(err)
	}
	var tables []struct {
		Caption string
		Headers []string
		Rows    [][]string
		Times   []string
	}
	if err := json.Unmarshal([]byte(raw), &tables); err != nil {
		t.Fatal(err)
	}
	if len(tables) != 4 {
		t.Fatalf("%d tables, want 4 (free and team, hour and day)", len(tables))
	}
	compared := 0
	for _, tbl := range tables {
		tier := "team"
		if strings.Contains(tbl.Caption, "Tier free") {
			tier = "free"
		}
		per := "day"
		if strings.Contains(tbl.Caption, "last hour") {
			per = "hour"
		} else if !strings.Contains(tbl.Caption, "last day") {
			t.Errorf("caption %q names no period", tbl.Caption)
		}
		if len(tbl.Headers) < 3 || tbl.Headers[0] != "Time" || tbl.Headers[1] != "Admitted" || tbl.Headers[2] != "Refused" {
			t.Fatalf("%s: headers %v", tbl.Caption, tbl.Headers)
		}
		labels := map[string]string{"Per-minute limit": "minute", "Per-hour limit": "hour", "Per-day limit": "day", "Feature": "feature"}
		for i, row := range tbl.Rows {
			at, err := time.Parse(time.RFC3339, tbl.Times[i])
			if err != nil {
				t.Fatal(err)
			}
			refused := 0
			for j, h := range tbl.Headers[3:] {
				if r, ok := labels[h]; ok {
					refused += tally[key{per, tier, at, r}]
					if want := fmt.Sprint(tally[key{per, tier, at, r}]); row[3+j] != want {
						t.Errorf("%s, %s, %s: %s, want %s", tbl.Caption, row[0], h, row[3+j], want)
					}
				}
			}
			if want := fmt.Sprint(tally[key{per, tier, at, "admitted"}]); row[1] != want {
				t.Errorf("%s, %s: admitted %s, want %s", tbl.Caption, row[0], row[1], want)
			}
			if want := fmt.Sprint(refused); row[2] != want {
				t.Errorf("%s, %s: refused %s, want %s", tbl.Caption, row[0], row[2], want)
			}
			compared++
		}
	}
	t.Logf("compared %d rows of the overview with the answers of the checks", compared)
	browserScreenshot(t, bctx, "admin-overview.png")

	// At phone width the overview fits without sideways scrolling.
	step("phone width",
		chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)),
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS("#traffic-team")),
	)
	fits, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth <= window.innerWidth`))
	if err != nil || !fits {
		t.Errorf("the overview is wider than a 390px screen (%v)", err)
	}
	browserScreenshot(t, bctx, "admin-overview-phone.png")

	step("open a top user's page",
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(base+"/admin/overview"),
		chromedp.WaitVisible(chromedp.CSS("#top-day")),
		chromedp.Click(chromedp.CSS("#top-day tbody a")),
		chromedp.WaitVisible(chromedp.CSS("#user-day svg[role=img]")),
	)
	browserScreenshot(t, bctx, "admin-user.png")
	if os.Getenv("UPDATE_SCREENSHOTS") != "" {
		browserCopyFile(t, filepath.Join(browserArtifacts, "admin-overview.png"), "admin-overview.png")
		browserCopyFile(t, filepath.Join(browserArtifacts, "admin-user.png"), "admin-user.png")
	}

	// Restart: the same database, a new process's server. The cookie is
	// the browser's; the session is the database's.
	stop()
	base, _, _, stop = browserService(t, path, token, clock)
	step("after a restart",
		chromedp.Navigate(base+"/admin/overview"),
		chromedp.WaitVisible(chromedp.CSS("#traffic-team")),
	)
	if title, err := chromedp.Run(bctx, chromedp.Title()); err != nil || !strings.HasPrefix(title, "Overview") {
		t.Errorf("after a restart the page is %q (%v), want the overview: still signed in", title, err)
	}
}
