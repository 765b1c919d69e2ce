package client_test

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api/client"
)

// The key methods against the real API: make a user's key and a service
// key, list each kind, see a use, revoke.
func TestKeys(t *testing.T) {
	e := newEnv(t, nil)
	c := newClient(t, e.url, client.WithAdminToken(adminToken))
	ctx := context.Background()

	k, secret, err := c.CreateKey(ctx, "ann", "ann's laptop")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^pgk_[A-Za-z0-9_-]{32}$`).MatchString(secret) || !strings.HasPrefix(k.ID, "key_") {
		t.Fatalf("CreateKey = %+v, %q", k, secret)
	}
	if k.UserID != "ann" || k.Service || k.Note != "ann's laptop" || !k.CreatedAt.Equal(t0) || !k.LastUsedAt.IsZero() {
		t.Fatalf("CreateKey = %+v", k)
	}
	e.clock.Advance(time.Second)
	sk, serviceSecret, err := c.CreateServiceKey(ctx, "support back end")
	if err != nil || sk.UserID != "" || !sk.Service || sk.Note != "support back end" || serviceSecret == secret || !strings.HasPrefix(serviceSecret, "pgk_") {
		t.Fatalf("CreateServiceKey = %+v, %q, %v", sk, serviceSecret, err)
	}

	keys, err := c.Keys(ctx, "ann")
	if err != nil || len(keys) != 1 || keys[0] != k {
		t.Fatalf("Keys(ann) = %+v, %v; want %+v", keys, err, k)
	}
	if keys, err := c.ServiceKeys(ctx); err != nil || len(keys) != 1 || keys[0] != sk {
		t.Fatalf("ServiceKeys = %+v, %v; want %+v", keys, err, sk)
	}
	if keys, err := c.Keys(ctx, "nobody"); err != nil || keys == nil || len(keys) != 0 {
		t.Fatalf("Keys(nobody) = %#v, %v; want an empty list", keys, err)
	}

	// A use shows in the list.
	e.clock.Advance(time.Minute)
	svc := e.svc
	if _, err := svc.Authenticate(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if keys, _ := c.Keys(ctx, "ann"); len(keys) != 1 || !keys[0].LastUsedAt.Equal(t0.Add(time.Minute+time.Second)) {
		t.Fatalf("after a use, Keys(ann) = %+v", keys)
	}

	if err := c.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if keys, _ := c.Keys(ctx, "ann"); len(keys) != 0 {
		t.Fatalf("after the revocation, Keys(ann) = %+v", keys)
	}
	if _, err := svc.Authenticate(ctx, secret); err == nil {
		t.Fatal("a revoked key still authenticates")
	}
	wantError(t, "revoke again", c.RevokeKey(ctx, k.ID), http.StatusNotFound, "does not exist")
	_, _, err = c.CreateKey(ctx, "", "")
	wantError(t, "no user", err, http.StatusBadRequest, "user_id must not be empty")
	_, err = c.Keys(ctx, "")
	wantError(t, "list nobody's", err, http.StatusBadRequest, "name whose keys to list")
	_, _, err = newClient(t, e.url).CreateKey(ctx, "ann", "")
	wantError(t, "no admin token", err, http.StatusUnauthorized, "admin token")
}
