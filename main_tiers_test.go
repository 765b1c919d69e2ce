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
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

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
		{"a required limit null", nil, nil, `{"tiers": [{"name": "a", "requests_per_minute": 1, "requests_per_hour": 1, "requests_per_day": null, "burst_allowance": 0}]}`,
			[]string{`nothing imported`, `tier 1 ("a"): requests_per_day must be an integer from 0 to 2147483647 (only the optional limits can be null)`}},
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

// A tiers file may list accounts, and records may name them: a tier's
// pooled limits, the accounts and the records' accounts are imported in one
// transaction (tiers, then accounts, then records, then tier deletions),
// exported back, and refused whole when one is wrong, a record naming an
// unknown account included. The same file round-trips through a SQLite
// file and a PostgreSQL database (skipped without one, except under
// CI=true).
func TestTiersFileWithAccounts(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testTiersFileWithAccounts(t, filepath.Join(t.TempDir(), "guardrail.db")) })
	t.Run("postgres", func(t *testing.T) { testTiersFileWithAccounts(t, dbtest.Postgres(t)) })
}

func testTiersFileWithAccounts(t *testing.T, dbPath string) {
	env := map[string]string{"GUARDRAIL_DB": dbPath}
	team := `{"name": "team", "requests_per_minute": 5, "requests_per_hour": 50, "requests_per_day": 500, "burst_allowance": 0,
		"account": {"requests_per_minute": 3, "tokens_per_day": 1000}}`
	// The account on a tier the file creates, the records in an account
	// it creates.
	file := `{"tiers": [` + team + `],
		"accounts": [{"account_id": "acme", "tier": "team", "limits": {"requests_per_minute": 2, "max_concurrent": null}, "note": "Acme"}],
		"users": [{"user_id": "ann", "account": "acme"}, {"user_id": "bob", "tier": "free", "account": "acme"}]}`
	out, _, err := tiersCmd(env, "import", writeFile(t, "accounts.json", file))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"created team: 5/min (+0 burst), 50/hour, 500/day; no features; account 3/min, 1,000 tokens/day\n",
		"created account acme: tier team; requests_per_minute 2; max_concurrent none\n",
		"created user ann: no tier assigned; account acme\n",
		"created user bob: tier free; account acme\n",
		"4 changes imported",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("import said:\n%s\nwant %q", out, want)
		}
	}
	store, err := db.Open(context.Background(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	a, err := store.Account(context.Background(), "acme")
	store.Close()
	if err != nil || a.Tier != "team" || a.Note != "Acme" || *a.Limits.Values()["requests_per_minute"] != 2 {
		t.Fatalf("the account as stored: %+v, %v", a, err)
	}

	exported, _, err := tiersCmd(env, "export")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"account": {
        "requests_per_minute": 3,`, `"accounts": [
    {
      "account_id": "acme",`, `"account": "acme",`} {
		if !strings.Contains(exported, want) {
			t.Errorf("export:\n%s\nwant it to hold\n%s", exported, want)
		}
	}
	if out, _, err := tiersCmd(env, "import", writeFile(t, "again.json", exported)); err != nil || !strings.Contains(out, "no changes") {
		t.Fatalf("importing the export again: %v\n%s", err, out)
	}

	free := `{"name": "free", "requests_per_minute": 1, "requests_per_hour": 1, "requests_per_day": 1, "burst_allowance": 0}`
	changedTeam := strings.Replace(team, `"requests_per_minute": 3`, `"requests_per_minute": 4`, 1)
	for _, tc := range []struct{ name, file, want string }{
		{"a record naming an unknown account", `{"tiers": [` + changedTeam + `], "users": [{"user_id": "cat", "account": "umbrella"}]}`, `unknown account "umbrella"`},
		{"an account on an unknown tier", `{"tiers": [], "accounts": [{"account_id": "initech", "tier": "gold"}]}`, `unknown tier "gold"`},
		{"an account listed twice", `{"tiers": [], "accounts": [{"account_id": "x", "tier": "team"}, {"account_id": "x", "tier": "team"}]}`, `account 2 ("x"): listed twice`},
		{"pooled limits that cannot bind on the plan", `{"tiers": [], "accounts": [{"account_id": "acme", "tier": "team", "limits": {"requests_per_hour": 1}}]}`,
			`account 1 ("acme"): limits.requests_per_hour (1) is below limits.requests_per_minute (3): the hour would refuse first`},
		{"pooled limits that cannot bind on the plan as listed", `{"tiers": [` + strings.Replace(team, `"requests_per_minute": 3`, `"requests_per_minute": 30`, 1) + `],
			"accounts": [{"account_id": "acme", "tier": "team", "limits": {"requests_per_hour": 20}}]}`, `limits.requests_per_hour (20) is below limits.requests_per_minute (30)`},
		{"prune the plan of an account", `{"tiers": [` + free + `], "users": []}`, `tier "team" is the plan of 1 account`},
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

	// Moving the account to a plan the import creates, a record to an
	// account it creates, and pruning the old plan is one import.
	org := `{"name": "org", "requests_per_minute": 5, "requests_per_hour": 50, "requests_per_day": 500, "burst_allowance": 0, "account": {"requests_per_day": 100}}`
	moved := `{"tiers": [` + free + `, ` + org + `],
		"accounts": [{"account_id": "acme", "tier": "org", "note": "Acme"}, {"account_id": "initech", "tier": "org"}],
		"users": [{"user_id": "cat", "account": "initech"}]}`
	out, _, err = tiersCmd(env, "import", "-prune", writeFile(t, "moved.json", moved))
	if err != nil {
		t.Fatalf("move and prune: %v\n%s", err, out)
	}
	for _, want := range []string{"created org:", "updated account acme: tier org\n", "created account initech: tier org\n", "created user cat: no tier assigned; account initech\n", "deleted team\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("move and prune said:\n%s\nwant %q", out, want)
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
