package policy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/policyguard/policyguard/policy"
)

func TestImportTiersChecksEverythingFirst(t *testing.T) {
	ctx := context.Background()
	team := policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(1)), policy.RequestsPerDay: new(int64(1))}}
	for _, tc := range []struct {
		name  string
		tiers []policy.Tier
		prune bool
		code  string
		msg   string
	}{
		{"invalid tier after a valid one", []policy.Tier{team, {Name: "bad", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(-1))}}}, false, policy.EINVALID, `tier 2 ("bad"): requests_per_minute must be`},
		{"listed twice", []policy.Tier{team, team}, false, policy.EINVALID, `tier "team" is listed twice`},
		{"prune without the default tier", []policy.Tier{team}, true, policy.ECONFLICT, `tier "free" is the default tier`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc, st, _ := newService(t)
			_, err := svc.ImportTiers(ctx, tc.tiers, tc.prune)
			if policy.ErrorCode(err) != tc.code || !strings.Contains(policy.ErrorMessage(err), tc.msg) {
				t.Fatalf("err = %v (%s), want %s containing %q", err, policy.ErrorCode(err), tc.code, tc.msg)
			}
			if _, err := st.Tier(ctx, "team"); policy.ErrorCode(err) != policy.ENOTFOUND {
				t.Errorf("team was stored by a refused import")
			}
			if log, _ := st.TierChanges(ctx, 10); len(log) != 0 {
				t.Errorf("refused import logged %d changes", len(log))
			}
		})
	}
}

func TestImportTiersPrunesAndRecordsSource(t *testing.T) {
	ctx := context.Background()
	svc, st, _ := newService(t, policy.WithDefaultTier("pro"))
	pro, _ := st.Tier(ctx, "pro")
	team := policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(1)), policy.RequestsPerDay: new(int64(1))}}
	changes, err := svc.ImportTiers(policy.WithChangeSource(ctx, policy.SourceAPI), []policy.Tier{pro, team}, true)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range changes {
		got = append(got, fmt.Sprintf("%s %s created=%v deleted=%v at=%v", c.Source, c.Tier, c.Created(), c.Deleted(), c.At.Equal(t0)))
	}
	want := "[import team created=true deleted=false at=true import free created=false deleted=true at=true]"
	if fmt.Sprint(got) != want {
		t.Fatalf("changes\n%v\nwant\n%s", got, want)
	}
}

func TestTierEditsCarryTheirSource(t *testing.T) {
	ctx := context.Background()
	svc, _, _ := newService(t)
	team := policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(1)), policy.RequestsPerDay: new(int64(1))}}
	if _, _, err := svc.PutTier(policy.WithChangeSource(ctx, policy.SourceAdmin), team); err != nil {
		t.Fatal(err)
	}
	if err := svc.DeleteTier(ctx, "team"); err != nil {
		t.Fatal(err)
	}
	log, _ := svc.TierChanges(ctx, 10)
	if len(log) != 2 || log[0].Source != policy.SourceLibrary || !log[0].Deleted() || log[1].Source != policy.SourceAdmin || !log[1].Created() {
		t.Fatalf("log = %+v", log)
	}
}
