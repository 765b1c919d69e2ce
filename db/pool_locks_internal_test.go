package db

import (
	"testing"

	"github.com/policyguard/policyguard/policy"
)

// Every write to an account's pool, pruning's included (which locks each
// key it settles with writeTx.lockUser), takes the account's class of
// advisory lock, which admissions take before the user's: never the
// user's class, whose number another user's id could share.
func TestPoolKeysLockAsAccounts(t *testing.T) {
	key := policy.AccountKey("acme")
	if class, n := lockOf(key); class != lockAccount || n != userLockKey(key) {
		t.Errorf("lockOf(%q) = %d, %d; want the account class %d", key, class, n, lockAccount)
	}
	if class, _ := lockOf("acme"); class != lockUser {
		t.Errorf("lockOf(acme) = class %d, want the user class %d", class, lockUser)
	}
}
