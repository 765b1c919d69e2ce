package db_test

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

// The model test runs random sequences of operations against the real
// service on a SQLite file and against refModel, a reference written here
// from the README's rules alone: a list of timestamps per user, and per
// account's pool (see model_accounts_test.go), counted by scanning, and
// the tokens and cost of their calls, priced by its own list of the price
// table's versions (see model_spend_test.go). The reference shares no code
// with policy.Evaluate, policy's pricing or the store, so a mistake in
// any shows up as a disagreement.

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

// refNumLimits is the number of limits: of policy.LimitNames.
const refNumLimits = 11

// refLimits are a tier's limits. tokens, cost (spend limits, in
// picodollars) and maxConcurrent are -1 when unset.
type refLimits struct {
	perMinute, burst, perHour, perDay int64
	tokens                            [3]int64
	cost                              [3]int64
	maxConcurrent                     int64
	// shadow, when set, is shadow limits: per minute, burst, per hour, per
	// day. A user's overrides never change them.
	shadow *[4]int64
	// pool, when set, is the tier's account object: the pooled limits of
	// an account on this plan, in the order of policy.LimitNames, -1 for
	// none.
	pool *[refNumLimits]int64
}

// metered reports whether a check the tier admits opens a call.
func (l refLimits) metered() bool {
	return l.tokens != [3]int64{-1, -1, -1} || l.cost != [3]int64{-1, -1, -1} || l.maxConcurrent >= 0
}

// The measures a call counts: its tokens and its cost.
const (
	refTokensMeasure = iota
	refCostMeasure
)

// measure returns l's limits of measure ms (-1 for none).
func (l refLimits) measure(ms int) [3]int64 {
	if ms == refCostMeasure {
		return l.cost
	}
	return l.tokens
}

// ceilings returns the ceiling of each window: the burst widens only the
// minute.
func (l refLimits) ceilings() [3]int64 {
	return [3]int64{l.perMinute + l.burst, l.perHour, l.perDay}
}

// refUser is a user record as the README describes it: tier is the
// assigned tier ("" for none), over holds an override per limit in the
// order of policy.LimitNames: refInherit keeps the tier's, -1 (for the
// token limits and max_concurrent) removes it; account names the account
// the user belongs to ("" for none).
type refUser struct {
	tier    string
	over    [refNumLimits]int64
	account string
}

const refInherit = -2

// resolve returns what a check of user naming tier and account is decided
// under: the name and limits of its tier, with the user's overrides, and
// the pool it draws on besides (nil for none); or the code of the error
// that refuses to decide it. The account is the record's, else the named
// one when the check is believed; one named that does not exist is
// invalid. The tier is the assigned one, else the account's plan, else the
// named one when it is believed, else the default.
func (m *refModel) resolve(user, tier, account string, trusted bool, defaultTier string) (name string, l refLimits, pool *refPool, code string) {
	u, ok := m.users[user]
	id := ""
	switch {
	case ok && u.account != "":
		id = u.account
	case trusted:
		id = account
	}
	acct, exists := m.accounts[id]
	switch {
	case id != "" && !exists:
		return "", refLimits{}, nil, policy.EINVALID
	case id != "":
		pool = &refPool{id: id, tier: acct.tier, limits: m.poolLimits(acct)}
	}
	if !trusted {
		tier = defaultTier
	}
	switch {
	case ok && u.tier != "":
		tier = u.tier
	case id != "":
		tier = acct.tier
	}
	l = m.tiers[tier]
	if !ok {
		return tier, l, pool, ""
	}
	for i, p := range l.fields() {
		if u.over[i] != refInherit {
			*p = u.over[i]
		}
	}
	return tier, l, pool, ""
}

// fields returns pointers to l's limits in the order of
// policy.LimitNames.
func (l *refLimits) fields() [refNumLimits]*int64 {
	return [refNumLimits]*int64{&l.perMinute, &l.perHour, &l.perDay, &l.burst, &l.tokens[0], &l.tokens[1], &l.tokens[2], &l.maxConcurrent,
		&l.cost[0], &l.cost[1], &l.cost[2]}
}

// values returns l's limits in the order of policy.LimitNames.
func (l refLimits) values() (v [refNumLimits]int64) {
	for i, p := range l.fields() {
		v[i] = *p
	}
	return v
}

// refRecord is one admitted request, the ceilings it was admitted under
// and the tier it was decided under.
type refRecord struct {
	at       time.Time
	ceilings [3]int64
	tier     string
}

// refModel is the reference implementation.
type refModel struct {
	tiers map[string]refLimits
	// users are the user records: an assigned tier, overrides and an
	// account.
	users map[string]refUser
	// accounts are the accounts that exist, by id.
	accounts map[string]refAccount
	// hist holds the admitted requests by user, in the order admitted,
	// and each account's pool by policy.AccountKey: every request of its
	// members admitted while they belonged to it.
	hist map[string][]refRecord
	// The calls, and each user's (or pool's) finished tokens and cost in
	// the order counted. A member's call is in its pool too, as
	// policy.PoolCallID(id).
	calls   map[string]*refCall
	tokens  map[string][]refTokens
	timeout time.Duration
	// prices are the versions of the price table.
	prices *refPrices
	// overridden counts the users previews replayed under their overrides.
	overridden int
}

// refCall is one call as the README describes it.
type refCall struct {
	id, user   string
	account    string // whose pool holds the call too; "" for none
	reserved   int64
	expires    time.Time
	finished   bool
	finishedAt time.Time
	counted    int64
	reported   int64 // -1 until its caller finished it
	expired    bool
	// How it is priced, at admission for its whole life; and its cost,
	// as counted, reserved and reported, as its tokens are.
	model                            string
	price                            *refPrice
	version                          int64
	reservedCost, cost, reportedCost int64
}

// refTokens is tokens and their cost counted at an instant.
type refTokens struct {
	at   time.Time
	n    int64
	cost int64
}

// amount returns r's amount of measure ms.
func (r refTokens) amount(ms int) int64 {
	if ms == refCostMeasure {
		return r.cost
	}
	return r.n
}

type refWindowState struct{ count, limit, remaining, reset int64 }

// refTokenState is a window's tokens; limited is false when the tier sets
// no limit for it.
type refTokenState struct {
	limited                       bool
	limit, used, remaining, reset int64
}

type refDecision struct {
	allowed    bool
	reason     string
	retryAfter int64
	windows    [3]refWindowState
	tokens     [3]refTokenState
	cost       [3]refTokenState
	metered    bool
	// inFlight is the calls in flight after the check, when the tier sets
	// max_concurrent.
	inFlight, maxConcurrent int64
	// zeroBlocked is true when a blocking window has a ceiling of 0, or a
	// blocking call limit no wait on finished tokens lifts: no amount of
	// waiting admits the request.
	zeroBlocked bool
	// shadow is set when the tier has shadow limits: whether they admit
	// the request, and the reason they would refuse it with.
	shadow *refShadow
	// account is the pool's state after a member's check; nil for a
	// user in no account. ownRefused and poolRefused say which refused it.
	account                 *refPoolState
	ownRefused, poolRefused bool
}

// refPoolState is an account's pool after a member's check, as the
// user's windows are the user's.
type refPoolState struct {
	id      string
	limits  [refNumLimits]int64 // as policy.LimitNames; -1 for none
	windows [3]refWindowState
	tokens  [3]refTokenState
	cost    [3]refTokenState
	// maxConcurrent is -1 when the pool sets none.
	maxConcurrent, inFlight int64
}

type refShadow struct {
	allowed bool
	reason  string
}

// blocked returns the first window, in check order, in which recs hold at
// least ceilings allows at now, as its refusal reason; "" when none.
func blocked(recs []refRecord, ceilings [3]int64, now time.Time) string {
	for i, w := range refWindows {
		if int64(len(inWindow(recs, w, now))) >= ceilings[i] {
			return "per-" + w.name + " limit exceeded"
		}
	}
	return ""
}

// countAt is when tokens finished at t are counted for user: at t, or at
// the newest counted tokens' time when the clock stepped back.
func (m *refModel) countAt(user string, t time.Time) time.Time {
	rows := m.tokens[user]
	if len(rows) > 0 && rows[len(rows)-1].at.After(t) {
		return rows[len(rows)-1].at
	}
	return t
}

// count adds n tokens costing cost of user finished at t.
func (m *refModel) count(user string, t time.Time, n, cost int64) {
	if n > 0 || cost > 0 {
		m.tokens[user] = append(m.tokens[user], refTokens{m.countAt(user, t), n, cost})
	}
}

// expire finishes user's calls open past their expiry at now, each at its
// expiry with its reservation, in the order they expired (ties by id).
func (m *refModel) expire(user string, now time.Time) {
	var due []*refCall
	for _, c := range m.calls {
		if c.user == user && !c.finished && !c.expires.After(now) {
			due = append(due, c)
		}
	}
	slices.SortFunc(due, func(a, b *refCall) int {
		if c := a.expires.Compare(b.expires); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	for _, c := range due {
		c.finished, c.expired, c.counted, c.cost = true, true, c.reserved, c.reservedCost
		c.finishedAt = m.countAt(user, c.expires)
		m.count(user, c.expires, c.reserved, c.reservedCost)
	}
}

// clone returns a copy whose calls and tokens can change without changing m.
func (m *refModel) clone() *refModel {
	c := *m
	c.calls = map[string]*refCall{}
	for id, call := range m.calls {
		cp := *call
		c.calls[id] = &cp
	}
	c.tokens = map[string][]refTokens{}
	for u, rows := range m.tokens {
		c.tokens[u] = slices.Clone(rows)
	}
	return &c
}

// inFlight returns user's open calls and what they reserve of each
// measure.
func (m *refModel) inFlight(user string) (n int64, reserved [2]int64) {
	for _, c := range m.calls {
		if c.user == user && !c.finished {
			n++
			reserved[refTokensMeasure] += c.reserved
			reserved[refCostMeasure] += c.reservedCost
		}
	}
	return n, reserved
}

// after returns user's amount of measure ms counted strictly after t,
// and the oldest time among the rows that count some.
func (m *refModel) after(user string, ms int, t time.Time) (n int64, oldest time.Time) {
	for _, r := range m.tokens[user] {
		if a := r.amount(ms); a > 0 && r.at.After(t) {
			if n == 0 {
				oldest = r.at
			}
			n += a
		}
	}
	return n, oldest
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

// check decides one request of user under tier, whose limits with the
// user's overrides are l, and of its account's pool when it draws on one,
// the way the README says, and records it (with its call, named id)
// unless refused or a dry run. A check that is not a dry run and meters
// calls (its tier or its pool does) first finishes the calls that
// expired, its user's and its pool's; a dry run counts them as finished
// without changing anything. The tier's shadow limits, which no override
// changes, are decided over the user's history.
//
// A member's check is admitted only when both its own limits and its
// pool's admit it; nothing is recorded otherwise, in either history. It
// is refused for the user's reason, unless only the pool refuses, or both
// do and the pool's wait is the longer; when both refuse, retry_after is
// the longer wait.
//
// The call reserves tokens and their cost as pr prices them.
func (m *refModel) check(user, tier string, l refLimits, pool *refPool, tokens int64, pr refPricing, now time.Time, dryRun bool, id string) refDecision {
	now = now.Truncate(time.Microsecond) // timestamps are stored in microseconds
	want := [2]int64{tokens, pr.reserved}
	metered := l.metered()
	var pl refLimits
	if pool != nil {
		pl = poolTier(pool.limits)
		metered = metered || pl.metered()
	}
	view := m
	if metered {
		if dryRun {
			view = m.clone()
		}
		view.expire(user, now)
		if pool != nil {
			view.expire(pool.key(), now)
		}
	}
	d := view.verdict(user, l, want, now, metered)
	admitted := d.allowed
	if pool != nil {
		p := view.verdict(pool.key(), pl, want, now, metered)
		admitted = d.allowed && p.allowed
		d.ownRefused, d.poolRefused = !d.allowed, !p.allowed
		if !p.allowed && (d.allowed || p.retryAfter > d.retryAfter) {
			d.reason, d.retryAfter = policy.AccountReasonPrefix+p.reason, max(d.retryAfter, p.retryAfter)
		}
		d.allowed = admitted
		d.zeroBlocked = d.zeroBlocked || p.zeroBlocked
		s := refPoolState{id: pool.id, limits: pool.limits, maxConcurrent: pl.maxConcurrent}
		s.windows, s.tokens, s.cost, s.inFlight = view.state(pool.key(), pl, want, now, admitted)
		d.account = &s
	}
	d.windows, d.tokens, d.cost, d.inFlight = view.state(user, l, want, now, admitted)
	if admitted && !dryRun {
		m.record(user, tier, l.ceilings(), now)
		call := refCall{id: id, user: user, reserved: tokens, expires: now.Add(m.timeout), reported: -1,
			model: pr.model, price: pr.price, version: pr.version, reservedCost: pr.reserved}
		if metered {
			m.calls[id] = &call
		}
		if pool != nil {
			m.record(pool.key(), pool.tier, pl.ceilings(), now)
			if metered {
				call.account = pool.id
				pc := call
				pc.id, pc.user, pc.account = policy.PoolCallID(id), pool.key(), ""
				m.calls[pc.id] = &pc
			}
		}
	}
	return d
}

// verdict decides a check reserving want (tokens and cost) at now against
// the history of key (a user's or a pool's) under l: whether it admits
// it, why not and when to retry. Expired calls were finished already.
// metered says the check meters calls, which l may not.
func (m *refModel) verdict(key string, l refLimits, want [2]int64, now time.Time, metered bool) refDecision {
	c := l.ceilings()
	recs := m.hist[key]
	d := refDecision{allowed: true, metered: metered, maxConcurrent: l.maxConcurrent}
	if sl := l.shadow; sl != nil {
		reason := blocked(recs, [3]int64{sl[0] + sl[1], sl[2], sl[3]}, now)
		d.shadow = &refShadow{allowed: reason == "", reason: reason}
	}
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
	if !metered {
		return d
	}
	refuse := func(reason string, retry int64) {
		if d.allowed {
			d.allowed, d.reason = false, reason
		}
		d.retryAfter = max(d.retryAfter, retry)
	}
	open, reserved := m.inFlight(key)
	if l.maxConcurrent >= 0 && open >= l.maxConcurrent {
		refuse("concurrent call limit exceeded", 1)
		d.zeroBlocked = true
	}
	// Tokens, then spend, each window by window.
	for ms, what := range [2]string{" token", " spend"} {
		for i, w := range refWindows {
			limit := l.measure(ms)[i]
			finished, _ := m.after(key, ms, now.Add(-w.length))
			if limit < 0 || finished+reserved[ms]+want[ms] <= limit {
				continue
			}
			reason := "per-" + w.name + what + " limit exceeded"
			// Wait until the amount finished after some instant that
			// counted some fits beside the reservations: the oldest such
			// instant, plus the window.
			budget := limit - reserved[ms] - want[ms]
			if budget < 0 {
				refuse(reason, refCeilSeconds(w.length))
				d.zeroBlocked = true
				continue
			}
			for _, r := range m.tokens[key] {
				if r.amount(ms) == 0 {
					continue
				}
				if after, _ := m.after(key, ms, r.at); after <= budget {
					refuse(reason, refCeilSeconds(r.at.Add(w.length).Sub(now)))
					break
				}
			}
		}
	}
	return d
}

// state returns the windows of key's history under l after a check
// reserving want at now, admitted or not: its requests, tokens, cost and
// calls in flight, counting the check's own only when admitted.
func (m *refModel) state(key string, l refLimits, want [2]int64, now time.Time, admitted bool) (windows [3]refWindowState, tok, cost [3]refTokenState, inFlight int64) {
	c := l.ceilings()
	after := m.hist[key]
	var mine [2]int64
	var calls int64
	if admitted {
		// Recorded at now, as the lesson records time.time(), whatever
		// else was recorded then; at the newest timestamp when the clock
		// stepped back before it.
		after = append(slices.Clone(after), refRecord{at: recordAt(after, now)})
		mine, calls = want, 1
	}
	for i, w := range refWindows {
		in := inWindow(after, w, now)
		n := int64(len(in))
		s := refWindowState{count: n, limit: c[i], remaining: max(c[i]-n, 0)}
		if n > 0 {
			s.reset = refCeilSeconds(in[0].Add(w.length).Sub(now))
		}
		windows[i] = s
	}
	open, reserved := m.inFlight(key)
	inFlight = open + calls
	for ms, states := range [2]*[3]refTokenState{&tok, &cost} {
		for i, w := range refWindows {
			limit := l.measure(ms)[i]
			if limit < 0 {
				continue
			}
			finished, oldest := m.after(key, ms, now.Add(-w.length))
			s := refTokenState{limited: true, limit: limit, used: finished + reserved[ms] + mine[ms]}
			s.remaining = max(s.limit-s.used, 0)
			if finished > 0 {
				s.reset = refCeilSeconds(oldest.Add(w.length).Sub(now))
			}
			states[i] = s
		}
	}
	return windows, tok, cost, inFlight
}

// recordAt is when a request admitted at now is recorded after recs: at
// now, or at the newest when the clock stepped back before it.
func recordAt(recs []refRecord, now time.Time) time.Time {
	if len(recs) > 0 {
		if newest := recs[len(recs)-1].at; newest.After(now) {
			return newest
		}
	}
	return now
}

// record appends a request admitted at now to key's history, admitted
// under tier and its ceilings.
func (m *refModel) record(key, tier string, ceilings [3]int64, now time.Time) {
	recs := m.hist[key]
	m.hist[key] = append(slices.Clone(recs), refRecord{at: recordAt(recs, now), ceilings: ceilings, tier: tier})
}

// refFinish is the answer to a finish: the call or an error code.
type refFinish struct {
	code string
	call refCall
}

// finish finishes call id with what r reports at now; a member's call,
// in its pool too (unless the pool was forgotten).
func (m *refModel) finish(id string, r refReport, now time.Time) refFinish {
	if c, ok := m.calls[id]; ok && policy.IsAccountKey(c.user) {
		return refFinish{code: policy.ENOTFOUND} // the pool's copy is no caller's
	}
	f := m.finishOne(id, r, now)
	if f.code == "" && f.call.account != "" {
		if pf := m.finishOne(policy.PoolCallID(id), r, now); pf.code != "" && pf.code != policy.ENOTFOUND {
			panic(fmt.Sprintf("the pool's copy of %s: %s", id, pf.code)) // the reference contradicts itself
		}
	}
	return f
}

// finishOne finishes call id in its own history alone.
func (m *refModel) finishOne(id string, r refReport, now time.Time) refFinish {
	now = now.Truncate(time.Microsecond)
	c, ok := m.calls[id]
	if !ok {
		return refFinish{code: policy.ENOTFOUND}
	}
	n, cost := c.settle(r)
	if c.reported >= 0 {
		// A retry says what the finish said, tokens and cost alike.
		if c.reported != n || c.reportedCost != cost {
			return refFinish{code: policy.ECONFLICT}
		}
		return refFinish{call: *c}
	}
	m.expire(c.user, now)
	c.reported, c.reportedCost = n, cost
	if c.finished {
		// Expired first: only tokens or cost above the reservation add,
		// now.
		m.count(c.user, now, max(n-c.reserved, 0), max(cost-c.reservedCost, 0))
		c.counted, c.cost = max(c.reserved, n), max(c.reservedCost, cost)
	} else {
		c.finished, c.finishedAt, c.counted, c.cost = true, m.countAt(c.user, now), n, cost
		m.count(c.user, now, n, cost)
	}
	return refFinish{call: *c}
}

// keepAlive moves the expiry of open call id to now plus the timeout.
func (m *refModel) keepAlive(id string, now time.Time) refFinish {
	now = now.Truncate(time.Microsecond)
	c, ok := m.calls[id]
	switch {
	case !ok || policy.IsAccountKey(c.user):
		return refFinish{code: policy.ENOTFOUND}
	case c.finished || !c.expires.After(now):
		return refFinish{code: policy.ECONFLICT}
	}
	c.expires = now.Add(m.timeout)
	if pc, ok := m.calls[policy.PoolCallID(id)]; ok && c.account != "" {
		pc.expires = c.expires
	}
	return refFinish{call: *c}
}

// forget deletes everything of user, or of an account's pool when user
// is its policy.AccountKey.
func (m *refModel) forget(user string) {
	delete(m.hist, user)
	delete(m.tokens, user)
	for id, c := range m.calls {
		if c.user == user {
			delete(m.calls, id)
		}
	}
}

// prune deletes every record at or before cutoff; it finishes the calls
// expired by then, and deletes the calls finished and the tokens counted at
// or before it.
func (m *refModel) prune(cutoff time.Time) {
	for u, recs := range m.hist {
		m.hist[u] = slices.DeleteFunc(slices.Clone(recs), func(r refRecord) bool { return !r.at.After(cutoff) })
	}
	for _, u := range modelKeys() {
		m.expire(u, cutoff)
	}
	for id, c := range m.calls {
		if c.finished && !c.finishedAt.After(cutoff) {
			delete(m.calls, id)
		}
	}
	for u, rows := range m.tokens {
		m.tokens[u] = slices.DeleteFunc(rows, func(r refTokens) bool { return !r.at.After(cutoff) })
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
	opFinish
	opKeepAlive
	opSetUser
	opDeleteUser
	opSetAccount
	opDeleteAccount
	// opMove writes a user's record as it stands with only its account
	// changed: a user joining, leaving or changing account.
	opMove
	// opPutPrices puts a new version of the price table, in force now.
	opPutPrices
)

type modelOp struct {
	kind   opKind
	user   int
	tier   int
	step   time.Duration
	limits refLimits
	tokens int64 // a check's; a finish's, -1 for none
	call   int   // which call a finish or keepalive names (see callID)
	// distrust decides a check on a service that ignores its tier (and
	// its account); other writes a user or account record through a
	// second store on the same file.
	distrust, other bool
	user2           refUser // what set-user writes
	// accountID is the account a check names (context.account_id), or
	// that set-account and delete-account write; acct what set-account
	// writes.
	accountID string
	acct      refAccount
	// model is the model a check names; split, a check's reservation
	// split by kind (nil for none); prices, what put-prices puts.
	model  string
	split  *[4]int64
	prices map[string]refPrice
	// A finish's tokens are its call's reservation plus tokens when
	// near; cuts, when set, split them by kind as its usage, reported
	// with their total beside it when both.
	near bool
	cuts *[4]byte
	both bool
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
		return fmt.Sprintf("check(%s, %s, account %q, tokens %d%s, model %q, distrust %v)", modelUsers[o.user], modelTiers[o.tier], o.accountID, o.tokens, o.splitString(), o.model, o.distrust)
	case opDryRun:
		return fmt.Sprintf("dry-run(%s, %s, account %q, tokens %d%s, model %q, distrust %v)", modelUsers[o.user], modelTiers[o.tier], o.accountID, o.tokens, o.splitString(), o.model, o.distrust)
	case opPutPrices:
		return fmt.Sprintf("put-prices(%v)", o.prices)
	case opSetUser:
		return fmt.Sprintf("set-user(%s, tier %q, overrides %v, account %q, by another store %v)", modelUsers[o.user], o.user2.tier, o.user2.over, o.user2.account, o.other)
	case opDeleteUser:
		return fmt.Sprintf("delete-user(%s, by another store %v)", modelUsers[o.user], o.other)
	case opMove:
		return fmt.Sprintf("move(%s, to account %q, by another store %v)", modelUsers[o.user], o.accountID, o.other)
	case opSetAccount:
		return fmt.Sprintf("set-account(%q, plan %s, overrides %v, by another store %v)", o.accountID, o.acct.tier, o.acct.over, o.other)
	case opDeleteAccount:
		return fmt.Sprintf("delete-account(%q, by another store %v)", o.accountID, o.other)
	case opFinish:
		tokens := fmt.Sprint(o.tokens)
		if o.near {
			tokens = fmt.Sprintf("reserved%+d", o.tokens)
		}
		if o.cuts != nil {
			return fmt.Sprintf("finish(call %d, usage of %s tokens cut at %v, with its total %v)", o.call, tokens, *o.cuts, o.both)
		}
		return fmt.Sprintf("finish(call %d, tokens %s)", o.call, tokens)
	case opKeepAlive:
		return fmt.Sprintf("keepalive(call %d)", o.call)
	case opAdvance:
		return fmt.Sprintf("advance(%v)", o.step)
	case opSetTier:
		l := o.limits
		shadow := "none"
		if l.shadow != nil {
			shadow = fmt.Sprintf("minute %d + burst %d, hour %d, day %d", l.shadow[0], l.shadow[1], l.shadow[2], l.shadow[3])
		}
		pool := "none"
		if l.pool != nil {
			pool = fmt.Sprint(*l.pool)
		}
		return fmt.Sprintf("set-tier(%s, minute %d + burst %d, hour %d, day %d, tokens %v, cost %v, max_concurrent %d, shadow %s, account %s)",
			modelTiers[o.tier], l.perMinute, l.burst, l.perHour, l.perDay, l.tokens, l.cost, l.maxConcurrent, shadow, pool)
	case opForget:
		return fmt.Sprintf("forget(%q)", modelKeys()[o.user])
	default:
		return "prune(now - 24h)"
	}
}

// splitString says a check's reservation split, when it has one.
func (o modelOp) splitString() string {
	if o.split == nil {
		return ""
	}
	return fmt.Sprintf(" split %v", *o.split)
}

// exactSteps are clock steps that land exactly on (or a microsecond beside)
// a window's edge, where "strictly after" matters, alone or added up: a
// sequence's zero steps put many checks on one instant, and these then
// move them out of a window together.
var exactSteps = [...]time.Duration{
	time.Minute, time.Hour, 24 * time.Hour,
	time.Minute - time.Microsecond, time.Minute + time.Microsecond,
	time.Second, time.Hour - time.Microsecond, 24*time.Hour - time.Microsecond,
	30 * time.Second, 20 * time.Second, 30 * time.Minute, 12 * time.Hour, 8 * time.Hour,
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
	l := refLimits{
		perMinute: int64(r.next() % 6),
		burst:     int64(r.next() % 4),
		perHour:   int64(r.next() % 14),
		perDay:    int64(r.next() % 24),
	}
	// Token limits and max_concurrent, each unset half the time; small,
	// so that calls of a few tokens hit them.
	for i, most := range [3]byte{50, 90, 150} {
		l.tokens[i] = -1
		if b := r.next(); b%2 == 1 {
			l.tokens[i] = int64(b / 2 % most)
		}
	}
	l.maxConcurrent = -1
	if b := r.next(); b%2 == 1 {
		l.maxConcurrent = int64(b / 2 % 4)
	}
	// Spend limits, each set a quarter of the time: a few calls' worth.
	for i, most := range [3]int64{20, 40, 80} {
		l.cost[i] = r.costLimit(most)
	}
	// Shadow limits a third of the time, as small as the real ones.
	if b := r.next(); b%3 == 0 {
		l.shadow = &[4]int64{int64(r.next() % 6), int64(r.next() % 4), int64(r.next() % 14), int64(r.next() % 24)}
	}
	l.pool = r.pool()
	// A tier's limits must all be able to bind: each window's at least
	// the shorter windows' of its kind that are set.
	ascending(&l.perMinute, &l.perHour, &l.perDay)
	ascending(&l.tokens[0], &l.tokens[1], &l.tokens[2])
	ascending(&l.cost[0], &l.cost[1], &l.cost[2])
	if l.shadow != nil {
		ascending(&l.shadow[0], &l.shadow[2], &l.shadow[3])
	}
	return l
}

// ascending sorts the values of windows, shortest first, that are set (at
// least 0) among themselves.
func ascending(windows ...*int64) {
	var set []int64
	for _, p := range windows {
		if *p >= 0 {
			set = append(set, *p)
		}
	}
	slices.Sort(set)
	for _, p := range windows {
		if *p >= 0 {
			*p, set = set[0], set[1:]
		}
	}
}

// binds reports whether the limits of a record, over[i] in the order of
// policy.LimitNames, can all bind on tier l (nil for a record that
// assigns none, whose overrides are compared among themselves): within
// the requests, the tokens and the spend, no set window below a shorter
// one.
func binds(l *refLimits, over [refNumLimits]int64) bool {
	v := refNoLimits()
	if l != nil {
		v = l.values()
	}
	for i, o := range over {
		if o != refInherit {
			v[i] = o
		}
	}
	for _, kind := range [][]int64{v[0:3], v[4:7], v[8:11]} {
		shorter := int64(-1)
		for _, w := range kind {
			if w < 0 {
				continue
			}
			if w < shorter {
				return false
			}
			shorter = w
		}
	}
	return true
}

// user decodes a user record: no tier or one of the model's, and each
// limit inherited three times in four.
func (r *opReader) user() refUser {
	var u refUser
	if t := int(r.next()) % (len(modelTiers) + 1); t > 0 {
		u.tier = modelTiers[t-1]
	}
	for i := range u.over {
		u.over[i] = refInherit
		switch b := r.next(); {
		case b%4 == 1 && i >= 8:
			u.over[i] = int64(b/4%8) * 3 * refCostUnit
		case b%4 == 1:
			u.over[i] = int64(b / 4 % 8)
		case b%8 == 2 && i >= 4:
			u.over[i] = -1 // no limit: only the optional limits
		}
	}
	u.account = r.accountName()
	return u
}

// tokens decodes a check's tokens, small and often 0.
func (r *opReader) tokens() int64 {
	b := r.next()
	if b%4 == 0 {
		return 0
	}
	return int64(b / 4 % 40)
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

// decodeOps returns the initial limits of both tiers, the plans of the
// accounts and the operations data encodes.
func decodeOps(data []byte) (initial [len(modelTiers)]refLimits, plans [len(modelAccounts)]string, ops []modelOp) {
	r := &opReader{data: data}
	for i := range initial {
		initial[i] = r.limits()
	}
	for i := range plans {
		plans[i] = modelTiers[int(r.next())%len(modelTiers)]
	}
	// A sequence begins with a version of the price table of its own.
	ops = append(ops, modelOp{kind: opPutPrices, prices: r.priceVersion()})
	for len(r.data) > 0 {
		b := r.next()
		switch b % 27 {
		case 0, 1, 2, 3, 4, 5, 6, 7:
			kind := opCheck
			if b%27 == 7 {
				kind = opDryRun
			}
			user, tier := int(r.next()), int(r.next())
			op := modelOp{kind: kind, user: user % len(modelUsers), tier: tier % len(modelTiers), tokens: r.tokens(), distrust: tier>>2%4 == 0,
				accountID: r.accountName(), model: r.model()}
			if r.next()%2 == 0 {
				op.split = r.split(op.tokens) // the reservation priced kind by kind
			}
			ops = append(ops, op)
		case 26:
			ops = append(ops, modelOp{kind: opPutPrices, prices: r.priceVersion()})
		case 20:
			ops = append(ops, modelOp{kind: opSetUser, user: int(r.next()) % len(modelUsers), user2: r.user(), other: r.next()%2 == 1})
		case 21:
			ops = append(ops, modelOp{kind: opDeleteUser, user: int(r.next()) % len(modelUsers), other: r.next()%2 == 1})
		case 22, 23:
			ops = append(ops, modelOp{kind: opSetAccount, accountID: modelAccounts[int(r.next())%len(modelAccounts)], acct: r.account(), other: r.next()%2 == 1})
		case 25:
			ops = append(ops, modelOp{kind: opMove, user: int(r.next()) % len(modelUsers), accountID: r.accountName(), other: r.next()%2 == 1})
		case 24:
			id := modelGhost
			if k := int(r.next()) % (len(modelAccounts) + 1); k < len(modelAccounts) {
				id = modelAccounts[k]
			}
			ops = append(ops, modelOp{kind: opDeleteAccount, accountID: id, other: r.next()%2 == 1})
		case 8, 9, 10, 11, 12:
			ops = append(ops, modelOp{kind: opAdvance, step: r.step()})
		case 13:
			ops = append(ops, modelOp{kind: opSetTier, tier: int(r.next()) % len(modelTiers), limits: r.limits()})
		case 14:
			ops = append(ops, modelOp{kind: opForget, user: int(r.next()) % len(modelKeys())})
		case 15:
			ops = append(ops, modelOp{kind: opPrune})
		case 16, 17, 18:
			op := modelOp{kind: opFinish, call: int(r.next()), tokens: -1}
			if b := r.next(); b%3 != 0 {
				op.tokens = int64(b / 3 % 50)
				if op.tokens >= 25 {
					// Around the reservation: from 10 tokens below it to
					// 14 above, where a cheaper reservation's cost is
					// passed by fewer tokens.
					op.near, op.tokens = true, op.tokens-35
				}
				// The tokens by kind now and then, with their total or
				// without.
				if c := r.next(); c%3 != 0 {
					op.cuts, op.both = &[4]byte{r.next(), r.next(), r.next(), r.next()}, c%3 == 2
				}
			}
			ops = append(ops, op)
		default:
			ops = append(ops, modelOp{kind: opKeepAlive, call: int(r.next())})
		}
	}
	return initial, plans, ops
}

// modelHarness runs sequences against one store, clearing the model's users
// between them.
type modelHarness struct {
	store *db.Store
	svc   *policy.Service
	// distrusting shares store but ignores a check's tier; other is a
	// second store on the same file, as another process would open it.
	distrusting, otherSvc *policy.Service
	now                   time.Time
	ref                   *refModel
	// callIDs are the calls opened in this sequence, in order; operations
	// name them by index, one past the end being an id never issued.
	callIDs []string
	// lagging holds the users whose record the other store wrote since a
	// check of them or a write through this store: this store's memory of
	// it, which previews read, may be older.
	lagging map[string]bool
	// stats counts what the sequences exercised, by outcome.
	stats map[string]int
	// prices are the versions of the price table the store holds, put by
	// every sequence so far.
	prices refPrices
	// postgres is set on PostgreSQL.
	postgres bool
}

// modelCallTimeout is the call timeout of the model's service: short, so
// that sequences see calls expire.
const modelCallTimeout = 2 * time.Minute

// callID returns the id operation index i names: now and then the id of
// a call's copy in its account's pool, which no caller may finish or keep
// alive, whether the call has one or not.
func (h *modelHarness) callID(i int) string {
	if i%8 == 7 && len(h.callIDs) > 0 {
		return policy.PoolCallID(h.callIDs[i/8%len(h.callIDs)])
	}
	i %= len(h.callIDs) + 1
	if i == len(h.callIDs) {
		return "never-issued"
	}
	return h.callIDs[i]
}

// newModelHarness opens its stores on dsn, a new database.
func newModelHarness(tb testing.TB, dsn string) *modelHarness {
	tb.Helper()
	// NORMAL keeps every commit across a crash of the process, which is all
	// a test needs, and spares thousands of fsyncs.
	store, err := db.Open(context.Background(), dsn, db.WithSynchronous(db.SyncNormal))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { store.Close() })
	// This store merges its pools' newest rows into requests every few
	// rows, the other (below) as it does by default, rarely: the reference
	// sees no difference either way.
	if err := db.MergePoolsEvery(store, 5); err != nil {
		tb.Fatal(err)
	}
	h := &modelHarness{store: store, stats: map[string]int{}, lagging: map[string]bool{}, postgres: strings.HasPrefix(dsn, "postgres")}
	clock := policy.WithClock(func() time.Time { return h.now })
	h.svc = policy.NewService(store, store, clock, policy.WithCallTimeout(modelCallTimeout), policy.WithUsers(store), policy.WithPrices(store))
	h.distrusting = policy.NewService(store, store, clock, policy.WithCallTimeout(modelCallTimeout), policy.WithUsers(store), policy.WithPrices(store),
		policy.WithTrustClientTier(false), policy.WithDefaultTier(modelTiers[0]))
	other, err := db.Open(context.Background(), dsn, db.WithSynchronous(db.SyncNormal))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { other.Close() })
	h.otherSvc = policy.NewService(other, other, clock, policy.WithUsers(other))
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
	initial, plans, ops := decodeOps(data)
	run := &modelRun{tb: tb, name: name, ops: ops}

	h.now = t0
	h.ref = &refModel{tiers: map[string]refLimits{}, users: map[string]refUser{}, accounts: map[string]refAccount{},
		hist: map[string][]refRecord{}, calls: map[string]*refCall{}, tokens: map[string][]refTokens{}, timeout: modelCallTimeout, prices: &h.prices}
	h.callIDs = h.callIDs[:0]
	clear(h.lagging)
	for _, u := range modelUsers {
		if err := h.svc.Forget(ctx, u); err != nil {
			tb.Fatal(err)
		}
		if err := h.svc.DeleteUser(ctx, u); err != nil && policy.ErrorCode(err) != policy.ENOTFOUND {
			tb.Fatal(err)
		}
	}
	for i, name := range modelTiers {
		h.setTier(run, name, initial[i])
	}
	// Every account exists, on its plan with no overrides, and its pool
	// is empty.
	for i, id := range modelAccounts {
		if err := h.svc.ForgetAccount(ctx, id); err != nil {
			tb.Fatal(err)
		}
		a := refAccount{tier: plans[i]}
		for j := range a.over {
			a.over[j] = refInherit
		}
		if _, _, err := h.svc.PutAccount(ctx, policy.Account{AccountID: id, Tier: a.tier}); err != nil {
			tb.Fatal(err)
		}
		h.ref.accounts[id] = a
	}

	for i, op := range ops {
		run.at = i
		switch op.kind {
		case opCheck, opDryRun:
			h.check(run, op)
		case opPutPrices:
			h.putPrices(run, op.prices)
		case opSetUser, opDeleteUser:
			h.setUser(run, op)
		case opMove:
			op.kind, op.user2 = opSetUser, h.ref.users[modelUsers[op.user]]
			op.user2.account = op.accountID
			h.setUser(run, op)
		case opSetAccount, opDeleteAccount:
			h.setAccount(run, op)
		case opFinish, opKeepAlive:
			h.finish(run, op)
		case opAdvance:
			h.now = h.now.Add(op.step)
		case opSetTier:
			h.setTier(run, modelTiers[op.tier], op.limits)
		case opForget:
			key := modelKeys()[op.user]
			var err error
			if op.user < len(modelUsers) {
				err = h.svc.Forget(ctx, key)
			} else {
				err = h.svc.ForgetAccount(ctx, modelAccounts[op.user-len(modelUsers)])
			}
			if err != nil {
				run.fatalf("forget: %v", err)
			}
			h.ref.forget(key)
		case opPrune:
			cutoff := h.now.Add(-24 * time.Hour)
			if _, err := h.store.Prune(ctx, cutoff); err != nil {
				run.fatalf("prune: %v", err)
			}
			h.ref.prune(cutoff)
			if len(h.lagging) == 0 {
				// Previews mid-sequence, on what pruning left, when no
				// record in memory can lag.
				h.comparePreviews(run)
			}
		}
	}
	h.compareHistories(run)
	h.compareAccounts(run)
	h.comparePreviews(run)
}

// refPreview replays the reference's requests recorded under tier in the
// window before now through ceilings, by the README's rules alone: user by
// user in time order, a request refused when a window already holds its
// ceiling of the replayed requests admitted before it. over, when set,
// returns the ceilings that replace ceilings for a user, and whether there
// are any.
func (m *refModel) refPreview(tier string, ceilings [3]int64, now time.Time, window time.Duration,
	over func(user string) ([3]int64, bool)) (users, requests, refused int64, by [3]int64, top []policy.UserPreview) {
	now = now.Truncate(time.Microsecond)
	from := now.Add(-window)
	for _, user := range slices.Sorted(maps.Keys(m.hist)) {
		if policy.IsAccountKey(user) {
			// A preview replays users; an account's pool is not one.
			continue
		}
		c, overridden := ceilings, false
		if over != nil {
			if o, ok := over(user); ok {
				c, overridden = o, true
			}
		}
		var kept []refRecord
		u := policy.UserPreview{UserID: user}
		for _, r := range m.hist[user] {
			if r.tier != tier || !r.at.After(from) || r.at.After(now) {
				continue
			}
			u.Requests++
			reason := blocked(kept, c, r.at)
			if reason == "" {
				kept = append(kept, r)
				continue
			}
			u.Refused++
			for i, w := range refWindows {
				if reason == "per-"+w.name+" limit exceeded" {
					by[i]++
				}
			}
		}
		if u.Requests == 0 {
			continue
		}
		users, requests, refused = users+1, requests+u.Requests, refused+u.Refused
		if overridden {
			m.overridden++
		}
		if u.Refused > 0 {
			top = append(top, u)
		}
	}
	slices.SortStableFunc(top, func(a, b policy.UserPreview) int { return int(b.Refused - a.Refused) })
	return users, requests, refused, by, top[:min(len(top), policy.MaxTopUsers)]
}

// overrides returns the ceilings a preview through p replays user under:
// p with the request limits user's record overrides, when it overrides
// any, whatever tier the record assigns.
func (m *refModel) overrides(p policy.RequestLimits) func(user string) ([3]int64, bool) {
	return func(user string) ([3]int64, bool) {
		u, ok := m.users[user]
		if !ok || u.over[0] == refInherit && u.over[1] == refInherit && u.over[2] == refInherit && u.over[3] == refInherit {
			return [3]int64{}, false
		}
		l := [4]int64{p.Limits.Value(policy.RequestsPerMinute), p.Limits.Value(policy.RequestsPerHour), p.Limits.Value(policy.RequestsPerDay), p.Limits.Value(policy.BurstAllowance)}
		for i := range l {
			if u.over[i] != refInherit {
				l[i] = u.over[i]
			}
		}
		return [3]int64{l[0] + l[3], l[1], l[2]}, true
	}
}

// comparePreviews previews each tier, with its limits and with its shadow
// limits, and replays its shadow limits over the last hour and day, on
// both sides: the store's tier ids on request rows and its replay must
// find what the reference replays from its own history. A preview applies
// each user's request-limit overrides to the proposed limits; a shadow
// replay, like a check's shadow verdict, applies none.
func (h *modelHarness) comparePreviews(run *modelRun) {
	run.tb.Helper()
	ctx := context.Background()
	// A preview reads records from the store's memory, which may lag
	// behind a write through the other store until a check of the user
	// reads it: bring it up to date, as such a check would.
	for u := range h.lagging {
		if _, err := h.store.User(ctx, u); err != nil && policy.ErrorCode(err) != policy.ENOTFOUND {
			run.fatalf("user %s: %v", u, err)
		}
	}
	clear(h.lagging)
	now := h.now.Truncate(time.Microsecond)
	match := func(what string, got policy.Preview, tier string, window time.Duration, c [3]int64, over func(string) ([3]int64, bool)) {
		run.tb.Helper()
		users, requests, refused, by, top := h.ref.refPreview(tier, c, h.now, window, over)
		if got.Tier != tier || got.Users != users || got.Requests != requests || got.RequestsRefused != refused || got.RefusedBy != by ||
			!slices.Equal(got.TopUsers, top) || got.UsersRefused != int64(len(top)) && len(top) < policy.MaxTopUsers {
			run.fatalf("%s of %s through ceilings %v: %+v; reference users %d requests %d refused %d by %v top %v",
				what, tier, c, got, users, requests, refused, by, top)
		}
		h.stats[fmt.Sprintf("%s refused>0 %v", what, refused > 0)]++
	}
	for _, tier := range modelTiers {
		l := h.ref.tiers[tier]
		proposals := []policy.RequestLimits{{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(l.perMinute)), policy.BurstAllowance: new(int64(l.burst)), policy.RequestsPerHour: new(int64(l.perHour)), policy.RequestsPerDay: new(int64(l.perDay))}}}
		if sl := shadowOf(l); sl != nil {
			proposals = append(proposals, *sl)
		}
		for _, p := range proposals {
			got, err := h.svc.PreviewTier(ctx, tier, p)
			if err != nil {
				run.fatalf("preview %s: %v", tier, err)
			}
			if !got.From.Equal(now.Add(-policy.PreviewWindow)) || !got.To.Equal(now) {
				run.fatalf("preview %s: from %v to %v, now %v", tier, got.From, got.To, now)
			}
			match("preview", got, tier, policy.PreviewWindow, [3]int64{p.Limits.Value(policy.RequestsPerMinute) + p.Limits.Value(policy.BurstAllowance), p.Limits.Value(policy.RequestsPerHour), p.Limits.Value(policy.RequestsPerDay)}, h.ref.overrides(p))
		}

		h.stats["preview of users with overrides"] += h.ref.overridden
		h.ref.overridden = 0

		hour, day, err := h.svc.ShadowRefusals(ctx, tier)
		if err != nil {
			run.fatalf("shadow refusals %s: %v", tier, err)
		}
		if l.shadow == nil {
			if hour.Tier != tier || day.Tier != tier || hour.Requests != 0 || day.Requests != 0 || hour.Users != 0 || day.Users != 0 {
				run.fatalf("shadow refusals of %s, which has no shadow limits: hour %+v, day %+v", tier, hour, day)
			}
			continue
		}
		c := [3]int64{l.shadow[0] + l.shadow[1], l.shadow[2], l.shadow[3]}
		match("shadow hour", hour, tier, time.Hour, c, nil)
		match("shadow day", day, tier, policy.PreviewWindow, c, nil)
	}
}

func (h *modelHarness) setTier(run *modelRun, name string, l refLimits) {
	run.tb.Helper()
	opt := func(v int64) *int64 {
		if v < 0 {
			return nil
		}
		return &v
	}
	var pool *policy.LimitSet
	if l.pool != nil {
		p := policyPool(*l.pool)
		pool = &p
	}
	var limits policy.LimitSet
	for i, v := range l.values() {
		limits[i] = opt(v)
	}
	_, _, err := h.svc.PutTier(context.Background(), policy.Tier{Name: name, Limits: limits, Shadow: shadowOf(l), Account: pool})
	if err != nil {
		run.fatalf("put tier: %v", err)
	}
	h.ref.tiers[name] = l
}

// shadowOf returns l's shadow limits as a tier holds them.
func shadowOf(l refLimits) *policy.RequestLimits {
	if l.shadow == nil {
		return nil
	}
	return &policy.RequestLimits{Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(l.shadow[0])), policy.BurstAllowance: new(int64(l.shadow[1])), policy.RequestsPerHour: new(int64(l.shadow[2])), policy.RequestsPerDay: new(int64(l.shadow[3]))}}
}

// setUser writes or deletes a user record, through this store or the
// other one, on both sides.
func (h *modelHarness) setUser(run *modelRun, op modelOp) {
	run.tb.Helper()
	ctx := context.Background()
	svc := h.svc
	if op.other {
		svc = h.otherSvc
	}
	user := modelUsers[op.user]
	if op.kind == opDeleteUser {
		_, had := h.ref.users[user]
		err := svc.DeleteUser(ctx, user)
		if had && err != nil || !had && policy.ErrorCode(err) != policy.ENOTFOUND {
			run.fatalf("delete user: %v, reference has a record: %v", err, had)
		}
		delete(h.ref.users, user)
		if had {
			// A delete that finds no record changes nothing, memory
			// included.
			h.lag(user, op.other)
		}
		return
	}
	r := policy.UserRecord{UserID: user, Tier: op.user2.tier, Account: op.user2.account}
	over := op.user2.over
	// -1 (no limit) is drawn only for the optional limits.
	r.Limits = policyOverrides(over)
	var tier *refLimits
	if l, ok := h.ref.tiers[op.user2.tier]; ok {
		tier = &l
	}
	_, _, err := svc.PutUser(ctx, r)
	switch {
	case !binds(tier, over):
		// Overrides that could not all bind on the tier are refused,
		// and change nothing.
		if policy.ErrorCode(err) != policy.EINVALID || !strings.Contains(policy.ErrorMessage(err), " would refuse first") {
			run.fatalf("put user: %v, want a refusal: its limits cannot all bind", err)
		}
		h.stats["user refused: limits cannot all bind"]++
		return
	case op.user2.account != "" && !h.ref.hasAccount(op.user2.account):
		if policy.ErrorCode(err) != policy.EINVALID || !strings.Contains(policy.ErrorMessage(err), "unknown account") {
			run.fatalf("put user: %v, want a refusal: account %q does not exist", err, op.user2.account)
		}
		h.stats["user refused: unknown account"]++
		return
	case err != nil:
		run.fatalf("put user: %v", err)
	}
	h.ref.users[user] = op.user2
	h.lag(user, op.other)
}

// lag notes whether user's record was last written by the other store.
func (h *modelHarness) lag(user string, other bool) {
	if other {
		h.lagging[user] = true
	} else {
		delete(h.lagging, user)
	}
}

// check runs one check (or dry run) on both sides, compares every field
// of the answers and asserts the promises directly.
func (h *modelHarness) check(run *modelRun, op modelOp) {
	run.tb.Helper()
	ctx := context.Background()
	user, tier, account, tokens, dryRun := modelUsers[op.user], modelTiers[op.tier], op.accountID, op.tokens, op.kind == opDryRun
	svc := h.svc
	if op.distrust {
		svc = h.distrusting
	}
	req := policy.Request{UserID: user, Tier: tier, Account: account, Tokens: tokens, Model: op.model}
	if s := op.split; s != nil {
		req.Reserve = &policy.TokenUsage{Input: s[0], Output: s[1], CacheRead: s[2], CacheWrite: s[3]}
	}
	got, err := svc.Check(ctx, req, dryRun)
	// A check reads its user's record as stored whenever memory lags.
	delete(h.lagging, user)
	name, limits, pool, code := h.ref.resolve(user, tier, account, !op.distrust, modelTiers[0])
	pr := h.prices.pricing(op.model, h.now, tokens, op.split)
	// Under a spend limit, a call of no model, or of one the version in
	// force does not price, is refused, never counted as free.
	unpriced := code == "" && pr.price == nil && limitsSpend(limits, pool)
	if unpriced {
		code = policy.EINVALID
	}
	if code != "" || err != nil {
		if policy.ErrorCode(err) != code {
			run.fatalf("check: %v, reference error code %q (unpriced: %v)", err, code, unpriced)
		}
		if u, ok := policy.IsUnpriced(err); ok != unpriced || ok && u.Model != op.model {
			run.fatalf("check: %v, reference refuses model %q as unpriced: %v", err, op.model, unpriced)
		}
		if unpriced {
			h.stats[fmt.Sprintf("check refused: unpriced (model %q)", op.model)]++
		} else {
			h.stats["check refused: unknown account"]++
		}
		return
	}
	want := h.ref.check(user, name, limits, pool, tokens, pr, h.now, dryRun, got.CallID)
	h.compare(run, "check", got, want)
	if got.Tier != name {
		run.fatalf("check: decided under %q, reference %q", got.Tier, name)
	}
	if opened := want.allowed && want.metered && !dryRun; opened != (got.CallID != "") {
		run.fatalf("check: call id %q, reference opens a call: %v", got.CallID, opened)
	}
	if got.CallID != "" {
		if len(got.CallID) > policy.MaxCallIDBytes || !policy.ValidCallID(got.CallID) || slices.Contains(h.callIDs, got.CallID) {
			run.fatalf("check: call id %q", got.CallID)
		}
		h.callIDs = append(h.callIDs, got.CallID)
	}
	h.stats[got.Reason]++
	if want.account != nil {
		h.stats[memberOutcome(&want)]++
	}
	if got.Shadow != nil {
		h.stats["shadow "+got.Shadow.Reason()]++
	}

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
		c := limits.ceilings()
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
		if pool != nil {
			h.checkPoolCeilings(run, pool.id, poolTier(pool.limits), now)
		}
	}
	if pr.price != nil {
		h.stats[fmt.Sprintf("priced check allowed=%v spend limited=%v", got.Allowed(), limitsSpend(limits, pool))]++
	}
	probes := []time.Time{h.now.Add(time.Duration(got.RetryAfter) * time.Second), h.now.Add(time.Duration(got.RetryAfter-1) * time.Second)}
	if !got.Allowed() && !want.zeroBlocked && slices.ContainsFunc(probes, func(t time.Time) bool { return h.prices.inForce(t) != h.prices.inForce(h.now) }) {
		// Another version of the price table is in force then (the clock
		// stepped back before it was put): not the same request.
		h.stats["refusal's retry_after not probed: another price version then"]++
	} else if !got.Allowed() && !want.zeroBlocked {
		// Advancing the clock by retry_after admits the same request when
		// nothing else changed, and a second less does not: the answer is
		// neither early nor late. Probed with dry runs, which change nothing.
		saved := h.now
		defer func() { h.now = saved }()
		h.now = saved.Add(time.Duration(got.RetryAfter) * time.Second)
		probe, err := svc.Check(ctx, req, true)
		if err != nil {
			run.fatalf("probe: %v", err)
		}
		if !probe.Allowed() {
			run.fatalf("refused with retry_after %d, but refused again %ds later: %q", got.RetryAfter, got.RetryAfter, probe.Reason)
		}
		h.compare(run, "probe at retry_after", probe, h.ref.check(user, name, limits, pool, tokens, pr, h.now, true, ""))
		if got.RetryAfter >= 1 {
			h.now = saved.Add(time.Duration(got.RetryAfter-1) * time.Second)
			early, err := svc.Check(ctx, req, true)
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
		compareStates(run, what, i, "tokens", w.Tokens, want.tokens[i], want.allowed)
		compareStates(run, what, i, "cost", w.Cost, want.cost[i], want.allowed)
	}
	switch {
	case want.shadow == nil && got.Shadow != nil:
		run.fatalf("%s: shadow %+v, reference none", what, *got.Shadow)
	case want.shadow != nil && (got.Shadow == nil || got.Shadow.Allowed != want.shadow.allowed || got.Shadow.Reason() != want.shadow.reason):
		run.fatalf("%s: shadow %+v, reference %+v", what, got.Shadow, *want.shadow)
	}
	switch {
	case want.metered && want.maxConcurrent >= 0:
		if got.Concurrency == nil || *got.Concurrency != (policy.ConcurrencyState{Limit: want.maxConcurrent, InFlight: want.inFlight}) {
			run.fatalf("%s: concurrency %+v, reference limit %d in flight %d", what, got.Concurrency, want.maxConcurrent, want.inFlight)
		}
	case got.Concurrency != nil:
		run.fatalf("%s: concurrency %+v, reference none", what, *got.Concurrency)
	}
	comparePool(run, what, got.Account, want.account)
}

// finish runs one finish or keepalive on both sides and compares them.
func (h *modelHarness) finish(run *modelRun, op modelOp) {
	run.tb.Helper()
	ctx := context.Background()
	id := h.callID(op.call)
	var (
		got  policy.Call
		err  error
		want refFinish
	)
	if op.kind == opKeepAlive {
		want = h.ref.keepAlive(id, h.now)
		got, err = h.svc.KeepAlive(ctx, id)
	} else {
		tokens := op.tokens
		if op.near {
			var reserved int64
			if c, ok := h.ref.calls[id]; ok {
				reserved = c.reserved
			}
			tokens = max(reserved+op.tokens, 0)
		}
		r := refReport{tokens: tokens}
		if op.cuts != nil {
			r.usage = splitOf(tokens, *op.cuts)
		}
		var rep policy.Report
		if tokens >= 0 && (r.usage == nil || op.both) {
			rep.Tokens = &tokens
		}
		if u := r.usage; u != nil {
			rep.Usage = &policy.TokenUsage{Input: u[0], Output: u[1], CacheRead: u[2], CacheWrite: u[3]}
		}
		want = h.ref.finish(id, r, h.now)
		got, err = h.svc.FinishCall(ctx, id, rep)
	}
	h.stats[fmt.Sprintf("%v %q expired=%v", op.kind, want.code, want.call.expired)]++
	if code := policy.ErrorCode(err); code != want.code {
		run.fatalf("%v: error %v, reference code %q", op, err, want.code)
	}
	if err != nil {
		return
	}
	w := want.call
	reported := int64(-1)
	if got.Reported != nil {
		reported = *got.Reported
	}
	if got.ID != id || got.Account != w.account || got.Reserved != w.reserved || !got.ExpiresAt.Equal(w.expires) || got.Open() == w.finished ||
		got.Expired != w.expired || reported != w.reported || (w.finished && (got.Tokens != w.counted || !got.FinishedAt.Equal(w.finishedAt))) {
		run.fatalf("%v: call %+v (reported %d), reference %+v", op, got, reported, w)
	}
	if problem := comparePricing(&got, &w); problem != "" {
		run.fatalf("%v: call %+v: %s", op, got, problem)
	}
	if w.price != nil && op.kind == opFinish {
		h.stats[fmt.Sprintf("priced finish: expired %v, cost above its reservation %v, tokens above it %v", w.expired, w.reportedCost > w.reservedCost, w.reported > w.reserved)]++
		if v := h.prices.inForce(h.now); v == nil || v.id != w.version {
			h.stats["priced finish under another price version than its admission's"]++
		}
	}
}

// compareHistories checks that the store holds exactly the reference's
// timestamps (nothing lost, nothing extra, nothing moved), each user's and
// each account's pool, and that every admitted request fits its ceilings
// on the timeline: the window ending at each admission holds no more
// requests than the ceilings it was admitted under.
func (h *modelHarness) compareHistories(run *modelRun) {
	run.tb.Helper()
	for _, user := range modelKeys() {
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
		h.compareTimeline(run, user, stored)
		if policy.IsAccountKey(user) {
			continue // see compareAccounts
		}
		u, err := h.svc.UsageReport(context.Background(), user, "")
		if err != nil {
			run.fatalf("usage %s: %v", user, err)
		}
		view := h.ref.clone()
		view.expire(user, h.now.Truncate(time.Microsecond))
		open, reserved := view.inFlight(user)
		if u.CallsInFlight != open {
			run.fatalf("user %q: %d calls in flight, reference %d", user, u.CallsInFlight, open)
		}
		for i, w := range refWindows {
			for ms, got := range [2]*policy.TokenState{u.Windows[i].Tokens, u.Windows[i].Cost} {
				finished, _ := view.after(user, ms, h.now.Truncate(time.Microsecond).Add(-w.length))
				if got == nil || got.Used != finished+reserved[ms] {
					run.fatalf("user %q: %s %s %+v, reference used %d", user, w.name, [2]string{"tokens", "cost"}[ms], got, finished+reserved[ms])
				}
			}
		}
	}
}

// compareTimeline compares the timestamps stored for key, a user or a
// pool, with the reference's, and checks that each fits the ceilings it
// was admitted under.
func (h *modelHarness) compareTimeline(run *modelRun, key string, stored []time.Time) {
	run.tb.Helper()
	recs := h.ref.hist[key]
	var want []time.Time
	for _, r := range recs {
		want = append(want, r.at)
	}
	if !slices.EqualFunc(stored, want, time.Time.Equal) {
		run.fatalf("history %q: store holds %v, reference %v", key, stored, want)
	}
	for j, r := range recs {
		for i, w := range refWindows {
			// The window r was admitted into: r and the requests
			// recorded before it (at its instant too) after its cutoff.
			var n int64
			for _, o := range recs[:j+1] {
				if o.at.After(r.at.Add(-w.length)) {
					n++
				}
			}
			if n > r.ceilings[i] {
				run.fatalf("history %q: the %s ending at %v holds %d requests, admitted under a ceiling of %d", key, w.name, r.at, n, r.ceilings[i])
			}
		}
	}
}

// TestModel compares the store with the reference over random sequences:
// -model.seqs sets how many (150 by default, a tenth of it under -race;
// CI runs thousands).
func TestModel(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		seed := *modelSeed
		if seed == 0 {
			seed = rand.Uint64()
		}
		t.Logf("seed %d (reproduce with -model.seed=%d)", seed, seed)
		rng := rand.New(rand.NewPCG(seed, 0))
		h := newModelHarness(t, bk.newDSN(t))
		n := *modelSeqs
		if dbtest.RaceEnabled || testing.Short() {
			n = max(n/10, 1)
		}
		var checks, ops int
		for i := range n {
			data := make([]byte, 96+rng.IntN(768)) // up to a few hundred operations
			for j := range data {
				data[j] = byte(rng.Uint32())
			}
			name := fmt.Sprintf("sequence %d of -model.seed=%d (fuzz input %s)", i, seed, hex.EncodeToString(data))
			h.run(t, name, data)
			_, _, seqOps := decodeOps(data)
			ops += len(seqOps)
			for _, op := range seqOps {
				if op.kind == opCheck || op.kind == opDryRun {
					checks++
				}
			}
		}
		t.Logf("%d sequences, %d operations, %d checks: store and reference agree", n, ops, checks)
		t.Logf("outcomes: %v", h.stats)
		if bk.name == "postgres" {
			// admit_batch decides what the Go rules decide: any admission
			// it recorded that they would not (or the other way round)
			// was rolled back and decided alone, unseen by the reference.
			batched, alone, disagreements := db.PlanCounts(h.store)
			t.Logf("PostgreSQL: %d admissions decided in batches, %d alone", batched, alone)
			if disagreements != 0 || batched == 0 {
				t.Errorf("admit_batch and package policy disagreed on %d admissions of %d", disagreements, batched+alone)
			}
		}
	})
}

// FuzzModel lets the fuzzer write the sequences. Its seed corpus is in
// testdata/fuzz/FuzzModel. The versions of the price table an input puts
// stay in the store for the inputs after it (versions are never
// deleted): an input that fails after others may price its calls
// otherwise when run alone, as a sequence of TestModel may without the
// sequences before it (-model.seed replays them all).
func FuzzModel(f *testing.F) {
	f.Add([]byte{})
	h := newModelHarness(f, filepath.Join(f.TempDir(), "model.db"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 2048 {
			data = data[:2048] // a few hundred operations is plenty; more only slows the fuzzer
		}
		h.run(t, "fuzz input "+hex.EncodeToString(data), data)
	})
}
