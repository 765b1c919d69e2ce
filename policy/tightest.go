package policy

import "strings"

// The single-window rate-limit fields (the API's X-RateLimit-*, the
// gateway's x-ratelimit-*-requests and -tokens and anthropic-ratelimit-*)
// show one request window and one token window of a decision, chosen and
// bounded here so that every surface shows the same ones.

// TightestWindow returns the request window of ws that single-window
// fields show: the one with the fewest requests remaining, the shorter on
// a tie; but of windows with none remaining, the one whose reset is the
// latest, since no request passes them all before it.
func TightestWindow(ws *[len(Windows)]WindowState) Window {
	t := Windows[0]
	for _, w := range Windows[1:] {
		if tighter(ws[w].Remaining, ws[w].Reset, ws[t].Remaining, ws[t].Reset) {
			t = w
		}
	}
	return t
}

// TightestTokens returns the token state of ws that single-window fields
// show: of the windows whose tokens are limited, the one with the fewest
// tokens remaining, chosen on a tie as TightestWindow chooses; nil when no
// window's tokens are limited.
func TightestTokens(ws *[len(Windows)]WindowState) *TokenState { return tightest(ws, MeasureTokens) }

// TightestCost is TightestTokens for spend.
func TightestCost(ws *[len(Windows)]WindowState) *TokenState { return tightest(ws, MeasureCost) }

func tightest(ws *[len(Windows)]WindowState, m Measure) *TokenState {
	var t *TokenState
	for _, w := range Windows {
		s := ws[w].Tokens
		if m == MeasureCost {
			s = ws[w].Cost
		}
		if s != nil && s.Limited && (t == nil || tighter(s.Remaining, s.Reset, t.Remaining, t.Reset)) {
			t = s
		}
	}
	return t
}

// tighter reports whether a window with remaining a and reset ra is to be
// shown rather than one, shorter, with remaining b and reset rb.
func tighter(a, ra, b, rb int64) bool {
	return a < b || a == 0 && b == 0 && ra > rb
}

// RefusedBy returns the kind of limit that refused d: KindRequests for a
// request window, KindTokens for a token window, KindCost for a spend
// window, KindConcurrency for
// max_concurrent, a user's own or an account's pooled alike. ok is false
// when d is not a refusal by the rate limiter's limits.
func (d *Decision) RefusedBy() (kind LimitKind, ok bool) {
	if d.Outcome != RateLimited {
		return 0, false
	}
	reason := strings.TrimPrefix(d.Reason, AccountReasonPrefix)
	if reason == ConcurrencyReason {
		return KindConcurrency, true
	}
	for _, w := range Windows {
		switch reason {
		case w.Reason():
			return KindRequests, true
		case w.TokenReason():
			return KindTokens, true
		case w.SpendReason():
			return KindCost, true
		}
	}
	for _, k := range [...]LimitKind{KindRequests, KindTokens, KindCost} {
		if reason == MonthReason(k) {
			return k, true // see RefusedByMonth
		}
	}
	return 0, false
}

// MinReset returns the least reset, in seconds, that single-window fields
// of kind (KindRequests or KindTokens) may show for d: d.RetryAfter when a
// limit of that kind refused d, else 0. A shorter reset would promise room
// that a retry at that time would not find: the tightest window may free a
// slot before another window that also refused does (an hour before a
// day), or before enough of its own have left (a limit lowered below its
// count).
func (d *Decision) MinReset(kind LimitKind) int64 {
	if k, ok := d.RefusedBy(); ok && k == kind {
		return d.RetryAfter
	}
	return 0
}
