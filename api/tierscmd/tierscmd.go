// Package tierscmd is the "policyguard tiers" command: tier limits kept in
// a file, in a repository, applied from a pipeline. "tiers export" writes a
// database's tiers as a tiers file; "tiers import" checks a whole file and
// applies it in one transaction.
package tierscmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/api/config"
	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

const tiersUsage = `usage:
  policyguard tiers export [-db FILE|URL]
      writes every tier and user record as a tiers file (JSON) to stdout
  policyguard tiers import [-db FILE|URL] [-default-tier NAME] [-prune] TIERS.json
      checks the whole file, then creates and updates its tiers and user
      records in one transaction and reports each change; with -prune it
      also deletes the tiers the file does not list (never the default
      tier, nor one a user record assigns); no record is ever deleted

A running service on the same database applies an import on its next check.
-db defaults to GUARDRAIL_DB or guardrail.db, -default-tier to
GUARDRAIL_DEFAULT_TIER or free.`

// Run runs "policyguard tiers export|import" with args, the arguments that
// follow "tiers", reading the environment through getenv: -db and
// -default-tier default to what the service would use (see config.DBPath
// and config.DefaultTier).
func Run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, tiersUsage)
		return errors.New("tiers: name a command: export or import")
	}
	cmd := args[0]
	fs := flag.NewFlagSet("policyguard tiers "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, tiersUsage) }
	dbPath := fs.String("db", "", config.DBUsage)
	var defaultTier *string
	var prune *bool
	switch cmd {
	case "export":
	case "import":
		defaultTier = fs.String("default-tier", config.DefaultTier(getenv), "the service's default tier, which -prune keeps (GUARDRAIL_DEFAULT_TIER)")
		prune = fs.Bool("prune", false, "delete the tiers the file does not list")
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, tiersUsage)
		return nil
	default:
		fmt.Fprintln(stderr, tiersUsage)
		return fmt.Errorf("tiers: unknown command %q: want export or import", cmd)
	}
	files, err := parseInterspersed(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if *dbPath == "" {
		*dbPath = config.DBPath(getenv)
	}

	if cmd == "export" {
		if len(files) > 0 {
			return fmt.Errorf("tiers export: unexpected argument %q: the tiers go to stdout", files[0])
		}
		// Exporting from a mistyped path must not create an empty
		// database and export its seeded tiers as if they were real. (A
		// mistyped PostgreSQL database fails to connect.)
		if _, err := os.Stat(*dbPath); err != nil && !db.IsPostgres(*dbPath) {
			return fmt.Errorf("tiers export: %w", err)
		}
		store, err := db.Open(ctx, *dbPath)
		if err != nil {
			return err
		}
		defer store.Close()
		tiers, err := store.Tiers(ctx)
		if err != nil {
			return err
		}
		var users []policy.UserRecord
		for after := ""; ; {
			page, err := store.Users(ctx, after, 1000)
			if err != nil {
				return err
			}
			users = append(users, page...)
			if len(page) < 1000 {
				break
			}
			after = page[len(page)-1].UserID
		}
		if err := api.WriteTiersFile(stdout, tiers, users...); err != nil {
			return err
		}
		return store.Close()
	}

	if len(files) != 1 {
		fmt.Fprintln(stderr, tiersUsage)
		return errors.New("tiers import: name exactly one tiers file (- reads stdin)")
	}
	tiers, users, err := readTiersFile(files[0])
	if err != nil {
		return err
	}
	store, err := db.Open(ctx, *dbPath)
	if err != nil {
		return err
	}
	defer store.Close()
	svc := policy.NewService(store, store, policy.WithDefaultTier(*defaultTier), policy.WithUsers(store))
	changes, userChanges, err := svc.Import(ctx, tiers, users, *prune)
	if err != nil {
		return fmt.Errorf("%s: nothing imported: %s", files[0], policy.ErrorMessage(err))
	}
	for _, c := range changes {
		fmt.Fprintln(stdout, api.DescribeTierChange(c))
	}
	for _, c := range userChanges {
		fmt.Fprintln(stdout, api.DescribeUserChange(c))
	}
	switch n := len(changes) + len(userChanges); n {
	case 0:
		fmt.Fprintf(stdout, "no changes: %s already has the tiers of %s\n", *dbPath, files[0])
	case 1:
		fmt.Fprintf(stdout, "1 change imported into %s\n", *dbPath)
	default:
		fmt.Fprintf(stdout, "%d changes imported into %s\n", n, *dbPath)
	}
	return store.Close()
}

// readTiersFile reads and checks the tiers file at path, or stdin for "-".
func readTiersFile(path string) ([]policy.Tier, []policy.UserRecord, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, nil, err
		}
		defer f.Close()
		r = f
	}
	tiers, users, err := api.ReadTiersFileWithUsers(r)
	if err != nil {
		msg := " " + policy.ErrorMessage(err)
		if strings.Contains(msg, "\n") { // one problem a line, indented
			msg = strings.ReplaceAll("\n"+msg[1:], "\n", "\n  ")
		}
		return nil, nil, fmt.Errorf("%s: nothing imported:%s", path, msg)
	}
	return tiers, users, nil
}

// parseInterspersed parses flags wherever they stand among the arguments,
// so that "import tiers.json -prune" works as well as "import -prune
// tiers.json", and returns the other arguments in order. "--" ends the
// flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
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
