//go:build linux

package powerfs_test

import (
	"bytes"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/policyguard/policyguard/db/dbtest/powerfs"
)

// mount mounts a fresh backing folder and returns the filesystem and the
// two folders.
func mount(t *testing.T) (p *powerfs.FS, mnt, backing string) {
	t.Helper()
	backing = t.TempDir()
	p = powerfs.ForTest(t, backing)
	return p, p.Dir(), backing
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// syncDir syncs a directory as SQLite does: opened, then fsync.
func syncDir(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	must(t, err)
	defer d.Close()
	must(t, d.Sync())
}

func writeAt(t *testing.T, f *os.File, s string, off int64) {
	t.Helper()
	if _, err := f.WriteAt([]byte(s), off); err != nil {
		t.Fatal(err)
	}
}

// cut cuts the power, unmounts, and returns what is left of the file
// name in backing ("<none>" when it is gone).
func cut(t *testing.T, p *powerfs.FS, tear bool, files ...*os.File) powerfs.CutReport {
	t.Helper()
	r := p.Cut(tear)
	if len(r.Errors) > 0 {
		t.Fatalf("cut: %v", r)
	}
	for _, f := range files {
		f.Close()
	}
	must(t, p.Unmount())
	return r
}

func content(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "<none>"
	}
	must(t, err)
	return string(b)
}

// TestCutKeepsWhatWasSynced walks the model of the package comment: what
// a file held at its last sync, the entries a directory held at its last
// sync, and nothing else, are what a cut leaves.
func TestCutKeepsWhatWasSynced(t *testing.T) {
	t.Run("content", func(t *testing.T) {
		p, mnt, backing := mount(t)
		f, err := os.Create(filepath.Join(mnt, "f"))
		must(t, err)
		writeAt(t, f, "hello, world", 0)
		must(t, f.Sync())
		syncDir(t, mnt)
		writeAt(t, f, "HELLO", 0)       // overwritten, unsynced
		writeAt(t, f, "; and more", 12) // appended, unsynced
		if got := content(t, filepath.Join(backing, "f")); got != "HELLO, world; and more" {
			t.Fatalf("before the cut the backing file holds %q", got)
		}
		r := cut(t, p, false, f)
		if got, want := content(t, filepath.Join(backing, "f")), "hello, world"; got != want {
			t.Fatalf("after the cut: %q, want %q (%v)", got, want, r)
		}
		if r.Writes != 2 || r.Bytes != 15 {
			t.Fatalf("report: %v, want 2 writes of 15 bytes", r)
		}
	})
	t.Run("fdatasync and truncation", func(t *testing.T) {
		p, mnt, backing := mount(t)
		f, err := os.Create(filepath.Join(mnt, "f"))
		must(t, err)
		syncDir(t, mnt)
		writeAt(t, f, "0123456789", 0)
		must(t, syscall.Fdatasync(int(f.Fd())))
		must(t, f.Truncate(4))
		writeAt(t, f, "xy", 8)
		cut(t, p, false, f)
		if got, want := content(t, filepath.Join(backing, "f")), "0123456789"; got != want {
			t.Fatalf("after the cut: %q, want %q", got, want)
		}
	})
	t.Run("torn write", func(t *testing.T) {
		p, mnt, backing := mount(t)
		f, err := os.Create(filepath.Join(mnt, "f"))
		must(t, err)
		syncDir(t, mnt)
		old := bytes.Repeat([]byte{'o'}, 8192)
		_, err = f.WriteAt(old, 0)
		must(t, err)
		must(t, f.Sync())
		writeAt(t, f, string(bytes.Repeat([]byte{'a'}, 4096)), 0)
		writeAt(t, f, string(bytes.Repeat([]byte{'b'}, 4096)), 2048) // the newest: torn
		r := cut(t, p, true, f)
		want := string(bytes.Repeat([]byte{'b'}, 2048)) + string(old[4096:])
		if got := content(t, filepath.Join(backing, "f")); got[:2048] != string(old[:2048]) || got[2048:] != want {
			t.Fatalf("after a torn cut the file is not the old one with the first half of the newest write (%v)", r)
		}
		if len(r.Torn) != 1 {
			t.Fatalf("torn: %v", r.Torn)
		}
	})
	t.Run("torn append", func(t *testing.T) {
		p, mnt, backing := mount(t)
		f, err := os.Create(filepath.Join(mnt, "f"))
		must(t, err)
		syncDir(t, mnt)
		writeAt(t, f, "synced", 0)
		must(t, f.Sync())
		writeAt(t, f, "0123456789", 6)
		cut(t, p, true, f)
		if got, want := content(t, filepath.Join(backing, "f")), "synced01234"; got != want {
			t.Fatalf("after a torn cut: %q, want %q", got, want)
		}
	})
	t.Run("entries", func(t *testing.T) {
		p, mnt, backing := mount(t)
		for _, name := range []string{"kept", "unlinked", "renamed", "replaced"} {
			must(t, os.WriteFile(filepath.Join(mnt, name), []byte(name), 0o600))
			f, err := os.OpenFile(filepath.Join(mnt, name), os.O_RDWR, 0)
			must(t, err)
			must(t, f.Sync())
			f.Close()
		}
		must(t, os.Mkdir(filepath.Join(mnt, "sub"), 0o700))
		syncDir(t, mnt)
		// Synced in the directory: stays.
		f, err := os.Create(filepath.Join(mnt, "sub", "durable"))
		must(t, err)
		writeAt(t, f, "durable", 0)
		must(t, f.Sync())
		f.Close()
		syncDir(t, filepath.Join(mnt, "sub"))
		// Not synced in the directory: undone.
		must(t, os.WriteFile(filepath.Join(mnt, "created"), []byte("created"), 0o600))
		must(t, os.Remove(filepath.Join(mnt, "unlinked")))
		must(t, os.Rename(filepath.Join(mnt, "renamed"), filepath.Join(mnt, "replaced")))
		must(t, os.WriteFile(filepath.Join(mnt, "kept"), []byte("KEPT, longer"), 0o600)) // O_TRUNC, unsynced
		r := cut(t, p, false)
		for name, want := range map[string]string{
			"kept": "kept", "unlinked": "unlinked", "renamed": "renamed", "replaced": "replaced",
			"created": "<none>", "sub/durable": "durable",
		} {
			if got := content(t, filepath.Join(backing, name)); got != want {
				t.Errorf("%s after the cut: %q, want %q (%v)", name, got, want, r)
			}
		}
	})
}

// TestFailures: FailWrites and FailSyncs fail with EIO; a failed sync
// syncs nothing; after a cut everything fails.
func TestFailures(t *testing.T) {
	p, mnt, backing := mount(t)
	f, err := os.Create(filepath.Join(mnt, "f"))
	must(t, err)
	defer f.Close()
	syncDir(t, mnt)
	writeAt(t, f, "synced", 0)
	must(t, f.Sync())

	p.FailWrites(true)
	if _, err := f.WriteAt([]byte("x"), 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write while failing: %v, want EIO", err)
	}
	p.FailWrites(false)
	writeAt(t, f, "SYNCED", 0)
	p.FailSyncs(true)
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync while failing: %v, want EIO", err)
	}
	p.FailSyncs(false)
	if s := p.Stats(); s.FailedWrites != 1 || s.FailedSyncs != 1 || s.Syncs != 1 {
		t.Fatalf("stats: %+v", s)
	}
	p.Cut(false)
	if _, err := f.WriteAt([]byte("x"), 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write after the cut: %v, want EIO", err)
	}
	f.Close()
	must(t, p.Unmount())
	if got, want := content(t, filepath.Join(backing, "f")), "synced"; got != want {
		t.Fatalf("after a failed sync and a cut: %q, want %q", got, want)
	}
}

// TestSQLiteSynchronous runs SQLite on the filesystem: with
// synchronous=FULL a cut loses no commit, with synchronous=OFF it loses
// the commits since the last checkpoint. A filesystem that could not tell
// them apart would prove nothing about the service.
func TestSQLiteSynchronous(t *testing.T) {
	for _, tc := range []struct {
		sync     string
		tear     bool
		wantLoss bool
	}{
		{"FULL", false, false},
		{"FULL", true, false},
		{"OFF", false, true},
	} {
		t.Run(tc.sync, func(t *testing.T) {
			p, mnt, backing := mount(t)
			open := func(dir string) *sql.DB {
				d, err := sql.Open("sqlite", filepath.Join(dir, "t.db")+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
				must(t, err)
				d.SetMaxOpenConns(1)
				return d
			}
			d := open(mnt)
			_, err := d.Exec(`CREATE TABLE t (i INTEGER PRIMARY KEY, pad BLOB)`)
			must(t, err)
			_, err = d.Exec(`PRAGMA synchronous = ` + tc.sync)
			must(t, err)
			const commits = 300
			for i := range commits {
				if _, err := d.Exec(`INSERT INTO t VALUES (?, randomblob(300))`, i); err != nil {
					t.Fatal(err)
				}
			}
			r := p.Cut(tc.tear)
			d.Close() // fails: the power is off
			must(t, p.Unmount())
			if len(r.Errors) > 0 {
				t.Fatal(r)
			}

			d = open(backing)
			defer d.Close()
			var n int
			var check string
			must(t, d.QueryRow(`SELECT count(*) FROM t`).Scan(&n))
			must(t, d.QueryRow(`PRAGMA integrity_check`).Scan(&check))
			if check != "ok" {
				t.Fatalf("integrity_check: %s", check)
			}
			t.Logf("synchronous=%s: %d of %d commits after the cut (%v)", tc.sync, n, commits, r)
			if lost := n < commits; lost != tc.wantLoss {
				t.Fatalf("synchronous=%s: %d of %d commits kept", tc.sync, n, commits)
			}
		})
	}
}

// TestCutAfterWrites: an armed cut happens at the n-th write, which fails;
// LastSync says when a file was last synced, LastWriteAtZero when it was
// last written at its start.
func TestCutAfterWrites(t *testing.T) {
	p, mnt, backing := mount(t)
	f, err := os.Create(filepath.Join(mnt, "f"))
	must(t, err)
	defer f.Close()
	syncDir(t, mnt)
	if !p.LastSync("f").IsZero() {
		t.Fatal("LastSync of a file never synced is not zero")
	}
	writeAt(t, f, "synced", 0)
	must(t, f.Sync())
	if p.LastSync("f").IsZero() {
		t.Fatal("LastSync after a sync is zero")
	}
	if at := p.LastWriteAtZero("f"); at.IsZero() || at.After(p.LastSync("f")) {
		t.Fatalf("LastWriteAtZero %v, want the write before the sync at %v", at, p.LastSync("f"))
	}
	cuts := p.CutAfterWrites(3, false)
	writeAt(t, f, "1", 6)
	writeAt(t, f, "2", 7)
	select {
	case r := <-cuts:
		t.Fatalf("cut before the third write: %v", r)
	default:
	}
	if _, err := f.WriteAt([]byte("3"), 8); !errors.Is(err, syscall.EIO) {
		t.Fatalf("the write that cuts: %v, want EIO", err)
	}
	if r := <-cuts; r.Writes != 2 {
		t.Fatalf("the cut undid %v, want the two writes before it", r)
	}
	f.Close()
	must(t, p.Unmount())
	if got, want := content(t, filepath.Join(backing, "f")), "synced"; got != want {
		t.Fatalf("after the cut: %q, want %q", got, want)
	}
}
