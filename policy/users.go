package policy

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxNote is the longest note of a user record accepted, in bytes.
const MaxNote = 1024

// UserRecord is what an admin set for one user: the tier their checks are
// decided under, whatever the check names, and overrides of that tier's
// limits. It never holds the user's requests, which Forget deletes and
// this survives.
type UserRecord struct {
	UserID string
	// Tier is the assigned tier; empty assigns none, and the check's tier
	// (or the default) is used, with Limits applied to it.
	Tier   string
	Limits Overrides
	// Account names the account the user belongs to; empty for none. A
	// member's checks also draw on its pooled limits, and a member without
	// a Tier is checked under the account's.
	Account string
	// TimeZone and BillingAnchor say where the user's own billing periods
	// fall (see UserRecord.Cycle): an IANA time zone name and a day of 1
	// to 31; "" and 0 keep the account's, or else the service's default.
	TimeZone      string
	BillingAnchor int
	Note          string
	UpdatedAt     time.Time
}

// Validate reports the first problem with r, or nil: an EINVALID *Error
// whose message names the field. Whether its tier exists is the store's to
// check, in the transaction that writes it.
func (r *UserRecord) Validate() error {
	if errs := r.ValidateFields(); len(errs) > 0 {
		return &Error{Code: EINVALID, Message: errs[0].Message}
	}
	return nil
}

// ValidateFields returns every problem with r, in field order.
func (r *UserRecord) ValidateFields() []FieldError {
	var errs []FieldError
	if r.UserID == "" {
		errs = append(errs, FieldError{"user_id", "user_id must not be empty"})
	} else if err := ValidateUserID(r.UserID); err != nil {
		errs = append(errs, FieldError{"user_id", ErrorMessage(err)})
	}
	if r.Tier != "" && !ValidTierName(r.Tier) {
		errs = append(errs, FieldError{"tier", "tier must be null or match [a-z0-9][a-z0-9_-]{0,62}"})
	}
	errs = append(errs, r.Limits.ValidateFields(ScopeTier, "")...)
	if r.Account != "" {
		if err := validAccountID(r.Account); err != nil {
			errs = append(errs, FieldError{"account", strings.Replace(ErrorMessage(err), "account_id", "account", 1)})
		}
	}
	if e := validTimeZone(r.TimeZone); e != nil {
		errs = append(errs, *e)
	}
	if e := validBillingAnchor(r.BillingAnchor); e != nil {
		errs = append(errs, *e)
	}
	if len(r.Note) > MaxNote {
		errs = append(errs, FieldError{"note", "note must be at most 1024 bytes"})
	} else if !utf8.ValidString(r.Note) {
		errs = append(errs, FieldError{"note", "note must be valid UTF-8"})
	}
	return errs
}

// SameRecord reports whether a and b assign the same tier with the same
// overrides, billing cycle and note; UpdatedAt is not compared.
func SameRecord(a, b *UserRecord) bool {
	return a.UserID == b.UserID && a.Tier == b.Tier && a.Account == b.Account && a.Note == b.Note && a.Limits.Equal(&b.Limits) &&
		a.TimeZone == b.TimeZone && a.BillingAnchor == b.BillingAnchor
}

// sameDecisions reports whether deciding a check under a instead of b
// could change any answer: a nil record assigns and overrides nothing.
// TimeZone and BillingAnchor are left out while no limit counts over a
// billing period; a limit that does must bring them in, here and in what
// the stores confirm.
func sameDecisions(a, b *UserRecord) bool {
	if a == nil || b == nil {
		return (a == nil || a.Tier == "" && a.Account == "" && a.Limits.IsZero()) && (b == nil || b.Tier == "" && b.Account == "" && b.Limits.IsZero())
	}
	return a.Tier == b.Tier && a.Account == b.Account && a.Limits.Equal(&b.Limits)
}

// UserChange is one change to one user record, as the audit log keeps it.
type UserChange struct {
	// ID orders the audit log; 0 until the change is stored.
	ID     int64
	At     time.Time
	UserID string
	Source string
	// Actor is who made the change (see WithActor).
	Actor string
	// Old is the record before the change, nil when the change created it.
	Old *UserRecord
	// New is the record after the change, nil when the change deleted it.
	New *UserRecord
}

// UserUpdate is a set of changes to user records a UserStore applies
// together.
type UserUpdate struct {
	// At is the time of the change: the UpdatedAt of every record put and
	// the time the audit log records.
	At time.Time
	// Source is recorded with every change (one of the Source constants).
	Source string
	// Put lists records to create or replace, each valid and named once;
	// a tier one assigns must exist when the update is applied.
	Put []UserRecord
	// Delete lists the user ids whose records to remove; each must exist.
	Delete []string
	// SkipUnchanged leaves alone a record of Put that is stored as it is
	// (SameRecord), so the audit log shows no change that changed nothing.
	SkipUnchanged bool
}

// UserStore keeps user records and the audit log of their changes.
// Implementations are safe for concurrent use; a change applies to the very
// next check, including a change made by another process sharing the
// storage.
type UserStore interface {
	// User returns userID's record as stored, reflecting every change
	// committed before the call, or an ENOTFOUND error.
	User(ctx context.Context, userID string) (UserRecord, error)
	// CachedUser returns userID's record from memory, reading no storage,
	// and so perhaps older than a change another process committed a
	// moment ago; found is false when memory holds none. Service.Check
	// takes a recording check's record from here and has the RateLimiter
	// confirm it (see CurrentUsers).
	CachedUser(userID string) (r UserRecord, found bool)
	// Users returns at most limit records whose user ids sort after
	// after, ordered by user id.
	Users(ctx context.Context, after string, limit int) ([]UserRecord, error)
	// UpdateUsers applies u in one transaction, all of it or none, records
	// each change in the audit log and returns the changes in the order
	// made: puts, then deletions. A record assigning a tier that does not
	// exist fails it with EINVALID.
	UpdateUsers(ctx context.Context, u UserUpdate) ([]UserChange, error)
	// UserChanges returns the latest entries of the audit log of userID's
	// record (of every user's when userID is empty), newest first.
	UserChanges(ctx context.Context, userID string, limit int) ([]UserChange, error)
}

// CurrentUsers is implemented by a History whose store keeps user records
// in the same transaction as the requests. CurrentUser returns the user's
// record as it stands in that transaction; ok is false when there is none.
type CurrentUsers interface {
	CurrentUser(userID string) (r *UserRecord, ok bool, err error)
}

// errUserUnconfirmed tells Service.Check that its request store cannot
// confirm a cached user record, so records must be read through User.
var errUserUnconfirmed = errors.New("the request store cannot confirm a cached user record")

// WithUsers makes the service keep user records in users: a record's tier
// and overrides then decide its user's checks. Without it the service has
// no records, and their methods fail with EINTERNAL. When users is also
// an AccountStore, the service keeps accounts there too (a record names
// its user's account), unless WithAccounts says otherwise.
func WithUsers(users UserStore) Option {
	return func(s *Service) {
		s.users = users
		if a, ok := users.(AccountStore); ok && s.accounts == nil {
			s.accounts = a
		}
	}
}

// WithTrustClientTier sets whether a check's own tier (Request.Tier, the
// API's context.user_tier) is believed for a user without an assigned
// tier (default true). False decides such a check under the default tier,
// so that a client cannot name itself a better plan.
func WithTrustClientTier(trust bool) Option {
	return func(s *Service) { s.distrustClientTier = !trust }
}

// TrustsClientTier reports whether a check's own tier is believed.
func (s *Service) TrustsClientTier() bool { return !s.distrustClientTier }

// KeepsUserRecords reports whether the service has a store of user records
// (WithUsers); without one its user methods fail and no check has a record.
func (s *Service) KeepsUserRecords() bool { return s.users != nil }

// tierName returns the tier a check of req is decided under, given its
// user's record r and account a (nil for none).
func (s *Service) tierName(req *Request, r *UserRecord, a *Account) string {
	switch {
	case r != nil && r.Tier != "":
		return r.Tier
	case a != nil:
		return a.Tier
	case req.Tier != "" && !s.distrustClientTier:
		return req.Tier
	}
	return s.defaultTier
}

// userRecord returns userID's record for a check: from memory when cached
// is set and the service may take it from there, otherwise as stored. It
// returns nil when the user has none or the service keeps no records, and
// reports whether the record came from memory.
func (s *Service) userRecord(ctx context.Context, userID string, cached bool) (*UserRecord, bool, error) {
	if s.users == nil {
		return nil, false, nil
	}
	if cached && !s.usersUnconfirmable.Load() {
		r, found := s.users.CachedUser(userID)
		if !found {
			return nil, true, nil
		}
		return &r, true, nil
	}
	r, err := s.readUser(ctx, userID)
	return r, false, err
}

// readUser reads userID's record as stored; nil when there is none.
func (s *Service) readUser(ctx context.Context, userID string) (*UserRecord, error) {
	r, err := s.users.User(ctx, userID)
	switch {
	case ErrorCode(err) == ENOTFOUND:
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &r, nil
}

// errNoUsers is the error of the user methods of a service without records.
func errNoUsers() error {
	return Errorf(EINTERNAL, "this service keeps no user records (see policy.WithUsers)")
}

// User returns userID's record, or an ENOTFOUND error.
func (s *Service) User(ctx context.Context, userID string) (UserRecord, error) {
	if s.users == nil {
		return UserRecord{}, errNoUsers()
	}
	if err := validRecordID(userID); err != nil {
		return UserRecord{}, err
	}
	r, err := s.users.User(ctx, userID)
	if ErrorCode(err) == ENOTFOUND {
		return UserRecord{}, Errorf(ENOTFOUND, "user %s has no record", Quote(userID))
	}
	return r, err
}

// Users returns at most limit records whose user ids sort after after,
// ordered by user id.
func (s *Service) Users(ctx context.Context, after string, limit int) ([]UserRecord, error) {
	if s.users == nil {
		return nil, errNoUsers()
	}
	if limit <= 0 {
		return nil, nil
	}
	return s.users.Users(ctx, after, limit)
}

// PutUser validates r, stamps it with the current time and creates or
// replaces userID's record. The change applies to the very next check and
// is recorded in the audit log with the source ctx carries (see
// WithChangeSource). It reports whether the record was created.
func (s *Service) PutUser(ctx context.Context, r UserRecord) (UserRecord, bool, error) {
	if s.users == nil {
		return UserRecord{}, false, errNoUsers()
	}
	if err := r.Validate(); err != nil {
		return UserRecord{}, false, err
	}
	if err := s.checkOverrides(ctx, &r, nil); err != nil {
		return UserRecord{}, false, err
	}
	r.UpdatedAt = s.now().UTC().Truncate(Resolution)
	changes, err := s.users.UpdateUsers(ctx, UserUpdate{At: r.UpdatedAt, Source: ChangeSource(ctx), Put: []UserRecord{r}})
	if err != nil {
		return UserRecord{}, false, err
	}
	return r, len(changes) == 1 && changes[0].Old == nil, nil
}

// checkOverrides refuses r, with EINVALID, when the limits it overrides
// could not all bind on the tier it assigns: that tier as listed, when
// listed has it, or else as stored now. A record that assigns no tier is
// checked alone (see Limits.ValidateOn); one assigning a tier that does
// not exist is left to the store, which refuses it. A tier changed later
// is checked on its own: the records on it are checked when written.
func (s *Service) checkOverrides(ctx context.Context, r *UserRecord, listed map[string]*Tier) error {
	if r.Limits.IsZero() {
		return nil
	}
	t, ok := listed[r.Tier]
	if !ok && r.Tier != "" {
		stored, err := s.tiers.Tier(ctx, r.Tier)
		switch {
		case ErrorCode(err) == ENOTFOUND:
			return nil
		case err != nil:
			return err
		}
		t = &stored
	}
	if errs := r.Limits.ValidateOn(t); len(errs) > 0 {
		return &Error{Code: EINVALID, Message: errs[0].Message}
	}
	return nil
}

// DeleteUser removes userID's record, so that their checks are decided as
// if an admin had never set one; their requests stay. A user with no record
// is ENOTFOUND.
func (s *Service) DeleteUser(ctx context.Context, userID string) error {
	if s.users == nil {
		return errNoUsers()
	}
	if err := validRecordID(userID); err != nil {
		return err
	}
	_, err := s.users.UpdateUsers(ctx, UserUpdate{At: s.now().UTC().Truncate(Resolution), Source: ChangeSource(ctx), Delete: []string{userID}})
	return err
}

// Importer is implemented by a store that applies a tiers file in one
// transaction: the tiers put, then the accounts, then the user records,
// then the tiers deleted or pruned, so that an account can move to a
// plan the same import creates, a record to an account it creates, and
// both off a tier it deletes. Accounts already as listed (SameAccount)
// are left alone.
type Importer interface {
	Import(ctx context.Context, tiers TierUpdate, accounts []Account, users UserUpdate) (ImportChanges, error)
}

// ImportChanges are the changes an import made, each in the order made.
type ImportChanges struct {
	Tiers    []TierChange
	Accounts []AccountChange
	Users    []UserChange
}

// Len returns how many changes c holds.
func (c *ImportChanges) Len() int { return len(c.Tiers) + len(c.Accounts) + len(c.Users) }

// exportPage is how many accounts or records Export reads at a time.
const exportPage = 1000

// Export returns what a tiers file holds, the counterpart of Import: every
// tier, and every account and user record, ordered by id. It reads the
// accounts and records a page at a time, each page a read of its own, so a
// change made while it reads may be in the result or not.
func (s *Service) Export(ctx context.Context) ([]Tier, []Account, []UserRecord, error) {
	tiers, err := s.Tiers(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	accounts, err := readPages(ctx, s.Accounts, func(a Account) string { return a.AccountID })
	if err != nil {
		return nil, nil, nil, err
	}
	records, err := readPages(ctx, s.Users, func(r UserRecord) string { return r.UserID })
	if err != nil {
		return nil, nil, nil, err
	}
	return tiers, accounts, records, nil
}

// readPages reads every item of a listing paged by id after id.
func readPages[T any](ctx context.Context, page func(ctx context.Context, after string, limit int) ([]T, error), id func(T) string) ([]T, error) {
	var all []T
	for after := ""; ; {
		items, err := page(ctx, after, exportPage)
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
		if len(items) < exportPage {
			return all, nil
		}
		after = id(items[len(items)-1])
	}
}

// Import is ImportTiers for a tiers file that also lists accounts and user
// records: in one transaction it creates or replaces the tiers, the
// accounts and the records listed (leaving alone those already as listed)
// and, with prune, deletes the tiers not listed, all recorded with
// SourceImport. It never deletes an account or a record; a tier that
// records assign, or that is the plan of an account, cannot be pruned
// (ECONFLICT), and a record naming an account that neither the file nor
// the store holds is refused (EINVALID), changing nothing.
func (s *Service) Import(ctx context.Context, tiers []Tier, accounts []Account, records []UserRecord, prune bool) (ImportChanges, error) {
	if len(records) == 0 && len(accounts) == 0 {
		changes, err := s.ImportTiers(ctx, tiers, prune)
		return ImportChanges{Tiers: changes}, err
	}
	imp, ok := s.users.(Importer)
	if !ok {
		return ImportChanges{}, Errorf(EINTERNAL, "this service's store cannot import accounts and user records with tiers")
	}
	tu, err := s.tierImport(tiers, prune)
	if err != nil {
		return ImportChanges{}, err
	}
	listed := make(map[string]*Tier, len(tu.Put))
	for i := range tu.Put {
		listed[tu.Put[i].Name] = &tu.Put[i]
	}
	putAccounts, err := s.accountImport(ctx, accounts, listed, tu.At)
	if err != nil {
		return ImportChanges{}, err
	}
	seen := make(map[string]bool, len(records))
	put := make([]UserRecord, len(records))
	for i, r := range records {
		err := r.Validate()
		if err == nil {
			err = s.checkOverrides(ctx, &r, listed)
		}
		if ErrorCode(err) == EINVALID {
			return ImportChanges{}, Errorf(EINVALID, "user %d (%s): %s", i+1, Quote(r.UserID), ErrorMessage(err))
		} else if err != nil {
			return ImportChanges{}, err
		}
		if seen[r.UserID] {
			return ImportChanges{}, Errorf(EINVALID, "user %s is listed twice", Quote(r.UserID))
		}
		seen[r.UserID] = true
		r.UpdatedAt = tu.At
		put[i] = r
	}
	return imp.Import(ctx, tu, putAccounts, UserUpdate{At: tu.At, Source: SourceImport, Put: put, SkipUnchanged: true})
}

// accountImport checks the accounts of an import, as PutAccount does, their
// pooled limits on their plan as listed, when listed has it, or else as
// stored (a plan in neither is left to the store, which refuses it), and
// returns them stamped with at.
func (s *Service) accountImport(ctx context.Context, accounts []Account, listed map[string]*Tier, at time.Time) ([]Account, error) {
	if len(accounts) > 0 && s.accounts == nil {
		return nil, errNoAccounts()
	}
	seen := make(map[string]bool, len(accounts))
	put := make([]Account, len(accounts))
	for i, a := range accounts {
		err := a.Validate()
		if err == nil {
			err = s.checkPool(ctx, &a, listed)
		}
		if ErrorCode(err) == EINVALID {
			return nil, Errorf(EINVALID, "account %d (%s): %s", i+1, Quote(a.AccountID), ErrorMessage(err))
		} else if err != nil {
			return nil, err
		}
		if seen[a.AccountID] {
			return nil, Errorf(EINVALID, "account %s is listed twice", Quote(a.AccountID))
		}
		seen[a.AccountID] = true
		a.UpdatedAt = at
		put[i] = a
	}
	return put, nil
}

// UserChanges returns the latest changes to userID's record (every user's
// when userID is empty), newest first.
func (s *Service) UserChanges(ctx context.Context, userID string, limit int) ([]UserChange, error) {
	if s.users == nil {
		return nil, errNoUsers()
	}
	return s.users.UserChanges(ctx, userID, limit)
}

// validRecordID checks a user id naming a record: a user id, not empty.
func validRecordID(userID string) error {
	if userID == "" {
		return Errorf(EINVALID, "user_id must not be empty")
	}
	return ValidateUserID(userID)
}
