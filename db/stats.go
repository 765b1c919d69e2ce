package db

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/policyguard/policyguard/policy"
)

var (
	_ policy.CheckCounter = (*Store)(nil)
	_ policy.StatsStore   = (*Store)(nil)
)

// countKey is one row of check_counts.
type countKey struct {
	minute       int64 // unix seconds / 60
	tier, reason string
}

// checkCounts accumulates the counts of checks in memory until the writer's
// next commit stores them (see flush), so that counting a check costs a map
// update and no write of its own. It is safe for concurrent use.
type checkCounts struct {
	// flushed is when the writer last stored counts; only its goroutine
	// touches it.
	flushed time.Time

	mu      sync.Mutex
	pending map[countKey]int64
	spare   map[countKey]int64 // the map flushed last, emptied, for reuse
}

func newCheckCounts() *checkCounts {
	return &checkCounts{pending: make(map[countKey]int64), spare: make(map[countKey]int64)}
}

// CountCheck implements policy.CheckCounter. The count is stored by the
// writer's first commit a second or more after the last that stored counts,
// or by the flush each second when nothing else is written, and by Close: a
// crash loses the counts of about the last second.
func (s *Store) CountCheck(at time.Time, user, tier, reason string) {
	c := s.counts
	k := countKey{minute: at.Unix() / 60, tier: tier, reason: reason}
	c.mu.Lock()
	c.pending[k]++
	c.mu.Unlock()
}

// LastTier implements policy.StatsStore: one seek to the user's newest
// request, whose tier_id names the tier (NULL for rows from before tier
// ids were recorded).
func (s *Store) LastTier(ctx context.Context, user string) (string, bool, error) {
	var name sql.NullString
	err := s.db.QueryRowContext(ctx, s.d.bind(`SELECT (SELECT name FROM tier_ids WHERE id = r.tier_id)
		FROM requests r WHERE r.user_id = ? ORDER BY r.ts DESC, r.seq DESC LIMIT 1`), user).Scan(&name)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, unavailable(err)
	}
	return name.String, name.Valid, nil
}

// countsFlushInterval is how often commits store counts: a commit that
// stores them writes, which a refused check's commit otherwise does not, so
// at most one commit a second pays for it.
const countsFlushInterval = time.Second

// take returns the pending counts, nil when there are none or when the last
// were taken less than countsFlushInterval ago (unless force), and starts a
// new set.
func (c *checkCounts) take(force bool) map[countKey]int64 {
	if c == nil {
		return nil
	}
	now := time.Now()
	if !force && now.Sub(c.flushed) < countsFlushInterval {
		return nil
	}
	c.flushed = now
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) == 0 {
		return nil
	}
	taken := c.pending
	c.pending, c.spare = c.spare, nil
	if c.pending == nil {
		c.pending = make(map[countKey]int64)
	}
	return taken
}

// settle ends a flush of taken: stored, the map is kept for reuse; not
// stored (the transaction rolled back), its counts are pending again.
func (c *checkCounts) settle(taken map[countKey]int64, stored bool) {
	if taken == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !stored {
		for k, n := range taken {
			c.pending[k] += n
		}
	}
	clear(taken)
	c.spare = taken
}

func (c *checkCounts) empty() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending) == 0
}

// countsPerStatement bounds the rows of one INSERT (4 parameters each).
const countsPerStatement = 200

// flushCounts adds taken to check_counts in tx: one row per key at most.
func flushCounts(tx *writeTx, taken map[countKey]int64) error {
	var sb strings.Builder
	args := make([]any, 0, 4*min(len(taken), countsPerStatement))
	exec := func() error {
		if len(args) == 0 {
			return nil
		}
		sb.Reset()
		sb.WriteString("INSERT INTO check_counts (minute, tier, reason, n) VALUES ")
		for i := 0; i < len(args)/4; i++ {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString("(?,?,?,?)")
		}
		sb.WriteString(" ON CONFLICT (minute, tier, reason) DO UPDATE SET n = check_counts.n + excluded.n")
		_, err := tx.conn.ExecContext(tx.ctx, tx.d.bind(sb.String()), args...)
		args = args[:0]
		return err
	}
	for k, n := range taken {
		args = append(args, k.minute, k.tier, k.reason, n)
		if len(args) == 4*countsPerStatement {
			if err := exec(); err != nil {
				return unavailable(err)
			}
		}
	}
	return unavailable(exec())
}

// flushCountsEvery makes sure counts reach the database within interval
// even when nothing else is written (refusals for a feature write nothing),
// until ctx ends.
func (s *Store) flushCountsEvery(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !s.counts.empty() {
			_ = s.FlushCounts(ctx) // a failure leaves them pending for the next try
		}
	}
}

// FlushCounts stores the pending counts of checks now. On SQLite they go
// with the writer's next commit. On PostgreSQL only this stores them, in
// a transaction of their own: the rows of a minute are the same for every
// check, and adding to them in each admission would make all admissions of
// every replica wait on the same row locks.
func (s *Store) FlushCounts(ctx context.Context) error {
	if !s.d.postgres {
		return s.writer.do(ctx, func(tx *writeTx) error {
			tx.w.counts.flushed = time.Time{} // this commit stores them
			return nil
		})
	}
	taken := s.counts.take(true)
	if taken == nil {
		return nil
	}
	err := s.writer.do(ctx, func(tx *writeTx) error { return flushCounts(tx, taken) })
	s.counts.settle(taken, err == nil)
	return err
}

// Stats implements policy.StatsStore. Check counts come from check_counts,
// settled tokens from the calls finished in each bucket.
func (s *Store) Stats(ctx context.Context, from, to time.Time, bucket time.Duration, tier string) ([]policy.StatsBucket, error) {
	secs := int64(bucket / time.Second)
	if secs < 60 || secs%60 != 0 {
		return nil, policy.Errorf(policy.EINVALID, "a bucket must be whole minutes")
	}
	perBucket := secs / 60
	fromMin, toMin := from.Unix()/60, (to.Unix()+59)/60
	rows, err := s.db.QueryContext(ctx, s.d.bind(`SELECT minute / ?1, tier, reason, CAST(SUM(n) AS BIGINT) FROM check_counts
		WHERE minute >= ?2 AND minute < ?3 AND (?4 = '' OR tier = ?4)
		GROUP BY minute / ?1, tier, reason`), perBucket, fromMin, toMin, tier)
	if err != nil {
		return nil, unavailable(err)
	}
	type key struct {
		tier string
		b    int64
	}
	byKey := make(map[key]*policy.StatsBucket)
	get := func(tier string, b int64) *policy.StatsBucket {
		k := key{tier, b}
		if sb, ok := byKey[k]; ok {
			return sb
		}
		sb := &policy.StatsBucket{Tier: tier, Start: time.Unix(b*secs, 0).UTC()}
		byKey[k] = sb
		return sb
	}
	for rows.Next() {
		var (
			b            int64
			tierName, re string
			n            int64
		)
		if err := rows.Scan(&b, &tierName, &re, &n); err != nil {
			rows.Close()
			return nil, unavailable(err)
		}
		sb := get(tierName, b)
		switch {
		case re == policy.CountAdmitted:
			sb.Admitted += n
		case strings.HasPrefix(re, policy.CountShadowPrefix):
			if sb.Shadow == nil {
				sb.Shadow = make(map[string]int64)
			}
			sb.Shadow[strings.TrimPrefix(re, policy.CountShadowPrefix)] += n
		default:
			if sb.RefusedBy == nil {
				sb.RefusedBy = make(map[string]int64)
			}
			sb.Refused += n
			sb.RefusedBy[re] += n
		}
	}
	if err := rows.Close(); err != nil {
		return nil, unavailable(err)
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable(err)
	}
	// Tokens and spend settled: the calls finished in each bucket (the
	// tokens and the cost they count, including an excess reported after
	// they expired; an unpriced call's cost is NULL, which SUM skips). A
	// member's call is also open in its account's pool, and counts once.
	// calls_finished_tier covers every column read.
	rows, err = s.db.QueryContext(ctx, s.d.bind(`SELECT (finished_at / 1000000) / ?1, tier, CAST(SUM(tokens) AS BIGINT), CAST(SUM(cost) AS BIGINT) FROM calls
		WHERE finished_at >= ?2 AND finished_at < ?3 AND (?4 = '' OR tier = ?4) AND (user_id < ?5 OR user_id >= ?6)
		GROUP BY (finished_at / 1000000) / ?1, tier`), secs, fromMin*60_000_000, toMin*60_000_000, tier, poolKeysFrom, poolKeysTo)
	if err != nil {
		return nil, unavailable(err)
	}
	for rows.Next() {
		var (
			b            int64
			tierName     string
			tokens, cost sql.NullInt64
		)
		if err := rows.Scan(&b, &tierName, &tokens, &cost); err != nil {
			rows.Close()
			return nil, unavailable(err)
		}
		if tokens.Int64 > 0 || cost.Int64 > 0 {
			sb := get(tierName, b)
			sb.TokensSettled += tokens.Int64
			sb.CostSettled += policy.Money(cost.Int64)
		}
	}
	if err := rows.Close(); err != nil {
		return nil, unavailable(err)
	}
	out := make([]policy.StatsBucket, 0, len(byKey))
	for _, sb := range byKey {
		out = append(out, *sb)
	}
	sortBuckets(out)
	return out, nil
}

func sortBuckets(bs []policy.StatsBucket) {
	// Few hundred at most: insertion order by (tier, start).
	for i := 1; i < len(bs); i++ {
		for j := i; j > 0 && (bs[j].Tier < bs[j-1].Tier || bs[j].Tier == bs[j-1].Tier && bs[j].Start.Before(bs[j-1].Start)); j-- {
			bs[j], bs[j-1] = bs[j-1], bs[j]
		}
	}
}

// poolKeysFrom and poolKeysTo bound the keys of accounts' pools
// (policy.AccountKey) in key order, which the tables sort bytewise: a key
// k is a pool's when poolKeysFrom <= k < poolKeysTo. Pools keep copies of
// their members' requests and calls, which figures about users or calls
// leave out.
var (
	poolKeysFrom = policy.AccountKeyPrefix
	poolKeysTo   = policy.AccountKeyPrefix[:len(policy.AccountKeyPrefix)-1] + string(policy.AccountKeyPrefix[len(policy.AccountKeyPrefix)-1]+1)
)

// topUsersQuery visits each user once by seeking past the previous one in
// the key (a skip scan), and counts a user's requests after each of two
// cutoffs as a difference of seqs: four seeks per user, whatever their rows
// hold, for both lists at once. (Reading the last seq on the way, by a
// descending skip scan, measured slower: the string work costs more than
// the seek it saves.)
const topUsersQuery = `WITH RECURSIVE u(id) AS (
	SELECT (SELECT user_id FROM requests ORDER BY user_id LIMIT 1)
	UNION ALL
	SELECT (SELECT user_id FROM requests WHERE user_id > u.id ORDER BY user_id LIMIT 1) FROM u WHERE u.id IS NOT NULL
)
SELECT id, last, coalesce(first1, last + 1), coalesce(first2, last + 1) FROM (
	SELECT id,
		(SELECT seq FROM requests WHERE user_id = u.id AND ts > ?1 ORDER BY ts, seq LIMIT 1) AS first1,
		(SELECT seq FROM requests WHERE user_id = u.id AND ts > ?2 ORDER BY ts, seq LIMIT 1) AS first2,
		(SELECT seq FROM requests WHERE user_id = u.id ORDER BY ts DESC, seq DESC LIMIT 1) AS last
	FROM u WHERE id IS NOT NULL
) t WHERE first1 IS NOT NULL OR first2 IS NOT NULL`

// TopUsers implements policy.StatsStore.
func (s *Store) TopUsers(ctx context.Context, from []time.Time, n int) ([][]policy.UserRequests, error) {
	if len(from) == 0 || len(from) > 2 {
		return nil, policy.Errorf(policy.EINVALID, "one or two cutoffs")
	}
	cut2 := from[len(from)-1]
	rows, err := s.db.QueryContext(ctx, s.d.bind(topUsersQuery), from[0].UnixMicro(), cut2.UnixMicro())
	if err != nil {
		return nil, unavailable(err)
	}
	defer rows.Close()
	lists := make([]topList, len(from))
	for rows.Next() {
		var (
			user                 string
			last, first1, first2 int64
		)
		if err := rows.Scan(&user, &last, &first1, &first2); err != nil {
			return nil, unavailable(err)
		}
		if policy.IsAccountKey(user) {
			continue // an account's pool, whose requests its members made
		}
		for i, first := range []int64{first1, first2}[:len(from)] {
			if c := last - first + 1; c > 0 {
				lists[i].add(policy.UserRequests{UserID: user, Requests: c}, n)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable(err)
	}
	out := make([][]policy.UserRequests, len(from))
	for i := range lists {
		out[i] = lists[i].sorted()
	}
	return out, nil
}

// topList keeps the n users with the most requests seen so far.
type topList struct{ users []policy.UserRequests }

func (l *topList) add(u policy.UserRequests, n int) {
	if n <= 0 {
		return
	}
	if len(l.users) < n {
		l.users = append(l.users, u)
		return
	}
	// Replace the least, when u beats it: n is small.
	least := 0
	for i, v := range l.users {
		if less(v, l.users[least]) {
			least = i
		}
	}
	if less(l.users[least], u) {
		l.users[least] = u
	}
}

// less reports whether a ranks below b: fewer requests, or as many and a
// later name.
func less(a, b policy.UserRequests) bool {
	return a.Requests < b.Requests || a.Requests == b.Requests && a.UserID > b.UserID
}

func (l *topList) sorted() []policy.UserRequests {
	out := l.users
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && less(out[j-1], out[j]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	if out == nil {
		out = []policy.UserRequests{}
	}
	return out
}

// UserRequests implements policy.StatsStore.
func (s *Store) UserRequests(ctx context.Context, user string, from, to time.Time, bucket time.Duration) ([]int64, error) {
	if bucket <= 0 || !to.After(from) {
		return nil, policy.Errorf(policy.EINVALID, "an empty period")
	}
	size := bucket.Microseconds()
	n := int((to.Sub(from) + bucket - 1) / bucket)
	out := make([]int64, n)
	rows, err := s.db.QueryContext(ctx, s.d.bind(`SELECT (ts - ?2) / ?4, COUNT(*) FROM requests
		WHERE user_id = ?1 AND ts >= ?2 AND ts < ?3 GROUP BY (ts - ?2) / ?4`),
		user, from.UnixMicro(), to.UnixMicro(), size)
	if err != nil {
		return nil, unavailable(err)
	}
	defer rows.Close()
	for rows.Next() {
		var i, c int64
		if err := rows.Scan(&i, &c); err != nil {
			return nil, unavailable(err)
		}
		if i >= 0 && i < int64(n) {
			out[i] = c
		}
	}
	return out, unavailable(rows.Err())
}

// CallsInFlight implements policy.StatsStore: calls open and not yet
// expired at now, a member's counted once (not again in its pool).
func (s *Store) CallsInFlight(ctx context.Context, now time.Time) (map[string]int64, error) {
	rows, err := s.db.QueryContext(ctx, s.d.bind(`SELECT tier, COUNT(*) FROM calls
		WHERE finished_at IS NULL AND expires_at > ? AND (user_id < ? OR user_id >= ?) GROUP BY tier`),
		now.UnixMicro(), poolKeysFrom, poolKeysTo)
	if err != nil {
		return nil, unavailable(err)
	}
	defer rows.Close()
	out := make(map[string]int64)
	for rows.Next() {
		var tier string
		var n int64
		if err := rows.Scan(&tier, &n); err != nil {
			return nil, unavailable(err)
		}
		out[tier] = n
	}
	return out, unavailable(rows.Err())
}

// pruneCounts deletes the counts of minutes before cutoff, pruneBatch rows
// at a time, and returns how many it deleted.
func (s *Store) pruneCounts(ctx context.Context, cutoff time.Time) (int64, error) {
	var total int64
	for {
		var n int64
		err := s.writer.do(ctx, func(tx *writeTx) error {
			res, err := tx.conn.ExecContext(tx.ctx, tx.d.bind(`DELETE FROM check_counts WHERE (minute, tier, reason) IN
				(SELECT minute, tier, reason FROM check_counts WHERE minute < ? LIMIT ?)`), cutoff.Unix()/60, pruneBatch)
			if err != nil {
				return unavailable(err)
			}
			n, _ = res.RowsAffected()
			return nil
		})
		total += n
		if err != nil || n < pruneBatch {
			return total, err
		}
	}
}
