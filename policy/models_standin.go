package policy

// Stand-in until the models work lands; deleted at merge.
//
// The models work gives Tier a Models field (nil: any model) on every
// surface. Until then a test names a tier's models in StandinTierModels,
// by tier name, and AllowsModel reads them from there. Do not build on it.

import (
	"strings"
	"sync"
)

// StandinTierModels maps a tier's name to its models ([]string).
var StandinTierModels sync.Map

// AllowsModel reports whether the tier's users may call model.
func (t *Tier) AllowsModel(model string) bool {
	v, ok := StandinTierModels.Load(t.Name)
	if !ok || v.([]string) == nil {
		return true
	}
	for _, m := range v.([]string) {
		if m == "*" || m == model || strings.HasSuffix(m, "*") && strings.HasPrefix(model, strings.TrimSuffix(m, "*")) {
			return true
		}
	}
	return false
}
