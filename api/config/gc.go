package config

import "runtime/debug"

// Garbage collection settings of the service, unless GOGC or GOMEMLIMIT
// set others. Its live heap is a few megabytes and every check allocates a
// few kilobytes, so with Go's default (collect when the heap doubles) it
// collects many times a second, about a seventh of its CPU time under
// load. Letting the heap grow to five times the live data before a
// collection costs a few more megabytes; the limit makes collections
// frequent again long before memory would grow past it.
const (
	gcPercent   = 400
	memoryLimit = 64 << 20
)

// TuneGC applies the settings above where the environment, read through
// getenv, sets none.
func TuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
}
