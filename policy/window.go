package policy

import (
	"context"
	"time"
)

// Window is one of the three rolling windows a tier limits.
type Window int

// The windows, in the order they are checked.
const (
	Minute Window = iota
	Hour
	Day
)

// Windows lists every window in check order.
var Windows = [...]Window{Minute, Hour, Day}

// Resolution is the precision of recorded timestamps. Times are truncated to
// it before any comparison so that what is decided is exactly what is stored.
const Resolution = time.Microsecond

// Retention is how long a recorded request can still count: the longest
// window. Older rows may be deleted.
const Retention = 24 * time.Hour

// KeepFor is how long storage keeps a recorded request: Retention and an
// hour more. Old requests are deleted by the wall clock of the moment; one
// that ran up to an hour fast then, and was set back after, still finds
// every request that counts.
const KeepFor = Retention + time.Hour

// Duration returns the window's length.
func (w Window) Duration() time.Duration {
	switch w {
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	default:
		return 24 * time.Hour
	}
}

// String returns the window's name as it appears in API answers.
func (w Window) String() string {
	switch w {
	case Minute:
		return "minute"
	case Hour:
		return "hour"
	default:
		return "day"
	}
}

// Reason returns the refusal reason for a request blocked by w.
func (w Window) Reason() string { return "per-" + w.String() + " limit exceeded" }

// History is a read view of one user's admitted requests, ordered by
// timestamp. It is valid only inside the callback it was passed to.
type History interface {
	// Last returns the newest recorded timestamp; ok is false when there is none.
	Last() (at time.Time, ok bool, err error)
	// CountAfter returns how many recorded timestamps are strictly after t.
	CountAfter(t time.Time) (int64, error)
	// NthAfter returns the k-th oldest (from 1) recorded timestamp strictly
	// after t. k is at most CountAfter(t).
	NthAfter(t time.Time, k int64) (time.Time, error)
	// Prefetch is told every window's cutoff (now minus the window's
	// length, in the order of Windows) before Evaluate or Usage asks about
	// any of them, so that a store can look them up in one query. It
	// changes no answer, only their cost; a History may do nothing.
	Prefetch(cutoffs *[len(Windows)]time.Time) error
}

// prefetch announces the cutoffs of the windows ending at now to h.
func prefetch(h History, now time.Time) error {
	var cutoffs [len(Windows)]time.Time
	for _, w := range Windows {
		cutoffs[w] = now.Add(-w.Duration())
	}
	return h.Prefetch(&cutoffs)
}

// RequestStore records admitted requests and the calls metered tiers open.
// Implementations are safe for concurrent use.
type RequestStore interface {
	// Admit calls decide with userID's history and, when decide returns
	// an Admission with Record set, records one request at its At and opens
	// its Call, if any, together. No other Admit, FinishCall or KeepAlive
	// for the same user runs between the two, so a limit checked in decide
	// holds under any number of concurrent callers. The History implements
	// CallHistory when the store keeps calls; reading calls is the only
	// extra cost a metered check pays. Admit returns after the record is
	// durable, or with an error and nothing recorded.
	Admit(ctx context.Context, userID string, decide func(History) (Admission, error)) error
	// View calls fn with a consistent read-only view of userID's history,
	// which implements CallHistory (settling nothing) when the store keeps
	// calls. The view is taken before fn runs: a clock read first thing in
	// fn is at or after every admission it holds.
	View(ctx context.Context, userID string, fn func(History) error) error
	// Forget deletes every recorded request, call and finished token of
	// userID.
	Forget(ctx context.Context, userID string) error
	// FinishCall finishes the call named id at now with what r reports,
	// its tokens and cost as Call.Settle says, and returns it. A call the
	// caller finished already is returned unchanged when r settles to what
	// it reported, tokens and cost (nothing reported matching the
	// reservation), and fails with ECONFLICT otherwise. A call open past
	// its ExpiresAt is first finished at ExpiresAt with its reservation;
	// tokens or cost above the reservation then add the excess at now. An
	// unknown id fails with ENOTFOUND. r is valid (see Service.FinishCall).
	FinishCall(ctx context.Context, id string, r Report, now time.Time) (Call, error)
	// KeepAlive sets the ExpiresAt of the open call named id to expiresAt
	// and returns it. A call finished or expired at now fails with
	// ECONFLICT, an unknown id with ENOTFOUND.
	KeepAlive(ctx context.Context, id string, now, expiresAt time.Time) (Call, error)
}

// WindowState describes one window of one user at one instant.
type WindowState struct {
	// Count is the number of admitted requests in the window.
	Count int64
	// Limit is the ceiling that applies (the minute's includes the burst).
	Limit int64
	// Remaining is how many more requests the window admits now.
	Remaining int64
	// Reset is the whole seconds until the window next frees a slot, 0 when
	// it is empty.
	Reset int64

	// Tokens is the window's token state: in a Decision, set when the tier
	// limits the window's tokens; from Service.Usage, set when the store
	// keeps calls.
	Tokens *TokenState
	// Cost is the window's spend, in picodollars, set as Tokens is for
	// the window's spend limit.
	Cost *TokenState
}

// Evaluation is the rate-limit verdict for one request.
type Evaluation struct {
	Allowed bool
	// Blocked is the first window at or over its ceiling, when !Allowed.
	Blocked Window
	// RetryAfter is the whole seconds after which the same request would be
	// admitted if nothing else happened; 0 when allowed.
	RetryAfter int64
	// RecordAt is when an admitted request is recorded.
	RecordAt time.Time
	// Windows holds each window's state as it would be after this request:
	// including it when allowed.
	Windows [len(Windows)]WindowState
}

// Evaluate decides whether one more request from the user whose history is h
// fits tier t at now. It reads h and changes nothing.
//
// A window counts the requests recorded strictly after now minus its length.
// The request is admitted only when every window is below its ceiling.
// RetryAfter covers every blocking window, not only the first: a window with
// count n and ceiling c admits again once its (n-c+1)-th oldest request has
// left it, which also holds after a limit was lowered below n.
func Evaluate(h History, t *Tier, now time.Time) (Evaluation, error) {
	now = now.Truncate(Resolution)
	var ev Evaluation
	last, found, err := h.Last()
	if err != nil {
		return ev, err
	}
	// A request is recorded at the instant it was checked, whatever else
	// shares it: requests at one instant count in a window together and
	// leave it together, as t > now - window says. A clock that steps
	// backwards records at the newest timestamp instead, so history never
	// reorders and a request stays counted at least as long as the wall
	// clock says.
	ev.RecordAt = now
	if found && last.After(now) {
		ev.RecordAt = last
	}
	if err := prefetch(h, now); err != nil {
		return ev, err
	}

	var counts [len(Windows)]int64
	ev.Allowed = true
	for _, w := range Windows {
		cutoff := now.Add(-w.Duration())
		n, err := h.CountAfter(cutoff)
		if err != nil {
			return ev, err
		}
		counts[w] = n
		ceiling := t.Ceiling(w)
		if n < ceiling {
			continue
		}
		if ev.Allowed {
			ev.Allowed, ev.Blocked = false, w
		}
		wait := w.Duration() // a zero ceiling never admits; wait a full window
		if k := n - ceiling + 1; k >= 1 && k <= n {
			frees, err := h.NthAfter(cutoff, k)
			if err != nil {
				return ev, err
			}
			wait = frees.Add(w.Duration()).Sub(now)
		}
		ev.RetryAfter = max(ev.RetryAfter, CeilSeconds(wait))
	}

	for _, w := range Windows {
		n, oldest := counts[w], time.Time{}
		if ev.Allowed {
			n++
		}
		switch {
		case counts[w] > 0:
			if oldest, err = h.NthAfter(now.Add(-w.Duration()), 1); err != nil {
				return ev, err
			}
		case ev.Allowed:
			oldest = ev.RecordAt
		}
		ev.Windows[w] = state(n, t.Ceiling(w), oldest, w, now)
	}
	return ev, nil
}

// withdraw undoes the counting of the admitted request in ev.Windows, for a
// request another limit refused after Evaluate admitted it.
func (ev *Evaluation) withdraw() {
	for w := range ev.Windows {
		s := &ev.Windows[w]
		s.Count--
		s.Remaining = max(s.Limit-s.Count, 0)
		if s.Count == 0 {
			s.Reset = 0 // the reset came from the withdrawn request
		}
	}
}

// Usage returns the state of each window of h under tier t at now, without
// counting any new request. With a nil t only each window's Count is set.
func Usage(h History, t *Tier, now time.Time) ([len(Windows)]WindowState, error) {
	now = now.Truncate(Resolution)
	var states [len(Windows)]WindowState
	if err := prefetch(h, now); err != nil {
		return states, err
	}
	for _, w := range Windows {
		cutoff := now.Add(-w.Duration())
		n, err := h.CountAfter(cutoff)
		if err != nil {
			return states, err
		}
		var oldest time.Time
		if n > 0 && t != nil {
			if oldest, err = h.NthAfter(cutoff, 1); err != nil {
				return states, err
			}
		}
		if t == nil {
			states[w].Count = n
			continue
		}
		states[w] = state(n, t.Ceiling(w), oldest, w, now)
	}
	return states, nil
}

func state(n, ceiling int64, oldest time.Time, w Window, now time.Time) WindowState {
	s := WindowState{Count: n, Limit: ceiling, Remaining: max(ceiling-n, 0)}
	if n > 0 {
		s.Reset = CeilSeconds(oldest.Add(w.Duration()).Sub(now))
	}
	return s
}

// CeilSeconds rounds d up to whole seconds, never below zero: the seconds
// a client told to wait d must wait.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
