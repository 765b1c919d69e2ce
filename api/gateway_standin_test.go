package api_test

// Stand-in until the keys and models work lands; deleted at merge.
//
// At merge keyOptions returns []policy.Option{policy.WithKeys(store)},
// and setTierModels puts the tier's "models" through PUT /v1/tiers/{name}.

import (
	"testing"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

// keyOptions are the options a service needs to keep gateway keys in store.
func keyOptions(*db.Store) []policy.Option { return nil }

// setTierModels sets the models of the named tier (nil: any).
func setTierModels(t *testing.T, _ *env, tier string, models []string) {
	t.Helper()
	policy.StandinTierModels.Store(tier, models)
	t.Cleanup(func() { policy.StandinTierModels.Delete(tier) })
}
