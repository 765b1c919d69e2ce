//go:build !unix

package web_test

import "time"

// cpuTime is not measured here; the metric it feeds reads 0.
func cpuTime() time.Duration { return 0 }
