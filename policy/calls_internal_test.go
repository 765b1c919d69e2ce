package policy

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestNewCallID: over many instants, from 1970 past the year the time
// wraps, an id is 22 valid characters and never begins with '-'; ids sort
// as their instants do; and the 14 random characters take every character
// of the alphabet, so they keep their 84 bits.
func TestNewCallID(t *testing.T) {
	const wrap = int64(1) << 47 // milliseconds
	instants := []time.Time{
		time.UnixMilli(0), time.UnixMilli(-1), time.Unix(-1e12, 0),
		time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		time.UnixMilli(1<<42 - 1), time.UnixMilli(1 << 42), // '0' to '1', in 2109
		time.UnixMilli(wrap - 1), time.UnixMilli(wrap), time.UnixMilli(1<<48 + 5),
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10_000 {
		instants = append(instants, time.UnixMilli(r.Int64N(2*wrap)))
	}
	firsts := map[byte]bool{}
	for _, now := range instants {
		id := newCallID(now)
		if len(id) != 22 || !ValidCallID(id) || id[0] == '-' {
			t.Fatalf("newCallID(%v) = %q", now, id)
		}
		firsts[id[0]] = true
	}
	if len(firsts) != 32 {
		t.Errorf("first characters: %d seen, want all 32", len(firsts))
	}

	// Ids sort as their instants, within the 47 bits.
	prev := ""
	for ms := int64(0); ms < wrap; ms = ms*3 + 1 + ms/7 {
		id := newCallID(time.UnixMilli(ms))
		if id[:8] <= prev {
			t.Fatalf("at %d ms: %q sorts before %q", ms, id[:8], prev)
		}
		prev = id[:8]
	}

	// At one instant, every id differs, and each random position takes
	// every character.
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	seen := map[string]bool{}
	chars := make([]map[byte]bool, 22)
	for i := range chars {
		chars[i] = map[byte]bool{}
	}
	for range 20_000 {
		id := newCallID(now)
		if seen[id] {
			t.Fatalf("%q twice", id)
		}
		seen[id] = true
		if !strings.HasPrefix(id, newCallID(now)[:8]) {
			t.Fatalf("%q: the time part moved", id)
		}
		for i := 8; i < 22; i++ {
			chars[i][id[i]] = true
		}
	}
	for i := 8; i < 22; i++ {
		if len(chars[i]) != 64 {
			t.Errorf("position %d took %d characters, want 64", i, len(chars[i]))
		}
	}
}
