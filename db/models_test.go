package db_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// A tier's models are kept as given: NULL for any model, an empty array
// for none, else the names in order; the cache, a second store reading the
// table, the audit log and the writer's own reading of the tiers all tell
// the three apart.
func TestTierModelsRoundTrip(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		dsn := bk.newDSN(t)
		s := openStore(t, dsn)
		ctx := context.Background()
		for _, name := range []string{"enterprise", "free", "pro"} {
			if tr, err := s.Tier(ctx, name); err != nil || tr.Models != nil {
				t.Fatalf("seeded %s: models %q, %v; want nil (any model)", name, tr.Models, err)
			}
		}
		tier := func(name string, models []string) policy.Tier {
			return policy.Tier{Name: name, Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(1)), policy.RequestsPerDay: new(int64(1))}, Models: models}
		}
		want := map[string][]string{"anymodel": nil, "nomodel": {}, "some": {"o3", "gpt-4o-mini*", "*"}}
		var put []policy.Tier
		for _, name := range []string{"anymodel", "nomodel", "some"} {
			put = append(put, tier(name, want[name]))
		}
		if _, err := s.UpdateTiers(ctx, policy.TierUpdate{At: t0, Source: policy.SourceAPI, Put: put}); err != nil {
			t.Fatal(err)
		}
		same := func(got, want []string) bool {
			return (got == nil) == (want == nil) && fmt.Sprint(got) == fmt.Sprint(want)
		}
		other := openStore(t, dsn)
		for name, models := range want {
			for which, st := range map[string]interface {
				Tier(context.Context, string) (policy.Tier, error)
			}{"this store": s, "another store": other} {
				got, err := st.Tier(ctx, name)
				if err != nil || !same(got.Models, models) {
					t.Errorf("%s, %s: models %#v, %v; want %#v", which, name, got.Models, err, models)
				}
			}
		}

		raw, err := bk.raw(dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		for name, column := range map[string]string{"anymodel": "<NULL>", "nomodel": "[]", "some": `["o3","gpt-4o-mini*","*"]`} {
			var v *string
			if err := raw.QueryRow(`SELECT models FROM tiers WHERE name = '` + name + `'`).Scan(&v); err != nil {
				t.Fatal(err)
			}
			if got := "<NULL>"; v != nil {
				got = *v
				if got != column {
					t.Errorf("%s: column models = %s, want %s", name, got, column)
				}
			} else if column != "<NULL>" {
				t.Errorf("%s: column models = NULL, want %s", name, column)
			}
		}

		log, err := s.TierChanges(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range log {
			if !same(c.New.Models, want[c.Tier]) {
				t.Errorf("audit log, %s: models %#v, want %#v", c.Tier, c.New.Models, want[c.Tier])
			}
		}

		// The comparison of SkipUnchanged reads the tiers in the write
		// transaction: the same models are no change, nil for [] is one.
		changes, err := s.UpdateTiers(ctx, policy.TierUpdate{At: t0.Add(time.Minute), Source: policy.SourceImport, SkipUnchanged: true,
			Put: []policy.Tier{tier("some", []string{"o3", "gpt-4o-mini*", "*"}), tier("nomodel", nil), tier("anymodel", []string{})}})
		if err != nil {
			t.Fatal(err)
		}
		var changed []string
		for _, c := range changes {
			changed = append(changed, fmt.Sprintf("%s: %s", c.Tier, policy.TierDiff(c.Old, c.New)))
		}
		if got, want := fmt.Sprint(changed), "[nomodel: [models: none → any] anymodel: [models: any → none]]"; got != want {
			t.Errorf("import with SkipUnchanged changed %s, want %s", got, want)
		}
	})
}

// A change of models made without this program is seen by the next read
// and by the writer's confirmation of a check's tier (policy.CurrentTiers),
// which reads the tiers inside its transaction; the column takes only
// NULL or a JSON array.
func TestTierModelsEditedWithPlainSQL(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		dsn := bk.newDSN(t)
		s := openStore(t, dsn)
		ctx := context.Background()
		if _, err := s.Tier(ctx, "pro"); err != nil { // the cache holds pro, with any model
			t.Fatal(err)
		}
		raw, err := bk.raw(dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		if _, err := raw.Exec(`UPDATE tiers SET models = '["claude-*"]' WHERE name = 'pro'`); err != nil {
			t.Fatal(err)
		}
		var current *policy.Tier
		err = s.Admit(ctx, "u", func(h policy.History) (policy.Admission, error) {
			ct, ok := h.(policy.CurrentTiers)
			if !ok {
				return policy.Admission{}, fmt.Errorf("the writer's history does not confirm tiers")
			}
			tr, found, err := ct.CurrentTier("pro")
			if found {
				current = tr
			}
			return policy.Admission{}, err
		})
		if err != nil {
			t.Fatal(err)
		}
		if current == nil || fmt.Sprint(current.Models) != "[claude-*]" {
			t.Fatalf("writer's current tier: %+v, want models [claude-*]", current)
		}
		if got, err := s.Tier(ctx, "pro"); err != nil || fmt.Sprint(got.Models) != "[claude-*]" {
			t.Fatalf("after the shell's UPDATE: models %q, %v; want [claude-*]", got.Models, err)
		}
		for _, bad := range []string{`'{"a": 1}'`, `'"gpt-4o"'`, `'not json'`} {
			if _, err := raw.Exec(`UPDATE tiers SET models = ` + bad + ` WHERE name = 'pro'`); err == nil {
				t.Errorf("the column took %s", bad)
			}
		}
	})
}
