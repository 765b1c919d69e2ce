package tierscmd

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/policyguard/policyguard/db/dbtest"
)

// tiersCmd runs "policyguard tiers args..." with env as the environment.
func tiersCmd(env map[string]string, args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	err = Run(context.Background(), args, func(k string) string { return env[k] }, &out, &errOut)
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

// An import that fails changes nothing at all.
func TestTiersImportRefusals(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "guardrail.db")
	env := map[string]string{"GUARDRAIL_DB": dbPath}
	before, _, err := tiersCmd(env, "export")
	if err == nil {
		t.Fatal("export from a database that does not exist succeeded")
	}
	if _, err := os.Stat(dbPath); err == nil {
		t.Fatal("export created the database it was pointed at")
	}
	if _, _, err := tiersCmd(env, "import", writeFile(t, "empty.json", `{"tiers": []}`)); err != nil {
		t.Fatal(err) // creates the database, as the service would
	}
	if before, _, err = tiersCmd(env, "export"); err != nil {
		t.Fatal(err)
	}

	valid := `{"name": "team", "requests_per_minute": 1, "requests_per_hour": 1, "requests_per_day": 1, "burst_allowance": 0}`
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		file string
		want []string
	}{
		{"invalid tier after a valid one", nil, nil, `{"tiers": [` + valid + `, {"name": "bad", "requests_per_minute": -1}]}`,
			[]string{`nothing imported`, `tier 2 ("bad"): requests_per_minute must be an integer`}},
		{"every problem listed", nil, nil, `{"tiers": [{"name": "a"}, {"name": "b", "rpm": 1}]}`,
			[]string{`tier 1 ("a"): requests_per_minute is required`, `tier 1 ("a"): burst_allowance is required`, `tier 2 ("b"): unknown field "rpm"`}},
		{"prune without the default tier", nil, []string{"-prune"}, `{"tiers": [` + valid + `]}`,
			[]string{`nothing imported`, `tier "free" is the default tier`}},
		{"prune without the configured default tier", map[string]string{"GUARDRAIL_DEFAULT_TIER": "team"}, []string{"-prune"},
			`{"tiers": [{"name": "free", "requests_per_minute": 1, "requests_per_hour": 1, "requests_per_day": 1, "burst_allowance": 0}]}`,
			[]string{`tier "team" is the default tier`}},
		{"not a tiers file", nil, nil, `[` + valid + `]`, []string{`not a tiers file`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := map[string]string{"GUARDRAIL_DB": dbPath}
			for k, v := range tc.env {
				e[k] = v
			}
			out, _, err := tiersCmd(e, append(append([]string{"import"}, tc.args...), writeFile(t, "t.json", tc.file))...)
			if err == nil {
				t.Fatalf("import succeeded: %s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if after, _, _ := tiersCmd(env, "export"); after != before {
				t.Errorf("a refused import changed the tiers:\n%s", after)
			}
		})
	}

	// With the default tier named, prune removes everything else.
	out, _, err := tiersCmd(map[string]string{"GUARDRAIL_DB": dbPath, "GUARDRAIL_DEFAULT_TIER": "team"}, "import", "-prune",
		writeFile(t, "team.json", `{"tiers": [`+valid+`]}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := "created team: 1/min (+0 burst), 1/hour, 1/day; no features\ndeleted enterprise\ndeleted free\ndeleted pro\n"; !strings.HasPrefix(out, want) {
		t.Errorf("import said:\n%s\nwant it to start:\n%s", out, want)
	}
}

func TestTiersCommandErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "name a command"},
		{[]string{"sync"}, `unknown command "sync"`},
		{[]string{"import"}, "name exactly one tiers file"},
		{[]string{"import", "a.json", "b.json"}, "name exactly one tiers file"},
		{[]string{"import", "-db", filepath.Join(t.TempDir(), "x.db"), "missing.json"}, "missing.json"},
		{[]string{"export", "out.json"}, "unexpected argument"},
		{[]string{"import", "-bogus", "a.json"}, "flag provided but not defined"},
	} {
		_, _, err := tiersCmd(nil, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("tiers %v: err = %v, want %q", tc.args, err, tc.want)
		}
	}
}

// Flags may stand before, between or after the other arguments; "--" ends
// them.
func TestParseInterspersed(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		wantRest  string
		wantPrune bool
	}{
		{[]string{"a.json"}, "a.json", false},
		{[]string{"-prune", "a.json"}, "a.json", true},
		{[]string{"a.json", "-prune"}, "a.json", true},
		{[]string{"a.json", "--prune", "b.json"}, "a.json b.json", true},
		{[]string{"a.json", "--", "-prune"}, "a.json -prune", false},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		prune := fs.Bool("prune", false, "")
		rest, err := parseInterspersed(fs, tc.args)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if got := strings.Join(rest, " "); got != tc.wantRest || *prune != tc.wantPrune {
			t.Errorf("%q: rest %q, prune %v; want %q, %v", tc.args, got, *prune, tc.wantRest, tc.wantPrune)
		}
	}
}

// A tiers file may list user records: they are imported with the tiers in
// one transaction, exported back, and refused whole when one is wrong; a
// tier a record assigns cannot be pruned.
// The same file round-trips through a SQLite file and a PostgreSQL
// database (skipped without one, except under CI=true).
func TestTiersFileWithUsers(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testTiersFileWithUsers(t, filepath.Join(t.TempDir(), "guardrail.db")) })
	t.Run("postgres", func(t *testing.T) { testTiersFileWithUsers(t, dbtest.Postgres(t)) })
}

func testTiersFileWithUsers(t *testing.T, dbPath string) {
	env := map[string]string{"GUARDRAIL_DB": dbPath}
	team := `{"name": "team", "requests_per_minute": 1, "requests_per_hour": 10, "requests_per_day": 10, "burst_allowance": 0}`
	file := `{"tiers": [` + team + `], "users": [{"user_id": "ann", "tier": "team", "limits": {"requests_per_minute": 5, "tokens_per_day": null}, "note": "pilot"}, {"user_id": "bob"}]}`
	out, _, err := tiersCmd(env, "import", writeFile(t, "users.json", file))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"created team:", "created user ann: tier team; requests_per_minute 5; tokens_per_day none", "created user bob: no tier assigned", "3 changes imported"} {
		if !strings.Contains(out, want) {
			t.Errorf("import said:\n%s\nwant %q", out, want)
		}
	}
	exported, _, err := tiersCmd(env, "export")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(exported, `"user_id": "ann"`) || !strings.Contains(exported, `"tokens_per_day": null`) || strings.Contains(exported, "updated_at") {
		t.Fatalf("export:\n%s", exported)
	}
	if out, _, err := tiersCmd(env, "import", writeFile(t, "again.json", exported)); err != nil || !strings.Contains(out, "no changes") {
		t.Fatalf("importing the export again: %v\n%s", err, out)
	}
	free := `{"name": "free", "requests_per_minute": 1, "requests_per_hour": 1, "requests_per_day": 1, "burst_allowance": 0}`
	for _, tc := range []struct{ name, file, want string }{
		{"unknown tier", `{"tiers": [], "users": [{"user_id": "cat", "tier": "gold"}]}`, `unknown tier "gold"`},
		{"unknown field", `{"tiers": [], "users": [{"user_id": "cat", "plan": "x"}]}`, `user 1: unknown field "plan"`},
		{"bad limit", `{"tiers": [], "users": [{"user_id": "dan", "limits": {"max_concurrent": -1}}]}`, `user 1 ("dan"): limits.max_concurrent must be an integer`},
		{"no user_id", `{"tiers": [], "users": [{"tier": "team"}]}`, `user 1: user_id is required`},
		{"listed twice", `{"tiers": [], "users": [{"user_id": "cat"}, {"user_id": "cat"}]}`, `listed twice`},
		{"prune an assigned tier", `{"tiers": [` + free + `], "users": []}`, `tier "team" is assigned to 1 user`},
	} {
		args := []string{"import", writeFile(t, "bad.json", tc.file)}
		if strings.Contains(tc.name, "prune") {
			args = append(args, "-prune")
		}
		_, _, err := tiersCmd(env, args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if after, _, _ := tiersCmd(env, "export"); after != exported {
			t.Errorf("%s: a refused import changed something:\n%s", tc.name, after)
		}
	}
	// Moving ann off team and pruning it is one import.
	moved := `{"tiers": [` + free + `], "users": [{"user_id": "ann", "tier": "free"}]}`
	if out, _, err := tiersCmd(env, "import", "-prune", writeFile(t, "moved.json", moved)); err != nil || !strings.Contains(out, "deleted team") {
		t.Fatalf("move and prune: %v\n%s", err, out)
	}
}
