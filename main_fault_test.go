package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
)

// faultTally is what one client saw for one user.
type faultTally struct {
	ok, limited, unanswered int
	other                   []string
}

// TestBinaryUnderFaults runs the real binary: killed with SIGKILL under
// load, stopped with SIGTERM with checks in flight, and started on files it
// cannot use.
func TestBinaryUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := goBuild(t, ".")
	for _, mode := range []string{db.SyncFull, db.SyncNormal} {
		t.Run("SIGKILL mid-load with -sync "+mode, func(t *testing.T) { testSIGKILL(t, bin, mode) })
	}
	t.Run("SIGTERM drains checks in flight", func(t *testing.T) { testSIGTERMDrains(t, bin) })
	t.Run("unusable database exits non-zero", func(t *testing.T) { testUnusableExits(t, bin) })
	t.Run("read-only database exits non-zero", func(t *testing.T) { testReadOnlyExits(t, bin) })
}

// testSIGKILL drives checks from 16 clients, each alternating between a
// user capped at 30 a minute and one that is never capped, kills the
// service with SIGKILL once the capped users are being refused, restarts it
// on the same file and accounts for every request of every user: each 200
// is still counted, no 429 was recorded, and an unanswered request counts
// at most once. It does so three times on the same file.
func testSIGKILL(t *testing.T, bin, mode string) {
	dbPath := filepath.Join(t.TempDir(), "kill.db")
	args := []string{"-addr", "127.0.0.1:0", "-db", dbPath, "-admin-token", token, "-sync", mode, "-log-format", "json"}
	svc := startBinary(t, bin, args...)
	const capped, clients, rounds = 30, 16, 3
	mustCall(t, "PUT", svc.url+"/v1/tiers/crash", fmt.Sprintf(`{"requests_per_minute":%d,"requests_per_hour":100000,"requests_per_day":100000,"burst_allowance":0}`, capped), 201)

	var mu sync.Mutex
	tally := map[string]*faultTally{}
	var admitted, refused atomic.Int64
	var sent, inFlight int
	for round := range rounds {
		var wg sync.WaitGroup
		from := admitted.Load()
		for g := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
				for i := 0; ; i++ {
					user, tier := fmt.Sprintf("cap-%d", g), "crash"
					if i%2 == 1 {
						user, tier = fmt.Sprintf("flow-%d", g), "enterprise"
					}
					res, err := postJSON(client, svc.url+"/v1/check", fmt.Sprintf(`{"context":{"user_id":%q,"user_tier":%q}}`, user, tier))
					mu.Lock()
					u := tally[user]
					if u == nil {
						u = &faultTally{}
						tally[user] = u
					}
					if err != nil {
						u.unanswered++ // the service died with this request in flight
						mu.Unlock()
						return
					}
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
					switch res.StatusCode {
					case http.StatusOK:
						u.ok++
						admitted.Add(1)
					case http.StatusTooManyRequests:
						u.limited++
						refused.Add(1)
					default:
						u.other = append(u.other, res.Status)
					}
					mu.Unlock()
				}
			}()
		}
		dbtest.WaitFor(t, "load", 60*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			for g := range clients {
				if u := tally[fmt.Sprintf("cap-%d", g)]; u == nil || u.limited == 0 {
					return false
				}
			}
			return admitted.Load()-from >= 2000
		})
		if err := svc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		svc.wait()
		wg.Wait()

		svc = startBinary(t, bin, args...)
		sent, inFlight = 0, 0
		var recorded int
		for user, u := range tally {
			counted := dayCount(t, svc.url, user)
			sent += u.ok + u.limited + u.unanswered + len(u.other)
			inFlight += u.unanswered
			recorded += counted
			if len(u.other) > 0 {
				t.Errorf("round %d, %s: answers other than 200 and 429: %v", round, user, u.other)
			}
			// Every 200 still counted; no 429 recorded; each request in
			// flight at a kill counted at most once.
			if counted < u.ok || counted > u.ok+u.unanswered {
				t.Fatalf("round %d, %s: %d counted after restart; %d answered 200, %d 429, %d unanswered", round, user, counted, u.ok, u.limited, u.unanswered)
			}
			if strings.HasPrefix(user, "cap-") && (u.ok != capped || counted != capped) {
				t.Fatalf("round %d, %s: %d admitted, %d counted; the cap is %d", round, user, u.ok, counted, capped)
			}
			// Counted requests in flight are admissions the client never
			// saw: from now on they are the client's to know of.
			u.ok, u.unanswered = counted, 0
		}
		t.Logf("-sync %s, round %d: %d clients have sent %d checks (%d admitted, %d refused); SIGKILL with %d in flight; after restart %d counted: over-admitted 0, lost 0",
			mode, round+1, clients, sent, admitted.Load(), refused.Load(), inFlight, recorded)
	}
	// The cap holds across the restarts.
	for g := range clients {
		res, err := postJSON(http.DefaultClient, svc.url+"/v1/check", fmt.Sprintf(`{"context":{"user_id":"cap-%d","user_tier":"crash"}}`, g))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusTooManyRequests {
			t.Errorf("cap-%d after the restarts: %d, want 429", g, res.StatusCode)
		}
	}
	if err := svc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := svc.wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, svc.stderr)
	}
	faultIntegrity(t, dbPath)
}

// faultIntegrity runs SQLite's own consistency check on the file.
func faultIntegrity(t *testing.T, path string) {
	t.Helper()
	sdb, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	var res string
	if err := sdb.QueryRow("PRAGMA integrity_check").Scan(&res); err != nil || res != "ok" {
		t.Fatalf("integrity_check: %q %v", res, err)
	}
}

// testSIGTERMDrains holds the database's write lock from the test, so that
// checks sent to the service wait inside it; sends SIGTERM; then lets the
// lock go. Every check in flight must be answered 200 and be counted after a
// restart, and the service must exit 0.
func testSIGTERMDrains(t *testing.T, bin string) {
	dbPath := filepath.Join(t.TempDir(), "drain.db")
	args := []string{"-addr", "127.0.0.1:0", "-db", dbPath, "-admin-token", token}
	svc := startBinary(t, bin, args...)

	lock, err := sql.Open("sqlite", dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	lock.SetMaxOpenConns(1)
	if _, err := lock.Exec("BEGIN EXCLUSIVE"); err != nil {
		t.Fatal(err)
	}

	const inFlight = 8
	var sent sync.WaitGroup
	sent.Add(inFlight)
	statuses := make(chan int, inFlight)
	for range inFlight {
		go func() {
			// A connection of its own, so that shutdown cannot treat it as
			// idle between requests.
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { sent.Done() }}
			req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace),
				http.MethodPost, svc.url+"/v1/check", strings.NewReader(`{"context":{"user_id":"drain","user_tier":"enterprise"}}`))
			req.Header.Set("Content-Type", "application/json")
			res, err := client.Do(req)
			if err != nil {
				statuses <- 0
				return
			}
			res.Body.Close()
			statuses <- res.StatusCode
		}()
	}
	sent.Wait()
	// The requests are written; give the service a moment to read them off
	// their connections before it is told to stop.
	time.Sleep(300 * time.Millisecond)
	if err := svc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	dbtest.WaitFor(t, "shutting down", 5*time.Second, func() bool { return strings.Contains(svc.stderr.String(), "shutting down") })
	select {
	case err := <-svc.exited:
		t.Fatalf("the service exited with checks in flight: %v", err)
	default:
	}
	if _, err := lock.Exec("ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	for range inFlight {
		if s := <-statuses; s != http.StatusOK {
			t.Errorf("a check in flight at SIGTERM got %d, want 200", s)
		}
	}
	if err := svc.wait(); err != nil {
		t.Fatalf("exit: %v\n%s", err, svc.stderr)
	}
	svc = startBinary(t, bin, args...)
	if got := dayCount(t, svc.url, "drain"); got != inFlight {
		t.Fatalf("after the drain %d are counted, want %d", got, inFlight)
	}
}

// faultFiles makes files a database cannot be opened from, each in a
// fresh directory, and says what the error must mention.
func faultFiles(t *testing.T) []struct{ name, path, want string } {
	t.Helper()
	valid := func(dir string) string {
		p := filepath.Join(dir, "valid.db")
		s, err := db.Open(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return p
	}
	garbage := filepath.Join(t.TempDir(), "garbage.db")
	data := bytes.Repeat([]byte("not a database, and starting on it must not change it; "), 200)
	if err := os.WriteFile(garbage, data, 0o600); err != nil {
		t.Fatal(err)
	}
	truncated := valid(t.TempDir())
	if err := os.Truncate(truncated, 4096); err != nil {
		t.Fatal(err)
	}
	header := valid(t.TempDir())
	f, err := os.OpenFile(header, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0xff, 0xff, 0xff}, 16) // the page size
	f.Close()
	return []struct{ name, path, want string }{
		{"garbage bytes", garbage, "file is not a database"},
		{"directory", t.TempDir(), "is a directory"},
		{"truncated", truncated, "database disk image is malformed"},
		{"corrupted header", header, "file is not a database"},
	}
}

// faultSum returns a digest of path's contents, or of its listing for a
// directory.
func faultSum(t *testing.T, path string) [32]byte {
	t.Helper()
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		entries, _ := os.ReadDir(path)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return sha256.Sum256([]byte(strings.Join(names, "\n")))
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// TestStartupRefusesUnusableDatabase starts the service in process on each
// unusable file: it must fail with a message naming the file and the
// problem, and leave the file as it was.
func TestStartupRefusesUnusableDatabase(t *testing.T) {
	for _, f := range faultFiles(t) {
		t.Run(f.name, func(t *testing.T) {
			before := faultSum(t, f.path)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := run(ctx, []string{"-addr", "127.0.0.1:0", "-db", f.path, "-admin-token", token}, func(string) string { return "" }, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), f.path) || !strings.Contains(err.Error(), f.want) {
				t.Fatalf("err = %v, want one naming %s and saying %q", err, f.path, f.want)
			}
			if faultSum(t, f.path) != before {
				t.Fatal("starting on the file changed it")
			}
		})
	}
}

// testUnusableExits starts the binary on a garbage file: it exits 1 with the
// problem on stderr and never touches the file.
func testUnusableExits(t *testing.T, bin string) {
	for _, f := range faultFiles(t) {
		before := faultSum(t, f.path)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a service that starts anyway is killed
		out, err := exec.CommandContext(ctx, bin, "-addr", "127.0.0.1:0", "-db", f.path, "-admin-token", token).CombinedOutput()
		cancel()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("%s: exit %v, want status 1\n%s", f.name, err, out)
		}
		if !strings.HasPrefix(string(out), "policyguard: ") || !strings.Contains(string(out), f.want) {
			t.Fatalf("%s: output %q, want the problem (%q)", f.name, out, f.want)
		}
		if faultSum(t, f.path) != before {
			t.Fatalf("%s: starting on the file changed it", f.name)
		}
	}
}

// testReadOnlyExits starts the binary on a database it may read but not
// write. File modes do not bind root, so as root the binary runs as the
// unprivileged user nobody; where that is not allowed the case is skipped.
func testReadOnlyExits(t *testing.T, bin string) {
	dir := t.TempDir()
	path := filepath.Join(dir, "readonly.db")
	s, err := db.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := os.Chmod(path, 0o444); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a service that starts anyway is killed
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-addr", "127.0.0.1:0", "-db", path, "-admin-token", token)
	if os.Geteuid() == 0 {
		// nobody must reach the binary and the file, and may create the
		// journal beside the file: the directory is what stays writable.
		for _, p := range []string{filepath.Dir(bin), filepath.Dir(filepath.Dir(bin)), filepath.Dir(dir)} {
			os.Chmod(p, 0o755)
		}
		os.Chmod(dir, 0o777)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	before := faultSum(t, path)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 1 && strings.Contains(string(out), "cannot be written: storage failed: attempt to write a readonly database") {
		if faultSum(t, path) != before {
			t.Fatal("starting on the read-only file changed it")
		}
		return
	}
	if err != nil && !errors.As(err, &exit) && ctx.Err() == nil {
		t.Skipf("cannot run the binary as another user: %v", err)
	}
	t.Fatalf("on a read-only database: %v\n%s", err, out)
}
