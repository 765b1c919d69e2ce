package db

import (
	"context"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// CallsInFlight returns the calls of every user open at now: not finished
// and not yet expired. It counts rows of the calls_expiry index, so it
// costs a read of the open calls, not of the history: a metrics scrape may
// call it.
func (s *Store) CallsInFlight(ctx context.Context, now time.Time) (int64, error) {
	var n int64
	err := s.db.QueryRowContext(ctx,
		`SELECT count(*) FROM calls WHERE finished_at IS NULL AND expires_at > ?`,
		now.Truncate(policy.Resolution).UnixMicro()).Scan(&n)
	return n, unavailable(err)
}
