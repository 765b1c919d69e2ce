package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db/dbtest"
)

func TestRunServesAndKeepsCountsAcrossRestart(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "guardrail.db")
	url, stop := startInProcess(t, dbPath)
	for i := 0; i < 3; i++ {
		if got := check(t, url, "alice", "pro"); got != http.StatusOK {
			t.Fatalf("check %d: %d", i, got)
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	url, stop = startInProcess(t, dbPath)
	defer stop()
	if got := dayCount(t, url, "alice"); got != 3 {
		t.Fatalf("after restart alice has %d requests, want 3", got)
	}
}

func TestRunConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"-cleanup-interval", "soon"}, nil, "cleanup interval"},
		{nil, map[string]string{"GUARDRAIL_CLEANUP_INTERVAL": "-1s"}, "cleanup interval"},
		{[]string{"-default-tier", "gold"}, nil, `default tier "gold" does not exist`},
		{nil, map[string]string{"GUARDRAIL_DEFAULT_TIER": "gold"}, `default tier "gold" does not exist`},
		{[]string{"-sync", "sometimes"}, nil, "synchronous must be FULL or NORMAL"},
		{[]string{"-log-format", "xml"}, nil, "log format"},
		{[]string{"extra"}, nil, "unexpected argument"},
		{[]string{"-db", dir}, nil, "is a directory"},
	} {
		args := append([]string{"-addr", "127.0.0.1:0", "-db", filepath.Join(dir, "c.db")}, tc.args...)
		getenv := func(k string) string { return tc.env[k] }
		err := run(context.Background(), args, getenv, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: err = %v, want %q", tc.args, tc.env, err, tc.want)
		}
	}
}

func TestRunPrintsGeneratedTokenOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "g.db")}, func(string) string { return "" }, pw, io.Discard)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	var tokenLine, url string
	for url == "" && sc.Scan() {
		if strings.HasPrefix(sc.Text(), "admin token") {
			tokenLine = sc.Text()
		}
		if m := dbtest.ListeningRE.FindStringSubmatch(sc.Text()); m != nil {
			url = m[1]
		}
	}
	go io.Copy(io.Discard, pr)
	defer func() { cancel(); <-done }()
	generated := tokenLine[strings.LastIndex(tokenLine, " ")+1:]
	if len(generated) < 32 {
		t.Fatalf("token line %q", tokenLine)
	}
	req, _ := http.NewRequest(http.MethodGet, url+"/v1/tiers", nil)
	req.Header.Set("Authorization", "Bearer "+generated)
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("generated token refused: %v %v", res, err)
	}
	res.Body.Close()
}

func TestRunWithoutTestClock(t *testing.T) {
	url, logs := startWithEnv(t, nil)
	// Operators sharing a host among replicas check each one's share here.
	// The line follows the address on stdout, which the start waited for.
	dbtest.WaitFor(t, "the serving line", 10*time.Second, func() bool { return strings.Contains(logs.String(), "msg=serving") })
	if want := fmt.Sprintf(" gomaxprocs=%d", runtime.GOMAXPROCS(0)); !strings.Contains(grepLines(logs.String(), "msg=serving"), want) {
		t.Errorf("the serving line does not say%s:\n%s", want, logs)
	}
	for _, method := range []string{"GET", "POST"} {
		if status, body := call(t, method, url+"/v1/test/clock", `{"advance":"1m"}`, true); status != http.StatusNotFound {
			t.Errorf("%s /v1/test/clock: %d %s, want 404", method, status, body)
		}
	}
	if _, body := call(t, "GET", url+"/healthz", "", false); body != `{"status":"ok"}` {
		t.Errorf("healthz: %s", body)
	}
}

func TestRunTestClock(t *testing.T) {
	for _, on := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"flag", nil, []string{"-test-clock"}},
		{"environment", map[string]string{"GUARDRAIL_TEST_CLOCK": "true"}, nil},
		{"flag over environment", map[string]string{"GUARDRAIL_TEST_CLOCK": "false"}, []string{"-test-clock=true"}},
	} {
		t.Run(on.name, func(t *testing.T) {
			before := time.Now()
			url, logs := startWithEnv(t, on.env, on.args...)
			after := time.Now()
			clockURL := url + "/v1/test/clock"
			if _, body := call(t, "GET", url+"/healthz", "", false); body != `{"status":"ok","test_clock":true}` {
				t.Errorf("healthz: %s", body)
			}
			if !strings.Contains(logs.String(), "level=WARN msg=\"test clock: time moves only through POST /v1/test/clock") {
				t.Errorf("no warning of the test clock in the log:\n%s", logs)
			}
			status, body := call(t, "GET", clockURL, "", true)
			var got struct{ Now time.Time }
			if err := json.Unmarshal([]byte(body), &got); status != 200 || err != nil {
				t.Fatalf("GET: %d %s %v", status, body, err)
			}
			if got.Now.Before(before.Truncate(time.Microsecond)) || got.Now.After(after) {
				t.Errorf("the clock starts at %v, not between %v and %v", got.Now, before, after)
			}
			start := got.Now.UTC().Format("2006-01-02T15:04:05.000000000Z")
			moved := got.Now.Add(90 * time.Second).UTC().Format("2006-01-02T15:04:05.000000000Z")
			for _, tc := range []struct {
				method, body string
				admin        bool
				status       int
				want         string
			}{
				{"GET", "", false, 401, `{"message":"missing or wrong admin token"}`},
				{"POST", `{"advance":"1m"}`, false, 401, `{"message":"missing or wrong admin token"}`},
				{"POST", `{"advance":"90s"}`, true, 200, `{"now":"` + moved + `"}`},
				{"GET", "", true, 200, `{"now":"` + moved + `"}`},
				{"POST", `{"set":"` + start + `"}`, true, 200, `{"now":"` + start + `"}`},
				{"POST", `{"set":"2030-06-01T00:00:00Z"}`, true, 200, `{"now":"2030-06-01T00:00:00.000000000Z"}`},
				{"POST", `{"advance":"-1s"}`, true, 400, "must not be negative"},
				{"POST", `{"advance":"1s","set":"2030-06-01T00:00:00Z"}`, true, 400, "exactly one of"},
				{"POST", `{"when":"now"}`, true, 400, "unknown field"},
				{"POST", `{"set":"June"}`, true, 400, "not an RFC 3339 time"},
				{"POST", `not json`, true, 400, `"message":`},
				{"GET", "", true, 200, `{"now":"2030-06-01T00:00:00.000000000Z"}`},
			} {
				status, body := call(t, tc.method, clockURL, tc.body, tc.admin)
				if status != tc.status || !strings.Contains(body, tc.want) || (status == 200 && body != tc.want) {
					t.Errorf("%s %s: %d %s, want %d %s", tc.method, tc.body, status, body, tc.status, tc.want)
				}
			}
		})
	}
}

func TestRunTestClockRefusals(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		addr string
		args []string
		env  map[string]string
		want string
	}{
		{"0.0.0.0:0", []string{"-test-clock"}, nil, "not loopback"},
		{":0", []string{"-test-clock"}, nil, "not loopback"},
		{"[::]:0", nil, map[string]string{"GUARDRAIL_TEST_CLOCK": "true"}, "not loopback"},
		{"192.0.2.1:0", []string{"-test-clock"}, nil, "not loopback"},
		{"127.0.0.1:0", nil, map[string]string{"GUARDRAIL_TEST_CLOCK": "yes"}, `GUARDRAIL_TEST_CLOCK "yes": must be true or false`},
		{"127.0.0.1:0", nil, map[string]string{"GUARDRAIL_TEST_CLOCK": "on"}, "must be true or false"},
		{"127.0.0.1:0", []string{"-test-clock=maybe"}, nil, "invalid boolean value"},
	} {
		args := append([]string{"-addr", tc.addr, "-db", filepath.Join(dir, "r.db")}, tc.args...)
		getenv := func(k string) string { return tc.env[k] }
		err := run(context.Background(), args, getenv, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v %v: err = %v, want %q", tc.addr, tc.args, tc.env, err, tc.want)
		}
	}
}

// TestRunTestClockRequestsAtOneInstant is what a user's integration test
// does first with -test-clock: three checks at one instant fill a minute
// of three, and exactly a minute later three more are admitted.
func TestRunTestClockRequestsAtOneInstant(t *testing.T) {
	url, _ := startWithEnv(t, nil, "-test-clock")
	if status, body := call(t, "PUT", url+"/v1/tiers/three",
		`{"requests_per_minute":3,"requests_per_hour":100,"requests_per_day":1000,"burst_allowance":0}`, true); status != 201 {
		t.Fatalf("PUT tier: %d %s", status, body)
	}
	for round := range 2 {
		var got []int
		for range 4 {
			got = append(got, check(t, url, "agent", "three"))
		}
		if want := []int{200, 200, 200, 429}; !slices.Equal(got, want) {
			t.Fatalf("round %d: %v, want %v", round+1, got, want)
		}
		if status, body := call(t, "POST", url+"/v1/test/clock", `{"advance":"60s"}`, true); status != 200 {
			t.Fatalf("advance: %d %s", status, body)
		}
	}
}
