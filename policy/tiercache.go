package policy

import "errors"

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
