package db_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/migrations"
	"github.com/policyguard/policyguard/policy"
)

// TestMigrationToSameInstantKeysKeepsEveryRow builds a database of schema
// version 8 (requests keyed by user and time, finished tokens likewise),
// with rows as the old store wrote them, and opens it with the store: the
// migration to version 9 moves every row to the new keys unchanged, and
// requests checked at one instant are then recorded together. Down to 8
// and up again keeps every row too.
func TestMigrationToSameInstantKeysKeepsEveryRow(t *testing.T) {
	eachBackend(t, func(t *testing.T, bk backend) {
		ctx := context.Background()
		dsn := bk.newDSN(t)
		raw, p, bind := migratedTo(t, bk, dsn, 8)
		// The old store recorded three requests at one instant a
		// microsecond apart, and finished tokens likewise.
		base := t0.UnixMicro()
		for i, ts := range []int64{base, base + 1, base + 2, base + 30_000_000} {
			if _, err := raw.ExecContext(ctx, bind(`INSERT INTO requests (user_id, ts, seq) VALUES (?, ?, ?)`), "old", ts, i+1); err != nil {
				t.Fatal(err)
			}
		}
		for i, ts := range []int64{base, base + 1} {
			if _, err := raw.ExecContext(ctx, bind(`INSERT INTO call_tokens (user_id, ts, tokens, total) VALUES (?, ?, 5, ?)`), "old", ts, 5*(i+1)); err != nil {
				t.Fatal(err)
			}
		}

		s, err := db.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		if got := count(t, s, "old", t0.Add(-time.Hour)); got != 4 {
			t.Fatalf("after the migration: %d requests, want 4", got)
		}
		if got := count(t, s, "old", t0); got != 3 {
			t.Fatalf("after the migration: %d requests after the first, want 3", got)
		}
		err = s.View(ctx, "old", func(h policy.History) error {
			l, err := h.(policy.CallHistory).Calls(t0.Add(time.Minute))
			if err != nil {
				return err
			}
			n, err := l.After(t0.Add(-time.Second))
			if err != nil {
				return err
			}
			if n[policy.MeasureTokens] != 10 {
				t.Errorf("after the migration: %d finished tokens, want 10", n[policy.MeasureTokens])
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// Now two at one instant, after the old rows.
		at := t0.Add(time.Minute)
		admit(t, s, "old", at)
		admit(t, s, "old", at)
		if got := count(t, s, "old", at.Add(-time.Microsecond)); got != 2 {
			t.Fatalf("two requests at one instant: %d counted just before it, want 2", got)
		}
		if got := count(t, s, "old", at); got != 0 {
			t.Fatalf("two requests at one instant: %d counted after it, want 0", got)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}

		// Down to 8: the requests at one instant move a microsecond apart,
		// none is lost; up again, every row is there.
		if _, err := p.DownTo(ctx, 8); err != nil {
			t.Fatal(err)
		}
		var n, distinct int
		if err := raw.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT ts) FROM requests WHERE user_id = 'old'`).Scan(&n, &distinct); err != nil {
			t.Fatal(err)
		}
		if n != 6 || distinct != 6 {
			t.Fatalf("down to 8: %d requests at %d instants, want 6 at 6", n, distinct)
		}
		if _, err := p.Up(ctx); err != nil {
			t.Fatal(err)
		}
		s = openStore(t, dsn)
		if got := count(t, s, "old", t0.Add(-time.Hour)); got != 6 {
			t.Fatalf("up again: %d requests, want 6", got)
		}
	})
}

// migratedTo opens dsn without the store, migrates it up to version, and
// returns the connection (closed when the test ends), the migration
// provider for the steps after, and bind, which writes a query's ?
// placeholders as the backend's dialect wants them.
func migratedTo(t *testing.T, bk backend, dsn string, version int64) (*sql.DB, *goose.Provider, func(string) string) {
	t.Helper()
	raw, err := bk.raw(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	dialect, fsys := goose.DialectSQLite3, migrations.SQLite
	if bk.name == "postgres" {
		dialect, fsys = goose.DialectPostgres, migrations.Postgres
	}
	p, err := goose.NewProvider(dialect, raw, fsys)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(context.Background(), version); err != nil {
		t.Fatal(err)
	}
	bind := func(q string) string {
		if bk.name != "postgres" {
			return q
		}
		var b strings.Builder
		n := 0
		for _, r := range q {
			if r == '?' {
				n++
				fmt.Fprintf(&b, "$%d", n)
				continue
			}
			b.WriteRune(r)
		}
		return b.String()
	}
	return raw, p, bind
}
