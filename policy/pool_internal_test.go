package policy

import (
	"testing"
	"time"
)

// The pool's copy of a call is told apart from every id a check gives,
// so no client can finish or keep alive the copy alone.
func TestPoolCallIDs(t *testing.T) {
	for i := range 1000 {
		id := newCallID(time.Unix(int64(i)*7919, 0))
		if len(id) != callIDLen || isPoolCallID(id) {
			t.Fatalf("call id %q: length %d, taken for a pool's copy: %v", id, len(id), isPoolCallID(id))
		}
		if p := PoolCallID(id); !isPoolCallID(p) || !ValidCallID(p) {
			t.Fatalf("pool copy %q of %q: not recognized (%v) or not a valid id (%v)", p, id, isPoolCallID(p), ValidCallID(p))
		}
	}
}

// LimitSet and Overrides are indexed by a field's row in
// LimitFields: index must say the row.
func TestLimitFieldIndexIsItsRow(t *testing.T) {
	for i := range LimitFields {
		if got := LimitFields[i].index(); got != i {
			t.Errorf("%s: index %d, row %d", LimitFields[i].Name, got, i)
		}
	}
}
