package policy

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"
)

// PreviewWindow is how far back a preview replays: the longest window.
const PreviewWindow = Retention

// MaxTopUsers is the most users a Preview lists in TopUsers.
const MaxTopUsers = 10

// Preview is what replaying recorded requests through proposed limits
// found: how many of them the limits would have refused, and whose.
//
// The pools of accounts (see AccountKey) are replayed apart from users,
// through the pooled limits (RequestLimits.Account), and counted only in
// AccountsRefused and RefusedByAccount: the other figures are users' own
// requests, and no pool is a user. The two are replayed independently, as
// advice: a request a pool would refuse still counts in its member's
// windows, and the other way round.
type Preview struct {
	Tier string
	// From and To bound the replayed requests: recorded strictly after
	// From and at or before To.
	From, To time.Time
	// Users and Requests count the users and requests replayed.
	Users, Requests int64
	// UsersRefused counts the users with a refused request;
	// RequestsRefused the refused requests.
	UsersRefused, RequestsRefused int64
	// RefusedBy counts the refused requests by the first window that was
	// full, in the order of Windows, as Evaluate picks it.
	RefusedBy [len(Windows)]int64
	// TopUsers are up to MaxTopUsers users with the most refusals, most
	// first, ties by user id.
	TopUsers []UserPreview
	// AccountsRefused counts the accounts whose pool had a request
	// refused; RefusedByAccount counts the requests refused in pools by
	// window, as RefusedBy does users'.
	AccountsRefused  int64
	RefusedByAccount [len(Windows)]int64
	// UsersOver counts the users replayed whose use already passes a
	// month or spend limit of the proposed tier (see PreviewTierChange):
	// their current billing period's requests, tokens or spend, or a
	// window's spend now; AccountsOver the accounts on the tier whose
	// pools pass the proposed pooled ones.
	UsersOver, AccountsOver int64
}

// UserPreview is one user's share of a Preview.
type UserPreview struct {
	UserID            string
	Requests, Refused int64
}

// LimitsLookup returns the limits that replace a tier's for userID, and
// whether there are any. A nil LimitsLookup has none for anyone.
type LimitsLookup func(userID string) (RequestLimits, bool)

// AccountLookup returns the overrides of the pooled limits of the account
// named id: the zero Overrides for an account without any, or without
// a record. An error stops the replay.
type AccountLookup func(id string) (Overrides, error)

// Replayer replays recorded requests through limits, exactly as the
// RateLimiter would decide them: a request is refused when a window already
// holds its ceiling of the requests replayed before it and admitted, and a
// refused request is not counted in any window. Requests must come grouped
// by user and, within a user, in time order (requests at one instant
// together), as a scan of
// the requests table in key order gives them. The requests of an
// account's pool, under AccountKey, are replayed through limits.Account
// with the account's overrides (see SetAccounts), a window it leaves
// unset refusing nothing.
//
// Each user's admitted requests are kept in one slice, with an index per
// window to its oldest request still inside: a window only ever moves
// forward, so every request is appended once and passed over at most once
// per window, and no window is read by scanning. The zero value is not
// usable; a Replayer is not safe for concurrent use.
type Replayer struct {
	limits   RequestLimits
	override LimitsLookup
	pool     LimitSet      // limits.Account, or none
	pooled   RequestLimits // pool as a pool is evaluated on it
	accounts AccountLookup
	from, to int64 // Unix microseconds

	user     string
	started  bool
	isPool   bool // user is an account's pool
	cur      RequestLimits
	last     int64
	admitted []int64
	heads    [len(Windows)]int
	userReq  int64
	userRef  int64

	res     Preview
	refused []UserPreview
}

// NewReplayer returns a Replayer of the requests recorded strictly after
// from and at or before to through limits, or through what override
// returns for a user it has limits for (nil: no overrides).
func NewReplayer(limits RequestLimits, from, to time.Time, override LimitsLookup) *Replayer {
	from, to = from.Truncate(Resolution), to.Truncate(Resolution)
	r := &Replayer{limits: limits, override: override, from: from.UnixMicro(), to: to.UnixMicro(),
		res: Preview{From: from.UTC(), To: to.UTC()}}
	if limits.Account != nil {
		r.pool = *limits.Account
	}
	r.pooled = r.pool.requestLimits()
	return r
}

// SetAccounts has each account's pool replayed through limits.Account
// with the overrides lookup returns for the account, as a check decides
// its members; without it, every pool is replayed through limits.Account
// as it is.
func (r *Replayer) SetAccounts(lookup AccountLookup) { r.accounts = lookup }

// Add replays the request of userID recorded at at, in Unix microseconds.
// A request outside the replayed time is ignored. Requests out of order
// are an EINTERNAL error.
func (r *Replayer) Add(userID string, at int64) error {
	if at <= r.from || at > r.to {
		return nil
	}
	if !r.started || userID != r.user {
		if r.started && userID < r.user {
			return Errorf(EINTERNAL, "replay: user %s after %s", Quote(userID), Quote(r.user))
		}
		r.endUser()
		r.started, r.user = true, userID
		if err := r.limitsOf(userID); err != nil {
			r.started = false
			return err
		}
		r.admitted, r.heads, r.userReq, r.userRef = r.admitted[:0], [len(Windows)]int{}, 0, 0
	} else if at < r.last {
		return Errorf(EINTERNAL, "replay: request of %s at %d before %d", Quote(userID), at, r.last)
	}
	r.last = at
	r.userReq++
	for _, w := range Windows {
		cutoff := at - w.Duration().Microseconds()
		h := r.heads[w]
		for h < len(r.admitted) && r.admitted[h] <= cutoff {
			h++
		}
		r.heads[w] = h
		if int64(len(r.admitted)-h) >= r.cur.Ceiling(w) {
			r.userRef++
			if r.isPool {
				r.res.RefusedByAccount[w]++
			} else {
				r.res.RefusedBy[w]++
			}
			return nil
		}
	}
	r.admitted = append(r.admitted, at)
	return nil
}

// limitsOf sets the limits key, a user or an account's pool, is replayed
// through.
func (r *Replayer) limitsOf(key string) error {
	r.isPool = IsAccountKey(key)
	switch {
	case r.isPool && r.accounts != nil:
		o, err := r.accounts(key[len(AccountKeyPrefix):])
		if err != nil {
			return err
		}
		p := r.pool.WithOverrides(o)
		r.cur = p.requestLimits()
	case r.isPool:
		r.cur = r.pooled
	default:
		r.cur = r.limits
		if r.override != nil {
			if l, ok := r.override(key); ok {
				r.cur = l
			}
		}
	}
	return nil
}

// endUser adds the current user's figures to the result, or the current
// pool's.
func (r *Replayer) endUser() {
	if !r.started || r.userReq == 0 {
		return
	}
	if r.isPool {
		if r.userRef > 0 {
			r.res.AccountsRefused++
		}
		return
	}
	r.res.Users++
	r.res.Requests += r.userReq
	if r.userRef > 0 {
		r.res.UsersRefused++
		r.res.RequestsRefused += r.userRef
		r.refused = append(r.refused, UserPreview{UserID: r.user, Requests: r.userReq, Refused: r.userRef})
	}
}

// Result returns what the requests added so far found. Adding more after
// it is not allowed.
func (r *Replayer) Result() Preview {
	r.endUser()
	r.started = false
	slices.SortFunc(r.refused, func(a, b UserPreview) int {
		if a.Refused != b.Refused {
			if a.Refused > b.Refused {
				return -1
			}
			return 1
		}
		return strings.Compare(a.UserID, b.UserID)
	})
	res := r.res
	res.TopUsers = slices.Clone(r.refused[:min(len(r.refused), MaxTopUsers)])
	if res.TopUsers == nil {
		res.TopUsers = []UserPreview{}
	}
	return res
}

// ReplayStore reads the requests recorded under a tier for previews.
// Implementations are safe for concurrent use.
type ReplayStore interface {
	// ReplayRequests calls fn with every request recorded under the tier
	// whose ID is tierID strictly after from and at or before to, grouped
	// by user in increasing user id and, within a user, in time order (at
	// in Unix microseconds), each user's requests from one consistent
	// read that never waits for the writer. An error from fn stops it and
	// is returned.
	ReplayRequests(ctx context.Context, tierID int64, from, to time.Time, fn func(userID string, at int64) error) error
}

// WithReplays sets the store previews read recorded requests from (by
// default the request store, when it is a ReplayStore).
func WithReplays(r ReplayStore) Option { return func(s *Service) { s.replays = r } }

// ShadowRefusals replays the requests recorded under the named tier through
// its shadow limits, over the last hour and over the last day, in one read
// of the stored requests: users' through the shadow's request limits, the
// pools of its accounts through its Account (none refused when it has
// none). A tier without shadow limits replays nothing and has zero of
// everything; an unknown one is ENOTFOUND.
func (s *Service) ShadowRefusals(ctx context.Context, name string) (hour, day Preview, err error) {
	t, err := s.tiers.Tier(ctx, name)
	if err != nil || t.Shadow == nil {
		return Preview{Tier: name}, Preview{Tier: name}, err
	}
	now := s.now()
	// Checks decide shadow limits as the tier sets them, overrides or
	// not, and so does their replay.
	h := NewReplayer(*t.Shadow, now.Add(-time.Hour), now, nil)
	d := NewReplayer(*t.Shadow, now.Add(-PreviewWindow), now, nil)
	err = s.replay(ctx, &t, now.Add(-PreviewWindow), now, func(user string, at int64) error {
		if err := d.Add(user, at); err != nil {
			return err
		}
		return h.Add(user, at)
	})
	hour, day = h.Result(), d.Result()
	hour.Tier, day.Tier = name, name
	return hour, day, err
}

// PreviewTier replays the requests recorded under the named tier in the
// last PreviewWindow through proposed, user by user, and the pools of the
// accounts on the tier through proposed.Account (see Tier.PreviewLimits)
// with each account's overrides, and reports what they would have refused.
// A pool whose account has no record any more is replayed through
// proposed.Account as it is. It changes nothing. An unknown tier is
// ENOTFOUND.
func (s *Service) PreviewTier(ctx context.Context, name string, proposed RequestLimits) (Preview, error) {
	return s.previewTier(ctx, name, proposed, nil)
}

// previewTier is PreviewTier, telling seen, when not nil, the key of each
// request replayed.
func (s *Service) previewTier(ctx context.Context, name string, proposed RequestLimits, seen func(key string)) (Preview, error) {
	if errs := proposed.validate(""); len(errs) > 0 {
		return Preview{}, &Error{Code: EINVALID, Message: errs[0].Message}
	}
	t, err := s.tiers.Tier(ctx, name)
	if err != nil {
		return Preview{}, err
	}
	now := s.now()
	r := NewReplayer(proposed, now.Add(-PreviewWindow), now, s.overrides(proposed))
	r.SetAccounts(s.accountOverrides(ctx))
	add := r.Add
	if seen != nil {
		add = func(key string, at int64) error {
			seen(key)
			return r.Add(key, at)
		}
	}
	if err := s.replay(ctx, &t, now.Add(-PreviewWindow), now, add); err != nil {
		return Preview{}, err
	}
	p := r.Result()
	p.Tier = name
	return p, nil
}

// PreviewTierChange is PreviewTier for the proposed tier whole: besides
// the replay of its request limits, it counts the users replayed, and the
// accounts on the tier, whose current billing periods (and spend windows)
// already pass its month and spend limits (Preview.UsersOver and
// AccountsOver). A user's own overrides of those limits are not applied:
// the figures say what the tier's new values would find.
func (s *Service) PreviewTierChange(ctx context.Context, name string, proposed *Tier) (Preview, error) {
	overLimits := func(l *LimitSet) bool { return l.LimitsMonth() || l.LimitsSpend() }
	var pool LimitSet
	if proposed.Account != nil {
		pool = *proposed.Account
	}
	if !overLimits(&proposed.Limits) && !overLimits(&pool) {
		return s.PreviewTier(ctx, name, proposed.PreviewLimits())
	}
	users := map[string]bool{}
	p, err := s.previewTier(ctx, name, proposed.PreviewLimits(), func(key string) {
		if !IsAccountKey(key) {
			users[key] = true
		}
	})
	if err != nil {
		return Preview{}, err
	}
	if overLimits(&proposed.Limits) {
		for _, id := range slices.Sorted(maps.Keys(users)) {
			u, err := s.UsageReport(ctx, id, "")
			if err != nil {
				return Preview{}, err
			}
			if usageOver(&u, &proposed.Limits) {
				p.UsersOver++
			}
		}
	}
	if overLimits(&pool) && s.accounts != nil {
		for after := ""; ; {
			page, err := s.accounts.Accounts(ctx, after, 100)
			if err != nil {
				return Preview{}, err
			}
			for i := range page {
				if page[i].Tier != name {
					continue
				}
				u, err := s.AccountUsage(ctx, page[i].AccountID)
				if err != nil {
					return Preview{}, err
				}
				limits := pool.WithOverrides(page[i].Limits)
				if usageOver(&u.UsageReport, &limits) {
					p.AccountsOver++
				}
			}
			if len(page) < 100 {
				break
			}
			after = page[len(page)-1].AccountID
		}
	}
	return p, nil
}

// usageOver reports whether the use u reports passes a month or spend
// limit of l: its billing period's requests, tokens or spend, or a
// window's spend.
func usageOver(u *UsageReport, l *LimitSet) bool {
	over := func(id LimitID, used int64) bool { return l[id] != nil && used > *l[id] }
	for w, id := range [...]LimitID{CostPerMinute, CostPerHour, CostPerDay} {
		if c := u.Windows[w].Cost; c != nil && over(id, c.Used) {
			return true
		}
	}
	m := u.Month
	if m == nil {
		return false
	}
	if over(RequestsPerMonth, m.Count) {
		return true
	}
	if m.Tokens != nil && over(TokensPerMonth, m.Tokens.Used) {
		return true
	}
	return m.Cost != nil && over(CostPerMonth, m.Cost.Used)
}

// overrides returns the request limits of each user whose record
// overrides any of them, applied over base, as a check would decide that
// user; nil when the service keeps no user records. Records come from
// memory (CachedUser): a preview is advice, read without a transaction.
func (s *Service) overrides(base RequestLimits) LimitsLookup {
	if s.users == nil {
		return nil
	}
	var t Tier
	t = t.WithLimits(base)
	return func(userID string) (RequestLimits, bool) {
		rec, ok := s.users.CachedUser(userID)
		if !ok || !overridesRequestLimits(&rec.Limits) {
			return RequestLimits{}, false
		}
		u := t.WithOverrides(rec.Limits)
		return u.RequestLimits(), true
	}
}

// accountOverrides returns the overrides of each account's pooled limits
// as stored, none for an account without a record; nil when the service
// keeps no accounts. Each pool is read once, as its requests come.
func (s *Service) accountOverrides(ctx context.Context) AccountLookup {
	if s.accounts == nil {
		return nil
	}
	return func(id string) (Overrides, error) {
		a, err := s.accounts.Account(ctx, id)
		if ErrorCode(err) == ENOTFOUND {
			return Overrides{}, nil
		}
		return a.Limits, err
	}
}

// overridesRequestLimits reports whether l overrides a limit that
// RequestLimits holds.
func overridesRequestLimits(l *Overrides) bool {
	for i := range LimitFields {
		if f := &LimitFields[i]; f.InRequestLimits() && l[i].Set {
			return true
		}
	}
	return false
}

// replay reads the requests of t recorded strictly after from and at or
// before to into fn. Replays run one at a time: each is a long read that
// keeps a processor busy, and checks share the processors with it.
func (s *Service) replay(ctx context.Context, t *Tier, from, to time.Time, fn func(userID string, at int64) error) error {
	if s.replays == nil {
		return Errorf(EINTERNAL, "this request store keeps no tier with its requests, so it cannot preview")
	}
	if t.ID == 0 {
		return nil // a store that numbers no tier recorded none with its requests
	}
	select {
	case replaySlot <- struct{}{}:
		defer func() { <-replaySlot }()
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.replays.ReplayRequests(ctx, t.ID, from, to, fn)
}

// replaySlot admits one replay at a time in the process.
var replaySlot = make(chan struct{}, 1)
