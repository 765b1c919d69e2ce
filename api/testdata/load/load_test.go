package load

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

// The load benchmark builds the service from the module's root and runs
// the real binary and two baselines as
// separate processes on loopback, and drives them with the same load
// generator in alternating rounds. The baselines are one program,
// api/testdata/baseline, which the test builds: an Echo v4 handler that
// binds the same body and does nothing else, or with -bare (the bare
// durable handler) only queues one row to a single writer that commits
// batches to SQLite with synchronous=FULL and answers after COMMIT, the
// ceiling of this design. It is opt-in:
//
//	POLICYGUARD_LOAD=1 go test -count=1 -run '^TestLoad$' -v -timeout 1200s ./api/testdata/load
//
// It lives under testdata so that go test ./... neither runs nor compiles
// it: it is run by its path only.
//
// The throughput and single-client rounds are driven by wrk (wrk -t1, a Lua
// script rotating the user id in the body), as peers measure a service,
// when wrk is installed; otherwise, or with POLICYGUARD_LOAD_GEN=go, by the
// Go generator below, which costs more CPU per request than wrk on the same
// cores and so holds the baselines down: its ratios are higher and are not
// the figures of record. The flatness and cleanup phases, which count
// checks and time each one, always use the Go generator.
//
// With a PostgreSQL server (dbtest.Postgres: POLICYGUARD_TEST_POSTGRES, by
// default the local one), the same rounds also drive the service on
// PostgreSQL as 1, 2 and 3 replicas, and the flatness test runs on the
// 1-replica set too (load_pg_test.go); without one, that part is left out.
//
// The accounts phase (load_accounts_test.go) compares checks of users in
// accounts, each also decided against its account's pooled limits, with
// checks of users in none, on SQLite FULL.
//
// Last, the gateway phase (load_gateway_test.go) measures the service as
// a gateway on SQLite FULL beside httputil.ReverseProxy, both forwarding
// chat completions to a fast fake upstream (api/testdata/fakeupstream,
// which with -proxy is the plain proxy too): throughput at the same
// connections, the p50 it adds at one connection, and when a stream's
// first event reaches the client.
//
// POLICYGUARD_LOAD=short runs every phase briefly with smaller data, for CI.
// Targets are printed beside the figures; only failures (errors, wrong
// answers, a cleanup that never finishes) fail the test.

// loadConfig sizes one run.
type loadConfig struct {
	round       time.Duration // length of a timed round
	rounds      int           // rounds per target, alternated
	conns       int           // connections of the throughput rounds
	users       int           // rotating users
	heavy       int           // day-window size of the flatness test's heavy user
	flatChecks  int           // checks per flatness round
	bigUsers    int           // users of the cleanup and memory phase
	bigPerUser  int           // expired rows per big user
	gatewayKeys int           // rotating gateway keys, one per user, of the gateway phase
	gatewayFill int           // calls through the gateway per key before its rounds
	streams     int           // streamed requests per target of the gateway phase
	gatewayOnly bool          // the gateway phase alone
}

func loadConfigFromEnv() (loadConfig, bool) {
	switch os.Getenv("POLICYGUARD_LOAD") {
	case "":
		return loadConfig{}, false
	case "short":
		return loadConfig{round: time.Second, rounds: 1, conns: 64, users: 10_000, heavy: 10_000,
			flatChecks: 500, bigUsers: 1_000, bigPerUser: 100, gatewayKeys: 200, gatewayFill: 20, streams: 50}, true
	case "gateway":
		// The gateway phase alone, over ten rounds: whether the gateway
		// holds its speed as its database fills.
		return loadConfig{round: 5 * time.Second, rounds: 10, conns: 64, gatewayKeys: 1_000, gatewayFill: 250, streams: 200, gatewayOnly: true}, true
	default:
		// Rounds of wrk's -d5s: other work on the machine comes and goes,
		// and the median of neighbouring rounds sees through it best.
		return loadConfig{round: 5 * time.Second, rounds: 5, conns: 64, users: 10_000, heavy: 100_000,
			flatChecks: 3_000, bigUsers: 10_000, bigPerUser: 100, gatewayKeys: 1_000, gatewayFill: 250, streams: 200}, true
	}
}

const loadTier = "bench"

func TestLoad(t *testing.T) {
	cfg, ok := loadConfigFromEnv()
	if !ok {
		t.Skip("set POLICYGUARD_LOAD=1 (or short) to run the load benchmark")
	}
	dir := t.TempDir()
	bin, baseline, fake := goBuild(t, "../../..", "policyguard"), goBuild(t, "../baseline", "baseline"), goBuild(t, "../fakeupstream", "fakeupstream")
	out := os.Stdout
	fmt.Fprintf(out, "\nload benchmark: %s, %d CPUs (%s), GOMAXPROCS %d, %s\n",
		cpuModel(), runtime.NumCPU(), runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.Version())
	if cfg.gatewayOnly {
		wrk, _ := exec.LookPath("wrk")
		gatewayLoad(t, out, cfg, bin, fake, dir, wrk)
		return
	}
	fmt.Fprintf(out, "rounds of %v, %d per target, alternated; %d connections; %d rotating users\n\n",
		cfg.round, cfg.rounds, cfg.conns, cfg.users)
	if cfg.rounds == 1 {
		fmt.Fprintf(out, "short run: it checks that every phase works; its samples are too small to judge the targets\n\n")
	}

	// The flatness test's heavy user is seeded before the FULL service starts.
	fullDB := filepath.Join(dir, "full.db")
	start := time.Now()
	seed(t, fullDB, []string{"heavy"}, cfg.heavy, time.Now().Add(-24*time.Hour+time.Minute), (24*time.Hour-2*time.Minute)/time.Duration(cfg.heavy))
	fmt.Fprintf(out, "seeded %d requests for the heavy user in %v\n", cfg.heavy, time.Since(start).Round(time.Millisecond))

	full := startService(t, bin, dir, fullDB, "FULL", time.Hour)
	normal := startService(t, bin, dir, filepath.Join(dir, "normal.db"), "NORMAL", time.Hour)
	metered := startService(t, bin, dir, filepath.Join(dir, "metered.db"), "FULL", time.Hour)
	metered.meter(t)
	spend := startService(t, bin, dir, filepath.Join(dir, "spend.db"), "FULL", time.Hour)
	spend.spend(t)
	monthly := startService(t, bin, dir, filepath.Join(dir, "monthly.db"), "FULL", time.Hour)
	monthly.monthly(t)
	inRun := startService(t, bin, dir, filepath.Join(dir, "run.db"), "FULL", time.Hour)
	inRun.inRuns(t)
	base := startBaseline(t, baseline, "do-nothing handler")
	bare := startBaseline(t, baseline, "bare durable FULL", "-bare", filepath.Join(dir, "bare.db"))
	pg := startPostgres(t, out, cfg, bin, dir) // nil without a server
	users := make([]string, cfg.users)
	for i := range users {
		users[i] = fmt.Sprintf("user-%05d", i)
	}
	gen := newGenerator(t, dir, users)
	fmt.Fprintf(out, "load generator: %s\n", gen.name())

	// Throughput and latency at cfg.conns connections.
	targets := []*target{base, bare, full, normal, metered, spend, monthly, inRun}
	if pg != nil {
		targets = append(targets, pg.sets[:]...)
	}
	for _, tg := range targets {
		gen.run(t, tg, cfg.conns, time.Second) // warm up
	}
	results := map[*target][]result{}
	for range cfg.rounds {
		for _, tg := range targets {
			onPG := pg.holds(tg)
			before := sampleCPU(tg, onPG)
			r := gen.run(t, tg, cfg.conns, cfg.round)
			r.cpu = before.perCheck(sampleCPU(tg, onPG), r.checks)
			results[tg] = append(results[tg], r)
		}
	}
	fmt.Fprintf(out, "\nPOST /v1/check, %d connections, %d rotating users, %s (median of %d rounds);\n"+
		"CPU a check in µs from /proc: the target's processes, and the PostgreSQL server's when it runs here (all of its processes)\n",
		cfg.conns, cfg.users, gen.name(), cfg.rounds)
	fmt.Fprintf(out, "%-26s %10s %8s %8s %8s %8s %8s %8s %8s   %s\n", "target", "req/s", "p50", "p90", "p99", "p99.9", "max", "CPU", "server", "req/s per round")
	for _, tg := range targets {
		m := medianResult(results[tg])
		fmt.Fprintf(out, "%-26s %10.0f %8s %8s %8s %8s %8s %s   %v\n", tg.name, m.rps, ms(m.p50), ms(m.p90), ms(m.p99), ms(m.p999), ms(m.max), cpuColumns(m.cpu), rates(results[tg]))
	}
	for _, r := range []struct {
		name   string
		a, b   *target
		target float64 // 0: none
	}{
		{"service FULL / do-nothing", full, base, 0.42},
		{"bare durable / do-nothing", bare, base, 0},
		{"service FULL / bare durable", full, bare, 0.9},
		{"service NORMAL / do-nothing", normal, base, 0},
	} {
		ratio := medianRatio(results[r.a], results[r.b])
		fmt.Fprintf(out, "%-28s %.3fx per round %v", r.name+":", ratio, ratios(results[r.a], results[r.b]))
		if r.target > 0 {
			fmt.Fprintf(out, "   target >= %.2fx: %s", r.target, verdict(ratio >= r.target))
		}
		fmt.Fprintln(out)
	}
	meterCost := medianRatio(results[full], results[metered])
	fmt.Fprintf(out, "a metered check costs %.3fx an unmetered one per round %v   target <= 1.25x: %s\n",
		meterCost, ratios(results[full], results[metered]), verdict(meterCost <= 1.25))
	spendCost := medianRatio(results[metered], results[spend])
	fmt.Fprintf(out, "a check with spend limits costs %.3fx a metered one with token limits only per round %v   target <= 1.25x: %s\n",
		spendCost, ratios(results[metered], results[spend]), verdict(spendCost <= 1.25))
	monthCost := medianRatio(results[spend], results[monthly])
	fmt.Fprintf(out, "a check with month limits costs %.3fx the same tier without them per round %v   target <= 1.25x: %s\n",
		monthCost, ratios(results[spend], results[monthly]), verdict(monthCost <= 1.25))
	// wrk may skip a script's first request; user-00100 is in every round.
	if day, steps := inRun.dayCount(t, "user-00100"), inRun.runRequests(t, "r-user-00100"); day == 0 || steps != int64(day) {
		t.Errorf("%s: user-00100 made %d checks today, and its run counts %d: the checks were not in runs", inRun.name, day, steps)
	}
	runCost := medianRatio(results[metered], results[inRun])
	fmt.Fprintf(out, "a check in a run costs %.3fx one outside a run on the same tier per round %v   target <= 1.3x: %s\n",
		runCost, ratios(results[metered], results[inRun]), verdict(runCost <= 1.3))
	cost := 1 - medianRatio(results[full], results[normal])
	fmt.Fprintf(out, "FULL costs %.1f%% of NORMAL's throughput   target <= 10%%: %s\n", 100*cost, verdict(cost <= 0.10))
	p99 := medianResult(results[full]).p99
	fmt.Fprintf(out, "FULL p99 at %d connections: %s   target < 25 ms: %s\n", cfg.conns, ms(p99), verdict(p99 < 25*time.Millisecond))
	if pg != nil {
		pg.ratios(out, results, full, base)
		pg.busyUser(t, out, cfg, dir)
	}

	// One client: latency of a lone check. A set of replicas adds nothing
	// here to one replica, whose one connection goes to one process.
	single := map[*target][]result{}
	singleTargets := []*target{base, bare, full, normal, metered}
	if pg != nil {
		singleTargets = append(singleTargets, pg.sets[0])
	}
	for range cfg.rounds {
		for _, tg := range singleTargets {
			single[tg] = append(single[tg], gen.run(t, tg, 1, max(cfg.round/2, time.Second)))
		}
	}
	fmt.Fprintf(out, "\nPOST /v1/check, 1 connection, %s (median of %d rounds)\n", gen.name(), cfg.rounds)
	fmt.Fprintf(out, "%-26s %10s %8s %8s %8s\n", "target", "req/s", "p50", "p99", "max")
	for _, tg := range singleTargets {
		m := medianResult(single[tg])
		fmt.Fprintf(out, "%-26s %10.0f %8s %8s %8s\n", tg.name, m.rps, ms(m.p50), ms(m.p99), ms(m.max))
	}
	p50 := medianResult(single[full]).p50
	fmt.Fprintf(out, "FULL single-client median: %s   target < 1 ms: %s\n", ms(p50), verdict(p50 < time.Millisecond))

	flatness(t, out, cfg, full)
	if pg != nil {
		flatness(t, out, cfg, pg.sets[0])
		pg.stop(t)
	}
	full.stop(t)
	normal.stop(t)
	metered.stop(t)
	spend.stop(t)
	monthly.stop(t)
	inRun.stop(t)
	base.stop(t)
	bare.stop(t)

	cleanupAndMemory(t, out, cfg, bin, dir, gen.bodies)
	accountsLoad(t, out, cfg, gen, bin, dir)
	gatewayLoad(t, out, cfg, bin, fake, dir, gen.wrk)
}

// flatness compares checks of a user with cfg.heavy requests in the day
// window against a user with 10, serially and at cfg.conns connections.
// Each light round uses a new user seeded with 10 checks; the light user
// gains the round's checks as it runs, so the comparison favours it.
func flatness(t *testing.T, out io.Writer, cfg loadConfig, full *target) {
	t.Helper()
	heavy := checkRequests([]string{"heavy"}, checkBody)
	before := full.dayCount(t, "heavy")
	var res [2][2][]result // [conns=1, conns=N][light, heavy]
	for r := range cfg.rounds {
		for ci, conns := range []int{1, cfg.conns} {
			light := fmt.Sprintf("light-%d-%d", r, conns)
			lightReq := checkRequests([]string{light}, checkBody)
			full.run(t, 1, 0, 10, lightReq)
			res[ci][0] = append(res[ci][0], full.run(t, conns, 0, cfg.flatChecks, lightReq))
			res[ci][1] = append(res[ci][1], full.run(t, conns, 0, cfg.flatChecks, heavy))
		}
	}
	after := full.dayCount(t, "heavy")
	fmt.Fprintf(out, "\nFlat in history, %s: %d checks per round, light user starts at 10 requests, heavy at %d (%d at the end)\n",
		full.name, cfg.flatChecks, before, after)
	fmt.Fprintf(out, "%-26s %10s %8s %8s\n", "", "req/s", "p50", "p99")
	for ci, conns := range []int{1, cfg.conns} {
		for hi, name := range []string{"light", "heavy"} {
			m := medianResult(res[ci][hi])
			fmt.Fprintf(out, "%-26s %10.0f %8s %8s\n", fmt.Sprintf("%s, %d conn", name, conns), m.rps, ms(m.p50), ms(m.p99))
		}
		r := 1 / medianRatio(res[ci][1], res[ci][0])
		fmt.Fprintf(out, "heavy/light cost, %d conn: %.3fx per round %v   target <= 1.3x: %s\n",
			conns, r, ratios(res[ci][0], res[ci][1]), verdict(r <= 1.3))
	}
}

// cleanupAndMemory runs a service over cfg.bigUsers users each with
// cfg.bigPerUser expired requests, checks those users at cfg.conns
// connections, and lets the cleanup job delete the expired rows in the
// middle of the load. It compares p99 before and during the cleanup and
// reports the peak resident memory.
func cleanupAndMemory(t *testing.T, out io.Writer, cfg loadConfig, bin, dir string, bodies [][]byte) {
	path := filepath.Join(dir, "big.db")
	users := make([]string, cfg.bigUsers)
	for i := range users {
		users[i] = fmt.Sprintf("user-%05d", i)
	}
	start := time.Now()
	seed(t, path, users, cfg.bigPerUser, start.Add(-26*time.Hour), time.Hour/time.Duration(cfg.bigPerUser))
	expired := int64(cfg.bigUsers * cfg.bigPerUser)
	fmt.Fprintf(out, "\nseeded %d expired requests across %d users in %v\n",
		expired, cfg.bigUsers, time.Since(start).Round(time.Millisecond))

	// The first cleanup runs one interval after start: after a warm-up,
	// long enough for the service to have seen every user once, and a
	// full round without it.
	warmUp := 3 * time.Second
	interval := warmUp + cfg.round + 2*time.Second
	svc := startService(t, bin, dir, path, "FULL", interval)
	defer svc.stop(t)
	loadStart := time.Now()
	warm := loadStart.Add(warmUp)

	var mem memSampler
	mem.start(svc.pid())
	// Load in slices until the cleanup has finished and a round has run after it.
	var samples []sample
	var deleted int64
	var cleanStart, cleanEnd time.Time
	deadline := loadStart.Add(interval + 2*time.Minute)
	for time.Now().Before(deadline) {
		res := svc.run(t, cfg.conns, 500*time.Millisecond, 0, bodies)
		samples = append(samples, res.samples...)
		if cleanEnd.IsZero() {
			deleted, cleanStart, cleanEnd = svc.cleanupLogged(t)
		} else if time.Since(cleanEnd) > cfg.round {
			break
		}
	}
	peak := mem.stop()
	if cleanEnd.IsZero() {
		t.Fatalf("cleanup did not finish within %v of starting", 2*time.Minute)
	}
	if deleted != expired {
		t.Errorf("cleanup deleted %d rows, want %d", deleted, expired)
	}
	var before, during, after []time.Duration
	for _, s := range samples {
		switch {
		case s.start.Before(warm):
		case s.start.Before(cleanStart):
			before = append(before, s.latency)
		case s.start.Before(cleanEnd):
			during = append(during, s.latency)
		default:
			after = append(after, s.latency)
		}
	}
	fmt.Fprintf(out, "cleanup deleted %d expired rows in %v while checks ran   target < 1 min: %s\n",
		deleted, cleanEnd.Sub(cleanStart).Round(time.Millisecond), verdict(cleanEnd.Sub(cleanStart) < time.Minute))
	fmt.Fprintf(out, "%-24s %8s %10s %8s %8s %8s\n", "checks", "count", "req/s", "p50", "p99", "max")
	for _, p := range []struct {
		name string
		lat  []time.Duration
		span time.Duration
	}{
		{"before cleanup", before, cleanStart.Sub(warm)},
		{"during cleanup", during, cleanEnd.Sub(cleanStart)},
		{"after cleanup", after, 0},
	} {
		slices.Sort(p.lat)
		rps := "-"
		if p.span > 0 {
			rps = fmt.Sprintf("%.0f", float64(len(p.lat))/p.span.Seconds())
		}
		fmt.Fprintf(out, "%-24s %8d %10s %8s %8s %8s\n", p.name, len(p.lat), rps, ms(pct(p.lat, 50)), ms(pct(p.lat, 99)), ms(pct(p.lat, 100)))
	}
	if len(before) == 0 || len(during) == 0 {
		t.Fatalf("no checks before (%d) or during (%d) the cleanup", len(before), len(during))
	}
	r := float64(pct(during, 99)) / float64(pct(before, 99))
	fmt.Fprintf(out, "p99 during / before cleanup: %.2fx   target <= 2x: %s\n", r, verdict(r <= 2))
	fmt.Fprintf(out, "peak resident memory with %d stored requests across %d users, before, during and after the cleanup: %.1f MB   target < 100 MB: %s\n",
		expired, cfg.bigUsers, float64(peak)/(1<<20), verdict(peak < 100<<20))
}

// seed records perUser requests for each user directly in the database at
// path, the first at from (or after the user's newest) and then every
// spacing, through the store's own writer.
func seed(t *testing.T, path string, users []string, perUser int, from time.Time, spacing time.Duration) {
	t.Helper()
	ctx := context.Background()
	store, err := db.Open(ctx, path, db.WithSynchronous(db.SyncNormal))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	from = from.Truncate(policy.Resolution)
	var next atomic.Int64
	total := int64(len(users) * perUser)
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	for range 256 { // enough to fill the writer's batches
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < total; i = next.Add(1) - 1 {
				err := store.Admit(ctx, users[i%int64(len(users))], func(h policy.History) (policy.Admission, error) {
					last, ok, err := h.Last()
					if !ok || last.Before(from) {
						return policy.Admission{At: from, Record: true}, err
					}
					return policy.Admission{At: last.Add(spacing), Record: true}, err
				})
				if err != nil {
					select {
					case errc <- err:
					default:
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
}

// checkBody is the body of a benchmark check for user.
func checkBody(user string) string {
	return fmt.Sprintf(`{"input_text":"Summarize the attached report in three sentences.","model":"gpt-4o-mini","tokens":100,"context":{"user_id":%q,"user_tier":%q,"feature":"summarize"}}`, user, loadTier)
}

// runField is what a check in a run holds after its user id: the run
// named "r-" and the user id, one run per user. wrk's script writes it
// too.
const runField = `","run_id":"r-`

// checkBodyInRun is checkBody naming the user's run.
func checkBodyInRun(user string) string {
	prefix, suffix, _ := strings.Cut(checkBody(user), user+`"`)
	return prefix + user + runField + user + `"` + suffix
}

// checkRequests returns one complete HTTP/1.1 check request per user,
// with the body body gives.
func checkRequests(users []string, body func(string) string) [][]byte {
	out := make([][]byte, len(users))
	for i, u := range users {
		body := body(u)
		out[i] = fmt.Appendf(nil, "POST /v1/check HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
	return out
}

// generator drives the throughput and single-client rounds: wrk when it is
// installed, the Go generator (target.run) otherwise.
type generator struct {
	wrk       string // wrk's path; "" for the Go generator
	script    string // wrk's Lua script
	bodies    [][]byte
	runBodies [][]byte // the checks of a target whose checks are in runs
}

// newGenerator writes wrk's script into dir: it builds one request per
// user, user-00000 to user-<users-1>, with the body of checkBody, and sends
// them in turn, from the first or from the one its argument numbers (each
// in the user's run when a second argument says "run"); at the end it
// prints one line of figures for wrkResult.
func newGenerator(t *testing.T, dir string, userIDs []string) *generator {
	t.Helper()
	users := len(userIDs)
	g := &generator{bodies: checkRequests(userIDs, checkBody), runBodies: checkRequests(userIDs, checkBodyInRun)}
	if os.Getenv("POLICYGUARD_LOAD_GEN") == "go" {
		return g
	}
	path, err := exec.LookPath("wrk")
	if err != nil {
		return g
	}
	const marker = "USER-MARKER"
	prefix, suffix, ok := strings.Cut(checkBody(marker), marker)
	if !ok {
		t.Fatalf("the check body %q does not hold the user id as written", checkBody(marker))
	}
	script := fmt.Sprintf(`-- Written by load_test.go: %d rotating users.
local requests = {}
local n = 0

function init(args)
	local inRun = args[2] == "run"
	for i = 0, %d do
		local user = string.format("user-%%05d", i)
		local body = %q .. user .. %q
		if inRun then
			body = %[3]q .. user .. %[5]q .. user .. %[4]q
		end
		requests[#requests + 1] = wrk.format("POST", "/v1/check", {["Content-Type"] = "application/json"}, body)
	end
	-- wrk ... -- <first>: the first request is for user <first>.
	if args[1] then
		n = tonumber(args[1]) %% #requests
	end
end

function request()
	n = n %% #requests + 1
	return requests[n]
end

%[6]s`, users, users-1, prefix, suffix, runField, wrkDone)
	g.wrk, g.script = path, filepath.Join(dir, "check.lua")
	if err := os.WriteFile(g.script, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	return g
}

func (g *generator) name() string {
	if g.wrk == "" {
		return "the Go generator (fallback: wrk is not installed or POLICYGUARD_LOAD_GEN=go)"
	}
	return "wrk -t1 (" + g.wrk + ")"
}

// run drives tg over conns connections for d (whole seconds for wrk). A
// set of replicas is driven by one wrk per replica at once (see runSet).
func (g *generator) run(t *testing.T, tg *target, conns int, d time.Duration) result {
	t.Helper()
	if len(tg.replicas) > 0 {
		return g.runSet(t, tg, conns, d)
	}
	if g.wrk == "" {
		if tg.inRun {
			return tg.run(t, conns, d, 0, g.runBodies)
		}
		return tg.run(t, conns, d, 0, g.bodies)
	}
	cmd, out := g.wrkCommand(tg, conns, d, 0)
	err := cmd.Run()
	if err != nil {
		t.Fatalf("%s: wrk: %v\n%s", tg.name, err, out)
	}
	res, err := wrkResult(out.Bytes())
	if err != nil {
		t.Fatalf("%s: %v\n%s%s", tg.name, err, out, tg.logErrors())
	}
	return res
}

// wrkCommand returns wrk's command to drive tg over conns connections for
// d, its first request for user number first, and the buffer its output
// goes to.
func (g *generator) wrkCommand(tg *target, conns int, d time.Duration, first int) (*exec.Cmd, *bytes.Buffer) {
	secs := max(1, int(d.Round(time.Second)/time.Second))
	args := []string{"-t1", fmt.Sprintf("-c%d", conns), fmt.Sprintf("-d%ds", secs), "-s", g.script, "http://" + tg.addr + "/v1/check",
		"--", strconv.Itoa(first)}
	if tg.inRun {
		args = append(args, "run")
	}
	cmd := exec.Command(g.wrk, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	return cmd, &out
}

// wrkDone is the done function of every wrk script: it prints the line
// of figures wrkResult reads.
const wrkDone = `function done(summary, latency, requests)
	local e = summary.errors
	io.write(string.format("policyguard-wrk requests=%d duration_us=%d p50_us=%d p90_us=%d p99_us=%d p999_us=%d max_us=%d status_errors=%d socket_errors=%d\n",
		summary.requests, summary.duration, latency:percentile(50), latency:percentile(90), latency:percentile(99),
		latency:percentile(99.9), latency.max, e.status, e.connect + e.read + e.write + e.timeout))
end
`

var wrkLine = regexp.MustCompile(`policyguard-wrk requests=(\d+) duration_us=(\d+) p50_us=(\d+) p90_us=(\d+) p99_us=(\d+) p999_us=(\d+) max_us=(\d+) status_errors=(\d+) socket_errors=(\d+)`)

// wrkResult reads the line the script's done function prints. Any answer
// but 2xx or 3xx, and any socket error or timeout, is a failure.
func wrkResult(out []byte) (result, error) {
	m := wrkLine.FindSubmatch(out)
	if m == nil {
		return result{}, errors.New("wrk printed no figures")
	}
	var v [9]int64
	for i := range v {
		v[i], _ = strconv.ParseInt(string(m[i+1]), 10, 64)
	}
	if v[7] > 0 || v[8] > 0 {
		return result{}, fmt.Errorf("wrk: %d answers not 2xx or 3xx, %d socket errors", v[7], v[8])
	}
	if v[0] == 0 || v[1] == 0 {
		return result{}, errors.New("wrk completed no requests")
	}
	us := func(x int64) time.Duration { return time.Duration(x) * time.Microsecond }
	return result{
		rps: float64(v[0]) / us(v[1]).Seconds(), checks: float64(v[0]),
		p50: us(v[2]), p90: us(v[3]), p99: us(v[4]), p999: us(v[5]), max: us(v[6]),
	}, nil
}

// target is a server under load: the service or the baseline, or a set
// of service replicas on one database, which has replicas and no process
// of its own.
type target struct {
	name      string
	addr      string // host:port on 127.0.0.1
	cmd       *exec.Cmd
	log       string // the service's log file
	logOffset int64
	replicas  []*target
	inRun     bool // each check names its user's run (see checkBodyInRun)
}

func (tg *target) pid() int { return tg.cmd.Process.Pid }

func (tg *target) stop(t *testing.T) {
	t.Helper()
	for _, r := range tg.replicas {
		r.stop(t)
	}
	if tg.cmd == nil || tg.cmd.ProcessState != nil {
		return
	}
	tg.cmd.Process.Signal(syscall.SIGTERM)
	if err := tg.cmd.Wait(); err != nil {
		t.Errorf("%s: %v", tg.name, err)
	}
}

// startService starts the service binary on a loopback port with its log
// in a file, and creates the benchmark tier, which admits everything.
func startService(t *testing.T, bin, dir, dbPath, sync string, cleanup time.Duration) *target {
	t.Helper()
	return startServiceArgs(t, bin, "service sync="+sync, dbPath+".log",
		"-db", dbPath, "-sync", sync, "-cleanup-interval", cleanup.String())
}

// startServiceArgs starts the service binary as startService does, named
// name, with its log in logPath and args after the address and token.
func startServiceArgs(t *testing.T, bin, name, logPath string, args ...string) *target {
	t.Helper()
	return startServiceEnv(t, bin, name, logPath, nil, args...)
}

// startServiceEnv is startServiceArgs with env (KEY=value) as the
// service's whole environment.
func startServiceEnv(t *testing.T, bin, name, logPath string, env []string, args ...string) *target {
	t.Helper()
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, append([]string{"-addr", "127.0.0.1:0", "-admin-token", token}, args...)...)
	cmd.Env = append([]string{}, env...) // flags and env only, whatever the caller's environment holds
	cmd.Stderr = logf
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tg := &target{name: name, cmd: cmd, log: logPath}
	t.Cleanup(func() { tg.stop(t) })
	tg.addr = strings.TrimPrefix(dbtest.WaitURL(t, stdout), "http://")
	go io.Copy(io.Discard, stdout)

	tg.putTier(t, fmt.Sprintf(`{"requests_per_minute":%d,"requests_per_hour":%d,"requests_per_day":%d,"burst_allowance":0,"features":["*"]}`,
		policy.MaxLimit, policy.MaxLimit, policy.MaxLimit))
	return tg
}

// meter makes tg's benchmark tier meter calls, with limits no check
// reaches: every check then also opens a call that reserves its tokens,
// and no call is finished, so each stays open until it expires.
func (tg *target) meter(t *testing.T) {
	tg.name += ", metered"
	tg.putTier(t, meteredTier)
}

// spend makes tg's benchmark tier meter calls and spend, with limits no
// check reaches, and prices the checks' model: every check then also
// prices its call and counts its spend beside its tokens.
func (tg *target) spend(t *testing.T) {
	t.Helper()
	tg.name += ", spend"
	tg.put(t, "/v1/prices", `{"prices":[{"model":"gpt-4o-mini","input":"0.15","output":"0.6"}]}`)
	tg.putTier(t, spendTier)
}

// monthly makes tg's benchmark tier spendTier with month limits no check
// reaches: every check then also reads its billing period's totals and
// counts the period's rows still stored.
func (tg *target) monthly(t *testing.T) {
	t.Helper()
	tg.name += ", monthly"
	tg.put(t, "/v1/prices", `{"prices":[{"model":"gpt-4o-mini","input":"0.15","output":"0.6"}]}`)
	tg.putTier(t, monthlyTier)
}

// inRuns makes tg's benchmark tier meteredTier with a run budget no
// check reaches, and each check name its user's run: every check then
// also counts against its run, whose calls stay open as the user's do.
func (tg *target) inRuns(t *testing.T) {
	t.Helper()
	tg.name += ", in runs"
	tg.inRun = true
	tg.putTier(t, strings.TrimSuffix(meteredTier, "}")+
		fmt.Sprintf(`,"run":{"max_requests":%d,"max_tokens":%[1]d,"max_concurrent":%[1]d}}`, policy.MaxLimit))
}

// monthlyTier is spendTier with month limits.
var monthlyTier = strings.TrimSuffix(spendTier, "}") + fmt.Sprintf(`,"requests_per_month":%d,"tokens_per_month":%[1]d,"cost_per_month":"1000000"}`, policy.MaxLimit)

// spendTier is meteredTier with spend limits of a million dollars.
var spendTier = strings.TrimSuffix(meteredTier, "}") + `,"cost_per_minute":"1000000","cost_per_hour":"1000000","cost_per_day":"1000000"}`

// meteredTier is a tier that meters calls, with limits no check reaches.
var meteredTier = fmt.Sprintf(`{"requests_per_minute":%d,"requests_per_hour":%d,"requests_per_day":%d,"burst_allowance":0,"features":["*"],`+
	`"tokens_per_minute":%[1]d,"tokens_per_hour":%[1]d,"tokens_per_day":%[1]d,"max_concurrent":%[1]d}`,
	policy.MaxLimit, policy.MaxLimit, policy.MaxLimit)

// putTier creates or replaces the benchmark tier of tg with body.
func (tg *target) putTier(t *testing.T, body string) {
	t.Helper()
	tg.putTierNamed(t, loadTier, body)
}

// putTierNamed creates or replaces tg's tier name with body.
func (tg *target) putTierNamed(t *testing.T, name, body string) {
	t.Helper()
	tg.put(t, "/v1/tiers/"+name, body)
}

// put sends body to tg's admin route path with PUT.
func (tg *target) put(t *testing.T, path, body string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, "http://"+tg.addr+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK && res.StatusCode != http.StatusCreated {
		t.Fatalf("PUT %s: %s %s", path, res.Status, msg)
	}
}

// startBaseline starts the baseline program (api/testdata/baseline, built
// as bin) with args: none for the do-nothing handler, -bare FILE for the
// bare durable one on FILE.
func startBaseline(t *testing.T, bin, name string, args ...string) *target {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tg := &target{name: name, cmd: cmd}
	t.Cleanup(func() { tg.stop(t) })
	tg.addr = strings.TrimPrefix(dbtest.WaitURL(t, stdout), "http://")
	go io.Copy(io.Discard, stdout)
	return tg
}

// result is one round of load against one target.
type result struct {
	rps                      float64
	checks                   float64 // answered in the round
	p50, p90, p99, p999, max time.Duration
	samples                  []sample
	cpu                      cpuUse // a check's, when the round measured it
}

type sample struct {
	start   time.Time
	latency time.Duration
}

// run sends requests over conns keep-alive connections, each connection
// one request at a time, for d, or until n requests when n > 0. Request i
// (over all connections) is reqs[i % len(reqs)]. Any answer but 200 fails
// the test.
func (tg *target) run(t *testing.T, conns int, d time.Duration, n int, reqs [][]byte) result {
	t.Helper()
	res, err := tg.load(conns, d, n, reqs)
	if err != nil {
		t.Fatalf("%s: %v", tg.name, err)
	}
	return res
}

// load is run, returning its failure.
func (tg *target) load(conns int, d time.Duration, n int, reqs [][]byte) (result, error) {
	var next atomic.Int64
	var mu sync.Mutex
	var all []sample
	var failure error
	fail := func(err error) {
		mu.Lock()
		if failure == nil {
			failure = err
		}
		mu.Unlock()
	}
	begin := time.Now()
	end := begin.Add(d)
	var wg sync.WaitGroup
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", tg.addr)
			if err != nil {
				fail(err)
				return
			}
			defer c.Close()
			br := bufio.NewReaderSize(c, 4096)
			own := make([]sample, 0, 1024)
			for {
				i := next.Add(1) - 1
				if n > 0 && i >= int64(n) {
					break
				}
				t0 := time.Now()
				if n == 0 && !t0.Before(end) {
					break
				}
				if _, err := c.Write(reqs[i%int64(len(reqs))]); err != nil {
					fail(err)
					break
				}
				status, err := readResponse(br)
				if err != nil {
					fail(err)
					break
				}
				own = append(own, sample{t0, time.Since(t0)})
				if status != http.StatusOK {
					fail(fmt.Errorf("%s answered %d", tg.name, status))
					break
				}
			}
			mu.Lock()
			all = append(all, own...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(begin)
	if failure != nil {
		return result{}, failure
	}
	lat := make([]time.Duration, len(all))
	for i, s := range all {
		lat[i] = s.latency
	}
	slices.Sort(lat)
	return result{
		rps: float64(len(all)) / elapsed.Seconds(), checks: float64(len(all)),
		p50: pct(lat, 50), p90: pct(lat, 90), p99: pct(lat, 99), p999: pct(lat, 99.9), max: pct(lat, 100),
		samples: all,
	}, nil
}

var contentLength = []byte("content-length:")

// readResponse reads one HTTP/1.1 response with a Content-Length and
// returns its status.
func readResponse(br *bufio.Reader) (int, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	length := -1
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		if len(line) <= 2 {
			break
		}
		if len(line) > len(contentLength) && bytes.EqualFold(line[:len(contentLength)], contentLength) {
			length, err = strconv.Atoi(string(bytes.TrimSpace(line[len(contentLength):])))
			if err != nil {
				return 0, fmt.Errorf("bad header %q", line)
			}
		}
	}
	if length < 0 {
		return 0, errors.New("answer without Content-Length")
	}
	if _, err := br.Discard(length); err != nil {
		return 0, err
	}
	return status, nil
}

// dayCount asks the service how many requests user has in the day window.
func (tg *target) dayCount(t *testing.T, user string) int {
	t.Helper()
	return dayCount(t, "http://"+tg.addr, user)
}

// runRequests asks the service how many requests the run id counts.
func (tg *target) runRequests(t *testing.T, id string) int64 {
	t.Helper()
	var run struct {
		Requests int64 `json:"requests"`
	}
	getJSON(t, "http://"+tg.addr+"/v1/runs/"+id, &run)
	return run.Requests
}

// logErrors returns the first errors the service has logged, to explain
// the answers that failed a round; "" for a baseline or a clean log.
func (tg *target) logErrors() string {
	if tg.log == "" {
		return ""
	}
	data, err := os.ReadFile(tg.log)
	if err != nil {
		return ""
	}
	var b strings.Builder
	n := 0
	for line := range strings.Lines(string(data)) {
		if strings.Contains(line, " level=ERROR ") || strings.Contains(line, " level=WARN ") {
			if n == 0 {
				fmt.Fprintf(&b, "the first errors %s logged:\n", tg.name)
			}
			if n++; n > 5 {
				break
			}
			b.WriteString(line)
		}
	}
	return b.String()
}

var cleanupRE = regexp.MustCompile(`time=(\S+) level=INFO msg=cleanup deleted=(\d+) took=(\S+)`)

// cleanupLogged returns the first cleanup the service has logged: rows
// deleted, when it started and when it ended. All are zero until then.
func (tg *target) cleanupLogged(t *testing.T) (int64, time.Time, time.Time) {
	t.Helper()
	f, err := os.Open(tg.log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(tg.logOffset, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReaderSize(f, 1<<16)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			// An incomplete last line is read again next time.
			return 0, time.Time{}, time.Time{}
		}
		tg.logOffset += int64(len(line))
		if !bytes.Contains(line, []byte("msg=cleanup ")) {
			continue
		}
		m := cleanupRE.FindSubmatch(line)
		if m == nil {
			t.Fatalf("unexpected cleanup log line %q", line)
		}
		end, err1 := time.Parse(time.RFC3339Nano, string(m[1]))
		n, err2 := strconv.ParseInt(string(m[2]), 10, 64)
		took, err3 := time.ParseDuration(string(m[3]))
		if err := errors.Join(err1, err2, err3); err != nil {
			t.Fatalf("cleanup log line %q: %v", line, err)
		}
		return n, end.Add(-took), end
	}
}

// memSampler tracks the peak resident memory of a process.
type memSampler struct {
	done chan struct{}
	peak atomic.Int64
	wg   sync.WaitGroup
}

func (m *memSampler) start(pid int) {
	m.done = make(chan struct{})
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if hwm := statusKB(pid, "VmHWM:"); hwm*1024 > m.peak.Load() {
				m.peak.Store(hwm * 1024)
			}
			select {
			case <-m.done:
				return
			case <-tick.C:
			}
		}
	}()
}

func (m *memSampler) stop() int64 {
	close(m.done)
	m.wg.Wait()
	return m.peak.Load()
}

// statusKB reads a field in kB from /proc/pid/status; VmHWM is the peak
// resident set size of the process's lifetime.
func statusKB(pid int, field string) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}

func cpuModel() string {
	data, _ := os.ReadFile("/proc/cpuinfo")
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

// pct returns the p-th percentile of sorted durations.
func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func medianResult(rs []result) result {
	med := func(f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	d := func(f func(result) time.Duration) time.Duration {
		return time.Duration(med(func(r result) float64 { return float64(f(r)) }))
	}
	return result{
		rps: med(func(r result) float64 { return r.rps }),
		p50: d(func(r result) time.Duration { return r.p50 }), p90: d(func(r result) time.Duration { return r.p90 }),
		p99: d(func(r result) time.Duration { return r.p99 }), p999: d(func(r result) time.Duration { return r.p999 }),
		max: d(func(r result) time.Duration { return r.max }),
		cpu: cpuUse{service: d(func(r result) time.Duration { return r.cpu.service }), server: d(func(r result) time.Duration { return r.cpu.server })},
	}
}

// rates returns the throughput of each round.
func rates(rs []result) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = fmt.Sprintf("%.0f", r.rps)
	}
	return out
}

// ratios returns a's throughput over b's, round by round.
func ratios(a, b []result) []string {
	out := make([]string, len(a))
	for i := range a {
		out[i] = fmt.Sprintf("%.3f", a[i].rps/b[i].rps)
	}
	return out
}

// medianRatio is the median of the per-round throughput ratios a/b.
func medianRatio(a, b []result) float64 {
	v := make([]float64, len(a))
	for i := range a {
		v[i] = a[i].rps / b[i].rps
	}
	slices.Sort(v)
	return v[len(v)/2]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT MET"
}
