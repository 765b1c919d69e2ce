package db_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// Accounts in the model: organizations whose members share pooled
// limits. The reference keeps each account's pool as a history of its
// own, under policy.AccountKey, holding every request, token and open call
// of its members, and decides a member's check against both histories
// (see refModel.check).

// Accounts of the model, and one that never exists: checks and records
// naming it are refused.
var modelAccounts = [...]string{"acme", "o'hara & zoë"}

const modelGhost = "ghost"

// modelKeys returns the keys of every history of the model: the users'
// and the accounts' pools.
func modelKeys() []string {
	keys := slices.Clone(modelUsers[:])
	for _, a := range modelAccounts {
		keys = append(keys, policy.AccountKey(a))
	}
	return keys
}

// refAccount is an account record: its plan and its overrides of the
// plan's pooled limits, in the order of policy.LimitNames (refInherit
// keeps the plan's, -1 removes it). The zero value is no account.
type refAccount struct {
	tier string
	over [refNumLimits]int64
}

// refPool is what a member's check draws on besides its own limits.
type refPool struct {
	id, tier string
	limits   [refNumLimits]int64 // the plan's with the account's overrides; -1 for none
}

// key returns the key of the pool's history.
func (p *refPool) key() string { return policy.AccountKey(p.id) }

// refNoPoolLimit is the ceiling of a pooled request window without a
// limit, as decisions report it: more requests than a day can hold.
const refNoPoolLimit = 1 << 50

// hasAccount reports whether the account named id exists.
func (m *refModel) hasAccount(id string) bool {
	_, ok := m.accounts[id]
	return ok
}

// poolLimits returns the pooled limits of a: its plan's account object
// (none when it has none) with its overrides.
func (m *refModel) poolLimits(a refAccount) [refNumLimits]int64 {
	v := refNoLimits()
	if p := m.tiers[a.tier].pool; p != nil {
		v = *p
	}
	for i, o := range a.over {
		if o != refInherit {
			v[i] = o
		}
	}
	return v
}

// poolTier returns pooled limits v as the limits the pool's history is
// decided under: a request window without a limit has refNoPoolLimit, a
// burst without one adds nothing.
func poolTier(v [refNumLimits]int64) refLimits {
	req := func(x int64) int64 {
		if x < 0 {
			return refNoPoolLimit
		}
		return x
	}
	return refLimits{perMinute: req(v[0]), perHour: req(v[1]), perDay: req(v[2]), burst: max(v[3], 0),
		tokens: [3]int64{v[4], v[5], v[6]}, maxConcurrent: v[7], cost: [3]int64{v[8], v[9], v[10]}}
}

// poolBinds reports whether pooled limits v can all bind: within the
// requests, the tokens and the spend, no set window below a shorter one.
func poolBinds(v [refNumLimits]int64) bool {
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

// policyPool returns v as a tier's account object.
func policyPool(v [refNumLimits]int64) policy.LimitSet {
	var p policy.LimitSet
	for i, x := range v {
		if x >= 0 {
			p[i] = &x
		}
	}
	return p
}

// policyOverrides returns a record's overrides (a user's or an
// account's) as it holds them.
func policyOverrides(over [refNumLimits]int64) policy.Overrides {
	var o policy.Overrides
	for i, x := range over {
		switch {
		case x == refInherit:
		case x < 0:
			o[i] = policy.Override{Set: true}
		default:
			o[i] = policy.To(x)
		}
	}
	return o
}

// pool decodes a tier's account object: none a third of the time, and
// each limit unset half the time; a little larger than a user's, so that
// both levels refuse in turn.
func (r *opReader) pool() *[refNumLimits]int64 {
	if r.next()%3 == 0 {
		return nil
	}
	var p [refNumLimits]int64
	for i, most := range [8]byte{10, 20, 30, 4, 80, 150, 250, 6} {
		p[i] = -1
		if b := r.next(); b%2 == 1 {
			p[i] = int64(b / 2 % most)
		}
	}
	for i, most := range [3]int64{30, 60, 120} {
		p[8+i] = r.costLimit(most)
	}
	ascending(&p[0], &p[1], &p[2])
	ascending(&p[4], &p[5], &p[6])
	ascending(&p[8], &p[9], &p[10])
	return &p
}

// account decodes an account record: one of the model's plans, and each
// pooled limit inherited three times in four.
func (r *opReader) account() refAccount {
	a := refAccount{tier: modelTiers[int(r.next())%len(modelTiers)]}
	for i := range a.over {
		a.over[i] = refInherit
		switch b := r.next(); {
		case b%4 == 1 && i >= 8:
			a.over[i] = int64(b/4%12) * 3 * refCostUnit
		case b%4 == 1:
			a.over[i] = int64(b / 4 % 12)
		case b%8 == 2:
			a.over[i] = -1
		}
	}
	return a
}

// accountName decodes the account a record or a check names: none half
// the time, the model's, or now and then one that does not exist.
func (r *opReader) accountName() string {
	switch b := r.next(); {
	case b%2 == 0:
		return ""
	case b%16 == 15:
		return modelGhost
	default:
		return modelAccounts[b/2%byte(len(modelAccounts))]
	}
}

// setAccount creates or replaces an account record, or deletes one,
// through this store or the other one, on both sides.
func (h *modelHarness) setAccount(run *modelRun, op modelOp) {
	run.tb.Helper()
	ctx := context.Background()
	svc := h.svc
	if op.other {
		svc = h.otherSvc
	}
	id := op.accountID
	if op.kind == opDeleteAccount {
		_, had := h.ref.accounts[id]
		members := 0
		for _, u := range h.ref.users {
			if u.account == id {
				members++
			}
		}
		err := svc.DeleteAccount(ctx, id)
		switch {
		case !had:
			if policy.ErrorCode(err) != policy.ENOTFOUND {
				run.fatalf("delete account: %v, want not found", err)
			}
		case members > 0:
			if policy.ErrorCode(err) != policy.ECONFLICT || !strings.Contains(policy.ErrorMessage(err), fmt.Sprintf(" has %d member", members)) {
				run.fatalf("delete account: %v, want a conflict naming its %d members", err, members)
			}
			h.stats["account delete refused: members"]++
		case err != nil:
			run.fatalf("delete account: %v", err)
		default:
			delete(h.ref.accounts, id)
		}
		return
	}
	a := op.acct
	_, had := h.ref.accounts[id]
	_, created, err := svc.PutAccount(ctx, policy.Account{AccountID: id, Tier: a.tier, Limits: policyOverrides(a.over)})
	switch {
	case !poolBinds(h.ref.poolLimits(a)):
		if policy.ErrorCode(err) != policy.EINVALID || !strings.Contains(policy.ErrorMessage(err), " would refuse first") {
			run.fatalf("put account: %v, want a refusal: its pooled limits cannot all bind", err)
		}
		h.stats["account refused: limits cannot all bind"]++
		return
	case err != nil:
		run.fatalf("put account: %v", err)
	case created == had:
		run.fatalf("put account: created %v, but the reference had it: %v", created, had)
	}
	h.ref.accounts[id] = a
}

// comparePool compares the pooled state of a member's check with the
// reference's.
func comparePool(run *modelRun, what string, got *policy.AccountState, want *refPoolState) {
	run.tb.Helper()
	switch {
	case want == nil && got != nil:
		run.fatalf("%s: account %+v, reference none", what, *got)
	case want == nil:
		return
	case got == nil:
		run.fatalf("%s: no account, reference %+v", what, *want)
	}
	if got.ID != want.id {
		run.fatalf("%s: account %q, reference %q", what, got.ID, want.id)
	}
	if p := policyPool(want.limits); !got.Limits.Equal(&p) {
		run.fatalf("%s: account limits %v, reference %v", what, got.Limits.Values(policy.ScopeAccount), want.limits)
	}
	for i, w := range got.Windows {
		ws := want.windows[i]
		if w.Count != ws.count || w.Limit != ws.limit || w.Remaining != ws.remaining || w.Reset != ws.reset {
			run.fatalf("%s: account %s window %+v, reference %+v", what, refWindows[i].name, w, ws)
		}
		compareStates(run, what+": account", i, "tokens", w.Tokens, want.tokens[i], false)
		compareStates(run, what+": account", i, "cost", w.Cost, want.cost[i], false)
		if limited := want.limits[i] >= 0; got.Limited(policy.Windows[i]) != limited {
			run.fatalf("%s: account limits the %s: %v, reference %v", what, refWindows[i].name, !limited, limited)
		}
	}
	switch {
	case want.maxConcurrent >= 0:
		if got.Concurrency == nil || *got.Concurrency != (policy.ConcurrencyState{Limit: want.maxConcurrent, InFlight: want.inFlight}) {
			run.fatalf("%s: account concurrency %+v, reference limit %d in flight %d", what, got.Concurrency, want.maxConcurrent, want.inFlight)
		}
	case got.Concurrency != nil:
		run.fatalf("%s: account concurrency %+v, reference none", what, *got.Concurrency)
	}
}

// memberOutcome names which levels refused a member's check d and whose
// reason it carries, for the statistics.
func memberOutcome(d *refDecision) string {
	switch {
	case !d.ownRefused && !d.poolRefused:
		return "member: admitted"
	case !d.poolRefused:
		return "member: refused by its own limits"
	case !d.ownRefused:
		return "member: refused by the account's"
	case strings.HasPrefix(d.reason, policy.AccountReasonPrefix):
		return "member: refused by both, the account's wait longer"
	default:
		return "member: refused by both, its own wait as long or longer"
	}
}

// checkPoolCeilings fails when a window of the pool of id holds more
// requests, counted by the store itself, than its ceilings l allow at
// now: right after an admission, none may.
func (h *modelHarness) checkPoolCeilings(run *modelRun, id string, l refLimits, now time.Time) {
	run.tb.Helper()
	c := l.ceilings()
	err := h.store.View(context.Background(), policy.AccountKey(id), func(hist policy.History) error {
		for i, w := range refWindows {
			n, err := hist.CountAfter(now.Add(-w.length))
			if err != nil {
				return err
			}
			if n > c[i] {
				run.fatalf("over-admitted: account %q's %s window holds %d, ceiling %d", id, w.name, n, c[i])
			}
		}
		return nil
	})
	if err != nil {
		run.fatalf("view pool: %v", err)
	}
}

// compareAccounts compares each existing account's pooled usage with the
// reference's: its windows, tokens and calls in flight.
func (h *modelHarness) compareAccounts(run *modelRun) {
	run.tb.Helper()
	now := h.now.Truncate(time.Microsecond)
	for _, id := range modelAccounts {
		a, ok := h.ref.accounts[id]
		u, err := h.svc.AccountUsage(context.Background(), id)
		switch {
		case !ok:
			if policy.ErrorCode(err) != policy.ENOTFOUND {
				run.fatalf("usage of account %q, which the reference has not: %v", id, err)
			}
			continue
		case err != nil:
			run.fatalf("usage of account %q: %v", id, err)
		}
		limits := h.ref.poolLimits(a)
		if p := policyPool(limits); !u.Limits.Equal(&p) || u.Account.Tier != a.tier {
			run.fatalf("account %q: tier %q limits %v, reference %q %v", id, u.Account.Tier, u.Limits.Values(policy.ScopeAccount), a.tier, limits)
		}
		key := policy.AccountKey(id)
		view := h.ref.clone()
		view.expire(key, now)
		open, reserved := view.inFlight(key)
		if u.CallsInFlight != open {
			run.fatalf("account %q: %d calls in flight, reference %d", id, u.CallsInFlight, open)
		}
		for i, w := range refWindows {
			n := int64(len(inWindow(h.ref.hist[key], w, now)))
			tokens, _ := view.after(key, refTokensMeasure, now.Add(-w.length))
			cost, _ := view.after(key, refCostMeasure, now.Add(-w.length))
			tokens, cost = tokens+reserved[refTokensMeasure], cost+reserved[refCostMeasure]
			if got := u.Windows[i]; got.Count != n || got.Tokens == nil || got.Tokens.Used != tokens || got.Cost == nil || got.Cost.Used != cost {
				run.fatalf("account %q: %s window %+v (tokens %+v, cost %+v), reference %d requests, %d tokens and %d cost used", id, w.name, got, got.Tokens, got.Cost, n, tokens, cost)
			}
		}
	}
}
