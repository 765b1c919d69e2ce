package policy

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxLimit is the largest value a tier limit may take (2^31-1), so limits fit
// every client's integer type.
const MaxLimit = 1<<31 - 1

// AllFeatures in a tier's feature list includes every feature.
const AllFeatures = "*"

// MaxDescription is the longest tier description accepted, in bytes.
const MaxDescription = 1024

// MaxModels is the most model names a tier may list, and MaxModelName the
// longest name, in bytes.
const (
	MaxModels    = 256
	MaxModelName = 128
)

// ModelWildcard ending a model name in a tier's list makes it match every
// model whose name begins with the rest; alone, it matches every model.
const ModelWildcard = "*"

var (
	tierNameRE    = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	featureNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$`)
)

// Tier is a subscription plan: the limits of its three rolling windows, the
// features it includes and the models its users may call.
type Tier struct {
	Name string
	// Limits are the tier's own limits: its request limits (the burst
	// allowance widens only the minute window, so a short spike passes
	// without relaxing the hour and day caps), which are never unset, and
	// its token limits and max_concurrent, which limit nothing when unset
	// (see Metered).
	Limits   LimitSet
	Features []string
	// Models lists the models the tier's users may call through the
	// gateway, each name exact or ending in ModelWildcard (see
	// AllowsModel). nil allows every model; an empty list allows none.
	Models      []string
	Description string
	UpdatedAt   time.Time

	// Shadow, when set, holds limits every check under the tier is also
	// decided against, and never refused by: they show what a change of
	// the request limits would do before it is made (see Promoted).
	Shadow *RequestLimits

	// Account, when set, holds the pooled limits of an account on this
	// plan, which all its members' checks draw on (see Account.Pool).
	Account *LimitSet

	// Run, when set, holds the limits of each run of an agent under the
	// tier, its sub-agents' use included: the rows of LimitFields in
	// ScopeRun, each nil for none (see RunLimit and RunMaxDepth). nil: the
	// tier has no run object.
	Run *LimitSet
	// RunRequired reports whether every gateway request under the tier
	// must name a run; it needs a Run (which may set no limit).
	RunRequired bool

	// ID is the tier's number in its store, which records it with each
	// request checked under the tier; 0 when the store gave it none. A
	// name keeps its ID, so it is no limit: SameLimits ignores it.
	ID int64
}

// Ceiling returns the number of admitted requests window w may hold: the
// rule of RequestLimits.Ceiling, for the tier's own limits.
func (t *Tier) Ceiling(w Window) int64 {
	l := t.RequestLimits()
	return l.Ceiling(w)
}

// Includes reports whether the tier's plan includes feature. An empty feature
// (the request named none) is always included.
func (t *Tier) Includes(feature string) bool {
	if feature == "" {
		return true
	}
	for _, f := range t.Features {
		if f == AllFeatures || f == feature {
			return true
		}
	}
	return false
}

// AllowsModel reports whether the tier's users may call model: whether
// Models is nil, or lists model, or lists a name ending in ModelWildcard
// that model begins with ("gpt-4o-mini*" allows "gpt-4o-mini" and
// "gpt-4o-mini-2024-07-18"; a lone "*" allows every model). Names are
// compared byte for byte.
func (t *Tier) AllowsModel(model string) bool {
	if t.Models == nil {
		return true
	}
	for _, m := range t.Models {
		if prefix, wild := strings.CutSuffix(m, ModelWildcard); wild {
			if strings.HasPrefix(model, prefix) {
				return true
			}
		} else if m == model {
			return true
		}
	}
	return false
}

// ValidTierName reports whether name is a well-formed tier name.
func ValidTierName(name string) bool { return tierNameRE.MatchString(name) }

// FieldError is the validation failure of one field of a tier. It is an
// *Error with code EINVALID once wrapped by Validate's caller; the field name
// lets a form show the message beside the right input.
type FieldError struct {
	Field   string
	Message string
}

// Validate reports the first problem with t, or nil. Its *Error message names
// the field; ValidateFields returns every problem.
func (t *Tier) Validate() error {
	if errs := t.ValidateFields(); len(errs) > 0 {
		return &Error{Code: EINVALID, Message: errs[0].Message}
	}
	return nil
}

// ValidateFields returns every problem with t, in field order.
func (t *Tier) ValidateFields() []FieldError {
	var errs []FieldError
	if !ValidTierName(t.Name) {
		errs = append(errs, FieldError{"name", "name must match [a-z0-9][a-z0-9_-]{0,62}"})
	}
	errs = append(errs, t.validateLimits()...)
	if t.Shadow != nil {
		errs = append(errs, t.Shadow.validate("shadow.")...)
	}
	if t.Account != nil {
		errs = append(errs, t.Account.ValidateFields(ScopeAccount, "account.")...)
	}
	if t.Run != nil {
		errs = append(errs, t.Run.ValidateFields(ScopeRun, "run.")...)
	} else if t.RunRequired {
		// On every surface but this type, required is a member of the
		// run object: a tier without one could not say it.
		errs = append(errs, FieldError{"run.required", "run.required needs a run object (one with no limits will do)"})
	}
	seen := make(map[string]bool, len(t.Features))
	for _, f := range t.Features {
		switch {
		case f != AllFeatures && !featureNameRE.MatchString(f):
			errs = append(errs, FieldError{"features", "feature " + Quote(f) + " must be \"*\" or match [A-Za-z0-9][A-Za-z0-9_.:-]{0,63}"})
		case seen[f]:
			errs = append(errs, FieldError{"features", "feature " + Quote(f) + " is listed twice"})
		}
		seen[f] = true
	}
	errs = append(errs, t.validateModels()...)
	if len(t.Description) > MaxDescription {
		errs = append(errs, FieldError{"description", "description must be at most 1024 bytes"})
	} else if !utf8.ValidString(t.Description) {
		errs = append(errs, FieldError{"description", "description must be valid UTF-8"})
	}
	return errs
}

// validateModels returns the problems of t.Models, each naming the entry
// by its index: "models[2]: ...".
func (t *Tier) validateModels() []FieldError {
	if len(t.Models) > MaxModels {
		return []FieldError{{"models", fmt.Sprintf("models must list at most %d names, not %d", MaxModels, len(t.Models))}}
	}
	var errs []FieldError
	first := make(map[string]int, len(t.Models))
	for i, m := range t.Models {
		at := fmt.Sprintf("models[%d]: %s", i, Quote(m))
		star := strings.Index(m, ModelWildcard)
		switch j, dup := first[m]; {
		case !validModelChars(m):
			errs = append(errs, FieldError{"models", fmt.Sprintf("%s must be 1 to %d printable ASCII characters without spaces", at, MaxModelName)})
		case star >= 0 && star < len(m)-1:
			errs = append(errs, FieldError{"models", at + ` has a "*" before its end; "*" may only end a name`})
		case dup:
			errs = append(errs, FieldError{"models", fmt.Sprintf("%s is listed twice, first as models[%d]", at, j)})
		default:
			first[m] = i
		}
	}
	return errs
}

// validModelChars reports whether m is 1 to MaxModelName printable ASCII
// characters, none a space.
func validModelChars(m string) bool {
	if m == "" || len(m) > MaxModelName {
		return false
	}
	for i := 0; i < len(m); i++ {
		if m[i] <= ' ' || m[i] > '~' {
			return false
		}
	}
	return true
}

// Quote renders a user-supplied string for a message: in double quotes,
// with quotes and backslashes escaped, control characters and invalid UTF-8
// shown as '?', and cut after 64 bytes so a huge input cannot make a huge
// message.
func Quote(s string) string {
	const maxBytes = 64
	if len(s) > maxBytes {
		s = s[:maxBytes] + "..."
	}
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r < 0x20 || r == 0x7f || r == utf8.RuneError:
			b = append(b, '?')
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return string(append(b, '"'))
}

// Sources of tier changes: the path a change came through, as the audit log
// records it.
const (
	SourceAPI     = "api"     // the JSON API
	SourceAdmin   = "admin"   // the admin page
	SourceImport  = "import"  // an import of a tiers file (policyguard tiers import)
	SourceLibrary = "library" // a Go program calling the service or the store
)

type sourceKey struct{}

// WithChangeSource returns a copy of ctx under which tier changes are
// recorded as coming from source (one of the Source constants). The source
// travels with the request like the identity of its caller, so the layers
// between the handler and the store need not pass it along.
func WithChangeSource(ctx context.Context, source string) context.Context {
	return context.WithValue(ctx, sourceKey{}, source)
}

// ChangeSource returns the source set on ctx by WithChangeSource, or
// SourceLibrary when there is none.
func ChangeSource(ctx context.Context) string {
	if s, ok := ctx.Value(sourceKey{}).(string); ok && s != "" {
		return s
	}
	return SourceLibrary
}

// TierChange is one change to one tier, as the audit log keeps it.
type TierChange struct {
	// ID orders the audit log; 0 until the change is stored.
	ID     int64
	At     time.Time
	Tier   string
	Source string
	// Actor is who made the change (see WithActor).
	Actor string
	// Old is the tier before the change, nil when the change created it.
	Old *Tier
	// New is the tier after the change, nil when the change deleted it.
	New *Tier
}

// Created reports whether the change created its tier.
func (c *TierChange) Created() bool { return c.Old == nil && c.New != nil }

// Deleted reports whether the change deleted its tier.
func (c *TierChange) Deleted() bool { return c.New == nil }

// SameLimits reports whether a and b have the same limits (their pooled
// and run limits and RunRequired included), features, models and
// description: whether deciding a check on one instead of the
// other could change any answer. Names and UpdatedAt are not compared; a
// nil Models (any model) differs from an empty one (none).
func SameLimits(a, b *Tier) bool {
	return sameLimitValues(a, b) &&
		sameShadow(a, b) &&
		(a.Account == nil) == (b.Account == nil) && (a.Account == nil || a.Account.Equal(b.Account)) &&
		(a.Run == nil) == (b.Run == nil) && (a.Run == nil || a.Run.Equal(b.Run)) && a.RunRequired == b.RunRequired &&
		a.Description == b.Description &&
		slices.Equal(a.Features, b.Features) &&
		(a.Models == nil) == (b.Models == nil) && slices.Equal(a.Models, b.Models)
}

// PutMode is what putting a tier expects to find, checked in the same
// transaction as the write so that two admins acting at once cannot
// silently undo each other.
type PutMode int

const (
	// PutAny creates a missing tier and replaces an existing one.
	PutAny PutMode = iota
	// PutCreate only creates: a tier that exists fails with ECONFLICT.
	PutCreate
	// PutReplace only replaces: a tier that does not exist fails with
	// ENOTFOUND, so a save never brings back a tier deleted meanwhile.
	PutReplace
)

// TierUpdate is a set of tier changes a TierStore applies together.
type TierUpdate struct {
	// At is the time of the change: the UpdatedAt of every tier put and the
	// time the audit log records.
	At time.Time
	// Source is recorded with every change (one of the Source constants).
	Source string
	// Put lists tiers to create or replace, each valid and named once.
	Put []Tier
	// Mode is what each tier of Put expects to find.
	Mode PutMode
	// IfUpdatedAt, when set, is the UpdatedAt that each existing tier of
	// Put must still have: one changed by someone else since it was read
	// fails the update with ECONFLICT instead of losing their change. (A
	// tier never changed since it was seeded has the zero UpdatedAt.)
	IfUpdatedAt *time.Time
	// Delete lists tiers to remove; each must exist.
	Delete []string
	// Prune removes every tier not named in Put.
	Prune bool
	// SkipUnchanged leaves alone a tier of Put whose stored limits, features,
	// models and description are the same (SameLimits), so neither its UpdatedAt
	// nor the audit log shows a change that changed nothing.
	SkipUnchanged bool
}

// TierStore keeps tiers and the audit log of their changes. Implementations
// are safe for concurrent use; a change is visible to the very next Tier
// call, including a change made by another process sharing the storage.
type TierStore interface {
	// Tier returns the named tier, or an ENOTFOUND error.
	Tier(ctx context.Context, name string) (Tier, error)
	// CachedTier returns the named tier from memory, reading no storage,
	// and so perhaps older than a change another process committed a
	// moment ago; ok is false when the store keeps no such copy, and the
	// service then asks Tier. Service.Check takes a recording check's tier
	// from here and has the RateLimiter confirm it (see CurrentTiers).
	CachedTier(name string) (t Tier, ok bool)
	// Tiers returns every tier ordered by name.
	Tiers(ctx context.Context) ([]Tier, error)
	// UpdateTiers applies u in one transaction, all of it or none, records
	// each change in the audit log, and returns the changes in the order
	// made: puts, then deletions, then prunings by name.
	UpdateTiers(ctx context.Context, u TierUpdate) ([]TierChange, error)
	// TierChanges returns the latest limit entries of the audit log, newest
	// first.
	TierChanges(ctx context.Context, limit int) ([]TierChange, error)
}
