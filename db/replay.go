package db

import (
	"context"
	"database/sql"
	"time"

	"github.com/policyguard/policyguard/policy"
)

var _ policy.ReplayStore = (*Store)(nil)

// replayQuery reads one tier's requests for a preview. With no index on
// tier_id it reads the table in key order, (user_id, ts): already grouped
// by user in time order, so there is nothing to sort, and each row is read
// once. Its cost grows with the table, not with any window.
const replayQuery = `SELECT user_id, ts FROM requests
	WHERE tier_id = ? AND ts > ? AND ts <= ? ORDER BY user_id, ts`

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
		raw  sql.RawBytes
		ts   int64
		user string
	)
	for rows.Next() {
		if err := rows.Scan(&raw, &ts); err != nil {
			return unavailable(err)
		}
		if string(raw) != user { // a new string only once per user
			user = string(raw)
		}
		if err := fn(user, ts); err != nil {
			return err
		}
	}
	return unavailable(rows.Err())
}
