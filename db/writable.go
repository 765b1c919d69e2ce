package db

import "context"

// Writable returns nil when the database accepts writes. A database that
// opens but cannot be written, such as a read-only file in a writable
// directory, would otherwise answer reads and refuse every check; a service
// calls this at start-up to stop there instead. It runs a statement that
// needs write access and changes nothing.
func (s *Store) Writable(ctx context.Context) error {
	return s.writer.do(ctx, func(tx *writeTx) error {
		_, err := tx.execSQL(`DELETE FROM requests WHERE 1 = 0`)
		return unavailable(err)
	})
}
