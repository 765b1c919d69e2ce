package policy

import (
	"context"
	"slices"
	"time"
)

// Kinds of change, as the audit log names them.
const (
	AuditTiers    = "tiers"    // a tier created, updated (shadow limits and promotions too) or deleted
	AuditUsers    = "users"    // a user record created, updated or deleted
	AuditAccounts = "accounts" // an account created, updated or deleted
	AuditKeys     = "keys"     // a gateway key created or revoked
	AuditUsage    = "usage"    // a user's or an account's usage forgotten
	AuditPrices   = "prices"   // a version of the price table saved
	AuditAdmins   = "admins"   // a named admin created, given a role or revoked
	AuditRuns     = "runs"     // an agent run ended, with its descendants
)

// AuditKinds lists every kind of change the audit log records.
var AuditKinds = []string{AuditTiers, AuditUsers, AuditAccounts, AuditKeys, AuditUsage, AuditPrices, AuditAdmins, AuditRuns}

// Actions of an audit entry.
const (
	AuditCreated   = "created"
	AuditUpdated   = "updated"
	AuditDeleted   = "deleted"
	AuditRevoked   = "revoked"
	AuditForgotten = "forgotten"
	AuditEnded     = "ended"
)

// AuditEntry is one change as the audit log keeps it: who made it, when,
// through which path, to what, and the thing before and after.
type AuditEntry struct {
	// ID orders the log: a later entry has a greater one.
	ID int64
	At time.Time
	// Actor is who made the change: a named admin, BootstrapAdmin, a
	// command's name ("tiers import", "prices import", "admins add"), or
	// ActorUnknown.
	Actor string
	// Kind is one of AuditKinds.
	Kind string
	// Subject names what changed within its kind: a tier's name, a user
	// id, an account id, a key's id, the user (or account key) whose
	// usage was forgotten, a price version's number, an admin's name.
	Subject string
	// Action is AuditCreated, AuditUpdated, AuditDeleted, AuditRevoked or
	// AuditForgotten.
	Action string
	// Source is the path the change came through (SourceAPI, ...).
	Source string
	// Old and New are the thing before and after the change as a JSON
	// object with the API's field names; "" for none. Neither ever holds
	// a secret.
	Old, New string
}

// AuditQuery selects entries of the audit log. Its zero value selects
// every entry, newest first, without a limit.
type AuditQuery struct {
	Actor string // "" for any
	Kind  string // "" for any
	// Since and Until bound the entries' time: Since included, Until not;
	// zero for no bound.
	Since, Until time.Time
	// Before, when positive, selects only entries with a lesser ID: the
	// next page after an entry.
	Before int64
	// Limit, when positive, is the most entries returned.
	Limit int
}

// AuditStore reads the audit log, which the stores write in the
// transaction of each change. Implementations are safe for concurrent use.
type AuditStore interface {
	// AuditLog returns the entries q selects, newest first.
	AuditLog(ctx context.Context, q AuditQuery) ([]AuditEntry, error)
}

// WithAudit makes the service read the audit log from as. Without it
// AuditLog fails with EINTERNAL.
func WithAudit(as AuditStore) Option { return func(s *Service) { s.audit = as } }

// AuditLog returns the entries of the audit log q selects, newest first.
// An unknown kind is an EINVALID error.
func (s *Service) AuditLog(ctx context.Context, q AuditQuery) ([]AuditEntry, error) {
	if s.audit == nil {
		return nil, Errorf(EINTERNAL, "this service reads no audit log (see policy.WithAudit)")
	}
	if q.Kind != "" && !slices.Contains(AuditKinds, q.Kind) {
		return nil, Errorf(EINVALID, "unknown kind %s: want one of tiers, users, accounts, keys, usage, prices, admins", Quote(q.Kind))
	}
	return s.audit.AuditLog(ctx, q)
}

type changeTimeKey struct{}

// WithChangeTime returns a copy of ctx under which a change whose store
// method takes no time (a deletion, a revocation, usage forgotten) is
// logged at t. The Service sets it from its clock.
func WithChangeTime(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, changeTimeKey{}, t)
}

// ChangeTime returns the time set on ctx by WithChangeTime, or else the
// current time.
func ChangeTime(ctx context.Context) time.Time {
	if t, ok := ctx.Value(changeTimeKey{}).(time.Time); ok {
		return t
	}
	return time.Now()
}
