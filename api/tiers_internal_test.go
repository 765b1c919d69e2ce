package api

import (
	"strconv"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"

	"github.com/policyguard/policyguard/policy"
)

// The wire shape walks policy.LimitFields: every limit of a tier's own is
// a member of a tier, in the table's order after the name, every pooled
// limit of its account and every run limit of its run object; every
// request limit is a member of its shadow and of the shadow's account, and
// no other; and each reads back as it was written.
func TestTierWireWalksTheTable(t *testing.T) {
	var tier policy.Tier
	tier.Name = "t"
	tier.Shadow = &policy.RequestLimits{Account: &policy.LimitSet{}}
	tier.Account = &policy.LimitSet{}
	tier.Run, tier.RunRequired = &policy.LimitSet{}, true
	// runValue is the run limit of row i: 401 and on, within the row's
	// range (max_depth's is 1 to 64).
	runValue := func(f *policy.LimitField, i int) int { return int(min(int64(401+i), f.Max)) }
	for i := range policy.LimitFields {
		f := &policy.LimitFields[i]
		v := int64(i + 1)
		if f.In(policy.ScopeTier) {
			f.Set(&tier, &v)
		}
		if f.In(policy.ScopeAccount) {
			tier.Account.Set(f, new(200+v))
		}
		if f.In(policy.ScopeRun) {
			tier.Run.Set(f, new(int64(runValue(f, i))))
		}
		if f.InRequestLimits() {
			tier.Shadow.Limits.Set(f, new(100+v))
			tier.Shadow.Account.Set(f, new(300+v))
		}
	}
	b, err := json.Marshal(tierToJSON(tier))
	if err != nil {
		t.Fatal(err)
	}
	body := string(b)
	// wire is v, a value of f, as the wire writes it: a spend limit in
	// dollars, a decimal string.
	wire := func(f *policy.LimitField, v int) string {
		if f.Kind == policy.KindCost {
			return `"` + policy.Money(v).String() + `"`
		}
		return strconv.Itoa(v)
	}
	at := strings.Index(body, `"name":"t"`)
	for i := range policy.LimitFields {
		f := &policy.LimitFields[i]
		member := `"` + f.Name + `":` + wire(f, i+1) + `,`
		next := strings.Index(body, member)
		switch {
		case !f.In(policy.ScopeTier):
			if next >= 0 {
				t.Errorf("%s: %s, a run's limit, among the tier's own in %s", f.Name, member, body)
			}
		case next < at:
			t.Errorf("%s: %s missing or out of the table's order in %s", f.Name, member, body)
		default:
			at = next
		}
		for _, in := range []struct {
			obj  string
			v    int
			want bool
		}{{`"shadow":{`, 101 + i, f.InRequestLimits()}, {`"account":{`, 201 + i, f.In(policy.ScopeAccount)}, {`"run":{`, runValue(f, i), f.In(policy.ScopeRun)}} {
			obj := body[strings.Index(body, in.obj):]
			if got := strings.Contains(obj, `"`+f.Name+`":`+wire(f, in.v)); got != in.want {
				t.Errorf("%s: in %s %v, want %v: %s", f.Name, in.obj, got, in.want, body)
			}
		}
	}
	if !strings.HasSuffix(body, `,"required":true}}`) {
		t.Errorf("the run object's required: %s", body)
	}
	if !strings.Contains(body, `"account":{"requests_per_minute":301,`) {
		t.Errorf("the shadow's account: %s", body)
	}
	back, problems := readTier(b, "")
	if len(problems) > 0 || !policy.SameLimits(&back, &tier) {
		t.Errorf("read back %v, %v; want %v", back, problems, tier)
	}
}
