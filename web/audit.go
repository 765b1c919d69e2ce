package web

import (
	"context"
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
	Actor         string   // who: an admin's name, "bootstrap", a command's, "unknown"
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
			Actor:   ch.Actor,
			Old:     a.tierJSON(ch.Old),
			New:     a.tierJSON(ch.New),
		}
		switch {
		case ch.Created():
			r.Kind, r.Details = "created", []string{policy.TierSummary(ch.New)}
		case ch.Deleted():
			r.Kind, r.Details = "deleted", []string{"was " + policy.TierSummary(ch.Old)}
		default:
			r.Kind, r.Details = "updated", policy.TierDiff(ch.Old, ch.New)
		}
		rows[i] = r
	}
	return rows, nil
}

// tierJSON returns t as the JSON API shows it, or "" for no tier or
// without Config.TierJSON.
func (a *Admin) tierJSON(t *policy.Tier) string {
	if t == nil || a.tierToJSON == nil {
		return ""
	}
	return a.tierToJSON(*t)
}
