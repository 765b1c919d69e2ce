package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var shBlockRE = regexp.MustCompile("(?s)```sh\n(.*?)```")

// readmeSection returns the text of README.md's section under heading,
// up to the next heading of its level.
func readmeSection(t *testing.T, heading string) string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("README.md has no %q", heading)
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	return sec
}

// readmeScript returns the sh blocks of README.md's section under heading,
// in order, as one bash script that stops at the first failure. It skips
// the test when curl, which the examples use, is missing, except in CI.
func readmeScript(t *testing.T, heading string) string {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("curl is needed to run the README's examples")
		}
		t.Skip("curl is not installed")
	}
	var script strings.Builder
	script.WriteString("set -eu\n")
	for _, m := range shBlockRE.FindAllStringSubmatch(readmeSection(t, heading), -1) {
		script.WriteString(m[1])
	}
	return script.String()
}

// runREADMEExamples runs the shell blocks of the README's section under
// heading, in order, against a service on a fresh database with the admin
// token secret and the test clock (so a figure read a second later on a busy
// machine is still the one printed), and returns their output.
func runREADMEExamples(t *testing.T, heading string) []byte {
	t.Helper()
	script := readmeScript(t, heading)
	url, stop := startInProcess(t, filepath.Join(t.TempDir(), "readme.db"), "-admin-token", "secret", "-test-clock")
	t.Cleanup(func() { stop() })
	out, err := exec.Command("bash", "-c", strings.ReplaceAll(script, "localhost:8080", strings.TrimPrefix(url, "http://"))).CombinedOutput()
	if err != nil {
		t.Fatalf("the examples failed: %v\n%s", err, out)
	}
	return out
}

// The curl examples of "Rolling out a change" run as printed, in order, on
// a fresh database with the admin token secret, and answer what the README
// says they answer. The service runs on the test clock, so a figure read a
// second later on a busy machine is still the one printed.
func TestREADMERollingOutExamples(t *testing.T) {
	out := runREADMEExamples(t, "## Rolling out a change")
	for _, want := range []string{
		`{"user_id":"alice","tier":"pro","limits":null,"note":"pilot customer"`, // assigned
		"200\n429\n429\n", // her override of 2 a minute
		`"shadow":{"allowed":true,"reason":null}`,
		`"shadow":{"allowed":false,"reason":"per-minute limit exceeded"}`,
		`"users":2,"requests":4,"users_refused":2,"requests_refused":2,"refused_by_window":{"minute":2,"hour":0,"day":0},` +
			`"top_users":[{"user_id":"alice","requests":2,"refused":1},{"user_id":"dave","requests":2,"refused":1}],` +
			`"accounts_refused":0,"refused_by_account_window":{"minute":0,"hour":0,"day":0}}`, // the preview
		`{"name":"pro","requests_per_minute":1,"requests_per_hour":1000,"requests_per_day":10000,"burst_allowance":0,`, // promoted
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the examples' output lacks %s:\n%s", want, out)
		}
	}
}

// The curl examples of "Organizations" run as printed, in order, on a
// fresh database with the admin token secret, and answer what the README
// says they answer. On the test clock, as above: the refusal's retry_after
// and the usage's reset read 60 however long the steps between them take.
func TestREADMEOrganizationsExamples(t *testing.T) {
	out := runREADMEExamples(t, "## Organizations")
	lines := strings.Split(string(out), "\n")
	for i, want := range []string{
		`{"account_id":"acme","tier":"team","limits":null,"note":"Acme Corp","updated_at":`,
		`{"allowed":true,`,
		`{"allowed":true,`,
		`{"allowed":false,"reason":"account per-minute limit exceeded","retry_after":60,"tier":"team",`,
		`{"account_id":"acme","tier":"team",`,
		`{"message":"account \"acme\" has 2 members; move them to another account or remove it from their records first"}`,
	} {
		if i >= len(lines) || !strings.HasPrefix(lines[i], want) {
			t.Errorf("line %d of the examples' output does not begin %s:\n%s", i+1, want, out)
		}
	}
	for _, want := range []string{
		`"account":{"id":"acme","windows":{"minute":{"limit":2,"remaining":0,"reset":60}`,
		`"windows":{"minute":{"count":2,"limit":2,"remaining":0,"reset":60,"tokens":{"used":1000},"cost":{"used":"0"}}`,
		`"calls_in_flight":2,"period":{"start":"`,
		`"time_zone":"UTC","billing_anchor":1}}`,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the examples' output lacks %s:\n%s", want, out)
		}
	}
}

// The Tour runs as printed, from a fresh database: it builds the binary,
// starts it, walks every step, stops it and removes its folder, on a free
// port instead of 8080.
// The binary inherits GUARDRAIL_TEST_CLOCK=true: no step of the Tour waits
// for time to pass, and on a clock that stands still its resets read what
// the README prints even when a loaded machine takes seconds between steps.
func TestREADMETour(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary: skipped with -short")
	}
	script := readmeScript(t, "## Tour")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	tmp := t.TempDir()
	cmd := exec.Command("bash", "-c", strings.ReplaceAll(script, "127.0.0.1:8080", addr))
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "GUARDRAIL_TEST_CLOCK=true")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the Tour failed: %v\n%s", err, out)
	}
	// The Tour ends by stopping the service and removing its folder: a
	// reader who ran it has nothing left behind, and nothing still listens.
	if left, err := os.ReadDir(tmp); err != nil || len(left) != 0 {
		t.Errorf("the Tour left %v behind in its temporary folder (%v)", left, err)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Errorf("the service still listens on %s after the Tour", addr)
	}
	for _, want := range []string{
		`{"allowed":true,"reason":null,"retry_after":0,"tier":"pro","guardrail":"rate_limiter","windows":{"minute":{"limit":70,"remaining":69,"reset":60},"hour":{"limit":2000,"remaining":1999,"reset":3600},"day":{"limit":20000,"remaining":19999,"reset":86400}},"call_id":null}`,
		`{"allowed":false,"reason":"feature \"search\" is not included in tier \"free\"",`,
		"200 200 200 429 \n",
		`Ratelimit: "minute";r=0;t=60, "hour";r=97;t=3600, "day";r=997;t=86400`,
		`{"user_id":"bob","tier":"tour","windows":{"minute":{"count":3,"limit":3,"remaining":0,"reset":60,`,
		`"user_id":"carol","tokens":1234,"reserved":4000,`,
		`"tokens":{"used":1234,"limit":10000,"remaining":8766,"reset":60},"cost":{"used":"0"}}`,
		`{"message":"unknown field \"user_id\": user_id belongs in \"context\""}`,
		"\n200 200\n",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the Tour's output lacks %s:\n%s", want, out)
		}
	}
}

// The curl examples of "Budgets" run as printed, in order, on a fresh
// database with the admin token secret, and answer what the README says
// they answer.
func TestREADMEBudgetsExamples(t *testing.T) {
	out := runREADMEExamples(t, "## Budgets")
	lines := strings.Split(string(out), "\n")
	for i, want := range []string{
		`{"id":1,"effective_from":"`,
		`{"id":2,"effective_from":"2099-01-01T00:00:00Z",`,
		`{"versions":[{"id":2,`,
		`{"message":"prices[0].output is required"}`,
	} {
		if i >= len(lines) || !strings.HasPrefix(lines[i], want) {
			t.Errorf("line %d of the examples' output does not begin %s:\n%s", i+1, want, out)
		}
	}
	for _, want := range []string{
		`"source":"api","prices":[{"model":"claude-*","upstream":"anthropic","input":"3","output":"15","cache_read":"3","cache_write":"3.75"},` +
			`{"model":"gpt-4o-mini","input":"0.15","output":"0.6","cache_read":"0.075","cache_write":"0.15"}]}`,
		`"prices":[{"model":"gpt-*","input":"0.2","output":"0.8","cache_read":"0.2","cache_write":"0.2"}]}`,
		`"entries":1,"in_force":false},{"id":1,`,
		`"entries":2,"in_force":true}]}`,
		// Spend limits.
		`{"allowed":false,"reason":"per-day spend limit exceeded",`,
		`"cost":{"limit":"0.01","used":"0.006","remaining":"0.004",`,
		`"tokens":9000,`,
		`"model":"gpt-4o-mini","price_version":1,"reserved_cost":"0.006","cost":"0.0018"}`,
		`{"message":"model \"llama\" has no price: tier \"budget\" limits spend, and an unpriced call is refused, not counted as free"}`,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the examples' output lacks %s:\n%s", want, out)
		}
	}
}

// The curl examples of "Admins and audit" run as printed, in order, on a
// fresh database with the admin token secret, and answer what the README
// says they answer: support may put a record and not delete a tier, the
// log names dana, and her token is refused once revoked.
func TestREADMEAdminsExamples(t *testing.T) {
	out := string(runREADMEExamples(t, "## Admins and audit"))
	for _, want := range []string{
		"201\n",
		`{"message":"this needs the role admin or above; you are support"}`,
		`"actor":"dana","kind":"users","subject":"alice","action":"created","source":"api","old":null,"new":{"user_id":"alice","tier":"pro","limits":{},"note":""}}],"next":null}`,
		"401\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the examples' output lacks %s:\n%s", want, out)
		}
	}
	if i, j := strings.Index(out, "201\n"), strings.Index(out, "401\n"); i < 0 || j < i {
		t.Errorf("the record's 201 should come before the revoked token's 401:\n%s", out)
	}
}

// The curl examples of "Agent runs" run as printed, in order, on a fresh
// database with the admin token secret: a run, its sub-agent sharing its
// steps, the 403 past them, the run as read, and the kill switch.
func TestREADMERunsExamples(t *testing.T) {
	out := string(runREADMEExamples(t, "## Agent runs"))
	for _, want := range []string{
		`{"allowed":true,`,
		`"run":{"id":"r-42","parent":null,"state":"open","requests":1,`,
		`"limits":{"max_requests":2}}}`,
		`{"allowed":false,"reason":"run \"r-42\" step limit exceeded",`,
		`{"run_id":"r-42","user_id":"eve","tier":"agents","parent":null,"children":["r-42-search"],`,
		`"state":"exhausted","requests":2,`,
		`{"run_id":"r-42-search",`,
		`"state":"ended",`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the examples' output lacks %s:\n%s", want, out)
		}
	}
}
