package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestDependencyRule holds the packages to the layout's rule: policy
// imports nothing of ours; db and api import policy (db its migrations
// too); web, the admin page, imports policy only, neither api nor db; only
// main wires them all together.
func TestDependencyRule(t *testing.T) {
	const module = "github.com/policyguard/policyguard"
	for pkg, allowed := range map[string][]string{
		"policy":      {},
		"migrations":  {},
		"db":          {"policy", "migrations"},
		"api":         {"policy", "api/gateway", "api/internal/jsonmsg"},
		"api/gateway": {"policy", "api/internal/jsonmsg"},
		"api/client":  {},
		"web":         {"policy"},
	} {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./"+pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps ./%s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			ours, ok := strings.CutPrefix(dep, module+"/")
			if ok && ours != pkg && !slices.Contains(allowed, ours) {
				t.Errorf("%s imports %s; it may import only %v of this module", pkg, ours, allowed)
			}
		}
	}
}
