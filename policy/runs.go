package policy

import (
	"context"
	"fmt"
	"time"
)

// A run is one task of an agent, named by the agent on every request it
// makes for it (Request.RunID). Its first request opens it for that user;
// a sub-agent's first request may name its parent (Request.ParentRunID),
// and what the child uses then counts against the child and every
// ancestor. A run's budget is its tier's run object (Tier.Run), counted
// from its first request and never freed by a window: a run over it stays
// refused for good, and its id can never be reopened.
//
// A check in a run is decided inside the user's admission, on the runs as
// the store holds them in the same transaction (RunHistory): all runs of
// a tree belong to one user, so the lock that orders the user's
// admissions orders the tree's, on every replica. DecideRun is the rule,
// a pure function of the runs, the tier and the instant.

// DefaultRunIdle is how long a run may go without a request before it
// expires (see WithRunIdle).
const DefaultRunIdle = time.Hour

// RunKeepFor is how long a run is kept after its last request.
const RunKeepFor = 7 * 24 * time.Hour

// RunState is the state of a run: open until its budget is used up
// (exhausted), it passes its max_duration or goes idle (expired), or an
// admin or its user ends it (ended). Only an open run admits requests.
type RunState string

// The states of a run.
const (
	RunOpen      RunState = "open"
	RunExhausted RunState = "exhausted"
	RunEnded     RunState = "ended"
	RunExpired   RunState = "expired"
)

// RunStates lists every state, open first.
var RunStates = [...]RunState{RunOpen, RunExhausted, RunEnded, RunExpired}

// ValidRunState reports whether s names a state.
func ValidRunState(s RunState) bool {
	for _, v := range RunStates {
		if s == v {
			return true
		}
	}
	return false
}

// RunCause is what closed a run, or refused a check in it: the limit,
// as the metric policyguard_runs_refused_total labels it.
type RunCause string

// The causes of a run's refusal or closing.
const (
	CauseNone        RunCause = ""
	CauseRequests    RunCause = "requests"
	CauseTokens      RunCause = "tokens"
	CauseCost        RunCause = "cost"
	CauseDuration    RunCause = "duration"
	CauseIdle        RunCause = "idle"
	CauseConcurrency RunCause = "concurrency"
	CauseDepth       RunCause = "depth"
	CauseEnded       RunCause = "ended"
	CauseParent      RunCause = "parent"
)

// RunCauses lists every cause but CauseNone.
var RunCauses = [...]RunCause{CauseRequests, CauseTokens, CauseCost, CauseDuration, CauseIdle,
	CauseConcurrency, CauseDepth, CauseEnded, CauseParent}

// Run is one run as stored. Requests, Tokens and Cost include its
// descendants': every request admitted in the run's tree below it, and
// what their calls reserved while open and used once finished.
type Run struct {
	ID     string
	UserID string
	// Tier is the tier of the run's first request.
	Tier string
	// Parent names the run's parent, "" for a root; Root names its tree's
	// root (the run itself for a root).
	Parent, Root string
	// Depth is the run's level in its tree, the root's 1.
	Depth    int64
	OpenedAt time.Time
	// LastAt is when the run or a descendant last had a request admitted.
	LastAt time.Time
	State  RunState
	// Cause is what closed the run; CauseNone while open.
	Cause    RunCause
	Requests int64
	Tokens   int64
	Cost     Money
	// CallsInFlight is the calls of the run and its descendants open at
	// the instant the run was read.
	CallsInFlight int64
	// EndedAt is when the run stopped being open; zero while open.
	EndedAt time.Time
	// Children names the run's children; filled by GetRun alone.
	Children []string
}

// RunHistory is implemented by a History whose store keeps runs.
type RunHistory interface {
	// RunChain returns the run named id and its ancestors, nearest first,
	// as stored, their CallsInFlight counted at now; empty when no run has
	// that id. The run may belong to another user.
	RunChain(id string, now time.Time) ([]Run, error)
}

// RunAdmission is what an admission does to runs, stored in the same
// transaction as the request (Admission.Run).
type RunAdmission struct {
	// Open is a run the request opens, stored before it is counted; nil
	// when the run exists.
	Open *Run
	// ID names the run the request counts in, when Admission.Record is
	// set: its requests and its ancestors' grow by one and their LastAt
	// becomes the request's; what the request's call reserves and uses is
	// counted in them through the call (Call.RunID).
	ID string
	// Close lists the runs the check found closed (exhausted or expired),
	// stored whether or not the request is recorded.
	Close []RunClose
}

// RunClose closes a run at At.
type RunClose struct {
	ID    string
	State RunState
	Cause RunCause
	At    time.Time
}

// RunVerdict is how a check's runs decided it.
type RunVerdict struct {
	// Outcome is Admitted, Denied (a budget used up, for good) or
	// RateLimited (the run's max_concurrent, which frees).
	Outcome Outcome
	Reason  string
	// RetryAfter is 1 when RateLimited, as for the tier's max_concurrent.
	RetryAfter int64
	// Cause is what refused; CauseNone when admitted.
	Cause RunCause
	// Run is the run the check named as the check leaves it: the request
	// and its reservation counted when admitted.
	Run Run
	// Admission is what to store.
	Admission RunAdmission
}

// RunQuery names the run a check is in.
type RunQuery struct {
	UserID, RunID, ParentRunID string
	// Chain is the named run and its ancestors (RunHistory.RunChain);
	// ParentChain is the named parent's, read when the run does not exist.
	Chain, ParentChain []Run
	// Want is what the check's call reserves.
	Want Amounts
	// Idle is how long a run may go without a request (0:
	// DefaultRunIdle).
	Idle time.Duration
}

// runReason returns the refusal reason of run id for cause.
func runReason(id string, cause RunCause, t *Tier) string {
	q := Quote(id)
	switch cause {
	case CauseRequests:
		return "run " + q + " step limit exceeded"
	case CauseTokens:
		return "run " + q + " token limit exceeded"
	case CauseCost:
		return "run " + q + " spend limit exceeded"
	case CauseDuration:
		return "run " + q + " duration exceeded"
	case CauseIdle:
		return "run " + q + " expired: no request for longer than the idle limit"
	case CauseConcurrency:
		return "run " + q + " " + ConcurrencyReason
	case CauseDepth:
		return fmt.Sprintf("run %s depth limit exceeded (max_depth %d)", q, t.RunMaxDepth())
	case CauseEnded:
		return "run " + q + " was ended"
	}
	return "run " + q + " is " + string(RunExhausted)
}

// expiry returns the cause that closes open run r at now under t, and
// CauseNone while it may go on.
func expiry(r *Run, t *Tier, idle time.Duration, now time.Time) RunCause {
	if d := t.RunLimit(MaxRunDuration); d != nil && !now.Before(r.OpenedAt.Add(time.Duration(*d)*time.Second)) {
		return CauseDuration
	}
	if idle <= 0 {
		idle = DefaultRunIdle
	}
	if !now.Before(r.LastAt.Add(idle)) {
		return CauseIdle
	}
	return CauseNone
}

// budget returns the cause that refuses one more request reserving want
// in open run r under t, or CauseNone when it fits; exhausted reports
// whether r's budget is used up for good, whatever the request.
func budget(r *Run, t *Tier, want Amounts) (cause RunCause, exhausted bool) {
	if m := t.RunLimit(MaxRunRequests); m != nil && r.Requests >= *m {
		return CauseRequests, true
	}
	// Tokens and cost count open calls' reservations: used up for good
	// only once no call is open (what is open may settle for less).
	if m := t.RunLimit(MaxRunTokens); m != nil && (r.Tokens >= *m || addSat(r.Tokens, want[MeasureTokens]) > *m) {
		return CauseTokens, r.Tokens >= *m && r.CallsInFlight == 0
	}
	if m := t.RunLimit(MaxRunCost); m != nil && (int64(r.Cost) >= *m || addSat(int64(r.Cost), want[MeasureCost]) > *m) {
		return CauseCost, int64(r.Cost) >= *m && r.CallsInFlight == 0
	}
	if m := t.RunLimit(MaxConcurrent); m != nil && r.CallsInFlight >= *m {
		return CauseConcurrency, false
	}
	return CauseNone, false
}

// DecideRun decides a check of q's user in tier t at now on q's runs: the
// named run and every ancestor must be open and able to hold one more
// request reserving q.Want, all or none. A run of another user is an
// ECONFLICT error, as is a run named with a parent other than its own; a
// parent of another user is ECONFLICT too. A refusal names the run that
// refused. It changes nothing: the verdict's Admission says what to
// store.
func DecideRun(q *RunQuery, t *Tier, now time.Time) (RunVerdict, error) {
	now = now.Truncate(Resolution)
	var v RunVerdict
	chain := q.Chain
	if len(chain) > 0 {
		r := &chain[0]
		if r.UserID != q.UserID {
			return v, Errorf(ECONFLICT, "run %s belongs to another user", Quote(q.RunID))
		}
		if q.ParentRunID != "" && r.Parent != q.ParentRunID {
			return v, Errorf(ECONFLICT, "run %s was opened with parent %s, not %s", Quote(q.RunID), Quote(r.Parent), Quote(q.ParentRunID))
		}
	} else {
		open := Run{ID: q.RunID, UserID: q.UserID, Tier: t.Name, Root: q.RunID, Depth: 1,
			OpenedAt: now, LastAt: now, State: RunOpen}
		if q.ParentRunID != "" {
			pc := q.ParentChain
			if len(pc) == 0 {
				return refuseRun(v, q.RunID, CauseParent, "parent run "+Quote(q.ParentRunID)+" not found", t), nil
			}
			p := &pc[0]
			if p.UserID != q.UserID {
				return v, Errorf(ECONFLICT, "parent run %s belongs to another user", Quote(q.ParentRunID))
			}
			open.Parent, open.Root, open.Depth = p.ID, p.Root, p.Depth+1
			if open.Depth > t.RunMaxDepth() {
				return refuseRun(v, q.RunID, CauseDepth, "", t), nil
			}
			chain = append([]Run{open}, pc...)
		} else {
			chain = []Run{open}
		}
		v.Admission.Open = &chain[0]
	}
	v.Run = chain[0]
	for i := range chain {
		r := &chain[i]
		if r.State != RunOpen && r.State != "" {
			cause := r.Cause
			if cause == CauseNone {
				cause = CauseEnded
			}
			return refuseRun(v, r.ID, cause, "", t), nil
		}
		if cause := expiry(r, t, q.Idle, now); cause != CauseNone {
			v.Admission.Close = append(v.Admission.Close, RunClose{ID: r.ID, State: RunExpired, Cause: cause, At: now})
			return refuseRun(v, r.ID, cause, "", t), nil
		}
		if cause, exhausted := budget(r, t, q.Want); cause != CauseNone {
			if exhausted {
				v.Admission.Close = append(v.Admission.Close, RunClose{ID: r.ID, State: RunExhausted, Cause: cause, At: now})
			}
			v = refuseRun(v, r.ID, cause, "", t)
			if cause == CauseConcurrency {
				v.Outcome, v.RetryAfter = RateLimited, 1
			}
			return v, nil
		}
	}
	v.Outcome, v.Admission.ID = Admitted, q.RunID
	for i := range chain {
		r := &chain[i]
		r.Requests++
		r.Tokens = addSat(r.Tokens, q.Want[MeasureTokens])
		r.Cost = Money(addSat(int64(r.Cost), q.Want[MeasureCost]))
		r.CallsInFlight++
		r.LastAt = now
		if m := t.RunLimit(MaxRunRequests); m != nil && r.Requests >= *m {
			// The last step the budget allows: the next is refused.
			v.Admission.Close = append(v.Admission.Close, RunClose{ID: r.ID, State: RunExhausted, Cause: CauseRequests, At: now})
		}
	}
	v.Run = chain[0]
	return v, nil
}

// refuseRun returns v refusing for good, by run id for cause (reason
// when given).
func refuseRun(v RunVerdict, id string, cause RunCause, reason string, t *Tier) RunVerdict {
	if reason == "" {
		reason = runReason(id, cause, t)
	}
	v.Outcome, v.Reason, v.Cause, v.Admission.ID = Denied, reason, cause, ""
	return v
}

// RunUsage is a run's state in a decision or an answer about usage:
// what the run has used against its tier's run limits.
type RunUsage struct {
	Run
	// Limits is the tier's run object; nil for none.
	Limits *LimitSet
}

// RunStore keeps runs for the API: reading, listing and ending them. It
// is implemented by the request store when it keeps runs.
type RunStore interface {
	// GetRun returns the run named id at now, its Children filled, or
	// ENOTFOUND.
	GetRun(ctx context.Context, id string, now time.Time) (Run, error)
	// ListRuns returns up to f.Limit runs matching f whose ids sort
	// after f.After, in the order of their ids, their CallsInFlight
	// counted at now. It matches f.State to the state it holds, and for
	// RunExpired takes the runs it holds as open too: one may have
	// expired since its last request, which only the Service can tell.
	ListRuns(ctx context.Context, f RunFilter, now time.Time) ([]Run, error)
	// EndRun ends the run named id and its open descendants at now, under
	// the lock of its user, so that the next request naming any of them is
	// refused on every replica; calls in flight finish normally. A run
	// stored open that has expired by now (expired returns its cause,
	// CauseNone for one that has not) is stored expired for that cause
	// instead, as a check would: it was no longer open. It returns the run
	// as ended and fails with ENOTFOUND for an unknown id. A run no longer
	// open is returned unchanged.
	EndRun(ctx context.Context, id string, now time.Time, expired func(Run) RunCause) (Run, error)
}

// RunFilter selects runs to list.
type RunFilter struct {
	// UserID and State select runs of one user and in one state as of
	// now ("" for any): an open run past its max_duration or idle too
	// long is expired, whatever the store holds.
	UserID string
	State  RunState
	// After is the id the page starts after; Limit the most to return.
	After string
	Limit int
}

// ValidateRunID returns an EINVALID error naming field when id cannot
// name a run: run ids follow the rules of user ids (ValidateUserID).
func ValidateRunID(field, id string) error {
	if err := ValidateUserID(id); err != nil {
		return Errorf(EINVALID, "%s%s", field, ErrorMessage(err)[len("user_id"):])
	}
	return nil
}

// decideRun decides a's check on its run, read from h, and sets what adm
// stores of it: a refusal by the run records nothing.
func (a *admission) decideRun(h History, adm *Admission) error {
	c := a.c
	rh, ok := h.(RunHistory)
	if !ok {
		return Errorf(EINTERNAL, "this request store does not keep runs")
	}
	q := RunQuery{UserID: c.UserID, RunID: c.RunID, ParentRunID: c.ParentRunID, Want: c.want(), Idle: a.r.RunIdle}
	var err error
	if q.Chain, err = rh.RunChain(c.RunID, c.Now); err != nil {
		return err
	}
	if len(q.Chain) == 0 && c.ParentRunID != "" {
		if q.ParentChain, err = rh.RunChain(c.ParentRunID, c.Now); err != nil {
			return err
		}
	}
	a.runBefore = Run{ID: c.RunID, UserID: c.UserID, Tier: c.Tier.Name, State: RunOpen}
	if len(q.Chain) > 0 {
		a.runBefore = q.Chain[0]
	}
	if a.run, err = DecideRun(&q, c.Tier, c.Now); err != nil {
		return err
	}
	ra := a.run.Admission
	if a.run.Outcome != Admitted {
		adm.Record = false
	} else if !adm.Record {
		// Refused by the user's own limits: the run is as it was.
		ra = RunAdmission{}
	}
	if !c.DryRun && (ra.Open != nil || ra.ID != "" || len(ra.Close) > 0) {
		adm.Run = &ra
	}
	return nil
}

// runUsage returns the run of a's check as the check leaves it.
func (a *admission) runUsage(admitted bool) *RunUsage {
	u := &RunUsage{Run: a.runBefore, Limits: a.c.Tier.Run}
	if admitted {
		u.Run = a.run.Run
	}
	for _, cl := range a.run.Admission.Close {
		if cl.ID == u.ID && (admitted || cl.Cause != CauseRequests) {
			u.State, u.Cause = cl.State, cl.Cause
		}
	}
	return u
}

// WithRunIdle sets how long a run may go without a request before it
// expires (default DefaultRunIdle); d <= 0 keeps the default.
func WithRunIdle(d time.Duration) Option {
	return func(s *Service) {
		if d > 0 {
			s.limiter.RunIdle = d
		}
	}
}

// RunIdle returns how long a run may go without a request before it
// expires.
func (s *Service) RunIdle() time.Duration {
	if s.limiter.RunIdle > 0 {
		return s.limiter.RunIdle
	}
	return DefaultRunIdle
}

// runStore returns the request store's runs, or an error when it keeps
// none.
func (s *Service) runStore() (RunStore, error) {
	rs, ok := s.limiter.Store.(RunStore)
	if !ok {
		return nil, Errorf(EINTERNAL, "this request store does not keep runs")
	}
	return rs, nil
}

// GetRun returns the run named id with its tier's run limits, its state
// as of now: an open run past its max_duration or idle too long reads as
// expired before the next request stores it so.
func (s *Service) GetRun(ctx context.Context, id string) (RunUsage, error) {
	if err := ValidateRunID("run id", id); err != nil {
		return RunUsage{}, err
	}
	rs, err := s.runStore()
	if err != nil {
		return RunUsage{}, err
	}
	now := s.now()
	r, err := rs.GetRun(ctx, id, now)
	if err != nil {
		return RunUsage{}, err
	}
	return s.runUsage(ctx, r, now), nil
}

// runUsage returns r with its tier's run limits and its state at now.
func (s *Service) runUsage(ctx context.Context, r Run, now time.Time) RunUsage {
	u := RunUsage{Run: r}
	t, err := s.tiers.Tier(ctx, r.Tier)
	if err != nil {
		// A tier deleted since: the run shows no limits.
		return u
	}
	u.Limits = t.Run
	if r.State == RunOpen {
		if cause := expiry(&r, &t, s.RunIdle(), now.Truncate(Resolution)); cause != CauseNone {
			u.State, u.Cause = RunExpired, cause
		}
	}
	return u
}

// ListRuns returns a page of up to f.Limit runs matching f, in the order
// of their ids, each with its tier's run limits and its state as of now.
// The store selects by the state it holds, so the runs it holds as open
// that have expired since are told apart here: a page may take more than
// one read.
func (s *Service) ListRuns(ctx context.Context, f RunFilter) ([]RunUsage, error) {
	if f.UserID != "" {
		if err := ValidateUserID(f.UserID); err != nil {
			return nil, err
		}
	}
	if f.State != "" && !ValidRunState(f.State) {
		return nil, Errorf(EINVALID, "state must be open, exhausted, ended or expired")
	}
	rs, err := s.runStore()
	if err != nil {
		return nil, err
	}
	now := s.now()
	out := []RunUsage{}
	for {
		runs, err := rs.ListRuns(ctx, f, now)
		if err != nil {
			return nil, err
		}
		for _, r := range runs {
			if u := s.runUsage(ctx, r, now); f.State == "" || u.State == f.State {
				out = append(out, u)
			}
			if len(out) == f.Limit {
				return out, nil
			}
		}
		if len(runs) < f.Limit || len(runs) == 0 {
			return out, nil
		}
		f.After = runs[len(runs)-1].ID
	}
}

// EndRun ends the run named id and its descendants now (see
// RunStore.EndRun): the kill switch of a runaway agent. A run that has
// expired stays expired. The gateway calls it for a run's own user, the
// API for an admin.
func (s *Service) EndRun(ctx context.Context, id string) (RunUsage, error) {
	if err := ValidateRunID("run id", id); err != nil {
		return RunUsage{}, err
	}
	rs, err := s.runStore()
	if err != nil {
		return RunUsage{}, err
	}
	tiers, err := s.tiers.Tiers(ctx)
	if err != nil {
		return RunUsage{}, err
	}
	now := s.now()
	idle := s.RunIdle()
	expired := func(r Run) RunCause {
		for i := range tiers {
			if tiers[i].Name == r.Tier {
				return expiry(&r, &tiers[i], idle, now.Truncate(Resolution))
			}
		}
		return CauseNone // a tier deleted since: no limits, as runUsage
	}
	r, err := rs.EndRun(ctx, id, now, expired)
	if err != nil {
		return RunUsage{}, err
	}
	return s.runUsage(ctx, r, now), nil
}

// EndOwnRun is EndRun for the run's own user, as the gateway ends a run
// with the user's gateway key: a run of another user is ENOTFOUND, as if
// it did not exist, so that a key learns nothing of others' runs.
func (s *Service) EndOwnRun(ctx context.Context, userID, id string) (RunUsage, error) {
	r, err := s.GetRun(ctx, id)
	if err != nil {
		return RunUsage{}, err
	}
	if r.UserID != userID {
		return RunUsage{}, Errorf(ENOTFOUND, "run %s not found", Quote(id))
	}
	return s.EndRun(ctx, id)
}
