//go:build !race

package api_test

// raceEnabled reports whether the race detector is on: it slows SQLite
// (compiled from C to Go) tenfold, so the largest load tests send less.
const raceEnabled = false
