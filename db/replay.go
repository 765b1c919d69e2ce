package db

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/policyguard/policyguard/policy"
)

var _ policy.ReplayStore = (*Store)(nil)

// replayQuery reads one tier's requests for a preview, one row per user
// holding the user's times, comma-separated: a row per request through
// database/sql costs more than the replay itself. With no index on tier_id
// it reads the table in key order, (user_id, ts), which groups it by user
// in time order already, and each row is read once. Its cost grows with
// the table, not with any window. group_concat keeps the order rows come
// in, which SQLite does not promise; ReplayRequests sorts a user's times
// should they ever come out of order, rather than asking SQLite to sort
// every group (ORDER BY inside group_concat, which doubles the cost).
const replayQuery = `SELECT user_id, group_concat(ts, ',') FROM requests
	WHERE tier_id = ? AND ts > ? AND ts <= ? GROUP BY user_id ORDER BY user_id`

// ReplayRequests implements policy.ReplayStore in one read transaction on
// the read pool: it never waits for the writer, and the writer never waits
// for it (WAL).
func (s *Store) ReplayRequests(ctx context.Context, tierID int64, from, to time.Time, fn func(userID string, at int64) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return unavailable(err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to lose
	rows, err := tx.QueryContext(ctx, replayQuery, tierID, from.UnixMicro(), to.UnixMicro())
	if err != nil {
		return unavailable(err)
	}
	defer rows.Close()
	var (
		user  string
		times sql.RawBytes
		ts    []int64
	)
	for rows.Next() {
		// A preview is a long loop of CPU work beside checks that hop
		// between goroutines several times each: giving up the processor
		// after each user keeps a check from waiting a whole time slice
		// for it, which is what a preview costs the checks' p99 otherwise.
		runtime.Gosched()
		if err := rows.Scan(&user, &times); err != nil {
			return unavailable(err)
		}
		if ts, err = parseTimes(ts[:0], times); err != nil {
			return err
		}
		if !slices.IsSorted(ts) {
			slices.Sort(ts)
		}
		for _, at := range ts {
			if err := fn(user, at); err != nil {
				return err
			}
		}
	}
	return unavailable(rows.Err())
}

// parseTimes appends the comma-separated integers of b to ts.
func parseTimes(ts []int64, b []byte) ([]int64, error) {
	for len(b) > 0 {
		field := b
		if i := bytes.IndexByte(b, ','); i >= 0 {
			field, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		n, err := strconv.ParseInt(string(field), 10, 64)
		if err != nil {
			return ts, fmt.Errorf("requests.ts of a preview: %w", err)
		}
		ts = append(ts, n)
	}
	return ts, nil
}
