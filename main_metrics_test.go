package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

var metricsRE = regexp.MustCompile(`metrics on (http://\S+)`)

// TestRunServesMetrics starts the service as an operator would with
// GUARDRAIL_METRICS_ADDR set, and reads what Prometheus would scrape: the
// checks answered, the rows the cleanup deleted, the Go runtime.
func TestRunServesMetrics(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "m.db")
	// Three requests from two days ago, for the cleanup to delete.
	store, err := db.Open(context.Background(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		at := time.Now().Add(-48*time.Hour + time.Duration(i)*time.Second)
		err := store.Admit(context.Background(), "old", func(policy.History) (policy.Admission, error) { return policy.Admission{At: at, Record: true}, nil })
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	args := []string{"-addr", "127.0.0.1:0", "-db", dbPath, "-admin-token", token, "-cleanup-interval", "1ms"}
	getenv := func(k string) string {
		if k == "GUARDRAIL_METRICS_ADDR" {
			return "127.0.0.1:0"
		}
		return ""
	}
	go func() {
		done <- run(ctx, args, getenv, pw, io.Discard)
		pw.Close()
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	var url, metricsURL string
	sc := bufio.NewScanner(pr)
	for url == "" && sc.Scan() {
		if m := metricsRE.FindStringSubmatch(sc.Text()); m != nil {
			metricsURL = m[1]
		}
		if m := dbtest.ListeningRE.FindStringSubmatch(sc.Text()); m != nil {
			url = m[1]
		}
	}
	go io.Copy(io.Discard, pr)
	if url == "" || metricsURL == "" {
		t.Fatalf("service printed API %q and metrics %q", url, metricsURL)
	}

	if got := check(t, url, "alice", "pro"); got != http.StatusOK {
		t.Fatalf("check: %d", got)
	}
	if code, _ := get(t, url+"/metrics"); code != http.StatusNotFound {
		t.Errorf("API address serves /metrics (%d) although they have their own", code)
	}

	// The cleanup runs every millisecond in the background: scrape until it
	// has deleted the three old rows.
	deadline := time.Now().Add(20 * time.Second)
	var body string
	for {
		var code int
		code, body = get(t, metricsURL)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d", metricsURL, code)
		}
		if strings.Contains(body, "\npolicyguard_cleanup_rows_deleted_total 3\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cleanup deletions never reached 3:\n%s", body)
		}
	}
	for _, want := range []string{
		`policyguard_checks_total{dry_run="false",guardrail="rate_limiter",outcome="admitted",tier="pro",window=""} 1`,
		"policyguard_rows_stored_total 1",
		"policyguard_check_duration_seconds_count{dry_run=\"false\"} 1",
		"go_goroutines ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}

func TestRunServesMetricsOnTheAPIByDefault(t *testing.T) {
	url, stop := startInProcess(t, filepath.Join(t.TempDir(), "d.db"))
	defer stop()
	check(t, url, "bob", "free")
	code, body := get(t, url+"/metrics")
	if code != http.StatusOK || !strings.Contains(body, `policyguard_checks_total{dry_run="false",guardrail="rate_limiter",outcome="admitted",tier="free",window=""} 1`) {
		t.Fatalf("GET /metrics: %d\n%s", code, body)
	}
}
