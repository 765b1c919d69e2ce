package policy

import (
	"context"
	"slices"
	"time"
)

// WithStats has the service count every check it decides (dry runs
// excepted) with counter, and read the counts and the other figures of the
// admin overview from stats.
func WithStats(stats StatsStore, counter CheckCounter) Option {
	return func(s *Service) { s.stats, s.counter = stats, counter }
}

// KeepsStats reports whether the service counts checks and reads the
// figures of the overview (see WithStats).
func (s *Service) KeepsStats() bool { return s.stats != nil }

// StatsPeriod is a span of time ending now, cut into buckets.
type StatsPeriod struct {
	Name   string // "hour" or "day"
	Length time.Duration
	Bucket time.Duration
}

// The periods of the overview and GET /v1/stats.
var (
	PeriodHour = StatsPeriod{Name: "hour", Length: time.Hour, Bucket: time.Minute}
	PeriodDay  = StatsPeriod{Name: "day", Length: 24 * time.Hour, Bucket: time.Hour}
)

// ParsePeriod returns the period named name, "hour" or "day".
func ParsePeriod(name string) (StatsPeriod, error) {
	switch name {
	case PeriodHour.Name:
		return PeriodHour, nil
	case PeriodDay.Name:
		return PeriodDay, nil
	}
	return StatsPeriod{}, Errorf(EINVALID, "period must be hour or day")
}

// Span returns the first bucket's start and the end of the last at now: the
// last bucket is the one now is in.
func (p StatsPeriod) Span(now time.Time) (from, to time.Time) {
	to = now.UTC().Truncate(p.Bucket).Add(p.Bucket)
	return to.Add(-p.Length), to
}

// TierStats is what one tier's checks did over a period.
type TierStats struct {
	Tier   string
	Period StatsPeriod
	// Buckets holds one bucket per Period.Bucket, oldest first, empty
	// ones included.
	Buckets []StatsBucket
}

// Stats returns the figures of the period at the service's now, one
// TierStats per tier with checks or tokens in it, ordered by name; with a
// tier name, that tier's alone (even without traffic). It fails with
// EUNAVAILABLE when the service keeps no statistics.
func (s *Service) Stats(ctx context.Context, p StatsPeriod, tier string) ([]TierStats, error) {
	if s.stats == nil {
		return nil, Errorf(EUNAVAILABLE, "this service keeps no statistics")
	}
	from, to := p.Span(s.now())
	buckets, err := s.stats.Stats(ctx, from, to, p.Bucket, tier)
	if err != nil {
		return nil, err
	}
	if tier != "" && len(buckets) == 0 {
		if _, err := s.readTier(ctx, tier); err != nil {
			return nil, err
		}
	}
	n := int(p.Length / p.Bucket)
	var out []TierStats
	for _, b := range buckets {
		if len(out) == 0 || out[len(out)-1].Tier != b.Tier {
			ts := TierStats{Tier: b.Tier, Period: p, Buckets: make([]StatsBucket, n)}
			for i := range ts.Buckets {
				ts.Buckets[i] = StatsBucket{Tier: b.Tier, Start: from.Add(time.Duration(i) * p.Bucket)}
			}
			out = append(out, ts)
		}
		if i := int(b.Start.Sub(from) / p.Bucket); i >= 0 && i < n {
			out[len(out)-1].Buckets[i] = b
		}
	}
	if tier != "" && len(out) == 0 {
		ts := TierStats{Tier: tier, Period: p, Buckets: make([]StatsBucket, n)}
		for i := range ts.Buckets {
			ts.Buckets[i] = StatsBucket{Tier: tier, Start: from.Add(time.Duration(i) * p.Bucket)}
		}
		out = append(out, ts)
	}
	return out, nil
}

// CallsInFlight returns the calls open now per tier.
func (s *Service) CallsInFlight(ctx context.Context) (map[string]int64, error) {
	if s.stats == nil {
		return nil, Errorf(EUNAVAILABLE, "this service keeps no statistics")
	}
	return s.stats.CallsInFlight(ctx, s.now())
}

// TopUser is one of the users with the most requests in a period.
type TopUser struct {
	UserID   string
	Requests int64
	// Tier is the tier the user was last checked under, or the default
	// tier when the service does not remember.
	Tier string
	// Share is the fraction of the tightest of the tier's limits that the
	// user's requests fill now, from 0; Window names that limit. Share is
	// -1 when the tier no longer exists.
	Share  float64
	Window Window
}

// TopUsers returns, for each of one or two periods, the n users with the
// most requests recorded in it, most first, each with the share of their
// tightest limit used now.
func (s *Service) TopUsers(ctx context.Context, periods []StatsPeriod, n int) ([][]TopUser, error) {
	if s.stats == nil {
		return nil, Errorf(EUNAVAILABLE, "this service keeps no statistics")
	}
	now := s.now()
	from := make([]time.Time, len(periods))
	for i, p := range periods {
		from[i] = now.Add(-p.Length)
	}
	lists, err := s.stats.TopUsers(ctx, from, n)
	if err != nil {
		return nil, err
	}
	tiers := make(map[string]*Tier)
	shares := make(map[string]TopUser) // by user: the share is the same in every list
	out := make([][]TopUser, len(lists))
	for li, users := range lists {
		out[li] = make([]TopUser, len(users))
		for i, u := range users {
			tu, ok := shares[u.UserID]
			if !ok {
				tier, err := s.UserTier(ctx, u.UserID)
				if err != nil {
					return nil, err
				}
				tu = TopUser{UserID: u.UserID, Share: -1, Tier: tier}
				t, known := tiers[tu.Tier]
				if !known {
					if tt, err := s.tiers.Tier(ctx, tu.Tier); err == nil {
						t = &tt
					} else if ErrorCode(err) != ENOTFOUND {
						return nil, err
					}
					tiers[tu.Tier] = t
				}
				if t != nil {
					states, err := s.limiter.Usage(ctx, u.UserID, t, now)
					if err != nil {
						return nil, err
					}
					tu.Share, tu.Window = TightestShare(states)
				}
				shares[u.UserID] = tu
			}
			tu.Requests = u.Requests
			out[li][i] = tu
		}
	}
	return out, nil
}

// TightestShare returns the largest fraction of a limit that states
// count, and its window. A limit of 0 counts as full.
func TightestShare(states [len(Windows)]WindowState) (float64, Window) {
	best, bw := 0.0, Minute
	for _, w := range Windows {
		st := states[w]
		share := 1.0
		if st.Limit > 0 {
			share = float64(st.Count) / float64(st.Limit)
		}
		if share > best {
			best, bw = share, w
		}
	}
	return best, bw
}

// UserTier returns the tier of userID's newest recorded request, or else
// the default tier.
func (s *Service) UserTier(ctx context.Context, userID string) (string, error) {
	if s.stats != nil {
		t, ok, err := s.stats.LastTier(ctx, userID)
		if err != nil || ok {
			return t, err
		}
	}
	return s.defaultTier, nil
}

// UserDay returns userID's requests over the last day in buckets of size
// bucket, oldest first, and the start of the first.
func (s *Service) UserDay(ctx context.Context, userID string, bucket time.Duration) ([]int64, time.Time, error) {
	if err := ValidateUserID(userID); err != nil {
		return nil, time.Time{}, err
	}
	if s.stats == nil {
		return nil, time.Time{}, Errorf(EUNAVAILABLE, "this service keeps no statistics")
	}
	p := StatsPeriod{Length: 24 * time.Hour, Bucket: bucket}
	from, to := p.Span(s.now())
	counts, err := s.stats.UserRequests(ctx, userID, from, to, bucket)
	return counts, from, err
}

// SortedReasons returns the keys of m in the order of RefusalReasons, then
// any others by name.
func SortedReasons(m map[string]int64) []string {
	out := make([]string, 0, len(m))
	for _, r := range RefusalReasons {
		if _, ok := m[r]; ok {
			out = append(out, r)
		}
	}
	var rest []string
	for r := range m {
		if !slices.Contains(RefusalReasons[:], r) {
			rest = append(rest, r)
		}
	}
	slices.Sort(rest)
	return append(out, rest...)
}
