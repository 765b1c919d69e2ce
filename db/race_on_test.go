//go:build race

package db_test

// raceEnabled reports whether the race detector is on: it slows SQLite
// (compiled from C to Go) tenfold, so long randomized tests run fewer rounds.
const raceEnabled = true
