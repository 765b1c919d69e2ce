//go:build linux

package main

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestFullDiskEndToEnd runs the service in process and fills the disk for
// real, as far as the process can see (RLIMIT_FSIZE: Go ignores SIGXFSZ,
// so writes fail with EFBIG). By default a check is refused with 503; with
// -fail-open it is admitted, unrecorded, and the admission is logged.
func TestFullDiskEndToEnd(t *testing.T) {
	for _, failOpen := range []bool{false, true} {
		args := []string{"-addr", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "full.db"), "-admin-token", token}
		if failOpen {
			args = append(args, "-fail-open")
		}
		u, logs, stop := runInProcess(t, args, nil)
		var old syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
			t.Skip("no RLIMIT_FSIZE:", err)
		}
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: 1, Max: old.Max}); err != nil {
			t.Skip("cannot lower RLIMIT_FSIZE:", err)
		}
		res, err := postJSON(http.DefaultClient, u+"/v1/check", `{"context":{"user_id":"full"}}`)
		var body []byte
		if err == nil {
			body, _ = io.ReadAll(res.Body)
			res.Body.Close()
		}
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
			t.Fatal(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Allowed   bool   `json:"allowed"`
			Guardrail string `json:"guardrail"`
			Message   string `json:"message"`
		}
		json.Unmarshal(body, &d)
		wantStatus, wantGuardrail := http.StatusServiceUnavailable, "rate_limiter"
		if failOpen {
			wantStatus, wantGuardrail = http.StatusOK, "fail_open"
		}
		if res.StatusCode != wantStatus || d.Allowed != failOpen || d.Guardrail != wantGuardrail || !strings.Contains(d.Message, "storage failed") {
			t.Fatalf("fail-open %v, disk full: %d %s", failOpen, res.StatusCode, body)
		}
		if got := dayCount(t, u, "full"); got != 0 {
			t.Fatalf("fail-open %v: the check was recorded (%d) with the disk full", failOpen, got)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if logged := strings.Contains(logs.String(), "fail_open_admissions=1"); logged != failOpen {
			t.Fatalf("fail-open %v: admission logged %v:\n%s", failOpen, logged, logs)
		}
	}
}
