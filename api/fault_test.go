package api_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

// storageAnswer is the body of a check that storage could not decide.
type storageAnswer struct {
	Allowed    bool    `json:"allowed"`
	Reason     *string `json:"reason"`
	RetryAfter int64   `json:"retry_after"`
	Tier       string  `json:"tier"`
	Guardrail  string  `json:"guardrail"`
	Message    string  `json:"message"`
}

// storageFault is one way storage fails, and how to make it happen.
type storageFault struct {
	name string
	want string // in the answer's message
	// readsWork is true when reads still succeed (a held write lock does
	// not block WAL readers), so dry runs are still answered.
	readsWork bool
	// tiersFail is true when tiers may not be readable either, so nothing
	// may be able to say that a tier does not exist.
	tiersFail bool
	// start makes storage fail; stop makes it work again.
	start, stop func(t *testing.T, e *guardEnv)
}

// injected fails every storage call with err, as package db reports each
// failure: code EUNAVAILABLE and SQLite's own words.
func injected(name, sqliteMsg string) storageFault {
	err := &policy.Error{Code: policy.EUNAVAILABLE, Message: "storage failed: " + sqliteMsg}
	return storageFault{
		name:  name,
		want:  err.Message,
		start: func(_ *testing.T, e *guardEnv) { e.requests.setFault(err) },
		stop:  func(_ *testing.T, e *guardEnv) { e.requests.setFault(nil) },
	}
}

// lockHeld holds the database's write lock from another connection, as
// another process would, past the store's busy timeout.
func lockHeld() storageFault {
	if dbtest.Store() == "postgres" {
		return pgLockHeld()
	}
	var lock *sql.DB
	return storageFault{
		name:      "lock held past the busy timeout",
		want:      "storage failed: database is locked",
		readsWork: true,
		start: func(t *testing.T, e *guardEnv) {
			var err error
			if lock, err = sql.Open("sqlite", e.dbPath); err != nil {
				t.Fatal(err)
			}
			lock.SetMaxOpenConns(1)
			if _, err := lock.Exec("BEGIN EXCLUSIVE"); err != nil {
				t.Fatal(err)
			}
		},
		stop: func(t *testing.T, e *guardEnv) {
			if _, err := lock.Exec("ROLLBACK"); err != nil {
				t.Fatal(err)
			}
			lock.Close()
		},
	}
}

// pgLockHeld holds a lock on the requests table that lets reads through
// and stops writes, from another session as psql would, past the store's
// lock timeout.
func pgLockHeld() storageFault {
	var lock *sql.DB
	var tx *sql.Tx
	return storageFault{
		name:      "lock held past the busy timeout",
		want:      "lock timeout",
		readsWork: true,
		start: func(t *testing.T, e *guardEnv) {
			var err error
			if lock, err = sql.Open("pgx", e.dbPath); err != nil {
				t.Fatal(err)
			}
			if tx, err = lock.Begin(); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec("LOCK TABLE requests IN EXCLUSIVE MODE"); err != nil {
				t.Fatal(err)
			}
		},
		stop: func(t *testing.T, e *guardEnv) {
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			lock.Close()
		},
	}
}

// TestStorageFailureFailsClosed makes storage fail in each way and checks
// that a check is refused with 503, allowed false and a message naming the
// failure; that nothing is recorded; and that checks work again once
// storage does.
func TestStorageFailureFailsClosed(t *testing.T) {
	for _, f := range storageFaults() {
		t.Run(f.name, func(t *testing.T) {
			e := newGuardEnv(t, api.Config{}, db.WithBusyTimeout(50*time.Millisecond))
			f.start(t, e)
			for _, path := range []string{"/v1/check", "/v1/check?dry_run=true"} {
				rec := e.send("POST", path, `{"context":{"user_id":"f","user_tier":"pro"}}`, nil)
				if f.readsWork && strings.Contains(path, "dry_run") {
					if rec.Code != http.StatusOK {
						t.Fatalf("dry run with only the write lock taken: %d %s", rec.Code, rec.Body)
					}
					continue
				}
				a := decodeStorageAnswer(t, rec)
				if rec.Code != http.StatusServiceUnavailable || a.Allowed || a.Reason == nil || *a.Reason != "storage unavailable" ||
					!strings.Contains(a.Message, f.want) || a.Tier != "pro" || a.Guardrail != "rate_limiter" {
					t.Fatalf("%s: %d %s, want 503, allowed false, message with %q", path, rec.Code, rec.Body, f.want)
				}
			}
			if !strings.Contains(e.logs.String(), `"msg":"request failed"`) {
				t.Errorf("the failure was not logged:\n%s", e.logs)
			}
			if got, ok := scrape(t, e.srv).value("policyguard_fail_open_admissions_total", nil); !ok || got != 0 {
				t.Errorf("failing closed: policyguard_fail_open_admissions_total = %v (exposed: %v), want 0", got, ok)
			}
			f.stop(t, e)
			if got := e.requests.recorded.Load(); got != 0 {
				t.Fatalf("recorded %d while storage failed", got)
			}
			if got := e.dayCount("f"); got != 0 {
				t.Fatalf("user counted %d while storage failed", got)
			}
			if rec := e.send("POST", "/v1/check", `{"context":{"user_id":"f"}}`, nil); rec.Code != http.StatusOK {
				t.Fatalf("after recovery: %d %s", rec.Code, rec.Body)
			}
			if got := e.dayCount("f"); got != 1 {
				t.Fatalf("after recovery the user has %d requests, want 1", got)
			}
		})
	}
}

// TestStorageFailureFailOpen is the same with Config.FailOpen: each check
// is admitted with 200, allowed true and guardrail fail_open, nothing is
// recorded, and every such admission is counted and logged.
func TestStorageFailureFailOpen(t *testing.T) {
	for _, f := range storageFaults() {
		t.Run(f.name, func(t *testing.T) {
			e := newGuardEnv(t, api.Config{FailOpen: true}, db.WithBusyTimeout(50*time.Millisecond))
			f.start(t, e)
			const checks = 3
			for i := range checks {
				rec := e.send("POST", "/v1/check", `{"context":{"user_id":"o"}}`, nil)
				a := decodeStorageAnswer(t, rec)
				if rec.Code != http.StatusOK || !a.Allowed || a.Reason != nil || a.Guardrail != "fail_open" || a.Tier != "free" ||
					!strings.Contains(a.Message, "fail-open") || !strings.Contains(a.Message, f.want) {
					t.Fatalf("check %d: %d %s, want 200, allowed true, guardrail fail_open", i, rec.Code, rec.Body)
				}
				if got := e.srv.FailOpenAdmissions(); got != int64(i+1) {
					t.Fatalf("FailOpenAdmissions = %d after %d", got, i+1)
				}
			}
			// One warning per admission, numbered.
			var warned int
			for _, line := range strings.Split(e.logs.String(), "\n") {
				var l struct {
					UserID string `json:"user_id"`
					N      int64  `json:"fail_open_admissions"`
				}
				if json.Unmarshal([]byte(line), &l) != nil || !strings.Contains(line, "fail-open") {
					continue
				}
				warned++
				if !strings.Contains(line, `"level":"WARN"`) || l.UserID != "o" || l.N != int64(warned) || !strings.Contains(line, f.want) {
					t.Errorf("fail-open line %d: %s", warned, line)
				}
			}
			if warned != checks {
				t.Fatalf("%d fail-open log lines, want %d:\n%s", warned, checks, e.logs)
			}
			// Input that is wrong stays wrong: fail-open covers storage only.
			if rec := e.send("POST", "/v1/check", `{"context":`, nil); rec.Code != http.StatusBadRequest {
				t.Fatalf("malformed JSON with fail-open: %d %s", rec.Code, rec.Body)
			}
			// An unknown tier too, as long as tiers can be read; when they
			// may not be, nothing can tell it from a known one.
			failOpen := int64(checks)
			rec := e.send("POST", "/v1/check", `{"context":{"user_tier":"gold"}}`, nil)
			switch {
			case rec.Code == http.StatusBadRequest:
			case rec.Code == http.StatusOK && f.tiersFail:
				failOpen++
			default:
				t.Fatalf("unknown tier with fail-open: %d %s", rec.Code, rec.Body)
			}
			if got := e.srv.FailOpenAdmissions(); got != failOpen {
				t.Fatalf("FailOpenAdmissions = %d, want %d", got, failOpen)
			}
			if got, _ := scrape(t, e.srv).value("policyguard_fail_open_admissions_total", nil); got != float64(failOpen) {
				t.Fatalf("policyguard_fail_open_admissions_total = %v, want %d", got, failOpen)
			}
			f.stop(t, e)
			if got := e.requests.recorded.Load(); got != 0 {
				t.Fatalf("recorded %d while storage failed", got)
			}
			if got := e.dayCount("o"); got != 0 {
				t.Fatalf("user counted %d while storage failed", got)
			}
		})
	}
}

func storageFaults() []storageFault {
	closed := storageFault{
		name:      "store closed",
		want:      "storage failed",
		tiersFail: true,
		start:     func(_ *testing.T, e *guardEnv) { e.store.Close() },
	}
	closed.stop = func(t *testing.T, e *guardEnv) {
		// A closed store stays closed: open the file again, as a restart would.
		s, err := db.Open(context.Background(), e.dbPath)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		e.store, e.requests.RequestStore = s, s
		e.build()
	}
	return []storageFault{
		injected("disk full", "database or disk is full (13) (SQLITE_FULL)"),
		injected("database read-only", "attempt to write a readonly database (8) (SQLITE_READONLY)"),
		injected("I/O error", "disk I/O error (10) (SQLITE_IOERR)"),
		injected("corrupted file", "database disk image is malformed (11) (SQLITE_CORRUPT)"),
		lockHeld(),
		closed,
	}
}

func decodeStorageAnswer(t *testing.T, rec interface{ Result() *http.Response }) storageAnswer {
	t.Helper()
	var a storageAnswer
	res := rec.Result()
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(&a); err != nil {
		t.Fatalf("answer is not JSON: %v", err)
	}
	return a
}
