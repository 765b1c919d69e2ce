//go:build linux

package main

import (
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest/powerfs"
)

var (
	powercutCuts = flag.Int("powercut.cuts", 3, "power cuts per -sync mode in TestPowerCut (CI runs 20)")
	powercutSeed = flag.Uint64("powercut.seed", 0, "TestPowerCut: replay the one cut with this seed")
)

// TestPowerCut runs the real binary on powerfs under load (checks of many
// users on a tier with tight limits, metered calls opened and finished,
// edits of the tier), cuts the power at a random moment (the n-th write
// the service makes, n drawn from the cut's seed), kills the service,
// restarts it on what the disk kept, and compares with what the clients
// were answered. With -sync FULL everything answered is there; with NORMAL
// only commits since the WAL's last sync may be missing, and only the
// newest (what is lost is a suffix of what was committed). Nothing refused
// is recorded, SQLite's integrity check passes, and with FULL the limits
// hold at once after the restart. Each cut's seed is printed;
// -powercut.seed replays one, -powercut.cuts sets how many.
func TestPowerCut(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	powerfs.ForTest(t, t.TempDir()) // skips here, once, where FUSE cannot be mounted
	bin := goBuild(t, ".")
	for _, mode := range []string{db.SyncFull, db.SyncNormal} {
		t.Run(mode, func(t *testing.T) {
			seeds := []uint64{*powercutSeed}
			if *powercutSeed == 0 {
				base := uint64(time.Now().UnixNano())
				seeds = seeds[:0]
				for i := range *powercutCuts {
					seeds = append(seeds, base+uint64(i))
				}
			}
			var total pcTotals
			start := time.Now()
			for _, seed := range seeds {
				t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
					t.Cleanup(func() {
						if t.Failed() {
							t.Logf("replay: go test -count=1 -run '^TestPowerCut$/^%s$' -powercut.seed=%d -v .", mode, seed)
						}
					})
					total.add(powerCut(t, bin, mode, seed))
				})
			}
			t.Logf("-sync %s, %d cuts in %v: %d answers checked (%d admissions, %d calls opened, %d finished, %d tier edits); lost %d (%d admissions, %d opens, %d finishes, %d edits) in %d of the cuts; after the restarts %d of %d users filled to their limit were admitted again, %d users at max_concurrent checked; %d cuts tore a write",
				mode, len(seeds), time.Since(start).Round(time.Millisecond), total.answered, total.byKind["admit"], total.byKind["open"], total.byKind["finish"], total.byKind["edit"],
				total.lost, total.lostByKind["admit"], total.lostByKind["open"], total.lostByKind["finish"], total.lostByKind["edit"], total.lossyCuts,
				total.readmitted, total.filled, total.atMaxConc, total.torn)
		})
	}
}

// pcOp is one request a client sent before the cut and its answer.
type pcOp struct {
	kind           string // "admit", "open" (a metered check), "finish", "edit" (of the tight tier), "tier" (the metered tier's creation)
	user           string // admit, open, finish: the user; edit, tier: the tier
	call           string // open, finish: the call's id
	n              int    // edit: the description's number; finish: the tokens reported
	sent, answered time.Time
	status         int // 0: no answer
	kept           bool
}

func (op *pcOp) String() string {
	switch op.kind {
	case "admit":
		return fmt.Sprintf("an admission of %s (%d)", op.user, op.status)
	case "open":
		return fmt.Sprintf("call %s of %s opened (%d)", op.call, op.user, op.status)
	case "finish":
		return fmt.Sprintf("call %s of %s finished with %d tokens (%d)", op.call, op.user, op.n, op.status)
	case "edit":
		return fmt.Sprintf("edit %d of tier tight (%d)", op.n, op.status)
	default:
		return fmt.Sprintf("tier %s created (%d)", op.user, op.status)
	}
}

// ok reports whether the client was told the request succeeded.
func (op *pcOp) ok() bool { return op.status >= 200 && op.status < 300 }

// maybe reports whether the request may or may not have been recorded: no
// answer, or a failure of the service (the cut makes writes fail).
func (op *pcOp) maybe() bool { return op.status == 0 || op.status >= 500 }

// pcResult is what one cut showed.
type pcResult struct {
	byKind, lostByKind map[string]int
	answered, lost     int
	filled, readmitted int // users filled to the tight tier's limit; those not refused after the restart
	atMaxConc          int // metered users with max_concurrent calls open, checked after the restart (FULL)
	torn               int
}

type pcTotals struct {
	pcResult
	lossyCuts int
}

func (t *pcTotals) add(r pcResult) {
	if t.byKind == nil {
		t.byKind, t.lostByKind = map[string]int{}, map[string]int{}
	}
	for k, n := range r.byKind {
		t.byKind[k] += n
	}
	for k, n := range r.lostByKind {
		t.lostByKind[k] += n
	}
	t.answered += r.answered
	t.lost += r.lost
	t.filled += r.filled
	t.readmitted += r.readmitted
	t.atMaxConc += r.atMaxConc
	t.torn += r.torn
	if r.lost > 0 {
		t.lossyCuts++
	}
}

// pcLoad is the clients' side of one cut.
type pcLoad struct {
	url      string
	limit    int // the tight tier's limit per minute, hour and day
	maxConc  int // the metered tier's max_concurrent
	stop     chan struct{}
	mu       sync.Mutex
	ops      []*pcOp
	filled   []string // users of the tight tier refused once they reached the limit
	editSent int      // the newest description number sent
}

func (l *pcLoad) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

// send sends op's request and records its answer, and returns the body.
func (l *pcLoad) send(client *http.Client, op *pcOp, method, path, body string) []byte {
	req, err := http.NewRequest(method, l.url+path, strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if op.kind == "edit" || op.kind == "tier" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	op.sent = time.Now()
	res, err := client.Do(req)
	var b []byte
	if err == nil {
		b, err = io.ReadAll(res.Body)
		res.Body.Close()
		if err == nil {
			op.status = res.StatusCode
		}
	}
	op.answered = time.Now()
	l.mu.Lock()
	l.ops = append(l.ops, op)
	l.mu.Unlock()
	return b
}

// admitter fills users of the tight tier one after the other: checks until
// one is refused (429), then the next user.
func (l *pcLoad) admitter(g int) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	for u := 0; !l.stopped(); u++ {
		user := fmt.Sprintf("tight-%d-%d", g, u)
		for !l.stopped() {
			op := &pcOp{kind: "admit", user: user}
			l.send(client, op, "POST", "/v1/check", fmt.Sprintf(`{"context":{"user_id":%q,"user_tier":"tight"}}`, user))
			if op.status == http.StatusTooManyRequests {
				l.mu.Lock()
				l.filled = append(l.filled, user)
				l.mu.Unlock()
				break
			}
			if op.status == 0 {
				return // the service is killed
			}
			// 503: the power is cut, or the tier changed during the check
			// too often (the editor's doing): try again.
		}
	}
}

// caller opens metered calls for a user until max_concurrent refuses one,
// then finishes the oldest; every few calls it moves on to another user.
func (l *pcLoad) caller(g int, rng *rand.Rand) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	for u := 0; !l.stopped(); u++ {
		user := fmt.Sprintf("metered-%d-%d", g, u)
		var open []string
		for range 4 + rng.IntN(8) {
			if l.stopped() {
				return
			}
			op := &pcOp{kind: "open", user: user}
			b := l.send(client, op, "POST", "/v1/check", fmt.Sprintf(`{"context":{"user_id":%q,"user_tier":"metered"},"tokens":100}`, user))
			switch op.status {
			case http.StatusOK:
				var d struct {
					CallID string `json:"call_id"`
				}
				if err := json.Unmarshal(b, &d); err != nil || d.CallID == "" {
					op.status = -1 // not what the test expects: reported below
					return
				}
				op.call = d.CallID
				open = append(open, d.CallID)
			case http.StatusTooManyRequests:
				if len(open) == 0 {
					op.status = -1
					return
				}
				fin := &pcOp{kind: "finish", user: user, call: open[0], n: 1 + rng.IntN(200)}
				l.send(client, fin, "POST", "/v1/calls/"+open[0]+"/finish", fmt.Sprintf(`{"tokens":%d}`, fin.n))
				if fin.status == 0 {
					return
				}
				open = open[1:] // finished, or unknown after a 503: not tried again
			case 0:
				return
			}
		}
	}
}

// editor edits the tight tier over and over, its limits as they are and its
// description numbered, so that checks run while their tier changes.
func (l *pcLoad) editor() {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for n := 1; ; n++ {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		op := &pcOp{kind: "edit", n: n}
		l.mu.Lock()
		l.editSent = n
		l.mu.Unlock()
		if l.send(client, op, "PUT", "/v1/tiers/tight", l.tightTier(n)); op.status == 0 {
			return
		}
	}
}

func (l *pcLoad) tightTier(n int) string {
	return fmt.Sprintf(`{"requests_per_minute":%d,"requests_per_hour":%d,"requests_per_day":%d,"burst_allowance":0,"description":"edit %d"}`, l.limit, l.limit, l.limit, n)
}

// powerCut runs one cut with the given seed and checks what survived.
func powerCut(t *testing.T, bin, mode string, seed uint64) pcResult {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	backing := t.TempDir()
	fsys := powerfs.ForTest(t, backing)
	args := func(dir string) []string {
		return []string{"-addr", "127.0.0.1:0", "-db", filepath.Join(dir, "cut.db"), "-admin-token", token, "-sync", mode, "-log-format", "json"}
	}
	svc := startBinary(t, bin, args(fsys.Dir())...)
	l := &pcLoad{url: svc.url, limit: 3 + rng.IntN(8), maxConc: 1 + rng.IntN(3), stop: make(chan struct{})}
	// The tiers' creation is the first answer that must survive.
	client := &http.Client{Timeout: 10 * time.Second}
	for _, op := range []*pcOp{{kind: "edit", n: 0, user: "tight"}, {kind: "tier", user: "metered"}} {
		body := l.tightTier(0)
		if op.kind == "tier" {
			body = fmt.Sprintf(`{"requests_per_minute":100000,"requests_per_hour":100000,"requests_per_day":100000,"burst_allowance":0,"tokens_per_minute":10000000,"max_concurrent":%d}`, l.maxConc)
		}
		if l.send(client, op, "PUT", "/v1/tiers/"+op.user, body); op.status != http.StatusCreated {
			t.Fatalf("create tier %s: %d", op.user, op.status)
		}
	}

	// The cut comes at the n-th write of the service: somewhere in a
	// commit, a checkpoint or a write of the WAL index.
	writes, tear := 500+rng.IntN(20000), rng.IntN(2) == 0
	cuts := fsys.CutAfterWrites(writes, tear)
	start := time.Now()
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Go(func() { l.admitter(g) })
	}
	for g := range 2 {
		crng := rand.New(rand.NewPCG(seed, uint64(g)))
		wg.Go(func() { l.caller(g, crng) })
	}
	wg.Go(l.editor)
	var report powerfs.CutReport
	select {
	case report = <-cuts:
	case <-time.After(20 * time.Second):
		t.Logf("no cut after 20s: the service wrote fewer than %d times; cutting now", writes)
		report = fsys.Cut(tear)
		select { // the armed cut may have come meanwhile
		case report = <-cuts:
		default:
		}
	}
	cutAt := time.Now()
	loadFor := cutAt.Sub(start)
	if err := svc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	svc.wait()
	close(l.stop)
	wg.Wait()
	if len(report.Errors) > 0 {
		t.Fatalf("the cut could not undo everything: %v", report)
	}
	// Durable under NORMAL: what was answered before the WAL's last sync,
	// at a checkpoint's start, and before it was last started over, once
	// a checkpoint had copied it all into the database.
	walSynced, walRestarted := fsys.LastSync("cut.db-wal"), fsys.LastWriteAtZero("cut.db-wal")
	if err := fsys.Unmount(); err != nil {
		t.Fatal(err)
	}

	// Restart on what the disk kept, mounted again.
	fsys = powerfs.ForTest(t, backing)
	svc = startBinary(t, bin, args(fsys.Dir())...)
	res := pcResult{byKind: map[string]int{}, lostByKind: map[string]int{}, torn: len(report.Torn), filled: len(l.filled)}
	// The limits hold at once: a user filled to the tight tier's limit is
	// refused, and so is a metered user with max_concurrent calls open.
	readmitted := map[string]int{}
	for _, user := range l.filled {
		switch status := check(t, svc.url, user, "tight"); status {
		case http.StatusTooManyRequests:
		case http.StatusOK:
			readmitted[user]++
			res.readmitted++
		case http.StatusBadRequest: // NORMAL lost the tier itself
			res.readmitted++
		default:
			t.Fatalf("%s after the restart: %d", user, status)
		}
	}
	if mode == db.SyncFull && res.readmitted > 0 {
		t.Errorf("%d users filled to their limit before the cut were admitted again after it", res.readmitted)
	}
	if mode == db.SyncFull {
		for user, n := range openCalls(l.ops) {
			if n < l.maxConc {
				continue
			}
			res.atMaxConc++
			status, body := call(t, "POST", svc.url+"/v1/check", fmt.Sprintf(`{"context":{"user_id":%q,"user_tier":"metered"},"tokens":100}`, user), false)
			if status != http.StatusTooManyRequests {
				t.Errorf("%s had %d calls open (max_concurrent) before the cut, and after it a check gets %d %s", user, n, status, body)
			}
		}
	}
	if err := svc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := svc.wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, svc.stderr)
	}
	if err := fsys.Unmount(); err != nil {
		t.Fatal(err)
	}

	stored := readStored(t, filepath.Join(backing, "cut.db"))
	for user, n := range readmitted {
		stored.requests[user] -= n
	}
	durable := walSynced
	if walRestarted.After(durable) {
		durable = walRestarted
	}
	pcCompare(t, mode, l, stored, durable, &res)
	ago := func(at time.Time) string {
		if at.IsZero() {
			return "never"
		}
		return cutAt.Sub(at).Round(time.Millisecond).String() + " before"
	}
	t.Logf("-sync %s, seed %d: cut at write %d after %v (%s; the WAL synced %s, started over %s); %d answers, %d lost; tight limit %d, %d users filled, %d admitted again after the restart",
		mode, seed, writes, loadFor.Round(time.Millisecond), report, ago(walSynced), ago(walRestarted), res.answered, res.lost, l.limit, len(l.filled), res.readmitted)
	return res
}

// openCalls returns, per metered user, the calls answered open and never
// finished, for users with no request unanswered.
func openCalls(ops []*pcOp) map[string]int {
	open, unsure := map[string]int{}, map[string]bool{}
	for _, op := range ops {
		switch {
		case op.kind != "open" && op.kind != "finish":
		case op.maybe():
			unsure[op.user] = true
		case op.kind == "open" && op.ok():
			open[op.user]++
		case op.kind == "finish" && op.ok():
			open[op.user]--
		}
	}
	for user := range unsure {
		delete(open, user)
	}
	return open
}

// pcStored is what the database holds after the restart.
type pcStored struct {
	requests map[string]int // per user
	calls    map[string]pcCall
	callsOf  map[string]int // calls per user
	edit     int            // the tight tier's description number; -1 when the tier is not there
	metered  bool           // whether the metered tier is there
}

type pcCall struct {
	user     string
	finished bool
	tokens   int
}

func readStored(t *testing.T, path string) pcStored {
	t.Helper()
	faultIntegrity(t, path)
	sdb, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	s := pcStored{requests: map[string]int{}, calls: map[string]pcCall{}, callsOf: map[string]int{}}
	rows, err := sdb.Query(`SELECT user_id, count(*) FROM requests GROUP BY user_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var user string
		var n int
		if err := rows.Scan(&user, &n); err != nil {
			t.Fatal(err)
		}
		s.requests[user] = n
	}
	rows.Close()
	rows, err = sdb.Query(`SELECT id, user_id, finished_at IS NOT NULL, coalesce(reported, -1) FROM calls`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var c pcCall
		if err := rows.Scan(&id, &c.user, &c.finished, &c.tokens); err != nil {
			t.Fatal(err)
		}
		s.calls[id] = c
		s.callsOf[c.user]++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var desc string
	switch err := sdb.QueryRow(`SELECT description FROM tiers WHERE name = 'tight'`).Scan(&desc); {
	case errors.Is(err, sql.ErrNoRows):
		s.edit = -1
	case err != nil:
		t.Fatal(err)
	default:
		if s.edit, err = strconv.Atoi(strings.TrimPrefix(desc, "edit ")); err != nil {
			t.Fatalf("the tight tier's description: %q", desc)
		}
	}
	if err := sdb.QueryRow(`SELECT count(*) FROM tiers WHERE name = 'metered'`).Scan(&s.metered); err != nil {
		t.Fatal(err)
	}
	return s
}

// pcCompare marks each answered op kept or lost and checks what -sync mode
// promises; whatever was answered before durable must be kept.
func pcCompare(t *testing.T, mode string, l *pcLoad, s pcStored, durable time.Time, res *pcResult) {
	t.Helper()
	byUser := map[string][]*pcOp{}
	maybeCalls := map[string]int{}
	for _, op := range l.ops {
		switch {
		case op.status == -1 || (!op.ok() && !op.maybe() && op.status != http.StatusTooManyRequests):
			t.Fatalf("%s %s: unexpected answer %d", op.kind, op.user, op.status)
		case op.kind == "admit":
			byUser[op.user] = append(byUser[op.user], op)
		case op.kind == "open" && op.maybe():
			maybeCalls[op.user]++
		case op.kind == "open" && op.ok():
			_, op.kept = s.calls[op.call]
		case op.kind == "finish" && op.ok():
			c := s.calls[op.call]
			op.kept = c.finished && c.tokens == op.n
		case op.kind == "edit" && op.ok():
			op.kept = op.n <= s.edit
		case op.kind == "tier":
			op.kept = s.metered
		}
	}
	// A user's admissions were sent one after another: the first of its
	// 200s the database counts are kept.
	for user, ops := range byUser {
		n, oks, maybes := s.requests[user], 0, 0
		for _, op := range ops {
			switch {
			case op.ok():
				op.kept = oks < n
				oks++
			case op.maybe():
				maybes++
			}
		}
		if n > oks+maybes {
			t.Errorf("%s: %d requests stored; %d were answered 200 and %d not answered: a refused check was recorded", user, n, oks, maybes)
		}
	}
	for user, n := range s.callsOf {
		opened := 0
		for _, op := range l.ops {
			if op.kind == "open" && op.user == user && op.ok() {
				opened++
			}
		}
		if n > opened+maybeCalls[user] {
			t.Errorf("%s: %d calls stored; %d were answered 200 and %d not answered: a refused call was recorded", user, n, opened, maybeCalls[user])
		}
	}
	if s.edit > l.editSent {
		t.Errorf("the tight tier's description is edit %d; the newest sent was %d", s.edit, l.editSent)
	}

	var firstLost *pcOp
	var lost, beforeSync []string // examples
	for _, op := range l.ops {
		if !op.ok() {
			continue
		}
		res.answered++
		res.byKind[op.kind]++
		if op.kept {
			continue
		}
		res.lost++
		res.lostByKind[op.kind]++
		if firstLost == nil || op.answered.Before(firstLost.answered) {
			firstLost = op
		}
		if len(lost) < 5 {
			lost = append(lost, op.String())
		}
		if op.answered.Before(durable) && len(beforeSync) < 5 {
			beforeSync = append(beforeSync, op.String())
		}
	}
	if firstLost == nil {
		return
	}
	switch {
	case mode == db.SyncFull:
		t.Errorf("-sync FULL lost %d of %d answers, such as %s", res.lost, res.answered, strings.Join(lost, "; "))
	case len(beforeSync) > 0:
		t.Errorf("-sync NORMAL lost answers given before the last checkpoint (the WAL's last sync or start), such as %s", strings.Join(beforeSync, "; "))
	}
	// What NORMAL loses is the newest commits: nothing kept was sent after
	// something lost had been answered.
	for _, op := range l.ops {
		if op.ok() && op.kept && op.sent.After(firstLost.answered) {
			t.Errorf("-sync %s kept %s, sent %v after %s, lost, was answered", mode, op, op.sent.Sub(firstLost.answered), firstLost)
			break
		}
	}
}
