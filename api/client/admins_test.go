package client_test

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/policyguard/policyguard/api/client"
)

// The admin methods against the real API: make admins, list them, change
// a role, revoke, and read who did what in the audit log, a page at a
// time.
func TestAdminsAndAudit(t *testing.T) {
	e := newEnv(t, nil)
	boss := newClient(t, e.url, client.WithAdminToken(adminToken))
	ctx := context.Background()

	a, token, err := boss.CreateAdmin(ctx, "dana", "support", "desk")
	if err != nil || a.Name != "dana" || a.Role != "support" || a.Note != "desk" || !a.CreatedAt.Equal(t0) {
		t.Fatalf("CreateAdmin = %+v, %v", a, err)
	}
	if !regexp.MustCompile(`^pgadm_[A-Za-z0-9_-]{32}$`).MatchString(token) {
		t.Fatalf("token %q", token)
	}
	_, _, err = boss.CreateAdmin(ctx, "dana", "viewer", "")
	wantError(t, "name in use", err, http.StatusConflict, "in use")
	_, _, err = boss.CreateAdmin(ctx, "eve", "root", "")
	wantError(t, "unknown role", err, http.StatusBadRequest, `unknown role "root"`)
	if _, _, err := boss.CreateAdmin(ctx, "erin", "admin", ""); err != nil {
		t.Fatal(err)
	}

	dana := newClient(t, e.url, client.WithAdminToken(token))
	if _, _, err := dana.PutUser(ctx, client.User{UserID: "ann", Note: "vip"}); err != nil {
		t.Fatalf("support puts a record: %v", err)
	}
	_, err = dana.SetAdminRole(ctx, "erin", "viewer")
	wantError(t, "support changes a role", err, http.StatusForbidden, "role admin")

	if a, err := boss.SetAdminRole(ctx, "dana", "viewer"); err != nil || a.Role != "viewer" {
		t.Fatalf("SetAdminRole = %+v, %v", a, err)
	}
	_, err = boss.SetAdminRole(ctx, "erin", "viewer")
	wantError(t, "demote the last admin", err, http.StatusConflict, "last of role admin")
	admins, err := boss.Admins(ctx)
	if err != nil || len(admins) != 2 || admins[0].Name != "dana" || admins[0].LastUsedAt.IsZero() || !admins[1].LastUsedAt.IsZero() {
		t.Fatalf("Admins = %+v, %v", admins, err)
	}
	if err := boss.RevokeAdmin(ctx, "dana"); err != nil {
		t.Fatal(err)
	}
	_, _, err = dana.Audit(ctx, client.AuditQuery{}, "", 0)
	wantError(t, "revoked token", err, http.StatusUnauthorized, "admin token")

	var seen []string
	after := ""
	for range 10 {
		entries, next, err := boss.Audit(ctx, client.AuditQuery{Kind: "admins"}, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range entries {
			seen = append(seen, en.Actor+" "+en.Action+" "+en.Subject)
			if en.Action == "created" && (en.Old != nil || !strings.Contains(string(en.New), `"name"`)) {
				t.Errorf("created entry's before and after: %s %s", en.Old, en.New)
			}
		}
		if after = next; after == "" {
			break
		}
	}
	want := "bootstrap revoked dana,bootstrap updated dana,bootstrap created erin,bootstrap created dana"
	if got := strings.Join(seen, ","); got != want {
		t.Errorf("Audit of admins:\n got %s\nwant %s", got, want)
	}
	entries, _, err := boss.Audit(ctx, client.AuditQuery{Actor: "dana"}, "", 0)
	if err != nil || len(entries) != 1 || entries[0].Kind != "users" || entries[0].Subject != "ann" || entries[0].Source != "api" {
		t.Fatalf("Audit of dana = %+v, %v", entries, err)
	}
}
