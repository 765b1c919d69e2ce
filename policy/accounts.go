package policy

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"
)

// An account is an organization's subscription: its members' checks must
// pass their own limits and the account's pooled limits, counted over the
// requests, tokens and open calls of every member. The pool is counted as
// a history of its own, under AccountKey(id), which no user id can equal:
// so a store counts, settles, prunes and forgets it with the same
// statements as a user's, and a member's admission is one transaction over
// two histories (see PoolStore).

// noPoolLimit is the ceiling of a pooled request window without a limit:
// more requests than a day can hold.
const noPoolLimit = 1 << 50

// Metered reports whether s limits tokens, spend or concurrent calls.
func (s *LimitSet) Metered() bool {
	for i := range LimitFields {
		if k := LimitFields[i].Kind; (k == KindTokens || k == KindConcurrency || k == KindCost) && s[i] != nil {
			return true
		}
	}
	return false
}

// Tier returns the pooled limits p as the tier a pooled check is
// evaluated and metered on, named name with ID id: a request window
// without a limit admits more than any window holds.
func (p *LimitSet) Tier(name string, id int64) Tier {
	t := Tier{Name: name, ID: id, Limits: *p}
	for i := range LimitFields {
		if f := &LimitFields[i]; t.Limits[i] == nil && f.Kind == KindRequests && f.In(ScopeAccount) && f.Windowed {
			t.Limits[i] = new(int64(noPoolLimit))
		}
	}
	return t
}

// AccountKeyPrefix begins the key of every account's pool in a
// RequestStore: a control character, which no user id holds.
const AccountKeyPrefix = "\x01account:"

// AccountKey returns the key of the pool of the account named id in a
// RequestStore.
func AccountKey(id string) string { return AccountKeyPrefix + id }

// IsAccountKey reports whether key names an account's pool.
func IsAccountKey(key string) bool { return strings.HasPrefix(key, AccountKeyPrefix) }

// Account is an organization's subscription: the plan its members are
// checked under when their records assign none, and the pooled limits
// they share (the plan's Account, with Limits applied).
type Account struct {
	AccountID string
	// Tier names the account's plan; it must exist.
	Tier   string
	Limits Overrides
	// TimeZone and BillingAnchor say where the pool's billing periods fall
	// (see Account.Cycle), and its members' unless their records say
	// otherwise: an IANA time zone name and a day of 1 to 31; "" and 0
	// keep the service's default.
	TimeZone      string
	BillingAnchor int
	Note          string
	UpdatedAt     time.Time
}

// ValidateFields returns every problem with a, in field order.
func (a *Account) ValidateFields() []FieldError {
	var errs []FieldError
	if err := validAccountID(a.AccountID); err != nil {
		errs = append(errs, FieldError{"account_id", ErrorMessage(err)})
	}
	if !ValidTierName(a.Tier) {
		errs = append(errs, FieldError{"tier", "tier must match [a-z0-9][a-z0-9_-]{0,62}"})
	}
	errs = append(errs, a.Limits.ValidateFields(ScopeAccount, "limits.")...)
	if e := validTimeZone(a.TimeZone); e != nil {
		errs = append(errs, *e)
	}
	if e := validBillingAnchor(a.BillingAnchor); e != nil {
		errs = append(errs, *e)
	}
	if len(a.Note) > MaxNote {
		errs = append(errs, FieldError{"note", "note must be at most 1024 bytes"})
	} else if !utf8.ValidString(a.Note) {
		errs = append(errs, FieldError{"note", "note must be valid UTF-8"})
	}
	return errs
}

// Validate reports the first problem with a, or nil.
func (a *Account) Validate() error {
	if errs := a.ValidateFields(); len(errs) > 0 {
		return &Error{Code: EINVALID, Message: errs[0].Message}
	}
	return nil
}

// Pool returns the pooled limits of a on its plan t.
func (a *Account) Pool(t *Tier) LimitSet {
	var p LimitSet
	if t.Account != nil {
		p = *t.Account
	}
	return p.WithOverrides(a.Limits)
}

// validAccountID checks an account id: the rules of a user id, not empty.
func validAccountID(id string) error {
	if id == "" {
		return Errorf(EINVALID, "account_id must not be empty")
	}
	if err := ValidateUserID(id); err != nil {
		return Errorf(EINVALID, "%s", strings.Replace(ErrorMessage(err), "user_id", "account_id", 1))
	}
	return nil
}

// AccountStore keeps account records. Implementations are safe for
// concurrent use.
type AccountStore interface {
	// Account returns the account named id as stored, or ENOTFOUND.
	Account(ctx context.Context, id string) (Account, error)
	// CachedAccount returns the account named id from memory, reading no
	// storage, so perhaps older than a change another process committed a
	// moment ago; found is false when memory holds none. A recording
	// check takes its account from here and has the PoolStore confirm it
	// (see CurrentAccounts).
	CachedAccount(id string) (a Account, found bool)
	// Accounts returns at most limit accounts whose ids sort after
	// after, ordered by id.
	Accounts(ctx context.Context, after string, limit int) ([]Account, error)
	// PutAccount creates or replaces a, whose tier must exist (EINVALID
	// otherwise), and reports whether it was created.
	PutAccount(ctx context.Context, a Account) (created bool, err error)
	// DeleteAccount removes the account named id: ENOTFOUND when there is
	// none, ECONFLICT while user records name it as their account.
	DeleteAccount(ctx context.Context, id string) error
	// Members returns at most limit records of the account's members
	// whose user ids sort after after, ordered by user id.
	Members(ctx context.Context, id, after string, limit int) ([]UserRecord, error)
}

// PoolStore is implemented by a RequestStore that admits a member's check
// against two histories at once: its account's pool (under the key
// AccountKey) and its own. AdmitPooled calls decide with both and records
// what each Admission says, both or neither, in one transaction; no
// other admission, finish or keepalive of either key runs between the
// reading and the writing. Locks are taken pool first, then user.
type PoolStore interface {
	AdmitPooled(ctx context.Context, poolKey, userID string, decide func(pool, own History) (pooled, admitted Admission, err error)) error
}

// CurrentAccounts is implemented by a pool's History whose store keeps
// accounts in the same transaction as the requests: CurrentAccount returns
// the account as it stands in that transaction; ok is false when there is
// none.
type CurrentAccounts interface {
	CurrentAccount(id string) (a *Account, ok bool, err error)
}

// sameAccount reports whether deciding a check under a instead of b could
// change any answer: its plan, its limits and its billing cycle, which
// places the period of month limits.
func sameAccount(a, b *Account) bool {
	return a.Tier == b.Tier && a.Limits.Equal(&b.Limits) && a.TimeZone == b.TimeZone && a.BillingAnchor == b.BillingAnchor
}

// errAccountUnconfirmed tells Service.Check that its request store cannot
// confirm a cached account, so accounts must be read through Account.
var errAccountUnconfirmed = errors.New("the request store cannot confirm a cached account")

// AccountState is the pooled state of a member's account after a check.
type AccountState struct {
	ID string
	// Limits are the pooled limits the check was decided on.
	Limits LimitSet
	// Windows is each window's pooled state; a window whose request limit
	// is unset has Limit and Remaining of noPoolLimit (see Limited).
	Windows [len(Windows)]WindowState
	// Concurrency is the account's calls in flight against its pooled
	// max_concurrent; nil when it sets none.
	Concurrency *ConcurrencyState
	// Month is the pool's billing period, when its pooled limits count
	// months; nil otherwise.
	Month *MonthState
}

// Limited reports whether the pool limits the requests of window w.
func (a *AccountState) Limited(w Window) bool {
	for i := range LimitFields {
		if f := &LimitFields[i]; f.Kind == KindRequests && f.Windowed && f.Window == w {
			return a.Limits[i] != nil
		}
	}
	return false
}

// AccountReasonPrefix begins the reason of a refusal by an account's pooled
// limits.
const AccountReasonPrefix = "account "

// WithAccounts makes the service keep accounts in accounts.
func WithAccounts(accounts AccountStore) Option { return func(s *Service) { s.accounts = accounts } }

// KeepsAccounts reports whether the service has a store of accounts.
func (s *Service) KeepsAccounts() bool { return s.accounts != nil }

func errNoAccounts() error {
	return Errorf(EINTERNAL, "this service keeps no accounts (see policy.WithAccounts)")
}

// Account returns the account named id, or an ENOTFOUND error.
func (s *Service) Account(ctx context.Context, id string) (Account, error) {
	if s.accounts == nil {
		return Account{}, errNoAccounts()
	}
	if err := validAccountID(id); err != nil {
		return Account{}, err
	}
	return s.accounts.Account(ctx, id)
}

// Accounts returns at most limit accounts whose ids sort after after.
func (s *Service) Accounts(ctx context.Context, after string, limit int) ([]Account, error) {
	if s.accounts == nil {
		return nil, errNoAccounts()
	}
	if limit <= 0 {
		return nil, nil
	}
	return s.accounts.Accounts(ctx, after, limit)
}

// PutAccount validates a, stamps it with the current time and creates or
// replaces it; it reports whether it was created. Its pooled limits, the
// plan's with a's overrides, must all be able to bind.
func (s *Service) PutAccount(ctx context.Context, a Account) (Account, bool, error) {
	if s.accounts == nil {
		return Account{}, false, errNoAccounts()
	}
	if err := a.Validate(); err != nil {
		return Account{}, false, err
	}
	t, err := s.readTier(ctx, a.Tier)
	if err != nil {
		return Account{}, false, err
	}
	if err := s.checkPool(ctx, &a, map[string]*Tier{t.Name: &t}); err != nil {
		return Account{}, false, err
	}
	a.UpdatedAt = s.now().UTC().Truncate(Resolution)
	created, err := s.accounts.PutAccount(ctx, a)
	if err != nil {
		return Account{}, false, err
	}
	return a, created, nil
}

// checkPool refuses a, with EINVALID, when its pooled limits (its plan's
// with its overrides) could not all bind: on its plan as listed, when
// listed has it, or else as stored. A plan that does not exist is left to
// the caller.
func (s *Service) checkPool(ctx context.Context, a *Account, listed map[string]*Tier) error {
	t, ok := listed[a.Tier]
	if !ok {
		stored, err := s.tiers.Tier(ctx, a.Tier)
		switch {
		case ErrorCode(err) == ENOTFOUND:
			return nil
		case err != nil:
			return err
		}
		t = &stored
	}
	pool := a.Pool(t)
	if errs := pool.ValidateFields(ScopeAccount, "limits."); len(errs) > 0 {
		return &Error{Code: EINVALID, Message: errs[0].Message}
	}
	return nil
}

// SameAccount reports whether a and b name the same plan with the same
// overrides, billing cycle and note; UpdatedAt is not compared.
func SameAccount(a, b *Account) bool {
	return a.AccountID == b.AccountID && a.Tier == b.Tier && a.Note == b.Note && a.Limits.Equal(&b.Limits) &&
		a.TimeZone == b.TimeZone && a.BillingAnchor == b.BillingAnchor
}

// AccountChange is one change an import made to an account: Old is nil
// for an account it created.
type AccountChange struct {
	AccountID string
	Old, New  *Account
}

// DeleteAccount removes the account named id; ECONFLICT while users
// belong to it. Its pooled requests stay until forgotten or pruned.
func (s *Service) DeleteAccount(ctx context.Context, id string) error {
	if s.accounts == nil {
		return errNoAccounts()
	}
	if err := validAccountID(id); err != nil {
		return err
	}
	return s.accounts.DeleteAccount(WithChangeTime(ctx, s.now().UTC().Truncate(Resolution)), id)
}

// Members returns at most limit records of the members of the account
// named id whose user ids sort after after.
func (s *Service) Members(ctx context.Context, id, after string, limit int) ([]UserRecord, error) {
	if s.accounts == nil {
		return nil, errNoAccounts()
	}
	if err := validAccountID(id); err != nil {
		return nil, err
	}
	return s.accounts.Members(ctx, id, after, limit)
}

// AccountUsage is an account's pooled state at one instant.
type AccountUsage struct {
	Account Account
	Limits  LimitSet
	UsageReport
}

// AccountUsage returns the pooled windows, tokens and open calls of the
// account named id under its pooled limits, recording nothing.
func (s *Service) AccountUsage(ctx context.Context, id string) (AccountUsage, error) {
	a, err := s.Account(ctx, id)
	if err != nil {
		return AccountUsage{}, err
	}
	t, err := s.readTier(ctx, a.Tier)
	if err != nil {
		return AccountUsage{}, err
	}
	pool := a.Pool(&t)
	pt := pool.Tier(t.Name, t.ID)
	var period *Period
	if s.periodsKept() {
		p, err := s.AccountPeriod(&a)
		if err != nil {
			return AccountUsage{}, err
		}
		period = &p
	}
	u, err := s.limiter.usage(ctx, AccountKey(id), &pt, s.now, true, period)
	return AccountUsage{Account: a, Limits: pool, UsageReport: u}, err
}

// ForgetAccount deletes the pooled requests, calls and tokens of the
// account named id; its members' own stay.
func (s *Service) ForgetAccount(ctx context.Context, id string) error {
	if err := validAccountID(id); err != nil {
		return err
	}
	return s.limiter.Store.Forget(WithChangeTime(ctx, s.now().UTC().Truncate(Resolution)), AccountKey(id))
}

// accountOf returns the account a check of req draws on, given its user's
// record r: the record's, or else, when the service believes clients, the
// one the check names; nil when neither names one. With cached set, and a
// store that can confirm it, it is taken from memory, and fromMemory says
// so (see Service.Check).
func (s *Service) accountOf(ctx context.Context, req *Request, r *UserRecord, cached bool) (a *Account, fromMemory bool, err error) {
	id := ""
	switch {
	case r != nil && r.Account != "":
		id = r.Account
	case req.Account != "" && !s.distrustClientTier:
		id = req.Account
	default:
		return nil, false, nil
	}
	if s.accounts == nil {
		return nil, false, Errorf(EINVALID, "this service keeps no accounts, so the check cannot name account %s", Quote(id))
	}
	if err := validAccountID(id); err != nil {
		return nil, false, err
	}
	if cached && !s.accountsUnconfirmable.Load() {
		if a, ok := s.accounts.CachedAccount(id); ok {
			return &a, true, nil
		}
	}
	stored, err := s.accounts.Account(ctx, id)
	if ErrorCode(err) == ENOTFOUND {
		return nil, false, Errorf(EINVALID, "unknown account %s", Quote(id))
	}
	if err != nil {
		return nil, false, err
	}
	return &stored, false, nil
}

// pool is what a member's check draws on besides its own limits.
type pool struct {
	account *Account
	// cached says account came from CachedAccount: the admission
	// confirms it before recording anything.
	cached bool
	// plan is the account's tier, when it is not the member's (nil when
	// it is); planCached says it came from CachedTier, to be confirmed.
	plan       *Tier
	planCached bool
	key        string
	limits     LimitSet
	tier       Tier // limits as a tier (see LimitSet.Tier)
	// shadow is the pooled shadow limits of the account's plan as a tier
	// (its Shadow's Account); nil when it has none.
	shadow *Tier

	// period is the account's billing period when its pooled limits
	// count months; nil otherwise.
	period *Period

	// What the admission found in the pool's history (see decidePool).
	ev    Evaluation
	m     Metering
	month monthVerdict
}
