package api

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// Header names of the rate-limit fields, in canonical form so they can be
// stored in an http.Header without canonicalizing each time.
const (
	headerRateLimitPolicy = "Ratelimit-Policy"      // RateLimit-Policy
	headerRateLimit       = "Ratelimit"             // RateLimit
	headerXLimit          = "X-Ratelimit-Limit"     // X-RateLimit-Limit
	headerXRemaining      = "X-Ratelimit-Remaining" // X-RateLimit-Remaining
	headerXReset          = "X-Ratelimit-Reset"     // X-RateLimit-Reset

	headerXLimitTokens     = "X-Ratelimit-Limit-Tokens"     // X-RateLimit-Limit-Tokens
	headerXRemainingTokens = "X-Ratelimit-Remaining-Tokens" // X-RateLimit-Remaining-Tokens
	headerXResetTokens     = "X-Ratelimit-Reset-Tokens"     // X-RateLimit-Reset-Tokens

	headerXLimitCost     = "X-Ratelimit-Limit-Cost"     // X-RateLimit-Limit-Cost
	headerXRemainingCost = "X-Ratelimit-Remaining-Cost" // X-RateLimit-Remaining-Cost
	headerXResetCost     = "X-Ratelimit-Reset-Cost"     // X-RateLimit-Reset-Cost
)

// setRateLimitHeaders writes the rate-limit fields of a check answer from the
// user's window state after the check:
//
//   - RateLimit-Policy and RateLimit as draft-ietf-httpapi-ratelimit-headers
//     (revision 11) defines them: one quota policy per window, named
//     "minute", "hour" and "day", with its quota q (the window's ceiling,
//     burst included) and length w in seconds; and per policy the requests
//     still available r and the seconds t within which no more than r are
//     available, which is until the window next frees a slot, or the whole
//     window when it is empty (nothing in it will free before then).
//   - X-RateLimit-Limit, -Remaining and -Reset, the older single-window
//     fields, for the tightest window (policy.TightestWindow). Reset is in
//     seconds from now, as t is, not a Unix time, and at least minReset:
//     the check's wait when a request window refused it, so that it never
//     promises a request sooner than Retry-After does.
//
// The values are formatted into one buffer and share one string, so the
// fields cost two allocations per answer. RateLimit-Policy depends only on
// the limits, the same for every check of a tier, so its value is kept
// for recent limits and reused (BenchmarkRateLimitHeaders: 1144 to 817
// ns, 208 to 160 B per answer).
func setRateLimitHeaders(h http.Header, windows *[len(policy.Windows)]policy.WindowState, minReset int64) {
	if windows == nil {
		return
	}
	var buf [192]byte
	b := buf[:0]
	var ends [4]int

	for i, w := range policy.Windows {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '"')
		b = append(b, w.String()...)
		b = append(b, `";r=`...)
		b = strconv.AppendInt(b, windows[w].Remaining, 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, effectiveWindow(w, windows[w]), 10)
	}
	ends[0] = len(b)

	tightest := policy.TightestWindow(windows)
	b = strconv.AppendInt(b, windows[tightest].Limit, 10)
	ends[1] = len(b)
	b = strconv.AppendInt(b, windows[tightest].Remaining, 10)
	ends[2] = len(b)
	b = strconv.AppendInt(b, max(effectiveWindow(tightest, windows[tightest]), minReset), 10)
	ends[3] = len(b)

	s := string(b)
	vals := make([]string, 5)
	vals[0] = rateLimitPolicy(windows)
	start := 0
	for i, end := range ends {
		vals[i+1] = s[start:end]
		start = end
	}
	h[headerRateLimitPolicy] = vals[0:1:1]
	h[headerRateLimit] = vals[1:2:2]
	h[headerXLimit] = vals[2:3:3]
	h[headerXRemaining] = vals[3:4:4]
	h[headerXReset] = vals[4:5:5]
}

// policyValue is the RateLimit-Policy value of a set of limits.
type policyValue struct {
	limits [len(policy.Windows)]int64
	value  string
}

// policyValues hold the RateLimit-Policy values of recent limits, each
// set of limits in the slot its hash picks: a few tiers, each with its
// own slot, are formatted once; limits that share a slot take turns.
var policyValues [16]atomic.Pointer[policyValue]

// rateLimitPolicy returns the RateLimit-Policy value of the limits of
// windows: one quota policy per window, with its quota q and length w.
func rateLimitPolicy(windows *[len(policy.Windows)]policy.WindowState) string {
	var limits [len(policy.Windows)]int64
	for w := range windows {
		limits[w] = windows[w].Limit
	}
	slot := &policyValues[uint64(limits[0]*31+limits[1]*7+limits[2])%uint64(len(policyValues))]
	if p := slot.Load(); p != nil && p.limits == limits {
		return p.value
	}
	var buf [128]byte
	b := buf[:0]
	for i, w := range policy.Windows {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '"')
		b = append(b, w.String()...)
		b = append(b, `";q=`...)
		b = strconv.AppendInt(b, limits[w], 10)
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, int64(w.Duration()/time.Second), 10)
	}
	p := &policyValue{limits, string(b)}
	slot.Store(p)
	return p.value
}

// effectiveWindow returns the seconds within which window w, in state s,
// admits no more than s.Remaining: until its oldest request leaves it, or its
// whole length when it holds none.
func effectiveWindow(w policy.Window, s policy.WindowState) int64 {
	if s.Count == 0 {
		return int64(w.Duration() / time.Second)
	}
	return s.Reset
}

// setTokenHeaders writes, on an answer of a tier that limits tokens, the
// fields OpenAI names for token limits, for the tightest token window
// (policy.TightestTokens). Reset is the window's token reset in seconds:
// until its oldest finished tokens leave it, 0 when only reservations are
// counted (they leave when their calls finish); and at least minReset, the
// check's wait when a token window refused it. Without token limits it
// writes nothing.
func setTokenHeaders(h http.Header, windows *[len(policy.Windows)]policy.WindowState, minReset int64) {
	if windows == nil {
		return
	}
	tightest := policy.TightestTokens(windows)
	if tightest == nil {
		return
	}
	h[headerXLimitTokens] = []string{strconv.FormatInt(tightest.Limit, 10)}
	h[headerXRemainingTokens] = []string{strconv.FormatInt(tightest.Remaining, 10)}
	h[headerXResetTokens] = []string{strconv.FormatInt(max(tightest.Reset, minReset), 10)}
}

// setCostHeaders writes, on an answer of a tier that limits spend, the
// spend fields in the shape of the token ones, for the tightest spend
// window (policy.TightestCost): the limit and the remaining in decimal
// dollars, the reset as the tokens' is and at least minReset, the check's
// wait when a spend window refused it. RateLimit and RateLimit-Policy
// carry no spend, as they carry no tokens: their quota units are
// requests. Without spend limits it writes nothing.
func setCostHeaders(h http.Header, windows *[len(policy.Windows)]policy.WindowState, minReset int64) {
	if windows == nil {
		return
	}
	tightest := policy.TightestCost(windows)
	if tightest == nil {
		return
	}
	h[headerXLimitCost] = []string{policy.Money(tightest.Limit).String()}
	h[headerXRemainingCost] = []string{policy.Money(tightest.Remaining).String()}
	h[headerXResetCost] = []string{strconv.FormatInt(max(tightest.Reset, minReset), 10)}
}

// accountPolicyPrefix begins the names of an account's quota policies in
// RateLimit-Policy and RateLimit: "account-minute", "account-hour",
// "account-day".
const accountPolicyPrefix = "account-"

// setAccountHeaders adds to the fields setRateLimitHeaders and
// setTokenHeaders wrote for a member's check the account's pooled limits:
// a quota policy per window the pool limits, named apart from the user's,
// in RateLimit-Policy and RateLimit; and X-RateLimit-* (and the token
// and spend fields) for the tighter of the user's windows and the pool's.
func setAccountHeaders(h http.Header, d *policy.Decision) {
	a := d.Account
	var buf [512]byte
	b := append(buf[:0], h.Get(headerRateLimitPolicy)...)
	for _, w := range policy.Windows {
		if a.Limited(w) {
			b = append(b, `, "`+accountPolicyPrefix...)
			b = append(b, w.String()...)
			b = append(b, `";q=`...)
			b = strconv.AppendInt(b, a.Windows[w].Limit, 10)
			b = append(b, ";w="...)
			b = strconv.AppendInt(b, int64(w.Duration()/time.Second), 10)
		}
	}
	policyEnd := len(b)
	b = append(b, h.Get(headerRateLimit)...)
	for _, w := range policy.Windows {
		if a.Limited(w) {
			b = append(b, `, "`+accountPolicyPrefix...)
			b = append(b, w.String()...)
			b = append(b, `";r=`...)
			b = strconv.AppendInt(b, a.Windows[w].Remaining, 10)
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, effectiveWindow(w, a.Windows[w]), 10)
		}
	}
	ws := d.TighterWindows()
	tw := policy.TightestWindow(ws)
	var ends [5]int
	ends[0], ends[1] = policyEnd, len(b)
	b = strconv.AppendInt(b, ws[tw].Limit, 10)
	ends[2] = len(b)
	b = strconv.AppendInt(b, ws[tw].Remaining, 10)
	ends[3] = len(b)
	b = strconv.AppendInt(b, max(effectiveWindow(tw, ws[tw]), d.MinReset(policy.KindRequests)), 10)
	ends[4] = len(b)
	s := string(b)
	vals := make([]string, 5)
	start := 0
	for i, end := range ends {
		vals[i] = s[start:end]
		start = end
	}
	h[headerRateLimitPolicy] = vals[0:1:1]
	h[headerRateLimit] = vals[1:2:2]
	h[headerXLimit] = vals[2:3:3]
	h[headerXRemaining] = vals[3:4:4]
	h[headerXReset] = vals[4:5:5]
	setTokenHeaders(h, ws, d.MinReset(policy.KindTokens))
	setCostHeaders(h, ws, d.MinReset(policy.KindCost))
}

// setMonthHeaders adds to the fields the others wrote the billing periods
// of a check whose tier (or pool) limits months: a quota policy "month"
// (the pool's "account-month") where requests_per_month is set, its w the
// period's length in seconds and its t the seconds to its end, when
// nothing in it leaves; and X-RateLimit-* (and the token and spend
// fields) for the month when it is tighter than what they show. Without
// month limits it writes nothing.
func setMonthHeaders(h http.Header, d *policy.Decision) {
	months := [...]struct {
		prefix string
		m      *policy.MonthState
	}{{"", d.Month}, {accountPolicyPrefix, nil}}
	if d.Account != nil {
		months[1].m = d.Account.Month
	}
	for _, mo := range months {
		m := mo.m
		if m == nil {
			continue
		}
		if m.Limited {
			length := int64(m.End.Sub(m.Start) / time.Second)
			h[headerRateLimitPolicy] = []string{h.Get(headerRateLimitPolicy) + `, "` + mo.prefix + `month";q=` +
				strconv.FormatInt(m.Limit, 10) + ";w=" + strconv.FormatInt(length, 10)}
			h[headerRateLimit] = []string{h.Get(headerRateLimit) + `, "` + mo.prefix + `month";r=` +
				strconv.FormatInt(m.Remaining, 10) + ";t=" + strconv.FormatInt(m.Reset, 10)}
			if monthTighter(h, headerXRemaining, headerXReset, m.Remaining, m.Reset) {
				h[headerXLimit] = []string{strconv.FormatInt(m.Limit, 10)}
				h[headerXRemaining] = []string{strconv.FormatInt(m.Remaining, 10)}
				h[headerXReset] = []string{strconv.FormatInt(m.Reset, 10)}
			}
		}
		if t := m.Tokens; t != nil && t.Limited && monthTighter(h, headerXRemainingTokens, headerXResetTokens, t.Remaining, t.Reset) {
			h[headerXLimitTokens] = []string{strconv.FormatInt(t.Limit, 10)}
			h[headerXRemainingTokens] = []string{strconv.FormatInt(t.Remaining, 10)}
			h[headerXResetTokens] = []string{strconv.FormatInt(t.Reset, 10)}
		}
		if t := m.Cost; t != nil && t.Limited && monthCostTighter(h, t) {
			h[headerXLimitCost] = []string{policy.Money(t.Limit).String()}
			h[headerXRemainingCost] = []string{policy.Money(t.Remaining).String()}
			h[headerXResetCost] = []string{strconv.FormatInt(t.Reset, 10)}
		}
	}
}

// monthTighter reports whether a month with remaining and reset is to be
// shown in place of the single-window fields named remainingField and
// resetField: when they are absent, or it leaves less (or as little and
// for longer).
func monthTighter(h http.Header, remainingField, resetField string, remaining, reset int64) bool {
	r, err := strconv.ParseInt(h.Get(remainingField), 10, 64)
	if err != nil {
		return true
	}
	t, _ := strconv.ParseInt(h.Get(resetField), 10, 64)
	return remaining < r || remaining == 0 && r == 0 && reset > t
}

// monthCostTighter is monthTighter for the spend fields, in dollars.
func monthCostTighter(h http.Header, t *policy.TokenState) bool {
	r, err := policy.ParseMoney(h.Get(headerXRemainingCost))
	if err != nil {
		return true
	}
	reset, _ := strconv.ParseInt(h.Get(headerXResetCost), 10, 64)
	return t.Remaining < int64(r) || t.Remaining == 0 && r == 0 && t.Reset > reset
}
