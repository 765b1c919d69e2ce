package client_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/policyguard/policyguard/api/client"
)

// The record methods against the real API: put, read, list page by page,
// check under the assignment, delete.
func TestUserRecords(t *testing.T) {
	e := newEnv(t, nil)
	c := newClient(t, e.url, client.WithAdminToken(adminToken))
	ctx := context.Background()
	u, created, err := c.PutUser(ctx, client.User{UserID: "ann", Tier: "pro", Note: "pilot",
		Limits: map[string]*int64{"requests_per_minute": client.Limit(1), "burst_allowance": client.Limit(0), "tokens_per_day": nil}})
	if err != nil || !created || u.Tier != "pro" || *u.Limits["requests_per_minute"] != 1 || !u.UpdatedAt.Equal(t0) {
		t.Fatalf("PutUser = %+v, %v, %v", u, created, err)
	}
	if v, ok := u.Limits["tokens_per_day"]; !ok || v != nil {
		t.Fatalf("tokens_per_day = %v, %v, want a removed limit", v, ok)
	}
	if _, created, err := c.PutUser(ctx, client.User{UserID: "bob"}); err != nil || !created {
		t.Fatalf("PutUser bob: %v, %v", created, err)
	}
	if _, _, err := c.PutUser(ctx, client.User{UserID: "cat", Tier: "gold"}); err == nil {
		t.Fatal("unknown tier accepted")
	} else {
		wantError(t, "unknown tier", err, http.StatusBadRequest, `unknown tier "gold"`)
	}
	if got, err := c.User(ctx, "bob"); err != nil || got.Tier != "" || got.Limits != nil {
		t.Fatalf("User bob = %+v, %v", got, err)
	}
	page, next, err := c.ListUsers(ctx, "", 1)
	if err != nil || len(page) != 1 || page[0].UserID != "ann" || next != "ann" {
		t.Fatalf("first page = %+v, %q, %v", page, next, err)
	}
	page, next, err = c.ListUsers(ctx, next, 1)
	if err != nil || len(page) != 1 || page[0].UserID != "bob" || next != "" {
		t.Fatalf("second page = %+v, %q, %v", page, next, err)
	}
	d, err := c.Check(ctx, client.CheckRequest{UserID: "ann", Tier: "free", Feature: "search"})
	if err != nil || !d.Allowed || d.Tier != "pro" || d.Windows.Minute.Limit != 1 {
		t.Fatalf("check under the assignment: %+v, %v", d, err)
	}
	if err := c.DeleteUser(ctx, "ann"); err != nil {
		t.Fatal(err)
	}
	_, err = c.User(ctx, "ann")
	wantError(t, "deleted", err, http.StatusNotFound, "has no record")
	wantError(t, "delete again", c.DeleteUser(ctx, "ann"), http.StatusNotFound, "has no record")
}
