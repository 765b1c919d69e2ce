package db_test

import (
	"context"
	"database/sql"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// limitColumns are the columns of a limit each that tiers and users had
// up to version 18, in the order of policy.LimitFields then.
var limitColumns = []string{"requests_per_minute", "requests_per_hour", "requests_per_day", "burst_allowance",
	"tokens_per_minute", "tokens_per_hour", "tokens_per_day", "max_concurrent"}

// TestMigrationToLimitSetsKeepsEveryLimit builds a database of schema
// version 17, with tiers and user records as the store of a column per
// limit wrote them (a required limit overridden by its column being set,
// an optional one by its bit in overrides, set or removed), and opens it
// with the store: every tier keeps every limit, and every record every
// override, kept and removed limits told apart. A check of each user is
// decided under its record, which admit_batch confirms on PostgreSQL.
// Down to 17 the columns hold what they held, and up again the same.
func TestMigrationToLimitSetsKeepsEveryLimit(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		dsn := bk.newDSN(t)
		raw, p, bind := migratedTo(t, bk, dsn, 17)
		cols := strings.Join(limitColumns, ", ")
		marks := strings.TrimSuffix(strings.Repeat("?, ", len(limitColumns)), ", ")
		// A tier with every kind of limit, one optional limit unset.
		if _, err := raw.ExecContext(ctx, bind(`INSERT INTO tiers (name, `+cols+`, features, description, updated_at) VALUES (?, `+marks+`, '[]', 'metered', 1)`),
			"metered", 5, 50, 500, 2, 100, nil, 10000, 3); err != nil {
			t.Fatal(err)
		}
		type oldUser struct {
			id        string
			limits    [8]any // nil: NULL
			overrides int64
			want      policy.Overrides
		}
		users := []oldUser{
			{id: "plain"},
			// Required limits overridden, to a value and to 0.
			{id: "requests", limits: [8]any{7, nil, 700, 0}, want: policy.Overrides{
				policy.RequestsPerMinute: policy.To(7), policy.RequestsPerDay: policy.To(700), policy.BurstAllowance: policy.To(0)}},
			// Optional limits: set (bit 0), removed (bit 1, NULL), kept
			// (no bit, NULL), set to a large value (bit 3).
			{id: "tokens", limits: [8]any{nil, nil, nil, nil, 100, nil, nil, policy.MaxLimit}, overrides: 1 | 2 | 8, want: policy.Overrides{
				policy.TokensPerMinute: policy.To(100), policy.TokensPerHour: policy.Unlimited, policy.MaxConcurrent: policy.To(policy.MaxLimit)}},
			{id: "removed", limits: [8]any{nil, nil, nil, nil, nil, nil, nil, nil}, overrides: 4 | 8, want: policy.Overrides{
				policy.TokensPerDay: policy.Unlimited, policy.MaxConcurrent: policy.Unlimited}},
		}
		for _, u := range users {
			args := append(append([]any{u.id}, u.limits[:]...), u.overrides)
			if _, err := raw.ExecContext(ctx, bind(`INSERT INTO users (user_id, tier, `+cols+`, overrides, note, updated_at) VALUES (?, 'metered', `+marks+`, ?, 'n', 1)`), args...); err != nil {
				t.Fatal(err)
			}
		}
		// Every tier's columns as version 17 holds them: the seeded ones
		// and metered.
		oldTiers := func() map[string][8]sql.NullInt64 {
			t.Helper()
			rows, err := raw.QueryContext(ctx, `SELECT name, `+cols+` FROM tiers`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			m := map[string][8]sql.NullInt64{}
			for rows.Next() {
				var name string
				var v [8]sql.NullInt64
				args := []any{&name}
				for i := range v {
					args = append(args, &v[i])
				}
				if err := rows.Scan(args...); err != nil {
					t.Fatal(err)
				}
				m[name] = v
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return m
		}
		oldUsers := func() map[string][9]sql.NullInt64 {
			t.Helper()
			rows, err := raw.QueryContext(ctx, `SELECT user_id, `+cols+`, overrides FROM users`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			m := map[string][9]sql.NullInt64{}
			for rows.Next() {
				var id string
				var v [9]sql.NullInt64
				args := []any{&id}
				for i := range v {
					args = append(args, &v[i])
				}
				if err := rows.Scan(args...); err != nil {
					t.Fatal(err)
				}
				m[id] = v
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return m
		}
		tiers17, users17 := oldTiers(), oldUsers()
		if len(tiers17) < 2 || len(users17) != len(users) {
			t.Fatalf("version 17 holds %d tiers and %d users", len(tiers17), len(users17))
		}

		verify := func(when string) {
			t.Helper()
			s := openStore(t, dsn)
			defer s.Close()
			tiers, err := s.Tiers(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(tiers) != len(tiers17) {
				t.Errorf("%s: %d tiers, want %d", when, len(tiers), len(tiers17))
			}
			for _, tier := range tiers {
				old, ok := tiers17[tier.Name]
				if !ok {
					t.Errorf("%s: tier %q was not there", when, tier.Name)
					continue
				}
				for i, v := range old {
					f := &policy.LimitFields[i]
					got, set := f.Value(&tier)
					if set != v.Valid || got != v.Int64 {
						t.Errorf("%s: tier %q %s = %d (set %v), want %v", when, tier.Name, f.Name, got, set, v)
					}
				}
			}
			svc := policy.NewService(s, s, policy.WithUsers(s), policy.WithClock(func() time.Time { return t0 }))
			for _, u := range users {
				r, err := s.User(ctx, u.id)
				if err != nil {
					t.Fatal(err)
				}
				if !r.Limits.Equal(&u.want) || r.Tier != "metered" || r.Note != "n" {
					t.Errorf("%s: %s's record is %+v with overrides %v, want tier metered, note n and %v", when, u.id, r, r.Limits.Values(), u.want.Values())
				}
				// The checked tier is metered with the record's
				// overrides: the minute's ceiling says which.
				d, err := svc.Check(ctx, policy.Request{UserID: u.id}, false)
				if err != nil || !d.Allowed() {
					t.Fatalf("%s: check of %s: %+v, %v", when, u.id, d, err)
				}
				tier := policy.Tier{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(5)), policy.BurstAllowance: new(int64(2))}}.WithOverrides(u.want)
				if got, want := d.Windows[policy.Minute].Limit, tier.Limits.Value(policy.RequestsPerMinute)+tier.Limits.Value(policy.BurstAllowance); got != want {
					t.Errorf("%s: %s checked under a minute limit of %d, want %d", when, u.id, got, want)
				}
			}
		}
		if _, err := p.Up(ctx); err != nil {
			t.Fatal(err)
		}
		verify("after the migration")

		// Down to 17: the columns as they were, the bits included.
		if _, err := p.DownTo(ctx, 17); err != nil {
			t.Fatal(err)
		}
		if got := oldTiers(); !maps.Equal(got, tiers17) {
			t.Errorf("down to 17: tiers %v, want %v", got, tiers17)
		}
		if got := oldUsers(); !maps.Equal(got, users17) {
			t.Errorf("down to 17: users %v, want %v", got, users17)
		}
		if _, err := p.Up(ctx); err != nil {
			t.Fatal(err)
		}
		verify("up again")
	})
}
