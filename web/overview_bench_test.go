package web_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

// benchUsers and benchRequestsPerUser make the day of traffic the overview
// benchmark reads: 10,000 users, 30 requests each spread over the last day.
const (
	benchUsers           = 10_000
	benchRequestsPerUser = 30
)

// fillDay writes a day of traffic ending at end into the database at path:
// the requests of benchUsers users and a day of counts for three tiers.
func fillDay(b *testing.B, path string, end time.Time) {
	b.Helper()
	s, err := db.Open(context.Background(), path)
	if err != nil {
		b.Fatal(err)
	}
	s.Close() // created and migrated
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	tx, err := raw.Begin()
	if err != nil {
		b.Fatal(err)
	}
	ins, err := tx.Prepare(`INSERT INTO requests (user_id, ts, seq) VALUES (?, ?, ?)`)
	if err != nil {
		b.Fatal(err)
	}
	start := end.Add(-24 * time.Hour)
	step := 24 * time.Hour / benchRequestsPerUser
	for u := range benchUsers {
		user := fmt.Sprintf("user-%05d", u)
		for i := range benchRequestsPerUser {
			at := start.Add(time.Duration(i)*step + time.Duration(u)*time.Millisecond)
			if _, err := ins.Exec(user, at.UnixMicro(), i+1); err != nil {
				b.Fatal(err)
			}
		}
	}
	counts, err := tx.Prepare(`INSERT INTO check_counts (minute, tier, reason, n) VALUES (?, ?, ?, ?)`)
	if err != nil {
		b.Fatal(err)
	}
	for m := start.Unix() / 60; m < end.Unix()/60; m++ {
		for _, tier := range []string{"free", "pro", "enterprise"} {
			for _, reason := range []string{policy.CountAdmitted, policy.CountMinute, policy.CountHour, policy.CountFeature} {
				if _, err := counts.Exec(m, tier, reason, 1+m%7); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkOverviewPage measures one view of /admin/overview, through the
// whole server, on a day of traffic from 10,000 users: the counts of three
// tiers, the top users of the hour and the day over the requests table.
func BenchmarkOverviewPage(b *testing.B) {
	path := filepath.Join(b.TempDir(), "bench.db")
	end := pageT0
	fillDay(b, path, end)
	e := newPageEnvAt(b, path, pageToken, policy.NewTestClock(end))
	br := e.signIn()
	if rec := br.get("/admin/overview"); rec.Code != http.StatusOK {
		b.Fatalf("overview: %d", rec.Code)
	}
	b.ResetTimer()
	cpu0 := dbtest.CPUTime()
	for b.Loop() {
		if rec := br.get("/admin/overview"); rec.Code != http.StatusOK {
			b.Fatalf("overview: %d", rec.Code)
		}
	}
	// CPU time varies less than wall time on a shared machine; a view uses
	// up to two cores (the top users run beside the rest).
	b.ReportMetric(float64((dbtest.CPUTime()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/view")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/view")
}
