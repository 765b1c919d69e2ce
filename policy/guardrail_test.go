package policy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// recorder is a guardrail that logs its calls and answers as told.
type recorder struct {
	name     string
	priority int
	outcome  policy.Outcome
	calls    *[]string
}

func (r recorder) Name() string  { return r.name }
func (r recorder) Priority() int { return r.priority }
func (r recorder) Check(context.Context, *policy.Check) (policy.Decision, error) {
	*r.calls = append(*r.calls, r.name)
	if r.outcome != policy.Admitted {
		return policy.Decision{Outcome: r.outcome, Reason: r.name + " says no"}, nil
	}
	return policy.Decision{Outcome: policy.Admitted}, nil
}

func TestChainRunsByPriorityAndStopsAtFirstRefusal(t *testing.T) {
	var calls []string
	ch := policy.NewChain(
		recorder{"late", 9, policy.Admitted, &calls},
		recorder{"refuser", 3, policy.Denied, &calls},
		recorder{"early", 1, policy.Admitted, &calls},
		recorder{"early-too", 1, policy.Admitted, &calls},
	)
	d, err := ch.Check(context.Background(), &policy.Check{Tier: &policy.Tier{Name: "free"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(calls, ","), "early,early-too,refuser"; got != want {
		t.Fatalf("calls = %s, want %s", got, want)
	}
	if d.Allowed() || d.Guardrail != "refuser" || d.Reason != "refuser says no" || d.Tier != "free" {
		t.Fatalf("decision = %+v", d)
	}
}

func TestChainAdmitsWhenAllAdmit(t *testing.T) {
	var calls []string
	ch := policy.NewChain(recorder{"a", 1, policy.Admitted, &calls}, recorder{"b", 2, policy.Admitted, &calls})
	d, err := ch.Check(context.Background(), &policy.Check{Tier: &policy.Tier{Name: "pro"}})
	if err != nil || !d.Allowed() || d.Guardrail != "b" || d.Reason != "" {
		t.Fatalf("decision = %+v, err = %v", d, err)
	}
}

type failing struct{}

func (failing) Name() string  { return "failing" }
func (failing) Priority() int { return 0 }
func (failing) Check(context.Context, *policy.Check) (policy.Decision, error) {
	return policy.Decision{}, errors.New("boom")
}

func TestChainErrorIsNotARefusal(t *testing.T) {
	_, err := policy.NewChain(failing{}).Check(context.Background(), &policy.Check{Tier: &policy.Tier{}})
	if err == nil {
		t.Fatal("want the guardrail's error")
	}
}

var (
	free = policy.Tier{Name: "free", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(2)), policy.RequestsPerHour: new(int64(10)), policy.RequestsPerDay: new(int64(100))}, Features: []string{"chat"}}
	pro  = policy.Tier{Name: "pro", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(5)), policy.RequestsPerHour: new(int64(100)), policy.RequestsPerDay: new(int64(1000)), policy.BurstAllowance: new(int64(1))}, Features: []string{"*"}}
)

func newService(t *testing.T, opts ...policy.Option) (*policy.Service, *memStore, *policy.TestClock) {
	t.Helper()
	st := newMemStore(free, pro)
	clk := policy.NewTestClock(t0)
	return policy.NewService(st, st, append([]policy.Option{policy.WithClock(clk.Now)}, opts...)...), st, clk
}

func TestServiceDefaults(t *testing.T) {
	svc, st, _ := newService(t)
	ctx := context.Background()
	d, err := svc.Check(ctx, policy.Request{}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allowed() || d.Tier != "free" {
		t.Fatalf("decision = %+v, want admitted under free", d)
	}
	if st.count(policy.AnonymousUser) != 1 {
		t.Fatalf("anonymous has %d requests, want 1", st.count(policy.AnonymousUser))
	}

	svc, _, _ = newService(t, policy.WithDefaultTier("pro"))
	if d, _ := svc.Check(ctx, policy.Request{UserID: "u"}, false); d.Tier != "pro" {
		t.Fatalf("tier = %q, want the configured default pro", d.Tier)
	}
}

func TestServiceUnknownTierIsAnError(t *testing.T) {
	svc, st, _ := newService(t)
	_, err := svc.Check(context.Background(), policy.Request{UserID: "u", Tier: "gold"}, false)
	if policy.ErrorCode(err) != policy.EINVALID || !strings.Contains(err.Error(), `"gold"`) {
		t.Fatalf("err = %v, want EINVALID naming the tier", err)
	}
	if st.count("u") != 0 {
		t.Fatal("an unknown tier consumed quota")
	}
}

func TestServiceFeatureOutsidePlanConsumesNoQuota(t *testing.T) {
	svc, st, _ := newService(t)
	ctx := context.Background()
	d, err := svc.Check(ctx, policy.Request{UserID: "u", Feature: "search"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if d.Outcome != policy.Denied || d.Guardrail != "tier_access" ||
		d.Reason != `feature "search" is not included in tier "free"` {
		t.Fatalf("decision = %+v", d)
	}
	if st.count("u") != 0 {
		t.Fatal("a denied request consumed quota")
	}
	if d.Windows == nil || d.Windows[policy.Minute].Remaining != 2 {
		t.Fatalf("windows = %+v, want the untouched state", d.Windows)
	}
	// Included features and "*" pass.
	for _, r := range []policy.Request{{UserID: "u", Feature: "chat"}, {UserID: "v", Tier: "pro", Feature: "search"}} {
		if d, _ := svc.Check(ctx, r, false); !d.Allowed() {
			t.Fatalf("%+v refused: %+v", r, d)
		}
	}
}

func TestServiceRateLimitAndRetry(t *testing.T) {
	svc, _, clk := newService(t)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if d, _ := svc.Check(ctx, policy.Request{UserID: "u"}, false); !d.Allowed() {
			t.Fatalf("check %d refused", i)
		}
		clk.Advance(time.Second)
	}
	d, _ := svc.Check(ctx, policy.Request{UserID: "u"}, false)
	if d.Outcome != policy.RateLimited || d.RetryAfter != 58 || d.Guardrail != "rate_limiter" {
		t.Fatalf("decision = %+v, want rate limited for 58s", d)
	}
	clk.Advance(time.Duration(d.RetryAfter) * time.Second)
	if d, _ := svc.Check(ctx, policy.Request{UserID: "u"}, false); !d.Allowed() {
		t.Fatalf("refused after retry_after: %+v", d)
	}
}

func TestServiceDryRunRecordsNothing(t *testing.T) {
	svc, st, _ := newService(t)
	d, err := svc.Check(context.Background(), policy.Request{UserID: "u"}, true)
	if err != nil || !d.Allowed() || d.Windows[policy.Minute].Remaining != 1 {
		t.Fatalf("dry run = %+v, %v", d, err)
	}
	if st.count("u") != 0 {
		t.Fatal("dry run recorded a request")
	}
}

func TestServiceUserIDTooLong(t *testing.T) {
	svc, _, _ := newService(t)
	_, err := svc.Check(context.Background(), policy.Request{UserID: strings.Repeat("x", 257)}, false)
	if policy.ErrorCode(err) != policy.EINVALID {
		t.Fatalf("err = %v, want EINVALID", err)
	}
	if _, err := svc.Check(context.Background(), policy.Request{UserID: strings.Repeat("x", 256)}, false); err != nil {
		t.Fatalf("256 bytes refused: %v", err)
	}
}

func TestServiceConcurrentChecksNeverOverAdmit(t *testing.T) {
	svc, st, _ := newService(t)
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := svc.Check(context.Background(), policy.Request{UserID: "u", Tier: "pro"}, false); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got, want := st.count("u"), 6; got != want { // 5/min + burst 1
		t.Fatalf("admitted %d, want %d", got, want)
	}
}

func TestServiceTierEdits(t *testing.T) {
	svc, _, _ := newService(t)
	ctx := context.Background()
	if err := svc.DeleteTier(ctx, "free"); policy.ErrorCode(err) != policy.ECONFLICT {
		t.Fatalf("deleting the default tier: err = %v, want ECONFLICT", err)
	}
	bad := policy.Tier{Name: "Bad Name"}
	if _, _, err := svc.PutTier(ctx, bad); policy.ErrorCode(err) != policy.EINVALID {
		t.Fatalf("invalid tier: err = %v", err)
	}
	tier, created, err := svc.PutTier(ctx, policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(1)), policy.RequestsPerDay: new(int64(1))}})
	if err != nil || !created || !tier.UpdatedAt.Equal(t0) || tier.Features == nil {
		t.Fatalf("put = %+v, %v, %v", tier, created, err)
	}
	// The edit applies to the very next check.
	if d, _ := svc.Check(ctx, policy.Request{UserID: "w", Tier: "team"}, false); !d.Allowed() {
		t.Fatal("first check refused")
	}
	if d, _ := svc.Check(ctx, policy.Request{UserID: "w", Tier: "team"}, false); d.Allowed() {
		t.Fatal("second check admitted past 1/min")
	}
}

// CreateTier and ReplaceTier ask the store for their preconditions, which
// it checks in the same transaction as the write.
func TestServiceCreateAndReplaceAskForPreconditions(t *testing.T) {
	svc, st, clk := newService(t)
	ctx := context.Background()
	team := policy.Tier{Name: "team", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(10)), policy.RequestsPerDay: new(int64(10))}}
	if _, err := svc.CreateTier(ctx, policy.Tier{Name: "Bad Name"}); policy.ErrorCode(err) != policy.EINVALID {
		t.Fatalf("invalid tier: err = %v", err)
	}
	created, err := svc.CreateTier(ctx, team)
	if err != nil || !created.UpdatedAt.Equal(t0) {
		t.Fatalf("create = %+v, %v", created, err)
	}
	clk.Advance(time.Second)
	team.Limits[policy.RequestsPerMinute] = new(int64(2))
	replaced, err := svc.ReplaceTier(ctx, team, created.UpdatedAt)
	if err != nil || !replaced.UpdatedAt.Equal(t0.Add(time.Second)) || replaced.Limits.Value(policy.RequestsPerMinute) != 2 {
		t.Fatalf("replace = %+v, %v", replaced, err)
	}
	if _, _, err := svc.PutTier(ctx, team); err != nil {
		t.Fatal(err)
	}
	if len(st.updates) != 3 {
		t.Fatalf("%d updates reached the store, want 3 (an invalid tier must not)", len(st.updates))
	}
	if u := st.updates[0]; u.Mode != policy.PutCreate || u.IfUpdatedAt != nil {
		t.Errorf("CreateTier asked for mode %v, IfUpdatedAt %v; want PutCreate and none", u.Mode, u.IfUpdatedAt)
	}
	if u := st.updates[1]; u.Mode != policy.PutReplace || u.IfUpdatedAt == nil || !u.IfUpdatedAt.Equal(t0) {
		t.Errorf("ReplaceTier asked for mode %v, IfUpdatedAt %v; want PutReplace and %v", u.Mode, u.IfUpdatedAt, t0)
	}
	if u := st.updates[2]; u.Mode != policy.PutAny || u.IfUpdatedAt != nil {
		t.Errorf("PutTier asked for mode %v, IfUpdatedAt %v; want PutAny and none", u.Mode, u.IfUpdatedAt)
	}
}

func TestTierValidation(t *testing.T) {
	ok := policy.Tier{Name: "a", Features: []string{"*", "chat", "x.y:z-1"}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid tier: %v", err)
	}
	for _, tc := range []struct {
		tier  policy.Tier
		field string
	}{
		{policy.Tier{Name: ""}, "name"},
		{policy.Tier{Name: "-a"}, "name"},
		{policy.Tier{Name: "A"}, "name"},
		{policy.Tier{Name: strings.Repeat("a", 64)}, "name"},
		{policy.Tier{Name: "a", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(-1))}}, "requests_per_minute"},
		{policy.Tier{Name: "a", Limits: policy.LimitSet{policy.RequestsPerHour: new(int64(policy.MaxLimit + 1))}}, "requests_per_hour"},
		{policy.Tier{Name: "a", Limits: policy.LimitSet{policy.RequestsPerDay: new(int64(-5))}}, "requests_per_day"},
		{policy.Tier{Name: "a", Limits: policy.LimitSet{policy.BurstAllowance: new(int64(-1))}}, "burst_allowance"},
		{policy.Tier{Name: "a", Features: []string{""}}, "features"},
		{policy.Tier{Name: "a", Features: []string{"chat", "chat"}}, "features"},
		{policy.Tier{Name: "a", Description: strings.Repeat("d", 1025)}, "description"},
		{policy.Tier{Name: "a", Description: "\xff"}, "description"},
	} {
		errs := tc.tier.ValidateFields()
		if len(errs) != 1 || errs[0].Field != tc.field {
			t.Errorf("%+v: errors %v, want one on %s", tc.tier, errs, tc.field)
		}
		if err := tc.tier.Validate(); policy.ErrorCode(err) != policy.EINVALID {
			t.Errorf("%+v: Validate = %v", tc.tier, err)
		}
	}
	if p := (&policy.Tier{Name: "a", Features: []string{"a\"b"}}).ValidateFields(); len(p) != 1 || !strings.Contains(p[0].Message, `"a\"b"`) {
		t.Errorf("feature message does not quote the feature: %v", p)
	}
}

func ExampleNewChain() {
	var calls []string
	ch := policy.NewChain(
		recorder{"rate_limiter", 5, policy.Admitted, &calls},
		recorder{"content_filter", 3, policy.Denied, &calls},
	)
	d, _ := ch.Check(context.Background(), &policy.Check{Tier: &policy.Tier{Name: "free"}})
	fmt.Println(calls, d.Guardrail, d.Allowed())
	// Output: [content_filter] content_filter false
}
