package web

import (
	"context"
	"fmt"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// userDayBucket is the width of a bar of a user's day.
const userDayBucket = 10 * time.Minute

// adminUserDay is a user's last day on the Users page: a chart of their
// requests per 10 minutes with the limits that apply drawn as lines, and
// their open calls and tokens.
type adminUserDay struct {
	Tier  string // the tier whose limits are drawn
	Chart chartView
	Rows  []adminUserDayRow
	// CallsKept reports whether calls are kept: whether CallsInFlight and
	// Tokens are known.
	CallsKept     bool
	CallsInFlight int64
	Tokens        []adminTokenRow
}

type adminUserDayRow struct {
	Time, ISO string
	Requests  int64
}

type adminTokenRow struct {
	Title      string
	Used       int64
	Limit      string // empty when the tier sets none
	Remaining  string
	TierLimits bool
}

// userDay builds the last day of user under tierName, or under the tier
// they were last checked under when tierName is empty.
func (a *Admin) userDay(ctx context.Context, user, tierName string) (*adminUserDay, error) {
	if !a.svc.KeepsStats() {
		return nil, nil
	}
	if tierName == "" {
		var err error
		if tierName, err = a.svc.UserTier(ctx, user); err != nil {
			return nil, err
		}
	}
	counts, from, err := a.svc.UserDay(ctx, user, userDayBucket)
	if err != nil {
		return nil, err
	}
	day := &adminUserDay{Tier: tierName}
	var limits []chartLimit
	t, err := a.svc.Tier(ctx, tierName)
	switch {
	case err == nil:
		limits = []chartLimit{
			{Value: t.Ceiling(policy.Minute) * int64(userDayBucket/time.Minute), Label: fmt.Sprintf("Per-minute limit × 10: %d", t.Ceiling(policy.Minute)*int64(userDayBucket/time.Minute))},
			{Value: t.Ceiling(policy.Hour), Label: fmt.Sprintf("Per-hour limit: %d", t.Ceiling(policy.Hour))},
			{Value: t.Ceiling(policy.Day), Label: fmt.Sprintf("Per-day limit: %d", t.Ceiling(policy.Day))},
		}
	case policy.ErrorCode(err) == policy.ENOTFOUND:
		day.Tier = ""
	default:
		return nil, err
	}
	bars := make([]chartBar, len(counts))
	var total int64
	for i, n := range counts {
		at := from.Add(time.Duration(i) * userDayBucket).UTC()
		bars[i] = chartBar{Label: at.Format("15:04"), Values: map[string]int64{admittedSeries.Key: n}}
		day.Rows = append(day.Rows, adminUserDayRow{Time: at.Format("15:04"), ISO: at.Format(time.RFC3339), Requests: n})
		total += n
	}
	label := fmt.Sprintf("Requests of user %s over the last day, per 10 minutes: %d in all", user, total)
	if day.Tier != "" {
		label += fmt.Sprintf("; the limits of tier %s drawn as lines", day.Tier)
	}
	series := []chartSeries{{Key: admittedSeries.Key, Label: "Requests admitted", Color: admittedSeries.Color}}
	day.Chart = newChart("user-day", label, series, bars, 18, limits)

	report, err := a.svc.UsageReport(ctx, user, day.Tier)
	if err != nil {
		return nil, err
	}
	day.CallsKept, day.CallsInFlight = report.CallsKept, report.CallsInFlight
	if report.CallsKept {
		for _, w := range policy.Windows {
			tok := report.Windows[w].Tokens
			if tok == nil {
				continue
			}
			row := adminTokenRow{Title: adminWindowTitles[w], Used: tok.Used}
			if tok.Limited {
				row.Limit, row.Remaining = policy.GroupDigits(tok.Limit), policy.GroupDigits(tok.Remaining)
			}
			day.Tokens = append(day.Tokens, row)
		}
	}
	return day, nil
}
