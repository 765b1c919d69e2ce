package policy_test

import (
	"context"
	"testing"

	"github.com/policyguard/policyguard/policy"
)

func TestRoles(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want policy.Role
		err  string
	}{
		{"viewer", policy.RoleViewer, ""},
		{"support", policy.RoleSupport, ""},
		{"admin", policy.RoleAdmin, ""},
		{"Admin", 0, `unknown role "Admin": want viewer, support or admin`},
		{"", 0, `unknown role "": want viewer, support or admin`},
	} {
		got, err := policy.ParseRole(tc.in)
		var msg string
		if err != nil {
			msg = policy.ErrorMessage(err)
		}
		if got != tc.want || msg != tc.err {
			t.Errorf("ParseRole(%q) = %v, %v; want %v, %q", tc.in, got, err, tc.want, tc.err)
		}
		if err == nil && got.String() != tc.in {
			t.Errorf("%v.String() = %q", got, got.String())
		}
	}
	if !(policy.RoleViewer < policy.RoleSupport && policy.RoleSupport < policy.RoleAdmin) {
		t.Error("roles are not ordered viewer < support < admin")
	}
	if got := policy.ErrorMessage(policy.ForbiddenError(policy.RoleViewer, policy.RoleSupport)); got != "this needs the role support or above; you are viewer" {
		t.Errorf("ForbiddenError: %q", got)
	}
	if got := policy.HTTPStatus(policy.ForbiddenError(policy.RoleViewer, policy.RoleAdmin)); got != 403 {
		t.Errorf("ForbiddenError's status: %d", got)
	}
}

func TestRouteAccess(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		want         policy.Access
	}{
		{"GET", "/v1/tiers", policy.AccessViewer},
		{"PUT", "/v1/tiers/:name", policy.AccessAdmin},
		{"PUT", "/v1/users/:user_id", policy.AccessSupport},
		{"DELETE", "/v1/usage/:user_id", policy.AccessSupport},
		{"DELETE", "/v1/accounts/:account_id/usage", policy.AccessAdmin},
		{"POST", "/v1/check", policy.AccessOwn},
		{"PATCH", "/llm/:name/*", policy.AccessOwn}, // every method
		{"GET", "/healthz", policy.AccessOpen},
		{"PATCH", "/v1/tiers/:name", policy.AccessRefused}, // not listed
		{"GET", "/v1/anything", policy.AccessRefused},
		{"GET", "/admin/admins", policy.AccessAdmin},
		{"GET", "/admin/audit", policy.AccessViewer},
	} {
		if got := policy.RouteAccess(tc.method, tc.path); got != tc.want {
			t.Errorf("RouteAccess(%s %s) = %v, want %v", tc.method, tc.path, got, tc.want)
		}
	}
}

func TestActor(t *testing.T) {
	ctx := context.Background()
	if got := policy.Actor(ctx); got != policy.ActorUnknown {
		t.Errorf("no actor: %q", got)
	}
	if got := policy.Actor(policy.WithActor(ctx, "dana")); got != "dana" {
		t.Errorf("dana: %q", got)
	}
}

func TestValidateAdmin(t *testing.T) {
	for _, tc := range []struct {
		a    policy.Admin
		code string
	}{
		{policy.Admin{Name: "dana", Role: policy.RoleViewer}, ""},
		{policy.Admin{Name: "", Role: policy.RoleViewer}, policy.EINVALID},
		{policy.Admin{Name: "dana"}, policy.EINVALID},
		{policy.Admin{Name: "bootstrap", Role: policy.RoleAdmin}, policy.ECONFLICT},
		{policy.Admin{Name: "unknown", Role: policy.RoleAdmin}, policy.ECONFLICT},
		{policy.Admin{Name: "a\tb", Role: policy.RoleAdmin}, policy.EINVALID},
	} {
		if got := policy.ErrorCode(policy.ValidateAdmin(&tc.a)); got != tc.code {
			t.Errorf("ValidateAdmin(%+v) = %q, want %q", tc.a, got, tc.code)
		}
	}
}
