//go:build !race

package db

// raceDetector reports whether the race detector is on, for this package's
// internal tests (raceEnabled is the external tests').
const raceDetector = false
