package policy

import (
	"fmt"
	"sync"
	"time"
)

// TestClock is a clock that moves only when told, for tests: a minute
// window passes with Advance(time.Minute) rather than a minute's wait.
// Give its Now to everything that reads the time (WithClock, db.WithClock,
// the cleanup). It is also the clock of a service started with
// -test-clock, which GET and POST /v1/test/clock read and move
// (api.Config.TestClock), and of api/guardtest. Every package's tests use
// it.
//
// It may be set backwards; the service then behaves as it does when a
// wall clock is stepped back: requests are recorded one microsecond after
// the latest one of their user, so none is lost from a window and no
// retry_after is negative.
//
// Its times are in UTC and carry no monotonic reading, so that they are
// compared and subtracted by their wall readings only. The zero value
// reads January 1, year 1, UTC; use NewTestClock. A TestClock is safe for
// concurrent use.
type TestClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewTestClock returns a TestClock that reads start until it is moved.
func NewTestClock(start time.Time) *TestClock {
	return &TestClock{now: wallTime(start)}
}

// wallTime is t without its monotonic reading, in UTC.
func wallTime(t time.Time) time.Time { return t.Round(0).UTC() }

// Now returns the clock's current time.
func (c *TestClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock d forward and returns the new time. It panics if
// d is negative, as time.NewTicker does on a bad interval: a negative
// advance is a sign mistaken, and Set moves the clock back on purpose.
func (c *TestClock) Advance(d time.Duration) time.Time {
	if d < 0 {
		panic(fmt.Sprintf("TestClock.Advance(%v): negative duration; use Set to move the clock back", d))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// Set moves the clock to t, forward or back, and returns the new time: t
// in UTC, without its monotonic reading.
func (c *TestClock) Set(t time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = wallTime(t)
	return c.now
}
