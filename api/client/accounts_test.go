package client_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api/client"
)

// The account methods against the real API: a plan with pooled limits, an
// account on it put, read and listed page by page, members by record and by
// the check, the decision's account state and a refusal by the pool, the
// pool's usage settled by a finish and forgotten, and a delete refused
// while members remain.
func TestClientAccounts(t *testing.T) {
	e := newEnv(t, nil)
	c := newClient(t, e.url, client.WithAdminToken(adminToken))
	ctx := context.Background()

	team, _, err := c.PutTier(ctx, client.Tier{Name: "team", Limits: client.Limits{RequestsPerMinute: client.Limit(10), RequestsPerHour: client.Limit(100), RequestsPerDay: client.Limit(1000)}, Account: &client.Limits{RequestsPerMinute: client.Limit(3), TokensPerDay: client.Limit(1000)}})
	if err != nil {
		t.Fatal(err)
	}
	if a := team.Account; a == nil || *a.RequestsPerMinute != 3 || *a.TokensPerDay != 1000 || a.RequestsPerHour != nil || a.MaxConcurrent != nil {
		t.Fatalf("the tier's pooled limits as stored: %+v", a)
	}
	if got, err := c.Tier(ctx, "team"); err != nil || got.Account == nil || *got.Account.RequestsPerMinute != 3 {
		t.Fatalf("Tier team = %+v, %v", got, err)
	}
	if got, err := c.Tier(ctx, "free"); err != nil || got.Account != nil {
		t.Fatalf("a tier without pooled limits: %+v, %v", got.Account, err)
	}

	acme, created, err := c.PutAccount(ctx, client.Account{AccountID: "acme", Tier: "team", Note: "Acme",
		Limits: map[string]*int64{"requests_per_minute": client.Limit(2), "max_concurrent": nil}})
	if err != nil || !created || acme.Tier != "team" || *acme.Limits["requests_per_minute"] != 2 || !acme.UpdatedAt.Equal(t0) {
		t.Fatalf("PutAccount = %+v, %v, %v", acme, created, err)
	}
	if v, ok := acme.Limits["max_concurrent"]; !ok || v != nil {
		t.Fatalf("max_concurrent = %v, %v, want a removed limit", v, ok)
	}
	acme.Note = "Acme Corp"
	if got, created, err := c.PutAccount(ctx, acme); err != nil || created || got.Note != "Acme Corp" {
		t.Fatalf("PutAccount replace = %+v, %v, %v", got, created, err)
	}
	if _, created, err := c.PutAccount(ctx, client.Account{AccountID: "initech", Tier: "team"}); err != nil || !created {
		t.Fatalf("PutAccount initech: %v, %v", created, err)
	}
	_, _, err = c.PutAccount(ctx, client.Account{AccountID: "umbrella", Tier: "gold"})
	wantError(t, "unknown tier", err, http.StatusBadRequest, `unknown tier "gold"`)
	if got, err := c.Account(ctx, "acme"); err != nil || got.Note != "Acme Corp" || *got.Limits["requests_per_minute"] != 2 {
		t.Fatalf("Account acme = %+v, %v", got, err)
	}
	_, err = c.Account(ctx, "umbrella")
	wantError(t, "unknown account", err, http.StatusNotFound, `account "umbrella" not found`)
	page, next, err := c.Accounts(ctx, "", 1)
	if err != nil || len(page) != 1 || page[0].AccountID != "acme" || next != "acme" {
		t.Fatalf("first page = %+v, %q, %v", page, next, err)
	}
	page, next, err = c.Accounts(ctx, next, 1)
	if err != nil || len(page) != 1 || page[0].AccountID != "initech" || next != "" {
		t.Fatalf("second page = %+v, %q, %v", page, next, err)
	}

	// Members: ann by her record, bob by his check.
	ann, _, err := c.PutUser(ctx, client.User{UserID: "ann", Account: "acme"})
	if err != nil || ann.Account != "acme" || ann.Tier != "" {
		t.Fatalf("PutUser ann = %+v, %v", ann, err)
	}
	if got, err := c.User(ctx, "ann"); err != nil || got.Account != "acme" {
		t.Fatalf("User ann = %+v, %v", got, err)
	}
	_, _, err = c.PutUser(ctx, client.User{UserID: "cat", Account: "umbrella"})
	wantError(t, "unknown account in a record", err, http.StatusBadRequest, `unknown account "umbrella"`)

	d, err := c.Check(ctx, client.CheckRequest{UserID: "ann", Tokens: 10})
	if err != nil || !d.Allowed || d.Tier != "team" || d.CallID == "" {
		t.Fatalf("ann's check: %+v, %v", d, err)
	}
	a := d.Account
	if a == nil || a.ID != "acme" || a.Windows.Minute.Limit == nil || *a.Windows.Minute.Limit != 2 || *a.Windows.Minute.Remaining != 1 ||
		a.Windows.Hour.Limit != nil || a.Windows.Hour.Remaining != nil || a.Windows.Day.Tokens == nil || a.Windows.Day.Tokens.Used != 10 || a.Concurrency != nil {
		t.Fatalf("ann's account state: %+v", a)
	}
	call := d.CallID
	e.clock.Advance(time.Second)
	d, err = c.Check(ctx, client.CheckRequest{UserID: "bob", AccountID: "acme"})
	if err != nil || !d.Allowed || d.Account == nil || *d.Account.Windows.Minute.Remaining != 0 {
		t.Fatalf("bob's check naming acme: %+v, %v", d, err)
	}
	e.clock.Advance(time.Second)
	d, err = c.Check(ctx, client.CheckRequest{UserID: "ann"})
	if err != nil || d.Allowed || !d.RateLimited() || d.Reason != "account per-minute limit exceeded" || d.RetryAfter != 58 || d.Windows.Minute.Remaining != 9 {
		t.Fatalf("ann over the pool, within her own limits: %+v, %v", d, err)
	}
	_, err = c.Check(ctx, client.CheckRequest{UserID: "dan", AccountID: "umbrella"})
	wantError(t, "a check naming an unknown account", err, http.StatusBadRequest, `unknown account "umbrella"`)
	if d, err := c.Check(ctx, client.CheckRequest{UserID: "eve"}); err != nil || d.Account != nil {
		t.Fatalf("a user in no account: %+v, %v", d.Account, err)
	}

	// The pool's usage: both members' requests, and bob's call still
	// open; finishing ann's call settles the pool's tokens too.
	if _, err := c.FinishCall(ctx, call, client.Limit(4)); err != nil {
		t.Fatal(err)
	}
	u, err := c.AccountUsage(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if u.AccountID != "acme" || u.Tier != "team" || *u.Limits.RequestsPerMinute != 2 || *u.Limits.TokensPerDay != 1000 || u.Limits.MaxConcurrent != nil ||
		u.Windows.Minute.Count != 2 || u.Windows.Minute.Limit != 2 || u.Windows.Minute.Remaining != 0 || u.Windows.Hour.Limit != 0 ||
		u.Windows.Day.Tokens.Used != 4 || u.Windows.Day.Tokens.Limit != 1000 || u.CallsInFlight != 1 {
		t.Fatalf("AccountUsage = %+v", u)
	}

	wantError(t, "delete with a member", c.DeleteAccount(ctx, "acme"), http.StatusConflict, "has 1 member")
	if err := c.ForgetAccountUsage(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if u, err := c.AccountUsage(ctx, "acme"); err != nil || u.Windows.Day.Count != 0 || u.Windows.Day.Tokens.Used != 0 {
		t.Fatalf("AccountUsage after ForgetAccountUsage = %+v, %v", u, err)
	}
	if u, err := c.Usage(ctx, "ann", ""); err != nil || u.Windows.Day.Count != 1 {
		t.Fatalf("ann's own usage after forgetting the pool's = %+v, %v", u, err)
	}
	if _, _, err := c.PutUser(ctx, client.User{UserID: "ann"}); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteAccount(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	_, err = c.AccountUsage(ctx, "acme")
	wantError(t, "usage of a deleted account", err, http.StatusNotFound, "not found")
	wantError(t, "delete twice", c.DeleteAccount(ctx, "acme"), http.StatusNotFound, "not found")
	wantError(t, "forget an unknown account", c.ForgetAccountUsage(ctx, "acme"), http.StatusNotFound, "not found")
}
