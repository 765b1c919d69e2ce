package api

import (
	"net/http"
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
	// Period is the user's current billing period, for information: no
	// limit counts over it yet.
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
		Windows:       usageWindowsOf(&report.Windows, func(policy.Window) bool { return tier != "" }),
	})
}

// usageWindowsOf returns windows on the wire, each with its limit,
// remaining and reset where limited says the window has a limit.
func usageWindowsOf(windows *[len(policy.Windows)]policy.WindowState, limited func(policy.Window) bool) usageWindowsReponse {
	win := func(w policy.Window) usageWindow {
		ws := windows[w]
		u := usageWindow{Count: ws.Count}
		if limited(w) {
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
	return usageWindowsReponse{Minute: win(policy.Minute), Hour: win(policy.Hour), Day: win(policy.Day)}
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
