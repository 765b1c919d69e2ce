//go:build linux

package db_test

import (
	"context"
	"database/sql"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest/powerfs"
	"github.com/policyguard/policyguard/policy"
)

// TestIOErrorReopens runs the store on a filesystem that fails writes, then
// fsyncs, with EIO. A commit that fails is answered with an error, never as
// a success; Ping reports the failure; the writer reopens its connection
// and says so in the log; once the disk works again, Ping and the next
// admission succeed by themselves. A power cut at the end keeps exactly
// the admissions answered without error.
func TestIOErrorReopens(t *testing.T) {
	ctx := context.Background()
	backing := t.TempDir()
	p := powerfs.ForTest(t, backing)
	var logs strings.Builder
	s, err := db.Open(ctx, filepath.Join(p.Dir(), "io.db"), db.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	admitted := 0
	admit := func(at time.Time) error {
		err := s.Admit(ctx, "u", func(policy.History) (policy.Admission, error) { return policy.Admission{At: at, Record: true}, nil })
		if err == nil {
			admitted++
		}
		return err
	}
	for i := range 5 {
		if err := admit(t0.Add(time.Duration(i) * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	for i, fail := range []func(bool){p.FailWrites, p.FailSyncs} {
		fail(true)
		err := admit(t0.Add(time.Duration(10+10*i) * time.Second))
		if policy.ErrorCode(err) != policy.EUNAVAILABLE || !strings.Contains(err.Error(), "disk I/O error") {
			t.Fatalf("case %d: admission on a failing disk: %v, want a storage failure", i, err)
		}
		if err := s.Ping(ctx); policy.ErrorCode(err) != policy.EUNAVAILABLE {
			t.Fatalf("case %d: Ping on a failing disk: %v", i, err)
		}
		fail(false)
		if err := s.Ping(ctx); err != nil {
			t.Fatalf("case %d: Ping once the disk works: %v", i, err)
		}
		if err := admit(t0.Add(time.Duration(15+10*i) * time.Second)); err != nil {
			t.Fatalf("case %d: admission once the disk works: %v", i, err)
		}
		// The failed commit's pages are in the file: a reopen that rebuilt
		// the WAL index from the WAL would find it committed.
		if got := count(t, s, "u", t0.Add(-time.Hour)); got != int64(admitted) {
			t.Fatalf("case %d: %d admissions stored, %d answered without error", i, got, admitted)
		}
	}
	for _, want := range []string{
		`msg="storage: a commit failed on an I/O error; reopening the database before the next write" err="disk I/O error \(778\)"`,
		`msg="storage: a commit failed on an I/O error; reopening the database before the next write" err="disk I/O error \(1034\)"`,
		`msg="storage: commits succeed again" reopened=[1-9]`,
	} {
		if !regexp.MustCompile(want).MatchString(logs.String()) {
			t.Errorf("the log lacks %s:\n%s", want, logs.String())
		}
	}

	r := p.Cut(true)
	if len(r.Errors) > 0 {
		t.Fatal(r)
	}
	s.Close() // fails: the power is off
	if err := p.Unmount(); err != nil {
		t.Fatal(err)
	}
	check, err := sql.Open("sqlite", filepath.Join(backing, "io.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	var n int
	if err := check.QueryRow(`SELECT count(*) FROM requests WHERE user_id = 'u'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != admitted {
		t.Fatalf("after a power cut %d admissions are stored; %d were answered without error", n, admitted)
	}
}
