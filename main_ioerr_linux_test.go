//go:build linux

package main

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/db/dbtest/powerfs"
)

// TestDiskErrors runs the real binary on powerfs and fails its writes, then
// its fsyncs, with EIO. Meanwhile checks answer 503 (200 with guardrail
// fail_open and nothing recorded, with -fail-open), /healthz answers 503
// saying storage failed, and the log says the database is reopened. Once
// the errors stop, /healthz and checks succeed again with nothing else
// done. A power cut at the end keeps every check answered 200 with a
// decision, and nothing else.
func TestDiskErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	powerfs.ForTest(t, t.TempDir()) // skips here, once, where FUSE cannot be mounted
	bin := goBuild(t, ".")
	for _, failOpen := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail-open=%v", failOpen), func(t *testing.T) {
			backing := t.TempDir()
			fsys := powerfs.ForTest(t, backing)
			args := func(dir string) []string {
				a := []string{"-addr", "127.0.0.1:0", "-db", filepath.Join(dir, "io.db"), "-admin-token", token, "-log-format", "json"}
				if failOpen {
					a = append(a, "-fail-open")
				}
				return a
			}
			svc := startBinary(t, bin, args(fsys.Dir())...)
			recorded := 0 // checks answered 200 with a decision
			checkOK := func(when string) {
				t.Helper()
				if status, body := call(t, "POST", svc.url+"/v1/check", `{"context":{"user_id":"io","user_tier":"enterprise"}}`, false); status != http.StatusOK || !strings.Contains(body, `"guardrail":"rate_limiter"`) {
					t.Fatalf("%s: check %d %s, want 200 decided", when, status, body)
				}
				recorded++
			}
			checkOK("before any error")
			// SQLite's extended code says what failed: a write of the WAL
			// (778) or of the WAL index (4618), an fsync (1034).
			const ioErr = "storage failed: disk I/O error ("
			for _, tc := range []struct {
				name string
				fail func(bool)
			}{
				{"EIO on write", fsys.FailWrites},
				{"EIO on fsync", fsys.FailSyncs},
			} {
				tc.fail(true)
				for range 3 {
					status, body := call(t, "POST", svc.url+"/v1/check", `{"context":{"user_id":"io","user_tier":"enterprise"}}`, false)
					want, guardrail := http.StatusServiceUnavailable, `"guardrail":"rate_limiter"`
					if failOpen {
						want, guardrail = http.StatusOK, `"guardrail":"fail_open"`
					}
					if status != want || !strings.Contains(body, guardrail) || !strings.Contains(body, ioErr) {
						t.Fatalf("%s: check %d %s, want %d with %s and the error", tc.name, status, body, want, guardrail)
					}
				}
				if status, body := get(t, svc.url+"/healthz"); status != http.StatusServiceUnavailable || !strings.Contains(body, `"message":"`+ioErr) {
					t.Fatalf("%s: /healthz %d %s, want 503 saying storage failed", tc.name, status, body)
				}
				tc.fail(false)
				if got := dayCount(t, svc.url, "io"); got != recorded {
					t.Fatalf("%s: %d checks counted, %d answered 200 with a decision", tc.name, got, recorded)
				}
				// Nothing but the health check writes: it finds the disk
				// works again.
				dbtest.WaitFor(t, "/healthz to recover", 10*time.Second, func() bool {
					status, _ := get(t, svc.url+"/healthz")
					return status == http.StatusOK
				})
				checkOK("after " + tc.name)
			}
			// Each of the two failures is logged once, and so is each
			// recovery (the access log is written out in batches).
			for _, want := range []string{
				`"msg":"storage: a commit failed on an I/O error; reopening the database before the next write","err":"disk I/O error (`,
				`"msg":"storage: commits succeed again","reopened":`,
			} {
				dbtest.WaitFor(t, "the log", 10*time.Second, func() bool { return strings.Count(svc.stderr.String(), want) == 2 })
			}

			// A power cut now loses nothing answered, and the checks that
			// failed were recorded nowhere.
			if r := fsys.Cut(true); len(r.Errors) > 0 {
				t.Fatal(r)
			}
			if err := svc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			svc.wait()
			if err := fsys.Unmount(); err != nil {
				t.Fatal(err)
			}
			svc = startBinary(t, bin, args(backing)...)
			if got := dayCount(t, svc.url, "io"); got != recorded {
				t.Fatalf("after a power cut %d checks are counted; %d were answered 200 with a decision", got, recorded)
			}
		})
	}
}
