// Package db stores tiers, user records, admitted requests, metered calls
// and gateway keys in SQLite or PostgreSQL. It implements the storage interfaces of
// package policy, and imports no other package of this module but
// migrations: main opens the store and gives it to the policy.Service, so
// neither api nor web imports db.
//
// Both databases run the same code and, but for a few texts (see dialect)
// and one function of PostgreSQL's (admit_batch), the same statements.
// They differ in who writes: on SQLite one writer goroutine commits every
// write of the process, many per transaction (see writer), and keeps what
// it wrote in memory; on PostgreSQL admissions are decided and committed
// in batches by a function in the database, other writes are a
// transaction each, and per-user locks order the writes of one user
// across every process that shares the database (see pgWriter).
//
// # Counting a window
//
// requests is keyed by (user_id, ts, seq), WITHOUT ROWID on SQLite: one row
// per admitted request and one B-tree insert per admission. A request is
// recorded at the instant it was checked, so rows at one instant share
// their ts; seq numbers each user's rows consecutively and tells them
// apart, and ts never decreases as seq grows (a clock stepped back records
// at the user's newest ts). A window's count is then
// last.seq - first_in_window.seq + 1: two index seeks whatever the window
// holds, never COUNT(*) and never a scan, so a user with 100,000 requests
// today costs what a user with 10 does. On SQLite an account's pool keeps
// its newest rows in a small table of their own, merged into requests in
// bulk, and counts from both (see pool_recent.go).
//
// When a lowered limit leaves a window over its ceiling, retry_after needs
// the window's k-th oldest request, the row numbered first.seq + k - 1. seq
// has no index (it would cost every admission a second insert), so a small
// k is stepped to with OFFSET and a larger one is found by interpolation
// and bisection over ts, each probe two seeks (history.seekSeq): at most 74
// probes for a day, whatever k.
//
// Finished tokens and cost (call_tokens) are kept the same way, keyed by
// (user_id, ts, total, cost_total), where the totals are the user's
// running sums: the tokens in a window are the newest total minus the
// total before the window's oldest row. A user's rows are in the same
// order by time as by either total, so the row where enough tokens have
// left a window is found on that key too, probing it by time: three
// probes on average on steady traffic, at most twice the bits of the
// rows' span of time whatever their spacing (see reaching in calls.go).
// An index on the totals would find it in one seek, and cost every
// finished call a page of its own.
//
// Calls are keyed by id, which sorts by the time a call opened, so a new
// call is written beside the recent ones. calls_open lists each user's
// open calls in expiry order, and only those: it holds as many entries as
// there are calls in flight, in a few pages every batch shares, and a
// finish drops the call's entry rather than moving it among a day of
// finished ones. Finished calls are found by when they finished
// (calls_finished_tier, for the statistics and the cleanup) and, for
// Forget alone, by user (calls_finished_user, written once per call).
//
// What a commit costs is mostly the pages it writes, each once to the WAL
// and once more at the checkpoint, and an index keyed by user writes a
// page per user a batch touches once the users' rows fill pages of their
// own. A new database is faster until they do. In the gateway's benchmark
// (1,000 users, each request a call opened and finished), from an empty
// file, the WAL frames a commit wrote grew from 18 to 70 over ten rounds
// of 5 s, the leaves of each index keyed by user from 3 a commit to 15 and
// nothing else, and the writer's time a job from 82 to 160 µs; past about
// 220 calls a user they grow no more, and ten rounds after 250 calls a
// user hold (the last three 0.91 to 1.11 times the first three in four
// runs), so the load benchmark fills the database so far before its
// rounds. Replacing calls_user, which kept every call of a user and moved
// each at its finish, by calls_open and calls_finished_user took 6 to 10
// KB a request off what a filled database wrote.
//
// Half of those bytes are the checkpoint's, which copies a page once
// however many commits wrote it since the last one: the writer
// checkpoints every 10,000 frames rather than SQLite's 1,000, which wrote
// 14 KB a request where it had written 19 (see checkpoint.go). What
// remains is a page per user per index keyed by user: requests,
// call_tokens and calls_finished_user. Migration 29 dropped the two
// indexes on call_tokens' running totals, a page of each for every call
// finished (see reaching in calls.go): the gateway then served 1.16 times
// the calls a second on a filled database (3,058 against 2,637, two runs
// of each alternated). Staging each batch's rows in time order and
// merging them in bulk, as pool_recent does for pools, would spare pages
// only where a merge holds several rows of each user: with 1,000 users
// and 2,048 rows a merge, two; with 10,000 users, none, and every row
// would be written twice. It is not done for users.
//
// # The SQLite writer
//
// Every write goes through one goroutine that runs queued jobs together in
// one transaction (group commit) and answers each only after COMMIT. With
// synchronous=FULL, when four or more are waiting it waits up to 200 µs
// for more before it commits, so that one fsync serves more of them; a
// lone write never waits. Reads (usage, dry runs, the admin page) use a
// pool of read connections in WAL mode and never wait for the writer.
//
// A commit that fails is answered as a failure to every job of its batch,
// and recorded nowhere. When it failed on an I/O error (a write or an
// fsync, SQLITE_IOERR_*), the writer does not trust its connection again:
// before its next transaction it opens a new one and then closes the old
// (in that order, so that the WAL index is kept and the failed commit,
// whose pages are in the WAL, stays invisible), forgets what it remembers
// of users and tiers, and logs that it does so. Until a
// commit succeeds, Ping also writes (a page that nothing reads) and reports
// whether that commits, so that a health check says the disk fails and
// says when it works again even if nothing else writes.
//
// The writer remembers, for each user, the newest row and, per window, a
// cursor on the oldest rows after the window's cutoff (up to eight).
// Cutoffs move forward with the clock, so the next admission usually finds
// its answers there: most admissions are a single INSERT with no query
// before it. What it remembers is dropped for the users a rollback, a
// cleanup step or a Forget touches, and entirely when another process
// wrote the file (PRAGMA data_version, read once per batch).
//
// # What -sync promises
//
// With SyncFull (the default) every commit fsyncs the WAL before the writer
// answers, so every answered admission survives power loss and an OS
// crash. With SyncNormal commits are not fsynced (the WAL is, at
// checkpoints): every answered admission survives a crash of the process,
// but the last commits before a power loss may be lost, and with them the
// requests they recorded, so a window may under-count after such a loss.
// SQLite keeps the file consistent either way. What NORMAL loses is the
// newest commits, those since the WAL's last sync (at a checkpoint, about
// every 1,000 pages written), never an older one alone. The module's
// TestPowerCut shows both on a filesystem that forgets what was not synced
// (package dbtest/powerfs), cutting the power under load.
//
// # Tiers and user records
//
// Tiers are cached in memory, and no check decides on a stale tier.
// Triggers on tiers count every write in tier_version, whoever makes it
// (this service, policyguard tiers import in another process, the sqlite3
// shell or psql). A recording check takes its tier from the cache; inside
// the admission the writer confirms it against its own copy of the tiers,
// read again after any tier write and whenever data_version shows another
// process wrote, and a tier that changed starts the check again. Reads
// (dry runs, usage, the admin API) read tier_version first and reload when
// it moved. User records are cached and confirmed the same way. Every
// change to a tier or a record writes its audit row in the same
// transaction; a write may carry a precondition (create only, or replace
// only the version read), checked in that transaction too.
//
// # PostgreSQL
//
// Every write takes a transaction-scoped advisory lock on each user it
// touches, pg_advisory_xact_lock(1, key) where key is the 32-bit FNV-1a
// hash of the user id, so one user's admissions, finishes and keepalives
// run one after another across every replica while different users' run
// in parallel (two users that share a key only wait for each other).
// Under READ COMMITTED each statement after the lock sees everything
// committed before it.
//
// A check's admission is planned (see policy.Plan): its instant, limits,
// record and call are known before its rules run. The admissions waiting
// at one moment form a batch, up to WithMaxBatch of them, run by one of
// the replica's batch loops (one per two cores, at most four, at most
// half the pool), each holding a connection while it has work, so that
// under load batches grow rather than multiply. A batch begins a
// transaction and calls admit_batch (migration 12) with the batch in
// arrays: it takes the users' locks in ascending order of their keys (so
// batches on any number of replicas never wait for each other in a
// cycle), reads the tiers' version, and decides each admission in order,
// each seeing what the ones before it recorded: it confirms the tier and
// record the check began with, counts each window from two seeks on
// (user_id, ts, seq), settles a metered user's expired calls and counts
// their tokens, and records the request and opens the call when every
// limit holds. It returns what it read. The rules of package policy then
// run on that, each decide answered from memory (anything else it asks,
// such as the k-th request of retry_after after a lowered limit, is read
// in the same transaction), and the batch commits, once for all (group
// commit), only if every decide agrees with what the function recorded.
// On any difference the batch rolls back and runs again without that
// admission, which is decided alone; so the Go rules stay the rule, and
// the function only saves round trips. The COMMIT travels with the next
// batch's BEGIN and call, in one round trip, and the server answers it
// before running them: under load a batch is one round trip, and a lone
// admission two (the call, then COMMIT).
//
// An admission whose tier or record changed since the check read it
// (through another replica, a tiers import or psql) is decided alone, as
// is every admission of a batch that failed (a lock held elsewhere past
// lock_timeout), so that it fails alone if it must. Alone, an admission is
// five round trips in a transaction of its own (BEGIN with the lock; the
// tiers' version, the record and newest request; the windows' oldest
// requests; the insert; COMMIT), its rules run between them. A finish or
// a keepalive is one statement, finish_call or keepalive_call (migration
// 14), its own transaction: what the Go code does on SQLite, with the same
// locks in the same order (account, then user), the store's conformance
// and model tests holding the two to the same outcomes. Forget and the
// cleanup are a transaction each (a step of the cleanup, one), and a dry
// run's reads a read-only one.
//
// A replica's memory of tiers and records is a hint each recording check
// confirms in its own transaction, after the lock, so a change made
// through any replica, another process or psql decides the very next
// check on every replica with nothing to wait for; LISTEN/NOTIFY was not
// used because a notification arrives after the change commits, so a
// check could slip in between. Changes to tiers and records take one more
// advisory lock, so two replicas cannot both pass a rule only one may.
// The cleanup runs on one replica at a time, under a session advisory lock
// it only tries; as it walks users in the order of their ids, it waits
// only for the first user's lock of each step and only tries the others.
// A replica killed leaves nothing half done: its transactions roll back
// and its locks go with its connections.
//
// # Gateway keys
//
// gateway_keys holds each key's id, user (NULL for a service key), note,
// creation and last use, and the SHA-256 of its secret, never the secret.
// Nothing of it is cached: the gateway reads the row by that hash (a
// unique index) on every request, on the read pool, a statement prepared
// once, so a key revoked through any replica, whose row is then deleted,
// is refused by every replica from the next request on. A key's last use
// is written through the writer, at most once a minute per key and
// process, and never moves back.
//
// # Prices
//
// price_versions and prices hold the versions of the price table, each
// the whole table, in picodollars per million tokens. A version is never
// changed once saved, so every process keeps them all in memory, entries
// included, and a reload reads only the ids it has not seen: PriceOf, the
// price of a model at an instant, reads no storage. A version saved
// through a store is in its memory at once; one saved elsewhere (another
// replica, policyguard prices import) is read by the next PricesAt or
// PriceVersions, and by every store within a second (priceRefresh, one
// query of the ids a second). Saves take the admin lock on PostgreSQL, so
// ids commit in the order they are taken.
//
// # Admins and the audit log
//
// admins keeps each named admin's role and the SHA-256 of its token; a
// request's token is looked up there (one indexed read on the read pool)
// every time, never cached, so a revocation committed by any process holds
// from the next request on every replica. A revoked row stays for the
// log's sake and its page sessions are deleted with it. last_used_at is
// written at most once a minute per admin per process.
//
// audit_log holds every change of every kind. Each write that changes
// something (UpdateTiers, UpdateUsers, PutAccount, PutKey, Forget,
// SavePrices, the admins' ...) inserts its entry in the same transaction,
// under the actor its caller's context carries (policy.Actor), read before
// the job is queued since the writer runs jobs on a context of its own; a
// failure of either undoes both. Changes to admins take the admin lock, so
// two admins demoting each other at once cannot leave none of role admin.
//
// # Agent runs
//
// runs holds a row per run, its counts including its descendants', and
// run_tree each run's ancestors with itself, so that a run's chain, and
// a run's subtree, is one index range whatever the depth. A check naming
// a run reads the chain in its user's admission (RunChain) and, when
// admitted, inserts a new run and its rows of run_tree and adds the
// request to every run of the chain, in the same transaction as the
// request: on PostgreSQL that transaction is the per-check one under the
// user's lock (a run's check joins no batch), and the lock covers the
// tree, which belongs to one user. That update counts the request's call
// too: its reservation and one more call in flight (in_flight). What
// changes a call after (its finish, its expiry, a finish after its
// expiry) reaches the rows through a trigger on calls, so finish_call,
// the settling of expired calls and the Go paths need not know of runs;
// a deleted call changes no run (only finished calls are pruned), so a
// run outlives its calls' cleanup. A read of a run takes off in_flight
// the calls of its subtree past their expiry but not yet settled (none
// in the writer, which settles a user's expired calls before deciding).
// Runs are deleted policy.RunKeepFor after their last request.
//
// In the writer a check in a run cost 1.4 to 1.5 times one outside a run
// (wrk, SQLite FULL, 10,000 users, calls never finished) when it counted
// its subtree's calls in flight one by one over every open call of its
// user and the call's insert updated the chain a second time from a
// trigger; migration 28 made it the counter, one update and an empty
// range.
//
// # Cleanup
//
// PruneEvery deletes rows older than policy.KeepFor (a day, the longest
// window, and an hour more, so that a clock that ran up to an hour fast
// when it deleted and was set back after still finds every request that
// counts), a thousand at a time, each step a few milliseconds in the
// writer's transaction, so checks never wait behind it for long. Requests
// and finished tokens are deleted user by user; calls expired by the
// cutoff are settled user by user (walking the open calls only), then
// finished calls are deleted oldest first, whoever made them.
package db
