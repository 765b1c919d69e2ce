//go:build linux

package powerfs

import (
	"fmt"
	"os"
	"testing"
)

// ForTest mounts backing at a new temporary folder of t's and returns the
// filesystem; t's cleanup unmounts it. Where no FUSE filesystem can be
// mounted (no /dev/fuse, or neither the right to call mount(2) nor
// fusermount) it skips t, saying why; under CI=true, where FUSE must work,
// it fails t instead.
func ForTest(t testing.TB, backing string) *FS {
	t.Helper()
	p, err := Mount(t.TempDir(), backing)
	if err != nil {
		msg := fmt.Sprintf("cannot mount a FUSE filesystem: %v", err)
		if _, serr := os.Stat("/dev/fuse"); serr != nil {
			msg = fmt.Sprintf("no FUSE on this machine (%v)", serr)
		}
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + " (CI=true: FUSE must work; see .ci/run)")
		}
		t.Skip(msg)
	}
	t.Cleanup(func() {
		if err := p.Unmount(); err != nil {
			t.Errorf("unmount %s: %v", p.Dir(), err)
		}
	})
	return p
}
