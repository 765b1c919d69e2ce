package main

// The helpers the top-level tests share: the service started in process
// (run) or as the real binary, the programs the tests build, and the few
// requests every test sends. Helpers of one test stay beside it.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db/dbtest"
)

// token is the admin token of the services the tests start.
const token = "main-test-token"

// runInProcess starts run() with args and env and returns its URL, its
// log, and a stop function that returns run's error. The test's cleanup
// stops it too.
func runInProcess(t testing.TB, args []string, env map[string]string) (string, *dbtest.LockedBuffer, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	logs := &dbtest.LockedBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, args, func(k string) string { return env[k] }, pw, logs)
		pw.Close()
	}()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := dbtest.ListeningRE.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	var u string
	select {
	case u = <-found:
	case err := <-done:
		cancel()
		t.Fatalf("run: %v\n%s", err, logs)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("service did not start")
	}
	stopped := false
	var stopErr error
	stop := func() error {
		if !stopped {
			stopped = true
			cancel()
			stopErr = <-done
		}
		return stopErr
	}
	t.Cleanup(func() { stop() })
	return u, logs, stop
}

// startInProcess runs the service in process on a random port with the
// database at dbPath, the admin token token and extra flags.
func startInProcess(t *testing.T, dbPath string, extra ...string) (url string, stop func() error) {
	t.Helper()
	url, _, stop = runInProcess(t, append([]string{"-addr", "127.0.0.1:0", "-db", dbPath, "-admin-token", token}, extra...), nil)
	return url, stop
}

// startWithEnv runs the service in process on a random port and a fresh
// database, with env as its environment, and returns its log. The test
// fails if the service does not stop cleanly at its end.
func startWithEnv(t *testing.T, env map[string]string, extra ...string) (url string, logs *dbtest.LockedBuffer) {
	t.Helper()
	url, logs, stop := runInProcess(t, append([]string{"-addr", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "g.db"), "-admin-token", token}, extra...), env)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return url, logs
}

// tiersCmd runs "policyguard tiers args..." with env as the environment.
func tiersCmd(env map[string]string, args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	err = run(context.Background(), append([]string{"tiers"}, args...), func(k string) string { return env[k] }, &out, &errOut)
	return out.String(), errOut.String(), err
}

// goBuild builds the program in the package directory pkg (such as ".",
// the service, or a program under a testdata directory, which go build
// ./... leaves out) into the test's temporary directory.
func goBuild(t testing.TB, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(filepath.Clean(pkg)))
	if pkg == "." {
		bin = filepath.Join(filepath.Dir(bin), "policyguard")
	}
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// binaryProc is the real binary, running.
type binaryProc struct {
	cmd    *exec.Cmd
	url    string
	stderr *dbtest.LockedBuffer
	exited chan error
}

// startBinary starts bin (goBuild(t, ".")) with args and waits until it
// listens. The test's cleanup kills it.
func startBinary(t *testing.T, bin string, args ...string) *binaryProc {
	t.Helper()
	s := &binaryProc{cmd: exec.Command(bin, args...), stderr: &dbtest.LockedBuffer{}, exited: make(chan error, 1)}
	s.cmd.Stderr = s.stderr
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := dbtest.ListeningRE.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
		s.exited <- s.cmd.Wait()
	}()
	select {
	case s.url = <-found:
	case err := <-s.exited:
		t.Fatalf("service exited at start-up: %v\n%s", err, s.stderr)
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		t.Fatalf("service did not start:\n%s", s.stderr)
	}
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		<-s.exited
		s.exited <- nil // for a later wait in the test itself
	})
	return s
}

// wait returns the process's exit error.
func (s *binaryProc) wait() error {
	err := <-s.exited
	s.exited <- err
	return err
}

// writeFile writes content to a file called name in a temporary directory
// and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// check sends one check for user on tier and returns its status.
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

// dayCount returns the requests of user the service counts in its day
// window.
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

// call sends a request with the admin token when admin is set and returns
// the status and the body without its final newline.
func call(t *testing.T, method, url, body string, admin bool) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if admin {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, strings.TrimSpace(string(b))
}

// mustCall is call with the admin token, and fails the test unless the
// answer is want; it returns the body.
func mustCall(t *testing.T, method, url, body string, want int) string {
	t.Helper()
	status, b := call(t, method, url, body, true)
	if status != want {
		t.Fatalf("%s %s: %d %s, want %d", method, url, status, b, want)
	}
	return b
}

// get sends a GET and returns the status and the body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}

// postJSON sends body to url with the JSON content type.
func postJSON(client *http.Client, url, body string) (*http.Response, error) {
	return client.Post(url, "application/json", strings.NewReader(body))
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
