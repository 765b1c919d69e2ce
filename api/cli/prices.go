package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/policy"
)

// The "policyguard prices" command: the price table kept in a file, or
// taken from LiteLLM's published list, applied as a new version.

// PricesUsage is the prices command's usage message.
const PricesUsage = `usage:
  policyguard prices export [-db FILE|URL] [-at TIME]
      writes the version of the price table in force now (or at TIME,
      RFC 3339) as a prices file (JSON) to stdout
  policyguard prices import [-db FILE|URL] [-effective-from TIME] PRICES.json
      checks the whole file and saves it as a new version of the price
      table, in force from now (or TIME, not earlier), and reports what
      changed against the version in force then

A prices file is the body of PUT /v1/prices: {"prices": [{"model": "gpt-4o-mini",
"input": "0.15", "output": "0.6"}, ...]}, dollars per million tokens. Import
also reads LiteLLM's model_prices_and_context_window.json as published: its
chat and completion entries become entries of the table, per million tokens;
other modes are skipped and counted. A running service on the same database
prices with a new version within a second. -db defaults to GUARDRAIL_DB or
guardrail.db.`

// PricesEnv is what the prices command takes from the service's settings.
type PricesEnv struct {
	DB   string // -db's default
	Open Opener
	// Redact returns a database path as it may be shown: without a
	// password.
	Redact func(path string) string
}

// Prices runs "policyguard prices export|import" with args, the arguments
// that follow "prices".
func Prices(ctx context.Context, args []string, env PricesEnv, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, PricesUsage)
		return errors.New("prices: name a command: export or import")
	}
	cmd := args[0]
	fs := flag.NewFlagSet("policyguard prices "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, PricesUsage) }
	dbPath := fs.String("db", "", "the database: a SQLite file or a PostgreSQL URL")
	var at *string
	switch cmd {
	case "export":
		at = fs.String("at", "", "the time whose version to export (RFC 3339); now when empty")
	case "import":
		at = fs.String("effective-from", "", "when the new version begins (RFC 3339); now when empty")
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, PricesUsage)
		return nil
	default:
		fmt.Fprintln(stderr, PricesUsage)
		return fmt.Errorf("prices: unknown command %q: want export or import", cmd)
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
	var when *time.Time
	if *at != "" {
		t, err := time.Parse(time.RFC3339Nano, *at)
		if err != nil {
			return fmt.Errorf("prices %s: %q is not an RFC 3339 time such as 2026-12-01T00:00:00Z", cmd, *at)
		}
		when = &t
	}
	if cmd == "export" {
		if len(files) > 0 {
			return fmt.Errorf("prices export: unexpected argument %q: the prices go to stdout", files[0])
		}
		return exportPrices(ctx, env, *dbPath, when, stdout)
	}
	if len(files) != 1 {
		fmt.Fprintln(stderr, PricesUsage)
		return errors.New("prices import: name exactly one prices file (- reads stdin)")
	}
	return importPrices(ctx, env, *dbPath, files[0], when, stdout)
}

func exportPrices(ctx context.Context, env PricesEnv, dbPath string, at *time.Time, w io.Writer) error {
	svc, closeDB, err := env.Open(ctx, dbPath, policy.DefaultTierName, true)
	if err != nil {
		return fmt.Errorf("prices export: %w", err)
	}
	defer closeDB()
	t := svc.Now()
	if at != nil {
		t = *at
	}
	v, err := svc.PricesAt(ctx, t)
	if err != nil {
		return fmt.Errorf("prices export: %s", policy.ErrorMessage(err))
	}
	if err := api.WritePricesFile(w, v.Prices); err != nil {
		return err
	}
	return closeDB()
}

// maxChangeLines is how many lines of differences an import lists before
// it says how many more there are.
const maxChangeLines = 50

func importPrices(ctx context.Context, env PricesEnv, dbPath, path string, from *time.Time, w io.Writer) error {
	data, err := readFileOrStdin(path)
	if err != nil {
		return err
	}
	f, err := api.ReadPricesFile(data)
	if err != nil {
		return fmt.Errorf("%s: nothing imported: %s", path, policy.ErrorMessage(err))
	}
	if from == nil {
		from = f.EffectiveFrom
	}
	svc, closeDB, err := env.Open(ctx, dbPath, policy.DefaultTierName, false)
	if err != nil {
		return err
	}
	defer closeDB()
	var before *policy.PriceTable
	if from != nil {
		if v, err := svc.PricesAt(ctx, *from); err == nil {
			before = v.Prices
		}
	} else if v, err := svc.PricesAt(ctx, svc.Now()); err == nil {
		before = v.Prices
	}
	v, err := svc.PutPrices(policy.WithActor(policy.WithChangeSource(ctx, policy.SourceImport), ActorPricesImport), from, f.Prices)
	if err != nil {
		return fmt.Errorf("%s: nothing imported: %s", path, policy.ErrorMessage(err))
	}
	diff := policy.PriceDiff(before, v.Prices)
	for i, line := range diff {
		if i == maxChangeLines {
			fmt.Fprintf(w, "... and %d more\n", len(diff)-i)
			break
		}
		fmt.Fprintln(w, line)
	}
	if f.Format == "litellm" {
		var reasons []string
		for _, r := range slices.Sorted(maps.Keys(f.Skipped)) {
			reasons = append(reasons, fmt.Sprintf("%d %s", f.Skipped[r], r))
		}
		fmt.Fprintf(w, "LiteLLM file: %d entries priced, %d skipped (%s)\n", len(f.Prices), f.SkippedTotal(), strings.Join(reasons, ", "))
	}
	fmt.Fprintf(w, "version %d of %d entries, in force from %s, saved into %s\n",
		v.ID, v.Prices.Len(), v.EffectiveFrom.UTC().Format(time.RFC3339Nano), env.Redact(dbPath))
	return closeDB()
}

// readFileOrStdin reads the file at path, or stdin for "-".
func readFileOrStdin(path string) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(os.Stdin)
	}
	return os.ReadFile(path)
}
