package policy

import (
	"sync"
	"time"
)

const (
	// MaxAdminFailures is how many wrong admin tokens one client may send
	// within AdminFailureWindow before its further attempts are refused
	// until the window passes.
	MaxAdminFailures = 5
	// AdminFailureWindow is the period over which wrong admin tokens are
	// counted.
	AdminFailureWindow = 15 * time.Minute
)

// throttle limits wrong tokens per client: after MaxAdminFailures within
// AdminFailureWindow, attempts are refused until the oldest of them leaves
// the window. It is safe for concurrent use; its zero value is ready.
type throttle struct {
	mu        sync.Mutex
	failures  map[string][]time.Time // by client, oldest first
	lastSweep time.Time
}

// attempt reports whether client may try a token at now, and if not, how
// long until it may. An allowed attempt counts as a failure until succeeded
// is called, so that concurrent attempts cannot slip past the limit while
// their tokens are being compared.
func (t *throttle) attempt(client string, now time.Time) (wait time.Duration, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failures == nil {
		t.failures = make(map[string][]time.Time)
	}
	// Sweep when many clients are tracked, at most once a minute, so that
	// attempts from many addresses cannot make each attempt cost them all.
	if len(t.failures) > 4096 && now.Sub(t.lastSweep) >= time.Minute {
		t.sweep(now)
		t.lastSweep = now
	}
	fs := recentFailures(t.failures[client], now)
	if len(fs) >= MaxAdminFailures {
		t.failures[client] = fs
		return fs[len(fs)-MaxAdminFailures].Add(AdminFailureWindow).Sub(now), false
	}
	t.failures[client] = append(fs, now)
	return 0, true
}

// succeeded forgets client's failures: its token was right.
func (t *throttle) succeeded(client string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.failures, client)
}

// sweep drops the clients whose failures have all left the window.
func (t *throttle) sweep(now time.Time) {
	for c, fs := range t.failures {
		if len(recentFailures(fs, now)) == 0 {
			delete(t.failures, c)
		}
	}
}

// recentFailures returns the failures in fs still inside the window at now.
func recentFailures(fs []time.Time, now time.Time) []time.Time {
	cutoff := now.Add(-AdminFailureWindow)
	i := 0
	for i < len(fs) && !fs[i].After(cutoff) {
		i++
	}
	return fs[i:]
}
