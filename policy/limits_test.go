package policy_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// The table describes every limit of the domain types, each once: a
// field of Tier, Limits or RequestLimits that no row reaches is a limit a
// surface would silently leave out.
func TestLimitFieldsCoverTheDomainTypes(t *testing.T) {
	seen := map[string]bool{}
	var tierNames []string
	for i := range policy.LimitFields {
		f := &policy.LimitFields[i]
		if seen[f.Name] || f.Label == "" || !f.In(policy.ScopeTier|policy.ScopeAccount|policy.ScopeRun) {
			t.Errorf("row %d: name %q, label %q, scopes %b: want a unique name, a label and a scope", i, f.Name, f.Label, f.Scopes)
		}
		if f.In(policy.ScopeTier) {
			tierNames = append(tierNames, f.Name)
		}
		seen[f.Name] = true
		if g, ok := policy.LimitFieldNamed(f.Name); !ok || g != f {
			t.Errorf("LimitFieldNamed(%q) = %v, %v", f.Name, g, ok)
		}
		if f.In(policy.ScopeTier) && f.Optional == f.InRequestLimits() {
			t.Errorf("%s: optional %v, in RequestLimits %v: a request limit is required, a metering limit optional", f.Name, f.Optional, f.InRequestLimits())
		}
	}
	if !slices.Equal(tierNames, policy.LimitNames) {
		t.Errorf("LimitNames = %v, want the rows in ScopeTier, %v", policy.LimitNames, tierNames)
	}
	if _, ok := policy.LimitFieldNamed("rpm"); ok {
		t.Error(`LimitFieldNamed("rpm") found a limit`)
	}

	// Set each limit to a value of its own and see which entry of each
	// set it reached.
	reached := func(set []*int64) map[int]int64 {
		out := map[int]int64{}
		for i, p := range set {
			if p != nil {
				out[i] = *p
			}
		}
		return out
	}
	for i := range policy.LimitFields {
		f := &policy.LimitFields[i]
		v := int64(1000 + i)
		if f.ID() != policy.LimitID(i) || f.ID().Field() != f {
			t.Errorf("row %d: ID %d", i, f.ID())
		}
		if !f.In(policy.ScopeTier) {
			continue // a run's limit: see TestRunLimitsAreRowsOfTheTable
		}

		var tier policy.Tier
		f.Set(&tier, &v)
		got := reached(tier.Limits[:])
		if len(got) != 1 || got[i] != v {
			t.Fatalf("%s: Set reached %v, want entry %d of Tier.Limits", f.Name, got, i)
		}
		if x, ok := f.Value(&tier); !ok || x != v || *f.Get(&tier) != v {
			t.Errorf("%s: Value %d, %v after Set %d", f.Name, x, ok, v)
		}
		if f.Set(&tier, nil); f.Optional != (f.Get(&tier) == nil) {
			t.Errorf("%s: Set(nil) leaves %v; optional %v", f.Name, f.Get(&tier), f.Optional)
		}

		var l policy.Overrides
		l.Set(f, policy.To(v))
		for j, o := range l {
			if o.Set != (j == i) {
				t.Fatalf("%s: Overrides.Set reached entry %d", f.Name, j)
			}
		}
		if o := l.Get(f); !o.Set || *o.Limit != v {
			t.Errorf("%s: Override %+v after Set %d", f.Name, o, v)
		}
		if back, err := policy.LimitsOf(l.Values()); err != nil || !back.Equal(&l) {
			t.Errorf("%s: LimitsOf(Values()) = %+v, %v", f.Name, back, err)
		}
		if applied := (policy.Tier{}).WithOverrides(l); f.Get(&applied) == nil || *f.Get(&applied) != v {
			t.Errorf("%s: WithOverrides did not apply the override", f.Name)
		}
		a, b := policy.Tier{}, policy.Tier{}
		if f.Set(&b, &v); policy.SameLimits(&a, &b) {
			t.Errorf("%s: SameLimits does not compare it", f.Name)
		}

		if f.InRequestLimits() {
			var rl policy.RequestLimits
			rl.Limits.Set(f, &v)
			withShadow := (&policy.Tier{}).WithLimits(rl)
			if got := reached(withShadow.Limits[:]); len(got) != 1 || *f.Get(&withShadow) != v {
				t.Errorf("%s: RequestLimits reached %v, and WithLimits gave %v", f.Name, got, f.Get(&withShadow))
			}
			for _, e := range (&policy.Tier{Name: "t", Shadow: &rl}).ValidateFields() {
				if strings.Contains(e.Message, "cannot be set") {
					t.Errorf("%s: a shadow limit: %v", f.Name, e)
				}
			}
		} else {
			var rl policy.RequestLimits
			rl.Limits.Set(f, &v)
			if errs := (&policy.Tier{Name: "t", Shadow: &rl}).ValidateFields(); len(errs) != 1 || errs[0].Field != "shadow."+f.Name {
				t.Errorf("%s: shadow limits may not hold it: %v", f.Name, errs)
			}
		}
	}
	// No limit lives outside the sets: a field of a domain type that holds
	// a limit value the table does not reach is a limit a surface would
	// silently leave out.
	for _, typ := range []reflect.Type{reflect.TypeFor[policy.Tier](), reflect.TypeFor[policy.RequestLimits]()} {
		for i := range typ.NumField() {
			switch ft := typ.Field(i).Type; {
			case typ.Field(i).Name == "ID":
			case ft == reflect.TypeFor[int64](), ft == reflect.TypeFor[*int64](), ft == reflect.TypeFor[policy.Override]():
				t.Errorf("%s.%s holds a limit outside the table", typ, typ.Field(i).Name)
			}
		}
	}
}

// Within a kind the windows run from the shortest: the order in which
// limits are compared, and the order the API lists them in.
func TestLimitFieldsWindowsInOrder(t *testing.T) {
	last := map[policy.LimitKind]policy.Window{}
	for _, f := range policy.LimitFields {
		if !f.Windowed {
			continue
		}
		if w, ok := last[f.Kind]; ok && f.Window <= w {
			t.Errorf("%s: window %s after %s", f.Name, f.Window, w)
		}
		last[f.Kind] = f.Window
		if f.Kind == policy.KindTokens {
			if limit, ok := (&policy.Tier{}).TokenLimit(f.Window); ok || limit != 0 {
				t.Errorf("TokenLimit(%s) of a tier without token limits: %d, %v", f.Window, limit, ok)
			}
			v := int64(7)
			var tier policy.Tier
			f.Set(&tier, &v)
			if limit, ok := tier.TokenLimit(f.Window); !ok || limit != 7 || !tier.Metered() {
				t.Errorf("%s: TokenLimit %d, %v, metered %v", f.Name, limit, ok, tier.Metered())
			}
		}
	}
}

// A tier whose limits cannot all bind is refused, naming both fields and
// the window that would refuse first: within the requests and within the
// tokens, each set limit against the nearest shorter one set, in shadow
// limits too. Equal limits bind; the burst is not part of the minute's
// limit here.
func TestTierLimitsMustBind(t *testing.T) {
	base := policy.Tier{Name: "t", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(10)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(1000))}}
	for _, tc := range []struct {
		name   string
		change func(*policy.Tier)
		want   []policy.FieldError
	}{
		{"seeded free", func(t *policy.Tier) {
			t.Limits[policy.RequestsPerMinute] = new(int64(10))
			t.Limits[policy.RequestsPerHour] = new(int64(100))
			t.Limits[policy.RequestsPerDay] = new(int64(1000))
		}, nil},
		{"seeded pro", func(t *policy.Tier) {
			t.Limits[policy.RequestsPerMinute] = new(int64(60))
			t.Limits[policy.RequestsPerHour] = new(int64(2000))
			t.Limits[policy.RequestsPerDay] = new(int64(20000))
		}, nil},
		{"seeded enterprise", func(t *policy.Tier) {
			t.Limits[policy.RequestsPerMinute] = new(int64(600))
			t.Limits[policy.RequestsPerHour] = new(int64(30000))
			t.Limits[policy.RequestsPerDay] = new(int64(500000))
		}, nil},
		{"all equal", func(t *policy.Tier) {
			t.Limits[policy.RequestsPerMinute] = new(int64(5))
			t.Limits[policy.RequestsPerHour] = new(int64(5))
			t.Limits[policy.RequestsPerDay] = new(int64(5))
		}, nil},
		{"all zero", func(t *policy.Tier) {
			t.Limits[policy.RequestsPerMinute] = new(int64(0))
			t.Limits[policy.RequestsPerHour] = new(int64(0))
			t.Limits[policy.RequestsPerDay] = new(int64(0))
		}, nil},
		{"a burst above the hour", func(t *policy.Tier) {
			t.Limits[policy.RequestsPerHour] = new(int64(10))
			t.Limits[policy.BurstAllowance] = new(int64(500))
		}, nil},
		{"hour below minute", func(t *policy.Tier) { t.Limits[policy.RequestsPerHour] = new(int64(9)) }, []policy.FieldError{
			{Field: "requests_per_hour", Message: "requests_per_hour (9) is below requests_per_minute (10): the hour would refuse first"}}},
		{"day below hour", func(t *policy.Tier) { t.Limits[policy.RequestsPerDay] = new(int64(5)) }, []policy.FieldError{
			{Field: "requests_per_day", Message: "requests_per_day (5) is below requests_per_hour (100): the day would refuse first"}}},
		{"both", func(t *policy.Tier) {
			t.Limits[policy.RequestsPerHour] = new(int64(3))
			t.Limits[policy.RequestsPerDay] = new(int64(2))
		}, []policy.FieldError{
			{Field: "requests_per_hour", Message: "requests_per_hour (3) is below requests_per_minute (10): the hour would refuse first"},
			{Field: "requests_per_day", Message: "requests_per_day (2) is below requests_per_hour (3): the day would refuse first"}}},
		{"a value out of range is compared with none", func(t *policy.Tier) { t.Limits[policy.RequestsPerMinute] = new(int64(policy.MaxLimit + 1)) }, []policy.FieldError{
			{Field: "requests_per_minute", Message: "requests_per_minute must be an integer from 0 to 2147483647"}}},
		{"tokens in order", func(t *policy.Tier) {
			t.Limits[policy.TokensPerMinute] = i64(1)
			t.Limits[policy.TokensPerHour] = i64(1)
			t.Limits[policy.TokensPerDay] = i64(2)
		}, nil},
		{"tokens: hour below minute", func(t *policy.Tier) {
			t.Limits[policy.TokensPerMinute] = i64(1000)
			t.Limits[policy.TokensPerHour] = i64(999)
		}, []policy.FieldError{
			{Field: "tokens_per_hour", Message: "tokens_per_hour (999) is below tokens_per_minute (1000): the hour would refuse first"}}},
		{"tokens: day below minute, no hour", func(t *policy.Tier) {
			t.Limits[policy.TokensPerMinute] = i64(1000)
			t.Limits[policy.TokensPerDay] = i64(10)
		}, []policy.FieldError{
			{Field: "tokens_per_day", Message: "tokens_per_day (10) is below tokens_per_minute (1000): the day would refuse first"}}},
		{"tokens are not compared with requests", func(t *policy.Tier) { t.Limits[policy.TokensPerDay] = i64(1) }, nil},
		{"max_concurrent is compared with nothing", func(t *policy.Tier) { t.Limits[policy.MaxConcurrent] = i64(0) }, nil},
		{"shadow in order", func(t *policy.Tier) {
			t.Shadow = &policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(1)), policy.RequestsPerDay: new(int64(1))}}
		}, nil},
		{"shadow: day below hour", func(t *policy.Tier) {
			t.Shadow = &policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(10)), policy.RequestsPerDay: new(int64(5))}}
		}, []policy.FieldError{
			{Field: "shadow.requests_per_day", Message: "shadow.requests_per_day (5) is below shadow.requests_per_hour (10): the day would refuse first"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tier := base
			tc.change(&tier)
			got := tier.ValidateFields()
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ValidateFields = %q, want %q", got, tc.want)
			}
			err := tier.Validate()
			if len(tc.want) == 0 && err != nil || len(tc.want) > 0 && (policy.ErrorCode(err) != policy.EINVALID || policy.ErrorMessage(err) != tc.want[0].Message) {
				t.Fatalf("Validate = %v", err)
			}
		})
	}
}

// importer keeps records in memUsers and applies a tiers file's tiers and
// records to the fakes.
type importer struct {
	*memUsers
	tiers *memStore
}

func (s importer) Import(ctx context.Context, tu policy.TierUpdate, accounts []policy.Account, uu policy.UserUpdate) (policy.ImportChanges, error) {
	tc, err := s.tiers.UpdateTiers(ctx, tu)
	if err != nil {
		return policy.ImportChanges{}, err
	}
	uc, err := s.memUsers.UpdateUsers(ctx, uu)
	return policy.ImportChanges{Tiers: tc, Users: uc}, err
}

// A user record's limits are checked after merging with the tier it
// assigns, as stored or as listed beside it in an import; one that
// assigns none, among themselves. A tier edited later is checked on its
// own: records on it are checked when they are written.
func TestUserLimitsMustBindOnTheirTier(t *testing.T) {
	ctx := context.Background()
	// gold: 5/min (+1 burst), 50/hour, 500/day; tokens_per_day 1000.
	for _, tc := range []struct {
		name   string
		rec    policy.UserRecord
		field  string // "" when the record is accepted
		wantOn string
	}{
		{"overrides that bind", policy.UserRecord{UserID: "u", Tier: "gold", Limits: policy.Overrides{policy.RequestsPerHour: policy.To(5), policy.TokensPerMinute: policy.To(1000)}}, "", ""},
		{"hour below the tier's minute", policy.UserRecord{UserID: "u", Tier: "gold", Limits: policy.Overrides{policy.RequestsPerHour: policy.To(4)}},
			"requests_per_hour", "requests_per_hour (4) is below requests_per_minute (5): the hour would refuse first"},
		{"minute above the tier's hour names the minute", policy.UserRecord{UserID: "u", Tier: "gold", Limits: policy.Overrides{policy.RequestsPerMinute: policy.To(60)}},
			"requests_per_minute", "requests_per_hour (50) is below requests_per_minute (60): the hour would refuse first"},
		{"a burst is not the minute's limit", policy.UserRecord{UserID: "u", Tier: "gold", Limits: policy.Overrides{policy.BurstAllowance: policy.To(100)}}, "", ""},
		{"tokens above the tier's day", policy.UserRecord{UserID: "u", Tier: "gold", Limits: policy.Overrides{policy.TokensPerHour: policy.To(2000)}},
			"tokens_per_hour", "tokens_per_day (1000) is below tokens_per_hour (2000): the day would refuse first"},
		{"removing the tier's limit binds", policy.UserRecord{UserID: "u", Tier: "gold", Limits: policy.Overrides{policy.TokensPerDay: policy.Unlimited, policy.TokensPerHour: policy.To(2000)}}, "", ""},
		{"no tier: among themselves", policy.UserRecord{UserID: "u", Limits: policy.Overrides{policy.RequestsPerMinute: policy.To(10), policy.RequestsPerDay: policy.To(9)}},
			"requests_per_day", "requests_per_day (9) is below requests_per_minute (10): the day would refuse first"},
		{"no tier: one limit", policy.UserRecord{UserID: "u", Limits: policy.Overrides{policy.RequestsPerDay: policy.To(1)}}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tier *policy.Tier
			if tc.rec.Tier != "" {
				tier = &gold
			}
			got := tc.rec.Limits.ValidateOn(tier)
			if tc.field == "" && len(got) != 0 || tc.field != "" && (len(got) != 1 || got[0].Field != tc.field || got[0].Message != tc.wantOn) {
				t.Fatalf("ValidateOn = %q, want %s: %q", got, tc.field, tc.wantOn)
			}

			users := newMemUsers()
			s := &userStore{newMemStore(basic, gold), users}
			svc := policy.NewService(s, s, policy.WithUsers(users), policy.WithClock(func() time.Time { return t0 }))
			_, _, err := svc.PutUser(ctx, tc.rec)
			if tc.field == "" && err != nil || tc.field != "" && (policy.ErrorCode(err) != policy.EINVALID || policy.ErrorMessage(err) != tc.wantOn) {
				t.Fatalf("PutUser: %v, want %q", err, tc.wantOn)
			}
			if _, err := svc.User(ctx, "u"); tc.field != "" && policy.ErrorCode(err) != policy.ENOTFOUND {
				t.Fatalf("a refused record was stored: %v", err)
			}
		})
	}

	users := newMemUsers()
	s := &userStore{newMemStore(basic, gold), users}
	svc := policy.NewService(s, s, policy.WithUsers(importer{users, s.memStore}), policy.WithClock(func() time.Time { return t0 }))
	rec := policy.UserRecord{UserID: "u", Tier: "gold", Limits: policy.Overrides{policy.RequestsPerHour: policy.To(20)}}
	// The tier listed beside the record is the one it is checked on...
	faster := gold
	faster.Limits[policy.RequestsPerMinute] = new(int64(30))
	_, err := svc.Import(ctx, []policy.Tier{faster}, nil, []policy.UserRecord{rec}, false)
	if want := `user 1 ("u"): requests_per_hour (20) is below requests_per_minute (30): the hour would refuse first`; policy.ErrorMessage(err) != want {
		t.Fatalf("import on a faster gold: %v, want %q", err, want)
	}
	// ...and the stored one when the file does not list it.
	if _, err := svc.Import(ctx, []policy.Tier{basic}, nil, []policy.UserRecord{rec}, false); err != nil {
		t.Fatalf("import on the stored gold: %v", err)
	}
	// A later edit of the tier is checked on its own.
	if _, _, err := svc.PutTier(ctx, faster); err != nil {
		t.Fatalf("editing gold under a record: %v", err)
	}
	if _, _, err := svc.PutUser(ctx, rec); policy.ErrorCode(err) != policy.EINVALID || !strings.Contains(policy.ErrorMessage(err), "the hour would refuse first") {
		t.Fatalf("writing the record again: %v", err)
	}
}
