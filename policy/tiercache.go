package policy

import (
	"errors"
	"slices"
)

// TierCache is implemented by a TierStore that keeps its tiers in memory.
// For a check that records, Service takes the tier from CachedTier, which
// reads no storage and so may not yet know of a change another process
// committed a moment ago. The RateLimiter then confirms the tier inside
// the admission, against a History that implements CurrentTiers, and on
// any difference the check starts again with the tier read afresh through
// Tier. So no check decides on a tier older than the last change committed
// before it began, and no check pays a read of storage for its tier. With a
// request store whose History cannot confirm tiers, the first check finds
// out, and from then on the service reads every tier through Tier.
//
// CachedTier returns the named tier as the cache holds it; ok is false when
// the cache has no such tier, and Service then asks Tier.
type TierCache interface {
	CachedTier(name string) (t Tier, ok bool)
}

// CurrentTiers is implemented by a History whose store keeps the tiers in
// the same transaction as the requests. CurrentTier returns the named tier
// as it stands in that transaction; ok is false when there is none.
type CurrentTiers interface {
	CurrentTier(name string) (t *Tier, ok bool, err error)
}

// errTiersChanged tells Service.Check that the tier a check began with is
// no longer the tier as it stands, so the check must start again.
var errTiersChanged = errors.New("the tier changed during the check")

// errTierUnconfirmed tells Service.Check that its request store cannot
// confirm a cached tier (its History does not implement CurrentTiers), so
// the service must read tiers through Tier instead.
var errTierUnconfirmed = errors.New("the request store cannot confirm a cached tier")

// maxCheckAttempts bounds how often a check starts again because its tier
// changed meanwhile.
const maxCheckAttempts = 3

// sameTier reports whether t and u are the same tier, field for field.
func sameTier(t, u *Tier) bool {
	return t.Name == u.Name &&
		t.RequestsPerMinute == u.RequestsPerMinute &&
		t.RequestsPerHour == u.RequestsPerHour &&
		t.RequestsPerDay == u.RequestsPerDay &&
		t.BurstAllowance == u.BurstAllowance &&
		sameMetering(t, u) &&
		slices.Equal(t.Features, u.Features) &&
		t.Description == u.Description &&
		t.UpdatedAt.Equal(u.UpdatedAt)
}
