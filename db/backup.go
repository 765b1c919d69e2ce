package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Backup writes a copy of the SQLite database at path to dest while other
// connections and processes, a running service among them, go on writing.
// The copy is one snapshot: every transaction committed before the copy
// began is in it whole, and none that committed later, so a service started
// on it has every request, call, tier, user record and audit entry that an
// answer had promised by then. The copy is SQLite's VACUUM INTO, which reads
// the database in one read transaction and so never blocks the writer in
// WAL mode; it is compact and needs no -wal file beside it. dest must not
// exist: a backup never overwrites a file, an older backup included. It is
// created with mode 0600, like the database, in folders created with mode
// 0700 where they are missing, and synced before Backup returns. A PostgreSQL URL is refused: use pg_dump.
func Backup(ctx context.Context, path, dest string) error {
	if IsPostgres(path) {
		return fmt.Errorf("%s is a PostgreSQL database: use pg_dump to back it up", Redact(path))
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("database %s does not exist", path)
	case err != nil:
		return err
	case st.IsDir():
		return fmt.Errorf("database path %s is a directory", path)
	}
	// A daily job names a dated file in a folder of backups, which the
	// first run finds missing. Only the owner may read the copies.
	if err := os.MkdirAll(filepath.Dir(dest), 0o700); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	// Reserve dest before anything is read: O_EXCL fails when it exists,
	// also when another backup takes the name at the same moment. VACUUM
	// INTO then fills the empty file.
	f, err := os.OpenFile(dest, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s exists: a backup never overwrites a file; choose a new name", dest)
	} else if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	f.Close()
	if err := vacuumInto(ctx, path, dest); err != nil {
		os.Remove(dest) // an empty or partial copy must not pass for a backup
		return err
	}
	return syncFile(dest)
}

func vacuumInto(ctx context.Context, path, dest string) error {
	// Not through Open: a backup reads the database as it is, without
	// migrating it, and starts no writer.
	sdb, err := sql.Open("sqlite", path+"?_busy_timeout=5000")
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer sdb.Close()
	var version int64
	if err := sdb.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE name = 'goose_db_version'`).Scan(&version); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if version == 0 {
		return fmt.Errorf("%s is not a policyguard database", path)
	}
	if _, err := sdb.ExecContext(ctx, `VACUUM INTO ?`, dest); err != nil {
		return fmt.Errorf("backup of %s: %w", path, err)
	}
	return nil
}

// syncFile makes the copy and its directory entry durable.
func syncFile(path string) error {
	for _, p := range []string{path, filepath.Dir(path)} {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("sync %s: %w", p, err)
		}
	}
	return nil
}
