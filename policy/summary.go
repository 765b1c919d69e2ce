package policy

import (
	"fmt"
	"strconv"
	"strings"
)

// The wording of tiers, accounts, user records and their changes, shared
// by every place that shows them to a person: the admin page's tiers page
// and audit log, and the import report of "policyguard tiers import".

// TierSummary describes a tier's limits, features and models in one line,
// as the admin page's audit log and the import report of "policyguard
// tiers import" word a tier that was created or deleted: "5/min (+0
// burst), 50/hour, 500/day; chat; models gpt-4o*; account 600/min,
// 2,000,000 tokens/day". A tier that allows every model, or sets no pooled
// limits for accounts, does not say so, so the seeded tiers read as they
// always did.
func TierSummary(t *Tier) string {
	features := "no features"
	if len(t.Features) > 0 {
		features = strings.Join(t.Features, ", ")
	}
	switch {
	case t.Models == nil:
	case len(t.Models) == 0:
		features += "; no models"
	default:
		features += "; models " + strings.Join(t.Models, ", ")
	}
	shadow := ""
	if t.Shadow != nil {
		shadow = "; shadow " + LimitsSummary(*t.Shadow)
	}
	requests, metering := limitWords(func(f *LimitField) (int64, bool) { return f.Value(t) })
	if metering != "" {
		// Only the metering limits a tier sets: the seeded tiers read as
		// they always did.
		metering = "; " + metering
	}
	account := ""
	if t.Account != nil {
		account = "; account " + PoolSummary(t.Account)
	}
	return requests + metering + "; " + features + shadow + account + runWords(t.Run, t.RunRequired)
}

// runWords words a tier's run object for TierSummary: "; run 50 steps,
// $2.00 spend, depth 3, required"; "" for a tier without one that
// requires no run.
func runWords(run *LimitSet, required bool) string {
	var s string
	switch {
	case run != nil:
		s = "; run " + RunSummary(run)
	case required:
		s = "; run"
	}
	if required {
		s += ", required"
	}
	return s
}

// RunSummary describes a run object's limits in one line, those it sets
// in the order of LimitFields: "50 steps, 200,000 tokens, $2.00 spend, 600
// seconds, 4 concurrent calls, depth 3"; "no limits" when it sets none.
func RunSummary(r *LimitSet) string {
	requests, metering := limitWords(func(f *LimitField) (int64, bool) {
		if v := r.Get(f); v != nil && f.In(ScopeRun) {
			return *v, true
		}
		return 0, false
	})
	switch {
	case requests == "" && metering == "":
		return "no limits"
	case requests == "" || metering == "":
		return requests + metering
	}
	return requests + ", " + metering
}

// PoolSummary describes an account's pooled limits in one line, those it
// sets in the order of LimitFields: "600/min (+0 burst), 2,000,000
// tokens/day, 10 concurrent calls"; "no limits" when it sets none.
func PoolSummary(p *LimitSet) string {
	requests, metering := limitWords(func(f *LimitField) (int64, bool) {
		if v := p.Get(f); v != nil && f.In(ScopeAccount) {
			return *v, true
		}
		return 0, false
	})
	switch {
	case requests == "" && metering == "":
		return "no limits"
	case requests == "" || metering == "":
		return requests + metering
	}
	return requests + ", " + metering
}

// limitWords words the limits value reads (ok false for one unset), in
// the order of LimitFields: the request limits, each burst with the limit
// of its window ("10/min (+2 burst), 100/hour, 1,000/day"), and the
// metering limits ("5,000 tokens/min, 2 concurrent calls").
func limitWords(value func(*LimitField) (int64, bool)) (requests, metering string) {
	var req, met []string
	windowAt := map[Window]int{} // the part of each window's request limit
	for i := range LimitFields {
		f := &LimitFields[i]
		v, ok := value(f)
		if !ok {
			continue
		}
		switch f.Kind {
		case KindRequests:
			if !f.Windowed {
				req = append(req, GroupDigits(v)+" steps")
				break
			}
			windowAt[f.Window] = len(req)
			req = append(req, GroupDigits(v)+"/"+windowUnit(f.Window))
		case KindBurst:
			if j, ok := windowAt[f.Window]; ok {
				req[j] += " (+" + GroupDigits(v) + " burst)"
			} else {
				req = append(req, "+"+GroupDigits(v)+" burst")
			}
		case KindTokens:
			met = append(met, GroupDigits(v)+" tokens"+perWindow(f))
		case KindConcurrency:
			met = append(met, GroupDigits(v)+" concurrent calls")
		case KindCost:
			met = append(met, f.Format(v)+" spend"+perWindow(f))
		case KindDuration:
			met = append(met, GroupDigits(v)+" seconds")
		case KindDepth:
			met = append(met, "depth "+GroupDigits(v))
		}
	}
	return strings.Join(req, ", "), strings.Join(met, ", ")
}

// perWindow is "/" and the unit of f's window ("/min"), "" for a limit
// without one (a run's).
func perWindow(f *LimitField) string {
	if !f.Windowed {
		return ""
	}
	return "/" + windowUnit(f.Window)
}

// windowUnit is w as a summary abbreviates it: "min", "hour", "day".
func windowUnit(w Window) string {
	if w == Minute {
		return "min"
	}
	return w.String()
}

// LimitText words a count limit for a person: "none" when unset, else its
// digits grouped ("1,000"). LimitField.Text words a value of any row.
func LimitText(v *int64) string {
	if v == nil {
		return "none"
	}
	return GroupDigits(*v)
}

// TierDiff lists the fields that differ between before and after, by their
// API names, one line each: "requests_per_minute: 60 → 100",
// "cost_per_day: none → $20.50" (see LimitField.Text). A change that
// changed nothing reads "saved without a change".
func TierDiff(before, after *Tier) []string {
	var out []string
	for f := range FieldsIn(ScopeTier) {
		if b, a := f.Text(f.Get(before)), f.Text(f.Get(after)); b != a {
			out = append(out, fmt.Sprintf("%s: %s → %s", f.Name, b, a))
		}
	}
	if bf, af := strings.Join(before.Features, ", "), strings.Join(after.Features, ", "); bf != af {
		out = append(out, fmt.Sprintf("features: [%s] → [%s]", bf, af))
	}
	if bm, am := ModelsText(before.Models), ModelsText(after.Models); bm != am {
		out = append(out, fmt.Sprintf("models: %s → %s", bm, am))
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
	out = append(out, setDiff(ScopeAccount, before.Account, after.Account)...)
	out = append(out, setDiff(ScopeRun, before.Run, after.Run)...)
	if before.RunRequired != after.RunRequired {
		out = append(out, fmt.Sprintf("run.required: %t → %t", before.RunRequired, after.RunRequired))
	}
	if len(out) == 0 {
		out = append(out, "saved without a change")
	}
	return out
}

// setDiff lists how a tier's set of limits of scope sc (ScopeAccount: the
// pooled limits for accounts; ScopeRun: its run object) changed, field by
// field as "account.requests_per_minute: none → 600",
// "run.max_requests: none → 50" (a tier without the set limits nothing),
// or as "account: none → no limits" when only their presence did.
func setDiff(sc Scope, before, after *LimitSet) []string {
	set, summary := "account", PoolSummary
	if sc == ScopeRun {
		set, summary = "run", RunSummary
	}
	var none LimitSet
	b, a := before, after
	if b == nil {
		b = &none
	}
	if a == nil {
		a = &none
	}
	var out []string
	for f := range FieldsIn(sc) {
		if bv, av := f.Text(b.Get(f)), f.Text(a.Get(f)); bv != av {
			out = append(out, fmt.Sprintf("%s.%s: %s → %s", set, f.Name, bv, av))
		}
	}
	if len(out) == 0 && (before == nil) != (after == nil) {
		words := func(p *LimitSet) string {
			if p == nil {
				return "none"
			}
			return summary(p)
		}
		out = append(out, fmt.Sprintf("%s: %s → %s", set, words(before), words(after)))
	}
	return out
}

// ModelsText words a tier's Models for a person: "any" for nil, "none" for
// an empty list, else the names in brackets: "[gpt-4o*, o3]".
func ModelsText(models []string) string {
	switch {
	case models == nil:
		return "any"
	case len(models) == 0:
		return "none"
	}
	return "[" + strings.Join(models, ", ") + "]"
}

// UserSummary says in words what a record sets: "tier pro; account acme;
// requests_per_minute 5; tokens_per_day none". The import report of
// "policyguard tiers import" words records the same way.
func UserSummary(r *UserRecord) string {
	parts := []string{"no tier assigned"}
	if r.Tier != "" {
		parts[0] = "tier " + r.Tier
	}
	if r.Account != "" {
		parts = append(parts, "account "+r.Account)
	}
	return strings.Join(cycleWords(overrideWords(parts, r.Limits.Values()), r.TimeZone, r.BillingAnchor), "; ")
}

// AccountSummary says in words what an account sets: its plan and the
// pooled limits it overrides, "tier team; requests_per_minute 100;
// max_concurrent none", as UserSummary words a record.
func AccountSummary(a *Account) string {
	return strings.Join(cycleWords(overrideWords([]string{"tier " + a.Tier}, a.Limits.Values()), a.TimeZone, a.BillingAnchor), "; ")
}

// cycleWords appends to parts the billing cycle a record or an account
// sets: "time_zone Europe/Berlin", "billing_anchor 15".
func cycleWords(parts []string, zone string, anchor int) []string {
	if zone != "" {
		parts = append(parts, "time_zone "+zone)
	}
	if anchor != 0 {
		parts = append(parts, "billing_anchor "+strconv.Itoa(anchor))
	}
	return parts
}

// overrideWords appends to parts the overrides values sets, in the order
// of LimitNames: "requests_per_minute 5", "cost_per_day $20.00",
// "tokens_per_day none" for a limit removed.
func overrideWords(parts []string, values map[string]*int64) []string {
	for f := range FieldsIn(ScopeTier | ScopeAccount) {
		if v, ok := values[f.Name]; ok {
			parts = append(parts, f.Name+" "+f.Text(v))
		}
	}
	return parts
}

// LimitsSummary describes request limits in one line: "5/min (+0 burst),
// 100/hour, 1,000/day", and then their Account's, when set: "and account
// pools 50/min, 5,000/day" ("and account pools unlimited" when it sets
// none).
func LimitsSummary(l RequestLimits) string {
	requests, _ := limitWords(func(f *LimitField) (int64, bool) {
		return l.value(f)
	})
	if a := l.Account; a != nil {
		pooled, _ := limitWords(func(f *LimitField) (int64, bool) {
			if v := a.Get(f); v != nil && f.InRequestLimits() {
				return *v, true
			}
			return 0, false
		})
		if pooled == "" {
			pooled = "unlimited"
		}
		requests += " and account pools " + pooled
	}
	return requests
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
