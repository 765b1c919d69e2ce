package db_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// A tier's run object and RunRequired are kept as given: the cache, a
// second store reading the table, the audit log, the columns and the
// writer's comparison for SkipUnchanged all see them; and checks under a
// tier with one are admitted, through PostgreSQL's admit_batch too, which
// confirms the tier it was given against the cache.
func TestTierRunRoundTrip(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		dsn := bk.newDSN(t)
		s := openStore(t, dsn)
		ctx := context.Background()
		run := &policy.LimitSet{}
		run.Set(policy.MaxRunRequests.Field(), i64(50))
		run.Set(policy.MaxRunCost.Field(), i64(2_500_000_000_000)) // $2.50
		run.Set(policy.MaxRunDuration.Field(), i64(600))
		run.Set(policy.MaxConcurrent.Field(), i64(3))
		run.Set(policy.MaxRunDepth.Field(), i64(2))
		tier := func(name string, run *policy.LimitSet, required bool) policy.Tier {
			return policy.Tier{Name: name, Limits: policy.LimitSet{policy.RequestsPerMinute: i64(100), policy.RequestsPerHour: i64(1000), policy.RequestsPerDay: i64(10000)},
				Features: []string{}, Run: run, RunRequired: required}
		}
		want := map[string]policy.Tier{
			"agents": tier("agents", run, true),
			"empty":  tier("empty", &policy.LimitSet{}, false),
			"none":   tier("none", nil, false),
		}
		var put []policy.Tier
		for _, name := range []string{"agents", "empty", "none"} {
			put = append(put, want[name])
		}
		if _, err := s.UpdateTiers(ctx, policy.TierUpdate{At: t0, Source: policy.SourceAPI, Put: put}); err != nil {
			t.Fatal(err)
		}
		other := openStore(t, dsn)
		for name, w := range want {
			for which, st := range map[string]interface {
				Tier(context.Context, string) (policy.Tier, error)
			}{"this store": s, "another store": other} {
				got, err := st.Tier(ctx, name)
				if err != nil || !policy.SameLimits(&got, &w) || (got.Run == nil) != (w.Run == nil) {
					t.Errorf("%s, %s: run %v required %v, %v; want %v %v", which, name, got.Run, got.RunRequired, err, w.Run, w.RunRequired)
				}
			}
			if got, ok := s.CachedTier(name); !ok || !policy.SameLimits(&got, &w) {
				t.Errorf("cached %s: run %v required %v, %v", name, got.Run, got.RunRequired, ok)
			}
		}
		if got, _ := other.Tier(ctx, "agents"); got.RunMaxDepth() != 2 || *got.RunLimit(policy.MaxRunCost) != 2_500_000_000_000 {
			t.Errorf("agents read back: depth %d, cost %v", got.RunMaxDepth(), got.RunLimit(policy.MaxRunCost))
		}

		raw, err := bk.raw(dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		for name, column := range map[string]string{
			"agents": `{"max_concurrent":3,"max_cost":2500000000000,"max_depth":2,"max_duration":600,"max_requests":50,"max_tokens":null} true`,
			"empty":  `{"max_concurrent":null,"max_cost":null,"max_depth":null,"max_duration":null,"max_requests":null,"max_tokens":null} false`,
			"none":   `<NULL> false`,
		} {
			var v *string
			var required bool
			if err := raw.QueryRow(`SELECT run, run_required FROM tiers WHERE name = '`+name+`'`).Scan(&v, &required); err != nil {
				t.Fatal(err)
			}
			got := "<NULL>"
			if v != nil {
				got = *v
			}
			if got = fmt.Sprint(got, " ", required); got != column {
				t.Errorf("%s: columns run, run_required = %s, want %s", name, got, column)
			}
		}

		log, err := s.TierChanges(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range log {
			if w := want[c.Tier]; !policy.SameLimits(c.New, &w) {
				t.Errorf("audit log, %s: run %v required %v, want %v %v", c.Tier, c.New.Run, c.New.RunRequired, w.Run, w.RunRequired)
			}
		}

		// SkipUnchanged compares them in the write transaction.
		cheaper := *run
		cheaper.Set(policy.MaxRunCost.Field(), i64(1_000_000_000_000))
		changes, err := s.UpdateTiers(ctx, policy.TierUpdate{At: t0.Add(time.Minute), Source: policy.SourceImport, SkipUnchanged: true,
			Put: []policy.Tier{tier("agents", &cheaper, true), tier("empty", &policy.LimitSet{}, true), tier("none", nil, false)}})
		if err != nil {
			t.Fatal(err)
		}
		var changed []string
		for _, c := range changes {
			changed = append(changed, fmt.Sprintf("%s: %s", c.Tier, policy.TierDiff(c.Old, c.New)))
		}
		if got, want := changed, []string{"agents: [run.max_cost: $2.50 → $1.00]", "empty: [run.required: false → true]"}; !slices.Equal(got, want) {
			t.Errorf("import with SkipUnchanged changed %q, want %q", got, want)
		}

		// A recording check under the tier is confirmed against the
		// cache, run object and all, and admitted.
		svc := policy.NewService(s, s, policy.WithClock(func() time.Time { return t0.Add(2 * time.Minute) }))
		for i := range 3 {
			d, err := svc.Check(ctx, policy.Request{UserID: "agent", Tier: "agents"}, false)
			if err != nil || !d.Allowed() {
				t.Fatalf("check %d under a tier with a run object: %+v, %v", i, d, err)
			}
		}
		if got, _ := other.Tier(ctx, "agents"); *got.RunLimit(policy.MaxRunCost) != 1_000_000_000_000 {
			t.Errorf("another store reads max_cost %v after the change", got.RunLimit(policy.MaxRunCost))
		}
	})
}
