package web_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
	"github.com/policyguard/policyguard/web"
)

// TestBrowserAdminCreatesAccount gives a tier pooled limits by ticking its
// checkbox in headless Chromium, creates an account on it with a pooled
// limit of its own from the Accounts page reached through the navigation,
// sees it listed with both, and proves through a member's check that
// those are the limits the account's pool is decided on.
func TestBrowserAdminCreatesAccount(t *testing.T) {
	chromium := chromiumPath(t)
	store, err := db.Open(context.Background(), dbtest.DSN(t, "test.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	svc := policy.NewService(store, store, policy.WithUsers(store))
	const token = "browser-test-token"
	srv := httptest.NewServer(newPageServer(web.Config{Service: svc, Gate: policy.NewAdminGate(token), TierJSON: pageTierJSON, Sessions: store}))
	defer srv.Close()

	ctx := newBrowser(t, chromium)
	var mu sync.Mutex
	var problems []string
	if err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.EntryLevelError {
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
		res, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.Search(fmt.Sprintf(`//label[normalize-space(.)=%q]`, label)), "for"))
		if err != nil || res.Value == "" {
			t.Fatalf("label %q: %v", label, err)
		}
		return chromedp.ID(res.Value)
	}

	step("sign in",
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(srv.URL+"/admin"),
		chromedp.WaitVisible(chromedp.CSS("#admin-token")),
		chromedp.SendKeys(chromedp.CSS("#admin-token"), token),
		chromedp.Click(button("Sign in")),
		chromedp.WaitVisible(chromedp.CSS("nav")),
	)
	step("open tier pro", chromedp.Navigate(srv.URL+"/admin/tiers/pro"), chromedp.WaitVisible(chromedp.CSS("#tier-account")))
	step("give pro pooled limits",
		chromedp.Click(field("Pooled limits for accounts on this plan")),
		chromedp.SendKeys(field("Account: requests per minute"), "100"),
	)
	browserScreenshot(t, ctx, "admin-tier-account.png")
	step("save pro",
		chromedp.Click(button("Save")),
		chromedp.WaitVisible(chromedp.CSS("[role=status]")),
	)
	if pro, err := svc.Tier(context.Background(), "pro"); err != nil || pro.Account == nil || policy.PoolSummary(pro.Account) != "100/min" {
		t.Fatalf("tier pro after saving: %+v, %v; want pooled 100/min", pro.Account, err)
	}

	step("open the Accounts page",
		chromedp.Click(chromedp.CSS(`nav a[href="/admin/accounts"]`)),
		chromedp.WaitVisible(chromedp.CSS("#create")),
	)
	step("create an account",
		chromedp.SendKeys(field("Account id"), "acme"),
		chromedp.SetValue(field("Plan"), "pro"),
		chromedp.SendKeys(field("Requests per day"), "5000"),
		chromedp.SendKeys(field("Note"), "Acme Corp"),
		chromedp.Click(button("Create account")),
		chromedp.WaitVisible(chromedp.CSS("[role=status]")),
	)
	if got := text("[role=status]"); !strings.HasPrefix(got, "Created account acme — tier pro; requests_per_day 5,000") {
		t.Errorf("message %q", got)
	}
	for sel, want := range map[string]string{
		"#acct-acme th":                "acme",
		"#acct-acme [data-field=tier]": "pro",
		"#acct-acme [data-field=pool]": "100/min, 5,000/day",
		"#acct-acme [data-field=note]": "Acme Corp",
	} {
		if got := text(sel); got != want {
			t.Errorf("listed %s %q, want %q", sel, got, want)
		}
	}
	browserScreenshot(t, ctx, "admin-accounts.png")

	step("open the account",
		chromedp.Click(chromedp.CSS("#acct-acme a")),
		chromedp.WaitVisible(chromedp.CSS("#pool-limits")),
	)
	if got := text("#pool-requests_per_day [data-field=applies]"); got != "5,000" {
		t.Errorf("the account's pooled requests per day %q, want 5,000", got)
	}

	// A member's check is decided on the pooled limits shown.
	if _, _, err := svc.PutUser(context.Background(), policy.UserRecord{UserID: "ann", Account: "acme"}); err != nil {
		t.Fatal(err)
	}
	d, err := svc.Check(context.Background(), policy.Request{UserID: "ann"}, false)
	if err != nil || d.Account == nil || d.Account.Windows[policy.Minute].Limit != 100 || d.Account.Windows[policy.Day].Limit != 5000 {
		t.Fatalf("ann's check: %+v, %v; want drawn on acme at 100 a minute and 5,000 a day", d.Account, err)
	}
	step("reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#member-ann")))
	if got := text("#pool-window-day [data-field=remaining]"); got != "4,999" {
		t.Errorf("pooled day remaining %q, want 4,999", got)
	}
	browserScreenshot(t, ctx, "admin-account.png")

	step("phone width",
		chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)),
		chromedp.Navigate(srv.URL+"/admin/accounts"),
		chromedp.WaitVisible(chromedp.CSS("#acct-acme")),
	)
	fits, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth <= window.innerWidth`))
	if err != nil || !fits {
		t.Errorf("the Accounts page is wider than a 390px screen (%v)", err)
	}
	browserScreenshot(t, ctx, "admin-accounts-phone.png")

	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Errorf("browser console: %s", p)
	}
}
