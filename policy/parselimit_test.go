package policy_test

import (
	"testing"

	"github.com/policyguard/policyguard/policy"
)

func TestParseLimit(t *testing.T) {
	const invalid = "requests_per_minute must be an integer from 0 to 2147483647"
	for _, tc := range []struct {
		value string
		want  int64
		msg   string
	}{
		{"0", 0, ""},
		{"60", 60, ""},
		{"2147483647", policy.MaxLimit, ""},
		{"", 0, "requests_per_minute is required"},
		{"2147483648", 0, invalid},
		{"-1", 0, invalid},
		{"1.5", 0, invalid},
		{"ten", 0, invalid},
		{" 5", 0, invalid}, // the caller trims what it means to
	} {
		got, err := policy.ParseLimit("requests_per_minute", tc.value)
		if tc.msg == "" && (err != nil || got != tc.want) {
			t.Errorf("ParseLimit(%q) = %d, %v; want %d", tc.value, got, err, tc.want)
		}
		if tc.msg != "" && (policy.ErrorCode(err) != policy.EINVALID || policy.ErrorMessage(err) != tc.msg) {
			t.Errorf("ParseLimit(%q) = %d, %v; want %s: %q", tc.value, got, err, policy.EINVALID, tc.msg)
		}
	}
}
