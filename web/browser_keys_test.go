package web_test

import (
	"context"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
	"github.com/policyguard/policyguard/web"
)

// TestBrowserAdminMakesAndRevokesAKey makes a gateway key on a user's page
// in headless Chromium, reads its secret off the page that follows as a
// person would copy it, proves the service takes it, and revokes it with
// the button of its row: from then on the service refuses it.
func TestBrowserAdminMakesAndRevokesAKey(t *testing.T) {
	chromium := chromiumPath(t)
	store, err := db.Open(context.Background(), dbtest.DSN(t, "test.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	svc := policy.NewService(store, store, policy.WithUsers(store), policy.WithKeys(store))
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
	step("make a key",
		chromedp.Navigate(srv.URL+"/admin/usage?user_id=alice"),
		chromedp.WaitVisible(chromedp.CSS("#keys")),
		chromedp.SendKeys(chromedp.CSS("#key-note"), "alice's laptop"),
		chromedp.Click(button("Make a key")),
		chromedp.WaitVisible(chromedp.CSS("#new-key")),
	)
	secret, err := chromedp.Run(ctx, chromedp.Value(chromedp.CSS("#new-key")))
	if err != nil || !regexp.MustCompile(`^pgk_[A-Za-z0-9_-]{32}$`).MatchString(secret) {
		t.Fatalf("the secret on the page: %q, %v", secret, err)
	}
	warning, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#new-key-warning")))
	if err != nil || !strings.Contains(warning, "only time it is shown") {
		t.Fatalf("warning %q, %v", warning, err)
	}
	browserScreenshot(t, ctx, "admin-new-key.png")
	k, err := svc.Authenticate(context.Background(), secret)
	if err != nil || k.UserID != "alice" {
		t.Fatalf("Authenticate = %+v, %v", k, err)
	}

	step("back to the user",
		chromedp.Click(chromedp.Search(`//a[normalize-space(.)="Done"]`)),
		chromedp.WaitVisible(chromedp.CSS("#key-"+k.ID)),
	)
	page, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil || strings.Contains(page, secret) {
		t.Fatalf("the user's page shows the secret again (%v)", err)
	}
	browserScreenshot(t, ctx, "admin-keys.png")
	step("revoke",
		chromedp.Click(chromedp.CSS(`#key-`+k.ID+` button`)),
		chromedp.WaitVisible(chromedp.CSS(`[role=status]`)),
	)
	if _, err := svc.Authenticate(context.Background(), secret); policy.ErrorCode(err) != policy.EUNAUTHORIZED {
		t.Fatalf("after Revoke: %v, want EUNAUTHORIZED", err)
	}
	flash, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`[role=status]`)))
	if !strings.Contains(flash, "Revoked key "+k.ID) {
		t.Fatalf("flash %q", flash)
	}
}
