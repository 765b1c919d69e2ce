package db

import (
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// hang bounds how long a test waits for its own goroutines before it
// reports them stuck; a correct run never comes near it.
const hang = 10 * time.Second

// waitUntil yields until cond holds. It waits for goroutines of the test to
// reach a point, not for time to pass.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hang)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("stuck waiting until %s", what)
		}
		runtime.Gosched()
	}
}

// recv returns the next value from ch, failing the test if none comes.
func recv[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(hang):
		t.Fatalf("stuck waiting for %s", what)
		panic("unreachable")
	}
}

// A read that started before a write must not answer a call made after the
// write: the call waits for the next read, and that one read answers every
// call that waited.
func TestVersionReaderAnswersOnlyFromReadsStartedAfterTheCall(t *testing.T) {
	ctx := context.Background()
	var current atomic.Int64
	current.Store(1)
	started := make(chan int64)
	release := make(chan struct{})
	r := &versionReader{query: func(context.Context) (int64, error) {
		v := current.Load() // the snapshot a read transaction would see
		started <- v
		<-release
		return v, nil
	}}
	read := func() <-chan int64 {
		ch := make(chan int64, 1)
		go func() {
			v, err := r.read(ctx)
			if err != nil {
				t.Error(err)
			}
			ch <- v
		}()
		return ch
	}

	first := read()
	if v := recv(t, "the first read", started); v != 1 {
		t.Fatalf("first read saw %d", v)
	}
	current.Store(2) // a write commits while the first read is in flight
	second, third := read(), read()
	waitUntil(t, "two calls wait", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.waiting == 2 })

	release <- struct{}{}
	if got := recv(t, "the first call", first); got != 1 {
		t.Errorf("first call got %d, want 1", got)
	}
	select {
	case v := <-started:
		if v != 2 {
			t.Fatalf("second read saw %d, want 2", v)
		}
	case v := <-second:
		t.Fatalf("second call got %d without a read that started after it", v)
	case <-time.After(hang):
		t.Fatal("stuck waiting for the second read")
	}
	release <- struct{}{}
	if got, want := recv(t, "the second call", second), int64(2); got != want {
		t.Errorf("second call got %d, want %d: it was answered by a read that started before it", got, want)
	}
	if got, want := recv(t, "the third call", third), int64(2); got != want {
		t.Errorf("third call got %d, want %d", got, want)
	}
	if got, want := r.started, uint64(2); got != want {
		t.Errorf("%d reads for three calls, want %d: the waiting calls should share one", got, want)
	}
}

func TestVersionReaderReportsErrorsAndRecovers(t *testing.T) {
	ctx := context.Background()
	fail := errors.New("disk I/O error")
	var calls atomic.Int64
	r := &versionReader{query: func(context.Context) (int64, error) {
		if calls.Add(1) == 1 {
			return 0, fail
		}
		return 7, nil
	}}
	if _, err := r.read(ctx); !errors.Is(err, fail) {
		t.Fatalf("err = %v, want %v", err, fail)
	}
	if v, err := r.read(ctx); err != nil || v != 7 {
		t.Fatalf("after a failed read: %d, %v; want 7", v, err)
	}
}

// BenchmarkTier measures what keeping the tier cache current costs a check:
// "cache" is the lookup alone, as it was before other processes' writes had
// to be noticed; "current" adds the read of tier_version.
func BenchmarkTier(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	lookups := map[string]func() error{
		"cache": func() error {
			if _, ok := s.tiers.Load().byName["pro"]; !ok {
				return errors.New("no tier pro")
			}
			return nil
		},
		"current": func() error { _, err := s.Tier(ctx, "pro"); return err },
	}
	for _, name := range []string{"cache", "current"} {
		lookup := lookups[name]
		b.Run(name+"/serial", func(b *testing.B) {
			for b.Loop() {
				if err := lookup(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := lookup(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
	b.Run("reads per call", func(b *testing.B) {
		before := s.tierVersion.started
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.Tier(ctx, "pro"); err != nil {
					b.Error(err)
					return
				}
			}
		})
		s.tierVersion.mu.Lock()
		reads := s.tierVersion.started - before
		s.tierVersion.mu.Unlock()
		b.ReportMetric(float64(reads)/float64(b.N), "reads/op")
	})
}

// A tier change that committed is reported as made, even when the caller's
// context ends between the commit and the answer: a caller told it failed
// would retry a change that was made (and a create-only retry would then
// fail with a conflict).
func TestUpdateTiersReportsACommittedChange(t *testing.T) {
	s := openTestStore(t, filepath.Join(t.TempDir(), "t.db"))
	bg := context.Background()
	held, release := make(chan struct{}), make(chan struct{})
	go s.writer.do(bg, func(*writeTx) error { close(held); <-release; return nil }) // holds the writer
	recv(t, "the writer to hold", held)

	ctx, cancel := context.WithCancel(bg)
	errc := make(chan error, 1)
	go func() {
		_, err := s.UpdateTiers(ctx, policy.TierUpdate{At: w0, Source: policy.SourceAPI,
			Put: []policy.Tier{{Name: "gold", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(1)), policy.RequestsPerHour: new(int64(1)), policy.RequestsPerDay: new(int64(1))}}}})
		errc <- err
	}()
	waitUntil(t, "the change queues", func() bool { return len(s.writer.(*writer).jobs) == 1 })
	// The caller goes away while its change is in the transaction: a job of
	// the same batch cancels it, so the moment is exact.
	go s.writer.do(bg, func(*writeTx) error { cancel(); return nil })
	waitUntil(t, "the cancel queues", func() bool { return len(s.writer.(*writer).jobs) == 2 })
	close(release)

	if err := recv(t, "UpdateTiers", errc); err != nil {
		t.Fatalf("UpdateTiers reported %v for a change it committed", err)
	}
	if got, err := s.Tier(bg, "gold"); err != nil || got.Limits.Value(policy.RequestsPerMinute) != 1 {
		t.Fatalf("gold after the change: %+v, %v", got, err)
	}
}
