package policy

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// AnonymousUser is the user id of a request that names none.
const AnonymousUser = "anonymous"

// DefaultTierName is the tier of a request that names none, unless configured.
const DefaultTierName = "free"

// MaxUserIDBytes is the longest user id accepted.
const MaxUserIDBytes = 256

// Service answers checks: it resolves a request's user and tier and runs the
// guardrail chain. It is safe for concurrent use.
type Service struct {
	// tiersUnconfirmable is set once the request store has shown it cannot
	// confirm a cached tier: tiers are then always read through Tier.
	tiersUnconfirmable atomic.Bool
	// usersUnconfirmable is the same for cached user records.
	usersUnconfirmable atomic.Bool
	// accountsUnconfirmable is the same for cached accounts.
	accountsUnconfirmable atomic.Bool

	users              UserStore    // nil: no user records
	accounts           AccountStore // nil: no accounts
	distrustClientTier bool

	keys    KeyStore   // nil: no gateway keys
	prices  PriceStore // nil: no price table
	keyUses keyUses    // when this process last recorded each key's use

	admins    AdminStore // nil: only the built-in admin
	adminUses keyUses    // when this process last recorded each admin's use
	audit     AuditStore // nil: no audit log to read

	tiers       TierStore
	limiter     *RateLimiter
	chain       *Chain
	defaultTier string
	billing     BillingCycle // of users and accounts that set none
	now         func() time.Time

	// counter counts every decided check that is not a dry run; stats
	// reads the counts back (see WithStats). Either may be nil.
	counter    CheckCounter
	stats      StatsStore
	replays    ReplayStore
	userLimits func(ctx context.Context) LimitsLookup
}

// Option configures a Service.
type Option func(*Service)

// WithDefaultTier sets the tier of requests that name none (default "free").
func WithDefaultTier(name string) Option { return func(s *Service) { s.defaultTier = name } }

// WithClock sets the source of the current time (default time.Now).
func WithClock(now func() time.Time) Option { return func(s *Service) { s.now = now } }

// WithGuardrails adds guardrails to the chain beside TierAccess and the
// RateLimiter; their priorities place them.
func WithGuardrails(gs ...Guardrail) Option {
	return func(s *Service) { s.chain = NewChain(append(s.chain.guardrails, gs...)...) }
}

// NewService returns a Service whose chain is TierAccess then a RateLimiter
// over requests, plus any guardrails added with WithGuardrails.
func NewService(tiers TierStore, requests RequestStore, opts ...Option) *Service {
	limiter := &RateLimiter{Store: requests}
	s := &Service{
		tiers:       tiers,
		limiter:     limiter,
		chain:       NewChain(TierAccess{}, limiter),
		defaultTier: DefaultTierName,
		now:         time.Now,
	}
	s.replays, _ = requests.(ReplayStore)
	for _, opt := range opts {
		opt(s)
	}
	return s
}

// Chain returns the guardrail chain the service runs.
func (s *Service) Chain() *Chain { return s.chain }

// Now returns the service clock's current time.
func (s *Service) Now() time.Time { return s.now() }

// DefaultTier returns the name of the tier used when a request names none.
func (s *Service) DefaultTier() string { return s.defaultTier }

// Check decides req and, when admitted (and not a dry run), records it.
// Unknown tiers and malformed requests are EINVALID errors, never admissions.
//
// The invariant: no check decides on a tier or a user record older than
// the last change committed before it began. A recording check first takes
// its user's record (which may assign the tier and override its limits)
// and its tier from the stores' memory (CachedUser, CachedTier), which
// costs no read but may lag behind another process; the rate limiter then
// confirms both in the same transaction that records the request, and a
// guardrail that refused before it is confirmed here by reading them. Any
// difference starts the check again on what is stored, at most
// maxCheckAttempts times. A request store that cannot confirm tiers or
// records says so once, and from then on they are read (readTier,
// readUser).
func (s *Service) Check(ctx context.Context, req Request, dryRun bool) (Decision, error) {
	if err := req.validate(); err != nil {
		return Decision{}, err
	}
	// The check, the tier it is decided on (base with the user's
	// overrides) and base share one allocation: each was one of its own.
	st := new(checkState)
	tier, base := &st.tier, &st.base
	var (
		c *Check
		d Decision
	)
	for attempt := 1; ; attempt++ {
		fromMemory := attempt == 1 && !dryRun
		rec, recCached, err := s.userRecord(ctx, req.UserID, fromMemory)
		if err != nil {
			return Decision{}, err
		}
		acct, acctCached, err := s.accountOf(ctx, &req, rec, fromMemory)
		if err != nil && recCached {
			// The record from memory may lag behind one that now names
			// an account, which the check's own would not override: an
			// error is an answer too, so it is given on the record as
			// stored.
			continue
		}
		if err != nil {
			return Decision{}, err
		}
		name := s.tierName(&req, rec, acct)
		cached, err := s.baseTier(ctx, base, name, fromMemory)
		if err != nil {
			return Decision{}, err
		}
		*tier = *base
		if rec != nil {
			*tier = base.WithOverrides(rec.Limits)
		}
		r := req
		r.Tier = name
		st.check = Check{Request: r, Tier: tier, Now: s.now(), DryRun: dryRun, unconfirmed: cached,
			base: base, confirmUser: s.users != nil, userUnconfirmed: recCached, user: rec}
		c = &st.check
		if acct != nil {
			if c.pool, err = s.poolOf(ctx, acct, base, fromMemory); err != nil {
				return Decision{}, err
			}
			c.pool.cached = acctCached
		}
		if err := s.periodsOf(c, rec, acct); err != nil {
			return Decision{}, err
		}
		if err := s.priceCheck(ctx, c); err != nil && (cached || recCached || acctCached) {
			continue // memory may lag behind a change lifting the limit: the error is given on what is stored
		} else if err != nil {
			return Decision{}, err
		}
		d, err = s.chain.Check(ctx, c)
		switch {
		case errors.Is(err, errTierUnconfirmed):
			s.tiersUnconfirmable.Store(true)
			continue
		case errors.Is(err, errUserUnconfirmed):
			s.usersUnconfirmable.Store(true)
			continue
		case errors.Is(err, errAccountUnconfirmed):
			s.accountsUnconfirmable.Store(true)
			continue
		case errors.Is(err, errTiersChanged) && attempt < maxCheckAttempts:
			continue
		case errors.Is(err, errTiersChanged):
			return Decision{}, Errorf(EUNAVAILABLE, "tier %s changed during the check %d times; try again", Quote(name), attempt)
		case err != nil:
			return Decision{}, err
		case (cached || recCached) && d.Windows == nil:
			// Refused before the rate limiter could confirm the tier and
			// the record: confirm them here.
			same, err := s.sameAsStored(ctx, req.UserID, rec, base)
			if err != nil {
				return Decision{}, err
			}
			if !same {
				continue
			}
		}
		break
	}
	if d.Windows == nil {
		if err := s.viewUnconsumed(ctx, c, &d); err != nil {
			return Decision{}, err
		}
	}
	if s.counter != nil && !dryRun {
		s.counter.CountCheck(c.Now, req.UserID, tier.Name, CountReason(&d))
		if d.Shadow != nil && !d.Shadow.Allowed {
			s.counter.CountCheck(c.Now, req.UserID, tier.Name, d.Shadow.CountReason())
		}
	}
	return d, nil
}

// validate checks what a request says of itself, before anything is
// read: an empty user id becomes AnonymousUser.
func (req *Request) validate() error {
	if req.UserID == "" {
		req.UserID = AnonymousUser
	}
	if err := ValidateUserID(req.UserID); err != nil {
		return err
	}
	if req.Tokens < 0 || req.Tokens > MaxLimit {
		return Errorf(EINVALID, "tokens must be an integer from 0 to 2147483647")
	}
	if err := ValidateRunID("context.run_id", req.RunID); err != nil {
		return err
	}
	if err := ValidateRunID("context.parent_run_id", req.ParentRunID); err != nil {
		return err
	}
	if req.ParentRunID != "" && req.RunID == "" {
		return Errorf(EINVALID, "context.parent_run_id needs context.run_id: it names the parent of the run the request is in")
	}
	if req.ParentRunID != "" && req.ParentRunID == req.RunID {
		return Errorf(EINVALID, "context.parent_run_id must differ from context.run_id: a run cannot be its own parent")
	}
	if r := req.Reserve; r != nil && (r.Input < 0 || r.Output < 0 || r.CacheRead < 0 || r.CacheWrite < 0 || r.Total() != req.Tokens) {
		return Errorf(EINVALID, "the reservation's split (%d tokens) is not its tokens (%d)", r.Total(), req.Tokens)
	}
	return nil
}

// baseTier sets *base to the tier named name: from the store's memory when
// fromMemory and the store can confirm it later (cached is then true),
// else as stored.
func (s *Service) baseTier(ctx context.Context, base *Tier, name string, fromMemory bool) (cached bool, err error) {
	if fromMemory && !s.tiersUnconfirmable.Load() {
		*base, cached = s.tiers.CachedTier(name)
	}
	if !cached {
		*base, err = s.readTier(ctx, name)
	}
	return cached, err
}

// viewUnconsumed completes d, the decision of c refused before the rate
// limiter ran, with the windows as they stand, nothing consumed, and what
// its shadow limits and its pool would have said.
func (s *Service) viewUnconsumed(ctx context.Context, c *Check, d *Decision) error {
	u, err := s.limiter.usage(ctx, c.UserID, c.Tier, fixedClock(c.Now), c.Tier.Metered(), c.period)
	if err != nil {
		return err
	}
	d.Windows, d.Concurrency, d.Month = &u.Windows, unconsumed(&u, c.Tier), u.Month
	if d.Shadow, err = s.limiter.shadowView(ctx, c); err != nil {
		return err
	}
	if c.pool != nil {
		if d.Account, err = s.limiter.poolView(ctx, c.pool, c.Now); err != nil {
			return err
		}
	}
	return nil
}

// checkState is what one Service.Check decides on.
type checkState struct {
	check      Check
	tier, base Tier
}

// Usage returns userID's window state. With a tier name, each window also
// carries that tier's limit, remaining quota and reset; otherwise only counts.
func (s *Service) Usage(ctx context.Context, userID, tierName string) ([len(Windows)]WindowState, error) {
	if err := ValidateUserID(userID); err != nil {
		return [len(Windows)]WindowState{}, err
	}
	var tier *Tier
	if tierName != "" {
		t, err := s.tiers.Tier(ctx, tierName)
		if ErrorCode(err) == ENOTFOUND {
			return [len(Windows)]WindowState{}, Errorf(EINVALID, "unknown tier %s", Quote(tierName))
		} else if err != nil {
			return [len(Windows)]WindowState{}, err
		}
		tier = &t
	}
	u, err := s.limiter.usage(ctx, userID, tier, s.now, true, nil)
	return u.Windows, err
}

// Forget deletes userID's recorded requests.
func (s *Service) Forget(ctx context.Context, userID string) error {
	if err := ValidateUserID(userID); err != nil {
		return err
	}
	return s.limiter.Store.Forget(WithChangeTime(ctx, s.now().UTC().Truncate(Resolution)), userID)
}

// sameAsStored reports whether rec, the record of userID (nil for none),
// and base, the tier it led to, are as stored.
func (s *Service) sameAsStored(ctx context.Context, userID string, rec *UserRecord, base *Tier) (bool, error) {
	if s.users != nil {
		stored, err := s.readUser(ctx, userID)
		if err != nil || !sameDecisions(stored, rec) {
			return false, err
		}
	}
	t, err := s.tiers.Tier(ctx, base.Name)
	switch {
	case ErrorCode(err) == ENOTFOUND:
		return false, nil
	case err != nil:
		return false, err
	}
	return SameLimits(&t, base), nil
}

// readTier reads the named tier from the store; an unknown one is EINVALID,
// as the request named it.
func (s *Service) readTier(ctx context.Context, name string) (Tier, error) {
	t, err := s.tiers.Tier(ctx, name)
	if ErrorCode(err) == ENOTFOUND {
		return Tier{}, Errorf(EINVALID, "unknown tier %s", Quote(name))
	}
	return t, err
}

// Tiers returns every tier ordered by name.
func (s *Service) Tiers(ctx context.Context) ([]Tier, error) { return s.tiers.Tiers(ctx) }

// Tier returns the named tier, or an ENOTFOUND error.
func (s *Service) Tier(ctx context.Context, name string) (Tier, error) {
	return s.tiers.Tier(ctx, name)
}

// PutTier validates t, stamps it with the current time and creates or
// replaces it. The change applies to the very next check and is recorded in
// the audit log with the source ctx carries (see WithChangeSource). It
// reports whether the tier was created.
func (s *Service) PutTier(ctx context.Context, t Tier) (Tier, bool, error) {
	return s.putTier(ctx, t, TierUpdate{})
}

// CreateTier is PutTier for a tier that must not exist yet: if one of that
// name exists, however recently it was made, it fails with ECONFLICT and
// changes nothing.
func (s *Service) CreateTier(ctx context.Context, t Tier) (Tier, error) {
	t, _, err := s.putTier(ctx, t, TierUpdate{Mode: PutCreate})
	return t, err
}

// ReplaceTier is PutTier for an edit of a tier read earlier, whose
// UpdatedAt was readAt: a tier deleted meanwhile fails with ENOTFOUND and
// stays deleted, and one changed meanwhile fails with ECONFLICT, so an edit
// made on stale values never silently undoes someone else's.
func (s *Service) ReplaceTier(ctx context.Context, t Tier, readAt time.Time) (Tier, error) {
	t, _, err := s.putTier(ctx, t, TierUpdate{Mode: PutReplace, IfUpdatedAt: &readAt})
	return t, err
}

// putTier puts t with the mode and precondition of u.
func (s *Service) putTier(ctx context.Context, t Tier, u TierUpdate) (Tier, bool, error) {
	if err := t.Validate(); err != nil {
		return Tier{}, false, err
	}
	if t.Features == nil {
		t.Features = []string{}
	}
	t.UpdatedAt = s.now().UTC().Truncate(Resolution)
	u.At, u.Source, u.Put = t.UpdatedAt, ChangeSource(ctx), []Tier{t}
	changes, err := s.tiers.UpdateTiers(ctx, u)
	if err != nil {
		return Tier{}, false, err
	}
	return t, len(changes) == 1 && changes[0].Created(), nil
}

// DeleteTier removes the named tier. The default tier cannot be deleted:
// every request that names no tier would then fail.
func (s *Service) DeleteTier(ctx context.Context, name string) error {
	if name == s.defaultTier {
		return Errorf(ECONFLICT, "tier %s is the default tier and cannot be deleted", Quote(name))
	}
	_, err := s.tiers.UpdateTiers(ctx, TierUpdate{At: s.now().UTC().Truncate(Resolution), Source: ChangeSource(ctx), Delete: []string{name}})
	return err
}

// ImportTiers makes the stored tiers match tiers in one transaction: it
// creates the tiers that are missing, replaces those whose limits, features,
// models or description differ and, with prune, deletes every tier not
// listed. It checks every tier before changing anything, refuses to prune
// the default tier, and returns the changes made, recorded with
// SourceImport. Tiers that are already as listed are left alone, so
// importing the same list twice changes nothing the second time.
func (s *Service) ImportTiers(ctx context.Context, tiers []Tier, prune bool) ([]TierChange, error) {
	u, err := s.tierImport(tiers, prune)
	if err != nil {
		return nil, err
	}
	return s.tiers.UpdateTiers(ctx, u)
}

// tierImport checks tiers and returns the update that imports them.
func (s *Service) tierImport(tiers []Tier, prune bool) (TierUpdate, error) {
	at := s.now().UTC().Truncate(Resolution)
	put := make([]Tier, len(tiers))
	seen := make(map[string]bool, len(tiers))
	for i, t := range tiers {
		if err := t.Validate(); err != nil {
			return TierUpdate{}, Errorf(EINVALID, "tier %d (%s): %s", i+1, Quote(t.Name), ErrorMessage(err))
		}
		if seen[t.Name] {
			return TierUpdate{}, Errorf(EINVALID, "tier %s is listed twice", Quote(t.Name))
		}
		seen[t.Name] = true
		if t.Features == nil {
			t.Features = []string{}
		}
		t.UpdatedAt = at
		put[i] = t
	}
	if prune && !seen[s.defaultTier] {
		return TierUpdate{}, Errorf(ECONFLICT, "tier %s is the default tier: pruning would delete it, so list it or import without pruning", Quote(s.defaultTier))
	}
	return TierUpdate{At: at, Source: SourceImport, Put: put, Prune: prune, SkipUnchanged: true}, nil
}

// TierChanges returns the latest limit changes to tiers, newest first.
func (s *Service) TierChanges(ctx context.Context, limit int) ([]TierChange, error) {
	return s.tiers.TierChanges(ctx, limit)
}
