package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// policyguard backup copies the database of a running service: a service
// started on the copy counts every request the original admitted, and has
// the tier the original had. It never overwrites a file and sends
// PostgreSQL to pg_dump.
func TestBackupCommand(t *testing.T) {
	dir := t.TempDir()
	live, copyPath := filepath.Join(dir, "live.db"), filepath.Join(dir, "copy.db")
	url, stop := startInProcess(t, live)
	t.Cleanup(func() { stop() })
	if status, body := call(t, "PUT", url+"/v1/tiers/kept",
		`{"requests_per_minute":100,"requests_per_hour":100,"requests_per_day":100,"burst_allowance":0}`, true); status != 201 {
		t.Fatalf("PUT tier: %d %s", status, body)
	}
	for i := range 7 {
		if got := check(t, url, fmt.Sprintf("u%d", i%3), "kept"); got != 200 {
			t.Fatalf("check %d: %d", i, got)
		}
	}

	env := func(k string) string { return map[string]string{"GUARDRAIL_DB": live}[k] }
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"backup", copyPath}, env, &out, &errOut); err != nil {
		t.Fatalf("backup: %v\n%s", err, errOut.String())
	}
	if !strings.HasPrefix(out.String(), "backed up "+live+" to "+copyPath) {
		t.Errorf("backup printed %q", out.String())
	}
	if st, err := os.Stat(copyPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the copy: %v, mode %v; want 0600", err, st.Mode())
	}

	// Missing folders are made, for the owner only: a daily job's first
	// run finds none.
	nested := filepath.Join(dir, "backups", "daily", "copy.db")
	if err := run(context.Background(), []string{"backup", nested}, env, &out, &errOut); err != nil {
		t.Fatalf("backup into missing folders: %v\n%s", err, errOut.String())
	}
	for _, d := range []string{filepath.Dir(nested), filepath.Dir(filepath.Dir(nested))} {
		if st, err := os.Stat(d); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("folder %s: %v, mode %v; want 0700", d, err, st.Mode().Perm())
		}
	}
	if st, err := os.Stat(nested); err != nil || st.Size() == 0 {
		t.Errorf("the copy in the new folder: %v", err)
	}

	curl, cstop := startInProcess(t, copyPath)
	t.Cleanup(func() { cstop() })
	for i, want := range []int{3, 2, 2} {
		if got := dayCount(t, curl, fmt.Sprintf("u%d", i)); got != want {
			t.Errorf("u%d in the copy: %d requests, want %d", i, got, want)
		}
	}
	if status, body := call(t, "GET", curl+"/v1/tiers/kept", "", true); status != 200 {
		t.Errorf("the tier in the copy: %d %s", status, body)
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"an existing file", []string{"backup", copyPath}, copyPath + " exists"},
		{"the -db flag", []string{"backup", "-db", filepath.Join(dir, "none.db"), filepath.Join(dir, "x.db")}, "does not exist"},
		{"PostgreSQL", []string{"backup", "-db", "postgres://u:pw@localhost/db", filepath.Join(dir, "y.db")}, "use pg_dump"},
		{"no file", []string{"backup"}, "name one file"},
		{"two files", []string{"backup", "a.db", "b.db"}, "name one file"},
	} {
		err := run(context.Background(), tc.args, env, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
