package db_test

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

// The model test runs random sequences of operations against the real
// service on a SQLite file and against refModel, a reference written here
// from the README's rules alone: a list of timestamps per user, counted by
// scanning. The reference shares no code with policy.Evaluate or the store,
// so a mistake in either shows up as a disagreement.

var (
	modelSeqs = flag.Int("model.seqs", 150, "random operation sequences TestModel runs against the store (a tenth under -race)")
	modelSeed = flag.Uint64("model.seed", 0, "seed of TestModel's sequences; 0 picks one and logs it")
)

// refWindow is one rolling window as the README states it.
type refWindow struct {
	name   string
	length time.Duration
}

var refWindows = [3]refWindow{{"minute", time.Minute}, {"hour", time.Hour}, {"day", 24 * time.Hour}}

// refLimits are a tier's limits.
type refLimits struct{ perMinute, burst, perHour, perDay int64 }

// ceilings returns the ceiling of each window: the burst widens only the
// minute.
func (l refLimits) ceilings() [3]int64 {
	return [3]int64{l.perMinute + l.burst, l.perHour, l.perDay}
}

// refRecord is one admitted request and the ceilings it was admitted under.
type refRecord struct {
	at       time.Time
	ceilings [3]int64
}

// refModel is the reference implementation.
type refModel struct {
	tiers map[string]refLimits
	hist  map[string][]refRecord // by user, in the order admitted
}

type refWindowState struct{ count, limit, remaining, reset int64 }

type refDecision struct {
	allowed    bool
	reason     string
	retryAfter int64
	windows    [3]refWindowState
	// zeroBlocked is true when a blocking window has a ceiling of 0: no
	// amount of waiting admits the request.
	zeroBlocked bool
}

// refCeilSeconds rounds d up to whole seconds.
func refCeilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}

// inWindow returns the timestamps of recs strictly after now minus the
// window's length, oldest first.
func inWindow(recs []refRecord, w refWindow, now time.Time) []time.Time {
	cutoff := now.Add(-w.length)
	var out []time.Time
	for _, r := range recs {
		if r.at.After(cutoff) {
			out = append(out, r.at)
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// check decides one request the way the README says, and records it unless
// refused or a dry run.
func (m *refModel) check(user, tier string, now time.Time, dryRun bool) refDecision {
	now = now.Truncate(time.Microsecond) // timestamps are stored in microseconds
	c := m.tiers[tier].ceilings()
	recs := m.hist[user]
	d := refDecision{allowed: true}
	for i, w := range refWindows {
		in := inWindow(recs, w, now)
		n := int64(len(in))
		if n < c[i] {
			continue
		}
		if d.allowed {
			d.allowed, d.reason = false, "per-"+w.name+" limit exceeded"
		}
		// A window holding n against ceiling c admits again when its
		// (n-c+1)-th oldest request leaves it; a zero ceiling never admits
		// and answers the window's length.
		wait := w.length
		if c[i] == 0 {
			d.zeroBlocked = true
		} else {
			wait = in[n-c[i]].Add(w.length).Sub(now)
		}
		d.retryAfter = max(d.retryAfter, refCeilSeconds(wait))
	}
	after := recs
	if d.allowed {
		// Recorded at max(now, newest + 1µs): a user's timestamps strictly
		// increase even when the clock steps back.
		at := now
		if len(recs) > 0 {
			if next := recs[len(recs)-1].at.Add(time.Microsecond); next.After(at) {
				at = next
			}
		}
		after = append(slices.Clone(recs), refRecord{at: at, ceilings: c})
		if !dryRun {
			m.hist[user] = after
		}
	}
	for i, w := range refWindows {
		in := inWindow(after, w, now)
		n := int64(len(in))
		s := refWindowState{count: n, limit: c[i], remaining: max(c[i]-n, 0)}
		if n > 0 {
			s.reset = refCeilSeconds(in[0].Add(w.length).Sub(now))
		}
		d.windows[i] = s
	}
	return d
}

// prune deletes every record at or before cutoff.
func (m *refModel) prune(cutoff time.Time) {
	for u, recs := range m.hist {
		m.hist[u] = slices.DeleteFunc(slices.Clone(recs), func(r refRecord) bool { return !r.at.After(cutoff) })
	}
}

// The operations of a sequence.
type opKind uint8

const (
	opCheck opKind = iota
	opDryRun
	opAdvance
	opSetTier
	opForget
	opPrune
)

type modelOp struct {
	kind   opKind
	user   int
	tier   int
	step   time.Duration
	limits refLimits
}

// Users and tiers of the model. A user id with SQL in it and one with
// non-ASCII bytes ride along for free.
var (
	modelUsers = [...]string{"alice", "bob'); DELETE FROM requests; --", "zoë/ü", "u4"}
	modelTiers = [...]string{"model-a", "model-b"}
)

func (o modelOp) String() string {
	switch o.kind {
	case opCheck:
		return fmt.Sprintf("check(%s, %s)", modelUsers[o.user], modelTiers[o.tier])
	case opDryRun:
		return fmt.Sprintf("dry-run(%s, %s)", modelUsers[o.user], modelTiers[o.tier])
	case opAdvance:
		return fmt.Sprintf("advance(%v)", o.step)
	case opSetTier:
		l := o.limits
		return fmt.Sprintf("set-tier(%s, minute %d + burst %d, hour %d, day %d)", modelTiers[o.tier], l.perMinute, l.burst, l.perHour, l.perDay)
	case opForget:
		return fmt.Sprintf("forget(%s)", modelUsers[o.user])
	default:
		return "prune(now - 24h)"
	}
}

// exactSteps are clock steps that land exactly on (or a microsecond beside)
// a window's edge, where "strictly after" matters.
var exactSteps = [...]time.Duration{
	time.Minute, time.Hour, 24 * time.Hour,
	time.Minute - time.Microsecond, time.Minute + time.Microsecond,
	time.Second, time.Hour - time.Microsecond, 24*time.Hour - time.Microsecond,
}

// opReader turns bytes into operations. Random tests feed it random bytes
// and the fuzzer feeds it its own, so both explore the same language.
type opReader struct{ data []byte }

func (r *opReader) next() byte {
	if len(r.data) == 0 {
		return 0
	}
	b := r.data[0]
	r.data = r.data[1:]
	return b
}

func (r *opReader) limits() refLimits {
	// Small limits, so that sequences of a few dozen checks hit them,
	// including zero ceilings.
	return refLimits{
		perMinute: int64(r.next() % 6),
		burst:     int64(r.next() % 4),
		perHour:   int64(r.next() % 14),
		perDay:    int64(r.next() % 24),
	}
}

// step decodes a clock step: zero, nanoseconds, microseconds, seconds,
// minutes, hours, exact window edges, and the same backwards.
func (r *opReader) step() time.Duration {
	class := r.next()
	m := time.Duration(r.next())<<8 | time.Duration(r.next())
	switch class % 16 {
	case 0:
		return 0
	case 1:
		return m // nanoseconds: below the stored resolution
	case 2, 3:
		return m * time.Microsecond
	case 4, 5, 6:
		return m * time.Second / 500 // up to 131s
	case 7, 8:
		return m * time.Minute / 700 // up to 93m
	case 9:
		return m * 30 * time.Hour / 65536 // up to 30h
	case 10:
		return exactSteps[m%time.Duration(len(exactSteps))]
	case 11:
		return -m * time.Microsecond
	case 12:
		return -m * time.Second / 500
	case 13:
		return -m * 30 * time.Hour / 65536
	default:
		return m % 1000 * time.Millisecond
	}
}

// decodeOps returns the initial limits of both tiers and the operations
// data encodes.
func decodeOps(data []byte) (initial [len(modelTiers)]refLimits, ops []modelOp) {
	r := &opReader{data: data}
	for i := range initial {
		initial[i] = r.limits()
	}
	for len(r.data) > 0 {
		b := r.next()
		switch b % 16 {
		case 0, 1, 2, 3, 4, 5, 6:
			ops = append(ops, modelOp{kind: opCheck, user: int(r.next()) % len(modelUsers), tier: int(r.next()) % len(modelTiers)})
		case 7:
			ops = append(ops, modelOp{kind: opDryRun, user: int(r.next()) % len(modelUsers), tier: int(r.next()) % len(modelTiers)})
		case 8, 9, 10, 11, 12:
			ops = append(ops, modelOp{kind: opAdvance, step: r.step()})
		case 13:
			ops = append(ops, modelOp{kind: opSetTier, tier: int(r.next()) % len(modelTiers), limits: r.limits()})
		case 14:
			ops = append(ops, modelOp{kind: opForget, user: int(r.next()) % len(modelUsers)})
		default:
			ops = append(ops, modelOp{kind: opPrune})
		}
	}
	return initial, ops
}

// modelHarness runs sequences against one store, clearing the model's users
// between them.
type modelHarness struct {
	store *db.Store
	svc   *policy.Service
	now   time.Time
	ref   *refModel
}

func newModelHarness(tb testing.TB) *modelHarness {
	tb.Helper()
	// NORMAL keeps every commit across a crash of the process, which is all
	// a test needs, and spares thousands of fsyncs.
	store, err := db.Open(context.Background(), filepath.Join(tb.TempDir(), "model.db"), db.WithSynchronous(db.SyncNormal))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { store.Close() })
	h := &modelHarness{store: store}
	h.svc = policy.NewService(store, store, policy.WithClock(func() time.Time { return h.now }))
	return h
}

// modelRun is one sequence in progress, for failure messages.
type modelRun struct {
	tb   testing.TB
	name string // how to reproduce it
	ops  []modelOp
	at   int
}

func (r *modelRun) fatalf(format string, args ...any) {
	r.tb.Helper()
	var b strings.Builder
	for i, op := range r.ops[:min(r.at+1, len(r.ops))] {
		fmt.Fprintf(&b, "\n  %3d %v", i, op)
	}
	r.tb.Fatalf("%s, operation %d: %s\nsequence:%s", r.name, r.at, fmt.Sprintf(format, args...), b.String())
}

// run plays the sequence data encodes against the store and the reference.
func (h *modelHarness) run(tb testing.TB, name string, data []byte) {
	tb.Helper()
	ctx := context.Background()
	initial, ops := decodeOps(data)
	run := &modelRun{tb: tb, name: name, ops: ops}

	h.now = t0
	h.ref = &refModel{tiers: map[string]refLimits{}, hist: map[string][]refRecord{}}
	for _, u := range modelUsers {
		if err := h.svc.Forget(ctx, u); err != nil {
			tb.Fatal(err)
		}
	}
	for i, name := range modelTiers {
		h.setTier(run, name, initial[i])
	}

	for i, op := range ops {
		run.at = i
		switch op.kind {
		case opCheck, opDryRun:
			h.check(run, modelUsers[op.user], modelTiers[op.tier], op.kind == opDryRun)
		case opAdvance:
			h.now = h.now.Add(op.step)
		case opSetTier:
			h.setTier(run, modelTiers[op.tier], op.limits)
		case opForget:
			if err := h.svc.Forget(ctx, modelUsers[op.user]); err != nil {
				run.fatalf("forget: %v", err)
			}
			delete(h.ref.hist, modelUsers[op.user])
		case opPrune:
			cutoff := h.now.Add(-24 * time.Hour)
			if _, err := h.store.Prune(ctx, cutoff); err != nil {
				run.fatalf("prune: %v", err)
			}
			h.ref.prune(cutoff)
		}
	}
	h.compareHistories(run)
}

func (h *modelHarness) setTier(run *modelRun, name string, l refLimits) {
	run.tb.Helper()
	_, _, err := h.svc.PutTier(context.Background(), policy.Tier{
		Name: name, RequestsPerMinute: l.perMinute, BurstAllowance: l.burst,
		RequestsPerHour: l.perHour, RequestsPerDay: l.perDay,
	})
	if err != nil {
		run.fatalf("put tier: %v", err)
	}
	h.ref.tiers[name] = l
}

// check runs one check on both sides, compares every field of the answers
// and asserts the promises directly.
func (h *modelHarness) check(run *modelRun, user, tier string, dryRun bool) {
	run.tb.Helper()
	ctx := context.Background()
	want := h.ref.check(user, tier, h.now, dryRun)
	got, err := h.svc.Check(ctx, policy.Request{UserID: user, Tier: tier}, dryRun)
	if err != nil {
		run.fatalf("check: %v", err)
	}
	h.compare(run, "check", got, want)

	if got.RetryAfter < 0 {
		run.fatalf("negative retry_after %d", got.RetryAfter)
	}
	for i, w := range got.Windows {
		if w.Reset < 0 || w.Remaining < 0 {
			run.fatalf("%s window: negative reset or remaining: %+v", refWindows[i].name, w)
		}
	}
	if got.Allowed() && !dryRun {
		// No window holds more admitted requests than its ceiling, counted
		// by the store itself right after the admission.
		c := h.ref.tiers[tier].ceilings()
		now := h.now.Truncate(time.Microsecond)
		err := h.store.View(ctx, user, func(hist policy.History) error {
			for i, w := range refWindows {
				n, err := hist.CountAfter(now.Add(-w.length))
				if err != nil {
					return err
				}
				if n > c[i] {
					run.fatalf("over-admitted: the %s window holds %d, ceiling %d", w.name, n, c[i])
				}
			}
			return nil
		})
		if err != nil {
			run.fatalf("view: %v", err)
		}
	}
	if !got.Allowed() && !want.zeroBlocked {
		// Advancing the clock by retry_after admits the same request when
		// nothing else changed, and a second less does not: the answer is
		// neither early nor late. Probed with dry runs, which change nothing.
		saved := h.now
		defer func() { h.now = saved }()
		h.now = saved.Add(time.Duration(got.RetryAfter) * time.Second)
		probe, err := h.svc.Check(ctx, policy.Request{UserID: user, Tier: tier}, true)
		if err != nil {
			run.fatalf("probe: %v", err)
		}
		if !probe.Allowed() {
			run.fatalf("refused with retry_after %d, but refused again %ds later: %q", got.RetryAfter, got.RetryAfter, probe.Reason)
		}
		h.compare(run, "probe at retry_after", probe, h.ref.check(user, tier, h.now, true))
		if got.RetryAfter >= 1 {
			h.now = saved.Add(time.Duration(got.RetryAfter-1) * time.Second)
			early, err := h.svc.Check(ctx, policy.Request{UserID: user, Tier: tier}, true)
			if err != nil {
				run.fatalf("probe: %v", err)
			}
			if early.Allowed() {
				run.fatalf("refused with retry_after %d, but admitted after only %ds", got.RetryAfter, got.RetryAfter-1)
			}
		}
	}
}

func (h *modelHarness) compare(run *modelRun, what string, got policy.Decision, want refDecision) {
	run.tb.Helper()
	if got.Allowed() != want.allowed || got.Reason != want.reason || got.RetryAfter != want.retryAfter {
		run.fatalf("%s: got allowed=%v reason=%q retry_after=%d, reference allowed=%v reason=%q retry_after=%d",
			what, got.Allowed(), got.Reason, got.RetryAfter, want.allowed, want.reason, want.retryAfter)
	}
	if !want.allowed && (got.Outcome != policy.RateLimited || got.Guardrail != "rate_limiter") {
		run.fatalf("%s: refusal with outcome %v by %q", what, got.Outcome, got.Guardrail)
	}
	if got.Windows == nil {
		run.fatalf("%s: no windows", what)
	}
	for i, w := range got.Windows {
		ws := want.windows[i]
		if w.Count != ws.count || w.Limit != ws.limit || w.Remaining != ws.remaining || w.Reset != ws.reset {
			run.fatalf("%s: %s window %+v, reference %+v", what, refWindows[i].name, w, ws)
		}
	}
}

// compareHistories checks that the store holds exactly the reference's
// timestamps (nothing lost, nothing extra, nothing moved), and that every
// admitted request fits its ceilings on the timeline: the window ending at
// each admission holds no more requests than the ceilings it was admitted
// under.
func (h *modelHarness) compareHistories(run *modelRun) {
	run.tb.Helper()
	for _, user := range modelUsers {
		var stored []time.Time
		err := h.store.View(context.Background(), user, func(hist policy.History) error {
			n, err := hist.CountAfter(time.Time{})
			if err != nil {
				return err
			}
			for k := int64(1); k <= n; k++ {
				ts, err := hist.NthAfter(time.Time{}, k)
				if err != nil {
					return err
				}
				stored = append(stored, ts)
			}
			return nil
		})
		if err != nil {
			run.fatalf("view %s: %v", user, err)
		}
		recs := h.ref.hist[user]
		var want []time.Time
		for _, r := range recs {
			want = append(want, r.at)
		}
		if !slices.EqualFunc(stored, want, time.Time.Equal) {
			run.fatalf("user %q: store holds %v, reference %v", user, stored, want)
		}
		for _, r := range recs {
			for i, w := range refWindows {
				var n int64
				for _, o := range recs {
					if o.at.After(r.at.Add(-w.length)) && !o.at.After(r.at) {
						n++
					}
				}
				if n > r.ceilings[i] {
					run.fatalf("user %q: the %s ending at %v holds %d requests, admitted under a ceiling of %d", user, w.name, r.at, n, r.ceilings[i])
				}
			}
		}
	}
}

// TestModel compares the store with the reference over random sequences:
// -model.seqs sets how many (150 by default, a tenth of it under -race;
// CI runs thousands).
func TestModel(t *testing.T) {
	seed := *modelSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (reproduce with -model.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	h := newModelHarness(t)
	n := *modelSeqs
	if raceEnabled || testing.Short() {
		n = max(n/10, 1)
	}
	var checks, ops int
	for i := range n {
		data := make([]byte, 64+rng.IntN(512))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		name := fmt.Sprintf("sequence %d of -model.seed=%d (fuzz input %s)", i, seed, hex.EncodeToString(data))
		h.run(t, name, data)
		_, seqOps := decodeOps(data)
		ops += len(seqOps)
		for _, op := range seqOps {
			if op.kind == opCheck || op.kind == opDryRun {
				checks++
			}
		}
	}
	t.Logf("%d sequences, %d operations, %d checks: store and reference agree", n, ops, checks)
}

// FuzzModel lets the fuzzer write the sequences. Its seed corpus is in
// testdata/fuzz/FuzzModel.
func FuzzModel(f *testing.F) {
	f.Add([]byte{})
	h := newModelHarness(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 2048 {
			data = data[:2048] // a few hundred operations is plenty; more only slows the fuzzer
		}
		h.run(t, "fuzz input "+hex.EncodeToString(data), data)
	})
}
