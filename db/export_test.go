package db

import "context"

// PlanCounts returns how many planned admissions of s a batch decided,
// how many were left to decide alone, and how many of those admit_batch
// and their decide decided differently (see pgWriter): all 0 on SQLite,
// which decides them only in Go.
func PlanCounts(s *Store) (batched, alone, disagreements int64) {
	if w, ok := s.writer.(*pgWriter); ok {
		return w.batched.Load(), w.alone.Load(), w.disagreements.Load()
	}
	return 0, 0, 0
}

// MergePoolsEvery has s's writer merge pool_recent into requests once it
// holds n rows or more (see maxStaged), on SQLite.
func MergePoolsEvery(s *Store, n int) error {
	if _, ok := s.writer.(*writer); !ok {
		return nil
	}
	return s.writer.do(context.Background(), func(tx *writeTx) error {
		tx.w.maxStaged = n
		return nil
	})
}
