package web_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
	"github.com/policyguard/policyguard/web"
)

// TestBrowserAdminEditsPrices types a price table into the Prices page in
// headless Chromium, as a person would, saves it as a version, sees it in
// force and in the history, and then types a bad line: the page says which
// line, keeps what was typed, and saves nothing.
func TestBrowserAdminEditsPrices(t *testing.T) {
	chromium := chromiumPath(t)
	store, err := db.Open(context.Background(), dbtest.DSN(t, "test.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	svc := policy.NewService(store, store, policy.WithUsers(store), policy.WithPrices(store))
	const token = "browser-test-token"
	srv := httptest.NewServer(newPageServer(web.Config{Service: svc, Gate: policy.NewAdminGate(token), Sessions: store}))
	defer srv.Close()

	ctx := newBrowser(t, chromium)
	step := stepper(t, ctx)
	step("sign in",
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(srv.URL+"/admin"),
		chromedp.WaitVisible(chromedp.CSS("#admin-token")),
		chromedp.SendKeys(chromedp.CSS("#admin-token"), token),
		chromedp.Click(button("Sign in")),
		chromedp.WaitVisible(chromedp.CSS("nav")),
	)
	step("open the Prices page from the navigation",
		chromedp.Click(chromedp.Search(`//nav//a[normalize-space(.)="Prices"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-field="no-version"]`)),
	)
	step("save a table",
		chromedp.SendKeys(chromedp.CSS("#prices-table"), "gpt-4o-mini 0.15 0.6 0.075\nclaude-* 3 15 0.3 3.75\n"),
		chromedp.Click(button("Save as a new version")),
		chromedp.WaitVisible(chromedp.CSS(`[role=status]`)),
	)
	flash, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`[role=status]`)))
	if !strings.Contains(flash, "Saved version 1: 2 entries") {
		t.Fatalf("flash %q", flash)
	}
	shown, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#shown")))
	if err != nil || !strings.Contains(shown, "In force: version 1") || !strings.Contains(shown, "3.75") || !strings.Contains(shown, "0.075") {
		t.Fatalf("the version in force on the page: %q, %v", shown, err)
	}
	history, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#version-1")))
	if err != nil || !strings.Contains(history, "in force") || !strings.Contains(history, "added gpt-4o-mini") {
		t.Fatalf("history row %q, %v", history, err)
	}
	browserScreenshot(t, ctx, "admin-prices.png")
	if p, _, ok := svc.PriceOf("claude-3-opus", "", svc.Now()); !ok || p.CacheWrite.String() != "3.75" {
		t.Fatalf("PriceOf after the save: %+v, %v", p, ok)
	}

	// The form holds the table in force; what is typed goes before it.
	step("a bad line",
		chromedp.SendKeys(chromedp.CSS("#prices-table"), "o1 15 sixty\n"),
		chromedp.Click(button("Save as a new version")),
		chromedp.WaitVisible(chromedp.CSS("#prices-table-error")),
	)
	msg, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#prices-table-error")))
	if !strings.Contains(msg, `line 1, output price: "sixty" is not a decimal amount`) {
		t.Fatalf("error %q", msg)
	}
	typed, _ := chromedp.Run(ctx, chromedp.Value(chromedp.CSS("#prices-table")))
	if !strings.HasPrefix(typed, "o1 15 sixty\nclaude-* 3 15 0.3 3.75\n") {
		t.Fatalf("the form lost what was typed: %q", typed)
	}
	if versions, _ := svc.PriceVersions(context.Background()); len(versions) != 1 {
		t.Fatalf("%d versions after a refused save, want 1", len(versions))
	}
}
