package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// query names a statement prepared once.
type query int

const (
	qLast query = iota
	qFirstAfter
	qFirstAfter3
	qRowsAfter
	qRowsAfter3
	qNthAfter
	qAround
	qInsert
	qForget
	qNextUser
	qPruneBound
	qPruneDelete
	qPeriodUse
	// The same for an account's pool (see poolQueries).
	qPoolLast
	qPoolFirstAfter
	qPoolFirstAfter3
	qPoolNthAfter
	qPoolAround
	qPoolInsert
	qPoolForget
	qPoolMerge
	qPoolClear
	qBegin
	qCommit
	qDataVersion
	qSnapshot
	// Metered calls (see calls.go).
	qTokLast
	qTokFirstAfter
	qTokFirstAfter3
	qTokRowsAfter3
	qTokAround
	qTokInsert
	qTokForget
	qTokNextUser
	qTokPrune
	qOpenCalls
	qNextExpiry
	qExpiredCalls
	qCallInsert
	qCallGet
	qCallSettle
	qCallFinish
	qCallKeepAlive
	qCallsForget
	qCallNextExpired
	qCallsPrune
	// Runs (see runs.go).
	qRunChain
	qRunInsert
	qRunTreeInsert
	qRunCount
	qRunClose
	qRunSubtreeOpen
	qRunsForget
	qRunTreeForget
	qRunTreePrune
	qRunsPrune
	qRunUser
	qRunChildren
	qRunGet
	qRunsByUser
	qRunsByState
	qRunsByUserState
	qRunsAll
	numQueries
)

// readahead is how many consecutive rows after a window's cutoff the writer
// keeps per user and window (see cursor).
const readahead = 8

// queries are the statements of the hot path and of pruning. Each is a seek
// on the primary key (user_id, ts, seq); none scans a user's window.
var queries = [numQueries]string{
	qLast:       `SELECT ts, seq FROM requests WHERE user_id = ? ORDER BY ts DESC, seq DESC LIMIT 1`,
	qFirstAfter: `SELECT ts, seq FROM requests WHERE user_id = ? AND ts > ? ORDER BY ts, seq LIMIT 1`,
	// The oldest row after each of three cutoffs, in one statement: one
	// round trip through database/sql instead of three.
	qFirstAfter3: `SELECT 0, ts, seq FROM (SELECT ts, seq FROM requests WHERE user_id = ?1 AND ts > ?2 ORDER BY ts, seq LIMIT 1) a
		UNION ALL SELECT 1, ts, seq FROM (SELECT ts, seq FROM requests WHERE user_id = ?1 AND ts > ?3 ORDER BY ts, seq LIMIT 1) b
		UNION ALL SELECT 2, ts, seq FROM (SELECT ts, seq FROM requests WHERE user_id = ?1 AND ts > ?4 ORDER BY ts, seq LIMIT 1) c`,
	// The same, reading ahead: the oldest rows after a cutoff (or each of
	// three), at most readahead of them, for the writer's cursors.
	qRowsAfter: `SELECT ts, seq FROM requests WHERE user_id = ? AND ts > ? ORDER BY ts, seq LIMIT 8`,
	qRowsAfter3: `SELECT 0, ts, seq FROM (SELECT ts, seq FROM requests WHERE user_id = ?1 AND ts > ?2 ORDER BY ts, seq LIMIT 8) a
		UNION ALL SELECT 1, ts, seq FROM (SELECT ts, seq FROM requests WHERE user_id = ?1 AND ts > ?3 ORDER BY ts, seq LIMIT 8) b
		UNION ALL SELECT 2, ts, seq FROM (SELECT ts, seq FROM requests WHERE user_id = ?1 AND ts > ?4 ORDER BY ts, seq LIMIT 8) c`,
	// Only needed when a lowered limit leaves a window more than one
	// request over its ceiling. It visits every row it steps over, so
	// NthAfter steps over few (nthOffsetMax) and searches for the rest.
	qNthAfter: `SELECT ts FROM requests WHERE user_id = ? AND ts > ? ORDER BY ts, seq LIMIT 1 OFFSET ?`,
	// The newest row before a time and the oldest at or after it: one
	// probe of NthAfter's search (see seekSeq).
	qAround: `SELECT ts, seq FROM (SELECT ts, seq FROM requests WHERE user_id = ?1 AND ts < ?2 ORDER BY ts DESC, seq DESC LIMIT 1) a
		UNION ALL SELECT ts, seq FROM (SELECT ts, seq FROM requests WHERE user_id = ?1 AND ts >= ?2 ORDER BY ts, seq LIMIT 1) b`,
	qInsert:      `INSERT INTO requests (user_id, ts, seq, tier_id) VALUES (?, ?, ?, ?)`,
	qForget:      `DELETE FROM requests WHERE user_id = ?`,
	qNextUser:    `SELECT user_id FROM requests WHERE user_id > ? ORDER BY user_id LIMIT 1`,
	qPruneBound:  `SELECT ts FROM requests WHERE user_id = ? AND ts <= ? ORDER BY ts, seq LIMIT 1 OFFSET ?`,
	qPruneDelete: `DELETE FROM requests WHERE user_id = ? AND ts <= ?`,
	// A billing period's totals and the key's watermarks (see periods.go),
	// zeros when there are none.
	qPeriodUse: `SELECT coalesce(m.requests_to, 0), coalesce(m.tokens_to, 0), coalesce(t.requests, 0), coalesce(t.tokens, 0), coalesce(t.cost, 0)
		FROM (SELECT 1 AS one) o LEFT JOIN period_marks m ON m.key = ?1 LEFT JOIN period_totals t ON t.key = ?1 AND t.period_start = ?2`,
	qBegin:       `BEGIN IMMEDIATE`,
	qCommit:      `COMMIT`,
	qDataVersion: `PRAGMA data_version`,
	// Any read of a table begins a read transaction's snapshot; this one
	// reads at most one row of a small table.
	qSnapshot: `SELECT 1 FROM tiers LIMIT 1`,
}

// readQueries are the queries View runs on the read connections.
var readQueries = [...]query{qSnapshot, qLast, qFirstAfter, qFirstAfter3, qNthAfter, qAround, qPeriodUse,
	qPoolLast, qPoolFirstAfter, qPoolFirstAfter3, qPoolNthAfter, qPoolAround,
	qTokLast, qTokFirstAfter, qTokAround, qOpenCalls, qExpiredCalls, qCallGet, qRunChain}

// rowQuerier runs one of the queries.
type rowQuerier interface {
	queryRow(q query, args ...any) *sql.Row
	query(q query, args ...any) (*sql.Rows, error)
}

// userState is what the writer remembers of one user's rows between
// admissions: the newest row, and for each window a cursor on the oldest
// rows after the cutoff it was last asked about. Cutoffs only move forward
// as time does, so a cursor usually answers the next admission too: it
// steps over the rows that left the window, and new rows extend it. Most
// admissions then need no query at all before their insert.
type userState struct {
	any             bool // whether the user has a row
	lastTS, lastSeq int64
	windows         [len(policy.Windows)]cursor
	// calls is the user's ledger of metered calls, once a metered check,
	// a finish or a keepalive read it; nil until then.
	calls *ledgerState
	// record is the user's record once CurrentUser read it (recordLoaded);
	// nil when they have none.
	record       *policy.UserRecord
	recordLoaded bool
	// account is, for an account's pool, the account once CurrentAccount
	// read it (accountLoaded); nil when there is none.
	account       *policy.Account
	accountLoaded bool
	// period is, once a month check read them, the totals of the billing
	// period starting at periodStart (see PeriodTotals), and periodFirst
	// the oldest row after the period's live cutoff: both stay true until
	// rows are pruned, which drops this state (forgetUser), for rows are
	// only ever appended after.
	period      *policy.PeriodUse
	periodStart int64
	periodFirst firstRow
}

// cursor holds the oldest rows after cutoff. When valid, the rows numbered
// seq to seq+n-1 are exactly the first n rows after cutoff, with
// timestamps ts[:n], and every row numbered below seq is at or before
// cutoff. n = 0 means no row is after cutoff, and the next row will be
// numbered seq.
type cursor struct {
	valid  bool
	n      int
	cutoff int64
	seq    int64
	ts     [readahead]int64
}

// first returns the oldest row after c, stepping the cursor over the rows
// at or before it; ok is false when the cursor cannot tell.
func (k *cursor) first(c int64) (r firstRow, ok bool) {
	if !k.valid || c < k.cutoff {
		return r, false
	}
	j := 0
	for j < k.n && k.ts[j] <= c {
		j++
	}
	if j == k.n && j > 0 {
		// Every row held is at or before c; the rows after them are
		// unknown.
		k.valid = false
		return r, false
	}
	if j > 0 {
		copy(k.ts[:], k.ts[j:k.n])
		k.n -= j
		k.seq += int64(j)
	}
	k.cutoff = c
	if k.n == 0 {
		return firstRow{cutoff: c}, true
	}
	return firstRow{cutoff: c, ts: k.ts[0], seq: k.seq, found: true}, true
}

// appended records that row (ts, seq) was added after every other row.
func (k *cursor) appended(ts, seq int64) {
	if k.valid && k.seq+int64(k.n) == seq {
		if k.n < readahead {
			k.ts[k.n] = ts
			k.n++
		}
	}
}

// history implements policy.History for one user on one transaction.
//
// A user's rows are numbered consecutively by seq, and ts never decreases
// as seq grows: requests at one instant share their ts and are told apart
// by seq alone, so ordering by (ts, seq) is ordering by seq. Pruning only
// removes the oldest rows and Forget removes all, so the number of rows
// after a cutoff is last.seq - first_after_cutoff.seq + 1: two seeks,
// whatever the count. In the writer, both usually come from the writer's
// cache (see userState), which a query refills; on a read connection,
// Prefetch finds the oldest row of every window in one statement.
type history struct {
	q    rowQuerier
	tx   *writeTx   // the writer's transaction; nil on a read connection
	st   *userState // the writer's cached state of the user, once loaded
	user string

	loaded           bool
	any              bool
	lastTS, lastSeq  int64
	firstAfter       [len(policy.Windows)]firstRow // small cache: Prefetch, CountAfter, NthAfter(_, 1)
	firstAfterFilled int
	scanned          firstRow // what queries scan into: a field, so no scan allocates
	scannedIndex     int

	led ledger // the user's calls, once Calls is asked

	// On PostgreSQL: version is the tiers' version read after the user's
	// lock, once versionRead, and tiersAt the tiers that are current when
	// it is theirs (nil: the store's cache; see currentTierPG).
	version     int64
	versionRead bool
	tiersAt     *tierCache
	// ledgerRead says led holds the user's ledger at ledgerAt as a batch
	// read it, its expired calls settled (see pgBatch), for Calls to
	// return.
	ledgerRead bool
	ledgerAt   int64
}

// firstRow is the oldest row after cutoff; found is false when there is none.
type firstRow struct {
	cutoff, ts, seq int64
	found           bool
}

// of returns q, or its pool variant when the history is an account's
// pool read on a read connection (see poolQueries): the writer reads a
// pool's rows in pool_recent from memory (see staged).
func (h *history) of(q query) query {
	if p := poolVariant[q]; p != 0 && h.tx == nil && policy.IsAccountKey(h.user) {
		return p
	}
	return q
}

func (h *history) reset(q rowQuerier, tx *writeTx, user string) {
	*h = history{q: q, tx: tx, user: user}
}

func (h *history) load() error {
	if h.loaded {
		return nil
	}
	if h.tx != nil {
		if st := h.tx.cachedUser(h.user); st != nil {
			h.tx.touch(h.user)
			h.st, h.loaded, h.any, h.lastTS, h.lastSeq = st, true, st.any, st.lastTS, st.lastSeq
			return nil
		}
	}
	if s := h.staged(); s != nil {
		h.any, h.lastTS, h.lastSeq = true, s.ts[len(s.ts)-1], s.first+int64(len(s.ts))-1
	} else {
		err := h.q.queryRow(h.of(qLast), h.user).Scan(&h.lastTS, &h.lastSeq)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return unavailable(err)
		default:
			h.any = true
		}
	}
	h.loaded = true
	if h.tx != nil {
		h.st = &userState{any: h.any, lastTS: h.lastTS, lastSeq: h.lastSeq}
		h.tx.cacheUser(h.user, h.st)
	}
	return nil
}

// Last implements policy.History.
func (h *history) Last() (time.Time, bool, error) {
	if err := h.load(); err != nil || !h.any {
		return time.Time{}, false, err
	}
	return time.UnixMicro(h.lastTS), true, nil
}

// Prefetch implements policy.History: it finds the oldest row after each
// cutoff, from the writer's cursors where they can tell and otherwise with
// one statement.
func (h *history) Prefetch(cutoffs *[len(policy.Windows)]time.Time) error {
	if err := h.load(); err != nil || !h.any || h.prefetched(cutoffs) {
		return err
	}
	var c [len(policy.Windows)]int64
	var need [len(policy.Windows)]bool
	needed := 0
	for i, t := range cutoffs {
		c[i] = t.UnixMicro()
		h.firstAfter[i] = firstRow{cutoff: c[i]}
		if h.lastTS <= c[i] {
			continue // the window is empty
		}
		if h.st != nil {
			if r, ok := h.st.windows[i].first(c[i]); ok {
				h.firstAfter[i] = r
				continue
			}
		}
		need[i] = true
		needed++
	}
	h.firstAfterFilled = len(c)
	switch {
	case needed == 0:
		return nil
	case h.st == nil || h.tx.w == nil:
		// No cursor outlives this admission (a read, or PostgreSQL):
		// the oldest row of each window is all it needs.
		return h.fetchFirsts(&c)
	case needed == 1:
		for i := range need {
			if need[i] {
				return h.fillCursor(i, c[i])
			}
		}
	}
	return h.fillCursors(&c)
}

// prefetched reports whether the oldest row after each of cutoffs is
// known already: told the same cutoffs again (the shadow limits' Evaluate
// after the real limits'), or read by a batch (see pgBatch).
func (h *history) prefetched(cutoffs *[len(policy.Windows)]time.Time) bool {
	if h.firstAfterFilled != len(cutoffs) {
		return false
	}
	for i, t := range cutoffs {
		if h.firstAfter[i].cutoff != t.UnixMicro() {
			return false
		}
	}
	return true
}

// fetchFirsts looks up the oldest row after each cutoff in one statement.
func (h *history) fetchFirsts(c *[len(policy.Windows)]int64) error {
	rows, err := h.q.query(h.of(qFirstAfter3), h.user, c[0], c[1], c[2])
	if err != nil {
		return unavailable(err)
	}
	defer rows.Close()
	for rows.Next() {
		r := &h.scanned
		if err := rows.Scan(&h.scannedIndex, &r.ts, &r.seq); err != nil {
			return unavailable(err)
		}
		i := h.scannedIndex
		if i < 0 || i >= len(c) {
			return fmt.Errorf("prefetch: row for cutoff %d", i)
		}
		h.firstAfter[i] = firstRow{cutoff: c[i], ts: r.ts, seq: r.seq, found: true}
	}
	return unavailable(rows.Err())
}

// fillCursor reads the oldest rows after cutoff c into window i's cursor,
// in the writer: from requests, then a pool's staged rows (stagedAfter).
func (h *history) fillCursor(i int, c int64) error {
	rows, err := h.q.query(qRowsAfter, h.user, c)
	if err != nil {
		return unavailable(err)
	}
	defer rows.Close()
	k := &h.st.windows[i]
	*k = cursor{cutoff: c, seq: h.lastSeq + 1}
	for rows.Next() {
		if err := h.scanInto(rows, k, false); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return unavailable(err)
	}
	if err := h.stagedAfter(k); err != nil {
		return err
	}
	return h.filled(i, k)
}

// fillCursors reads the oldest rows after every cutoff into the cursors.
func (h *history) fillCursors(c *[len(policy.Windows)]int64) error {
	rows, err := h.q.query(qRowsAfter3, h.user, c[0], c[1], c[2])
	if err != nil {
		return unavailable(err)
	}
	defer rows.Close()
	for i := range c {
		h.st.windows[i] = cursor{cutoff: c[i], seq: h.lastSeq + 1}
	}
	for rows.Next() {
		if err := h.scanInto(rows, nil, true); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return unavailable(err)
	}
	for i := range c {
		if err := h.stagedAfter(&h.st.windows[i]); err != nil {
			return err
		}
		if err := h.filled(i, &h.st.windows[i]); err != nil {
			return err
		}
	}
	return nil
}

// scanInto appends the row rows holds to cursor k, or, when tagged, to the
// cursor its first column names.
func (h *history) scanInto(rows *sql.Rows, k *cursor, tagged bool) error {
	r := &h.scanned
	var err error
	if tagged {
		err = rows.Scan(&h.scannedIndex, &r.ts, &r.seq)
	} else {
		err = rows.Scan(&r.ts, &r.seq)
	}
	if err != nil {
		return unavailable(err)
	}
	if tagged {
		if h.scannedIndex < 0 || h.scannedIndex >= len(h.st.windows) {
			return fmt.Errorf("history of %q: row for cutoff %d", h.user, h.scannedIndex)
		}
		k = &h.st.windows[h.scannedIndex]
	}
	if k.n == 0 {
		k.seq = r.seq
	}
	if r.seq != k.seq+int64(k.n) || k.n == readahead {
		return fmt.Errorf("history of %q: row %d out of sequence after %d rows from %d", h.user, r.seq, k.n, k.seq)
	}
	k.ts[k.n] = r.ts
	k.n++
	return nil
}

// filled validates window i's freshly read cursor and answers from it.
func (h *history) filled(i int, k *cursor) error {
	if k.n > 0 && k.seq+int64(k.n)-1 > h.lastSeq {
		return fmt.Errorf("history of %q: row %d after the newest %d", h.user, k.seq+int64(k.n)-1, h.lastSeq)
	}
	k.valid = true
	r, _ := k.first(k.cutoff)
	if r.found != (h.lastTS > k.cutoff) {
		return fmt.Errorf("history of %q: oldest row after %d found: %v, but the newest is at %d", h.user, k.cutoff, r.found, h.lastTS)
	}
	h.firstAfter[i] = r
	return nil
}

// first returns the oldest row after cutoff; ok is false when there is none.
func (h *history) first(cutoff int64) (firstRow, bool, error) {
	if err := h.load(); err != nil || !h.any || h.lastTS <= cutoff {
		return firstRow{}, false, err
	}
	for _, r := range h.firstAfter[:h.firstAfterFilled] {
		if r.cutoff == cutoff {
			if !r.found {
				// The newest row is after cutoff, so the oldest after it
				// exists: the cached newest row is wrong.
				return r, false, fmt.Errorf("history of %q: no row after %d but the newest is at %d", h.user, cutoff, h.lastTS)
			}
			return r, true, nil
		}
	}
	if st := h.st; st != nil && st.periodFirst.found && st.periodFirst.cutoff == cutoff {
		return st.periodFirst, true, nil
	}
	r := &h.scanned
	err := h.q.queryRow(h.of(qFirstAfter), h.user, cutoff).Scan(&r.ts, &r.seq)
	if errors.Is(err, sql.ErrNoRows) {
		// None in requests: a pool's may be staged.
		if ts, seq, ok := h.staged().firstAfter(cutoff); ok {
			r.ts, r.seq, err = ts, seq, nil
		}
	}
	if err != nil {
		return firstRow{}, false, unavailable(err)
	}
	r.cutoff, r.found = cutoff, true
	if h.st != nil && h.st.period != nil {
		// Asked by a month check (the windows' cutoffs come from the
		// cursors): the period's cutoff stays put for a month.
		h.st.periodFirst = *r
	}
	if h.firstAfterFilled < len(h.firstAfter) {
		h.firstAfter[h.firstAfterFilled] = *r
		h.firstAfterFilled++
	}
	return *r, true, nil
}

// CountAfter implements policy.History.
func (h *history) CountAfter(t time.Time) (int64, error) {
	r, ok, err := h.first(t.UnixMicro())
	if !ok {
		return 0, err
	}
	return h.lastSeq - r.seq + 1, nil
}

// nthOffsetMax is the most rows NthAfter steps over with OFFSET, which
// visits every row it skips: all the way for a small k, and the last stretch
// after a search for a larger one.
const nthOffsetMax = 64

// nthMaxProbes bounds the probes of one search (see seekSeq). Of any two
// probes in a row, one at least halves the span of timestamps searched, so
// a day's (under 2^37 µs) takes at most 74 probes and any span of int64
// microseconds 128. The bound is a safety net: past it, OFFSET would step
// over what is left, slower but right.
const nthMaxProbes = 128

// errNoNth is what NthAfter returns when fewer than k rows are after t, as
// the OFFSET query that finds nothing does.
var errNoNth = unavailable(sql.ErrNoRows)

// NthAfter implements policy.History.
//
// The k-th row after t is the one numbered first.seq+k-1, where first is
// the oldest row after t. seq has no index (one would cost every admission a
// second B-tree insert), and OFFSET visits every row it skips: k-1 of them,
// 99,000 when a day limit is lowered to 1,000 below a user's 100,000
// requests, and refused checks are not recorded, so a client could repeat
// them at will in the writer, where every other admission waits. So only a
// small k steps over rows; a larger one is found by searching on ts, which
// never decreases as seq grows (see seekSeq): a few seeks whatever k.
func (h *history) NthAfter(t time.Time, k int64) (time.Time, error) {
	cutoff := t.UnixMicro()
	if k == 1 {
		r, ok, err := h.first(cutoff)
		if err != nil {
			return time.Time{}, err
		}
		if !ok {
			return time.Time{}, fmt.Errorf("no request after %v", t)
		}
		return time.UnixMicro(r.ts), nil
	}
	if s := h.staged(); s != nil {
		// A pool's newest rows are in memory; the others, all older,
		// in requests.
		r, ok, err := h.first(cutoff)
		if err != nil {
			return time.Time{}, err
		}
		if !ok || k-1 > h.lastSeq-r.seq {
			return time.Time{}, errNoNth
		}
		if ts, ok := s.at(r.seq + k - 1); ok {
			return time.UnixMicro(ts), nil
		}
	}
	if k <= nthOffsetMax {
		var ts int64
		if err := h.q.queryRow(h.of(qNthAfter), h.user, cutoff, k-1).Scan(&ts); err != nil {
			return time.Time{}, unavailable(err)
		}
		return time.UnixMicro(ts), nil
	}
	r, ok, err := h.first(cutoff) // usually known: Prefetch found it
	if err != nil {
		return time.Time{}, err
	}
	if !ok || k-1 > h.lastSeq-r.seq {
		return time.Time{}, errNoNth
	}
	ts, err := h.seekSeq(r, r.seq+k-1)
	return time.UnixMicro(ts), err
}

// seekSeq returns the timestamp of the row numbered target, lo being a row
// at or before it (lo.cutoff any time such that lo is the oldest row after
// it) and target below the newest row's number.
//
// It keeps two rows around target, lo numbered at most target and hi after
// it, starting from the newest; the rows between them in time are exactly
// those numbered between them. Each probe picks a time x in (lo.ts, hi.ts]
// and finds the newest row before x and the oldest at or after it (qAround,
// two seeks on the primary key), which are numbered consecutively: one of
// them becomes the new lo or hi, or is target. Either way the span of
// timestamps between lo and hi shrinks, to rows on both sides, so a long
// silence between bursts of requests is skipped at once. x is interpolated
// from the numbers, aiming a little before target so that lo tends to land
// within OFFSET's reach of it: on steady traffic one or two probes do. When
// an interpolation does not halve the span, the next probe bisects it
// instead, which bounds the probes whatever the spacing of the rows (see
// nthMaxProbes). Once lo is within nthOffsetMax of target, OFFSET finishes.
//
// Probes only read, with their own statement, not through first: the
// writer's cursors and firstAfter keep only what callers asked about.
func (h *history) seekSeq(lo firstRow, target int64) (int64, error) {
	hiTS, hiSeq := h.lastTS, h.lastSeq
	if h.staged() != nil {
		// target is in requests (NthAfter answers staged rows), which
		// hold the pool's rows before the staged ones: the search is
		// over them.
		if err := h.q.queryRow(qLast, h.user).Scan(&hiTS, &hiSeq); err != nil {
			return 0, unavailable(err)
		}
	}
	if target == hiSeq {
		return hiTS, nil
	}
	bisect := false
	for probes := 0; target-lo.seq > nthOffsetMax && probes < nthMaxProbes; probes++ {
		if hiTS == lo.ts {
			// Every row from lo to hi, target among them, is at one
			// instant.
			return lo.ts, nil
		}
		// More than nthOffsetMax rows lie in [lo.ts, hiTS], which is
		// at least one tick wide: x is in (lo.ts, hiTS].
		width := uint64(hiTS - lo.ts) // unsigned: right even past MaxInt64
		span := hiSeq - lo.seq
		off := width / 2
		if !bisect {
			aim := max(target-nthOffsetMax/2, lo.seq+1)
			f := float64(width) * (float64(aim-lo.seq) / float64(span))
			switch {
			case f < 1:
				off = 1
			case f >= float64(width):
				off = width
			default:
				off = uint64(f)
			}
		}
		x := lo.ts + int64(off)
		below, above, err := h.around(x)
		if err != nil {
			return 0, err
		}
		if below.seq < lo.seq || above.seq > hiSeq || above.seq != below.seq+1 {
			return 0, fmt.Errorf("history of %q: rows %d at %d and %d at %d around %d, between rows %d at %d and %d at %d",
				h.user, below.seq, below.ts, above.seq, above.ts, x, lo.seq, lo.ts, hiSeq, hiTS)
		}
		switch {
		case below.seq == target:
			return below.ts, nil
		case above.seq == target:
			return above.ts, nil
		case above.seq < target:
			lo = firstRow{cutoff: x - 1, ts: above.ts, seq: above.seq, found: true}
		default:
			hiTS, hiSeq = below.ts, below.seq
		}
		bisect = !bisect && uint64(hiTS-lo.ts) > width/2
	}
	var ts int64
	if err := h.q.queryRow(h.of(qNthAfter), h.user, lo.cutoff, target-lo.seq).Scan(&ts); err != nil {
		return 0, unavailable(err)
	}
	return ts, nil
}

// around returns the newest row before x and the oldest at or after it;
// both must exist.
func (h *history) around(x int64) (below, above firstRow, err error) {
	rows, err := h.q.query(h.of(qAround), h.user, x)
	if err != nil {
		return below, above, unavailable(err)
	}
	defer rows.Close()
	for rows.Next() {
		r := &h.scanned
		if err := rows.Scan(&r.ts, &r.seq); err != nil {
			return below, above, unavailable(err)
		}
		if r.ts < x {
			below, below.found = *r, true
		} else {
			above, above.found = *r, true
		}
	}
	if err := rows.Err(); err != nil {
		return below, above, unavailable(err)
	}
	if !below.found || !above.found {
		return below, above, fmt.Errorf("history of %q: no row before %d (%v) or none at or after it (%v)", h.user, x, below.found, above.found)
	}
	return below, above, nil
}

// Admit implements policy.RequestStore. decide runs inside the writer's
// transaction, so nothing else writes between its reading and the insert.
func (s *Store) Admit(ctx context.Context, userID string, decide func(policy.History) (policy.Admission, error)) error {
	return s.writer.admit(ctx, userID, decide)
}

// admit runs one admission in the writer's transaction.
func (tx *writeTx) admit(user string, decide func(policy.History) (policy.Admission, error)) error {
	h := &tx.hist
	h.reset(tx, tx, user)
	a, err := decide(h)
	if err != nil {
		return err
	}
	if !a.Record {
		if a.Run != nil {
			return tx.writeRuns(&a)
		}
		return nil
	}
	return tx.record(h, &a)
}

// AdmitPooled implements policy.PoolStore: on PostgreSQL the transaction
// begins with the pool's lock and then the user's, in one round trip.
func (s *Store) AdmitPooled(ctx context.Context, poolKey, userID string, decide func(pool, own policy.History) (policy.Admission, policy.Admission, error)) error {
	if !policy.IsAccountKey(poolKey) || policy.IsAccountKey(userID) {
		return policy.Errorf(policy.EINTERNAL, "admit pooled: %q is not an account's key or %q is one", poolKey, userID)
	}
	fn := func(tx *writeTx) error { return tx.admitPooled(poolKey, userID, decide) }
	if pw, ok := s.writer.(*pgWriter); ok {
		class, key := lockOf(userID)
		return pw.run(ctx, fmt.Sprintf("%s; SELECT pg_advisory_xact_lock(%d, %d)", admitBegin(poolKey), class, key), fn)
	}
	return s.writer.do(ctx, fn)
}

// admitPooled runs a member's admission over its pool's history and its
// own in the writer's transaction.
func (tx *writeTx) admitPooled(poolKey, user string, decide func(pool, own policy.History) (policy.Admission, policy.Admission, error)) error {
	hp := &tx.poolHist
	hp.reset(tx, tx, poolKey)
	hu := &tx.hist
	hu.reset(tx, tx, user)
	pa, ua, err := decide(hp, hu)
	if err != nil || !ua.Record && !pa.Record {
		return err
	}
	if !ua.Record || !pa.Record {
		return fmt.Errorf("admit %q in %q: the user's admission records %v, the pool's %v", user, poolKey, ua.Record, pa.Record)
	}
	if err := tx.record(hu, &ua); err != nil {
		return err
	}
	return tx.record(hp, &pa)
}

// record records the request a, decided on h, admits.
func (tx *writeTx) record(h *history, a *policy.Admission) error {
	user := h.user
	ts := a.At.UnixMicro()
	if err := h.load(); err != nil {
		return err
	}
	if h.any && ts < h.lastTS {
		return fmt.Errorf("admit %q: timestamp %d before the last one %d", user, ts, h.lastTS)
	}
	seq := h.lastSeq + 1
	var tierID any // NULL when the check named no stored tier
	if a.TierID != 0 {
		tierID = a.TierID
	}
	insert := qInsert
	if policy.IsAccountKey(user) {
		insert = qPoolInsert
	}
	if _, err := tx.exec(insert, user, ts, seq, tierID); err != nil {
		return unavailable(err)
	}
	if tx.w != nil && insert == qPoolInsert {
		if err := tx.w.stage(user, ts, seq); err != nil {
			return err
		}
	}
	st := h.st
	st.any, st.lastTS, st.lastSeq = true, ts, seq
	for i := range st.windows {
		st.windows[i].appended(ts, seq)
	}
	if a.Run != nil {
		// Before the call: a run the request opens is stored first.
		if err := tx.writeRuns(a); err != nil {
			return err
		}
	}
	if a.Call != nil {
		return tx.openCall(h, a.Call)
	}
	return nil
}

// readTx adapts a read transaction to rowQuerier.
type readTx struct {
	ctx   context.Context
	tx    *sql.Tx
	stmts *[numQueries]*sql.Stmt
}

func (r readTx) stmt(q query) *sql.Stmt { return r.tx.StmtContext(r.ctx, r.stmts[q]) }

func (r readTx) queryRow(q query, args ...any) *sql.Row {
	return r.stmt(q).QueryRowContext(r.ctx, args...)
}

func (r readTx) query(q query, args ...any) (*sql.Rows, error) {
	return r.stmt(q).QueryContext(r.ctx, args...)
}

// prepareReads prepares the statements of View on the read pool.
func (s *Store) prepareReads(ctx context.Context) error {
	for _, q := range readQueries {
		st, err := s.db.PrepareContext(ctx, s.d.queries[q])
		if err != nil {
			return fmt.Errorf("prepare %q: %w", s.d.queries[q], err)
		}
		s.reads[q] = st
	}
	return nil
}

// View implements policy.RequestStore on a read connection, so it never
// waits for the writer. Its snapshot begins before fn runs (both
// databases otherwise begin it at the transaction's first read), so that
// fn can read the clock first: every write the view holds committed
// before that instant.
func (s *Store) View(ctx context.Context, userID string, fn func(policy.History) error) error {
	var opts *sql.TxOptions // SQLite: a read transaction sees one snapshot
	if s.d.postgres {
		// Under READ COMMITTED each statement would see its own.
		opts = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}
	}
	tx, err := s.db.BeginTx(ctx, opts)
	if err != nil {
		return unavailable(err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to lose
	q := readTx{ctx, tx, &s.reads}
	var one int
	if err := q.queryRow(qSnapshot).Scan(&one); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return unavailable(err)
	}
	return fn(&history{q: q, user: userID})
}

// Forget implements policy.RequestStore.
func (s *Store) Forget(ctx context.Context, userID string) error {
	audit := auditBy(ctx, policy.ChangeTime(ctx))
	return s.writer.do(ctx, func(tx *writeTx) error {
		if err := tx.lockUser(userID); err != nil {
			return err
		}
		tx.forgetUser(userID)
		if tx.w != nil {
			tx.w.unstage(userID)
		}
		for _, q := range [...]query{qForget, qPoolForget, qCallsForget, qTokForget, qRunTreeForget, qRunsForget} {
			if _, err := tx.exec(q, userID); err != nil {
				return unavailable(err)
			}
		}
		// The periods' totals go with the rows they were counted from.
		for _, table := range [...]string{"period_totals", "period_marks"} {
			if _, err := tx.conn.ExecContext(tx.ctx, tx.d.bind(`DELETE FROM `+table+` WHERE key = ?`), userID); err != nil {
				return unavailable(err)
			}
		}
		return audit.insert(tx, auditEntry{kind: policy.AuditUsage, subject: userID, action: policy.AuditForgotten})
	})
}
