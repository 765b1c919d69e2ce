package db_test

import (
	"context"
	"testing"

	"github.com/policyguard/policyguard/policy"
)

// A record's and an account's time zone and billing anchor are stored,
// survive a restart, are kept in the audit log, come back unset when
// cleared, and an import that changes only them changes the record.
func TestBillingCycleStored(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		path := bk.newDSN(t)
		now := t0
		s := openStore(t, path)
		svc := newUserService(s, &now)
		putTeam(t, svc)
		acme := policy.Account{AccountID: "acme", Tier: "team", TimeZone: "Australia/Sydney", BillingAnchor: 31}
		if _, _, err := svc.PutAccount(ctx, acme); err != nil {
			t.Fatal(err)
		}
		records := []policy.UserRecord{
			{UserID: "ana", Account: "acme", TimeZone: "Europe/Berlin"},
			{UserID: "ben", Account: "acme", BillingAnchor: 15},
			{UserID: "cy"},
		}
		for _, r := range records {
			if _, _, err := svc.PutUser(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		s.Close()

		s = openStore(t, path)
		svc = newUserService(s, &now)
		got, err := svc.Account(ctx, "acme")
		if err != nil || got.TimeZone != "Australia/Sydney" || got.BillingAnchor != 31 {
			t.Fatalf("acme after a restart: %+v, %v", got, err)
		}
		listed, err := svc.Users(ctx, "", 10)
		if err != nil || len(listed) != len(records) {
			t.Fatalf("users after a restart: %+v, %v", listed, err)
		}
		for i, r := range records {
			if g := listed[i]; g.TimeZone != r.TimeZone || g.BillingAnchor != r.BillingAnchor {
				t.Errorf("%s after a restart: %q %d, want %q %d", r.UserID, g.TimeZone, g.BillingAnchor, r.TimeZone, r.BillingAnchor)
			}
			if g, ok := s.CachedUser(r.UserID); !ok || g.TimeZone != r.TimeZone || g.BillingAnchor != r.BillingAnchor {
				t.Errorf("%s cached: %+v", r.UserID, g)
			}
		}
		members, err := svc.Members(ctx, "acme", "", 10)
		if err != nil || len(members) != 2 || members[0].TimeZone != "Europe/Berlin" || members[1].BillingAnchor != 15 {
			t.Fatalf("members: %+v, %v", members, err)
		}

		// Cleared, they are unset again; the audit log keeps both sides.
		if _, _, err := svc.PutUser(ctx, policy.UserRecord{UserID: "ana", Account: "acme"}); err != nil {
			t.Fatal(err)
		}
		if r, err := svc.User(ctx, "ana"); err != nil || r.TimeZone != "" || r.BillingAnchor != 0 {
			t.Fatalf("ana cleared: %+v, %v", r, err)
		}
		changes, err := svc.UserChanges(ctx, "ana", 1)
		if err != nil || len(changes) != 1 || changes[0].Old.TimeZone != "Europe/Berlin" || changes[0].New.TimeZone != "" {
			t.Fatalf("audit log: %+v, %v", changes, err)
		}
		acme.TimeZone, acme.BillingAnchor = "", 0
		if _, _, err := svc.PutAccount(ctx, acme); err != nil {
			t.Fatal(err)
		}
		if a, err := svc.Account(ctx, "acme"); err != nil || a.TimeZone != "" || a.BillingAnchor != 0 {
			t.Fatalf("acme cleared: %+v, %v", a, err)
		}

		// An import that changes only the billing cycle changes the
		// account and the record.
		tiers, err := svc.Tiers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		acme.BillingAnchor = 5
		ic, err := svc.Import(ctx, tiers, []policy.Account{acme}, []policy.UserRecord{{UserID: "cy", TimeZone: "America/New_York"}}, false)
		if err != nil || len(ic.Accounts) != 1 || len(ic.Users) != 1 {
			t.Fatalf("import: %+v, %v", ic, err)
		}
		if a, err := svc.Account(ctx, "acme"); err != nil || a.BillingAnchor != 5 {
			t.Fatalf("acme imported: %+v, %v", a, err)
		}
		if r, err := svc.User(ctx, "cy"); err != nil || r.TimeZone != "America/New_York" {
			t.Fatalf("cy imported: %+v, %v", r, err)
		}
		if _, _, err := svc.PutUser(ctx, policy.UserRecord{UserID: "dee", BillingAnchor: 32}); policy.ErrorCode(err) != policy.EINVALID {
			t.Fatalf("anchor 32: %v, want EINVALID", err)
		}
	})
}
