package policy_test

import (
	"context"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// TierOf names the tier of a user's record, else the default tier, with
// the record's overrides, from memory; never a tier a client names.
func TestTierOf(t *testing.T) {
	ctx := context.Background()
	users := newMemUsers(
		policy.UserRecord{UserID: "g", Tier: "gold"},
		policy.UserRecord{UserID: "o", Limits: policy.Overrides{policy.RequestsPerMinute: policy.To(0), policy.BurstAllowance: policy.To(0)}},
	)
	s := &userStore{newMemStore(basic, gold), users}
	svc := policy.NewService(s, s, policy.WithDefaultTier("basic"), policy.WithUsers(users), policy.WithClock(func() time.Time { return t0 }))
	for _, tc := range []struct {
		user, tier string
		perMinute  int64
	}{
		{"g", "gold", gold.Limits.Value(policy.RequestsPerMinute)},
		{"o", "basic", 0},
		{"nobody", "basic", basic.Limits.Value(policy.RequestsPerMinute)},
		{"", "basic", basic.Limits.Value(policy.RequestsPerMinute)},
	} {
		got, err := svc.TierOf(ctx, tc.user, "")
		if err != nil || got.Name != tc.tier || got.Limits.Value(policy.RequestsPerMinute) != tc.perMinute {
			t.Errorf("TierOf(%q) = %s at %d a minute (%v), want %s at %d", tc.user, got.Name, got.Limits.Value(policy.RequestsPerMinute), err, tc.tier, tc.perMinute)
		}
	}
	if users.reads != 0 {
		t.Errorf("TierOf read %d records from storage, want none: memory holds them", users.reads)
	}
	if _, err := svc.TierOf(ctx, "bad\x00id", ""); policy.ErrorCode(err) != policy.EINVALID {
		t.Errorf("a malformed user id: %v, want EINVALID", err)
	}
	bare := policy.NewService(s, s, policy.WithDefaultTier("gold"))
	if got, err := bare.TierOf(ctx, "g", ""); err != nil || got.Name != "gold" {
		t.Errorf("a service without records: %s (%v), want the default tier", got.Name, err)
	}
}
