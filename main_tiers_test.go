package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

// tiersCmd runs "policyguard tiers args..." with env as the environment.
func tiersCmd(env map[string]string, args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	err = run(context.Background(), append([]string{"tiers"}, args...), func(k string) string { return env[k] }, &out, &errOut)
	return out.String(), errOut.String(), err
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// tierNames lists the tiers of the running service through its API.
func tierNames(t *testing.T, url string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+"/v1/tiers", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body struct{ Tiers []struct{ Name string } }
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tr := range body.Tiers {
		names = append(names, tr.Name)
	}
	return strings.Join(names, " ")
}

// A tiers file imported into the database of a running service applies to
// its very next check and shows in its API, without a restart; the import
// reports each change and the audit log records it as an import.
func TestTiersImportIntoRunningService(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "guardrail.db")
	url, stop := startInProcess(t, dbPath)
	defer stop()
	env := map[string]string{"GUARDRAIL_DB": dbPath}

	exported, _, err := tiersCmd(env, "export")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(exported, `"name": "enterprise"`) || strings.Contains(exported, "updated_at") {
		t.Fatalf("export:\n%s", exported)
	}

	for i := 0; i < 2; i++ {
		if got := check(t, url, "bob", "free"); got != http.StatusOK {
			t.Fatalf("check %d before the import: %d", i, got)
		}
	}
	file := writeFile(t, "tiers.json", `{"tiers": [
		{"name": "free", "requests_per_minute": 2, "requests_per_hour": 100, "requests_per_day": 1000, "burst_allowance": 0, "features": ["chat"], "description": "Free plan: chat only, low limits."},
		{"name": "pro", "requests_per_minute": 60, "requests_per_hour": 2000, "requests_per_day": 20000, "burst_allowance": 10, "features": ["chat", "search", "summarize"], "description": "Pro plan: more features and higher limits."},
		{"name": "lesson", "requests_per_minute": 1, "requests_per_hour": 10, "requests_per_day": 10, "burst_allowance": 0}
	]}`)
	out, _, err := tiersCmd(env, "import", file, "--prune") // flags may follow the file
	if err != nil {
		t.Fatal(err)
	}
	want := "updated free: requests_per_minute: 10 → 2; burst_allowance: 5 → 0\n" +
		"created lesson: 1/min (+0 burst), 10/hour, 10/day; no features\n" +
		"deleted enterprise\n" +
		"3 changes imported into " + dbPath + "\n"
	if out != want {
		t.Fatalf("import said:\n%s\nwant:\n%s", out, want)
	}

	// The very next checks see the new limits.
	if got := check(t, url, "bob", "free"); got != http.StatusTooManyRequests {
		t.Errorf("third check on free after lowering it to 2/min: %d, want 429", got)
	}
	if got := check(t, url, "carol", "lesson"); got != http.StatusOK {
		t.Errorf("first check on the imported tier: %d, want 200", got)
	}
	if got := check(t, url, "carol", "lesson"); got != http.StatusTooManyRequests {
		t.Errorf("second check on lesson (1/min): %d, want 429", got)
	}
	if got := check(t, url, "dave", "enterprise"); got != http.StatusBadRequest {
		t.Errorf("check on the pruned tier: %d, want 400", got)
	}
	if got := tierNames(t, url); got != "free lesson pro" {
		t.Errorf("the service lists %q", got)
	}

	// The same file again changes nothing.
	out, _, err = tiersCmd(env, "import", "-prune", file)
	if err != nil || out != "no changes: "+dbPath+" already has the tiers of "+file+"\n" {
		t.Fatalf("second import: %q, %v", out, err)
	}

	store, err := db.Open(context.Background(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	log, err := store.TierChanges(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 3 {
		t.Fatalf("audit log has %d entries, want 3", len(log))
	}
	for _, c := range log {
		if c.Source != policy.SourceImport {
			t.Errorf("%s change recorded with source %q", c.Tier, c.Source)
		}
	}
}

// policyguard -h lists the tiers command beside the flags, and starts
// nothing.
func TestHelpListsTiersCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"-h"}, func(string) string { return "" }, &out, &errOut); err != nil {
		t.Fatalf("-h: %v", err)
	}
	if help := errOut.String(); !strings.Contains(help, "Commands:\n  tiers export|import") || !strings.Contains(help, "-db") {
		t.Fatalf("-h printed:\n%s", help)
	}
}
