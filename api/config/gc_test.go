package config

import (
	"runtime/debug"
	"testing"
)

func TestTuneGCLeavesWhatTheEnvironmentSets(t *testing.T) {
	percent, limit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetGCPercent(percent); debug.SetMemoryLimit(limit) })

	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	debug.SetGCPercent(100)
	TuneGC(getenv)
	if got := debug.SetGCPercent(100); got != gcPercent {
		t.Errorf("GC percent %d, want %d", got, gcPercent)
	}
	if got := debug.SetMemoryLimit(-1); got != memoryLimit {
		t.Errorf("memory limit %d, want %d", got, memoryLimit)
	}

	env["GOGC"], env["GOMEMLIMIT"] = "50", "1GiB"
	debug.SetGCPercent(50)
	debug.SetMemoryLimit(1 << 30)
	TuneGC(getenv)
	if got := debug.SetGCPercent(100); got != 50 {
		t.Errorf("with GOGC set: GC percent %d, want it left at 50", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 1<<30 {
		t.Errorf("with GOMEMLIMIT set: memory limit %d, want it left at 1 GiB", got)
	}
}
