//go:build unix

package dbtest

import (
	"syscall"
	"time"
)

// CPUTime returns the CPU time the process has used, user and system. On
// a machine other work shares, CPU time per operation varies far less than
// wall time per operation, so benchmarks report it beside their timings.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
