package db

// On SQLite a page a commit changes is written twice: appended to the WAL
// at COMMIT, and copied into the database file by a checkpoint, which
// copies a page once however many commits wrote it since the last one.
// SQLite's own checkpoint runs in the committing connection, the writer,
// once the WAL holds wal_autocheckpoint frames, 1,000 by default: under
// the gateway's load about every 50 ms, so often that it copied nearly
// every frame, since the pages of the indexes keyed by user (one a user,
// see the package doc) are rewritten by commits seconds apart, not
// milliseconds.
//
// So the writer checkpoints every walRestartFrames frames (about 40 MiB of
// 4 KiB pages, the most the WAL then holds). With 1,000 users the gateway
// then wrote 14.1 KB a request where it had written 18.7 KB, at the same
// number of requests since an empty database (42,000): each checkpoint
// takes longer, but there are ten times fewer, and together they copy
// about half as much.
//
// Checkpointing on another connection instead, in the background once a
// second so that the writer never waits for one, gave that back: a second
// under load is fewer frames than 10,000, and the bytes a request were
// only 3 to 8% below the default's.

// walRestartFrames is the writer's wal_autocheckpoint.
const walRestartFrames = 10_000
