package web

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// adminRecentChanges is how many entries of the audit log the tiers page
// shows.
const adminRecentChanges = 20

// adminChangeRow is one entry of the audit log as the tiers page shows it.
type adminChangeRow struct {
	When, WhenISO string
	Tier          string
	Kind          string   // "created", "updated" or "deleted"
	Source        string   // "api", "admin", "import" or "library"
	Details       []string // what changed, one line per field
	Old, New      string   // the tier before and after as JSON; empty for none
}

// recentChanges returns the latest entries of the audit log, newest first.
func (a *Admin) recentChanges(ctx context.Context) ([]adminChangeRow, error) {
	changes, err := a.svc.TierChanges(ctx, adminRecentChanges)
	if err != nil {
		return nil, err
	}
	rows := make([]adminChangeRow, len(changes))
	for i, ch := range changes {
		r := adminChangeRow{
			When:    ch.At.UTC().Format("2006-01-02 15:04:05 UTC"),
			WhenISO: ch.At.UTC().Format(time.RFC3339),
			Tier:    ch.Tier,
			Source:  ch.Source,
			Old:     a.tierJSON(ch.Old),
			New:     a.tierJSON(ch.New),
		}
		switch {
		case ch.Created():
			r.Kind, r.Details = "created", []string{TierSummary(ch.New)}
		case ch.Deleted():
			r.Kind, r.Details = "deleted", []string{"was " + TierSummary(ch.Old)}
		default:
			r.Kind, r.Details = "updated", TierDiff(ch.Old, ch.New)
		}
		rows[i] = r
	}
	return rows, nil
}

// tierJSON returns t as the JSON API shows it, or "" for no tier.
func (a *Admin) tierJSON(t *policy.Tier) string {
	if t == nil {
		return ""
	}
	return a.api.TierJSON(*t)
}

// TierSummary describes a tier's limits and features in one line.
func TierSummary(t *policy.Tier) string {
	features := "no features"
	if len(t.Features) > 0 {
		features = strings.Join(t.Features, ", ")
	}
	shadow := ""
	if t.Shadow != nil {
		shadow = "; shadow " + limitsSummary(*t.Shadow)
	}
	requests, metering := limitWords(func(f *policy.LimitField) (int64, bool) { return f.Value(t) })
	if metering != "" {
		// Only the metering limits a tier sets: the seeded tiers read as
		// they always did.
		metering = "; " + metering
	}
	return requests + metering + "; " + features + shadow
}

// limitWords words the limits value reads (ok false for one unset), in
// the order of policy.LimitFields: the request limits, each burst with
// the limit of its window ("10/min (+2 burst), 100/hour, 1,000/day"), and
// the metering limits ("5,000 tokens/min, 2 concurrent calls").
func limitWords(value func(*policy.LimitField) (int64, bool)) (requests, metering string) {
	var req, met []string
	windowAt := map[policy.Window]int{} // the part of each window's request limit
	for i := range policy.LimitFields {
		f := &policy.LimitFields[i]
		v, ok := value(f)
		if !ok {
			continue
		}
		switch f.Kind {
		case policy.KindRequests:
			windowAt[f.Window] = len(req)
			req = append(req, groupDigits(v)+"/"+windowUnit(f.Window))
		case policy.KindBurst:
			if j, ok := windowAt[f.Window]; ok {
				req[j] += " (+" + groupDigits(v) + " burst)"
			} else {
				req = append(req, "+"+groupDigits(v)+" burst")
			}
		case policy.KindTokens:
			met = append(met, groupDigits(v)+" tokens/"+windowUnit(f.Window))
		case policy.KindConcurrency:
			met = append(met, groupDigits(v)+" concurrent calls")
		}
	}
	return strings.Join(req, ", "), strings.Join(met, ", ")
}

// windowUnit is w as a summary abbreviates it: "min", "hour", "day".
func windowUnit(w policy.Window) string {
	if w == policy.Minute {
		return "min"
	}
	return w.String()
}

// limitText words a limit for the audit log: "none" when unset.
func limitText(v *int64) string {
	if v == nil {
		return "none"
	}
	return groupDigits(*v)
}

// TierDiff lists the fields that differ between before and after, by their
// API names.
func TierDiff(before, after *policy.Tier) []string {
	var out []string
	for i := range policy.LimitFields {
		f := &policy.LimitFields[i]
		if b, a := limitText(f.Get(before)), limitText(f.Get(after)); b != a {
			out = append(out, fmt.Sprintf("%s: %s → %s", f.Name, b, a))
		}
	}
	if bf, af := strings.Join(before.Features, ", "), strings.Join(after.Features, ", "); bf != af {
		out = append(out, fmt.Sprintf("features: [%s] → [%s]", bf, af))
	}
	if before.Description != after.Description {
		out = append(out, fmt.Sprintf("description: %s → %s", policy.Quote(before.Description), policy.Quote(after.Description)))
	}
	if shadow := func(t *policy.Tier) string {
		if t.Shadow == nil {
			return "none"
		}
		return limitsSummary(*t.Shadow)
	}; shadow(before) != shadow(after) {
		out = append(out, fmt.Sprintf("shadow: %s → %s", shadow(before), shadow(after)))
	}
	if len(out) == 0 {
		out = append(out, "saved without a change")
	}
	return out
}
