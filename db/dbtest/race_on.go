//go:build race

package dbtest

// RaceEnabled reports whether the race detector is on. It slows SQLite
// (compiled from C to Go) tenfold, so the longest tests do less with it.
const RaceEnabled = true
