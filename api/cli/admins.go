package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/policyguard/policyguard/policy"
)

// The actors the audit log names for the changes commands make.
const (
	ActorTiersImport  = "tiers import"
	ActorPricesImport = "prices import"
	ActorAdminsAdd    = "admins add"
)

// AdminsUsage is the admins command's usage message.
const AdminsUsage = `usage:
  policyguard admins add [-db FILE|URL] -role viewer|support|admin [-note TEXT] NAME
      makes a named admin and prints its token, which is shown this once:
      the first admin can so be made without the API. -db defaults to
      GUARDRAIL_DB or guardrail.db.`

// AdminsEnv is what the admins command takes from the service's settings.
type AdminsEnv struct {
	DB   string // -db's default
	Open Opener
}

// Admins runs "policyguard admins add" with args, the arguments that
// follow "admins".
func Admins(ctx context.Context, args []string, env AdminsEnv, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "add" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprintln(stdout, AdminsUsage)
			return nil
		}
		fmt.Fprintln(stderr, AdminsUsage)
		return errors.New("admins: name a command: add")
	}
	fs := flag.NewFlagSet("policyguard admins add", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, AdminsUsage) }
	// -db's default is filled in after parsing: a usage message would
	// print a database URL's password.
	dbPath := fs.String("db", "", "the database: a SQLite file or a PostgreSQL URL")
	roleName := fs.String("role", "", "the admin's role: viewer, support or admin")
	note := fs.String("note", "", "a note on who or what the admin is")
	names, err := ParseInterspersed(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if len(names) != 1 {
		fmt.Fprintln(stderr, AdminsUsage)
		return errors.New("admins add: name one admin")
	}
	role, err := policy.ParseRole(*roleName)
	if err != nil {
		return fmt.Errorf("admins add: -role: %s", policy.ErrorMessage(err))
	}
	if *dbPath == "" {
		*dbPath = env.DB
	}
	svc, closeDB, err := env.Open(ctx, *dbPath, policy.DefaultTierName, false)
	if err != nil {
		return err
	}
	defer closeDB()
	ctx = policy.WithActor(policy.WithChangeSource(ctx, policy.SourceImport), ActorAdminsAdd)
	a, token, err := svc.CreateAdmin(ctx, names[0], role, *note)
	if err != nil {
		return fmt.Errorf("admins add: %s", policy.ErrorMessage(err))
	}
	fmt.Fprintf(stdout, "admin %s (%s) made; its token, shown this once:\n%s\n", a.Name, a.Role, token)
	return closeDB()
}

// HasNamedAdmin reports whether svc's database holds a live named admin:
// a service started without -admin-token then makes no token of its own,
// and runs with named admins only. A failure to read says no, so that the
// service is not left without an admin.
func HasNamedAdmin(ctx context.Context, svc *policy.Service) bool {
	admins, err := svc.Admins(ctx)
	if err != nil {
		return false
	}
	for _, a := range admins {
		if a.RevokedAt == nil {
			return true
		}
	}
	return false
}
