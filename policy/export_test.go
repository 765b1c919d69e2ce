package policy_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/policyguard/policyguard/policy"
)

// pagedUsers serves its records a page at a time, as a store does.
type pagedUsers struct {
	*memUsers
	pages int // calls of Users
}

func (u *pagedUsers) Users(_ context.Context, after string, limit int) ([]policy.UserRecord, error) {
	u.pages++
	var ids []string
	for id := range u.records {
		if id > after {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var page []policy.UserRecord
	for _, id := range ids[:min(limit, len(ids))] {
		page = append(page, u.records[id])
	}
	return page, nil
}

// pagedAccounts is accountBook, a page at a time.
type pagedAccounts struct{ accountBook }

func (b pagedAccounts) Accounts(_ context.Context, after string, limit int) ([]policy.Account, error) {
	var ids []string
	for id := range b.accountBook {
		if id > after {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var page []policy.Account
	for _, id := range ids[:min(limit, len(ids))] {
		page = append(page, b.accountBook[id])
	}
	return page, nil
}

// Export returns every tier, account and record, across pages, in order:
// 2,000 records are two full pages and an empty one, 1,001 accounts a full
// page and one more.
func TestExportReadsEveryPage(t *testing.T) {
	users := &pagedUsers{memUsers: newMemUsers()}
	for i := range 2000 {
		id := fmt.Sprintf("u%04d", i)
		users.records[id] = policy.UserRecord{UserID: id}
	}
	accounts := pagedAccounts{accountBook{}}
	for i := range 1001 {
		id := fmt.Sprintf("a%04d", i)
		accounts.accountBook[id] = policy.Account{AccountID: id, Tier: "free"}
	}
	svc, _, _ := newService(t, policy.WithUsers(users), policy.WithAccounts(accounts))
	tiers, gotAccounts, records, err := svc.Export(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(tiers) != 2 || len(gotAccounts) != 1001 || len(records) != 2000 || users.pages != 3 {
		t.Fatalf("%d tiers, %d accounts, %d records in %d pages; want 2, 1001, 2000 in 3", len(tiers), len(gotAccounts), len(records), users.pages)
	}
	for i, r := range records {
		if want := fmt.Sprintf("u%04d", i); r.UserID != want {
			t.Fatalf("record %d is %s, want %s", i, r.UserID, want)
		}
	}
	if last := gotAccounts[len(gotAccounts)-1].AccountID; last != "a1000" {
		t.Fatalf("the last account is %s, want a1000", last)
	}
}
