package db

import (
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// callQueries are the statements of metered calls, prepared with queries.
// Each is a seek on a primary key or an index: the user's finished tokens
// are counted from running totals (see call_tokens in the migration), and
// the open calls are read through the index calls_open, which holds them
// alone (see migration 17).
var callQueries = map[query]string{
	// A user's rows are ordered by (ts, total, cost_total), their key:
	// each row adds to one running total at least (see migration 24).
	qTokLast:       `SELECT ts, total, cost_total FROM call_tokens WHERE user_id = ? ORDER BY ts DESC, total DESC, cost_total DESC LIMIT 1`,
	qTokFirstAfter: `SELECT ts, total - tokens, tokens, cost_total - cost, cost FROM call_tokens WHERE user_id = ? AND ts > ? ORDER BY ts, total, cost_total LIMIT 1`,
	// The same for three cutoffs, in one statement.
	qTokFirstAfter3: `SELECT 0, ts, total - tokens, tokens, cost_total - cost, cost FROM (SELECT ts, total, tokens, cost_total, cost FROM call_tokens WHERE user_id = ?1 AND ts > ?2 ORDER BY ts, total, cost_total LIMIT 1) a
		UNION ALL SELECT 1, ts, total - tokens, tokens, cost_total - cost, cost FROM (SELECT ts, total, tokens, cost_total, cost FROM call_tokens WHERE user_id = ?1 AND ts > ?3 ORDER BY ts, total, cost_total LIMIT 1) b
		UNION ALL SELECT 2, ts, total - tokens, tokens, cost_total - cost, cost FROM (SELECT ts, total, tokens, cost_total, cost FROM call_tokens WHERE user_id = ?1 AND ts > ?4 ORDER BY ts, total, cost_total LIMIT 1) c`,
	// The same, reading ahead: at most readahead rows after each cutoff,
	// for the writer's token cursors.
	qTokRowsAfter3: `SELECT 0, ts, total - tokens, tokens, cost_total - cost, cost FROM (SELECT ts, total, tokens, cost_total, cost FROM call_tokens WHERE user_id = ?1 AND ts > ?2 ORDER BY ts, total, cost_total LIMIT 8) a
		UNION ALL SELECT 1, ts, total - tokens, tokens, cost_total - cost, cost FROM (SELECT ts, total, tokens, cost_total, cost FROM call_tokens WHERE user_id = ?1 AND ts > ?3 ORDER BY ts, total, cost_total LIMIT 8) b
		UNION ALL SELECT 2, ts, total - tokens, tokens, cost_total - cost, cost FROM (SELECT ts, total, tokens, cost_total, cost FROM call_tokens WHERE user_id = ?1 AND ts > ?4 ORDER BY ts, total, cost_total LIMIT 8) c`,
	// The newest row before an instant and the oldest at or after it: one
	// probe of reaching.
	qTokAround: `SELECT ts, total, cost_total FROM (SELECT ts, total, cost_total FROM call_tokens WHERE user_id = ?1 AND ts < ?2 ORDER BY ts DESC, total DESC, cost_total DESC LIMIT 1) a
		UNION ALL SELECT ts, total, cost_total FROM (SELECT ts, total, cost_total FROM call_tokens WHERE user_id = ?1 AND ts >= ?2 ORDER BY ts, total, cost_total LIMIT 1) b`,
	qTokInsert:   `INSERT INTO call_tokens (user_id, ts, tokens, total, cost, cost_total) VALUES (?, ?, ?, ?, ?, ?)`,
	qTokForget:   `DELETE FROM call_tokens WHERE user_id = ?`,
	qTokNextUser: `SELECT user_id FROM call_tokens WHERE user_id > ? ORDER BY user_id LIMIT 1`,
	qTokPrune:    `DELETE FROM call_tokens WHERE user_id = ? AND ts <= ?`,
	qOpenCalls: `SELECT count(*), CAST(coalesce(sum(reserved), 0) AS BIGINT), CAST(coalesce(sum(reserved_cost), 0) AS BIGINT), coalesce(min(expires_at), 0)
		FROM calls WHERE user_id = ? AND finished_at IS NULL`,
	qNextExpiry: `SELECT expires_at FROM calls WHERE user_id = ? AND finished_at IS NULL ORDER BY expires_at LIMIT 1`,
	qExpiredCalls: `SELECT id, reserved, reserved_cost, expires_at FROM calls
		WHERE user_id = ? AND finished_at IS NULL AND expires_at <= ? ORDER BY expires_at, id`,
	qCallInsert: `INSERT INTO calls (id, user_id, tier, reserved, opened_at, expires_at, account,
		model, upstream, price_version, price_model, price_upstream, price_input, price_output, price_cache_read, price_cache_write, reserved_cost, run_id)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
	qCallGet: `SELECT user_id, tier, reserved, opened_at, expires_at, finished_at, tokens, reported, expired, account,
		model, upstream, price_version, price_model, price_upstream, price_input, price_output, price_cache_read, price_cache_write,
		reserved_cost, cost, reported_cost FROM calls WHERE id = ?`,
	qCallSettle:    `UPDATE calls SET finished_at = ?, tokens = reserved, cost = reserved_cost, expired = 1 WHERE id = ?`,
	qCallFinish:    `UPDATE calls SET finished_at = ?, tokens = ?, reported = ?, cost = ?, reported_cost = ? WHERE id = ?`,
	qCallKeepAlive: `UPDATE calls SET expires_at = ? WHERE id = ?`,
	// Every call of a user: the open ones, a range of calls_open, and the
	// finished ones, a range of calls_finished_user.
	qCallsForget: `DELETE FROM calls WHERE id IN
		(SELECT id FROM calls WHERE user_id = ?1 AND finished_at IS NULL
		UNION ALL SELECT id FROM calls WHERE user_id = ?1 AND finished_at IS NOT NULL)`,
	// The next user with an open call expired at or before a cutoff: a
	// walk of calls_open, which holds open calls only.
	qCallNextExpired: `SELECT user_id FROM calls
		WHERE finished_at IS NULL AND user_id > ? AND expires_at <= ? ORDER BY user_id LIMIT 1`,
	// The calls finished at or before a cutoff, oldest first, at most a
	// number of them, whoever they belong to: a range of
	// calls_finished_tier.
	qCallsPrune: `DELETE FROM calls WHERE id IN
		(SELECT id FROM calls WHERE finished_at IS NOT NULL AND finished_at <= ? ORDER BY finished_at LIMIT ?)`,
}

// noExpiry is ledgerState.nextExpiry when no call is open.
const noExpiry = math.MaxInt64

// ledgerState is what is known of one user's calls: the newest row of
// finished tokens and the open calls. The writer caches it in userState;
// every write to the user's calls goes through the writer, which keeps it
// current.
type ledgerState struct {
	anyRow            bool
	lastTS, lastTotal int64
	lastCost          int64 // the newest running total of cost
	open              int64
	reserved          policy.Amounts
	nextExpiry        int64 // the earliest expires_at of an open call, noExpiry when none
	// openCalls, when listed, are all the open calls in settling order
	// (expiry, then id), so that settling and finishing need no query to
	// find them. The writer lists them when there are at most
	// maxListedCalls, a few dozen bytes each.
	listed    bool
	openCalls []expiredCall
	// windows holds, like userState.windows for requests, a cursor per
	// window on the oldest rows of finished tokens after its cutoff.
	windows [len(policy.Windows)]tokCursor
	// period is the oldest row after a month check's cutoff, as
	// userState.periodFirst.
	period tokFirst
}

// tokCursor holds the oldest rows of finished tokens after cutoff. When
// valid, rows[:n] are exactly the first n rows after cutoff, and when all
// is set they are every row after it.
type tokCursor struct {
	valid, all bool
	n          int
	cutoff     int64
	rows       [readahead]tokFirst
}

// first returns the oldest row after c, stepping the cursor over the rows
// at or before it; ok is false when the cursor cannot tell.
func (k *tokCursor) first(c int64) (f tokFirst, ok bool) {
	if !k.valid || c < k.cutoff {
		return f, false
	}
	j := 0
	for j < k.n && k.rows[j].ts <= c {
		j++
	}
	if j == k.n && !k.all {
		k.valid = false
		return f, false
	}
	if j > 0 {
		copy(k.rows[:], k.rows[j:k.n])
		k.n -= j
	}
	k.cutoff = c
	if k.n == 0 {
		return tokFirst{cutoff: c}, true
	}
	f = k.rows[0]
	f.cutoff, f.found = c, true
	return f, true
}

// appended records that r was added after every other row.
func (k *tokCursor) appended(r tokRow) {
	if !k.valid || !k.all {
		return
	}
	if k.n == readahead {
		k.all = false
		return
	}
	k.rows[k.n] = tokFirst{ts: r.ts, before: r.total - r.tokens, tokens: r.tokens, costBefore: r.costTotal - r.cost, cost: r.cost}
	k.n++
}

// maxListedCalls is the most open calls of one user the writer lists.
const maxListedCalls = 1024

// tokRow is one row of finished tokens and cost.
type tokRow struct{ ts, tokens, total, cost, costTotal int64 }

// tokFirst is the oldest row of finished amounts after cutoff: its
// tokens and cost, and the running totals before it.
type tokFirst struct {
	cutoff, ts, before, tokens int64
	costBefore, cost           int64
	found                      bool
}

// ledger implements policy.Ledger for one user at one instant, on the
// writer's transaction (where expired calls are settled first, so virt is
// empty) or on a read connection (where they are not, and virt holds the
// rows settling them would write).
type ledger struct {
	q      rowQuerier
	user   string
	cached *ledgerState // the writer's state of the user; nil on a read connection
	st     ledgerState
	virt   []tokRow
	firsts [len(policy.Windows) + 1]tokFirst
	nfirst int
}

var (
	_ policy.CallHistory = (*history)(nil)
	_ policy.Ledger      = (*ledger)(nil)
)

// loadLedger reads user's ledger state.
func loadLedger(q rowQuerier, user string) (ledgerState, error) {
	st := ledgerState{nextExpiry: noExpiry}
	err := q.queryRow(qTokLast, user).Scan(&st.lastTS, &st.lastTotal, &st.lastCost)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return st, unavailable(err)
	default:
		st.anyRow = true
	}
	var next int64
	if err := q.queryRow(qOpenCalls, user).Scan(&st.open, &st.reserved[policy.MeasureTokens], &st.reserved[policy.MeasureCost], &next); err != nil {
		return st, unavailable(err)
	}
	if st.open > 0 {
		st.nextExpiry = next
	}
	return st, nil
}

// expiredCall is an open call past its expiry, or any open call in
// ledgerState.openCalls.
type expiredCall struct {
	id                  string
	reserved, expiresAt int64
	reservedCost        int64
}

// expiredCalls returns user's open calls that expired at or before now, in
// the order they are settled: by expiry, then id.
func expiredCalls(q rowQuerier, user string, now int64) ([]expiredCall, error) {
	rows, err := q.query(qExpiredCalls, user, now)
	if err != nil {
		return nil, unavailable(err)
	}
	defer rows.Close()
	var out []expiredCall
	for rows.Next() {
		var c expiredCall
		if err := rows.Scan(&c.id, &c.reserved, &c.reservedCost, &c.expiresAt); err != nil {
			return nil, unavailable(err)
		}
		out = append(out, c)
	}
	return out, unavailable(rows.Err())
}

// countAt returns when tokens finished at t are counted: at t, or at the
// newest counted tokens' time when the clock stepped back, so that a user's
// rows stay in time order.
func (st *ledgerState) countAt(t int64) int64 {
	if st.anyRow && t < st.lastTS {
		return st.lastTS
	}
	return t
}

// add counts tokens and cost finished at t and returns the row to store,
// ok false when there is nothing to store.
func (st *ledgerState) add(t, tokens, cost int64) (r tokRow, ok bool) {
	if tokens <= 0 && cost <= 0 {
		return r, false
	}
	tokens, cost = max(tokens, 0), max(cost, 0)
	r = tokRow{ts: st.countAt(t), tokens: tokens, total: st.lastTotal + tokens, cost: cost, costTotal: st.lastCost + cost}
	st.anyRow, st.lastTS, st.lastTotal, st.lastCost = true, r.ts, r.total, r.costTotal
	for i := range st.windows {
		st.windows[i].appended(r)
	}
	return r, true
}

// Calls implements policy.CallHistory. In the writer it first settles the
// calls that expired at or before now, in the same transaction as the
// admission; on a read connection it counts them as settled without
// writing them.
func (h *history) Calls(now time.Time) (policy.Ledger, error) {
	at := now.UnixMicro()
	l := &h.led
	if h.ledgerRead {
		if at != h.ledgerAt {
			return nil, fmt.Errorf("calls of %q: read at %d, asked at %d", h.user, h.ledgerAt, at)
		}
		return l, nil
	}
	*l = ledger{q: h.q, user: h.user}
	if h.tx != nil {
		if err := h.load(); err != nil {
			return nil, err
		}
		st, err := h.tx.settle(h.st, h.user, at)
		if err != nil {
			return nil, err
		}
		l.st, l.cached = *st, st
		return l, l.prefetch(at)
	}
	st, err := loadLedger(h.q, h.user)
	if err != nil {
		return nil, err
	}
	l.st = st
	if st.nextExpiry <= at {
		expired, err := expiredCalls(h.q, h.user, at)
		if err != nil {
			return nil, err
		}
		next := st // where the rows settling them would go
		for _, c := range expired {
			l.st.open--
			l.st.reserved[policy.MeasureTokens] -= c.reserved
			l.st.reserved[policy.MeasureCost] -= c.reservedCost
			if r, ok := next.add(c.expiresAt, c.reserved, c.reservedCost); ok {
				l.virt = append(l.virt, r)
			}
		}
	}
	return l, nil
}

// prefetch finds the oldest stored row after every window's cutoff in one
// statement, when any could be after one.
func (l *ledger) prefetch(now int64) error {
	if !l.st.anyRow || l.st.lastTS <= now-(24*time.Hour).Microseconds() {
		return nil // no window holds a stored row
	}
	var c [len(policy.Windows)]int64
	for _, w := range policy.Windows {
		c[w] = now - w.Duration().Microseconds()
		l.firsts[w] = tokFirst{cutoff: c[w]}
	}
	l.nfirst = len(c)
	if l.cached != nil {
		return l.fillCursors(&c)
	}
	rows, err := l.q.query(qTokFirstAfter3, l.user, c[0], c[1], c[2])
	if err != nil {
		return unavailable(err)
	}
	defer rows.Close()
	for rows.Next() {
		var i int
		var f tokFirst
		if err := rows.Scan(&i, &f.ts, &f.before, &f.tokens, &f.costBefore, &f.cost); err != nil {
			return unavailable(err)
		}
		if i < 0 || i >= len(c) {
			return fmt.Errorf("calls of %q: row for cutoff %d", l.user, i)
		}
		f.cutoff, f.found = c[i], true
		l.firsts[i] = f
	}
	return unavailable(rows.Err())
}

// fillCursors answers prefetch from the writer's token cursors, reading
// ahead in one statement when any cannot tell: most checks then need no
// query to count a user's tokens.
func (l *ledger) fillCursors(c *[len(policy.Windows)]int64) error {
	ws := &l.cached.windows
	hit := true
	for i := range c {
		f, ok := ws[i].first(c[i])
		if !ok {
			hit = false
			break
		}
		l.firsts[i] = f
	}
	if hit {
		return nil
	}
	rows, err := l.q.query(qTokRowsAfter3, l.user, c[0], c[1], c[2])
	if err != nil {
		return unavailable(err)
	}
	defer rows.Close()
	for i := range c {
		ws[i] = tokCursor{valid: true, cutoff: c[i]}
	}
	for rows.Next() {
		var i int
		var f tokFirst
		if err := rows.Scan(&i, &f.ts, &f.before, &f.tokens, &f.costBefore, &f.cost); err != nil {
			return unavailable(err)
		}
		if i < 0 || i >= len(c) || ws[i].n == readahead {
			return fmt.Errorf("calls of %q: row for cutoff %d", l.user, i)
		}
		k := &ws[i]
		k.rows[k.n] = f
		k.n++
	}
	if err := rows.Err(); err != nil {
		return unavailable(err)
	}
	for i := range c {
		k := &ws[i]
		k.all = k.n < readahead
		l.firsts[i], _ = k.first(c[i])
	}
	return nil
}

// first returns the oldest stored row after cutoff.
func (l *ledger) first(cutoff int64) (tokFirst, error) {
	if !l.st.anyRow || l.st.lastTS <= cutoff {
		return tokFirst{cutoff: cutoff}, nil
	}
	for _, f := range l.firsts[:l.nfirst] {
		if f.cutoff == cutoff {
			if !f.found {
				return f, fmt.Errorf("calls of %q: no row after %d but the newest is at %d", l.user, cutoff, l.st.lastTS)
			}
			return f, nil
		}
	}
	if c := l.cached; c != nil && c.period.found && c.period.cutoff == cutoff {
		return c.period, nil
	}
	f := tokFirst{cutoff: cutoff}
	if err := l.q.queryRow(qTokFirstAfter, l.user, cutoff).Scan(&f.ts, &f.before, &f.tokens, &f.costBefore, &f.cost); err != nil {
		return f, unavailable(err)
	}
	f.found = true
	if l.cached != nil {
		// Only a month check's cutoff misses the cursors (see userState.periodFirst).
		l.cached.period = f
	}
	if l.nfirst < len(l.firsts) {
		l.firsts[l.nfirst] = f
		l.nfirst++
	}
	return f, nil
}

// InFlight implements policy.Ledger.
func (l *ledger) InFlight() (calls int64, reserved policy.Amounts, err error) {
	return l.st.open, l.st.reserved, nil
}

// After implements policy.Ledger: the newest running totals minus the
// ones before the oldest row after t.
func (l *ledger) After(t time.Time) (policy.Amounts, error) {
	cutoff := t.UnixMicro()
	f, err := l.first(cutoff)
	if err != nil {
		return policy.Amounts{}, err
	}
	var n policy.Amounts
	if f.found {
		n[policy.MeasureTokens] = l.st.lastTotal - f.before
		n[policy.MeasureCost] = l.st.lastCost - f.costBefore
	}
	for _, r := range l.virt {
		if r.ts > cutoff {
			n[policy.MeasureTokens] += r.tokens
			n[policy.MeasureCost] += r.cost
		}
	}
	return n, nil
}

// OldestAfter implements policy.Ledger. The oldest row after t holds
// tokens or cost or both; when it holds none of m, the oldest that does
// is found by reaching.
func (l *ledger) OldestAfter(m policy.Measure, t time.Time) (time.Time, bool, error) {
	cutoff := t.UnixMicro()
	f, err := l.first(cutoff)
	if err != nil {
		return time.Time{}, false, err
	}
	if f.found {
		switch {
		case m == policy.MeasureTokens && f.tokens > 0, m == policy.MeasureCost && f.cost > 0:
			return time.UnixMicro(f.ts), true, nil
		case m == policy.MeasureTokens && l.st.lastTotal > f.before:
			return l.reaching(m, f, f.before+1)
		case m == policy.MeasureCost && l.st.lastCost > f.costBefore:
			return l.reaching(m, f, f.costBefore+1)
		}
	}
	for _, r := range l.virt {
		if r.ts > cutoff && (m == policy.MeasureTokens && r.tokens > 0 || m == policy.MeasureCost && r.cost > 0) {
			return time.UnixMicro(r.ts), true, nil
		}
	}
	return time.Time{}, false, nil
}

// SettledAt implements policy.Ledger: the oldest row whose running total
// of m reaches the newest total minus n (see reaching).
func (l *ledger) SettledAt(m policy.Measure, n int64) (time.Time, bool, error) {
	last, stored := l.st.lastTotal, l.st.lastTotal
	if m == policy.MeasureCost {
		last, stored = l.st.lastCost, l.st.lastCost
	}
	if k := len(l.virt); k > 0 {
		last = l.virt[k-1].total
		if m == policy.MeasureCost {
			last = l.virt[k-1].costTotal
		}
	}
	target := last - n
	if target > stored {
		for _, r := range l.virt {
			total, amount := r.total, r.tokens
			if m == policy.MeasureCost {
				total, amount = r.costTotal, r.cost
			}
			if amount > 0 && total >= target {
				return time.UnixMicro(r.ts), true, nil
			}
		}
	}
	if !l.st.anyRow {
		return time.Time{}, false, nil
	}
	f, err := l.first(math.MinInt64)
	if err != nil {
		return time.Time{}, false, err
	}
	return l.reaching(m, f, target)
}

// reachMaxProbes bounds reaching's probes: bisection alone takes at most
// 64 over any span of int64 microseconds, and reaching interpolates in
// turn with it.
const reachMaxProbes = 130

// reaching returns the time of the oldest stored row whose running total
// of m is at least target, searching from f, the oldest row after a
// cutoff.
//
// No index is kept on the running totals: one would write a page of its
// own for each user a commit finishes a call of (see the package doc),
// for the sake of a refusal's retry_after. A user's rows are in the same
// order by time as by either total (ts never decreases as they grow), so
// the search is over time, each probe the two rows around an instant
// (qTokAround, two seeks of the key): interpolated between the rows that
// bound the target, and bisected whenever that did not halve the span, as
// history.seekSeq does for the k-th request. A probe that falls between
// the row sought and the one before it ends the search.
func (l *ledger) reaching(m policy.Measure, f tokFirst, target int64) (time.Time, bool, error) {
	value := func(total, costTotal int64) int64 {
		if m == policy.MeasureCost {
			return costTotal
		}
		return total
	}
	hiTS, hiV := l.st.lastTS, value(l.st.lastTotal, l.st.lastCost)
	switch {
	case !f.found || hiV < target:
		return time.Time{}, false, nil
	case value(f.before+f.tokens, f.costBefore+f.cost) >= target:
		return time.UnixMicro(f.ts), true, nil
	}
	// Every row at or before lo is below target and the newest at hiTS is
	// not: the row sought is at an instant in (lo, hiTS]. f may share its
	// instant with rows that are not below, so lo starts before it.
	lo, loV, bisect := f.ts-1, value(f.before+f.tokens, f.costBefore+f.cost), false
	for probes := 0; hiTS-lo > 1; probes++ {
		if probes == reachMaxProbes {
			return time.Time{}, false, fmt.Errorf("calls of %q: no row reaching %d between %d and %d after %d probes", l.user, target, lo, hiTS, probes)
		}
		// x in [lo+2, hiTS], so that either bound moves: the newest row
		// before x, when it reaches target, is before x, and the oldest
		// at or after it, when it does not, is after lo+1.
		width := uint64(hiTS - lo) // unsigned: right even past MaxInt64
		off := float64(width / 2)
		if !bisect {
			off = float64(width) * (float64(target-loV) / float64(hiV-loV))
		}
		x := lo + int64(min(max(off, 2), float64(width)))
		below, above, err := l.around(x)
		if err != nil {
			return time.Time{}, false, err
		}
		switch {
		case value(below.total, below.costTotal) >= target:
			hiTS, hiV = below.ts, value(below.total, below.costTotal)
		case value(above.total, above.costTotal) >= target:
			// The row after the newest one below target.
			return time.UnixMicro(above.ts), true, nil
		default:
			// Rows after above at its instant may reach target.
			lo, loV = above.ts-1, value(above.total, above.costTotal)
		}
		bisect = !bisect && uint64(hiTS-lo) > width/2
	}
	return time.UnixMicro(hiTS), true, nil
}

// around returns the newest row before x and the oldest at or after it;
// both must exist.
func (l *ledger) around(x int64) (below, above tokRow, err error) {
	rows, err := l.q.query(qTokAround, l.user, x)
	if err != nil {
		return below, above, unavailable(err)
	}
	defer rows.Close()
	var found [2]bool
	for rows.Next() {
		var r tokRow
		if err := rows.Scan(&r.ts, &r.total, &r.costTotal); err != nil {
			return below, above, unavailable(err)
		}
		i := 0
		if r.ts >= x {
			i = 1
		}
		found[i] = true
		if i == 0 {
			below = r
		} else {
			above = r
		}
	}
	if err := rows.Err(); err != nil {
		return below, above, unavailable(err)
	}
	if !found[0] || !found[1] {
		return below, above, fmt.Errorf("calls of %q: no row before %d (%v) or none at or after it (%v)", l.user, x, found[0], found[1])
	}
	return below, above, nil
}
