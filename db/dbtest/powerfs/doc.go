// Package powerfs is a filesystem for tests that loses power: a FUSE
// filesystem, mounted by the test, that passes every operation through to
// a backing folder and remembers what has been written and not yet synced,
// so that Cut can throw exactly that away, as a power loss would, before
// the program under test starts again on the same files. SIGKILL cannot
// tell a program that syncs from one that does not, since the kernel keeps
// every write of a killed process; this can. It also fails writes or syncs
// with EIO on demand (FailWrites, FailSyncs).
//
// # What a cut keeps
//
// A file's content is durable up to its last fsync or fdatasync. Every
// write, truncation and fallocate since then is kept in an undo log (the
// bytes it overwrote and the size before it) that a sync drops; Cut replays
// the logs backwards, newest first, across files. With tear, the newest
// unsynced write of each file is only half undone: its first half (whole
// 512-byte sectors when it is 1 KiB or more) stays, as when a disk loses
// power in the middle of a page.
//
// A directory's entries are durable up to its last fsync (opening the
// directory and syncing it, as SQLite does after creating a journal). Cut
// removes the files created since, and brings back, with the content they
// had at their last sync, the files unlinked or renamed over since; a
// rename is undone unless both directories it touched were synced after
// it. Renaming a directory is refused (ENOTSUP): nothing here needs it, and
// the undo log names entries by path.
//
// Metadata other than size and entries (modes, times, extended attributes)
// is not modelled. A failed sync syncs nothing: what it would have made
// durable stays in the undo log, to be lost by a cut unless a later sync
// succeeds. The kernel's habit of forgetting dirty pages after a failed
// writeback is not imitated.
//
// After a cut every operation fails with EIO until Unmount; mount the
// backing folder again (Mount, or ForTest) to go on. CutAfterWrites arms a
// cut at the n-th write instead, so that it comes in the middle of what the
// program under test does (a commit, a checkpoint) rather than between.
//
// # The server process
//
// The filesystem is served by a process of its own, the test binary run
// again with the mount named in its environment (the package's init
// function serves it then), and FS speaks to it over a pipe. A process that
// serves a FUSE mount must not map files of that mount into memory, as
// SQLite does its WAL index (the -shm file): a page fault on the mapping
// waits for the server, while the Go runtime, to collect garbage, waits for
// the faulting thread, and the server stops with it. Served apart, the
// test's own process may open SQLite on the mount.
//
// The package works on Linux only, as root (mount(2)) or with fusermount;
// ForTest skips a test where no FUSE filesystem can be mounted, and fails
// it under CI=true.
package powerfs
