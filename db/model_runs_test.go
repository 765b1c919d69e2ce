package db_test

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

var runModelSeed = flag.Uint64("runmodel.seed", 0, "seed of TestRunModel's sequences; 0 picks one and logs it")

// Every check of TestRunModel names one model, priced at runModelPrice
// picodollars a token of every kind ($2 a million): what a call reserves
// and what it uses cost their tokens times that, exactly, so a run's cost
// is its tokens times the price and max_cost is a budget of tokens at
// another bound, decided after max_tokens.
const (
	runModelModel = "m-run"
	runModelPrice = 2_000_000
)

// runOutcomes names outcomes in TestRunModel's messages.
var runOutcomes = map[policy.Outcome]string{policy.Admitted: "admitted", policy.RateLimited: "rate limited", policy.Denied: "denied"}

// refRunLimits is a tier's run object in TestRunModel's reference: -1 for
// a limit the tier does not set (depth is always set: the default is 4).
type refRunLimits struct {
	requests, tokens, cost, concurrent, duration, depth int64
}

// refRun is a run as the reference keeps it, from the README's rules:
// its counts include its descendants'.
type refRun struct {
	id, user, parent, root string
	depth                  int64
	// opened is its first request; last the last request admitted in it
	// or below it.
	opened, last time.Time
	// state and cause as a check or an end left them: an open run may
	// read as expired since (see effective). closed is when it stopped
	// being open, zero while stored open.
	state    policy.RunState
	cause    policy.RunCause
	closed   time.Time
	requests int64
	// tokens counts what the calls of the run and its descendants
	// reserve while open (an expired call keeps its reservation) and use
	// once finished.
	tokens   int64
	children []string
}

// refRunCall is a call a check in a run opened that no finish has reached
// yet.
type refRunCall struct {
	id, run  string
	reserved int64
	expires  time.Time
	// deleted: expired and deleted by a cleanup since, so a finish finds
	// nothing.
	deleted bool
}

// refRunVerdict is how the reference decides a check in a run.
type refRunVerdict struct {
	conflict bool // an ECONFLICT error, no decision
	outcome  policy.Outcome
	cause    policy.RunCause
	reason   string
	// chain is the run the check names (new or not) and its ancestors,
	// nearest first.
	chain []*refRun
	// closes is the run the check finds used up or expired, closed
	// whether or not anything is recorded, to state for cause.
	closes     *refRun
	state      policy.RunState
	closeCause policy.RunCause
}

func (v refRunVerdict) refuse(cause policy.RunCause, reason string) refRunVerdict {
	v.outcome, v.cause, v.reason = policy.Denied, cause, reason
	return v
}

// refRunReason is the reason the README gives a refusal by run id's
// budget for cause.
func refRunReason(id string, cause policy.RunCause, depth int64) string {
	what := map[policy.RunCause]string{
		policy.CauseRequests: "step limit exceeded",
		policy.CauseTokens:   "token limit exceeded",
		policy.CauseCost:     "spend limit exceeded",
		policy.CauseDuration: "duration exceeded",
		policy.CauseIdle:     "expired: no request for longer than the idle limit",
		policy.CauseEnded:    "was ended",
		policy.CauseDepth:    fmt.Sprintf("depth limit exceeded (max_depth %d)", depth),
	}[cause]
	return fmt.Sprintf("run %q %s", id, what)
}

// runHarness is one sequence of TestRunModel: the service on a store, and
// the reference beside it.
type runHarness struct {
	t         *testing.T
	ctx       context.Context
	seed      uint64
	seq, step int
	rng       *rand.Rand
	dsn       string
	now       time.Time
	store     *db.Store
	svc       *policy.Service

	lim               refRunLimits
	idle, callTimeout time.Duration
	users             []string
	runs              map[string]*refRun
	// owner is the user of every run id ever opened, kept after a
	// cleanup deletes the run, so that a check may name it again.
	owner map[string]string
	calls []*refRunCall
	ids   int // run ids drawn
	ops   []string
	// tally counts what the sequences did, by kind, so that a test that
	// never reached a rule fails.
	tally map[string]int
}

// TestRunModel runs random sequences of operations on agent runs against a
// reference written from the README's "Agent runs" and "Metered calls"
// rules, on both stores. Three users of a tier whose run object is drawn
// per sequence (max_requests, max_tokens, max_cost, max_concurrent,
// max_duration, max_depth 2 to 4, each but max_depth sometimes unset; a
// run idle time and a call timeout drawn too) open root runs and
// sub-agents under a random run of theirs, now and then under another
// user's (a conflict) or a missing one; check in their runs again (with
// the right parent named, or a wrong one: a conflict), or in another
// user's (a conflict); finish their open calls, several open at once,
// with fewer or more tokens than reserved, or none, before or after the
// calls expire; end runs, which ends their descendants; step the clock by
// seconds to hours (onto a deadline to the microsecond, now and then days,
// so that runs go idle, pass max_duration and are deleted a week after
// their last request); clean up; and restart the store. Each check's
// outcome, reason, retry-after and run must be the reference's, and after
// each operation every run as ListRuns reports it (state as of now,
// cause, requests, tokens, cost, calls in flight, tree), and the runs the
// operation touched as GetRun does, children included.
//
// The user's own limits are out of the way (100,000 a minute), so the
// runs decide. Cost is modelled at one flat price, every check naming the
// priced model, so a run's cost is its tokens times the price: priced
// reservations and overruns against max_cost, but no price versions,
// usage split by kind (TestModel covers both) or unpriced models. Left
// out too: keepalives, accounts' members, Forget, ListRuns' filters and
// pages, and concurrent callers (TestRunBudgetsHoldUnderParallelCallers).
// -runmodel.seed replays a failure, whose message lists every operation
// of its sequence.
func TestRunModel(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		seqs, steps := 12, 160
		if bk.name == "postgres" {
			seqs = 3
		}
		if dbtest.RaceEnabled {
			seqs = max(seqs/4, 1) // SQLite's driver is slow under it
		}
		if testing.Short() {
			seqs, steps = 1, 80
		}
		seed := *runModelSeed
		if seed == 0 {
			seed = uint64(time.Now().UnixNano())
		}
		t.Logf("seed %d (replay with -runmodel.seed=%d)", seed, seed)
		tally := map[string]int{}
		for seq := range seqs {
			h := newRunHarness(t, bk, seed, seq, tally)
			for h.step = range steps {
				h.do()
			}
			h.store.Close()
		}
		t.Logf("%d sequences of %d steps: %v", seqs, steps, tally)
		if seqs < 12 {
			return // too few to be sure of reaching each rule
		}
		for _, what := range []string{"admitted", "conflict", "end", "restart", "finish expired",
			"refused parent", "refused depth", "refused requests", "refused tokens|refused cost", "refused ended",
			"refused idle", "refused duration", "refused concurrency", "closed exhausted tokens|closed exhausted cost"} {
			n := 0
			for _, w := range strings.Split(what, "|") {
				n += tally[w]
			}
			if n == 0 {
				t.Errorf("no sequence reached %q", what)
			}
		}
	})
}

// newRunHarness opens a store for sequence seq, puts the tier and the
// price, and draws the limits.
func newRunHarness(t *testing.T, bk backend, seed uint64, seq int, tally map[string]int) *runHarness {
	rng := rand.New(rand.NewPCG(seed, uint64(seq)))
	h := &runHarness{t: t, ctx: context.Background(), seed: seed, seq: seq, rng: rng, dsn: bk.newDSN(t),
		now:   t0.Add(time.Duration(rng.Int64N(int64(300*24*time.Hour))) / time.Microsecond * time.Microsecond),
		users: []string{"ann", "bob", "cat"}, runs: map[string]*refRun{}, owner: map[string]string{}, tally: tally}
	h.lim = drawRunLimits(rng, seq)
	h.idle = [...]time.Duration{0, 20 * time.Minute, 45 * time.Minute}[rng.IntN(3)]
	h.callTimeout = time.Duration(2+rng.IntN(14)) * time.Minute
	run := policy.LimitSet{policy.MaxRunDepth: new(h.lim.depth)}
	if h.lim.depth == 4 && rng.IntN(2) == 0 {
		run[policy.MaxRunDepth] = nil // the default
	}
	for id, v := range map[policy.LimitID]int64{policy.MaxRunRequests: h.lim.requests, policy.MaxRunTokens: h.lim.tokens,
		policy.MaxRunCost: h.lim.cost, policy.MaxConcurrent: h.lim.concurrent, policy.MaxRunDuration: h.lim.duration} {
		if v >= 0 {
			run[id] = new(v)
		}
	}
	h.open()
	if _, _, err := h.svc.PutTier(h.ctx, agentsTier(run)); err != nil {
		t.Fatal(err)
	}
	p := policy.Money(runModelPrice * 1_000_000)
	if _, err := h.svc.PutPrices(h.ctx, nil, []policy.Price{{Model: runModelModel, Input: p, Output: p, CacheRead: p, CacheWrite: p}}); err != nil {
		t.Fatal(err)
	}
	h.logf("limits %+v, idle %v, call timeout %v, at %v", h.lim, h.idle, h.callTimeout, h.now)
	if h.idle == 0 {
		h.idle = policy.DefaultRunIdle
	}
	return h
}

// drawRunLimits draws the run object of sequence seq: each limit unset a
// fifth of the time, else tight or loose, so that each binds first in
// some sequences.
func drawRunLimits(rng *rand.Rand, seq int) refRunLimits {
	some := func(lo, mid, hi int64) int64 {
		switch rng.IntN(5) {
		case 0:
			return -1
		case 1, 2:
			return lo + rng.Int64N(mid-lo)
		}
		return mid + rng.Int64N(hi-mid+1)
	}
	l := refRunLimits{requests: some(2, 5, 10), tokens: some(100, 300, 1500), cost: -1, concurrent: some(1, 2, 3),
		duration: some(600, 1800, 3*3600), depth: 2 + rng.Int64N(3)}
	if rng.IntN(2) == 0 {
		l.cost = some(100, 300, 1500)
	}
	// The first sequences have one budget tight each, steps, tokens or
	// spend, and concurrent calls and time loose.
	switch seq {
	case 0:
		l.requests, l.tokens, l.cost = 2+rng.Int64N(3), -1, -1
	case 1:
		l.tokens, l.cost = 100+rng.Int64N(200), -1
	case 2:
		l.tokens, l.cost = -1, 100+rng.Int64N(200)
	}
	if seq < 3 {
		l.concurrent, l.duration = 3, -1
	}
	if l.cost >= 0 { // in picodollars, not a whole number of tokens
		l.cost = l.cost*runModelPrice + rng.Int64N(runModelPrice)
	}
	return l
}

// open opens the store and a service on it.
func (h *runHarness) open() {
	s, err := db.Open(h.ctx, h.dsn, db.WithSynchronous(db.SyncNormal))
	if err != nil {
		h.t.Fatal(err)
	}
	h.store = s
	h.svc = policy.NewService(s, s, policy.WithUsers(s), policy.WithPrices(s), policy.WithClock(func() time.Time { return h.now }),
		policy.WithRunIdle(h.idle), policy.WithCallTimeout(h.callTimeout))
}

// fail stops the test with what replays it: the seed, the step, and
// every operation of the sequence so far.
func (h *runHarness) fail(format string, args ...any) {
	h.t.Helper()
	var b strings.Builder
	for i, op := range h.ops {
		fmt.Fprintf(&b, "\n  %3d %s", i-1, op)
	}
	h.t.Fatalf("seed %d, sequence %d, step %d at %v: %s\noperations (replay with -runmodel.seed=%d):%s",
		h.seed, h.seq, h.step, h.now, fmt.Sprintf(format, args...), h.seed, b.String())
}

// logf adds an operation to the sequence's list.
func (h *runHarness) logf(format string, args ...any) {
	h.ops = append(h.ops, fmt.Sprintf(format, args...))
}

// do runs one random operation, then compares the runs.
func (h *runHarness) do() {
	var touched []string
	switch op := h.rng.IntN(100); {
	case op < 56:
		touched = h.check()
	case op < 74:
		touched = h.finish()
	case op < 78:
		touched = h.end()
	case op < 91:
		h.clock()
	case op < 96:
		h.prune()
	default:
		h.logf("restart")
		h.tally["restart"]++
		h.store.Close()
		h.open()
	}
	h.compareAll()
	for _, id := range touched {
		h.compareOne(id)
	}
}

// chain returns r and its ancestors, nearest first.
func (h *runHarness) chain(r *refRun) []*refRun {
	out := []*refRun{r}
	for r.parent != "" {
		if r = h.runs[r.parent]; r == nil {
			break
		}
		out = append(out, r)
	}
	return out
}

// effective returns r's state and cause as of now: an open run past its
// max_duration, or without a request for the idle time, reads as
// expired, the duration first.
func (h *runHarness) effective(r *refRun) (policy.RunState, policy.RunCause) {
	switch {
	case r.state != policy.RunOpen:
		return r.state, r.cause
	case h.lim.duration >= 0 && !h.now.Before(r.opened.Add(time.Duration(h.lim.duration)*time.Second)):
		return policy.RunExpired, policy.CauseDuration
	case !h.now.Before(r.last.Add(h.idle)):
		return policy.RunExpired, policy.CauseIdle
	}
	return policy.RunOpen, policy.CauseNone
}

// inFlight returns the calls open now in r and its descendants: not
// finished, not expired.
func (h *runHarness) inFlight(r *refRun) int64 {
	var n int64
	for _, c := range h.calls {
		if c.deleted || !c.expires.After(h.now) {
			continue
		}
		if run := h.runs[c.run]; run != nil && slices.Contains(h.chain(run), r) {
			n++
		}
	}
	return n
}

// decide decides a check of user in run id, naming parent, reserving
// want tokens, as the README states it.
func (h *runHarness) decide(user, id, parent string, want int64) refRunVerdict {
	var v refRunVerdict
	if r := h.runs[id]; r != nil {
		if r.user != user || parent != "" && r.parent != parent {
			return refRunVerdict{conflict: true}
		}
		v.chain = h.chain(r)
	} else {
		fresh := &refRun{id: id, user: user, root: id, depth: 1, opened: h.now, last: h.now, state: policy.RunOpen}
		v.chain = []*refRun{fresh}
		if parent != "" {
			p := h.runs[parent]
			switch {
			case p == nil:
				return v.refuse(policy.CauseParent, fmt.Sprintf("parent run %q not found", parent))
			case p.user != user:
				return refRunVerdict{conflict: true}
			}
			fresh.parent, fresh.root, fresh.depth = p.id, p.root, p.depth+1
			if fresh.depth > h.lim.depth {
				return v.refuse(policy.CauseDepth, refRunReason(id, policy.CauseDepth, h.lim.depth))
			}
			v.chain = append(v.chain, h.chain(p)...)
		}
	}
	for _, r := range v.chain {
		if v, done := h.decideOne(v, r, want); done {
			return v
		}
	}
	v.outcome = policy.Admitted
	return v
}

// decideOne decides the check on run r of its chain: done when r refuses
// it.
func (h *runHarness) decideOne(v refRunVerdict, r *refRun, want int64) (refRunVerdict, bool) {
	closes := func(state policy.RunState, cause policy.RunCause) {
		v.closes, v.state, v.closeCause = r, state, cause
	}
	if r.state != policy.RunOpen {
		return v.refuse(r.cause, refRunReason(r.id, r.cause, h.lim.depth)), true
	}
	if state, cause := h.effective(r); state != policy.RunOpen {
		closes(state, cause)
		return v.refuse(cause, refRunReason(r.id, cause, h.lim.depth)), true
	}
	if h.lim.requests >= 0 && r.requests >= h.lim.requests {
		closes(policy.RunExhausted, policy.CauseRequests)
		return v.refuse(policy.CauseRequests, refRunReason(r.id, policy.CauseRequests, 0)), true
	}
	// Tokens and cost count open reservations: over the budget for good
	// only once nothing open may settle for less.
	inFlight := h.inFlight(r)
	for _, b := range [...]struct {
		cause       policy.RunCause
		limit, used int64
		want        int64
	}{{policy.CauseTokens, h.lim.tokens, r.tokens, want}, {policy.CauseCost, h.lim.cost, r.tokens * runModelPrice, want * runModelPrice}} {
		if b.limit < 0 || b.used < b.limit && b.used+b.want <= b.limit {
			continue
		}
		if b.used >= b.limit && inFlight == 0 {
			closes(policy.RunExhausted, b.cause)
		}
		return v.refuse(b.cause, refRunReason(r.id, b.cause, 0)), true
	}
	if h.lim.concurrent >= 0 && inFlight >= h.lim.concurrent {
		v.outcome, v.cause = policy.RateLimited, policy.CauseConcurrency
		v.reason = fmt.Sprintf("run %q %s", r.id, policy.ConcurrencyReason)
		return v, true
	}
	return v, false
}

// check draws a check in a run, decides it on both sides and compares
// the decisions; it returns the runs to read back.
func (h *runHarness) check() []string {
	user, id, parent := h.drawCheck()
	want := h.rng.Int64N(151)
	h.logf("check %s in %q (parent %q), %d tokens", user, id, parent, want)
	v := h.decide(user, id, parent, want)
	d, err := h.svc.Check(h.ctx, policy.Request{UserID: user, Tier: "agents", RunID: id, ParentRunID: parent,
		Tokens: want, Model: runModelModel}, false)
	if v.conflict {
		if policy.ErrorCode(err) != policy.ECONFLICT {
			h.fail("check: %+v, %v; want a conflict", d, err)
		}
		h.ops[len(h.ops)-1] += ": conflict"
		h.tally["conflict"]++
		return []string{id, parent}
	}
	if err != nil {
		h.fail("check: %v", err)
	}
	retry := map[policy.Outcome]int64{policy.RateLimited: 1}[v.outcome]
	if d.Outcome != v.outcome || d.Reason != v.reason || d.RetryAfter != retry || d.RunRefused != v.cause || (d.CallID != "") != (v.outcome == policy.Admitted) {
		h.fail("check: %s %q retry %d refused by %q, call %q; want %s %q retry %d refused by %q",
			runOutcomes[d.Outcome], d.Reason, d.RetryAfter, d.RunRefused, d.CallID, runOutcomes[v.outcome], v.reason, retry, v.cause)
	}
	if c := v.closes; c != nil {
		c.state, c.cause, c.closed = v.state, v.closeCause, h.now
		h.tally["closed "+string(v.state)+" "+string(v.closeCause)]++
	}
	h.ops[len(h.ops)-1] += fmt.Sprintf(": %s %s", runOutcomes[d.Outcome], d.Reason)
	if v.outcome == policy.Admitted {
		h.admit(v.chain, want, d.CallID)
		h.tally["admitted"]++
	} else {
		h.tally["refused "+string(v.cause)]++
	}
	if d.Run == nil {
		h.fail("check: no run in the decision")
	}
	if r := h.runs[id]; r != nil {
		h.compareRun("the decision's run", &d.Run.Run, r)
	} else if got := d.Run; got.ID != id || got.State != policy.RunOpen || got.Requests != 0 || got.Tokens != 0 || got.CallsInFlight != 0 {
		// A run refused its first request is not opened.
		h.fail("the decision's run: %+v; want %q open, empty", got.Run, id)
	}
	return []string{id, parent}
}

// drawCheck draws who checks in which run, naming which parent.
func (h *runHarness) drawCheck() (user, id, parent string) {
	user = h.users[h.rng.IntN(len(h.users))]
	own, others := h.idsOf(user)
	newID := func() string {
		h.ids++
		return fmt.Sprintf("r-%d", h.ids)
	}
	pick := func(ids []string) string { return ids[h.rng.IntN(len(ids))] }
	switch r := h.rng.IntN(100); {
	case r < 15 || len(own) == 0 && r < 80:
		return user, newID(), ""
	case r < 50 && len(own) > 0: // a sub-agent, half of them under the deepest
		parent = pick(own)
		if r < 32 {
			parent = slices.MaxFunc(own, func(a, b string) int { return cmp.Compare(h.depthOf(a), h.depthOf(b)) })
		}
		return user, newID(), parent
	case r < 55 && len(others) > 0: // under another user's run
		return user, newID(), pick(others)
	case r < 58:
		return user, newID(), fmt.Sprintf("gone-%d", h.rng.IntN(1000))
	case r < 92 && len(own) > 0:
		id = pick(own)
		if r := h.runs[id]; r != nil && h.rng.IntN(3) == 0 {
			parent = r.parent // the same parent named again
		}
		return user, id, parent
	case r < 96 && len(own) > 0: // a wrong parent
		id = pick(own)
		parent = pick(append(own, "r-0"))
		if r := h.runs[id]; parent == id || r != nil && r.parent == parent {
			parent = "r-0"
		}
		return user, id, parent
	case len(others) > 0:
		return user, pick(others), ""
	}
	return user, newID(), ""
}

// depthOf returns the depth of run id, 0 when it has none.
func (h *runHarness) depthOf(id string) int64 {
	if r := h.runs[id]; r != nil {
		return r.depth
	}
	return 0
}

// idsOf returns the ids of user's runs and of others' runs, as stored
// now; user's also include, rarely, one a cleanup deleted, which a check
// opens anew. An open run is four times as likely as another.
func (h *runHarness) idsOf(user string) (own, others []string) {
	for _, id := range slices.Sorted(maps.Keys(h.owner)) {
		r := h.runs[id]
		switch {
		case h.owner[id] != user && r != nil:
			others = append(others, id)
		case h.owner[id] != user:
		case r == nil:
			if h.rng.IntN(10) == 0 {
				own = append(own, id)
			}
		default:
			own = append(own, id)
			if state, _ := h.effective(r); state == policy.RunOpen {
				own = append(own, id, id, id)
			}
		}
	}
	return own, others
}

// admit counts an admitted check in chain, the run it names first (new
// or not), and opens its call.
func (h *runHarness) admit(chain []*refRun, want int64, callID string) {
	r := chain[0]
	if h.runs[r.id] == nil {
		h.runs[r.id], h.owner[r.id] = r, r.user
		if p := h.runs[r.parent]; p != nil {
			p.children = append(p.children, r.id)
			slices.Sort(p.children)
		}
	}
	for _, c := range chain {
		c.requests++
		c.tokens += want
		c.last = h.now
		if h.lim.requests >= 0 && c.requests >= h.lim.requests {
			// The last step the budget allows: used up now.
			c.state, c.cause, c.closed = policy.RunExhausted, policy.CauseRequests, h.now
			h.tally["closed exhausted requests"]++
		}
	}
	h.calls = append(h.calls, &refRunCall{id: callID, run: r.id, reserved: want, expires: h.now.Add(h.callTimeout)})
}

// finish finishes a random call no finish has reached, reporting tokens
// (or nothing: the reservation stands).
func (h *runHarness) finish() []string {
	if len(h.calls) == 0 {
		h.logf("finish: no call")
		return nil
	}
	i := h.rng.IntN(len(h.calls))
	c := h.calls[i]
	h.calls = slices.Delete(h.calls, i, i+1)
	reported := c.reserved
	var rep policy.Report
	switch h.rng.IntN(6) {
	case 0: // none: the reservation stands
	case 1, 2, 3: // more than reserved
		reported = c.reserved + h.rng.Int64N(2*c.reserved+100)
		rep.Tokens = &reported
	default:
		reported = h.rng.Int64N(c.reserved + 1)
		rep.Tokens = &reported
	}
	expired := !c.expires.After(h.now)
	h.logf("finish the call of %q reserving %d (expired %v, deleted %v) with %d", c.run, c.reserved, expired, c.deleted, reported)
	got, err := h.svc.FinishCall(h.ctx, c.id, rep)
	if c.deleted {
		if policy.ErrorCode(err) != policy.ENOTFOUND {
			h.fail("finish of a call deleted: %+v, %v; want not found", got, err)
		}
		h.tally["finish deleted"]++
		return nil
	}
	if err != nil {
		h.fail("finish: %v", err)
	}
	// An expired call counts its reservation, and what a later finish
	// reports above it.
	tokens := reported
	if expired {
		tokens = max(reported, c.reserved)
		h.tally["finish expired"]++
	}
	if got.Tokens != tokens || got.Expired != expired {
		h.fail("finish: call %+v; want %d tokens, expired %v", got, tokens, expired)
	}
	if r := h.runs[c.run]; r != nil {
		for _, a := range h.chain(r) {
			a.tokens += tokens - c.reserved
		}
	}
	h.tally["finish"]++
	return []string{c.run}
}

// end ends a random run (or one never opened): it and its open
// descendants end, and a run that has expired stays expired.
func (h *runHarness) end() []string {
	ids := slices.Sorted(maps.Keys(h.runs))
	id := "r-0"
	if len(ids) > 0 && h.rng.IntN(10) > 0 {
		id = ids[h.rng.IntN(len(ids))]
	}
	h.logf("end %q", id)
	got, err := h.svc.EndRun(h.ctx, id)
	r := h.runs[id]
	if r == nil {
		if policy.ErrorCode(err) != policy.ENOTFOUND {
			h.fail("end of a run never opened: %+v, %v", got, err)
		}
		return nil
	}
	if err != nil {
		h.fail("end: %v", err)
	}
	var walk func(r *refRun)
	walk = func(r *refRun) {
		if r.state == policy.RunOpen {
			r.state, r.cause = h.effective(r)
			if r.state == policy.RunOpen {
				r.state, r.cause = policy.RunEnded, policy.CauseEnded
			}
			r.closed = h.now
		}
		for _, c := range r.children {
			walk(h.runs[c])
		}
	}
	walk(r)
	h.tally["end"]++
	h.compareRun("the ended run", &got.Run, r)
	var touched []string
	for _, c := range h.runs {
		if slices.Contains(h.chain(c), r) {
			touched = append(touched, c.id)
		}
	}
	return touched
}

// clock moves the clock: seconds, minutes, an hour or more, days, or
// onto the next deadline of a run or a call, to the microsecond.
func (h *runHarness) clock() {
	us := func(d time.Duration) time.Duration {
		return time.Duration(h.rng.Int64N(int64(d/time.Microsecond))+1) * time.Microsecond
	}
	var step time.Duration
	switch r := h.rng.IntN(100); {
	case r < 40:
		step = us(time.Minute)
	case r < 70:
		step = us(20 * time.Minute)
	case r < 82:
		step = 20*time.Minute + us(70*time.Minute)
	case r < 95:
		var deadlines []time.Time
		for _, r := range h.runs {
			if state, _ := h.effective(r); state == policy.RunOpen {
				deadlines = append(deadlines, r.last.Add(h.idle))
				if h.lim.duration >= 0 {
					deadlines = append(deadlines, r.opened.Add(time.Duration(h.lim.duration)*time.Second))
				}
			}
		}
		for _, c := range h.calls {
			if c.expires.After(h.now) {
				deadlines = append(deadlines, c.expires)
			}
		}
		if len(deadlines) > 0 {
			slices.SortFunc(deadlines, func(a, b time.Time) int { return a.Compare(b) })
			step = deadlines[h.rng.IntN(min(len(deadlines), 3))].Sub(h.now) + time.Duration(h.rng.IntN(3)-1)*time.Microsecond
		}
	default:
		step = 24*time.Hour + us(5*24*time.Hour)
	}
	step = max(step, time.Microsecond)
	h.now = h.now.Add(step)
	h.logf("clock +%v", step)
}

// prune runs the cleanup: runs go a week after their last request;
// calls expired by the cutoff are settled and deleted.
func (h *runHarness) prune() {
	h.logf("prune")
	if _, err := h.store.Prune(h.ctx, h.now.Add(-policy.KeepFor)); err != nil {
		h.fail("prune: %v", err)
	}
	for _, c := range h.calls {
		if !c.expires.After(h.now.Add(-policy.KeepFor)) {
			c.deleted = true
		}
	}
	for id, r := range h.runs {
		if !r.last.After(h.now.Add(-policy.RunKeepFor)) {
			delete(h.runs, id)
			h.tally["run deleted"]++
		}
	}
	for _, r := range h.runs {
		r.children = slices.DeleteFunc(r.children, func(c string) bool { return h.runs[c] == nil })
	}
}

// compareRun compares a run as the service reports it with the
// reference's. A decision's run has no EndedAt (the API shows none): it
// is compared as read back.
func (h *runHarness) compareRun(what string, got *policy.Run, r *refRun) {
	h.t.Helper()
	state, cause := h.effective(r)
	closed := r.closed
	if what == "the decision's run" {
		closed = got.EndedAt
	}
	var inFlight int64
	if h.runs[r.id] == r {
		inFlight = h.inFlight(r)
	}
	if got.ID != r.id || got.UserID != r.user || got.Parent != r.parent || got.Root != r.root || got.Depth != r.depth ||
		got.State != state || got.Cause != cause || !got.EndedAt.Equal(closed) || got.Requests != r.requests ||
		got.Tokens != r.tokens || int64(got.Cost) != r.tokens*runModelPrice || got.CallsInFlight != inFlight ||
		!got.OpenedAt.Equal(r.opened) && h.runs[r.id] == r || !got.LastAt.Equal(r.last) && h.runs[r.id] == r {
		h.fail("%s: %+v;\nwant %s of %s under %q (root %q, depth %d), %s %q closed at %v, opened %v, last %v, %d requests, %d tokens, %d in flight",
			what, *got, r.id, r.user, r.parent, r.root, r.depth, state, cause, r.closed, r.opened, r.last, r.requests, r.tokens, inFlight)
	}
}

// compareAll compares every run ListRuns reports with the reference's.
func (h *runHarness) compareAll() {
	got, err := h.svc.ListRuns(h.ctx, policy.RunFilter{Limit: 100_000})
	if err != nil {
		h.fail("list runs: %v", err)
	}
	ids := slices.Sorted(maps.Keys(h.runs))
	if len(got) != len(ids) {
		var gotIDs []string
		for _, r := range got {
			gotIDs = append(gotIDs, r.ID)
		}
		h.fail("list runs: %v; want %v", gotIDs, ids)
	}
	for i, id := range ids {
		h.compareRun("listed", &got[i].Run, h.runs[id])
	}
}

// compareOne compares run id as GetRun reports it, children included,
// with the reference's: not found when it has none.
func (h *runHarness) compareOne(id string) {
	if id == "" {
		return
	}
	got, err := h.svc.GetRun(h.ctx, id)
	r := h.runs[id]
	if r == nil {
		if policy.ErrorCode(err) != policy.ENOTFOUND {
			h.fail("get %q: %+v, %v; want not found", id, got, err)
		}
		return
	}
	if err != nil {
		h.fail("get %q: %v", id, err)
	}
	h.compareRun("got", &got.Run, r)
	if !slices.Equal(got.Children, r.children) || got.Limits == nil {
		h.fail("get %q: children %q, limits %v; want children %q", id, got.Children, got.Limits, r.children)
	}
}
