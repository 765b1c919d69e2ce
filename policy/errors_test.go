package policy_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/policyguard/policyguard/policy"
)

func TestHTTPStatus(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{policy.Errorf(policy.EINVALID, "x"), 400},
		{policy.Errorf(policy.EUNAUTHORIZED, "x"), 401},
		{policy.Errorf(policy.ENOTFOUND, "x"), 404},
		{fmt.Errorf("wrapped: %w", policy.Errorf(policy.ECONFLICT, "x")), 409},
		{policy.Errorf(policy.EINTERNAL, "x"), 500},
		{policy.Errorf(policy.EUNAVAILABLE, "x"), 503},
		{policy.Errorf("no-such-code", "x"), 500},
		{errors.New("disk I/O error"), 500},
	} {
		if got := policy.HTTPStatus(tc.err); got != tc.want {
			t.Errorf("HTTPStatus(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
