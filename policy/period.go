package policy

import (
	"context"
	"strings"
	"sync"
	"time"

	// The zone database is embedded, so that a host without zoneinfo (a
	// scratch container) finds every name, and every host draws the same
	// period boundaries from the same rules.
	_ "time/tzdata"
)

// Billing periods. A subscription is sold by the month, renewing on its
// billing day: its period runs from local midnight of its anchor day, in
// its time zone, to local midnight of the next month's anchor day. In a
// month shorter than the anchor the period starts on its last day, so an
// anchor of 31 gives periods starting 31 January, 28 (or 29) February, 31
// March, 30 April. A period is 28 to 31 local days long, and one that
// spans a daylight-saving change is an hour shorter or longer in UTC.
//
// Local midnight is not always a clock reading that happens once. Where
// clocks spring forward over midnight (America/Sao_Paulo until 2019), the
// day's first instant is the change itself, 01:00 local; where they fall
// back from 01:00 to midnight (America/Havana), midnight comes twice and
// the first counts;
// where a whole day is skipped (Pacific/Apia, 30 December 2011), the period
// starts on the next day that exists. All three are one rule: a period
// starts at the first instant at which the local clock reads midnight of
// its anchor day or later.

// MaxBillingAnchor is the latest billing anchor day.
const MaxBillingAnchor = 31

// DefaultBillingAnchor is the billing anchor of a subscriber that sets
// none: periods run from the 1st to the 1st.
const DefaultBillingAnchor = 1

// BillingPeriod returns the billing period holding t, in loc with anchor
// day anchor: start <= t < end, and the next period starts at end. A nil
// loc is UTC; an anchor outside 1 to 31 is taken as the nearer of them.
// The results are in loc.
func BillingPeriod(t time.Time, loc *time.Location, anchor int) (start, end time.Time) {
	if loc == nil {
		loc = time.UTC
	}
	anchor = min(max(anchor, 1), MaxBillingAnchor)
	y, m, _ := t.In(loc).Date()
	// The period named by t's local month starts in that month; local
	// dates can step back across midnight (a fall-back at 00:00), so
	// t may belong to a neighbour, which the loops find.
	start = periodStart(y, m, loc, anchor)
	for t.Before(start) {
		m--
		start = periodStart(y, m, loc, anchor)
	}
	end = periodStart(y, m+1, loc, anchor)
	for !t.Before(end) {
		m++
		start, end = end, periodStart(y, m+1, loc, anchor)
	}
	return start, end
}

// periodStart returns the start of the period beginning in month m of year
// y (normalized as time.Date does): the first instant at which loc's clock
// reads midnight of the anchor day, or of the month's last day when it is
// shorter, or later.
func periodStart(y int, m time.Month, loc *time.Location, anchor int) time.Time {
	first := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
	y, m = first.Year(), first.Month()
	day := min(anchor, daysIn(y, m))
	// The wall clock reading sought, as if it were UTC: an instant i
	// reads wall or later when i + offset(i) >= wall.
	wall := time.Date(y, m, day, 0, 0, 0, 0, time.UTC).Unix()
	offset := func(i int64) int64 {
		_, off := time.Unix(i, 0).In(loc).Zone()
		return int64(off)
	}
	// From before time.Date's answer, which is right but for a clock
	// change near midnight, to the first instant that reads wall, a step
	// at a time. Time.ZoneBounds would give the changes directly, but in
	// the years past a zone's last listed change it ends a leap year's
	// last zone period a day early, before the instant asked about
	// (golang/go#81583, Go 1.26), and a walk over the bounds never ends.
	const step = 3600 // no zone changes its clock twice within an hour
	i := time.Date(y, m, day, 0, 0, 0, 0, loc).Unix() - step
	for i+offset(i) >= wall {
		i -= step
	}
	for {
		next := i + step
		before, after := offset(i), offset(next)
		if next+after < wall {
			i = next
			continue
		}
		if before == after {
			return time.Unix(wall-after, 0).In(loc)
		}
		// The clock changed in (i, next]: find the instant, then whether
		// the old offset reached wall before it.
		lo, hi := i, next
		for hi-lo > 1 {
			if mid := lo + (hi-lo)/2; offset(mid) == before {
				lo = mid
			} else {
				hi = mid
			}
		}
		if wall-before < hi {
			return time.Unix(wall-before, 0).In(loc)
		}
		return time.Unix(max(hi, wall-after), 0).In(loc)
	}
}

// daysIn returns the number of days in month m of year y.
func daysIn(y int, m time.Month) int {
	return time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// BillingCycle says where a subscriber's billing periods fall. The zero
// value is periods from the 1st to the 1st in UTC.
type BillingCycle struct {
	// Location is the time zone; nil is UTC.
	Location *time.Location
	// Anchor is the billing day, 1 to 31; 0 is DefaultBillingAnchor.
	Anchor int
}

// Period returns the billing period of c holding t (see BillingPeriod).
func (c BillingCycle) Period(t time.Time) Period {
	start, end := BillingPeriod(t, c.Location, c.anchor())
	return Period{Start: start, End: end, TimeZone: c.TimeZone(), Anchor: c.anchor()}
}

// TimeZone returns the name of c's time zone.
func (c BillingCycle) TimeZone() string {
	if c.Location == nil {
		return "UTC"
	}
	return c.Location.String()
}

func (c BillingCycle) anchor() int {
	if c.Anchor == 0 {
		return DefaultBillingAnchor
	}
	return c.Anchor
}

// Period is one billing period: from Start (inclusive) to End (exclusive),
// both in the time zone named TimeZone, on anchor day Anchor.
type Period struct {
	Start, End time.Time
	TimeZone   string
	Anchor     int
}

// maxTimeZoneName bounds the time zone names looked up: the longest in
// the database is 32 bytes.
const maxTimeZoneName = 64

// zones caches the locations LoadTimeZone loaded, by name: loading one
// parses its rules.
var zones sync.Map // name → *time.Location

// LoadTimeZone returns the time zone of the IANA database named name, such
// as "Europe/Berlin" or "UTC", or an EINVALID error that names the field
// time_zone. "Local", the host's zone, and "" are not names of it. It is
// safe for concurrent use.
func LoadTimeZone(name string) (*time.Location, error) {
	if v, ok := zones.Load(name); ok {
		return v.(*time.Location), nil
	}
	// time.LoadLocation reads "" and "Local" as UTC and the host's zone,
	// and may read the host's zoneinfo, where a case-insensitive file
	// system finds "europe/berlin": the name must be exactly the one the
	// location reports.
	loc, err := time.LoadLocation(name)
	if name == "" || name == "Local" || len(name) > maxTimeZoneName || strings.ContainsAny(name, "\\\x00") || err != nil || loc.String() != name {
		return nil, Errorf(EINVALID, "time_zone %s is not a known time zone", Quote(name))
	}
	zones.Store(name, loc)
	return loc, nil
}

// validBillingAnchor checks a billing anchor set by a record or account: 0
// (unset) or 1 to 31.
func validBillingAnchor(anchor int) *FieldError {
	if anchor < 0 || anchor > MaxBillingAnchor {
		return &FieldError{"billing_anchor", "billing_anchor must be an integer from 1 to 31"}
	}
	return nil
}

// validTimeZone checks a time zone set by a record or account: "" (unset)
// or a name LoadTimeZone knows.
func validTimeZone(name string) *FieldError {
	if name == "" {
		return nil
	}
	if _, err := LoadTimeZone(name); err != nil {
		return &FieldError{"time_zone", ErrorMessage(err)}
	}
	return nil
}

// cycleOf resolves a billing cycle field by field: the first of zones and
// anchors set ("" and 0 are unset), else def's.
func cycleOf(def BillingCycle, zones []string, anchors []int) (BillingCycle, error) {
	c := def
	for _, z := range zones {
		if z != "" {
			loc, err := LoadTimeZone(z)
			if err != nil {
				return BillingCycle{}, err
			}
			c.Location = loc
			break
		}
	}
	for _, a := range anchors {
		if a != 0 {
			c.Anchor = a
			break
		}
	}
	return c, nil
}

// Cycle returns the billing cycle of a's pooled limits: its own time zone
// and anchor where it sets them, else def's.
func (a *Account) Cycle(def BillingCycle) (BillingCycle, error) {
	return cycleOf(def, []string{a.TimeZone}, []int{a.BillingAnchor})
}

// Cycle returns the billing cycle of a member's own limits: its record's
// time zone and anchor where r sets them, else those of its account a (nil
// for none), else def's; each is resolved on its own, so a record may set
// its zone and keep its account's anchor. A nil r sets neither.
func (r *UserRecord) Cycle(a *Account, def BillingCycle) (BillingCycle, error) {
	zones, anchors := make([]string, 0, 2), make([]int, 0, 2)
	if r != nil {
		zones, anchors = append(zones, r.TimeZone), append(anchors, r.BillingAnchor)
	}
	if a != nil {
		zones, anchors = append(zones, a.TimeZone), append(anchors, a.BillingAnchor)
	}
	return cycleOf(def, zones, anchors)
}

// WithTimeZone sets the time zone of the billing periods of users and
// accounts that set none (default UTC; nil is UTC).
func WithTimeZone(loc *time.Location) Option {
	return func(s *Service) { s.billing.Location = loc }
}

// DefaultCycle returns the billing cycle of users and accounts that set
// no time zone and no anchor.
func (s *Service) DefaultCycle() BillingCycle {
	return BillingCycle{Location: s.billing.Location, Anchor: s.billing.anchor()}
}

// UserPeriod returns the current billing period of userID's own limits,
// from its record and the account the record names (see UserRecord.Cycle);
// a user without a record is on the default cycle.
func (s *Service) UserPeriod(ctx context.Context, userID string) (Period, error) {
	if err := ValidateUserID(userID); err != nil {
		return Period{}, err
	}
	var r *UserRecord
	var a *Account
	if s.users != nil && userID != "" {
		var err error
		if r, err = s.readUser(ctx, userID); err != nil {
			return Period{}, err
		}
	}
	if r != nil && r.Account != "" && s.accounts != nil {
		stored, err := s.accounts.Account(ctx, r.Account)
		switch {
		case err == nil:
			a = &stored
		case ErrorCode(err) != ENOTFOUND:
			return Period{}, err
		}
	}
	c, err := r.Cycle(a, s.DefaultCycle())
	if err != nil {
		return Period{}, err
	}
	return c.Period(s.now()), nil
}

// AccountPeriod returns the current billing period of a's pooled limits.
func (s *Service) AccountPeriod(a *Account) (Period, error) {
	c, err := a.Cycle(s.DefaultCycle())
	if err != nil {
		return Period{}, err
	}
	return c.Period(s.now()), nil
}
