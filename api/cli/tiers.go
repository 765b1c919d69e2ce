package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/policy"
)

// The "policyguard tiers" command: tier limits kept in a file, in a
// repository, applied from a pipeline. "tiers export" writes a database's
// tiers as a tiers file; "tiers import" checks a whole file and applies it
// in one transaction.

// TiersUsage is the tiers command's usage message.
const TiersUsage = `usage:
  policyguard tiers export [-db FILE|URL]
      writes every tier, account and user record as a tiers file (JSON)
      to stdout
  policyguard tiers import [-db FILE|URL] [-default-tier NAME] [-prune] TIERS.json
      checks the whole file, then creates and updates its tiers, accounts
      and user records in one transaction and reports each change; with
      -prune it also deletes the tiers the file does not list (never the
      default tier, nor one a user record assigns or an account has as its
      plan); no account or record is ever deleted

A running service on the same database applies an import on its next check.
-db defaults to GUARDRAIL_DB or guardrail.db, -default-tier to
GUARDRAIL_DEFAULT_TIER or free.`

// An Opener opens the database at dbPath for a command and returns the
// service on it, with defaultTier as its default tier, and a function that
// closes the database. With existing, a SQLite file that does not exist is
// an error rather than a new database: an export from a mistyped path must
// not create an empty database and export its seeded tiers as if they were
// real.
type Opener func(ctx context.Context, dbPath, defaultTier string, existing bool) (svc *policy.Service, close func() error, err error)

// TiersEnv is what the tiers command takes from the service's settings.
type TiersEnv struct {
	DB          string // -db's default
	DefaultTier string // -default-tier's default
	Open        Opener
}

// Tiers runs "policyguard tiers export|import" with args, the arguments
// that follow "tiers".
func Tiers(ctx context.Context, args []string, env TiersEnv, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, TiersUsage)
		return errors.New("tiers: name a command: export or import")
	}
	cmd := args[0]
	fs := flag.NewFlagSet("policyguard tiers "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, TiersUsage) }
	// -db's default is filled in after parsing: a usage message would
	// print a database URL's password.
	dbPath := fs.String("db", "", "the database: a SQLite file or a PostgreSQL URL")
	var defaultTier *string
	var prune *bool
	switch cmd {
	case "export":
	case "import":
		defaultTier = fs.String("default-tier", env.DefaultTier, "the service's default tier, which -prune keeps (GUARDRAIL_DEFAULT_TIER)")
		prune = fs.Bool("prune", false, "delete the tiers the file does not list")
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, TiersUsage)
		return nil
	default:
		fmt.Fprintln(stderr, TiersUsage)
		return fmt.Errorf("tiers: unknown command %q: want export or import", cmd)
	}
	files, err := ParseInterspersed(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if *dbPath == "" {
		*dbPath = env.DB
	}
	if cmd == "export" {
		if len(files) > 0 {
			return fmt.Errorf("tiers export: unexpected argument %q: the tiers go to stdout", files[0])
		}
		return exportTiers(ctx, env.Open, *dbPath, env.DefaultTier, stdout)
	}
	if len(files) != 1 {
		fmt.Fprintln(stderr, TiersUsage)
		return errors.New("tiers import: name exactly one tiers file (- reads stdin)")
	}
	return importTiers(ctx, env.Open, *dbPath, *defaultTier, files[0], *prune, stdout)
}

// exportTiers writes the tiers, accounts and user records of the database
// at dbPath to w as a tiers file.
func exportTiers(ctx context.Context, open Opener, dbPath, defaultTier string, w io.Writer) error {
	svc, closeDB, err := open(ctx, dbPath, defaultTier, true)
	if err != nil {
		return fmt.Errorf("tiers export: %w", err)
	}
	defer closeDB()
	var f api.TiersFile
	if f.Tiers, f.Accounts, f.Users, err = svc.Export(ctx); err != nil {
		return err
	}
	if err := f.Write(w); err != nil {
		return err
	}
	return closeDB()
}

// importTiers applies the tiers file at path (stdin for "-") to the
// database at dbPath and reports each change to w.
func importTiers(ctx context.Context, open Opener, dbPath, defaultTier, path string, prune bool, w io.Writer) error {
	f, err := readTiersFile(path)
	if err != nil {
		return err
	}
	svc, closeDB, err := open(ctx, dbPath, defaultTier, false)
	if err != nil {
		return err
	}
	defer closeDB()
	changes, err := svc.Import(policy.WithActor(ctx, ActorTiersImport), f.Tiers, f.Accounts, f.Users, prune)
	if err != nil {
		return fmt.Errorf("%s: nothing imported: %s", path, policy.ErrorMessage(err))
	}
	for _, c := range changes.Tiers {
		fmt.Fprintln(w, api.DescribeTierChange(c))
	}
	for _, c := range changes.Accounts {
		fmt.Fprintln(w, api.DescribeAccountChange(c))
	}
	for _, c := range changes.Users {
		fmt.Fprintln(w, api.DescribeUserChange(c))
	}
	switch n := changes.Len(); n {
	case 0:
		fmt.Fprintf(w, "no changes: %s already has the tiers of %s\n", dbPath, path)
	case 1:
		fmt.Fprintf(w, "1 change imported into %s\n", dbPath)
	default:
		fmt.Fprintf(w, "%d changes imported into %s\n", n, dbPath)
	}
	return closeDB()
}

// readTiersFile reads and checks the tiers file at path, or stdin for "-".
func readTiersFile(path string) (api.TiersFile, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return api.TiersFile{}, err
		}
		defer f.Close()
		r = f
	}
	f, err := api.ReadTiersFileAll(r)
	if err != nil {
		msg := " " + policy.ErrorMessage(err)
		if strings.Contains(msg, "\n") { // one problem a line, indented
			msg = strings.ReplaceAll("\n"+msg[1:], "\n", "\n  ")
		}
		return api.TiersFile{}, fmt.Errorf("%s: nothing imported:%s", path, msg)
	}
	return f, nil
}

// ParseInterspersed parses flags wherever they stand among the arguments,
// so that "import tiers.json -prune" works as well as "import -prune
// tiers.json", and returns the other arguments in order. "--" ends the
// flags.
func ParseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if n := len(args) - fs.NArg(); n > 0 && args[n-1] == "--" {
			return append(rest, fs.Args()...), nil
		}
		args = fs.Args()
		if len(args) == 0 {
			return rest, nil
		}
		rest = append(rest, args[0])
		args = args[1:]
	}
}
