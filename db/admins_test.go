package db_test

import (
	"context"
	"crypto/sha256"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// Named admins in the store, on both backends: a live name is taken; a
// token is found by its hash until revoked; the last admin of role admin
// can be neither demoted nor revoked; a revoked name may be given anew;
// each change is in the audit log, under its actor, with no token.
func TestAdminStore(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		s := openStore(t, bk.newDSN(t))
		ctx := policy.WithActor(context.Background(), "boss")
		at := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)
		h := func(s string) [32]byte { return sha256.Sum256([]byte(s)) }
		if err := s.CreateAdmin(ctx, policy.Admin{Name: "ann", Role: policy.RoleAdmin, CreatedAt: at}, h("ann-1")); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateAdmin(ctx, policy.Admin{Name: "ann", Role: policy.RoleViewer, CreatedAt: at}, h("ann-2")); policy.ErrorCode(err) != policy.ECONFLICT {
			t.Fatalf("name in use: %v, want a conflict", err)
		}
		if err := s.CreateAdmin(ctx, policy.Admin{Name: "bob", Role: policy.RoleSupport, Note: "desk", CreatedAt: at}, h("bob-1")); err != nil {
			t.Fatal(err)
		}
		a, err := s.AdminByTokenHash(ctx, h("bob-1"))
		if err != nil || a.Name != "bob" || a.Role != policy.RoleSupport || a.Note != "desk" || !a.CreatedAt.Equal(at) || a.LastUsedAt != nil {
			t.Fatalf("bob by token: %+v %v", a, err)
		}
		if _, err := s.UpdateAdmin(ctx, "ann", policy.RoleSupport, false, at); policy.ErrorCode(err) != policy.ECONFLICT {
			t.Fatalf("demote the last admin: %v, want a conflict", err)
		}
		if _, err := s.UpdateAdmin(ctx, "ann", 0, true, at); policy.ErrorCode(err) != policy.ECONFLICT {
			t.Fatalf("revoke the last admin: %v, want a conflict", err)
		}
		if a, err := s.UpdateAdmin(ctx, "bob", policy.RoleAdmin, false, at); err != nil || a.Role != policy.RoleAdmin {
			t.Fatalf("promote bob: %+v %v", a, err)
		}
		// A later use recorded stays; an earlier one does not undo it.
		if err := s.TouchAdmin(ctx, "bob", at.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if err := s.TouchAdmin(ctx, "bob", at.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if a, _ := s.AdminByTokenHash(ctx, h("bob-1")); a.LastUsedAt == nil || !a.LastUsedAt.Equal(at.Add(time.Hour)) {
			t.Fatalf("bob's last use: %v", a.LastUsedAt)
		}
		if _, err := s.UpdateAdmin(ctx, "ann", 0, true, at.Add(2*time.Hour)); err != nil {
			t.Fatalf("revoke ann, bob being an admin: %v", err)
		}
		if _, err := s.AdminByTokenHash(ctx, h("ann-1")); policy.ErrorCode(err) != policy.ENOTFOUND {
			t.Fatalf("revoked token: %v, want not found", err)
		}
		if _, err := s.UpdateAdmin(ctx, "ann", policy.RoleViewer, false, at); policy.ErrorCode(err) != policy.ENOTFOUND {
			t.Fatalf("change a revoked admin: %v, want not found", err)
		}
		if err := s.CreateAdmin(ctx, policy.Admin{Name: "ann", Role: policy.RoleViewer, CreatedAt: at.Add(3 * time.Hour)}, h("ann-3")); err != nil {
			t.Fatalf("a revoked name given anew: %v", err)
		}
		all, err := s.Admins(ctx)
		if err != nil || len(all) != 2 || all[0].Name != "ann" || all[0].RevokedAt != nil || all[0].Role != policy.RoleViewer {
			t.Fatalf("admins: %+v %v", all, err)
		}

		log, err := s.AuditLog(ctx, policy.AuditQuery{Kind: policy.AuditAdmins})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range log {
			got = append(got, e.Actor+" "+e.Action+" "+e.Subject)
			if strings.Contains(e.Old+e.New, "hash") {
				t.Errorf("entry %d holds the token's hash: %s %s", e.ID, e.Old, e.New)
			}
		}
		want := "boss created ann,boss revoked ann,boss updated bob,boss created bob,boss created ann"
		if strings.Join(got, ",") != want {
			t.Errorf("audit, newest first:\n got %s\nwant %s", strings.Join(got, ","), want)
		}
		// Filters and pages.
		if log, _ := s.AuditLog(ctx, policy.AuditQuery{Actor: "nobody"}); len(log) != 0 {
			t.Errorf("another actor: %d entries", len(log))
		}
		page, _ := s.AuditLog(ctx, policy.AuditQuery{Limit: 2})
		if len(page) != 2 {
			t.Fatalf("a page of 2: %d", len(page))
		}
		next, _ := s.AuditLog(ctx, policy.AuditQuery{Before: page[1].ID, Limit: 2})
		if len(next) != 2 || next[0].ID >= page[1].ID {
			t.Fatalf("the next page: %+v", next)
		}
		if log, _ := s.AuditLog(ctx, policy.AuditQuery{Since: at.Add(time.Hour), Until: at.Add(150 * time.Minute)}); len(log) != 1 || log[0].Action != policy.AuditRevoked {
			t.Errorf("since and until: %+v", log)
		}
	})
}

// The migration to version 22 copies the tier, user and price entries
// logged before into the audit log under the actor "unknown", oldest
// first, and the tier log's older entries show the actor unknown too.
func TestMigrationToAuditKeepsOlderEntries(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		dsn := bk.newDSN(t)
		raw, p, bind := migratedTo(t, bk, dsn, 20)
		for _, q := range []string{
			`INSERT INTO tier_changes (at, tier, source, old, new) VALUES (10, 'gold', 'api', NULL, '{"name":"gold"}')`,
			`INSERT INTO user_changes (at, user_id, source, old, new) VALUES (20, 'alice', 'admin', '{"user_id":"alice"}', NULL)`,
			`INSERT INTO price_versions (effective_from, created_at, source) VALUES (0, 30, 'import')`,
		} {
			if _, err := raw.ExecContext(ctx, bind(q)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := p.Up(ctx); err != nil {
			t.Fatal(err)
		}
		raw.Close()
		s := openStore(t, dsn)
		log, err := s.AuditLog(ctx, policy.AuditQuery{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range log {
			got = append(got, strings.Join([]string{e.Actor, e.Kind, e.Subject, e.Action, e.Source}, " "))
		}
		want := "unknown prices 1 created import,unknown users alice deleted admin,unknown tiers gold created api"
		if strings.Join(got, ",") != want {
			t.Errorf("audit after the migration:\n got %s\nwant %s", strings.Join(got, ","), want)
		}
		changes, err := s.TierChanges(ctx, 10)
		if err != nil || len(changes) != 1 || changes[0].Actor != policy.ActorUnknown {
			t.Errorf("tier log: %+v %v", changes, err)
		}
	})
}
