//go:build linux

package powerfs

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// server is a mounted power-fail filesystem, served in the process that
// mounted it (see serve). It is safe for concurrent use.
type server struct {
	backing string
	fuse    *fuse.Server

	failWrites, failSyncs atomic.Bool
	dead                  atomic.Bool // after Cut: every operation fails with EIO

	// mu orders every change to the backing folder with Cut: an operation
	// holds it from its check of dead until its undo record is written.
	mu     sync.Mutex
	seq    uint64              // numbers undo records, across files
	files  map[uint64]*fileLog // unsynced content, by backing inode number
	ns     []*nsOp             // changes of entries not yet durable, oldest first
	stats  Stats
	synced map[string]time.Time // when each file was last synced, by its path when opened
	zeroed map[string]time.Time // when each was last written at offset 0
	armed  *trigger
}

// trigger is a cut armed by arm.
type trigger struct {
	writes int // left before the cut
	tear   bool
	report chan CutReport
}

// Stats counts what a filesystem was asked to do.
type Stats struct {
	Writes, Syncs, DirSyncs   int64
	FailedWrites, FailedSyncs int64 // failed on purpose (FailWrites, FailSyncs)
}

// fileLog is what a file's content was before its unsynced changes.
type fileLog struct {
	f    *os.File // the backing file, held open while it has records
	name string   // its path, relative to the root, when first logged
	undo []undo
}

// undo is one unsynced change of a file: a write of n bytes at off, or a
// change of size (n == 0).
type undo struct {
	seq  uint64
	off  int64
	n    int
	old  []byte // what [off, off+len(old)) held before
	size int64  // the file's size before
}

type nsKind int

const (
	created nsKind = iota
	removed
	renamed
)

// nsOp is one change of directory entries not yet durable.
type nsOp struct {
	kind nsKind
	dirs []string // the directories (relative to the root) whose sync it waits for
	path string   // created, removed: the entry; renamed: its new name
	from string   // renamed: its old name
	// A removed entry: a file's content is read back through f, held
	// open; a directory or symbolic link is made again from mode or link.
	f        *os.File
	isDir    bool
	mode     os.FileMode
	link     string
	replaced *nsOp // renamed: what the rename removed at path, if anything
}

// mount mounts at mountpoint a filesystem whose files are those of the
// folder backing, served by this process. It calls mount(2) itself when it
// may (as root) and fusermount otherwise.
func mount(mountpoint, backing string) (*server, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(backing, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: backing, Err: err}
	}
	p := &server{backing: backing, files: make(map[uint64]*fileLog), synced: make(map[string]time.Time), zeroed: make(map[string]time.Time)}
	data := &fs.LoopbackRoot{Path: backing, Dev: uint64(st.Dev)}
	root := &node{LoopbackNode: &fs.LoopbackNode{RootData: data}, fs: p}
	data.RootNode = root
	fsrv, err := fs.Mount(mountpoint, root, &fs.Options{MountOptions: fuse.MountOptions{
		DirectMount: true,
		FsName:      backing,
		Name:        "powerfs",
		// The programs under test must see every write, so the kernel's
		// writeback cache is off (go-fuse's default) and passthrough,
		// which would send writes around this process, is refused by
		// the file handles (handle.PassthroughFd).
	}})
	if err != nil {
		return nil, err
	}
	p.fuse = fsrv
	return p, nil
}

// unmount unmounts the filesystem. The programs that used it must have
// closed their files, or exited.
func (p *server) unmount() error {
	if err := p.fuse.Unmount(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.release()
	return nil
}

// lastSync returns when the file at rel was last synced (see FS.LastSync).
func (p *server) lastSync(rel string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.synced[filepath.Clean(rel)]
}

// lastWriteAtZero returns when the file at rel was last written at offset
// 0 (see FS.LastWriteAtZero).
func (p *server) lastWriteAtZero(rel string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.zeroed[filepath.Clean(rel)]
}

// getStats returns what the filesystem has been asked to do so far.
func (p *server) getStats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// CutReport says what a power cut threw away.
type CutReport struct {
	Writes  int      // unsynced writes and changes of size undone
	Bytes   int64    // bytes those writes had written
	Entries int      // changes of directory entries undone
	Torn    []string // the writes torn in half, one line each
	Errors  []string // undo steps that failed: the backing folder may be wrong
}

func (r CutReport) String() string {
	s := fmt.Sprintf("%d unsynced writes (%d bytes) and %d changes of entries undone", r.Writes, r.Bytes, r.Entries)
	if len(r.Torn) > 0 {
		s += "; torn: " + strings.Join(r.Torn, ", ")
	}
	if len(r.Errors) > 0 {
		s += fmt.Sprintf("; %d errors: %s", len(r.Errors), strings.Join(r.Errors, "; "))
	}
	return s
}

// cutNow is FS.Cut.
func (p *server) cutNow(tear bool) CutReport {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut(tear)
}

// arm is FS.CutAfterWrites.
func (p *server) arm(n int, tear bool) <-chan CutReport {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = &trigger{writes: max(n, 1), tear: tear, report: make(chan CutReport, 1)}
	return p.armed.report
}

// cut is FS.Cut; the caller holds mu.
func (p *server) cut(tear bool) CutReport {
	var r CutReport
	if p.dead.Swap(true) {
		return r
	}

	// Content first, newest change first across files: a file whose
	// unlink is undone below is copied back from its restored content.
	type step struct {
		l *fileLog
		u undo
	}
	var steps []step
	var torn []tornWrite
	for _, l := range p.files {
		for _, u := range l.undo {
			steps = append(steps, step{l, u})
		}
		if newest := l.undo[len(l.undo)-1]; tear && newest.n > 1 {
			// The newest write of a file is what the file holds at its
			// offset now: read the half that stays before undoing.
			tw := tornWrite{l: l, off: newest.off, n: newest.n, kept: make([]byte, tearAt(newest.n))}
			if _, err := l.f.ReadAt(tw.kept, tw.off); err != nil {
				r.Errors = append(r.Errors, fmt.Sprintf("%s: %v", l.name, err))
				continue
			}
			torn = append(torn, tw)
		}
	}
	slices.SortFunc(steps, func(a, b step) int { return cmp.Compare(b.u.seq, a.u.seq) })
	for _, s := range steps {
		r.Writes++
		r.Bytes += int64(s.u.n)
		if err := s.u.revert(s.l.f); err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("%s: %v", s.l.name, err))
		}
	}
	for _, tw := range torn {
		r.Torn = append(r.Torn, fmt.Sprintf("%s: kept %d of %d bytes at %d", tw.l.name, len(tw.kept), tw.n, tw.off))
		if _, err := tw.l.f.WriteAt(tw.kept, tw.off); err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("%s: %v", tw.l.name, err))
		}
	}
	for i := len(p.ns) - 1; i >= 0; i-- {
		r.Entries++
		if err := p.ns[i].revert(p.backing); err != nil {
			r.Errors = append(r.Errors, err.Error())
		}
	}
	p.release()
	return r
}

// tearAt returns how much of an n-byte write a torn write keeps: half,
// down to whole 512-byte sectors when there is at least one.
func tearAt(n int) int {
	if h := n / 2 &^ 511; h > 0 {
		return h
	}
	return n / 2
}

// tornWrite is the part of a file's newest write that a torn cut keeps.
type tornWrite struct {
	l    *fileLog
	off  int64
	n    int    // the write's length
	kept []byte // its first half
}

// revert undoes u on f.
func (u undo) revert(f *os.File) error {
	if _, err := f.WriteAt(u.old, u.off); err != nil {
		return err
	}
	return f.Truncate(u.size)
}

// revert undoes op in the folder root.
func (op *nsOp) revert(root string) error {
	path := filepath.Join(root, op.path)
	switch op.kind {
	case created:
		return os.RemoveAll(path)
	case renamed:
		if err := os.Rename(path, filepath.Join(root, op.from)); err != nil {
			return err
		}
		if op.replaced != nil {
			return op.replaced.revert(root)
		}
		return nil
	}
	switch {
	case op.isDir:
		return os.Mkdir(path, op.mode.Perm())
	case op.mode&os.ModeSymlink != 0:
		return os.Symlink(op.link, path)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, op.mode.Perm())
	if err != nil {
		return err
	}
	_, err = io.Copy(f, io.NewSectionReader(op.f, 0, 1<<62))
	return errors.Join(err, f.Close())
}

// release closes what the logs hold open and forgets them. The caller
// holds mu.
func (p *server) release() {
	for _, l := range p.files {
		l.f.Close()
	}
	clear(p.files)
	for _, op := range p.ns {
		op.close()
	}
	p.ns = nil
}

func (op *nsOp) close() {
	if op.f != nil {
		op.f.Close()
	}
	if op.replaced != nil {
		op.replaced.close()
	}
}

// logFor returns the log of the file with inode ino, open through fd (a
// descriptor of the backing file, of any access mode), starting one if
// there is none. The caller holds mu.
func (p *server) logFor(ino uint64, fd int, name string) (*fileLog, error) {
	if l := p.files[ino]; l != nil {
		return l, nil
	}
	// A descriptor of its own, for reading and writing, that reaches the
	// file even once it is renamed or unlinked.
	f, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", fd), os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	l := &fileLog{f: f, name: name}
	p.files[ino] = l
	return l, nil
}

// logWrite records that len(data) bytes are about to be written at off.
// The caller holds mu.
func (l *fileLog) logWrite(p *server, off int64, n int) error {
	st, err := l.f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	old := make([]byte, max(0, min(int64(n), size-off)))
	if _, err := l.f.ReadAt(old, off); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	p.seq++
	l.undo = append(l.undo, undo{seq: p.seq, off: off, n: n, old: old, size: size})
	return nil
}

// logSize records that the file's size is about to become size. The
// caller holds mu.
func (l *fileLog) logSize(p *server, size int64) error {
	st, err := l.f.Stat()
	if err != nil {
		return err
	}
	old := make([]byte, max(0, st.Size()-size))
	if _, err := l.f.ReadAt(old, size); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	p.seq++
	l.undo = append(l.undo, undo{seq: p.seq, off: min(size, st.Size()), old: old, size: st.Size()})
	return nil
}

// syncedFile drops the log of the file with inode ino: its content is
// durable. The caller holds mu.
func (p *server) syncedFile(ino uint64) {
	if l := p.files[ino]; l != nil {
		l.f.Close()
		delete(p.files, ino)
	}
}

// dirSynced makes durable the changes of entries in dir that wait for
// nothing else. The caller holds mu.
func (p *server) dirSynced(dir string) {
	kept := p.ns[:0]
	for _, op := range p.ns {
		op.dirs = slices.DeleteFunc(op.dirs, func(d string) bool { return d == dir })
		if len(op.dirs) == 0 {
			op.close()
			continue
		}
		kept = append(kept, op)
	}
	clear(p.ns[len(kept):])
	p.ns = kept
}

// removal returns the change that removing the entry at rel (relative to
// the root) makes, holding what it needs to bring the entry back. The
// caller holds mu.
func (p *server) removal(rel string, dirs ...string) (*nsOp, error) {
	path := filepath.Join(p.backing, rel)
	st, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	op := &nsOp{kind: removed, dirs: dirs, path: rel, mode: st.Mode(), isDir: st.IsDir()}
	switch {
	case st.IsDir():
	case st.Mode()&os.ModeSymlink != 0:
		if op.link, err = os.Readlink(path); err != nil {
			return nil, err
		}
	default:
		if op.f, err = os.Open(path); err != nil {
			return nil, err
		}
	}
	return op, nil
}
