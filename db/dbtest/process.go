package dbtest

import (
	"bufio"
	"io"
	"regexp"
	"testing"
	"time"
)

// ListeningRE finds the address the service prints once it listens: its
// first submatch.
var ListeningRE = regexp.MustCompile(`listening on (https?://\S+)`)

// WaitURL reads a service's standard output until it prints the address
// it listens on ("listening on http://..."), and returns that address; the
// test fails when none comes within 30 seconds. It reads r on after that,
// so the service never blocks writing to it.
func WaitURL(t testing.TB, r io.Reader) string {
	t.Helper()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if m := ListeningRE.FindStringSubmatch(sc.Text()); m != nil {
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

// WaitFor polls cond until it holds, failing the test, named by what, when
// it does not within the given time. It waits for another process to act,
// never for a rate-limit window to pass.
func WaitFor(t testing.TB, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
