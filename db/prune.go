package db

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// pruneBatch bounds the rows one prune step deletes and the users it visits,
// so a step holds the write lock about as long as a batch of checks does.
const pruneBatch = 1000

// Prune deletes every request recorded at or before cutoff, and the calls
// finished and the finished tokens counted at or before it (first settling
// the calls expired by then), and returns how many rows it deleted. It works in small steps, each its own transaction shared
// with whatever checks are queued, so checks never wait behind it for long.
//
// On PostgreSQL one replica at a time cleans up: while another holds the
// cleanup's lock, Prune deletes nothing and returns 0. Settling expired
// calls takes the lock of each user it visits, as admissions do.
func (s *Store) Prune(ctx context.Context, cutoff time.Time) (int64, error) {
	ok, release, err := s.pruneLock(ctx)
	if !ok {
		return 0, err
	}
	defer release()
	// A pool's rows not yet merged into requests move there first (on
	// SQLite), to be pruned with the rest.
	if err := s.mergePool(ctx); err != nil {
		return 0, err
	}
	var total int64
	// Requests, then the calls expired by cutoff (settled, user by user),
	// the calls finished by then (in finishing order), and the finished
	// tokens, each step resuming where the one before it stopped.
	def := s.billing
	for _, step := range [...]func(*writeTx, string, int64) (int64, string, bool, error){
		func(tx *writeTx, cursor string, cutoff int64) (int64, string, bool, error) {
			return pruneStep(tx, cursor, cutoff, def)
		},
		pruneSettleStep, pruneCallsStep,
		func(tx *writeTx, cursor string, cutoff int64) (int64, string, bool, error) {
			return pruneTokensStep(tx, cursor, cutoff, def)
		},
	} {
		for cursor, done := "", false; !done; {
			if err := ctx.Err(); err != nil {
				return total, err
			}
			var deleted int64
			var next string
			err := s.writer.do(ctx, func(tx *writeTx) error {
				var err error
				deleted, next, done, err = step(tx, cursor, cutoff.UnixMicro())
				return err
			})
			if err != nil {
				return total, err
			}
			total += deleted
			cursor = next
		}
	}
	// Then the runs, kept policy.RunKeepFor after their last request
	// (cutoff is policy.KeepFor before now), the counts of checks, kept
	// longer than requests, and the sessions that expired.
	now := cutoff.Add(policy.KeepFor)
	for done := false; !done; {
		var deleted int64
		err := s.writer.do(ctx, func(tx *writeTx) error {
			var err error
			deleted, _, done, err = pruneRunsStep(tx, "", now.Add(-policy.RunKeepFor).UnixMicro())
			return err
		})
		if err != nil {
			return total, err
		}
		total += deleted
	}
	n, err := s.pruneCounts(ctx, now.Add(-policy.StatsKeepFor))
	total += n
	if err != nil {
		return total, err
	}
	n, err = s.pruneSessions(ctx, now)
	total += n
	if err != nil {
		return total, err
	}
	n, err = s.prunePeriods(ctx, now)
	return total + n, err
}

// pruneStep visits users after cursor in key order, deleting their rows at
// or before cutoff, until it has deleted or visited pruneBatch. It returns
// the cursor to resume from and whether every user has been visited. The
// rows deleted are first rolled up into their billing periods (def is the
// cycle of keys that set none), under the user's lock: see periods.go.
func pruneStep(tx *writeTx, cursor string, cutoff int64, def policy.BillingCycle) (deleted int64, next string, done bool, err error) {
	for visited := 0; visited < pruneBatch && deleted < pruneBatch; visited++ {
		var user string
		err := tx.queryRow(qNextUser, cursor).Scan(&user)
		if errors.Is(err, sql.ErrNoRows) {
			return deleted, cursor, true, nil
		}
		if err != nil {
			return 0, "", false, unavailable(err)
		}
		// As pruneSettleStep: wait for the first user's lock only.
		if ok, err := lockForPrune(tx, user, visited); err != nil || !ok {
			return deleted, cursor, false, err
		}
		// Delete at most what is left of the budget: the oldest rows up to
		// the budget-th old one, or all old rows if there are fewer.
		bound := cutoff
		var nth int64
		err = tx.queryRow(qPruneBound, user, cutoff, pruneBatch-deleted-1).Scan(&nth)
		partial := err == nil
		switch {
		case partial:
			bound = nth
		case !errors.Is(err, sql.ErrNoRows):
			return 0, "", false, unavailable(err)
		}
		if err := tx.rollUp(requestsRollup, user, bound, def); err != nil {
			return 0, "", false, err
		}
		res, err := tx.exec(qPruneDelete, user, bound)
		if err != nil {
			return 0, "", false, unavailable(err)
		}
		n, _ := res.RowsAffected()
		deleted += n
		if n > 0 {
			tx.forgetUser(user) // its cached rows may be among those deleted
		}
		if partial {
			// The user may have more old rows: resume at the same user.
			return deleted, cursor, false, nil
		}
		cursor = user
	}
	return deleted, cursor, false, nil
}

// lockForPrune takes user's lock for a step of the cleanup, on
// PostgreSQL: waiting for the first user of the step (visited 0), only
// trying the others, so a step never waits holding a lock; ok is false
// when the lock is held elsewhere, and the step ends there.
func lockForPrune(tx *writeTx, user string, visited int) (ok bool, err error) {
	if visited == 0 {
		return true, tx.lockUser(user)
	}
	return tx.tryLockUser(user)
}

// PruneEvery calls Prune every interval with the cutoff retention before
// now(), until ctx ends. Failures are logged and retried at the next tick.
// observe, when not nil, is told what each run deleted and how it failed
// (metrics count it; db stays free of them).
func (s *Store) PruneEvery(ctx context.Context, interval, retention time.Duration, now func() time.Time, log *slog.Logger, observe func(deleted int64, err error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		n, err := s.Prune(ctx, now().Add(-retention))
		if observe != nil {
			observe(n, err)
		}
		switch {
		case err != nil && ctx.Err() == nil:
			log.Error("cleanup failed", "deleted", n, "err", err)
		case n > 0:
			log.Info("cleanup", "deleted", n, "took", time.Since(start).Round(time.Millisecond))
		}
	}
}
