package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const token = "main-test-token"

var listenRE = regexp.MustCompile(`listening on (http://\S+)`)

// waitURL reads the service's stdout until it prints its address.
func waitURL(t *testing.T, r io.Reader) string {
	t.Helper()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	select {
	case u := <-found:
		return u
	case <-time.After(30 * time.Second):
		t.Fatal("service did not start")
		return ""
	}
}

// startInProcess runs the service with run() on a random port.
func startInProcess(t *testing.T, dbPath string, extra ...string) (url string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	args := append([]string{"-addr", "127.0.0.1:0", "-db", dbPath, "-admin-token", token}, extra...)
	go func() {
		done <- run(ctx, args, func(string) string { return "" }, pw, io.Discard)
		pw.Close()
	}()
	url = waitURL(t, pr)
	return url, func() error { cancel(); return <-done }
}

func check(t *testing.T, url, user, tier string) int {
	t.Helper()
	body := fmt.Sprintf(`{"input_text":"x","context":{"user_id":%q,"user_tier":%q}}`, user, tier)
	res, err := http.Post(url+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

func dayCount(t *testing.T, url, user string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+"/v1/usage/"+user, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var u struct {
		Windows map[string]struct{ Count int } `json:"windows"`
	}
	if err := json.NewDecoder(res.Body).Decode(&u); err != nil || res.StatusCode != 200 {
		t.Fatalf("usage: %d %v", res.StatusCode, err)
	}
	return u.Windows["day"].Count
}

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
		if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
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

// TestSIGKILLKeepsEveryAdmittedRequest runs the real binary, kills it with
// SIGKILL while checks are in flight, and restarts it on the same file:
// every request answered 200 must still be counted.
func TestSIGKILLKeepsEveryAdmittedRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "policyguard")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	dbPath := filepath.Join(dir, "kill.db")
	start := func() (*exec.Cmd, string) {
		cmd := exec.Command(bin, "-addr", "127.0.0.1:0", "-db", dbPath, "-admin-token", token)
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, waitURL(t, stdout)
	}
	cmd, url := start()

	var ok200, unanswered atomic.Int64
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 5 * time.Second}
	stopLoad := make(chan struct{})
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for {
				select {
				case <-stopLoad:
					return
				default:
				}
				body := fmt.Sprintf(`{"context":{"user_id":"k%d","user_tier":"enterprise"}}`, g%2)
				res, err := client.Post(url+"/v1/check", "application/json", strings.NewReader(body))
				if err != nil {
					unanswered.Add(1)
					return
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode == http.StatusOK {
					ok200.Add(1)
				}
			}
		}(g)
	}
	for ok200.Load() < 200 {
		time.Sleep(5 * time.Millisecond) // waiting for real load on a real process, not for a window
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	close(stopLoad)
	wg.Wait()

	cmd, url = start()
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	counted := dayCount(t, url, "k0") + dayCount(t, url, "k1")
	if int64(counted) < ok200.Load() || int64(counted) > ok200.Load()+unanswered.Load() {
		t.Fatalf("after SIGKILL: %d counted, %d answered 200, %d unanswered", counted, ok200.Load(), unanswered.Load())
	}
	t.Logf("SIGKILL after %d admitted checks: %d counted after restart, %d in flight", ok200.Load(), counted, unanswered.Load())
}
