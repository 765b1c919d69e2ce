package dbtest

import (
	"bytes"
	"sync"
)

// LockedBuffer collects what a service writes (its log, its output) for a
// test to search. Its zero value is empty and ready to use; it is safe for
// the service's writes and the test's reads at once.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p to the buffer.
func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
