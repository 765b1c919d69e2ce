package policy

import (
	"strconv"
	"testing"
	"time"
)

func TestKeyUsesStaysBounded(t *testing.T) {
	var u keyUses
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	// More keys used within one minute than it remembers: each new one is
	// still recorded, and the memory never grows past its bound.
	for i := range maxKeyUses + 100 {
		if !u.due("key_"+strconv.Itoa(i), nil, now) {
			t.Fatalf("key %d: first use not due", i)
		}
		if len(u.at) > maxKeyUses {
			t.Fatalf("after %d keys: %d remembered, bound %d", i+1, len(u.at), maxKeyUses)
		}
	}
	if u.due("key_"+strconv.Itoa(maxKeyUses+99), nil, now) {
		t.Fatal("the last key's second use within the minute is due")
	}
	// A minute later the old entries are swept, not evicted at random.
	later := now.Add(KeyUseInterval)
	if !u.due("fresh", nil, later) {
		t.Fatal("a new key a minute later is not due")
	}
	if len(u.at) != 1 {
		t.Fatalf("after the sweep %d remembered, want 1", len(u.at))
	}
}
