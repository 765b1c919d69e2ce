package db

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/policyguard/policyguard/policy"
)

var _ policy.Planner = (*Store)(nil)

// AdmitPlanned implements policy.Planner. On PostgreSQL a planned
// admission joins a batch (see pgWriter.admitPlanned); on SQLite, whose
// writer already decides admissions in memory and commits them in groups,
// it is Admit.
func (s *Store) AdmitPlanned(ctx context.Context, userID string, p *policy.Plan, decide func(policy.History) (policy.Admission, error)) error {
	if w, ok := s.writer.(*pgWriter); ok {
		return w.admitPlanned(ctx, userID, p, decide)
	}
	return s.writer.admit(ctx, userID, decide)
}

// errRedo answers a planned admission that its batch did not record: its
// caller decides it alone, as Admit does.
var errRedo = errors.New("admission left to decide alone")

// pgJob is one planned admission in a batch.
type pgJob struct {
	ctx    context.Context
	user   string
	plan   *policy.Plan
	decide func(policy.History) (policy.Admission, error)
	errc   chan error

	f  admitFacts // what admit_batch read and did
	st userState  // the history's, from f
}

var pgJobPool = sync.Pool{New: func() any { return &pgJob{errc: make(chan error, 1)} }}

// admitPlanned runs the admission in a batch with the others waiting at
// the same moment: one statement, admit_batch, decides and records them
// all, and one COMMIT makes them durable together (group commit, as the
// SQLite writer does). Before that COMMIT each admission's decide runs on
// what the statement read, which answers every question the rules ask of
// it (the rare others are read in the same transaction), and the batch
// commits only if each decide agrees with what the statement recorded.
// Otherwise the batch is rolled back and run again without the admission,
// which is decided alone, as are those the statement could not confirm
// (a tier or record changed since the check read it) and those of a batch
// that failed.
func (w *pgWriter) admitPlanned(ctx context.Context, user string, p *policy.Plan, decide func(policy.History) (policy.Admission, error)) error {
	if !plannable(p) {
		return w.admit(ctx, user, decide)
	}
	if err := w.enter(); err != nil {
		return err
	}
	j := pgJobPool.Get().(*pgJob)
	j.ctx, j.user, j.plan, j.decide = ctx, user, p, decide
	defer w.running.Done()
	err := w.submit(j)
	*j = pgJob{errc: j.errc}
	pgJobPool.Put(j)
	if err == errRedo {
		w.alone.Add(1)
		return w.admitAlone(ctx, user, decide)
	}
	return err
}

// submit queues j and waits for its answer. A caller that goes away
// before a batch takes its admission has nothing recorded; once taken, it
// waits for the outcome, as the caller must not believe nothing happened.
func (w *pgWriter) submit(j *pgJob) error {
	select {
	case w.jobs <- j:
	case <-j.ctx.Done():
		return j.ctx.Err()
	}
	return <-j.errc
}

// plannable reports whether admit_batch can decide p: a plan with its
// tiers and, when metered, a call it can store, unpriced, under no spend
// limit: admit_batch counts tokens alone. A check with spend is decided
// in a transaction of its own, by the same code as on SQLite.
func plannable(p *policy.Plan) bool {
	return p != nil && p.Tier != nil && p.Base != nil &&
		(p.Call == nil || policy.ValidCallID(p.Call.ID) && p.Call.Price == nil && !p.Tier.Limits.LimitsSpend())
}

// batchLoop runs the admissions waiting in batches of up to maxBatch, on
// a connection it keeps while there is work, until the queue is closed.
// Each round trip commits the batch before (its decides agreed, see run)
// and runs the next; so under load a batch costs one round trip, and a
// lone admission two (the statement, then COMMIT). Several loops run at
// once (see pgBatches).
func (w *pgWriter) batchLoop() {
	defer w.batchers.Done()
	b := &pgBatch{w: w}
	defer b.release()
	open := true
	for open || b.inTx {
		// With a batch to commit, take only what is waiting: the commit
		// goes now, with whatever is there.
		var jobs []*pgJob
		jobs, open = b.take(open, !b.inTx)
		b.run(jobs)
		clear(jobs) // answered or pending
		if !b.inTx {
			b.release() // idle: the connection goes back to the pool
		}
	}
}

// pgBatch is one batch loop's state: the connection it holds, the batch
// whose decides agreed and that awaits its COMMIT, and buffers reused
// from one batch to the next.
type pgBatch struct {
	w        *pgWriter
	conn     *sql.Conn // nil between spells of work
	inTx     bool      // a transaction is open on conn
	pending  []*pgJob  // in that transaction, to commit
	skipped  []*pgJob  // not confirmed by admit_batch, to decide alone
	jobs     []*pgJob
	args     batchArgs
	params   [][]byte
	paramBuf []byte
}

// take returns the admissions waiting, up to maxBatch, after waiting for
// the first when block is set; open is false once the queue is closed.
func (b *pgBatch) take(open, block bool) (jobs []*pgJob, stillOpen bool) {
	w := b.w
	jobs = b.jobs[:0]
	if open && block {
		j, ok := <-w.jobs
		if !ok {
			return jobs, false
		}
		jobs = append(jobs, j)
	}
	for open && len(jobs) < w.maxBatch {
		select {
		case j, ok := <-w.jobs:
			if !ok {
				return jobs, false
			}
			jobs = append(jobs, j)
		default:
			b.jobs = jobs
			return jobs, true
		}
	}
	b.jobs = jobs
	return jobs, open
}

// run commits the pending batch, if any, and runs jobs in a new
// transaction, which stays open with jobs pending when every decide
// agrees with admit_batch; every other job is answered: failed, or left
// to decide alone (errRedo). When a decide disagrees (or fails), the
// transaction rolls back and the others run again without its job, which
// is decided alone.
func (b *pgBatch) run(jobs []*pgJob) {
	// A caller that gave up before its admission started gets nothing
	// recorded.
	live := jobs[:0]
	for _, j := range jobs {
		if err := j.ctx.Err(); err != nil {
			j.errc <- err
			continue
		}
		live = append(live, j)
	}
	jobs = live
	for {
		if !b.inTx && len(jobs) == 0 {
			return
		}
		redo, stale := b.try(jobs)
		if stale {
			// The tiers changed since the store read them: until it reads
			// them again, every admission would be left to decide alone.
			// Commit first, not to hold locks meanwhile. (A failure
			// leaves the tiers as they were, for the next check to read.)
			b.try(nil)
			ctx, cancel := context.WithTimeout(context.Background(), b.w.batchTimeout)
			_, _ = b.w.freshTiers(ctx)
			cancel()
		}
		// The admissions admit_batch could not confirm, decided alone
		// on the tiers as they are now.
		answer(b.skipped, errRedo)
		clear(b.skipped)
		b.skipped = b.skipped[:0]
		if redo < 0 {
			return
		}
		jobs[redo].errc <- errRedo
		jobs = slices.Delete(jobs, redo, redo+1)
	}
}

// try commits the pending batch and runs jobs, in one round trip. It
// returns -1, or, after rolling jobs back, the index of the first job
// whose decide disagreed with admit_batch (or failed), to be decided
// alone. stale reports that admit_batch found the tiers changed since
// the store read them.
func (b *pgBatch) try(jobs []*pgJob) (redo int, stale bool) {
	w := b.w
	ctx, cancel := context.WithTimeout(context.Background(), w.batchTimeout)
	defer cancel()
	tiers := w.tiers.Load()
	if len(jobs) > 0 {
		b.args.fill(jobs, tiers)
	}
	if b.conn == nil {
		conn, err := w.db.Conn(ctx)
		if err != nil {
			answer(jobs, unavailable(err)) // nothing pending without a connection
			return -1, false
		}
		b.conn = conn
	}
	err := b.conn.Raw(func(dc any) error { return b.exchange(ctx, dc.(*stdlib.Conn).Conn(), jobs) })
	if b.inTx {
		// The exchange failed before it sent the COMMIT: nothing of
		// the pending batch is recorded, and each is decided alone.
		b.committed(errRedo)
	}
	if len(jobs) > 0 && err == nil {
		b.inTx = true
	}
	if err != nil {
		// Nothing of jobs is recorded: no COMMIT was sent for them. The
		// batch may have failed for one of its users (a lock another
		// transaction held too long): each admission is decided alone,
		// and fails alone if it must.
		b.discard()
		answer(jobs, errRedo)
		return -1, false
	}
	if len(jobs) == 0 {
		return -1, false
	}
	tx := &writeTx{ctx: ctx, conn: b.conn, d: postgresDialect, tiers: w.tiers}
	h := &tx.hist
	for i, j := range jobs {
		if j.f.status != 0 {
			continue
		}
		h.reset(tx, tx, j.user)
		if err := h.planned(j, tiers); err != nil {
			// A record this version cannot read: decided alone, it fails
			// alone.
			b.rollback(ctx)
			return i, false
		}
		a, err := j.decide(h)
		if err == nil && j.f.agrees(&a, j.plan) {
			continue
		}
		if err == nil {
			w.disagreements.Add(1)
		}
		b.rollback(ctx)
		return i, false
	}
	for _, j := range jobs {
		if j.f.status == 0 {
			b.pending = append(b.pending, j)
			continue
		}
		stale = stale || j.f.version != tiers.version
		b.skipped = append(b.skipped, j)
	}
	if len(b.pending) == 0 {
		// Nothing to keep: every admission was left to decide alone,
		// and those need the locks this transaction holds.
		b.rollback(ctx)
	}
	return -1, stale
}

// committed answers the pending batch once its COMMIT's outcome is
// known: nil, an error (unknown when the connection broke before the
// answer came), or errRedo when no COMMIT was sent.
func (b *pgBatch) committed(err error) {
	if err == nil {
		b.w.batched.Add(int64(len(b.pending)))
	} else if err != errRedo {
		err = unavailable(err)
	}
	b.inTx = false
	answer(b.pending, err)
	clear(b.pending)
	b.pending = b.pending[:0]
}

// answer answers every job with err.
func answer(jobs []*pgJob, err error) {
	for _, j := range jobs {
		j.errc <- err
	}
}

// rollback ends the open transaction, discarding the connection when it
// cannot.
func (b *pgBatch) rollback(ctx context.Context) {
	b.inTx = false
	if _, err := b.conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
		b.discard()
	}
}

// discard closes the connection without returning it to the pool: its
// session may be in a transaction or an unknown state.
func (b *pgBatch) discard() {
	b.inTx = false
	if b.conn != nil {
		discard(b.conn)
		b.conn.Close()
		b.conn = nil
	}
}

// release returns the connection to the pool, with no transaction open.
func (b *pgBatch) release() {
	if b.conn != nil {
		b.conn.Close()
		b.conn = nil
	}
}

// The statements a batch loop prepares on each connection it holds. A
// batch's BEGIN and COMMIT are prepared too, so that the server does not
// parse them for every batch.
const (
	admitBatchStmt = "policyguard_admit_batch"
	beginStmt      = "policyguard_begin"
	commitStmt     = "policyguard_commit"
)

// admitBatch calls admit_batch (migration 12) with the batch's arrays.
const admitBatch = `SELECT * FROM admit_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)`

// admitBatchOIDs are the types of admitBatch's parameters.
var admitBatchOIDs = []uint32{pgtype.Int4ArrayOID, pgtype.Int8OID, pgtype.TextArrayOID, pgtype.Int8ArrayOID, pgtype.Int8ArrayOID,
	pgtype.Int8ArrayOID, pgtype.BoolArrayOID, pgtype.Int2ArrayOID, pgtype.TextArrayOID, pgtype.TextArrayOID,
	pgtype.TextArrayOID, pgtype.TextArrayOID, pgtype.TextArrayOID, pgtype.TextArrayOID,
	pgtype.Int8ArrayOID, pgtype.Int8ArrayOID, pgtype.Int8ArrayOID, pgtype.Int8ArrayOID}

// binaryFormat asks for every parameter and column in binary.
var binaryFormat = []int16{pgtype.BinaryFormatCode}

// exchange sends, in one round trip, the pending batch's COMMIT (and a
// request to answer it at once, to answer its callers while the rest
// runs), then BEGIN and admit_batch with jobs, reading what it returns
// into them; the new transaction stays open.
func (b *pgBatch) exchange(ctx context.Context, c *pgx.Conn, jobs []*pgJob) error {
	pc := c.PgConn()
	// Prepared once per connection: pgx remembers them.
	for _, st := range [...][2]string{{admitBatchStmt, admitBatch}, {beginStmt, "BEGIN"}, {commitStmt, "COMMIT"}} {
		if _, err := c.Prepare(ctx, st[0], st[1]); err != nil {
			return err
		}
	}
	if len(jobs) > 0 {
		if err := b.encode(c.TypeMap()); err != nil {
			return err
		}
	}
	p := pc.StartPipeline(ctx)
	commit := b.inTx
	if commit {
		p.SendQueryPrepared(commitStmt, nil, nil, nil)
		p.SendFlushRequest()
	}
	if len(jobs) > 0 {
		p.SendQueryPrepared(beginStmt, nil, nil, nil)
		p.SendQueryPrepared(admitBatchStmt, b.params, binaryFormat, binaryFormat)
	}
	p.SendPipelineSync()
	if err := p.Flush(); err != nil {
		if commit {
			b.committed(err) // sent or not: unknown
		}
		p.Close()
		return err
	}
	if commit {
		err := pipelineExec(p)
		b.committed(err)
		if err != nil {
			p.Close()
			return err
		}
	}
	if len(jobs) > 0 {
		if err := pipelineExec(p); err != nil {
			p.Close()
			return err
		}
		res, err := p.GetResults()
		if err != nil {
			p.Close()
			return err
		}
		rr, ok := res.(*pgconn.ResultReader)
		if !ok {
			p.Close()
			return fmt.Errorf("admit_batch: unexpected %T", res)
		}
		n := 0
		for rr.NextRow() {
			if n < len(jobs) {
				if err := jobs[n].f.decode(rr.Values()); err != nil {
					rr.Close()
					p.Close()
					return err
				}
			}
			n++
		}
		if _, err := rr.Close(); err != nil {
			p.Close()
			return err
		}
		if n != len(jobs) {
			p.Close()
			return fmt.Errorf("admit_batch answered %d admissions of %d", n, len(jobs))
		}
	}
	if res, err := p.GetResults(); err != nil {
		p.Close()
		return err
	} else if _, ok := res.(*pgconn.PipelineSync); !ok {
		p.Close()
		return fmt.Errorf("pipeline: unexpected %T", res)
	}
	return p.Close()
}

// pipelineExec reads the outcome of a statement of p that returns no rows.
func pipelineExec(p *pgconn.Pipeline) error {
	res, err := p.GetResults()
	if err != nil {
		return err
	}
	rr, ok := res.(*pgconn.ResultReader)
	if !ok {
		return fmt.Errorf("pipeline: unexpected %T", res)
	}
	_, err = rr.Close()
	return err
}

// encode sets params to admit_batch's arguments, in binary.
func (b *pgBatch) encode(m *pgtype.Map) error {
	a := &b.args
	values := [...]any{a.keys, a.version, a.users, a.now, a.ceil, a.tierID, a.tierSame,
		a.userMode, a.userTier, a.userLim, a.callID, a.callTier, a.callModel, a.callUpstream, a.tokens, a.tokLim, a.maxConc, a.expires}
	var ends [len(values)]int
	buf := b.paramBuf[:0]
	for i, v := range values {
		var err error
		if buf, err = m.Encode(admitBatchOIDs[i], pgtype.BinaryFormatCode, v, buf); err != nil {
			return fmt.Errorf("admit_batch argument %d: %w", i+1, err)
		}
		ends[i] = len(buf)
	}
	b.paramBuf = buf
	b.params = b.params[:0]
	start := 0
	for _, end := range ends {
		b.params = append(b.params, buf[start:end:end])
		start = end
	}
	return nil
}

// batchArgs are admit_batch's arguments: element i of each array is
// admission i's (see the migration).
type batchArgs struct {
	keys     []int32
	version  int64
	users    []string
	now      []int64
	ceil     []int64
	tierID   []int64
	tierSame []bool
	userMode []int16
	userTier []pgtype.Text
	userLim  []pgtype.Text // the record's overrides, as the users table's limits column holds them
	callID   []pgtype.Text
	callTier []pgtype.Text
	// callModel and callUpstream name what an unpriced call was asked
	// for, kept as SQLite keeps them.
	callModel, callUpstream []pgtype.Text
	tokens                  []int64
	tokLim                  []pgtype.Int8
	maxConc                 []pgtype.Int8
	expires                 []int64
}

// Modes of confirming a user's record (p_user_mode).
const (
	userUnconfirmed int16 = iota // decide does not confirm the record
	userNone                     // the user has no record
	// the record is p_user_* and names no account: a member's check
	// draws on its pool too and is never planned (see AdmitPooled), so
	// admit_batch (as migration 13 remade it) leaves one whose record
	// gained an account to decide alone, where it starts again
	userRecord
)

// fill sets the arguments of jobs, whose tiers are confirmed against
// tiers.
func (a *batchArgs) fill(jobs []*pgJob, tiers *tierCache) {
	a.keys = a.keys[:0]
	a.version = tiers.version
	a.users, a.now, a.ceil, a.tierID, a.tierSame = a.users[:0], a.now[:0], a.ceil[:0], a.tierID[:0], a.tierSame[:0]
	a.userMode, a.userTier, a.userLim = a.userMode[:0], a.userTier[:0], a.userLim[:0]
	a.callID, a.callTier, a.tokens, a.tokLim, a.maxConc, a.expires = a.callID[:0], a.callTier[:0], a.tokens[:0], a.tokLim[:0], a.maxConc[:0], a.expires[:0]
	a.callModel, a.callUpstream = a.callModel[:0], a.callUpstream[:0]
	for _, j := range jobs {
		p := j.plan
		a.keys = append(a.keys, userLockKey(j.user))
		a.users = append(a.users, j.user)
		a.now = append(a.now, p.Now.UnixMicro())
		for _, w := range policy.Windows {
			a.ceil = append(a.ceil, p.Tier.Ceiling(w))
		}
		a.tierID = append(a.tierID, p.Tier.ID)
		cur, ok := tiers.byName[p.Base.Name]
		a.tierSame = append(a.tierSame, ok && policy.SameLimits(&cur, p.Base))

		mode, tier, lim := userUnconfirmed, pgtype.Text{}, pgtype.Text{}
		switch {
		case !p.ConfirmUser:
		case p.User == nil:
			mode = userNone
		default:
			mode = userRecord
			r := userRowOf(p.User)
			tier = pgtype.Text{String: r.Tier.String, Valid: r.Tier.Valid}
			lim = pgtype.Text{String: r.Limits, Valid: true}
		}
		a.userMode, a.userTier, a.userLim = append(a.userMode, mode), append(a.userTier, tier), append(a.userLim, lim)

		c := p.Call
		if c == nil {
			a.callID, a.callTier = append(a.callID, pgtype.Text{}), append(a.callTier, pgtype.Text{})
			a.callModel, a.callUpstream = append(a.callModel, pgtype.Text{}), append(a.callUpstream, pgtype.Text{})
			a.tokens, a.maxConc, a.expires = append(a.tokens, 0), append(a.maxConc, pgtype.Int8{}), append(a.expires, 0)
			a.tokLim = append(a.tokLim, pgtype.Int8{}, pgtype.Int8{}, pgtype.Int8{})
			continue
		}
		a.callID = append(a.callID, pgtype.Text{String: c.ID, Valid: true})
		a.callTier = append(a.callTier, pgtype.Text{String: c.Tier, Valid: true})
		a.callModel = append(a.callModel, pgtype.Text{String: c.Model, Valid: c.Model != ""})
		a.callUpstream = append(a.callUpstream, pgtype.Text{String: c.Upstream, Valid: c.Upstream != ""})
		a.tokens = append(a.tokens, c.Reserved)
		a.expires = append(a.expires, c.ExpiresAt.UnixMicro())
		for _, w := range policy.Windows {
			v, ok := p.Tier.TokenLimit(w)
			a.tokLim = append(a.tokLim, pgtype.Int8{Int64: v, Valid: ok})
		}
		var mc pgtype.Int8
		if c := p.Tier.Limits[policy.MaxConcurrent]; c != nil {
			mc = pgtype.Int8{Int64: *c, Valid: true}
		}
		a.maxConc = append(a.maxConc, mc)
	}
	// Locks in ascending order, each once: two batches that share users
	// take them in the same order, so neither waits for the other while
	// holding what the other waits for.
	slices.Sort(a.keys)
	a.keys = slices.Compact(a.keys)
}

// admitFacts is admit_batch's row of one admission.
type admitFacts struct {
	status          int16 // 0 decided; 1 its tier, 2 its record not confirmed: nothing done
	version         int64
	lastTS, lastSeq pgtype.Int8
	first           [len(policy.Windows)]struct{ ts, seq pgtype.Int8 }
	userFound       pgtype.Bool
	userTier        pgtype.Text
	userLim         pgtype.Text // the record's limits column, as text
	userNote        pgtype.Text
	userUpdated     pgtype.Int8
	recorded        bool
	recTS           pgtype.Int8
	open, reserved  pgtype.Int8
	tokTS, tokTotal pgtype.Int8
	tokFirst        [len(policy.Windows)]struct{ ts, before pgtype.Int8 }
}

// decode reads admit_batch's row of one admission, its columns in binary.
func (f *admitFacts) decode(v [][]byte) error {
	const columns = 27
	if len(v) != columns {
		return fmt.Errorf("admit_batch: %d columns, want %d", len(v), columns)
	}
	if len(v[0]) != 2 || len(v[1]) != 8 {
		return fmt.Errorf("admit_batch: status or version of %d and %d bytes", len(v[0]), len(v[1]))
	}
	f.status, f.version = int16(binary.BigEndian.Uint16(v[0])), int64(binary.BigEndian.Uint64(v[1]))
	ints := []*pgtype.Int8{&f.lastTS, &f.lastSeq}
	for i := range f.first {
		ints = append(ints, &f.first[i].ts, &f.first[i].seq)
	}
	n := 2
	for _, p := range ints {
		if err := decodeInt8(p, v[n]); err != nil {
			return err
		}
		n++
	}
	f.userFound = pgtype.Bool{Bool: len(v[n]) == 1 && v[n][0] != 0, Valid: v[n] != nil}
	f.userTier = pgtype.Text{String: string(v[n+1]), Valid: v[n+1] != nil}
	f.userLim = pgtype.Text{String: string(v[n+2]), Valid: v[n+2] != nil}
	n += 3
	f.userNote = pgtype.Text{String: string(v[n]), Valid: v[n] != nil}
	n++
	if err := decodeInt8(&f.userUpdated, v[n]); err != nil {
		return err
	}
	f.recorded = len(v[n+1]) == 1 && v[n+1][0] != 0
	n += 2
	ints = append(ints[:0], &f.recTS, &f.open, &f.reserved, &f.tokTS, &f.tokTotal)
	for i := range f.tokFirst {
		ints = append(ints, &f.tokFirst[i].ts, &f.tokFirst[i].before)
	}
	for _, p := range ints {
		if err := decodeInt8(p, v[n]); err != nil {
			return err
		}
		n++
	}
	return nil
}

// decodeInt8 reads a BIGINT in binary, NULL when b is nil.
func decodeInt8(p *pgtype.Int8, b []byte) error {
	switch {
	case b == nil:
		*p = pgtype.Int8{}
	case len(b) == 8:
		*p = pgtype.Int8{Int64: int64(binary.BigEndian.Uint64(b)), Valid: true}
	default:
		return fmt.Errorf("admit_batch: a BIGINT of %d bytes", len(b))
	}
	return nil
}

// planned sets h, freshly reset for j's user on the batch's transaction,
// to what admit_batch read for j before deciding it: the newest request,
// the oldest in each window, the record, the ledger. Anything else decide
// asks is read in the transaction, which the rows the batch recorded for
// later admissions of the same user do not change: they come after every
// row j's decide could ask about.
func (h *history) planned(j *pgJob, tiers *tierCache) error {
	f, p := &j.f, j.plan
	now := p.Now.UnixMicro()
	h.loaded, h.any, h.lastTS, h.lastSeq = true, f.lastTS.Valid, f.lastTS.Int64, f.lastSeq.Int64
	h.version, h.versionRead, h.tiersAt = f.version, true, tiers
	for i, w := range policy.Windows {
		r := f.first[i]
		h.firstAfter[i] = firstRow{cutoff: now - w.Duration().Microseconds(), ts: r.ts.Int64, seq: r.seq.Int64, found: r.ts.Valid}
	}
	h.firstAfterFilled = len(policy.Windows)
	j.st = userState{any: h.any, lastTS: h.lastTS, lastSeq: h.lastSeq}
	h.st = &j.st
	if p.ConfirmUser {
		// A record admit_batch confirmed names no account, and the
		// record read here has none.
		j.st.recordLoaded = true
		if f.userFound.Bool {
			r := userRow{UserID: j.user, Tier: nullString(f.userTier), Limits: f.userLim.String,
				Note: f.userNote.String, UpdatedAt: f.userUpdated.Int64}
			u, err := r.record()
			if err != nil {
				return err
			}
			j.st.record = &u
		}
	}
	if p.Call != nil {
		l := &h.led
		*l = ledger{q: h.q, user: h.user, st: ledgerState{anyRow: f.tokTS.Valid, lastTS: f.tokTS.Int64, lastTotal: f.tokTotal.Int64,
			open: f.open.Int64, reserved: policy.Amounts{policy.MeasureTokens: f.reserved.Int64}, nextExpiry: noExpiry}}
		for i, w := range policy.Windows {
			// admit_batch answers the oldest row holding tokens (some,
			// not how many: a planned check reads no more) and no cost,
			// which a planned check, under no spend limit, never asks.
			r := f.tokFirst[i]
			l.firsts[i] = tokFirst{cutoff: now - w.Duration().Microseconds(), ts: r.ts.Int64, before: r.before.Int64, found: r.ts.Valid}
			if r.ts.Valid {
				l.firsts[i].tokens = 1
			}
		}
		l.nfirst = len(policy.Windows)
		h.ledgerRead, h.ledgerAt = true, now
	}
	return nil
}

func nullString(t pgtype.Text) sql.NullString {
	return sql.NullString{String: t.String, Valid: t.Valid}
}

// agrees reports whether a, what decide made of j's plan, is what
// admit_batch recorded: the same request at the same instant under the
// same tier, and the same call.
func (f *admitFacts) agrees(a *policy.Admission, p *policy.Plan) bool {
	if a.Record != f.recorded {
		return false
	}
	if !a.Record {
		return true
	}
	if a.At.UnixMicro() != f.recTS.Int64 || a.TierID != p.Tier.ID || (a.Call == nil) != (p.Call == nil) {
		return false
	}
	if c := a.Call; c != nil {
		pc := p.Call
		return c.ID == pc.ID && c.Tier == pc.Tier && c.Reserved == pc.Reserved &&
			c.OpenedAt.UnixMicro() == p.Now.UnixMicro() && c.ExpiresAt.UnixMicro() == pc.ExpiresAt.UnixMicro()
	}
	return true
}

// pgBatches is how many batch loops a store runs on PostgreSQL, each
// holding a connection of the pool while it has work: one per two cores
// of this machine, at least one, at most four and at most half the pool.
// One loop's next batch fills while its batch runs, so under load batches
// grow rather than multiply; more loops would make each batch smaller,
// and a small batch costs more per admission than a large one.
func pgBatches(poolSize int) int {
	return max(min(runtime.GOMAXPROCS(0)/2, poolSize/2, 4), 1)
}
