//go:build linux

package powerfs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// FS is a mounted power-fail filesystem, served by a process of its own
// (see Mount). Its methods are safe for concurrent use. Those that return
// no error panic if that process is gone, which only a bug or a crash of
// the server would cause.
type FS struct {
	dir, backing string
	cmd          *exec.Cmd
	in           io.WriteCloser

	mu      sync.Mutex // one request at a time
	replies chan reply
	exited  chan struct{} // closed when the server's output ends
	gone    error         // why, once exited is closed

	armMu sync.Mutex
	armed chan CutReport // the newest CutAfterWrites's
}

// request is what FS asks of the server process, a JSON line each.
type request struct {
	Op   string `json:"op"` // cut, arm, fail-writes, fail-syncs, stats, last-sync, last-write-at-zero, unmount
	On   bool   `json:"on,omitzero"`
	Tear bool   `json:"tear,omitzero"`
	N    int    `json:"n,omitzero"`
	Path string `json:"path,omitzero"`
}

// reply is the server's answer to a request, or, with Event "cut", news of
// an armed cut.
type reply struct {
	Event  string     `json:"event,omitzero"`
	Err    string     `json:"err,omitzero"`
	Report *CutReport `json:"report,omitzero"`
	Stats  *Stats     `json:"stats,omitzero"`
	Time   time.Time  `json:"time,omitzero"`
}

// Mount mounts at mountpoint a filesystem whose files are those of the
// folder backing. It calls mount(2) itself when it may (as root) and
// fusermount otherwise.
//
// The filesystem is served by another process: this program run again
// (os.Executable), which the package's init function turns into the
// server. A process must not serve a FUSE mount it maps files of into
// memory, as SQLite does its WAL index: a page fault on such a mapping
// waits for the server, and a Go server's garbage collector waits for
// the faulting thread.
func Mount(mountpoint, backing string) (*FS, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), serveMountEnv+"="+mountpoint, serveBackingEnv+"="+backing)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &FS{dir: mountpoint, backing: backing, cmd: cmd, in: in, replies: make(chan reply), exited: make(chan struct{})}
	go p.read(out)
	r, err := p.wait()
	if err == nil && r.Err != "" {
		err = errors.New(r.Err)
	}
	if err != nil {
		in.Close()
		cmd.Wait()
		return nil, err
	}
	return p, nil
}

// read passes the server's replies on until its output ends.
func (p *FS) read(out io.Reader) {
	dec := jsontext.NewDecoder(bufio.NewReader(out))
	for {
		var r reply
		if err := json.UnmarshalDecode(dec, &r); err != nil {
			p.gone = fmt.Errorf("powerfs: the server of %s is gone: %v", p.dir, err)
			close(p.exited)
			return
		}
		if r.Event == "cut" {
			p.armMu.Lock()
			armed := p.armed
			p.armMu.Unlock()
			if armed != nil && r.Report != nil {
				armed <- *r.Report
			}
			continue
		}
		p.replies <- r
	}
}

func (p *FS) wait() (reply, error) {
	select {
	case r := <-p.replies:
		return r, nil
	case <-p.exited:
		return reply{}, p.gone
	}
}

// do sends req and returns the reply.
func (p *FS) do(req request) (reply, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := json.Marshal(req)
	if err != nil {
		return reply{}, err
	}
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		return reply{}, fmt.Errorf("powerfs: the server of %s is gone: %v", p.dir, err)
	}
	return p.wait()
}

func (p *FS) must(req request) reply {
	r, err := p.do(req)
	if err != nil {
		panic(err)
	}
	return r
}

// Dir returns the mountpoint.
func (p *FS) Dir() string { return p.dir }

// Backing returns the folder whose files the filesystem shows.
func (p *FS) Backing() string { return p.backing }

// Unmount unmounts the filesystem and ends its server. The programs that
// used it must have closed their files, or exited. Calls after the first
// that succeeded do nothing.
func (p *FS) Unmount() error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	r, err := p.do(request{Op: "unmount"})
	if err == nil && r.Err != "" {
		return errors.New(r.Err)
	}
	if err != nil {
		return err
	}
	p.in.Close()
	<-p.exited
	return p.cmd.Wait()
}

// FailWrites makes every write and truncation fail with EIO while on is
// set, without changing the file.
func (p *FS) FailWrites(on bool) { p.must(request{Op: "fail-writes", On: on}) }

// FailSyncs makes every fsync, fdatasync and directory sync fail with EIO
// while on is set; what they would have made durable stays unsynced.
func (p *FS) FailSyncs(on bool) { p.must(request{Op: "fail-syncs", On: on}) }

// Stats returns what the filesystem has been asked to do so far.
func (p *FS) Stats() Stats { return *p.must(request{Op: "stats"}).Stats }

// LastSync returns when the file at rel, a path relative to the mountpoint
// that named it when it was opened, was last synced: the zero time if
// never. Whatever was written to it before that time survives a cut.
func (p *FS) LastSync(rel string) time.Time { return p.must(request{Op: "last-sync", Path: rel}).Time }

// LastWriteAtZero returns when the file at rel, a path relative to the
// mountpoint that named it when it was opened, was last written at offset
// 0: the zero time if never. SQLite writes its WAL's header there when it
// starts the WAL over, once a checkpoint has copied all of it into the
// database.
func (p *FS) LastWriteAtZero(rel string) time.Time {
	return p.must(request{Op: "last-write-at-zero", Path: rel}).Time
}

// Cut loses power: from now on every operation fails with EIO, and the
// backing folder goes back to what was durable (see the package comment).
// With tear, the newest unsynced write of each file keeps its first half.
// Kill the programs using the mount, then Unmount it. A second cut finds
// nothing to undo.
func (p *FS) Cut(tear bool) CutReport { return *p.must(request{Op: "cut", Tear: tear}).Report }

// CutAfterWrites arms a cut in the middle of what the programs using the
// mount do: their n-th write from now (n >= 1) fails with EIO, and the
// power is cut then, as Cut(tear) would, instead. The returned channel
// receives the cut's report.
func (p *FS) CutAfterWrites(n int, tear bool) <-chan CutReport {
	c := make(chan CutReport, 1)
	p.armMu.Lock()
	p.armed = c
	p.armMu.Unlock()
	p.must(request{Op: "arm", N: n, Tear: tear})
	return c
}
