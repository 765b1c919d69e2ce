package api

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/policyguard/policyguard/policy"
)

// TestRateLimitPolicyValues checks the kept RateLimit-Policy values
// against the value formatted afresh, for limits that share slots and
// come back.
func TestRateLimitPolicyValues(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	sets := make([][3]int64, 50)
	for i := range sets {
		sets[i] = [3]int64{r.Int64N(100), r.Int64N(1000), r.Int64N(2147483648)}
	}
	for range 2000 {
		l := sets[r.IntN(len(sets))]
		windows := &[3]policy.WindowState{{Limit: l[0]}, {Limit: l[1]}, {Limit: l[2]}}
		want := fmt.Sprintf(`"minute";q=%d;w=60, "hour";q=%d;w=3600, "day";q=%d;w=86400`, l[0], l[1], l[2])
		if got := rateLimitPolicy(windows); got != want {
			t.Fatalf("limits %v: got %q, want %q", l, got, want)
		}
	}
}
