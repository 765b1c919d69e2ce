package db

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

var w0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func openTestStore(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func admitAt(at time.Time) func(policy.History) (policy.Admission, error) {
	return func(policy.History) (policy.Admission, error) { return policy.Admission{At: at, Record: true}, nil }
}

// dayCount is what the store counts for user after w0-1h, on a read
// connection that never sees the writer's cache.
func dayCount(t *testing.T, s *Store, user string) int64 {
	t.Helper()
	var n int64
	err := s.View(context.Background(), user, func(h policy.History) (err error) {
		n, err = h.CountAfter(w0.Add(-time.Hour))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestWriterCacheFollowsOtherConnections writes one user's requests from two
// stores on one file, as two processes would. Each store's writer caches the
// user's newest row; a write by the other must not leave it stale, or the
// next admission would number its row wrongly and every count would be off.
func TestWriterCacheFollowsOtherConnections(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared.db")
	a, b := openTestStore(t, path), openTestStore(t, path)
	ctx := context.Background()
	at := w0
	for i, s := range []*Store{a, a, b, a, b, b, a} {
		at = at.Add(time.Second)
		if err := s.Admit(ctx, "u", admitAt(at)); err != nil {
			t.Fatalf("admission %d: %v", i, err)
		}
		for _, s := range []*Store{a, b} {
			if got, want := dayCount(t, s, "u"), int64(i+1); got != want {
				t.Fatalf("after admission %d: %d counted, want %d", i, got, want)
			}
		}
	}
	if err := b.Forget(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	// a still caches the newest row b just deleted; history restarts
	// earlier than it.
	if err := a.Admit(ctx, "u", admitAt(w0)); err != nil {
		t.Fatalf("admission after the other store's Forget: %v", err)
	}
	if got := dayCount(t, a, "u"); got != 1 {
		t.Fatalf("after Forget and one admission: %d counted, want 1", got)
	}
}

// TestWriterCacheSurvivesRollback runs an admission and a failing job in one
// batch. The failure rolls the batch back and the admission runs again in a
// new transaction: it must not see its own rolled-back row as the newest.
func TestWriterCacheSurvivesRollback(t *testing.T) {
	s := openTestStore(t, filepath.Join(t.TempDir(), "test.db"))
	ctx := context.Background()
	if err := s.Admit(ctx, "u", admitAt(w0)); err != nil {
		t.Fatal(err)
	}

	// Hold the writer busy so that the next two jobs queue up and form one batch.
	started, release := make(chan struct{}), make(chan struct{})
	go s.writer.do(ctx, func(*writeTx) error { close(started); <-release; return nil })
	<-started
	admitted := make(chan error, 1)
	go func() { admitted <- s.Admit(ctx, "u", admitAt(w0.Add(time.Second))) }()
	waitFor(t, func() bool { return len(s.writer.(*writer).jobs) == 1 })
	boom := errors.New("boom")
	failed := make(chan error, 1)
	go func() {
		failed <- s.writer.do(ctx, func(tx *writeTx) error { return boom })
	}()
	waitFor(t, func() bool { return len(s.writer.(*writer).jobs) == 2 })
	close(release)

	if err := <-failed; !errors.Is(err, boom) {
		t.Fatalf("failing job: %v", err)
	}
	if err := <-admitted; err != nil {
		t.Fatalf("admission batched with a failing job: %v", err)
	}
	if got := dayCount(t, s, "u"); got != 2 {
		t.Fatalf("%d counted, want 2", got)
	}
}

// waitFor yields until cond holds: it waits for the test's goroutines to
// reach a point, not for time to pass.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("goroutines stuck")
		}
		runtime.Gosched()
	}
}

// TestWriterCacheForgetsPrunedRows prunes every row of a user: the writer
// must not go on reporting the deleted newest row as the user's last.
func TestWriterCacheForgetsPrunedRows(t *testing.T) {
	s := openTestStore(t, filepath.Join(t.TempDir(), "test.db"))
	ctx := context.Background()
	if err := s.Admit(ctx, "u", admitAt(w0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(ctx, w0.Add(2*time.Hour)); err != nil || n != 1 {
		t.Fatalf("prune: %d, %v", n, err)
	}
	err := s.Admit(ctx, "u", func(h policy.History) (policy.Admission, error) {
		last, ok, err := h.Last()
		if ok {
			return policy.Admission{}, errors.New("Last() = " + last.String() + " after every row was deleted")
		}
		return policy.Admission{At: w0, Record: true}, err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWriterHistoryMatchesReference admits random requests for a few users
// and, inside each admission, compares what the writer's history answers
// (mostly from its cursors) with a sorted slice: the windows' counts and
// oldest rows, as time moves on in steps of every size, sometimes back,
// with pruning and forgetting in between.
func TestWriterHistoryMatchesReference(t *testing.T) {
	s := openTestStore(t, filepath.Join(t.TempDir(), "test.db"))
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	ref := map[string][]time.Time{}
	users := []string{"a", "b", "c"}
	steps := []time.Duration{time.Microsecond, time.Millisecond, time.Second, 7 * time.Second, 50 * time.Second,
		5 * time.Minute, 40 * time.Minute, 3 * time.Hour, 20 * time.Hour, 30 * time.Hour}
	now := w0
	for i := range 3000 {
		step := steps[rng.IntN(len(steps))]
		if rng.IntN(20) == 0 {
			step = -step // the clock steps back
		}
		now = now.Add(step)
		u := users[rng.IntN(len(users))]
		switch rng.IntN(60) {
		case 0:
			if _, err := s.Prune(ctx, now.Add(-24*time.Hour)); err != nil {
				t.Fatal(err)
			}
			for _, u := range users {
				r := ref[u]
				k := sort.Search(len(r), func(i int) bool { return r[i].After(now.Add(-24 * time.Hour)) })
				ref[u] = r[k:]
			}
			continue
		case 1:
			if err := s.Forget(ctx, u); err != nil {
				t.Fatal(err)
			}
			delete(ref, u)
			continue
		}
		var recorded time.Time
		err := s.Admit(ctx, u, func(h policy.History) (policy.Admission, error) {
			r := ref[u]
			var cutoffs [len(policy.Windows)]time.Time
			for _, w := range policy.Windows {
				cutoffs[w] = now.Add(-w.Duration())
			}
			if err := h.Prefetch(&cutoffs); err != nil {
				return policy.Admission{}, err
			}
			for _, cut := range cutoffs {
				k := sort.Search(len(r), func(i int) bool { return r[i].After(cut) })
				n, err := h.CountAfter(cut)
				if err != nil {
					return policy.Admission{}, err
				}
				if n != int64(len(r)-k) {
					return policy.Admission{}, fmt.Errorf("CountAfter(%v) = %d, want %d", cut, n, len(r)-k)
				}
				if n > 0 {
					first, err := h.NthAfter(cut, 1)
					if err != nil {
						return policy.Admission{}, err
					}
					if !first.Equal(r[k]) {
						return policy.Admission{}, fmt.Errorf("NthAfter(%v, 1) = %v, want %v", cut, first, r[k])
					}
				}
			}
			recorded = now
			if len(r) > 0 && !r[len(r)-1].Before(now) {
				recorded = r[len(r)-1].Add(policy.Resolution)
			}
			return policy.Admission{At: recorded, Record: true}, nil
		})
		if err != nil {
			t.Fatalf("step %d (user %s, %v): %v", i, u, step, err)
		}
		ref[u] = append(ref[u], recorded)
	}
}

// TestCommitDelayWaitsOnlyUnderLoad: a job alone commits at once, and so
// does a full batch; a batch of several, not full, waits for more until
// the delay passes, or until more fill it.
func TestCommitDelayWaitsOnlyUnderLoad(t *testing.T) {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "test.db"), WithCommitDelay(time.Hour), WithMaxBatch(commitSiblings+2))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	lingering := make(chan chan time.Time, 1)
	s.writer.(*writer).linger = func(d time.Duration) (<-chan time.Time, func()) {
		if d != time.Hour {
			t.Errorf("lingering %v, want the hour set", d)
		}
		expire := make(chan time.Time, 1)
		lingering <- expire
		return expire, func() {}
	}
	if err := s.Admit(ctx, "alone", admitAt(w0)); err != nil {
		t.Fatal(err)
	}
	if len(lingering) != 0 {
		t.Fatal("a job alone waited for others")
	}

	// Hold the writer while commitSiblings jobs queue up.
	queue := func(n int) chan error {
		started, release := make(chan struct{}), make(chan struct{})
		go s.writer.do(ctx, func(*writeTx) error { close(started); <-release; return nil })
		<-started
		done := make(chan error, n)
		for i := range n {
			go func() { done <- s.Admit(ctx, fmt.Sprint("u", i), admitAt(w0.Add(time.Duration(n)*time.Second))) }()
		}
		waitFor(t, func() bool { return len(s.writer.(*writer).jobs) == n })
		close(release)
		return done
	}
	done := queue(commitSiblings)
	expire := <-lingering // the writer waits for more
	if len(done) != 0 {
		t.Fatal("a job of the waiting batch was answered")
	}
	expire <- time.Now() // the delay passes
	for range commitSiblings {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}

	// A batch that more jobs fill commits without waiting out the delay.
	done = queue(commitSiblings + 1)
	<-lingering
	go func() { done <- s.Admit(ctx, "last", admitAt(w0)) }()
	for range commitSiblings + 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
