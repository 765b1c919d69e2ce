package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// BackupUsage is the backup command's usage message.
const BackupUsage = `usage:
  policyguard backup [-db FILE] BACKUP.db
      writes a consistent copy of the SQLite database to BACKUP.db, which
      must not exist, while a service may go on using the database: every
      request, call, tier, user record and audit entry it held when the
      copy began. Missing folders of BACKUP.db are created (mode 0700).
      -db defaults to GUARDRAIL_DB or guardrail.db. A service started on
      the copy has them all. On PostgreSQL, use pg_dump.`

// BackupEnv is what the backup command takes from the service's settings
// and its store.
type BackupEnv struct {
	DB string // -db's default
	// Backup writes the copy of the database at path to dest.
	Backup func(ctx context.Context, path, dest string) error
	// Redact returns path as it may be shown: without a password.
	Redact func(path string) string
}

// Backup runs "policyguard backup" with args, the arguments that follow
// "backup".
func Backup(ctx context.Context, args []string, env BackupEnv, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("policyguard backup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, BackupUsage) }
	// -db's default is filled in after parsing: a usage message would
	// print a database URL's password.
	dbPath := fs.String("db", "", "the database: a SQLite file or a PostgreSQL URL")
	files, err := ParseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if len(files) != 1 {
		fmt.Fprintln(stderr, BackupUsage)
		return errors.New("backup: name one file to write the copy to")
	}
	if *dbPath == "" {
		*dbPath = env.DB
	}
	if err := env.Backup(ctx, *dbPath, files[0]); err != nil {
		return err
	}
	st, err := os.Stat(files[0])
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "backed up %s to %s (%d bytes)\n", env.Redact(*dbPath), files[0], st.Size())
	return nil
}
