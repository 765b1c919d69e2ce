package web

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// adminOverview is the overview page: per tier with traffic, what its
// checks did over the last hour and the last day, and the top users.
type adminOverview struct {
	AsOf  string
	Tiers []adminTierTraffic
	Top   []adminTopList // the last hour's, then the last day's
}

type adminTopList struct {
	Period, Words string
	Users         []adminTopUser
}

type adminTierTraffic struct {
	Name string
	// Metered reports whether the tier's calls are shown: it meters them, or
	// calls were opened under it anyway (the gateway opens one per request).
	Metered       bool
	CallsInFlight int64
	Hour, Day     adminPeriodView
	// Spend is the tier's spend over the last day; nil when it limits
	// none and its calls cost nothing.
	Spend *adminSpendView
}

// adminSpendView is one tier's spend over the last day, by hour: its
// chart and its table.
type adminSpendView struct {
	ID, Caption string
	// Total is the day's spend, Limit the tier's per-day spend limit
	// ("" for none), in dollars.
	Total, Limit string
	Chart        chartView
	Rows         []adminSpendRow
}

type adminSpendRow struct {
	Time, ISO string
	Spend     string // dollars
}

// adminPeriodView is one tier's chart and table of one period.
type adminPeriodView struct {
	Period  string // "hour" or "day"
	Caption string
	Chart   chartView
	// Columns beyond Time, Admitted and Refused: a refusal reason, a
	// shadow limit or the tokens settled.
	Columns []adminColumn
	Rows    []adminStatsRow
}

type adminColumn struct {
	Key, Label string
}

type adminStatsRow struct {
	Time, ISO         string
	Admitted, Refused int64
	Cells             []adminCell
}

type adminCell struct {
	Key   string
	Value int64
}

type adminTopUser struct {
	UserID, Link, Tier string
	Requests           int64
	Share              string
}

var refusalColumnLabels = map[string]string{
	policy.CountMinute:      "Per-minute limit",
	policy.CountHour:        "Per-hour limit",
	policy.CountDay:         "Per-day limit",
	policy.CountTokens:      "Token limit",
	policy.CountConcurrency: "Concurrent calls",
	policy.CountAccount:     "Account's pooled limits",
	policy.CountFeature:     "Feature",
	policy.CountOther:       "Other guardrail",
}

func (a *Admin) handleOverviewPage(c echo.Context) error {
	ctx := c.Request().Context()
	now := a.svc.Now()
	if !a.svc.KeepsStats() {
		v := a.view(c, "Overview", "overview")
		v.Alert = "This service keeps no statistics of its checks."
		v.Overview = &adminOverview{AsOf: now.UTC().Format("2006-01-02 15:04:05 UTC")}
		return a.render(c, http.StatusOK, "overview", v)
	}
	// The top users are the costliest read (a pass over every user's
	// rows); it runs on its own read connection meanwhile.
	type topResult struct {
		lists [][]policy.TopUser
		err   error
	}
	topc := make(chan topResult, 1)
	go func() {
		lists, err := a.svc.TopUsers(ctx, []policy.StatsPeriod{policy.PeriodHour, policy.PeriodDay}, 10)
		topc <- topResult{lists, err}
	}()
	hour, err := a.svc.Stats(ctx, policy.PeriodHour, "")
	if err != nil {
		return a.fail(c, err)
	}
	day, err := a.svc.Stats(ctx, policy.PeriodDay, "")
	if err != nil {
		return a.fail(c, err)
	}
	tiers, err := a.svc.Tiers(ctx)
	if err != nil {
		return a.fail(c, err)
	}
	inFlight, err := a.svc.CallsInFlight(ctx)
	if err != nil {
		return a.fail(c, err)
	}
	tr := <-topc
	if tr.err != nil {
		return a.fail(c, tr.err)
	}
	top := tr.lists
	metered := make(map[string]bool)
	spendLimits := make(map[string]*int64)
	limitsSpend := make(map[string]bool)
	for _, t := range tiers {
		metered[t.Name] = t.Metered()
		spendLimits[t.Name], limitsSpend[t.Name] = t.Limits[policy.CostPerDay], t.Limits.LimitsSpend()
	}
	byName := func(list []policy.TierStats) map[string]policy.TierStats {
		m := make(map[string]policy.TierStats, len(list))
		for _, ts := range list {
			m[ts.Tier] = ts
		}
		return m
	}
	hours, days := byName(hour), byName(day)
	var names []string
	seen := make(map[string]bool)
	for _, list := range [][]policy.TierStats{day, hour} {
		for _, ts := range list {
			if !seen[ts.Tier] {
				seen[ts.Tier] = true
				names = append(names, ts.Tier)
			}
		}
	}
	ov := &adminOverview{AsOf: now.UTC().Format("2006-01-02 15:04:05 UTC")}
	for i, name := range names {
		// The gateway opens a call for every request, whatever the tier's
		// limits: a tier whose calls settled tokens or are open shows them.
		calls := metered[name] || inFlight[name] > 0 || settledTokens(days[name]) > 0
		tt := adminTierTraffic{Name: name, Metered: calls, CallsInFlight: inFlight[name]}
		tt.Hour = periodView(fmt.Sprintf("chart-%d-hour", i), name, policy.PeriodHour, statsOrEmpty(hours, name, policy.PeriodHour, now), false)
		tt.Day = periodView(fmt.Sprintf("chart-%d-day", i), name, policy.PeriodDay, statsOrEmpty(days, name, policy.PeriodDay, now), calls)
		if limitsSpend[name] || settledCost(days[name]) > 0 {
			tt.Spend = spendView(fmt.Sprintf("chart-%d-spend", i), name, statsOrEmpty(days, name, policy.PeriodDay, now), spendLimits[name])
		}
		ov.Tiers = append(ov.Tiers, tt)
	}
	ov.Top = []adminTopList{
		{Period: "hour", Words: "last hour", Users: topUserRows(top[0])},
		{Period: "day", Words: "last day", Users: topUserRows(top[1])},
	}
	v := a.view(c, "Overview", "overview")
	v.Overview = ov
	return a.render(c, http.StatusOK, "overview", v)
}

// settledTokens returns the tokens the tier's calls settled in ts.
func settledTokens(ts policy.TierStats) (n int64) {
	for _, b := range ts.Buckets {
		n += b.TokensSettled
	}
	return n
}

// settledCost returns what the tier's calls settled in ts cost.
func settledCost(ts policy.TierStats) (m policy.Money) {
	for _, b := range ts.Buckets {
		m += b.CostSettled
	}
	return m
}

// dollars writes m as the API does, with a dollar sign: "$0.000025".
func dollars(m policy.Money) string { return "$" + m.String() }

// spendView builds the chart and the table of one tier's spend over the
// day of ts, by hour; perDay is its cost_per_day, nil for none.
func spendView(id, tier string, ts policy.TierStats, perDay *int64) *adminSpendView {
	sv := &adminSpendView{ID: id, Caption: fmt.Sprintf("Tier %s, spend settled in the last day, by hour (UTC)", tier),
		Total: dollars(settledCost(ts))}
	label := fmt.Sprintf("Spend of tier %s, last day, by hour: %s", tier, sv.Total)
	if perDay != nil {
		sv.Limit = dollars(policy.Money(*perDay))
		label += ", per-day spend limit " + sv.Limit
	}
	bars := make([]chartBar, len(ts.Buckets))
	for i, b := range ts.Buckets {
		t := b.Start.UTC()
		sv.Rows = append(sv.Rows, adminSpendRow{Time: t.Format("15:00"), ISO: t.Format(time.RFC3339), Spend: dollars(b.CostSettled)})
		bars[i] = chartBar{Label: t.Format("15:00"), Values: map[string]int64{spendSeries.Key: int64(b.CostSettled)}}
	}
	// No limit line: the limit holds over any 24 hours, not over an
	// hour's bar.
	sv.Chart = newChartIn(id, label, []chartSeries{spendSeries}, bars, 3, nil, func(n int64) string { return dollars(policy.Money(n)) })
	if len(sv.Chart.Series) == 0 {
		sv.Chart.Series = []chartSeries{spendSeries} // an idle day still says what the chart shows
	}
	return sv
}

// statsOrEmpty returns the tier's figures of the period, or empty buckets
// when it had no traffic in it.
func statsOrEmpty(m map[string]policy.TierStats, tier string, p policy.StatsPeriod, now time.Time) policy.TierStats {
	if ts, ok := m[tier]; ok {
		return ts
	}
	from, _ := p.Span(now)
	ts := policy.TierStats{Tier: tier, Period: p, Buckets: make([]policy.StatsBucket, int(p.Length/p.Bucket))}
	for i := range ts.Buckets {
		ts.Buckets[i] = policy.StatsBucket{Tier: tier, Start: from.Add(time.Duration(i) * p.Bucket)}
	}
	return ts
}

// periodView builds the chart and the table of one tier's period.
func periodView(id, tier string, p policy.StatsPeriod, ts policy.TierStats, tokens bool) adminPeriodView {
	words, layout, tickEvery := "last hour, by minute", "15:04", 10
	if p.Name == policy.PeriodDay.Name {
		words, layout, tickEvery = "last day, by hour", "15:00", 3
	}
	pv := adminPeriodView{Period: p.Name, Caption: fmt.Sprintf("Tier %s, %s (UTC)", tier, words)}
	refused := make(map[string]bool)
	shadow := make(map[string]bool)
	for _, b := range ts.Buckets {
		for r := range b.RefusedBy {
			refused[r] = true
		}
		for w := range b.Shadow {
			shadow[w] = true
		}
	}
	for _, r := range policy.SortedReasons(boolKeys(refused)) {
		label, ok := refusalColumnLabels[r]
		if !ok {
			label = r
		}
		pv.Columns = append(pv.Columns, adminColumn{Key: "refused_" + r, Label: label})
	}
	for _, w := range policy.SortedReasons(boolKeys(shadow)) {
		pv.Columns = append(pv.Columns, adminColumn{Key: "shadow_" + w, Label: "Shadow " + w + " limit"})
	}
	if tokens {
		pv.Columns = append(pv.Columns, adminColumn{Key: "tokens_settled", Label: "Tokens settled"})
	}
	series := append([]chartSeries{admittedSeries}, refusalSeries...)
	bars := make([]chartBar, len(ts.Buckets))
	var admitted, refusedTotal int64
	for i, b := range ts.Buckets {
		t := b.Start.UTC()
		row := adminStatsRow{Time: t.Format(layout), ISO: t.Format(time.RFC3339), Admitted: b.Admitted, Refused: b.Refused}
		for _, col := range pv.Columns {
			var n int64
			switch {
			case col.Key == "tokens_settled":
				n = b.TokensSettled
			case len(col.Key) > 8 && col.Key[:8] == "refused_":
				n = b.RefusedBy[col.Key[8:]]
			default:
				n = b.Shadow[col.Key[7:]]
			}
			row.Cells = append(row.Cells, adminCell{Key: col.Key, Value: n})
		}
		pv.Rows = append(pv.Rows, row)
		values := map[string]int64{admittedSeries.Key: b.Admitted}
		for r, n := range b.RefusedBy {
			if _, known := refusalColumnLabels[r]; !known {
				r = policy.CountOther
			}
			values[r] += n
		}
		bars[i] = chartBar{Label: t.Format(layout), Values: values}
		admitted += b.Admitted
		refusedTotal += b.Refused
	}
	label := fmt.Sprintf("Checks of tier %s, %s: %d admitted, %d refused", tier, words, admitted, refusedTotal)
	pv.Chart = newChart(id, label, series, bars, tickEvery, nil)
	return pv
}

func boolKeys(m map[string]bool) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k := range m {
		out[k] = 1
	}
	return out
}

func topUserRows(users []policy.TopUser) []adminTopUser {
	out := make([]adminTopUser, len(users))
	for i, u := range users {
		share := "—"
		if u.Share >= 0 {
			share = strconv.FormatFloat(u.Share*100, 'f', 0, 64) + "% of per-" + u.Window.String() + " limit"
		}
		out[i] = adminTopUser{UserID: u.UserID, Tier: u.Tier, Requests: u.Requests, Share: share,
			Link: "/admin/usage?" + url.Values{"user_id": {u.UserID}, "tier": {u.Tier}}.Encode()}
	}
	return out
}
