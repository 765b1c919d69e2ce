package policy

import (
	"fmt"
	"strconv"
	"strings"
)

// The wording of tiers, user records and their changes, shared by every
// place that shows them to a person: the admin page's tiers page and
// audit log, and the import report of "policyguard tiers import".

// TierSummary describes a tier's limits and features in one line, as the
// admin page's audit log and the import report of "policyguard tiers
// import" word a tier that was created or deleted: "5/min (+0 burst),
// 50/hour, 500/day; chat".
func TierSummary(t *Tier) string {
	features := "no features"
	if len(t.Features) > 0 {
		features = strings.Join(t.Features, ", ")
	}
	shadow := ""
	if t.Shadow != nil {
		shadow = "; shadow " + LimitsSummary(*t.Shadow)
	}
	return fmt.Sprintf("%s/min (+%s burst), %s/hour, %s/day%s; %s%s",
		GroupDigits(t.RequestsPerMinute), GroupDigits(t.BurstAllowance),
		GroupDigits(t.RequestsPerHour), GroupDigits(t.RequestsPerDay), meteringSummary(t), features, shadow)
}

// meteringSummary describes the metering limits a tier sets, "" when none:
// the seeded tiers read as they always did.
func meteringSummary(t *Tier) string {
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
			parts = append(parts, GroupDigits(*l.v)+" "+l.unit)
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
	return GroupDigits(*v)
}

// TierDiff lists the fields that differ between before and after, by their
// API names, one line each: "requests_per_minute: 60 → 100". A change that
// changed nothing reads "saved without a change".
func TierDiff(before, after *Tier) []string {
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
			out = append(out, fmt.Sprintf("%s: %s → %s", l.field, GroupDigits(l.before), GroupDigits(l.after)))
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
		out = append(out, fmt.Sprintf("description: %s → %s", Quote(before.Description), Quote(after.Description)))
	}
	if shadow := func(t *Tier) string {
		if t.Shadow == nil {
			return "none"
		}
		return LimitsSummary(*t.Shadow)
	}; shadow(before) != shadow(after) {
		out = append(out, fmt.Sprintf("shadow: %s → %s", shadow(before), shadow(after)))
	}
	if len(out) == 0 {
		out = append(out, "saved without a change")
	}
	return out
}

// UserSummary says in words what a record sets: "tier pro;
// requests_per_minute 5; tokens_per_day none". The import report of
// "policyguard tiers import" words records the same way.
func UserSummary(r *UserRecord) string {
	parts := []string{"no tier assigned"}
	if r.Tier != "" {
		parts[0] = "tier " + r.Tier
	}
	values := r.Limits.Values()
	for _, name := range LimitNames {
		switch v, ok := values[name]; {
		case !ok:
		case v == nil:
			parts = append(parts, name+" none")
		default:
			parts = append(parts, name+" "+GroupDigits(*v))
		}
	}
	return strings.Join(parts, "; ")
}

// LimitsSummary describes request limits in one line: "5/min (+0 burst),
// 100/hour, 1,000/day".
func LimitsSummary(l RequestLimits) string {
	return fmt.Sprintf("%s/min (+%s burst), %s/hour, %s/day",
		GroupDigits(l.RequestsPerMinute), GroupDigits(l.BurstAllowance), GroupDigits(l.RequestsPerHour), GroupDigits(l.RequestsPerDay))
}

// GroupDigits formats n with a comma between groups of three digits:
// 1,000,000.
func GroupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}
