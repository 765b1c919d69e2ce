// Package dbtest gives tests a fresh PostgreSQL database each.
//
// Postgres connects to the server that POLICYGUARD_TEST_POSTGRES names (a
// URL of a database the user may create databases from; by default
// DefaultAdminURL, the local server as the README sets it up), creates an
// empty database and drops it when the test ends. Without a server it skips
// the test, except under CI=true, where it fails it: CI starts one.
package dbtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
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
