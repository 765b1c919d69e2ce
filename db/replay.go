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

// replayFrom ends the query (dialect.replay) that reads one tier's
// requests for a preview, one row per user holding the user's times,
// comma-separated: a row per request through database/sql costs more than
// the replay itself. With no index on tier_id
// it reads the table in key order, (user_id, ts), which groups it by user
// in time order already, and each row is read once. Its cost grows with
// the table, not with any window. group_concat keeps the order rows come
// in, which SQLite does not promise; ReplayRequests sorts a user's times
// should they ever come out of order, rather than asking SQLite to sort
// every group (ORDER BY inside group_concat, which doubles the cost).
// PostgreSQL's string_agg is asked to sort: it has no order of its own.
//
// It reads replayChunk users at a time, after the last one read, each
// chunk a read of its own: a single read transaction held for the whole
// preview would keep every checkpoint from passing the start of it, and
// the writer would then copy the whole backlog in one commit after it.
const replayFrom = `FROM requests
	WHERE user_id > ? AND tier_id = ? AND ts > ? AND ts <= ?
	GROUP BY user_id ORDER BY user_id LIMIT ?`

// replayChunk is how many users one read of a preview takes.
const replayChunk = 500

// ReplayRequests implements policy.ReplayStore on the read pool: it never
// waits for the writer, and the writer never waits for it (WAL). Each
// user's requests come from one consistent read.
func (s *Store) ReplayRequests(ctx context.Context, tierID int64, from, to time.Time, fn func(userID string, at int64) error) error {
	var (
		after string
		ts    []int64
	)
	for {
		n, err := s.replayChunk(ctx, tierID, from, to, &after, &ts, fn)
		if err != nil || n < replayChunk {
			return err
		}
	}
}

// replayChunk replays the next replayChunk users after *after, sets *after
// to the last of them and returns how many there were.
func (s *Store) replayChunk(ctx context.Context, tierID int64, from, to time.Time, after *string, ts *[]int64,
	fn func(userID string, at int64) error) (int, error) {
	pace := pacer{since: time.Now()}
	rows, err := s.db.QueryContext(ctx, s.d.replay, *after, tierID, from.UnixMicro(), to.UnixMicro(), replayChunk)
	if err != nil {
		return 0, unavailable(err)
	}
	defer rows.Close()
	var (
		n     int
		times sql.RawBytes
	)
	for rows.Next() {
		// A preview is a long loop of CPU work beside checks that hop
		// between goroutines several times each: giving up the processor
		// after each user keeps a check from waiting a whole time slice
		// for it.
		runtime.Gosched()
		pace.step()
		n++
		if err := rows.Scan(after, &times); err != nil {
			return n, unavailable(err)
		}
		if *ts, err = parseTimes((*ts)[:0], times); err != nil {
			return n, err
		}
		if !slices.IsSorted(*ts) {
			slices.Sort(*ts)
		}
		for _, at := range *ts {
			if err := fn(*after, at); err != nil {
				return n, err
			}
		}
	}
	return n, unavailable(rows.Err())
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

// pacer makes a preview rest as long as it worked, in turns of about a
// millisecond, so that it takes at most half of a processor. On two cores
// a preview running flat out costs checks beside it more than the 2x of
// p99 allowed, and any busy goroutine does the same (a loop of additions
// in its place did, in BenchmarkCheckDuringPreview): the cost is the
// processor, not SQLite. Resting halves what a preview takes from checks
// and doubles its own time, which stays within the 2 s of its target.
type pacer struct{ since time.Time }

func (p *pacer) step() {
	if worked := time.Since(p.since); worked >= time.Millisecond {
		time.Sleep(worked)
		p.since = time.Now()
	}
}
