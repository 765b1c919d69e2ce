// Package dbtest gives tests a fresh database each: a SQLite file, or a
// PostgreSQL database.
//
// DSN picks the store under test: SQLite unless POLICYGUARD_TEST_STORE is
// "postgres", so that one environment variable runs a package's tests on
// PostgreSQL (CI runs the API's and the admin page's tests both ways).
//
// Postgres connects to the server that POLICYGUARD_TEST_POSTGRES names (a
// URL of a database the user may create databases from; by default
// DefaultAdminURL, the local server as the README sets it up), creates an
// empty database and drops it when the test ends. Without a server it skips
// the test, except under CI=true, where it fails it: CI starts one.
//
// It also holds what the tests of every package share, so that each is
// written once: CPUTime for benchmarks on a shared machine, RaceEnabled for
// tests that do less under the race detector, and LockedBuffer for a
// service's log. Only tests import it; every package's tests already do.
package dbtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
)

// DefaultAdminURL is the server tests use when POLICYGUARD_TEST_POSTGRES
// is not set.
const DefaultAdminURL = "postgres://postgres:postgres@localhost:5432/postgres?sslmode=disable"

var (
	once    sync.Once
	admin   *sql.DB
	adminU  *url.URL
	skipMsg string
)

func connect() {
	raw := os.Getenv("POLICYGUARD_TEST_POSTGRES")
	if raw == "" {
		raw = DefaultAdminURL
	}
	u, err := url.Parse(raw)
	if err != nil {
		skipMsg = "POLICYGUARD_TEST_POSTGRES does not parse: " + err.Error()
		return
	}
	db, err := sql.Open("pgx", raw)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = db.PingContext(ctx)
		cancel()
	}
	if err != nil {
		skipMsg = "no PostgreSQL at " + u.Redacted() + " (set POLICYGUARD_TEST_POSTGRES, see the README): " + err.Error()
		return
	}
	db.SetMaxOpenConns(2)
	admin, adminU = db, u
}

// Store returns the store under test: "sqlite" or "postgres" (see DSN).
func Store() string {
	if os.Getenv("POLICYGUARD_TEST_STORE") == "postgres" {
		return "postgres"
	}
	return "sqlite"
}

// DSN returns a new, empty database of the store under test, removed
// when t ends: a SQLite file named name in t's temporary directory, or,
// when POLICYGUARD_TEST_STORE is "postgres", a PostgreSQL database (see
// Postgres).
func DSN(t testing.TB, name string) string {
	t.Helper()
	switch store := os.Getenv("POLICYGUARD_TEST_STORE"); store {
	case "", "sqlite":
		return filepath.Join(t.TempDir(), name)
	case "postgres":
		return Postgres(t)
	default:
		t.Fatalf("POLICYGUARD_TEST_STORE=%q: want sqlite or postgres", store)
		return ""
	}
}

// Postgres returns the URL of a new, empty database that is dropped when
// t ends, or skips t when no server answers (fails it under CI=true).
func Postgres(t testing.TB) string {
	t.Helper()
	once.Do(connect)
	if admin == nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(skipMsg)
		}
		t.Skip(skipMsg)
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := "policyguard_test_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(`CREATE DATABASE ` + name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		// FORCE ends the sessions a failed test left open.
		if _, err := admin.Exec(`DROP DATABASE IF EXISTS ` + name + ` WITH (FORCE)`); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u := *adminU
	u.Path = "/" + name
	return u.String()
}
