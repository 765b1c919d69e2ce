package policy

import (
	"crypto/rand"
	"time"
)

// DefaultCallTimeout is how long a call stays open without being finished or
// kept alive before the service finishes it itself (see WithCallTimeout).
const DefaultCallTimeout = 10 * time.Minute

// MaxCallIDBytes is the longest call id accepted.
const MaxCallIDBytes = 64

// callIDLen is the length of every call id a check gives.
const callIDLen = 22

// ConcurrencyReason is the refusal reason of a check over the tier's
// max_concurrent.
const ConcurrencyReason = "concurrent call limit exceeded"

// TokenReason returns the refusal reason for a call whose tokens window w
// cannot hold.
func (w Window) TokenReason() string { return "per-" + w.String() + " token limit exceeded" }

// Metered reports whether the tier limits tokens, spend or concurrent calls: whether
// every check it admits opens a call (another opens one when it asks,
// Request.OpenCall).
func (t *Tier) Metered() bool {
	for i := range LimitFields {
		if f := &LimitFields[i]; f.Kind == KindTokens || f.Kind == KindConcurrency || f.Kind == KindCost {
			if _, ok := f.Value(t); ok {
				return true
			}
		}
	}
	return false
}

// TokenLimit returns the most tokens window w may count; ok is false when the
// tier sets no token limit for w.
func (t *Tier) TokenLimit(w Window) (limit int64, ok bool) { return t.limit(MeasureTokens, w) }

// Call is one metered model call: opened by a check admitted under a metered
// tier or asking for one (Request.OpenCall), finished by FinishCall or, at
// ExpiresAt, by the service itself.
type Call struct {
	// ID names the call: at most MaxCallIDBytes URL-safe characters.
	ID     string
	UserID string
	// Tier is the name of the tier the call was admitted under.
	Tier string
	// Account names the account whose pool the call also counts in (as
	// PoolCallID); empty for none. A finish or keepalive of the call
	// applies to both.
	Account string
	// Reserved is the tokens the check asked for, counted as used while the
	// call is open.
	Reserved  int64
	OpenedAt  time.Time
	ExpiresAt time.Time
	// FinishedAt is when the call finished: when FinishCall finished it, or
	// ExpiresAt when it expired first. Zero while the call is open.
	FinishedAt time.Time
	// Tokens is what the call counts once finished: the count reported, or
	// Reserved when none was; for an expired call, the larger of Reserved
	// and the count reported later. 0 while open.
	Tokens int64
	// Reported is the count the caller gave when finishing the call (Reserved
	// when it gave none); nil until the caller finished it.
	Reported *int64
	// Expired reports whether the service finished the call at ExpiresAt
	// because no finish came before.
	Expired bool

	// Model and Upstream name what the call was priced for: the check's
	// model and the gateway's upstream ("" for none).
	Model, Upstream string
	// Price is the entry of the price table the call is charged at, from
	// the version (PriceVersion) in force when it was admitted, for its
	// whole life: a new version never reprices it. Nil when unpriced: it
	// then costs nothing, and a check under a spend limit refuses it.
	Price        *Price
	PriceVersion int64
	// ReservedCost is what the reservation costs at Price, counted as
	// spent while the call is open.
	ReservedCost Money
	// Cost is what the call costs once finished, at Price (see Settle);
	// for an expired call, the larger of ReservedCost and the cost
	// reported later. 0 while open.
	Cost Money
	// ReportedCost is the cost of what the caller reported, set with
	// Reported.
	ReportedCost Money
	// RunID names the run the call is a step of, "" for none: what the
	// call reserves and uses counts in the run and its ancestors.
	RunID string
}

// Open reports whether the call has not finished.
func (c *Call) Open() bool { return c.FinishedAt.IsZero() }

// newCallID returns a new call id: 22 URL-safe characters, the first 8 the
// milliseconds of now (47 bits) in an alphabet whose order is that of its
// bytes, the other 14 random (84 bits). Ids of calls opened close in time
// sort close together, so a store keyed by id writes a new call next to the
// recent ones instead of into a random page. The first character holds the
// top 5 bits from the alphabet's second character on, so that an id never
// begins with '-', which a command line would take for a flag; it is '0'
// until 2109, and the time wraps in the year 6429.
func newCallID(now time.Time) string {
	const ordered = "-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"
	var b [callIDLen]byte
	_, _ = rand.Read(b[8:]) // never fails (crypto/rand panics instead)
	for i := 8; i < len(b); i++ {
		b[i] = ordered[b[i]&63]
	}
	ms := uint64(max(now.UnixMilli(), 0))
	for i := 7; i > 0; i-- {
		b[i] = ordered[ms&63]
		ms >>= 6
	}
	b[0] = ordered[1+ms&31]
	return string(b[:])
}

// ValidCallID reports whether id could name a call: 1 to MaxCallIDBytes
// characters of the URL-safe base64 alphabet.
func ValidCallID(id string) bool {
	if id == "" || len(id) > MaxCallIDBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Admission is what a RequestStore's Admit callback decides: whether to
// record a request, when, and which call to open with it.
type Admission struct {
	// At is when the request is recorded: after the user's newest request.
	At time.Time
	// Record asks the store to record the request; false records nothing.
	Record bool
	// Call, when Record is set, is opened in the same transaction as the
	// request is recorded: both are stored or neither is. Its ID is new.
	Call *Call
	// TierID is the ID of the tier the request was checked under, stored
	// with it for previews; 0 stores none.
	TierID int64
	// Run is what the admission does to runs, for a check in one; nil
	// otherwise. Its Close is stored even when Record is not set.
	Run *RunAdmission
}

// Ledger is a read view of one user's metered calls at one instant: their
// tokens and their cost, each a Measure. A call open at that instant whose
// ExpiresAt has passed counts as finished at ExpiresAt with its
// reservation. What a call used is counted at the time it finished; a
// user's finished amounts are ordered in time like requests (recorded at
// the newest one's time plus Resolution when the clock steps back). It is
// valid only inside the callback it was passed to.
type Ledger interface {
	// InFlight returns the number of calls open and what they reserve.
	InFlight() (calls int64, reserved Amounts, err error)
	// After returns what the calls finished strictly after t used.
	After(t time.Time) (Amounts, error)
	// OldestAfter returns the time of the oldest finished amount of m
	// (above 0) strictly after t; ok is false when there is none.
	OldestAfter(m Measure, t time.Time) (at time.Time, ok bool, err error)
	// SettledAt returns the earliest time s at which a finished amount of
	// m was counted such that at most n of m are counted strictly after
	// s. n is from 0 to below the amount counted after some time; ok is
	// false when none of m is counted.
	SettledAt(m Measure, n int64) (s time.Time, ok bool, err error)
}

// CallHistory is implemented by a History whose store keeps metered calls.
// Calls returns the user's ledger at now. In a store's Admit it may first
// settle, durably and in the same transaction, the calls that expired at
// or before now.
type CallHistory interface {
	Calls(now time.Time) (Ledger, error)
}

// TokenState describes one measure of one window of one user at one
// instant: its tokens, or its cost in picodollars (WindowState.Cost).
type TokenState struct {
	// Limited reports whether a tier limits the window's amount: whether
	// Limit, Remaining and Reset are set.
	Limited bool
	Limit   int64
	// Used is the amount of calls finished in the window plus that
	// reserved by calls still open (including the call a check opens).
	Used      int64
	Remaining int64
	// Reset is the whole seconds until the oldest finished amount counted
	// in the window leaves it, 0 when none is: reservations leave a window
	// only when their calls finish.
	Reset int64
}

// UsageReport is one user's state at one instant, without any new request.
type UsageReport struct {
	// Windows is each window's state. Its Tokens and Cost are set when the
	// store keeps calls: Used always, and the rest for a window the tier
	// asked about limits.
	Windows [len(Windows)]WindowState
	// CallsInFlight is the user's calls open.
	CallsInFlight int64
	// CallsKept reports whether the store keeps calls: whether Tokens,
	// Cost and CallsInFlight are known.
	CallsKept bool
	// Month is the billing period's state, when one was asked about.
	Month *MonthState
}

// ConcurrencyState is the calls a user has in flight against the tier's
// max_concurrent.
type ConcurrencyState struct {
	Limit    int64
	InFlight int64
}

// Metering is the verdict of a metered tier's call limits for one call.
type Metering struct {
	Allowed bool
	// Reason is the first limit that refused, in check order: concurrency,
	// then the token windows minute, hour, day, then the spend windows.
	Reason string
	// RetryAfter covers every refusing limit: 1 for concurrency; for a
	// token or spend window, the seconds until enough of what finished
	// leaves it for the call to fit with the reservations unchanged, or
	// the window's length when no wait on finished calls is enough.
	RetryAfter int64
	// Waitless reports whether a refusing limit is one no wait on finished
	// calls lifts: concurrency, or reservations plus the call over a limit.
	Waitless bool

	inFlight int64
	reserved Amounts
	want     Amounts
	finished [len(Windows)]Amounts
	oldest   [len(Windows)][numMeasures]time.Time // of the finished amount in the window; zero when none
}

// addSat returns a+b, or math.MaxInt64 when that overflows: amounts are
// never negative, and a sum past any limit refuses as surely.
func addSat(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return 1<<63 - 1
}

// Meter decides whether a call reserving want (tokens and cost) fits tier
// t's call limits for the user whose ledger is l, at now. It reads l and
// changes nothing. A window counts what calls finished strictly after now
// minus its length used, plus every open reservation; the call fits when,
// in every window with a limit of a measure, that plus want is at most the
// limit, and the calls in flight are below max_concurrent.
func Meter(l Ledger, t *Tier, want Amounts, now time.Time) (Metering, error) {
	now = now.Truncate(Resolution)
	m := Metering{Allowed: true, want: want}
	var err error
	if m.inFlight, m.reserved, err = l.InFlight(); err != nil {
		return m, err
	}
	refuse := func(reason string, retry int64) {
		if m.Allowed {
			m.Allowed, m.Reason = false, reason
		}
		m.RetryAfter = max(m.RetryAfter, retry)
	}
	if c := t.Limits[MaxConcurrent]; c != nil && m.inFlight >= *c {
		refuse(ConcurrencyReason, 1)
		m.Waitless = true
	}
	for _, w := range Windows {
		cutoff := now.Add(-w.Duration())
		if m.finished[w], err = l.After(cutoff); err != nil {
			return m, err
		}
		for _, ms := range Measures {
			if m.finished[w][ms] > 0 {
				if m.oldest[w][ms], _, err = l.OldestAfter(ms, cutoff); err != nil {
					return m, err
				}
			}
		}
	}
	for _, ms := range Measures {
		for _, w := range Windows {
			limit, ok := t.limit(ms, w)
			if !ok || addSat(addSat(m.finished[w][ms], m.reserved[ms]), want[ms]) <= limit {
				continue
			}
			held := addSat(m.reserved[ms], want[ms])
			if held > limit {
				refuse(ms.reason(w), CeilSeconds(w.Duration()))
				m.Waitless = true
				continue
			}
			s, ok, err := l.SettledAt(ms, limit-held) // the finished amount the window may keep
			if err != nil {
				return m, err
			}
			wait := w.Duration()
			if ok {
				wait = s.Add(w.Duration()).Sub(now)
			}
			refuse(ms.reason(w), CeilSeconds(wait))
		}
	}
	return m, nil
}

// States returns each window's state of each measure and the concurrency
// state under t as they are after the check: counting the call when
// admitted. A window without a limit of a measure has a nil state, as has
// concurrency without max_concurrent.
func (m *Metering) States(t *Tier, admitted bool, now time.Time) (states [numMeasures][len(Windows)]*TokenState, conc *ConcurrencyState) {
	now = now.Truncate(Resolution)
	var mine Amounts
	var calls int64
	if admitted {
		mine, calls = m.want, 1
	}
	for _, ms := range Measures {
		for _, w := range Windows {
			limit, ok := t.limit(ms, w)
			if !ok {
				continue
			}
			s := &TokenState{Limited: true, Limit: limit, Used: addSat(addSat(m.finished[w][ms], m.reserved[ms]), mine[ms])}
			s.Remaining = max(limit-s.Used, 0)
			if m.finished[w][ms] > 0 {
				s.Reset = CeilSeconds(m.oldest[w][ms].Add(w.Duration()).Sub(now))
			}
			states[ms][w] = s
		}
	}
	if c := t.Limits[MaxConcurrent]; c != nil {
		conc = &ConcurrencyState{Limit: *c, InFlight: m.inFlight + calls}
	}
	return states, conc
}

// setStates sets each window's Tokens and Cost in ws to states'.
func setStates(ws *[len(Windows)]WindowState, states *[numMeasures][len(Windows)]*TokenState) {
	for w := range ws {
		ws[w].Tokens, ws[w].Cost = states[MeasureTokens][w], states[MeasureCost][w]
	}
}

// CallUsage returns the state of each measure in each window and the calls
// in flight of the user whose ledger is l, at now, without opening a call.
// With a nil t, or for a window t does not limit in a measure, only Used is
// set.
func CallUsage(l Ledger, t *Tier, now time.Time) (states [numMeasures][len(Windows)]TokenState, inFlight int64, err error) {
	now = now.Truncate(Resolution)
	inFlight, reserved, err := l.InFlight()
	if err != nil {
		return states, 0, err
	}
	for _, w := range Windows {
		cutoff := now.Add(-w.Duration())
		finished, err := l.After(cutoff)
		if err != nil {
			return states, 0, err
		}
		for _, ms := range Measures {
			s := TokenState{Used: addSat(finished[ms], reserved[ms])}
			if t != nil {
				if limit, ok := t.limit(ms, w); ok {
					s.Limited, s.Limit, s.Remaining = true, limit, max(limit-s.Used, 0)
					if finished[ms] > 0 {
						oldest, _, err := l.OldestAfter(ms, cutoff)
						if err != nil {
							return states, 0, err
						}
						s.Reset = CeilSeconds(oldest.Add(w.Duration()).Sub(now))
					}
				}
			}
			states[ms][w] = s
		}
	}
	return states, inFlight, nil
}
