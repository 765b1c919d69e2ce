package api

import (
	"fmt"
	"strings"
	"testing"

	"github.com/policyguard/policyguard/policy"
)

// A wire type that lacks a limit of policy.LimitFields, or holds one with
// the wrong type, stops the program when it starts: no surface can leave
// a limit out in silence.
func TestBindWireRefusesAnIncompleteWireType(t *testing.T) {
	all := func(*policy.LimitField) bool { return true }
	for _, tc := range []struct {
		name string
		bind func()
		want string
	}{
		{"a limit missing", func() {
			bindWire[struct {
				RequestsPerMinute int64 `json:"requests_per_minute"`
			}](all)
		}, "requests_per_hour"},
		{"a required limit nullable", func() {
			bindWire[struct {
				RequestsPerMinute *int64 `json:"requests_per_minute"`
			}]((*policy.LimitField).InRequestLimits)
		}, "requests_per_minute of type int64"},
		{"an optional limit not nullable", func() {
			bindWire[struct {
				MaxConcurrent int64 `json:"max_concurrent"`
			}](func(f *policy.LimitField) bool { return f.Name == "max_concurrent" })
		}, "max_concurrent of type *int64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if got := fmt.Sprint(recover()); !strings.Contains(got, tc.want) {
					t.Fatalf("panic %q, want one naming %s", got, tc.want)
				}
			}()
			tc.bind()
		})
	}
	// The wire types themselves are complete: every limit goes through
	// tierJSON and back, and every request limit through the shadow.
	var tier policy.Tier
	tier.Shadow = &policy.RequestLimits{}
	for i := range policy.LimitFields {
		f := &policy.LimitFields[i]
		v := int64(i + 1)
		f.Set(&tier, &v)
		if f.InRequestLimits() {
			tier.Shadow.Limits.Set(f, new(100+v))
		}
	}
	j := tierToJSON(tier)
	for i := range policy.LimitFields {
		f := &policy.LimitFields[i]
		if got := tierWire.get(&j, i); got == nil || *got != int64(i+1) {
			t.Errorf("%s: tierJSON holds %v, want %d", f.Name, got, i+1)
		}
		if got := shadowWire.get(j.Shadow, i); f.InRequestLimits() != (got != nil) || got != nil && *got != int64(101+i) {
			t.Errorf("%s: the shadow holds %v", f.Name, got)
		}
	}
}
