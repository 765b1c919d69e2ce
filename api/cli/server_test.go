package cli

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
	if got := debug.SetGCPercent(100); got != GCPercent {
		t.Errorf("GC percent %d, want %d", got, GCPercent)
	}
	if got := debug.SetMemoryLimit(-1); got != MemoryLimit {
		t.Errorf("memory limit %d, want %d", got, MemoryLimit)
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

func TestCheckTestClockAddr(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:0":    true,
		"127.1.2.3:8080": true,
		"[::1]:8080":     true,
		"localhost:8080": true,
		"LOCALHOST:0":    true,
		":8080":          false,
		"0.0.0.0:8080":   false,
		"[::]:8080":      false,
		"10.0.0.1:8080":  false,
		"example.com:80": false,
		"127.0.0.1":      false, // no port
	} {
		if err := CheckTestClockAddr(addr); (err == nil) != ok {
			t.Errorf("CheckTestClockAddr(%q) = %v, want ok %v", addr, err, ok)
		}
	}
}
