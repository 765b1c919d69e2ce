package api

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestTokenComparisonTimeIgnoresContent times wrong guesses of a 1 MiB
// token that differ from it at the first byte and at the last. A comparison
// that stops at the first difference takes about no time for the first and
// a whole pass over the token for the second; the hashed constant-time one
// takes the same for both. The token is huge so that the difference, were
// there one, would dwarf the noise of a shared machine.
func TestTokenComparisonTimeIgnoresContent(t *testing.T) {
	if testing.Short() {
		t.Skip("timing")
	}
	secret := strings.Repeat("s", 1<<20)
	s := NewServer(Config{AdminToken: secret, APIToken: secret, Logger: slog.New(slog.DiscardHandler)})
	early := "x" + secret[1:]
	late := secret[:len(secret)-1] + "x"
	for name, valid := range map[string]func(string) bool{"admin": s.validAdminToken, "API": s.validAPIToken} {
		if !valid(secret) || valid(early) || valid(late) {
			t.Fatalf("%s token: the comparison is wrong", name)
		}
		var tEarly, tLate []time.Duration
		for range 31 {
			for _, c := range []struct {
				guess string
				into  *[]time.Duration
			}{{early, &tEarly}, {late, &tLate}} {
				start := time.Now()
				valid(c.guess)
				*c.into = append(*c.into, time.Since(start))
			}
		}
		slices.Sort(tEarly)
		slices.Sort(tLate)
		e, l := tEarly[len(tEarly)/2], tLate[len(tLate)/2]
		if ratio := float64(l) / float64(max(e, 1)); ratio > 3 || ratio < 1.0/3 {
			t.Fatalf("%s token: a guess wrong at the last byte takes %v, one wrong at the first %v", name, l, e)
		}
	}
}
