package api

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/policyguard/policyguard/policy"
)

// TestDecisionJSONMatchesEncodingJSON compares the hand-written body of a
// check answer with what encoding/json's Encoder writes for the same
// decision, byte for byte.
func TestDecisionJSONMatchesEncodingJSON(t *testing.T) {
	windows := &[len(policy.Windows)]policy.WindowState{
		{Count: 1, Limit: 70, Remaining: 69, Reset: 60},
		{Count: 2000, Limit: 2000, Remaining: 0, Reset: 3599},
		{Count: 0, Limit: 0, Remaining: 0, Reset: 0},
	}
	for _, d := range []policy.Decision{
		{Outcome: policy.Admitted, Tier: "pro", Guardrail: "rate_limiter", Windows: windows},
		{Outcome: policy.RateLimited, Reason: "per-hour limit exceeded", RetryAfter: 3599, Tier: "pro", Guardrail: "rate_limiter", Windows: windows},
		{Outcome: policy.Denied, Reason: `feature "x<y>&\"z\\" is not included in tier "free"`, Tier: "free", Guardrail: "tier_access"},
		{Outcome: policy.Denied, Reason: "feature \"zoë\u2028\x01\t\xff\" is not included", Tier: "free", Guardrail: "tier_access"},
		{Outcome: policy.RateLimited, RetryAfter: -1, Tier: "", Guardrail: "content_filter\x7f"},
		{Outcome: policy.Denied, Reason: "a<b", Tier: "x&y", Guardrail: "g>h"},
		{Outcome: policy.Denied, Reason: "tab\there", Tier: "é", Guardrail: "nul\x00"},
	} {
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(decisionBody(&d)); err != nil {
			t.Fatal(err)
		}
		if got := appendDecisionJSON(nil, &d); !bytes.Equal(got, want.Bytes()) {
			t.Errorf("decision %+v:\n got %s\nwant %s", d, got, want.Bytes())
		}
	}
}
