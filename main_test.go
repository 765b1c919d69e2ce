package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
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
