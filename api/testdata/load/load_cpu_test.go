package load

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cpuUse is the CPU time (user and system, from /proc) that one round's
// checks cost, each: the service's processes' and, when the PostgreSQL
// server runs on this machine, its processes'. Zero where not measured.
type cpuUse struct {
	service, server time.Duration
}

// cpuSample is the CPU time used so far by a target's processes and by
// the local PostgreSQL server's.
type cpuSample struct {
	service, server time.Duration
	ok              bool // /proc answered for every process of the target
	serverSeen      bool // a PostgreSQL process runs on this machine
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// sampleCPU samples tg's processes, and the local PostgreSQL server's
// when server is set (tg is on PostgreSQL: otherwise the server's CPU
// is its own idling, no check's).
func sampleCPU(tg *target, server bool) cpuSample {
	s := cpuSample{ok: true}
	for _, pid := range tg.pids() {
		d, err := procCPU(pid)
		if err != nil {
			s.ok = false
			continue
		}
		s.service += d
	}
	if server {
		s.server, s.serverSeen = postgresCPU()
	}
	return s
}

// perCheck is what the checks of a round cost between samples s and
// after.
func (s cpuSample) perCheck(after cpuSample, checks float64) cpuUse {
	if !s.ok || !after.ok || checks <= 0 {
		return cpuUse{}
	}
	u := cpuUse{service: time.Duration(float64(after.service-s.service) / checks)}
	if s.serverSeen && after.serverSeen {
		u.server = time.Duration(float64(after.server-s.server) / checks)
	}
	return u
}

// pids are the target's processes: its own, or its replicas'.
func (tg *target) pids() []int {
	if len(tg.replicas) == 0 {
		return []int{tg.pid()}
	}
	var out []int
	for _, r := range tg.replicas {
		out = append(out, r.pid())
	}
	return out
}

// procCPU reads the user and system time a process has used.
func procCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return statCPU(data)
}

// statCPU reads utime and stime from the text of /proc/<pid>/stat.
func statCPU(data []byte) (time.Duration, error) {
	// Field 2, the command, is in parentheses and may hold anything.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, errors.New("/proc stat without a command")
	}
	f := strings.Fields(string(data[i+1:]))
	// f[0] is field 3; utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the command", len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// postgresCPU sums the CPU time of every process named postgres on this
// machine: a local server's postmaster, background workers and backends.
// Its pools keep their connections, so no backend ends within a round.
func postgresCPU() (time.Duration, bool) {
	paths, _ := filepath.Glob("/proc/[0-9]*/comm")
	var sum time.Duration
	seen := false
	for _, p := range paths {
		comm, err := os.ReadFile(p)
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil {
			continue
		}
		if d, err := procCPU(pid); err == nil {
			sum += d
			seen = true
		}
	}
	return sum, seen
}

// cpuColumns formats a round's CPU a check for a table: the service's,
// and the server's when measured.
func cpuColumns(u cpuUse) string {
	us := func(d time.Duration) string {
		if d <= 0 {
			return "-"
		}
		return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 0, 64)
	}
	return fmt.Sprintf("%8s %8s", us(u.service), us(u.server))
}

func TestStatCPU(t *testing.T) {
	// A command may hold parentheses and spaces; utime 250 and stime 130
	// ticks are 3.8 s.
	line := "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 130 0 0 20 0 9 0 1234 5678 90 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	d, err := statCPU([]byte(line))
	if err != nil || d != 3800*time.Millisecond {
		t.Fatalf("statCPU = %v, %v; want 3.8s", d, err)
	}
	if _, err := statCPU([]byte("4242 (short) S 1 2 3")); err == nil {
		t.Fatal("statCPU accepted a line without the time fields")
	}
}
