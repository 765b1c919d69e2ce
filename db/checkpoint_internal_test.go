package db

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
)

// TestWriterCheckpointsLess checks that the writer lets the WAL grow past
// SQLite's default of 1,000 frames before it checkpoints (see
// checkpoint.go).
func TestWriterCheckpointsLess(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "c.db"), WithSynchronous(SyncNormal))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const commits = 1200 // each writes a frame or more
	for i := range commits {
		if err := s.writer.do(ctx, func(tx *writeTx) error {
			_, err := tx.execSQL(`INSERT INTO requests (user_id, ts, seq) VALUES (?, ?, 1)`, fmt.Sprintf("user-%04d", i), i+1)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	// A checkpoint of our own reports how long the WAL has grown.
	var busy, frames, copied int64
	if err := s.db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &copied); err != nil {
		t.Fatal(err)
	}
	if frames < commits || frames > walRestartFrames {
		t.Errorf("the WAL holds %d frames after %d commits; want at least %d and at most %d", frames, commits, commits, walRestartFrames)
	}
}
