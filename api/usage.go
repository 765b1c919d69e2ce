package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

type usageResponse struct {
	UserID  string              `json:"user_id"`
	Tier    string              `json:"tier,omitempty"`
	Windows usageWindowsReponse `json:"windows"`
	// CallsInFlight is the user's calls open now.
	CallsInFlight int64 `json:"calls_in_flight"`
	// Period is the user's current billing period, which the month
	// limits count over (windows.month).
	Period periodJSON `json:"period"`
	// Run is the run ?run_id= names, which must be the user's; left out
	// without one.
	Run *runUsageJSON `json:"run,omitzero"`
}

// periodJSON is a billing period on the wire: start and end carry the
// time zone's offset, so that local midnight reads as such.
type periodJSON struct {
	Start         time.Time `json:"start"`
	End           time.Time `json:"end"`
	TimeZone      string    `json:"time_zone"`
	BillingAnchor int       `json:"billing_anchor"`
}

func periodToJSON(p policy.Period) periodJSON {
	return periodJSON{Start: p.Start, End: p.End, TimeZone: p.TimeZone, BillingAnchor: p.Anchor}
}

type usageWindowsReponse struct {
	Minute usageWindow `json:"minute"`
	Hour   usageWindow `json:"hour"`
	Day    usageWindow `json:"day"`
	// Month is the current billing period, when the store counts
	// periods.
	Month *usageMonth `json:"month,omitzero"`
}

// usageMonth is a billing period's use: a window's fields, and its start
// and end.
type usageMonth struct {
	Start       time.Time `json:"start"`
	End         time.Time `json:"end"`
	usageWindow `json:",inline"`
}

// usageWindow carries limit, remaining and reset only when a tier was named.
type usageWindow struct {
	Count     int64  `json:"count"`
	Limit     *int64 `json:"limit,omitempty"`
	Remaining *int64 `json:"remaining,omitempty"`
	Reset     *int64 `json:"reset,omitempty"`
	// Tokens is the window's tokens: used always; the rest when the tier
	// named limits them.
	Tokens usageTokens `json:"tokens"`
	// Cost is the window's spend in decimal dollars, as Tokens; nil when
	// the store keeps no calls.
	Cost *usageCost `json:"cost,omitzero"`
}

type usageCost struct {
	Used      string  `json:"used"`
	Limit     *string `json:"limit,omitempty"`
	Remaining *string `json:"remaining,omitempty"`
	Reset     *int64  `json:"reset,omitempty"`
}

type usageTokens struct {
	Used      int64  `json:"used"`
	Limit     *int64 `json:"limit,omitempty"`
	Remaining *int64 `json:"remaining,omitempty"`
	Reset     *int64 `json:"reset,omitempty"`
}

func (s *Server) handleGetUsage(c echo.Context) error {
	user, err := pathParam(c, "user_id")
	if err != nil {
		return err
	}
	tier := c.QueryParam("tier")
	report, err := s.svc.UsageReport(c.Request().Context(), user, tier)
	if err != nil {
		return err
	}
	period, err := s.svc.UserPeriod(c.Request().Context(), user)
	if err != nil {
		return err
	}
	var run *runUsageJSON
	if id := c.QueryParam("run_id"); id != "" {
		r, err := s.svc.GetRun(c.Request().Context(), id)
		if err != nil {
			return err
		}
		if r.UserID != user {
			return policy.Errorf(policy.ECONFLICT, "run %s belongs to another user", policy.Quote(id))
		}
		run = runUsageToJSON(&r)
	}
	return c.JSON(http.StatusOK, usageResponse{
		Run:           run,
		UserID:        user,
		Tier:          tier,
		CallsInFlight: report.CallsInFlight,
		Period:        periodToJSON(period),
		Windows:       usageWindowsOf(&report.Windows, report.Month, func(policy.Window) bool { return tier != "" }),
	})
}

// usageWindowsOf returns windows on the wire, each with its limit,
// remaining and reset where limited says the window has a limit.
// The month, when month is not nil, has them where requests_per_month is
// set.
func usageWindowsOf(windows *[len(policy.Windows)]policy.WindowState, month *policy.MonthState, limited func(policy.Window) bool) usageWindowsReponse {
	win := func(ws policy.WindowState, limited bool) usageWindow {
		u := usageWindow{Count: ws.Count}
		if limited {
			u.Limit, u.Remaining, u.Reset = &ws.Limit, &ws.Remaining, &ws.Reset
		}
		if t := ws.Tokens; t != nil {
			u.Tokens.Used = t.Used
			if t.Limited {
				u.Tokens.Limit, u.Tokens.Remaining, u.Tokens.Reset = &t.Limit, &t.Remaining, &t.Reset
			}
		}
		if t := ws.Cost; t != nil {
			u.Cost = &usageCost{Used: policy.Money(t.Used).String()}
			if t.Limited {
				limit, remaining := policy.Money(t.Limit).String(), policy.Money(t.Remaining).String()
				u.Cost.Limit, u.Cost.Remaining, u.Cost.Reset = &limit, &remaining, &t.Reset
			}
		}
		return u
	}
	r := usageWindowsReponse{Minute: win(windows[policy.Minute], limited(policy.Minute)), Hour: win(windows[policy.Hour], limited(policy.Hour)),
		Day: win(windows[policy.Day], limited(policy.Day))}
	if month != nil {
		r.Month = &usageMonth{Start: month.Start, End: month.End, usageWindow: win(month.WindowState, month.Limited)}
	}
	return r
}

func (s *Server) handleDeleteUsage(c echo.Context) error {
	user, err := pathParam(c, "user_id")
	if err != nil {
		return err
	}
	if err := s.svc.Forget(c.Request().Context(), user); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// periodsResponse is GET /v1/usage/{user_id}/periods and GET
// /v1/accounts/{id}/usage/periods: the key's billing periods, newest
// first, the current one counted to now.
type periodsResponse struct {
	TimeZone      string       `json:"time_zone"`
	BillingAnchor int          `json:"billing_anchor"`
	Periods       []periodUsed `json:"periods"`
}

// periodUsed is one period's use; cost in decimal dollars.
type periodUsed struct {
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	Requests int64     `json:"requests"`
	Tokens   int64     `json:"tokens"`
	Cost     string    `json:"cost"`
}

// maxPeriods is the most periods one answer lists: the 13 months kept
// and the current one.
const maxPeriods = 14

// writePeriods answers with the periods of key, whose current period is
// cur: ?before= (RFC 3339) lists those that start before it, ?limit= at
// most that many (1 to 14, default 14).
func (s *Server) writePeriods(c echo.Context, key string, cur policy.Period) error {
	limit := maxPeriods
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPeriods {
			return policy.Errorf(policy.EINVALID, "limit must be an integer from 1 to %d", maxPeriods)
		}
		limit = n
	}
	var before time.Time
	if v := c.QueryParam("before"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return policy.Errorf(policy.EINVALID, "before must be an RFC 3339 time such as 2026-03-01T00:00:00Z")
		}
		before = t
	}
	periods, err := s.svc.Periods(c.Request().Context(), key, cur, before, limit)
	if err != nil {
		return err
	}
	loc, _ := policy.LoadTimeZone(cur.TimeZone)
	out := periodsResponse{TimeZone: cur.TimeZone, BillingAnchor: cur.Anchor, Periods: make([]periodUsed, len(periods))}
	for i, p := range periods {
		out.Periods[i] = periodUsed{Start: p.Start.In(loc), End: p.End.In(loc), Requests: p.Requests, Tokens: p.Tokens, Cost: p.Cost.String()}
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) handleGetUserPeriods(c echo.Context) error {
	user, err := pathParam(c, "user_id")
	if err != nil {
		return err
	}
	cur, err := s.svc.UserPeriod(c.Request().Context(), user)
	if err != nil {
		return err
	}
	return s.writePeriods(c, user, cur)
}

func (s *Server) handleGetAccountPeriods(c echo.Context) error {
	id, err := pathParam(c, "account_id")
	if err != nil {
		return err
	}
	a, err := s.svc.Account(c.Request().Context(), id)
	if err != nil {
		return err
	}
	cur, err := s.svc.AccountPeriod(&a)
	if err != nil {
		return err
	}
	return s.writePeriods(c, policy.AccountKey(id), cur)
}
