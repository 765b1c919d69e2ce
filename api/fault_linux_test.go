//go:build linux

package api_test

import (
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/db/dbtest"
)

// TestDiskFullFailsClosed fills the disk for real, as far as this process
// can see: RLIMIT_FSIZE stops every file from growing, so SQLite's next
// write to its log fails as it would on a full disk. Checks fail closed,
// and once writes work again nothing was recorded and checks go on.
func TestDiskFullFailsClosed(t *testing.T) {
	if dbtest.Store() != "sqlite" {
		t.Skip("a full disk under SQLite's file; PostgreSQL's server is another process")
	}
	e := newGuardEnv(t, api.Config{})
	for range 3 {
		if rec := e.send("POST", "/v1/check", `{"context":{"user_id":"d"}}`, nil); rec.Code != http.StatusOK {
			t.Fatalf("before: %d %s", rec.Code, rec.Body)
		}
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Skip("no RLIMIT_FSIZE:", err)
	}
	// Go ignores SIGXFSZ, so a write past the limit fails with EFBIG
	// instead of killing the process. Nothing in this test writes files
	// meanwhile but SQLite.
	full := syscall.Rlimit{Cur: 1, Max: old.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &full); err != nil {
		t.Skip("cannot lower RLIMIT_FSIZE:", err)
	}
	rec := e.send("POST", "/v1/check", `{"context":{"user_id":"d"}}`, nil)
	dry := e.send("POST", "/v1/check?dry_run=true", `{"context":{"user_id":"d"}}`, nil)
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	a := decodeStorageAnswer(t, rec)
	if rec.Code != http.StatusServiceUnavailable || a.Allowed || !strings.HasPrefix(a.Message, "storage failed: ") {
		t.Fatalf("with the disk full: %d %s", rec.Code, rec.Body)
	}
	t.Logf("with the disk full: %s", rec.Body)
	if dry.Code != http.StatusOK {
		t.Errorf("a dry run only reads, so it is answered with the disk full: %d %s", dry.Code, dry.Body)
	}
	if got := e.dayCount("d"); got != 3 {
		t.Fatalf("after the disk filled: %d requests counted, want 3", got)
	}
	if rec := e.send("POST", "/v1/check", `{"context":{"user_id":"d"}}`, nil); rec.Code != http.StatusOK {
		t.Fatalf("after space came back: %d %s", rec.Code, rec.Body)
	}
	if got := e.dayCount("d"); got != 4 {
		t.Fatalf("after space came back: %d requests counted, want 4", got)
	}
}
