package policy_test

import (
	"context"
	"testing"

	"github.com/policyguard/policyguard/policy"
)

func TestShadowValidation(t *testing.T) {
	base := policy.Tier{Name: "s", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(1)), policy.RequestsPerDay: new(int64(1))}}
	for _, tc := range []struct {
		name   string
		shadow *policy.RequestLimits
		field  string // "" when valid
	}{
		{"none", nil, ""},
		{"zeros", &policy.RequestLimits{}, ""},
		{"max", &policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(policy.MaxLimit)), policy.RequestsPerHour: new(int64(policy.MaxLimit)), policy.RequestsPerDay: new(int64(policy.MaxLimit)), policy.BurstAllowance: new(int64(policy.MaxLimit))}}, ""},
		{"minute negative", &policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(-1))}}, "shadow.requests_per_minute"},
		{"hour too big", &policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerHour: new(int64(policy.MaxLimit + 1))}}, "shadow.requests_per_hour"},
		{"day negative", &policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerDay: new(int64(-5))}}, "shadow.requests_per_day"},
		{"burst too big", &policy.RequestLimits{Limits: policy.LimitSet{policy.BurstAllowance: new(int64(policy.MaxLimit + 1))}}, "shadow.burst_allowance"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tier := base
			tier.Shadow = tc.shadow
			errs := tier.ValidateFields()
			if tc.field == "" {
				if len(errs) != 0 {
					t.Fatalf("ValidateFields = %v, want none", errs)
				}
				return
			}
			if len(errs) != 1 || errs[0].Field != tc.field || errs[0].Message != tc.field+" must be an integer from 0 to 2147483647" {
				t.Fatalf("ValidateFields = %v, want one problem of %s", errs, tc.field)
			}
			if err := tier.Validate(); policy.ErrorCode(err) != policy.EINVALID {
				t.Fatalf("Validate = %v, want EINVALID", err)
			}
		})
	}
}

// shadowed has room for many requests and shadow limits of two a minute.
var shadowed = policy.Tier{Name: "shadowed", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(100)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(10000))}, Features: []string{"chat"}, Shadow: &policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(2)), policy.RequestsPerHour: new(int64(1000)), policy.RequestsPerDay: new(int64(10000))}}}

func TestShadowNeverRefuses(t *testing.T) {
	st := newMemStore(shadowed, free)
	clk := policy.NewTestClock(t0)
	svc := policy.NewService(st, st, policy.WithClock(clk.Now))
	ctx := context.Background()
	for i, want := range []struct {
		allowed bool
		reason  string
	}{{true, ""}, {true, ""}, {false, "per-minute limit exceeded"}, {false, "per-minute limit exceeded"}} {
		d, err := svc.Check(ctx, policy.Request{UserID: "u", Tier: "shadowed"}, false)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed() {
			t.Fatalf("check %d refused (%s): shadow limits must never refuse", i, d.Reason)
		}
		if d.Shadow == nil || d.Shadow.Allowed != want.allowed || d.Shadow.Reason() != want.reason {
			t.Fatalf("check %d: shadow = %+v, want allowed=%v reason %q", i, d.Shadow, want.allowed, want.reason)
		}
		clk.Advance(ms)
	}
	if got := st.count("u"); got != 4 {
		t.Fatalf("recorded %d requests, want all 4", got)
	}
	// A refusal before the rate limiter still carries the shadow verdict.
	d, err := svc.Check(ctx, policy.Request{UserID: "u", Tier: "shadowed", Feature: "search"}, false)
	if err != nil || d.Allowed() || d.Shadow == nil || d.Shadow.Allowed {
		t.Fatalf("denied check: %+v, %v; want a shadow refusal beside the denial", d, err)
	}
	// A tier without shadow limits has no shadow verdict.
	if d, err := svc.Check(ctx, policy.Request{UserID: "u", Tier: "free"}, false); err != nil || d.Shadow != nil {
		t.Fatalf("free: shadow = %+v, %v; want none", d.Shadow, err)
	}
}

func TestPromoteShadow(t *testing.T) {
	st := newMemStore(shadowed, free)
	svc := policy.NewService(st, st, policy.WithClock(policy.NewTestClock(t0).Now))
	ctx := context.Background()
	p, err := svc.PromoteShadow(ctx, "shadowed", nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Shadow != nil || p.RequestLimits() != *shadowed.Shadow || p.Description != shadowed.Description {
		t.Fatalf("promoted = %+v, want the shadow limits as real ones and no shadow", p)
	}
	if got, _ := svc.Tier(ctx, "shadowed"); got.Shadow != nil || got.RequestLimits() != *shadowed.Shadow {
		t.Fatalf("stored = %+v", got)
	}
	if u := st.updates[len(st.updates)-1]; u.Mode != policy.PutReplace || u.IfUpdatedAt == nil {
		t.Fatalf("update = %+v, want a replace with a version precondition", u)
	}
	if _, err := svc.PromoteShadow(ctx, "shadowed", nil); policy.ErrorCode(err) != policy.EINVALID {
		t.Fatalf("promote without shadow: %v, want EINVALID", err)
	}
	stale := t0.Add(-1)
	if _, err := svc.PromoteShadow(ctx, "shadowed", &stale); policy.ErrorCode(err) != policy.ECONFLICT {
		t.Fatalf("promote of a stale read: %v, want ECONFLICT", err)
	}
	if _, err := svc.PromoteShadow(ctx, "gold", nil); policy.ErrorCode(err) != policy.ENOTFOUND {
		t.Fatalf("promote of an unknown tier: %v, want ENOTFOUND", err)
	}
}
