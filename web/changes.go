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
	return fmt.Sprintf("%s/min (+%s burst), %s/hour, %s/day%s; %s%s",
		groupDigits(t.RequestsPerMinute), groupDigits(t.BurstAllowance),
		groupDigits(t.RequestsPerHour), groupDigits(t.RequestsPerDay), meteringSummary(t), features, shadow)
}

// meteringSummary describes the metering limits a tier sets, "" when none:
// the seeded tiers read as they always did.
func meteringSummary(t *policy.Tier) string {
	var parts []string
	for _, l := range []struct {
		unit string
		v    *int64
	}{
		{"tokens/min", t.TokensPerMinute},
		{"tokens/hour", t.TokensPerHour},
		{"tokens/day", t.TokensPerDay},
		{"concurrent calls", t.MaxConcurrent},
	} {
		if l.v != nil {
			parts = append(parts, groupDigits(*l.v)+" "+l.unit)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, ", ")
}

// limitText words a metering limit for the audit log: "none" when unset.
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
	for _, l := range []struct {
		field         string
		before, after int64
	}{
		{"requests_per_minute", before.RequestsPerMinute, after.RequestsPerMinute},
		{"requests_per_hour", before.RequestsPerHour, after.RequestsPerHour},
		{"requests_per_day", before.RequestsPerDay, after.RequestsPerDay},
		{"burst_allowance", before.BurstAllowance, after.BurstAllowance},
	} {
		if l.before != l.after {
			out = append(out, fmt.Sprintf("%s: %s → %s", l.field, groupDigits(l.before), groupDigits(l.after)))
		}
	}
	for _, l := range []struct {
		field         string
		before, after *int64
	}{
		{"tokens_per_minute", before.TokensPerMinute, after.TokensPerMinute},
		{"tokens_per_hour", before.TokensPerHour, after.TokensPerHour},
		{"tokens_per_day", before.TokensPerDay, after.TokensPerDay},
		{"max_concurrent", before.MaxConcurrent, after.MaxConcurrent},
	} {
		if b, a := limitText(l.before), limitText(l.after); b != a {
			out = append(out, fmt.Sprintf("%s: %s → %s", l.field, b, a))
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
