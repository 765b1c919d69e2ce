package policy

import (
	"context"
	"strings"
	"time"
)

// The reasons a decided check is counted under (see CheckCounter).
const (
	CountAdmitted    = "admitted"
	CountMinute      = "minute"
	CountHour        = "hour"
	CountDay         = "day"
	CountTokens      = "tokens" // any token window
	CountConcurrency = "concurrency"
	CountFeature     = "feature"
	CountAccount     = "account" // any of an account's pooled limits
	CountOther       = "other"   // a guardrail a deployment added
	// CountShadowPrefix starts the reason of a check that a tier's shadow
	// limits would have refused: "shadow_minute", "shadow_hour", ... It is
	// counted beside the check's real answer, never as a refusal.
	CountShadowPrefix = "shadow_"
)

// ShadowReason returns the reason a check is counted under when the
// tier's shadow limit of window w would have refused it: counted with
// CheckCounter.CountCheck beside the check's real answer, it shows in
// StatsBucket.Shadow, the overview's shadow columns and GET /v1/stats's
// shadow_refused.
func ShadowReason(w Window) string { return CountShadowPrefix + w.String() }

// ShadowAccountReason is the reason a check is counted under when the
// pooled shadow limits of its account would have refused it, whichever
// window (as CountAccount counts real refusals by an account).
const ShadowAccountReason = CountShadowPrefix + CountAccount

// RefusalReasons lists the reasons of refusals in the order pages show them.
var RefusalReasons = [...]string{CountMinute, CountHour, CountDay, CountTokens, CountConcurrency, CountAccount, CountFeature, CountOther}

// StatsKeepFor is how long the counts of checks are kept.
const StatsKeepFor = 8 * 24 * time.Hour

// CheckCounter counts decided checks in memory, to be stored later in
// batches, so that counting adds no write to a check. CountCheck must be
// cheap and safe for concurrent use.
type CheckCounter interface {
	// CountCheck counts one check of user under tier at at, for reason.
	CountCheck(at time.Time, user, tier, reason string)
}

// CountReason returns the reason d is counted under: CountAdmitted, the
// window or kind of limit that refused it, or CountOther.
func CountReason(d *Decision) string {
	switch {
	case d.Outcome == Admitted:
		return CountAdmitted
	case d.Guardrail == (TierAccess{}).Name():
		return CountFeature
	case strings.HasPrefix(d.Reason, AccountReasonPrefix):
		return CountAccount
	case d.Reason == ConcurrencyReason:
		return CountConcurrency
	case strings.HasSuffix(d.Reason, " token limit exceeded"):
		return CountTokens
	}
	for _, w := range Windows {
		if d.Reason == w.Reason() {
			return w.String()
		}
	}
	return CountOther
}

// StatsBucket is what the checks of one tier did in one interval.
type StatsBucket struct {
	Tier  string
	Start time.Time
	// Admitted and Refused count the checks answered; RefusedBy splits
	// Refused by reason (only reasons with refusals are present).
	Admitted  int64
	Refused   int64
	RefusedBy map[string]int64
	// Shadow counts the checks the tier's shadow limits would have
	// refused, by window (the reason without CountShadowPrefix).
	Shadow map[string]int64
	// TokensSettled is the tokens of the tier's calls finished in the
	// interval, a member's counted once, not again as its pool's.
	TokensSettled int64
	// CostSettled is what the same calls cost (those the price table
	// priced).
	CostSettled Money
}

// UserRequests is how many requests a user had admitted in a period.
type UserRequests struct {
	UserID   string
	Requests int64
}

// StatsStore reads what the checks did. Implementations are safe for
// concurrent use.
type StatsStore interface {
	// Stats returns the buckets from from (inclusive) to to (exclusive),
	// bucket long, of the named tier or, when tier is empty, of every tier,
	// ordered by tier and start. Buckets without checks or tokens are left
	// out.
	Stats(ctx context.Context, from, to time.Time, bucket time.Duration, tier string) ([]StatsBucket, error)
	// TopUsers returns, for each of one or two cutoffs in from, the n
	// users with the most requests recorded after it, most first: both
	// lists from one pass over the users. An account's pool (AccountKey)
	// is no user.
	TopUsers(ctx context.Context, from []time.Time, n int) ([][]UserRequests, error)
	// UserRequests returns user's requests recorded from from (inclusive)
	// to to (exclusive) counted per bucket, oldest first.
	UserRequests(ctx context.Context, user string, from, to time.Time, bucket time.Duration) ([]int64, error)
	// CallsInFlight returns the calls open at now per tier, a member's
	// counted once, not again as its pool's.
	CallsInFlight(ctx context.Context, now time.Time) (map[string]int64, error)
	// LastTier returns the tier of user's newest recorded request; ok is
	// false when none is recorded with its tier.
	LastTier(ctx context.Context, user string) (tier string, ok bool, err error)
}
