//go:build unix

package db_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/policyguard/policyguard/policy"
)

// TestDatabaseFilesArePrivate opens a new database with a umask that would
// let everyone read and write, records a request, and checks that the file
// and SQLite's journal beside it (-wal, -shm) are readable by the owner
// only: they hold every user id.
func TestDatabaseFilesArePrivate(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "private.db")
	s := openStore(t, path)
	if err := s.Admit(context.Background(), "u", func(policy.History) (policy.Admission, error) { return policy.Admission{At: t0, Record: true}, nil }); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != 0o600 {
			t.Errorf("%s: mode %v, want 0600", filepath.Base(p), got)
		}
	}
}
