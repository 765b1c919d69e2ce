package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"
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
// (a tier or record changed since the check read it).
func (w *pgWriter) admitPlanned(ctx context.Context, user string, p *policy.Plan, decide func(policy.History) (policy.Admission, error)) error {
	if !plannable(p) {
		return w.admit(ctx, user, decide)
	}
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		return errClosed
	}
	w.running.Add(1)
	w.mu.RUnlock()
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
// tiers and, when metered, a call it can store.
func plannable(p *policy.Plan) bool {
	return p != nil && p.Tier != nil && p.Base != nil &&
		(p.Call == nil || policy.ValidCallID(p.Call.ID))
}

// batchLoop takes the admissions waiting, up to maxBatch, and runs them
// as one batch, until the queue is closed. Several run at once (see
// pgBatches), each on a connection of its own: while one commits, the
// next batch fills.
func (w *pgWriter) batchLoop() {
	defer w.batchers.Done()
	b := &pgBatch{w: w}
	jobs := make([]*pgJob, 0, w.maxBatch)
	for j := range w.jobs {
		jobs = append(jobs[:0], j)
	fill:
		for len(jobs) < w.maxBatch {
			select {
			case j, ok := <-w.jobs:
				if !ok {
					break fill
				}
				jobs = append(jobs, j)
			default:
				break fill
			}
		}
		b.run(jobs)
		clear(jobs) // answered jobs belong to their callers again
	}
}

// pgBatch runs batches of admissions; its buffers are reused from one to
// the next.
type pgBatch struct {
	w    *pgWriter
	args batchArgs
	dest []any
}

// run answers every job of jobs: recorded, refused, failed, or left to
// decide alone (errRedo).
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
	for len(jobs) > 0 {
		redo := b.try(jobs)
		if redo < 0 {
			return
		}
		jobs[redo].errc <- errRedo
		jobs = slices.Delete(jobs, redo, redo+1)
	}
}

// try runs jobs in one transaction. It returns -1 once every job is
// answered, or, after rolling back, the index of the first job whose
// decide disagreed with the statement (or failed), to be decided alone
// while the others run again without it.
func (b *pgBatch) try(jobs []*pgJob) int {
	w := b.w
	ctx, cancel := context.WithTimeout(context.Background(), w.batchTimeout)
	defer cancel()
	tiers := w.tiers.Load()
	b.args.fill(jobs, tiers)
	conn, err := w.db.Conn(ctx)
	if err != nil {
		answer(jobs, unavailable(err))
		return -1
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error { return b.send(ctx, dc.(*stdlib.Conn).Conn(), jobs) })
	if err != nil {
		// Nothing is recorded. The batch may have failed for one of its
		// users (a lock another transaction held too long): each
		// admission is decided alone, and fails alone if it must.
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil {
			discard(conn)
		}
		answer(jobs, errRedo)
		return -1
	}
	tx := &writeTx{ctx: ctx, conn: conn, d: postgresDialect, tiers: w.tiers}
	h := &tx.hist
	for i, j := range jobs {
		if j.f.status != 0 {
			continue
		}
		h.reset(tx, tx, j.user)
		h.planned(j, tiers)
		a, err := j.decide(h)
		if err == nil && j.f.agrees(&a, j.plan) {
			continue
		}
		if err == nil {
			w.disagreements.Add(1)
		}
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil {
			discard(conn)
		}
		return i
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		discard(conn)
		answer(jobs, unavailable(err))
		return -1
	}
	for _, j := range jobs {
		if j.f.status != 0 && j.f.version != tiers.version {
			// The tiers changed since the store read them: until it reads
			// them again, every admission would be left to decide alone.
			// (A failure leaves them as they were, for the next check to
			// read.)
			_, _ = w.freshTiers(ctx)
			break
		}
	}
	for _, j := range jobs {
		if j.f.status == 0 {
			w.batched.Add(1)
			j.errc <- nil
		} else {
			j.errc <- errRedo
		}
	}
	return -1
}

// answer answers every job with err.
func answer(jobs []*pgJob, err error) {
	for _, j := range jobs {
		j.errc <- err
	}
}

// admitBatch calls admit_batch (migration 12) with the batch's arrays.
const admitBatch = `SELECT * FROM admit_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)`

// send begins the transaction and runs admit_batch in one round trip,
// reading what it returns into the jobs. The transaction stays open.
func (b *pgBatch) send(ctx context.Context, conn *pgx.Conn, jobs []*pgJob) error {
	a := &b.args
	batch := &pgx.Batch{}
	batch.Queue("BEGIN")
	batch.Queue(admitBatch, a.keys, a.version, a.users, a.now, a.ceil, a.tierID, a.tierSame,
		a.userMode, a.userTier, a.userLim, a.userOver, a.callID, a.callTier, a.tokens, a.tokLim, a.maxConc, a.expires)
	br := conn.SendBatch(ctx, batch)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return err
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return err
	}
	n := 0
	for rows.Next() {
		if n == len(jobs) {
			n++
			break
		}
		b.dest = jobs[n].f.scanArgs(b.dest[:0])
		if err := rows.Scan(b.dest...); err != nil {
			rows.Close()
			br.Close()
			return err
		}
		n++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		br.Close()
		return err
	}
	if err := br.Close(); err != nil {
		return err
	}
	if n != len(jobs) {
		return fmt.Errorf("admit_batch answered %d admissions of %d", n, len(jobs))
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
	userLim  []pgtype.Int8
	userOver []int64
	callID   []pgtype.Text
	callTier []pgtype.Text
	tokens   []int64
	tokLim   []pgtype.Int8
	maxConc  []pgtype.Int8
	expires  []int64
}

// Modes of confirming a user's record (p_user_mode).
const (
	userUnconfirmed int16 = iota // decide does not confirm the record
	userNone                     // the user has no record
	userRecord                   // the record is p_user_*
)

// fill sets the arguments of jobs, whose tiers are confirmed against
// tiers.
func (a *batchArgs) fill(jobs []*pgJob, tiers *tierCache) {
	a.keys = a.keys[:0]
	a.version = tiers.version
	a.users, a.now, a.ceil, a.tierID, a.tierSame = a.users[:0], a.now[:0], a.ceil[:0], a.tierID[:0], a.tierSame[:0]
	a.userMode, a.userTier, a.userLim, a.userOver = a.userMode[:0], a.userTier[:0], a.userLim[:0], a.userOver[:0]
	a.callID, a.callTier, a.tokens, a.tokLim, a.maxConc, a.expires = a.callID[:0], a.callTier[:0], a.tokens[:0], a.tokLim[:0], a.maxConc[:0], a.expires[:0]
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

		mode, tier, over := userUnconfirmed, pgtype.Text{}, int64(0)
		var lim [len(policy.LimitFields)]pgtype.Int8
		switch {
		case !p.ConfirmUser:
		case p.User == nil:
			mode = userNone
		default:
			mode = userRecord
			r := userRowOf(p.User)
			tier = pgtype.Text{String: r.Tier.String, Valid: r.Tier.Valid}
			for i, v := range r.Limits {
				if v != nil {
					lim[i] = pgtype.Int8{Int64: *v, Valid: true}
				}
			}
			over = r.Overrides
		}
		a.userMode, a.userTier, a.userOver = append(a.userMode, mode), append(a.userTier, tier), append(a.userOver, over)
		a.userLim = append(a.userLim, lim[:]...)

		c := p.Call
		if c == nil {
			a.callID, a.callTier = append(a.callID, pgtype.Text{}), append(a.callTier, pgtype.Text{})
			a.tokens, a.maxConc, a.expires = append(a.tokens, 0), append(a.maxConc, pgtype.Int8{}), append(a.expires, 0)
			a.tokLim = append(a.tokLim, pgtype.Int8{}, pgtype.Int8{}, pgtype.Int8{})
			continue
		}
		a.callID = append(a.callID, pgtype.Text{String: c.ID, Valid: true})
		a.callTier = append(a.callTier, pgtype.Text{String: c.Tier, Valid: true})
		a.tokens = append(a.tokens, c.Reserved)
		a.expires = append(a.expires, c.ExpiresAt.UnixMicro())
		for _, w := range policy.Windows {
			v, ok := p.Tier.TokenLimit(w)
			a.tokLim = append(a.tokLim, pgtype.Int8{Int64: v, Valid: ok})
		}
		var mc pgtype.Int8
		if p.Tier.MaxConcurrent != nil {
			mc = pgtype.Int8{Int64: *p.Tier.MaxConcurrent, Valid: true}
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
	userLim         [len(policy.LimitFields)]pgtype.Int8
	userOver        pgtype.Int8
	userNote        pgtype.Text
	userUpdated     pgtype.Int8
	recorded        bool
	recTS           pgtype.Int8
	open, reserved  pgtype.Int8
	tokTS, tokTotal pgtype.Int8
	tokFirst        [len(policy.Windows)]struct{ ts, before pgtype.Int8 }
}

// scanArgs appends the destinations of admit_batch's columns to dest.
func (f *admitFacts) scanArgs(dest []any) []any {
	dest = append(dest, &f.status, &f.version, &f.lastTS, &f.lastSeq)
	for i := range f.first {
		dest = append(dest, &f.first[i].ts, &f.first[i].seq)
	}
	dest = append(dest, &f.userFound, &f.userTier)
	for i := range f.userLim {
		dest = append(dest, &f.userLim[i])
	}
	dest = append(dest, &f.userOver, &f.userNote, &f.userUpdated, &f.recorded, &f.recTS,
		&f.open, &f.reserved, &f.tokTS, &f.tokTotal)
	for i := range f.tokFirst {
		dest = append(dest, &f.tokFirst[i].ts, &f.tokFirst[i].before)
	}
	return dest
}

// planned sets h, freshly reset for j's user on the batch's transaction,
// to what admit_batch read for j before deciding it: the newest request,
// the oldest in each window, the record, the ledger. Anything else decide
// asks is read in the transaction, which the rows the batch recorded for
// later admissions of the same user do not change: they come after every
// row j's decide could ask about.
func (h *history) planned(j *pgJob, tiers *tierCache) {
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
		j.st.recordLoaded = true
		if f.userFound.Bool {
			r := userRow{UserID: j.user, Tier: nullString(f.userTier), Overrides: f.userOver.Int64,
				Note: f.userNote.String, UpdatedAt: f.userUpdated.Int64}
			for i, v := range f.userLim {
				if v.Valid {
					r.Limits[i] = &f.userLim[i].Int64
				}
			}
			u := r.record()
			j.st.record = &u
		}
	}
	if p.Call != nil {
		l := &h.led
		*l = ledger{q: h.q, user: h.user, st: ledgerState{anyRow: f.tokTS.Valid, lastTS: f.tokTS.Int64, lastTotal: f.tokTotal.Int64,
			open: f.open.Int64, reserved: f.reserved.Int64, nextExpiry: noExpiry}}
		for i, w := range policy.Windows {
			r := f.tokFirst[i]
			l.firsts[i] = tokFirst{cutoff: now - w.Duration().Microseconds(), ts: r.ts.Int64, before: r.before.Int64, found: r.ts.Valid}
		}
		l.nfirst = len(policy.Windows)
		h.ledgerRead, h.ledgerAt = true, now
	}
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

// pgBatches is how many batches of admissions a store runs at once on
// PostgreSQL, each holding a connection of the pool while it runs: one per
// two cores of this machine, at least one, at most four and at most half
// the pool. One batch fills while another runs, so under load batches
// grow rather than multiply; more at once would make each smaller, and a
// small batch costs more per admission than a large one.
func pgBatches(poolSize int) int {
	return max(min(runtime.GOMAXPROCS(0)/2, poolSize/2, 4), 1)
}
