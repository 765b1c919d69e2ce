package web_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
	"github.com/policyguard/policyguard/web"
)

// browserArtifacts is where the browser test saves its screenshots: the
// repository's testdata/artifacts, which git ignores.
var browserArtifacts = filepath.Join("..", "testdata", "artifacts")

// chromiumPath returns the browser to drive. Without one the test fails
// under CI=true, where a missing browser is a broken machine, and skips
// elsewhere.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const msg = "chromium not found: install it with apt-get install -y chromium"
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// TestBrowserAdminEditsTier signs in to the admin page in headless Chromium,
// lowers the free tier's per-minute limit, and proves through the service's
// checks that the new limit is the one enforced.
func TestBrowserAdminEditsTier(t *testing.T) {
	chromium := chromiumPath(t)
	start := time.Now()

	// The real service over real HTTP, on a temp database.
	store, err := db.Open(context.Background(), dbtest.DSN(t, "test.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	svc := policy.NewService(store, store, policy.WithUsers(store))
	const token = "browser-test-token"
	srv := httptest.NewServer(newPageServer(web.Config{Service: svc, Gate: policy.NewAdminGate(token), TierJSON: pageTierJSON}))
	defer srv.Close()

	ctx := newBrowser(t, chromium)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	t.Logf("chromium started in %v", time.Since(start).Round(time.Millisecond))

	// Record every request the page makes and every console error, such as
	// a resource the Content-Security-Policy blocked.
	var mu sync.Mutex
	var requests, problems []string
	if err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			requests = append(requests, ev.Request.URL)
		case *log.EventEntryAdded:
			// The form sent back with errors is answered 400 on purpose.
			expected := ev.Entry.Source == log.EntrySourceNetwork && ev.Entry.URL == srv.URL+"/admin/tiers/free"
			if ev.Entry.Level == log.EntryLevelError && !expected {
				problems = append(problems, ev.Entry.Text)
			}
		case *runtime.EventExceptionThrown:
			problems = append(problems, ev.ExceptionDetails.Text)
		}
	}); err != nil {
		t.Fatal(err)
	}

	step := stepper(t, ctx)
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	// field finds a control by its visible label, as a person would.
	field := func(label string) chromedp.ID {
		t.Helper()
		xpath := fmt.Sprintf(`//label[normalize-space(.)=%q]`, label)
		res, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.Search(xpath), "for"))
		if err != nil || res.Value == "" {
			t.Fatalf("label %q: %v", label, err)
		}
		return chromedp.ID(res.Value)
	}

	minuteLimit := browserMinuteLimit(t, svc, "before-edit")
	if minuteLimit != 15 {
		t.Fatalf("free tier's minute ceiling before the edit %d, want 15", minuteLimit)
	}

	// Signed out, /admin leads to the sign-in form.
	step("open /admin", chromedp.Navigate(srv.URL+"/admin"))
	tokenInput := field("Admin token")
	browserScreenshot(t, ctx, "admin-login.png")
	step("sign in",
		chromedp.SendKeys(tokenInput, token),
		chromedp.Click(button("Sign in")),
		chromedp.WaitVisible(chromedp.CSS("#tier-free")),
	)
	if got := text("#tier-free [data-field=requests_per_minute]"); got != "10" {
		t.Fatalf("free tier's per-minute limit on the page %q, want 10", got)
	}
	bg, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.body).backgroundColor`))
	if err != nil || bg != "rgb(246, 248, 250)" {
		t.Errorf("the stylesheet did not apply: body background %q, %v", bg, err)
	}

	step("open the edit form",
		chromedp.Click(chromedp.CSS(`a[aria-label="Edit tier free"]`)),
		chromedp.WaitVisible(chromedp.CSS("#tier-requests-per-minute")),
	)
	// typeOver selects what a field holds and types over it, as a person
	// would.
	typeOver := func(id chromedp.ID, s string) chromedp.Action[chromedp.Void] {
		return chromedp.Steps(
			chromedp.Focus(id),
			chromedp.KeyEvent("a", chromedp.KeyModifiers(chromedp.ModifierCtrl)),
			chromedp.SendKeys(id, s),
		)
	}
	perMinute := field("Requests per minute")
	step("save a bad per-minute limit",
		typeOver(perMinute, "ten"),
		chromedp.Click(button("Save")),
		chromedp.WaitVisible(chromedp.CSS("#tier-requests-per-minute-error")),
	)
	if got, want := text("#tier-requests-per-minute-error"), "requests_per_minute must be an integer from 0 to 2147483647"; got != want {
		t.Errorf("error beside the field %q, want %q", got, want)
	}
	perMinute = field("Requests per minute")
	if got, err := chromedp.Run(ctx, chromedp.Value(perMinute)); err != nil || got != "ten" {
		t.Errorf("the field shows %q after the error, want what was typed (%v)", got, err)
	}
	browserScreenshot(t, ctx, "admin-edit-error.png")
	step("save a new per-minute limit",
		typeOver(perMinute, "3"),
		chromedp.Click(button("Save")),
		chromedp.WaitVisible(chromedp.CSS("[role=status]")),
	)
	if got, want := text("[role=status]"), "Saved tier free — applies to the next check"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	if got := text("#tier-free [data-field=requests_per_minute]"); got != "3" {
		t.Fatalf("free tier's per-minute limit on the page after saving %q, want 3", got)
	}

	browserScreenshot(t, ctx, "admin-tiers.png")
	if os.Getenv("UPDATE_SCREENSHOTS") != "" {
		browserCopyFile(t, filepath.Join(browserArtifacts, "admin-tiers.png"), "admin.png")
	}

	// The new ceiling is 3 plus the burst of 5: the eighth check in a minute
	// passes and the ninth is refused.
	for i := 1; i <= 8; i++ {
		if d := browserCheck(t, svc, "browser-user"); d.Outcome != policy.Admitted {
			t.Fatalf("check %d after the edit: %+v, want admitted", i, d)
		}
	}
	if d := browserCheck(t, svc, "browser-user"); d.Outcome != policy.RateLimited || d.Windows[policy.Minute].Limit != 8 {
		t.Fatalf("ninth check: %+v; want refused, minute limit 8", d)
	}

	// Preview shows what the typed limits would have refused of the
	// requests just recorded, before anything is saved: one a minute plus
	// the burst of 5 admits six of the eight.
	step("open the edit form again", chromedp.Navigate(srv.URL+"/admin/tiers/free"), chromedp.WaitVisible(chromedp.CSS("#tier-requests-per-minute")))
	step("preview a lower per-minute limit",
		typeOver(field("Requests per minute"), "1"),
		chromedp.Click(button("Preview")),
		chromedp.WaitVisible(chromedp.CSS("#preview")),
	)
	for sel, want := range map[string]string{"#preview-requests": "8", "#preview-users": "1", "#preview-requests-refused": "2", "#preview-refused-minute": "2", "#preview-users-refused": "1"} {
		if got := text(sel); got != want {
			t.Errorf("preview %s = %q, want %q", sel, got, want)
		}
	}
	if got := text("#preview-top-users tbody td"); got != "browser-user" {
		t.Errorf("preview's most refused user %q", got)
	}
	if got, err := chromedp.Run(ctx, chromedp.Value(field("Requests per minute"))); err != nil || got != "1" {
		t.Errorf("after Preview the field shows %q, want what was typed (%v)", got, err)
	}
	browserScreenshot(t, ctx, "admin-preview.png")
	if got := browserMinuteLimit(t, svc, "after-preview"); got != 8 {
		t.Fatalf("minute ceiling after a preview %d, want 8: a preview changes nothing", got)
	}

	// Shadow limits of two a minute, saved from the form, then promoted.
	step("reopen the edit form", chromedp.Navigate(srv.URL+"/admin/tiers/free"), chromedp.WaitVisible(chromedp.CSS("#tier-requests-per-minute")))
	step("save shadow limits",
		chromedp.SendKeys(field("Shadow: requests per minute"), "2"),
		chromedp.SendKeys(field("Shadow: requests per hour"), "100"),
		chromedp.SendKeys(field("Shadow: requests per day"), "1000"),
		chromedp.SendKeys(field("Shadow: burst allowance"), "0"),
		chromedp.Click(button("Save")),
		chromedp.WaitVisible(chromedp.CSS("[role=status]")),
	)
	if got := browserMinuteLimit(t, svc, "after-shadow"); got != 8 {
		t.Fatalf("minute ceiling with shadow limits %d, want 8: shadow limits are not enforced", got)
	}
	step("see the shadow limits", chromedp.Navigate(srv.URL+"/admin/tiers/free"), chromedp.WaitVisible(chromedp.CSS("#shadow")))
	if got, got2 := text("#shadow-refused-hour"), text("#shadow-refused-day"); got != "6" || got2 != "6" {
		t.Errorf("shadow refusals in the last hour and day %q and %q, want 6 and 6", got, got2)
	}
	browserScreenshot(t, ctx, "admin-shadow.png")
	step("promote",
		chromedp.Click(button("Promote")),
		chromedp.WaitVisible(chromedp.CSS("[role=status]")),
	)
	if got := text("[role=status]"); !strings.HasPrefix(got, "Promoted the shadow limits of tier free") {
		t.Errorf("message %q after Promote", got)
	}
	if got := text("#tier-free [data-field=requests_per_minute]"); got != "2" {
		t.Fatalf("free tier's per-minute limit after Promote %q, want 2", got)
	}
	if got := browserMinuteLimit(t, svc, "after-promote"); got != 2 {
		t.Fatalf("minute ceiling after Promote %d, want 2", got)
	}

	// The look-up page shows the same counts, and clears them.
	step("look up the user",
		chromedp.Click(chromedp.CSS(`nav a[href="/admin/usage"]`)),
		chromedp.WaitVisible(chromedp.CSS("#user-id")),
	)
	step("fill in the look-up",
		chromedp.SendKeys(field("User id"), "browser-user"),
		chromedp.SetValue(field("Tier"), "free"),
		chromedp.Click(button("Look up")),
		chromedp.WaitVisible(chromedp.CSS("#window-minute")),
	)
	if got := text("#window-minute [data-field=count]"); got != "8" {
		t.Errorf("minute count %q, want 8", got)
	}
	if got := text("#window-minute [data-field=remaining]"); got != "0" {
		t.Errorf("minute remaining %q, want 0", got)
	}
	browserScreenshot(t, ctx, "admin-usage.png")
	step("clear the history",
		chromedp.Click(button("Clear history")),
		chromedp.WaitVisible(chromedp.CSS("[role=status]")),
	)
	if got := text("#window-minute [data-field=count]"); got != "0" {
		t.Errorf("minute count after clearing %q, want 0", got)
	}
	if d := browserCheck(t, svc, "browser-user"); d.Outcome != policy.Admitted {
		t.Errorf("check after clearing: %+v, want admitted", d)
	}

	// The record form: assign pro at 1 a minute; the user's next checks
	// are decided under it.
	step("save a record",
		chromedp.SetValue(field("Assigned tier"), "pro"),
		chromedp.SendKeys(field("requests_per_minute"), "1"),
		chromedp.SendKeys(field("burst_allowance"), "0"),
		chromedp.Click(button("Save record")),
		chromedp.WaitVisible(button("Remove record")), // only there once a record is
	)
	if got, want := text("[data-field=record-summary]"), "tier pro; requests_per_minute 1; burst_allowance 0"; got != want {
		t.Errorf("record on the page %q, want %q", got, want)
	}
	browserScreenshot(t, ctx, "admin-record.png")
	if d := browserCheck(t, svc, "browser-user"); d.Outcome != policy.RateLimited || d.Tier != "pro" || d.Windows[policy.Minute].Limit != 1 {
		t.Errorf("check under the record: %+v; want refused under pro at 1 a minute", d)
	}

	// At phone width the tiers page fits without sideways scrolling.
	step("phone width",
		chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)),
		chromedp.Navigate(srv.URL+"/admin"),
		chromedp.WaitVisible(chromedp.CSS("#tier-free")),
	)
	fits, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth <= window.innerWidth`))
	if err != nil || !fits {
		t.Errorf("the tiers page is wider than a 390px screen (%v)", err)
	}
	browserScreenshot(t, ctx, "admin-tiers-phone.png")

	step("sign out",
		chromedp.EmulateViewport(1280, 800),
		chromedp.Click(button("Sign out")),
		chromedp.WaitVisible(chromedp.CSS("#admin-token")),
		chromedp.Navigate(srv.URL+"/admin"),
		chromedp.WaitVisible(chromedp.CSS("#admin-token")),
	)

	mu.Lock()
	defer mu.Unlock()
	for _, u := range requests {
		if !strings.HasPrefix(u, srv.URL+"/") {
			t.Errorf("the page requested %s, outside the service", u)
		}
	}
	for _, p := range problems {
		t.Errorf("browser console: %s", p)
	}
	t.Logf("%d requests, all to the service; browser test took %v", len(requests), time.Since(start).Round(time.Millisecond))
}

// browserMinuteLimit decides a dry-run check for user and returns the
// minute window's limit.
func browserMinuteLimit(t *testing.T, svc *policy.Service, user string) int64 {
	t.Helper()
	d, err := svc.Check(context.Background(), policy.Request{UserID: user}, true)
	if err != nil || d.Windows == nil {
		t.Fatalf("dry run for %s: %+v, %v", user, d, err)
	}
	return d.Windows[policy.Minute].Limit
}

// browserCheck decides one check for user on the default tier.
func browserCheck(t *testing.T, svc *policy.Service, user string) policy.Decision {
	t.Helper()
	d, err := svc.Check(context.Background(), policy.Request{UserID: user}, false)
	if err != nil || d.Windows == nil {
		t.Fatalf("check for %s: %+v, %v", user, d, err)
	}
	return d
}

// browserScreenshot saves the whole page under browserArtifacts.
func browserScreenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(browserArtifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(browserArtifacts, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(path)
	t.Logf("screenshot: %s", abs)
}

func browserCopyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("updated %s", to)
}

// newBrowser starts headless Chromium at path for t, with the flags this
// machine's closed network needs, and returns the context of one tab that
// gives up after two minutes. Everything stops when t ends.
func newBrowser(t *testing.T, path string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab()
		cancelAlloc()
	})
	return ctx
}

// stepper returns a function that runs a named step's actions in ctx and
// fails the test, naming the step, when one fails.
func stepper(t *testing.T, ctx context.Context) func(name string, actions ...chromedp.Action[chromedp.Void]) {
	return func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// button finds a button by its label, as a person would.
func button(label string) chromedp.Search {
	return chromedp.Search(fmt.Sprintf(`//button[normalize-space(.)=%q]`, label))
}
