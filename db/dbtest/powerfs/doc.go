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
// backing folder again (Mount, or ForTest) to go on. The package works on
// Linux only; ForTest skips a test where FUSE cannot be mounted.
package powerfs
