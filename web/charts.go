package web

import (
	"fmt"
	"math"
	"strconv"
)

// The charts are SVG drawn here, on the server: the page runs no script.
// Every mark uses presentation attributes, never style attributes, so the
// Content-Security-Policy needs no 'unsafe-inline'. Admissions are solid;
// each refusal reason has its own hatching as well as its own colour, so
// that they are told apart without colour, and the legend says in words
// which is which. Every colour has at least 3:1 contrast against white.

// Chart geometry, in viewBox units; the SVG scales to its container.
const (
	chartW      = 640
	chartH      = 220
	chartLeft   = 44
	chartRight  = 8
	chartTop    = 10
	chartBottom = 24
)

// chartSeries is one kind of mark: how it is filled and what it is called.
type chartSeries struct {
	Key   string // "admitted" or a refusal reason
	Label string
	Color string
	// Pattern draws the hatching: "" solid, else one of the patterns of
	// the "chart-patterns" template.
	Pattern string
}

// Fill returns the fill of the series' marks in the chart with id.
func (s chartSeries) Fill(id string) string {
	if s.Pattern == "" {
		return s.Color
	}
	return "url(#" + id + "-" + s.Key + ")"
}

var admittedSeries = chartSeries{Key: "admitted", Label: "Admitted", Color: "#1d4ed8"}

// spendSeries is the spend of calls settled, in picodollars.
var spendSeries = chartSeries{Key: "spend", Label: "Spend settled", Color: "#0f766e"}

// refusalSeries lists a series per refusal reason, in policy.RefusalReasons
// order.
var refusalSeries = []chartSeries{
	{Key: "minute", Label: "Refused: per-minute limit", Color: "#b3261e", Pattern: "diagonal"},
	{Key: "hour", Label: "Refused: per-hour limit", Color: "#8a4b00", Pattern: "cross"},
	{Key: "day", Label: "Refused: per-day limit", Color: "#6b3fa0", Pattern: "vertical"},
	{Key: "tokens", Label: "Refused: token limit", Color: "#00696b", Pattern: "dots"},
	{Key: "concurrency", Label: "Refused: concurrent calls", Color: "#5c5c00", Pattern: "horizontal"},
	{Key: "account", Label: "Refused: account's pooled limits", Color: "#166534", Pattern: "stripedots"},
	{Key: "feature", Label: "Refused: feature not in tier", Color: "#a0105c", Pattern: "backdiagonal"},
	{Key: "other", Label: "Refused: another guardrail", Color: "#4b5563", Pattern: "grid"},
}

// chartView is one chart, ready for the "chart" template.
type chartView struct {
	ID    string // unique on the page: prefixes the patterns' ids
	Label string // the accessible name
	W, H  int
	// The plot area.
	Left, Right, Top, Bottom float64
	Series                   []chartSeries // those with marks, for patterns and the legend
	Rects                    []chartRect
	YTicks, XTicks           []chartTick
	Lines                    []chartLine
	// Above lists the limits too far above the bars to draw.
	Above []string
}

type chartRect struct {
	X, Y, W, H float64
	Fill       string
	Title      string
}

type chartTick struct {
	Pos   float64
	Label string
}

// chartLine is a horizontal line across the plot, such as a limit.
type chartLine struct {
	Y     float64
	Label string
	Color string
	Dash  string
}

// chartBar is one bucket's stack: a value per series key.
type chartBar struct {
	Label  string // the bucket's time, for the x axis and titles
	Values map[string]int64
}

// chartLimit is a horizontal line to draw at Value.
type chartLimit struct {
	Value int64
	Label string
}

// newChart lays out a stacked bar chart of bars, stacking series in order,
// with a tick label on every tickEvery-th bar and limits drawn as lines
// (those far above the bars are left out and said so in their label).
func newChart(id, label string, series []chartSeries, bars []chartBar, tickEvery int, limits []chartLimit) chartView {
	return newChartIn(id, label, series, bars, tickEvery, limits, formatCount)
}

func formatCount(n int64) string { return strconv.FormatInt(n, 10) }

// newChartIn is newChart for values that format writes (money, say) on
// the axis and in the marks' titles.
func newChartIn(id, label string, series []chartSeries, bars []chartBar, tickEvery int, limits []chartLimit, format func(int64) string) chartView {
	v := chartView{ID: id, Label: label, W: chartW, H: chartH,
		Left: chartLeft, Right: chartW - chartRight, Top: chartTop, Bottom: chartH - chartBottom}
	var top int64
	used := make(map[string]bool)
	for _, b := range bars {
		var sum int64
		for _, s := range series {
			sum += b.Values[s.Key]
			if b.Values[s.Key] > 0 {
				used[s.Key] = true
			}
		}
		top = max(top, sum)
	}
	// Limits at most twice the tallest bar are drawn; a chart of an idle
	// user still shows the tightest.
	var drawn []chartLimit
	lowest := int64(math.MaxInt64)
	for _, l := range limits {
		lowest = min(lowest, l.Value)
	}
	for _, l := range limits {
		if l.Value <= 2*top || l.Value == lowest {
			drawn = append(drawn, l)
		} else {
			v.Above = append(v.Above, l.Label+" (above the chart)")
		}
	}
	for _, l := range drawn {
		top = max(top, l.Value)
	}
	scaleMax := niceCeil(top)
	plotH := v.Bottom - v.Top
	y := func(n int64) float64 { return v.Bottom - float64(n)/float64(scaleMax)*plotH }
	for _, s := range series {
		if used[s.Key] || s.Key == admittedSeries.Key {
			v.Series = append(v.Series, s)
		}
	}
	slot := (v.Right - v.Left) / float64(max(len(bars), 1))
	gap := min(slot*0.15, 2)
	for i, b := range bars {
		x := v.Left + float64(i)*slot
		var base int64
		for _, s := range series {
			n := b.Values[s.Key]
			if n == 0 {
				continue
			}
			v.Rects = append(v.Rects, chartRect{
				X: round2(x + gap/2), Y: round2(y(base + n)), W: round2(slot - gap), H: round2(y(base) - y(base+n)),
				Fill: s.Fill(id), Title: fmt.Sprintf("%s, %s: %s", b.Label, s.Label, format(n)),
			})
			base += n
		}
		if tickEvery > 0 && i%tickEvery == 0 {
			v.XTicks = append(v.XTicks, chartTick{Pos: round2(x + slot/2), Label: b.Label})
		}
	}
	for _, t := range []int64{0, scaleMax / 2, scaleMax} {
		v.YTicks = append(v.YTicks, chartTick{Pos: round2(y(t)), Label: format(t)})
	}
	dashes := []string{"6 3", "2 3", "10 4 2 4"}
	for i, l := range drawn {
		v.Lines = append(v.Lines, chartLine{Y: round2(y(l.Value)), Label: l.Label, Color: "#111827", Dash: dashes[i%len(dashes)]})
	}
	return v
}

// niceCeil returns the smallest of 1, 2 or 5 times a power of ten, even
// (so that half of it is whole), at least n and at least 2.
func niceCeil(n int64) int64 {
	if n <= 2 {
		return 2
	}
	for p := int64(1); ; p *= 10 {
		for _, m := range []int64{2, 4, 10} { // 2, 4 and 10 halve to whole numbers
			if m*p >= n {
				return m * p
			}
		}
	}
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }

// chartPattern is one hatching, for the "chart" template's defs.
type chartPattern struct {
	ID, Color   string
	Rotate      int
	Stripe      bool // a vertical stripe (rotated)
	CrossStripe bool // and a horizontal one
	Dot         bool
}

// Patterns returns the hatchings the chart's series use.
func (v chartView) Patterns() []chartPattern {
	var out []chartPattern
	for _, s := range v.Series {
		p := chartPattern{ID: v.ID + "-" + s.Key, Color: s.Color}
		switch s.Pattern {
		case "":
			continue
		case "diagonal":
			p.Rotate, p.Stripe = 45, true
		case "backdiagonal":
			p.Rotate, p.Stripe = -45, true
		case "vertical":
			p.Stripe = true
		case "horizontal":
			p.Rotate, p.Stripe = 90, true
		case "cross":
			p.Rotate, p.Stripe, p.CrossStripe = 45, true, true
		case "grid":
			p.Stripe, p.CrossStripe = true, true
		case "dots":
			p.Dot = true
		case "stripedots":
			p.Rotate, p.Stripe, p.Dot = 45, true, true
		}
		out = append(out, p)
	}
	return out
}
