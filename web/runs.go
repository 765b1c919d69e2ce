package web

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// runsShown is the most runs a user's page lists of each kind: open ones,
// then those that ended (GET /v1/runs pages through them all).
const runsShown = 50

// adminRuns is the runs section of a user's page: the user's open runs
// first, each with what it used against its tier's run limits, and an End
// run button, the kill switch of a runaway agent.
type adminRuns struct {
	UserID string
	CSRF   string
	CanEnd bool // the admin's role may end runs
	Rows   []adminRunRow
	// More reports whether the user has more runs than the page lists.
	More bool
}

// adminRunRow is one run: counts against limits read "3 of 10", or the
// count alone where the tier sets no limit.
type adminRunRow struct {
	ID, Parent, State                string
	Open                             bool
	Requests, Tokens, Cost, InFlight string
	Opened, OpenedISO                string
	Last, LastISO                    string
}

// runTime is how the runs section writes a time.
const runTime = "2006-01-02 15:04:05 UTC"

// runSection returns the runs section of user's page.
func (a *Admin) runSection(ctx context.Context, user string) (*adminRuns, error) {
	open, err := a.svc.ListRuns(ctx, policy.RunFilter{UserID: user, State: policy.RunOpen, Limit: runsShown + 1})
	if err != nil {
		return nil, err
	}
	all, err := a.svc.ListRuns(ctx, policy.RunFilter{UserID: user, Limit: 2*runsShown + 1})
	if err != nil {
		return nil, err
	}
	s := &adminRuns{UserID: user, CanEnd: roleOf(ctx) >= policy.RoleAdmin, More: len(open) > runsShown || len(all) > 2*runsShown}
	runs := open[:min(len(open), runsShown)]
	closed := 0
	for _, r := range all {
		// The open ones are listed already; a run the store holds open
		// may read as expired (policy.Service.ListRuns), and is listed
		// among them all the same.
		if r.State != policy.RunOpen && !slices.ContainsFunc(open, func(o policy.RunUsage) bool { return o.ID == r.ID }) && closed < runsShown {
			runs = append(runs, r)
			closed++
		}
	}
	// Open first, then the latest used first.
	slices.SortStableFunc(runs, func(x, y policy.RunUsage) int {
		if xo, yo := x.State == policy.RunOpen, y.State == policy.RunOpen; xo != yo {
			if xo {
				return -1
			}
			return 1
		}
		return cmp.Or(y.LastAt.Compare(x.LastAt), cmp.Compare(x.ID, y.ID))
	})
	for i := range runs {
		s.Rows = append(s.Rows, runRow(&runs[i]))
	}
	return s, nil
}

// runRow returns the row of r.
func runRow(r *policy.RunUsage) adminRunRow {
	limit := func(id policy.LimitID) *int64 {
		if r.Limits == nil {
			return nil
		}
		return r.Limits[id]
	}
	against := func(used string, max *int64, format func(int64) string) string {
		if max == nil {
			return used
		}
		return used + " of " + format(*max)
	}
	cost := func(n int64) string { return dollars(policy.Money(n)) }
	return adminRunRow{
		ID: r.ID, Parent: r.Parent, State: string(r.State), Open: r.State == policy.RunOpen,
		Requests:  against(policy.GroupDigits(r.Requests), limit(policy.MaxRunRequests), policy.GroupDigits),
		Tokens:    against(policy.GroupDigits(r.Tokens), limit(policy.MaxRunTokens), policy.GroupDigits),
		Cost:      against(dollars(r.Cost), limit(policy.MaxRunCost), cost),
		InFlight:  against(policy.GroupDigits(r.CallsInFlight), limit(policy.MaxConcurrent), policy.GroupDigits),
		Opened:    r.OpenedAt.UTC().Format(runTime),
		OpenedISO: r.OpenedAt.UTC().Format(time.RFC3339),
		Last:      r.LastAt.UTC().Format(runTime),
		LastISO:   r.LastAt.UTC().Format(time.RFC3339),
	}
}

// handleEndRun ends a run and its descendants at once, on every replica:
// their calls in flight finish, their next request is refused.
func (a *Admin) handleEndRun(c echo.Context) error {
	id := c.Request().PostFormValue("run_id")
	if id == "" {
		return a.renderError(c, http.StatusBadRequest, "No run", "Choose a run on a user's page to end it.")
	}
	r, err := a.svc.EndRun(c.Request().Context(), id)
	if err != nil {
		return a.fail(c, err)
	}
	a.flash(c, fmt.Sprintf("Ended run %s and its sub-runs — their next request is refused", policy.Quote(r.ID)))
	return c.Redirect(http.StatusSeeOther, userPage(r.UserID))
}
