package main

import (
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

// The curl examples of "Rolling out a change" run as printed, in order, on
// a fresh database with the admin token secret, and answer what the README
// says they answer.
func TestREADMERollingOutExamples(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("curl is needed to run the README's examples")
		}
		t.Skip("curl is not installed")
	}
	var script strings.Builder
	script.WriteString("set -eu\n")
	for _, m := range shBlockRE.FindAllStringSubmatch(readmeSection(t, "## Rolling out a change"), -1) {
		script.WriteString(m[1])
	}
	url, stop := startInProcess(t, filepath.Join(t.TempDir(), "readme.db"), "-admin-token", "secret")
	t.Cleanup(func() { stop() })
	out, err := exec.Command("bash", "-c", strings.ReplaceAll(script.String(), "localhost:8080", strings.TrimPrefix(url, "http://"))).CombinedOutput()
	if err != nil {
		t.Fatalf("the examples failed: %v\n%s", err, out)
	}
	for _, want := range []string{
		`{"user_id":"alice","tier":"pro","limits":null,"note":"pilot customer"`, // assigned
		"200\n429\n429\n", // her override of 2 a minute
		`"shadow":{"allowed":true,"reason":null}`,
		`"shadow":{"allowed":false,"reason":"per-minute limit exceeded"}`,
		`"users":2,"requests":4,"users_refused":2,"requests_refused":2,"refused_by_window":{"minute":2,"hour":0,"day":0},` +
			`"top_users":[{"user_id":"alice","requests":2,"refused":1},{"user_id":"dave","requests":2,"refused":1}]}`, // the preview
		`{"name":"pro","requests_per_minute":1,"requests_per_hour":1000,"requests_per_day":10000,"burst_allowance":0,`, // promoted
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the examples' output lacks %s:\n%s", want, out)
		}
	}
}
