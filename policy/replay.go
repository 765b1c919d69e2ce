package policy

import (
	"context"
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
}

// UserPreview is one user's share of a Preview.
type UserPreview struct {
	UserID            string
	Requests, Refused int64
}

// LimitsLookup returns the limits that replace a tier's for userID, and
// whether there are any. A nil LimitsLookup has none for anyone.
type LimitsLookup func(userID string) (RequestLimits, bool)

// Replayer replays recorded requests through limits, exactly as the
// RateLimiter would decide them: a request is refused when a window already
// holds its ceiling of the requests replayed before it and admitted, and a
// refused request is not counted in any window. Requests must come grouped
// by user and, within a user, in time order (requests at one instant
// together), as a scan of
// the requests table in key order gives them.
//
// Each user's admitted requests are kept in one slice, with an index per
// window to its oldest request still inside: a window only ever moves
// forward, so every request is appended once and passed over at most once
// per window, and no window is read by scanning. The zero value is not
// usable; a Replayer is not safe for concurrent use.
type Replayer struct {
	limits   RequestLimits
	override LimitsLookup
	from, to int64 // Unix microseconds

	user     string
	started  bool
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
	return &Replayer{limits: limits, override: override, from: from.UnixMicro(), to: to.UnixMicro(),
		res: Preview{From: from.UTC(), To: to.UTC()}}
}

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
		r.cur = r.limits
		if r.override != nil {
			if l, ok := r.override(userID); ok {
				r.cur = l
			}
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
			r.res.RefusedBy[w]++
			return nil
		}
	}
	r.admitted = append(r.admitted, at)
	return nil
}

// endUser adds the current user's figures to the result.
func (r *Replayer) endUser() {
	if !r.started || r.userReq == 0 {
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
// of the stored requests. A tier without shadow limits replays nothing and
// has zero of everything; an unknown one is ENOTFOUND.
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
// last PreviewWindow through proposed, user by user, and reports what they
// would have refused. It changes nothing. An unknown tier is ENOTFOUND.
func (s *Service) PreviewTier(ctx context.Context, name string, proposed RequestLimits) (Preview, error) {
	if errs := proposed.validate(""); len(errs) > 0 {
		return Preview{}, &Error{Code: EINVALID, Message: errs[0].Message}
	}
	t, err := s.tiers.Tier(ctx, name)
	if err != nil {
		return Preview{}, err
	}
	now := s.now()
	r := NewReplayer(proposed, now.Add(-PreviewWindow), now, s.overrides(proposed))
	if err := s.replay(ctx, &t, now.Add(-PreviewWindow), now, r.Add); err != nil {
		return Preview{}, err
	}
	p := r.Result()
	p.Tier = name
	return p, nil
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

// overridesRequestLimits reports whether l overrides a limit that
// RequestLimits holds.
func overridesRequestLimits(l *Limits) bool {
	for i := range LimitFields {
		if f := &LimitFields[i]; f.InRequestLimits() && f.Override(l).Set {
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
	// An account's pool records its members' requests under its plan's
	// tier too, but it is no user: previews and shadow replays are of the
	// users' own limits, and a pool replayed through them would count as
	// one more user refused.
	return s.replays.ReplayRequests(ctx, t.ID, from, to, func(userID string, at int64) error {
		if IsAccountKey(userID) {
			return nil
		}
		return fn(userID, at)
	})
}

// replaySlot admits one replay at a time in the process.
var replaySlot = make(chan struct{}, 1)
