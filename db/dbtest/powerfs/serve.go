//go:build linux

package powerfs

import (
	"bufio"
	"os"
	"sync"
	"syscall"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// The environment of a server process (see Mount).
const (
	serveMountEnv   = "POWERFS_SERVE_MOUNTPOINT"
	serveBackingEnv = "POWERFS_SERVE_BACKING"
)

// init turns a program that Mount started into the server of its mount;
// it never returns then.
func init() {
	if mnt := os.Getenv(serveMountEnv); mnt != "" {
		os.Exit(serve(mnt, os.Getenv(serveBackingEnv)))
	}
}

// serve mounts, answers requests on stdin with replies on stdout until
// asked to unmount or until stdin ends (the program that mounted is gone),
// and returns the exit status.
func serve(mountpoint, backing string) int {
	var mu sync.Mutex // one reply at a time
	out := bufio.NewWriter(os.Stdout)
	send := func(r reply) {
		mu.Lock()
		defer mu.Unlock()
		b, _ := json.Marshal(r)
		out.Write(append(b, '\n'))
		out.Flush()
	}
	p, err := mount(mountpoint, backing)
	if err != nil {
		send(reply{Err: err.Error()})
		return 1
	}
	send(reply{})
	dec := jsontext.NewDecoder(bufio.NewReader(os.Stdin))
	for {
		var req request
		if err := json.UnmarshalDecode(dec, &req); err != nil {
			// Whoever mounted is gone: leave, detaching the mount if a
			// program still uses it.
			if p.unmount() != nil {
				syscall.Unmount(mountpoint, syscall.MNT_DETACH)
			}
			return 0
		}
		var r reply
		switch req.Op {
		case "cut":
			report := p.cutNow(req.Tear)
			r.Report = &report
		case "arm":
			cuts := p.arm(req.N, req.Tear)
			go func() {
				report := <-cuts
				send(reply{Event: "cut", Report: &report})
			}()
		case "fail-writes":
			p.failWrites.Store(req.On)
		case "fail-syncs":
			p.failSyncs.Store(req.On)
		case "stats":
			st := p.getStats()
			r.Stats = &st
		case "last-sync":
			r.Time = p.lastSync(req.Path)
		case "last-write-at-zero":
			r.Time = p.lastWriteAtZero(req.Path)
		case "unmount":
			if err := p.unmount(); err != nil {
				r.Err = err.Error()
				break
			}
			send(r)
			return 0
		default:
			r.Err = "powerfs: no such request: " + req.Op
		}
		send(r)
	}
}
