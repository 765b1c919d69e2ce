package api

import (
	"time"

	"github.com/go-json-experiment/json"

	"github.com/policyguard/policyguard/policy"
)

// TierJSON returns t as GET /v1/tiers/{name} answers it, without
// updated_at: the admin page's audit log shows the before and after of a
// change in it (web.Config.TierJSON), and when apart.
func TierJSON(t policy.Tier) string {
	j := tierToJSON(t)
	j.UpdatedAt = time.Time{}
	b, err := json.Marshal(j)
	if err != nil {
		return ""
	}
	return string(b)
}
