package db

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/policyguard/policyguard/policy"
)

var _ policy.ReplayStore = (*Store)(nil)

// replayFrom ends the query (dialect.replay) that reads one tier's
// requests for a preview, one row per user holding the user's times,
// comma-separated: a row per request through database/sql costs more than
// the replay itself. With no index on tier_id
// it reads the table in key order, (user_id, ts, seq), which groups it by user
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
	// A pool's rows not yet merged into requests move there first (on
	// SQLite; see maxStaged): one commit of the writer's.
	if err := s.mergePool(ctx); err != nil {
		return err
	}
	pace := newPacer(time.Now())
	for {
		n, err := s.replayChunk(ctx, tierID, from, to, &after, &ts, &pace, fn)
		if err != nil || n < replayChunk {
			return err
		}
	}
}

// replayChunk replays the next replayChunk users after *after, sets *after
// to the last of them and returns how many there were.
func (s *Store) replayChunk(ctx context.Context, tierID int64, from, to time.Time, after *string, ts *[]int64,
	pace *pacer, fn func(userID string, at int64) error) (int, error) {
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
		if d := pace.rest(time.Now(), len(*ts)); d > 0 {
			time.Sleep(d)
			pace.rested(time.Now())
		}
	}
	return n, unavailable(rows.Err())
}

// parseTimes appends the comma-separated integers of b, as group_concat
// writes them, to ts. It reads the digits itself: against
// strconv.ParseInt on each field, BenchmarkPreview took 3 to 6% less CPU
// (0.88 to 0.91 s against 0.94 s, 3 alternating runs).
func parseTimes(ts []int64, b []byte) ([]int64, error) {
	if len(b) == 0 {
		return ts, nil
	}
	var n int64
	digits := 0
	for i := 0; i <= len(b); i++ {
		if i == len(b) || b[i] == ',' {
			if digits == 0 {
				return ts, fmt.Errorf("requests.ts of a preview: empty field in %.40q", b)
			}
			ts = append(ts, n)
			n, digits = 0, 0
			continue
		}
		// 18 digits at most: no time in microseconds has more, and no
		// 18-digit number overflows an int64.
		d := b[i] - '0'
		if d > 9 || digits == 18 {
			return ts, fmt.Errorf("requests.ts of a preview: %.40q is not a list of times", b)
		}
		n = n*10 + int64(d)
		digits++
	}
	return ts, nil
}

// pacer spreads a preview's work over time, so that checks running beside
// it keep most of the processor. On two cores a preview running flat out
// took half of them, and the p99 of checks beside it grew 3 to 9 times;
// any busy goroutine does the same (a loop of additions in its place did,
// in BenchmarkCheckDuringPreview): the cost is the processor, not SQLite.
// The pacer makes a preview work in turns of about a millisecond and rest
// after each turn as long as it worked, and longer when it is ahead of
// previewRate. BenchmarkCheckDuringPreview measured the p99 of checks
// against the rate: 300,000 requests a second 1.3x the p99 without a
// preview, 450,000 1.5x, 600,000 2.3 to 2.7x, with a preview then
// taking 3.3, 2.2 and 1.7 s for a million requests.
type pacer struct {
	start time.Time // when the preview began
	since time.Time // when its current turn of work began
	rows  int       // how many requests it replayed
}

// previewRate is the most requests a second a preview replays, so that a
// preview over a million stored requests ends within 2 s (1.92 s at this
// rate) while taking as little of the processor as that allows.
const previewRate = 520_000

// pacerTurn is how long a preview works before it rests: time.Sleep is
// not precise below about a millisecond.
const pacerTurn = time.Millisecond

func newPacer(now time.Time) pacer { return pacer{start: now, since: now} }

// rest records that rows more requests were replayed by now and returns
// how long the preview rests before it goes on: 0 within a turn of work.
func (p *pacer) rest(now time.Time, rows int) time.Duration {
	p.rows += rows
	worked := now.Sub(p.since)
	if worked < pacerTurn {
		return 0
	}
	due := p.start.Add(time.Duration(int64(p.rows) * int64(time.Second) / previewRate))
	return max(worked, due.Sub(now))
}

// rested starts the next turn of work at now.
func (p *pacer) rested(now time.Time) { p.since = now }
