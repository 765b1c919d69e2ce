//go:build linux

package powerfs

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// node is a file or directory: go-fuse's loopback node, with every change
// it makes logged first.
type node struct {
	*fs.LoopbackNode
	fs *server
}

var (
	_ fs.NodeWrapChilder    = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.FileWriter         = (*handle)(nil)
	_ fs.FileReader         = (*handle)(nil)
	_ fs.FileAllocater      = (*handle)(nil)
	_ fs.FileIoctler        = (*handle)(nil)
	_ fs.FileFsyncdirer     = (*dirHandle)(nil)
	_ fs.FileReaddirenter   = (*dirHandle)(nil)
	_ fs.FileReleasedirer   = (*dirHandle)(nil)
	_ fs.FileSeekdirer      = (*dirHandle)(nil)
)

// WrapChild makes every node the loopback creates one of ours.
func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), fs: n.fs}
}

// rel returns the node's path relative to the root, "" for the root.
func (n *node) rel() string { return n.Path(n.Root()) }

func (n *node) child(name string) string { return filepath.Join(n.rel(), name) }

// begin locks p for a change; after a cut it fails with EIO instead.
func (p *server) begin() syscall.Errno {
	p.mu.Lock()
	if p.dead.Load() {
		p.mu.Unlock()
		return syscall.EIO
	}
	return 0
}

// logPath returns the log of the file at rel, relative to the root. The
// caller holds mu.
func (p *server) logPath(rel string) (*fileLog, error) {
	f, err := os.Open(filepath.Join(p.backing, rel))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return nil, err
	}
	return p.logFor(st.Ino, int(f.Fd()), rel)
}

// wrap returns the handle through which the file at rel is written.
func (p *server) wrap(fh fs.FileHandle, rel string) (*handle, syscall.Errno) {
	h := &handle{LoopbackFile: fh.(*fs.LoopbackFile), fs: p, name: rel}
	var st syscall.Stat_t
	if err := syscall.Fstat(h.fd(), &st); err != nil {
		h.Release(context.Background())
		return nil, fs.ToErrno(err)
	}
	h.ino = st.Ino
	return h, 0
}

func (n *node) created(name string) {
	n.fs.ns = append(n.fs.ns, &nsOp{kind: created, dirs: []string{n.rel()}, path: n.child(name)})
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	p := n.fs
	if errno := p.begin(); errno != 0 {
		return nil, nil, 0, errno
	}
	defer p.mu.Unlock()
	rel := n.child(name)
	_, err := os.Lstat(filepath.Join(p.backing, rel))
	existed := err == nil
	if existed && flags&syscall.O_TRUNC != 0 {
		if errno := p.logTruncate(rel); errno != 0 {
			return nil, nil, 0, errno
		}
	}
	ch, fh, fuseFlags, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if !existed {
		n.created(name)
	}
	h, errno := p.wrap(fh, rel)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return ch, h, fuseFlags, 0
}

// logTruncate logs the truncation of the file at rel to nothing. The
// caller holds mu.
func (p *server) logTruncate(rel string) syscall.Errno {
	if p.failWrites.Load() {
		p.stats.FailedWrites++
		return syscall.EIO
	}
	l, err := p.logPath(rel)
	if err == nil {
		err = l.logSize(p, 0)
	}
	return fs.ToErrno(err)
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	p := n.fs
	if errno := p.begin(); errno != 0 {
		return nil, 0, errno
	}
	defer p.mu.Unlock()
	rel := n.rel()
	if flags&syscall.O_TRUNC != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		if errno := p.logTruncate(rel); errno != 0 {
			return nil, 0, errno
		}
	}
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	h, errno := p.wrap(fh, rel)
	if errno != 0 {
		return nil, 0, errno
	}
	return h, fuseFlags, 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	p := n.fs
	size, ok := in.GetSize()
	if !ok {
		if p.dead.Load() {
			return syscall.EIO
		}
		return n.LoopbackNode.Setattr(ctx, f, in, out)
	}
	if errno := p.begin(); errno != 0 {
		return errno
	}
	defer p.mu.Unlock()
	if p.failWrites.Load() {
		p.stats.FailedWrites++
		return syscall.EIO
	}
	var l *fileLog
	var err error
	if h, ok := f.(*handle); ok {
		l, err = p.logFor(h.ino, h.fd(), h.name)
	} else {
		l, err = p.logPath(n.rel())
	}
	if err == nil {
		err = l.logSize(p, int64(size))
	}
	if err != nil {
		return fs.ToErrno(err)
	}
	return n.LoopbackNode.Setattr(ctx, f, in, out)
}

// Fsync syncs a file, or a directory (see dirHandle.Fsyncdir).
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	p := n.fs
	if errno := p.begin(); errno != 0 {
		return errno
	}
	defer p.mu.Unlock()
	if p.failSyncs.Load() {
		p.stats.FailedSyncs++
		return syscall.EIO
	}
	if n.IsDir() {
		p.stats.DirSyncs++
		p.dirSynced(n.rel())
		return 0
	}
	p.stats.Syncs++
	if h, ok := f.(*handle); ok {
		p.synced[h.name] = time.Now()
		p.syncedFile(h.ino)
		return 0
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(p.backing, n.rel()), &st); err != nil {
		return fs.ToErrno(err)
	}
	p.synced[n.rel()] = time.Now()
	p.syncedFile(st.Ino)
	return 0
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if n.fs.dead.Load() {
		return nil, 0, syscall.EIO
	}
	ds, errno := fs.NewLoopbackDirStream(filepath.Join(n.fs.backing, n.rel()))
	if errno != 0 {
		return nil, 0, errno
	}
	return &dirHandle{DirStream: ds, n: n}, 0, 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	return n.remove(name, n.LoopbackNode.Unlink)
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return n.remove(name, n.LoopbackNode.Rmdir)
}

func (n *node) remove(name string, rm func(context.Context, string) syscall.Errno) syscall.Errno {
	p := n.fs
	if errno := p.begin(); errno != 0 {
		return errno
	}
	defer p.mu.Unlock()
	op, err := p.removal(n.child(name), n.rel())
	if err != nil {
		return fs.ToErrno(err)
	}
	if errno := rm(context.Background(), name); errno != 0 {
		op.close()
		return errno
	}
	p.ns = append(p.ns, op)
	return 0
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	if flags&fs.RENAME_EXCHANGE != 0 {
		return syscall.ENOTSUP
	}
	p := n.fs
	if errno := p.begin(); errno != 0 {
		return errno
	}
	defer p.mu.Unlock()
	from, to := n.child(name), np.child(newName)
	st, err := os.Lstat(filepath.Join(p.backing, from))
	if err != nil {
		return fs.ToErrno(err)
	}
	if st.IsDir() {
		return syscall.ENOTSUP
	}
	op := &nsOp{kind: renamed, dirs: []string{n.rel()}, path: to, from: from}
	if d := np.rel(); d != n.rel() {
		op.dirs = append(op.dirs, d)
	}
	if _, err := os.Lstat(filepath.Join(p.backing, to)); err == nil {
		if op.replaced, err = p.removal(to); err != nil {
			return fs.ToErrno(err)
		}
	}
	if errno := n.LoopbackNode.Rename(ctx, name, np, newName, flags); errno != 0 {
		op.close()
		return errno
	}
	p.ns = append(p.ns, op)
	return 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.create(name, func() (*fs.Inode, syscall.Errno) { return n.LoopbackNode.Mkdir(ctx, name, mode, out) })
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.create(name, func() (*fs.Inode, syscall.Errno) { return n.LoopbackNode.Mknod(ctx, name, mode, rdev, out) })
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.create(name, func() (*fs.Inode, syscall.Errno) { return n.LoopbackNode.Symlink(ctx, target, name, out) })
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.create(name, func() (*fs.Inode, syscall.Errno) { return n.LoopbackNode.Link(ctx, target, name, out) })
}

func (n *node) create(name string, mk func() (*fs.Inode, syscall.Errno)) (*fs.Inode, syscall.Errno) {
	p := n.fs
	if errno := p.begin(); errno != 0 {
		return nil, errno
	}
	defer p.mu.Unlock()
	ch, errno := mk()
	if errno == 0 {
		n.created(name)
	}
	return ch, errno
}

// handle is an open file: go-fuse's loopback file, whose writes are logged
// first.
type handle struct {
	*fs.LoopbackFile
	fs   *server
	ino  uint64 // the backing file's inode number
	name string // its path relative to the root, when opened
}

// PassthroughFd refuses FUSE passthrough, with which the kernel would send
// reads and writes straight to the backing file, around the log.
func (h *handle) PassthroughFd() (int, bool) { return -1, false }

// fd returns the descriptor of the backing file.
func (h *handle) fd() int {
	fd, _ := h.LoopbackFile.PassthroughFd()
	return fd
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	p := h.fs
	if errno := p.begin(); errno != 0 {
		return 0, errno
	}
	defer p.mu.Unlock()
	if a := p.armed; a != nil {
		if a.writes--; a.writes == 0 {
			p.armed = nil
			a.report <- p.cut(a.tear)
			return 0, syscall.EIO
		}
	}
	p.stats.Writes++
	if p.failWrites.Load() {
		p.stats.FailedWrites++
		return 0, syscall.EIO
	}
	l, err := p.logFor(h.ino, h.fd(), h.name)
	if err == nil {
		err = l.logWrite(p, off, len(data))
	}
	if err != nil {
		return 0, fs.ToErrno(err)
	}
	if off == 0 {
		p.zeroed[h.name] = time.Now()
	}
	return h.LoopbackFile.Write(ctx, data, off)
}

func (h *handle) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if h.fs.dead.Load() {
		return nil, syscall.EIO
	}
	return h.LoopbackFile.Read(ctx, buf, off)
}

// Allocate is refused: nothing here needs it, and callers such as
// posix_fallocate fall back to writing.
func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	return syscall.EOPNOTSUPP
}

// Ioctl is refused: some ioctls write (FICLONE), around the log.
func (h *handle) Ioctl(ctx context.Context, cmd uint32, arg uint64, input, output []byte) (int32, syscall.Errno) {
	return 0, syscall.ENOTTY
}

// dirHandle is an open directory: go-fuse's loopback directory stream,
// whose sync makes the directory's entries durable.
type dirHandle struct {
	fs.DirStream
	n *node
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return d.n.Fsync(ctx, nil, flags)
}

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	return d.DirStream.(fs.FileReaddirenter).Readdirent(ctx)
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	return d.DirStream.(fs.FileSeekdirer).Seekdir(ctx, off)
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	d.DirStream.(fs.FileReleasedirer).Releasedir(ctx, flags)
}
