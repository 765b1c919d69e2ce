package web

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// adminUsageView is the user look-up page: its form, and the result once a
// user was looked up.
type adminUsageView struct {
	Fields []adminField
	Result *adminUsageResult
	// Record is the looked-up user's record and its form; Records lists
	// the users with records, a page at a time (NextRecords links the next).
	Record      *adminRecordForm
	Records     []adminRecordRow
	NextRecords string
	// Keys is the looked-up user's gateway keys and the form that makes
	// one; nil for a service without keys (policy.WithKeys).
	Keys *adminKeys
	// Runs is the looked-up user's agent runs (runs.go).
	Runs *adminRuns
	// KeepsRecords is false for a service without user records
	// (policy.WithUsers): the page then shows none of their sections.
	KeepsRecords bool
}

type adminUsageResult struct {
	UserID  string
	Tier    string // empty: counts only
	AsOf    string
	Windows []adminWindowRow
	// Month says the current billing period and its tokens and spend
	// against the tier's month limits; empty for a store without periods.
	Month string
	Day   *adminUserDay // the last day's chart, calls and tokens (user.go)
}

// adminWindowRow is one window of a looked-up user. Limit, Remaining and
// Reset are empty when no tier was chosen.
type adminWindowRow struct {
	Name, Title                    string
	Count, Limit, Remaining, Reset string
}

var adminWindowTitles = [len(policy.Windows)]string{
	policy.Minute: "Last minute",
	policy.Hour:   "Last hour",
	policy.Day:    "Last 24 hours",
}

func (a *Admin) handleUsagePage(c echo.Context) error {
	_, asked := c.QueryParams()["user_id"]
	return a.renderUsage(c, c.QueryParam("user_id"), c.QueryParam("tier"), asked, usageForms{})
}

// usageForms are forms of the look-up page as the admin posted them, to
// show again with the problems found; the zero value shows them empty or
// as stored.
type usageForms struct {
	record     url.Values        // the record form; nil: as stored
	recordErrs map[string]string // its problems, by field
	keyNote    string            // the note of a new key
	keyErr     string            // its problem
}

// renderUsage renders the look-up page for user (when asked) with the
// windows under tierName, the user's record form and their gateway keys,
// the forms as posted with their problems (see usageForms).
func (a *Admin) renderUsage(c echo.Context, user, tierName string, asked bool, posted usageForms) error {
	recordForm, recordErrs := posted.record, posted.recordErrs
	ctx := c.Request().Context()
	tiers, err := a.svc.Tiers(ctx)
	if err != nil {
		return a.fail(c, err)
	}
	errs := make(map[string]string)
	var result *adminUsageResult
	switch {
	case !asked:
	case user == "":
		errs["user_id"] = "Enter a user id."
	case policy.ValidateUserID(user) != nil:
		errs["user_id"] = policy.ErrorMessage(policy.ValidateUserID(user))
	default:
		now := a.svc.Now()
		report, err := a.svc.UsageReport(ctx, user, tierName)
		if policy.ErrorCode(err) == policy.EINVALID {
			errs["tier"] = policy.ErrorMessage(err) // the user id was checked above
			break
		} else if err != nil {
			return a.fail(c, err)
		}
		result = usageResult(user, tierName, &report, now)
		if result.Day, err = a.userDay(ctx, user, tierName); err != nil {
			return a.fail(c, err)
		}
	}

	options := []adminOption{{Value: "", Label: "None: counts only", Selected: tierName == ""}}
	for _, t := range tiers {
		options = append(options, adminOption{Value: t.Name, Label: t.Name, Selected: t.Name == tierName})
	}
	var (
		record  *adminRecordForm
		records []adminRecordRow
		next    string
	)
	keeps := a.svc.KeepsUserRecords()
	if result != nil && keeps {
		if record, err = a.recordForm(ctx, user, tiers, recordForm, recordErrs); err != nil {
			return a.fail(c, err)
		}
	}
	if keeps {
		if records, next, err = a.recordList(ctx, c.QueryParam("records_after")); err != nil {
			return a.fail(c, err)
		}
	}
	var keys *adminKeys
	if result != nil && a.svc.KeepsKeys() {
		if keys, err = a.keySection(ctx, user, posted.keyNote, posted.keyErr); err != nil {
			return a.fail(c, err)
		}
	}
	var runs *adminRuns
	if result != nil && a.svc.KeepsRuns() {
		if runs, err = a.runSection(ctx, user); err != nil {
			return a.fail(c, err)
		}
	}
	v := a.view(c, "Look up a user", "usage")
	if keys != nil {
		keys.CSRF = v.CSRF
	}
	if runs != nil {
		runs.CSRF = v.CSRF
	}
	v.Usage = &adminUsageView{
		Record:       record,
		Keys:         keys,
		Runs:         runs,
		KeepsRecords: keeps,
		Records:      records,
		NextRecords:  next,
		Fields: []adminField{
			{ID: "user-id", Name: "user_id", Label: "User id", Value: user, Error: errs["user_id"],
				Hint: `Checks that name no user are counted as user "anonymous".`},
			{ID: "usage-tier", Name: "tier", Label: "Tier", Options: options, Error: errs["tier"],
				Hint: "With a tier: the remaining quota and when each window frees a slot."},
		},
		Result: result,
	}
	status := http.StatusOK
	if len(errs) > 0 || len(recordErrs) > 0 || posted.keyErr != "" {
		status = http.StatusBadRequest
	}
	return a.render(c, status, "usage", v)
}

func (a *Admin) handleClearUsage(c echo.Context) error {
	user, tierName := c.Request().PostFormValue("user_id"), c.Request().PostFormValue("tier")
	if user == "" {
		return a.renderError(c, http.StatusBadRequest, "No user", "Look up a user before clearing their history.")
	}
	if err := a.svc.Forget(c.Request().Context(), user); err != nil {
		return a.fail(c, err)
	}
	a.flash(c, fmt.Sprintf("Cleared the history of user %s — every window starts empty", user))
	q := url.Values{"user_id": {user}}
	if tierName != "" {
		q.Set("tier", tierName)
	}
	return c.Redirect(http.StatusSeeOther, "/admin/usage?"+q.Encode())
}

// monthRow is the row of the current billing period in a table of
// windows: its requests, and with limited, its limit, what remains and
// when it ends (nothing leaves a period before then).
func monthRow(m *policy.MonthState, limited bool, now time.Time) adminWindowRow {
	row := adminWindowRow{Name: "month", Title: "This billing period", Count: policy.GroupDigits(m.Count)}
	if limited && m.Limited {
		row.Limit, row.Remaining, row.Reset = policy.GroupDigits(m.Limit), policy.GroupDigits(m.Remaining), resetText(now, m.Reset)
	}
	return row
}

// monthText says a billing period's dates and its tokens and spend so
// far, against their month limits where set: "1 Mar 2026 00:00 to 1 Apr
// 2026 00:00 (UTC): 1,200 of 2,000,000 tokens, $0.35 spent".
func monthText(m *policy.MonthState) string {
	const layout = "2 Jan 2006 15:04"
	s := m.Start.Format(layout) + " to " + m.End.Format(layout) + " (" + m.Start.Location().String() + ")"
	var parts []string
	if t := m.Tokens; t != nil {
		p := policy.GroupDigits(t.Used) + " tokens"
		if t.Limited {
			p = policy.GroupDigits(t.Used) + " of " + policy.GroupDigits(t.Limit) + " tokens"
		}
		parts = append(parts, p)
	}
	if c := m.Cost; c != nil {
		p := "$" + policy.Money(c.Used).String() + " spent"
		if c.Limited {
			p += " of $" + policy.Money(c.Limit).String()
		}
		parts = append(parts, p)
	}
	if len(parts) > 0 {
		s += ": " + strings.Join(parts, ", ")
	}
	return s
}

// resetText says when a window next frees a slot: in how long and at what
// time.
func resetText(now time.Time, secs int64) string {
	if secs == 0 {
		return "—"
	}
	at := now.Add(time.Duration(secs) * time.Second).UTC()
	layout := "15:04:05 UTC"
	if at.YearDay() != now.UTC().YearDay() {
		layout = "Jan 2 15:04:05 UTC"
	}
	return fmt.Sprintf("in %s (%s)", humanDuration(secs), at.Format(layout))
}

// usageResult returns the rows of a user's usage report at now: its
// windows (with their limits when the look-up named tierName) and its
// billing period's, when the tier limits months.
func usageResult(user, tierName string, report *policy.UsageReport, now time.Time) *adminUsageResult {
	result := &adminUsageResult{UserID: user, Tier: tierName, AsOf: now.UTC().Format("2006-01-02 15:04:05 UTC")}
	for _, w := range policy.Windows {
		s := report.Windows[w]
		row := adminWindowRow{Name: w.String(), Title: adminWindowTitles[w], Count: policy.GroupDigits(s.Count)}
		if tierName != "" {
			row.Limit, row.Remaining, row.Reset = policy.GroupDigits(s.Limit), policy.GroupDigits(s.Remaining), resetText(now, s.Reset)
		}
		result.Windows = append(result.Windows, row)
	}
	if m := report.Month; m != nil {
		result.Windows = append(result.Windows, monthRow(m, tierName != "", now))
		result.Month = monthText(m)
	}
	return result
}
