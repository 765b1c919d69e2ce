package db

import (
	"slices"
	"testing"
	"time"
)

func TestParseTimes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int64
	}{
		{"", nil},
		{"0", []int64{0}},
		{"1764547200000000", []int64{1764547200000000}},
		{"1,22,333", []int64{1, 22, 333}},
		{"999999999999999999", []int64{999999999999999999}},
	} {
		got, err := parseTimes(nil, []byte(tc.in))
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("parseTimes(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	// Appends to what it is given.
	if got, err := parseTimes([]int64{7}, []byte("8,9")); err != nil || !slices.Equal(got, []int64{7, 8, 9}) {
		t.Errorf("parseTimes onto [7] = %v, %v", got, err)
	}
	for _, in := range []string{",", "1,", ",1", "1,,2", "-1", "1.5", "1 ", "x", "1000000000000000000"} {
		if got, err := parseTimes(nil, []byte(in)); err == nil {
			t.Errorf("parseTimes(%q) = %v, want an error", in, got)
		}
	}
}

func TestPacer(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := newPacer(start)
	// Within a turn of work: no rest, however far ahead of the rate.
	if d := p.rest(start.Add(pacerTurn/2), previewRate); d != 0 {
		t.Fatalf("rest within a turn = %v, want 0", d)
	}

	// Behind the rate: rests as long as it worked.
	p = newPacer(start)
	now := start.Add(3 * time.Millisecond)
	if d := p.rest(now, 10); d != 3*time.Millisecond {
		t.Fatalf("rest after 3ms of work behind the rate = %v, want 3ms", d)
	}
	p.rested(now.Add(3 * time.Millisecond))

	// Ahead of the rate: rests until the rows replayed are due. 10 rows
	// so far, then a second's worth at 8ms: due at 1s and 10 rows.
	now = now.Add(5 * time.Millisecond)
	due := start.Add(time.Second + time.Duration(10*int64(time.Second)/previewRate))
	if d := p.rest(now, previewRate); d != due.Sub(now) {
		t.Fatalf("rest ahead of the rate = %v, want %v", d, due.Sub(now))
	}
}
