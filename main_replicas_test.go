package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/policyguard/policyguard/db/dbtest"
)

// replicaArgs are the flags of one replica on the database at dsn.
func replicaArgs(dsn string) []string {
	return []string{"-addr", "127.0.0.1:0", "-db", dsn, "-admin-token", token, "-log-format", "json", "-pg-pool-size", "8"}
}

// replicaCheck sends one check and returns its status and decoded body.
func replicaCheck(t *testing.T, client *http.Client, url, body string) (int, map[string]any, error) {
	t.Helper()
	res, err := postJSON(client, url+"/v1/check", body)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, nil, err
	}
	var d map[string]any
	if err := json.Unmarshal(b, &d); err != nil {
		return res.StatusCode, nil, fmt.Errorf("%d %s: %w", res.StatusCode, b, err)
	}
	return res.StatusCode, d, nil
}

// minuteLimit returns the minute window's limit in a decision.
func minuteLimit(d map[string]any) any {
	w, _ := d["windows"].(map[string]any)
	m, _ := w["minute"].(map[string]any)
	return m["limit"]
}

// hammer sends n checks of body from clients goroutines spread over urls,
// all at once, and returns how many were admitted and refused. Any other
// answer fails the test.
func hammer(t *testing.T, urls []string, clients, n int, body string) (admitted, refused int64) {
	t.Helper()
	var ok, limited, sent atomic.Int64
	var wg sync.WaitGroup
	for g := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 10 * time.Second}
			url := urls[g%len(urls)]
			for sent.Add(1) <= int64(n) {
				code, d, err := replicaCheck(t, client, url, body)
				switch {
				case err != nil:
					t.Errorf("check through %s: %v", url, err)
					return
				case code == http.StatusOK:
					ok.Add(1)
				case code == http.StatusTooManyRequests:
					limited.Add(1)
				default:
					t.Errorf("check through %s: %d %v", url, code, d)
					return
				}
			}
		}()
	}
	wg.Wait()
	return ok.Load(), limited.Load()
}

// TestReplicasShareOneDatabase runs three service processes on one
// PostgreSQL database: one user hammered through all three is admitted
// exactly to the limit, for requests, tokens and calls at once; a tier or
// user record changed through one applies to the next check on the
// others; the counts
// outlive a restart of all three; and a replica killed with SIGKILL under
// load loses no answered admission and over-admits nothing.
func TestReplicasShareOneDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	dsn := dbtest.Postgres(t)
	bin := goBuild(t, ".")
	var replicas [3]*binaryProc
	var urls []string
	start := func() {
		urls = urls[:0]
		for i := range replicas {
			replicas[i] = startBinary(t, bin, replicaArgs(dsn)...)
			urls = append(urls, replicas[i].url)
		}
	}
	start()

	// A tier created through one replica decides the next check on the
	// others, and so does each edit after it.
	mustCall(t, "PUT", urls[0]+"/v1/tiers/shared", `{"requests_per_minute":50,"requests_per_hour":100000,"requests_per_day":100000,"burst_allowance":0}`, 201)
	for i, limit := range []float64{50, 40, 30} {
		if i > 0 {
			mustCall(t, "PUT", urls[i]+"/v1/tiers/shared", fmt.Sprintf(`{"requests_per_minute":%v,"requests_per_hour":100000,"requests_per_day":100000,"burst_allowance":0}`, limit), 200)
		}
		for j, url := range urls {
			code, d, err := replicaCheck(t, http.DefaultClient, url, fmt.Sprintf(`{"context":{"user_id":"probe-%d-%d","user_tier":"shared"}}`, i, j))
			if err != nil || code != http.StatusOK || minuteLimit(d) != limit {
				t.Fatalf("edit %d through replica %d, next check on replica %d: %d %v %v; want limit %v", i, i, j, code, d, err, limit)
			}
		}
	}

	// So does a user record: assigned through one replica, it decides the
	// next check of its user on another, and its deletion the one after.
	mustCall(t, "PUT", urls[1]+"/v1/users/vip", `{"tier":"enterprise"}`, 201)
	if code, d, err := replicaCheck(t, http.DefaultClient, urls[2], `{"context":{"user_id":"vip","user_tier":"free"}}`); err != nil || code != http.StatusOK || d["tier"] != "enterprise" {
		t.Fatalf("record assigned through replica 1, check on replica 2: %d %v %v; want tier enterprise", code, d, err)
	}
	mustCall(t, "DELETE", urls[0]+"/v1/users/vip", "", 204)
	if code, d, err := replicaCheck(t, http.DefaultClient, urls[2], `{"context":{"user_id":"vip","user_tier":"free"}}`); err != nil || code != http.StatusOK || d["tier"] != "free" {
		t.Fatalf("record deleted through replica 0, check on replica 2: %d %v %v; want tier free", code, d, err)
	}

	// One user through all three at once: exactly the limit.
	const checks, clients = 200, 24
	ok, limited := hammer(t, urls, clients, checks, `{"context":{"user_id":"hot","user_tier":"shared"}}`)
	if ok != 30 || limited != checks-30 {
		t.Fatalf("requests: %d admitted, %d refused through three replicas; want exactly 30 admitted", ok, limited)
	}
	// Calls: max_concurrent 5 (no call finishes), and a token budget of
	// 1,000 a minute that 100-token calls reach after 10.
	mustCall(t, "PUT", urls[0]+"/v1/tiers/calls", `{"requests_per_minute":1000,"requests_per_hour":100000,"requests_per_day":100000,"burst_allowance":0,"max_concurrent":5}`, 201)
	mustCall(t, "PUT", urls[0]+"/v1/tiers/tokens", `{"requests_per_minute":1000,"requests_per_hour":100000,"requests_per_day":100000,"burst_allowance":0,"tokens_per_minute":1000}`, 201)
	if ok, _ := hammer(t, urls, clients, checks, `{"tokens":100,"context":{"user_id":"calls","user_tier":"calls"}}`); ok != 5 {
		t.Fatalf("concurrent calls: %d admitted through three replicas, want exactly 5", ok)
	}
	if ok, _ := hammer(t, urls, clients, checks, `{"tokens":100,"context":{"user_id":"tokens","user_tier":"tokens"}}`); ok != 10 {
		t.Fatalf("tokens: %d calls of 100 admitted through three replicas, want exactly 10 (1,000 a minute)", ok)
	}

	// All three restarted: every replica counts what any admitted.
	for _, r := range replicas {
		if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := r.wait(); err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, r.stderr)
		}
	}
	start()
	for i, url := range urls {
		if got := dayCount(t, url, "hot"); got != 30 {
			t.Fatalf("after restarting all three, replica %d counts %d requests of hot, want 30", i, got)
		}
	}

	// SIGKILL one replica under load: every 200 stays counted, no user is
	// admitted past the cap, and a check in flight counts at most once.
	const capped = 40
	mustCall(t, "PUT", urls[0]+"/v1/tiers/crash", fmt.Sprintf(`{"requests_per_minute":%d,"requests_per_hour":100000,"requests_per_day":100000,"burst_allowance":0}`, capped), 201)
	var mu sync.Mutex
	tally := map[string]*faultTally{}
	var admitted atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
			url := urls[g%len(urls)]
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				user, tier := fmt.Sprintf("cap-%d", g%4), "crash" // each capped user through every replica
				if i%2 == 1 {
					user, tier = fmt.Sprintf("flow-%d", g), "enterprise"
				}
				res, err := postJSON(client, url+"/v1/check", fmt.Sprintf(`{"context":{"user_id":%q,"user_tier":%q}}`, user, tier))
				mu.Lock()
				u := tally[user]
				if u == nil {
					u = &faultTally{}
					tally[user] = u
				}
				switch {
				case err != nil:
					u.unanswered++
				case res.StatusCode == http.StatusOK:
					u.ok++
					admitted.Add(1)
				case res.StatusCode == http.StatusTooManyRequests:
					u.limited++
				default:
					b, _ := io.ReadAll(res.Body)
					u.other = append(u.other, fmt.Sprintf("%d %s", res.StatusCode, strings.TrimSpace(string(b))))
				}
				mu.Unlock()
				if err != nil {
					if g%len(urls) == 0 {
						return // the killed replica's clients stop
					}
					continue
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		}()
	}
	dbtest.WaitFor(t, "1,000 admissions under load", 60*time.Second, func() bool { return admitted.Load() >= 1000 })
	if err := replicas[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	replicas[0].wait()
	dbtest.WaitFor(t, "500 more admissions on the survivors", 60*time.Second, func() bool { return admitted.Load() >= 1500 })
	close(stop)
	wg.Wait()
	var sent, inFlight, recorded int
	for user, u := range tally {
		counted := dayCount(t, urls[1], user)
		sent += u.ok + u.limited + u.unanswered + len(u.other)
		inFlight += u.unanswered
		recorded += counted
		if len(u.other) > 0 {
			t.Errorf("%s: answers other than 200 and 429: %v", user, u.other)
		}
		if counted < u.ok || counted > u.ok+u.unanswered {
			t.Errorf("%s: %d counted; %d answered 200, %d 429, %d unanswered", user, counted, u.ok, u.limited, u.unanswered)
		}
		if strings.HasPrefix(user, "cap-") && counted != capped {
			t.Errorf("%s: %d counted, %d answered 200; the cap is %d", user, counted, u.ok, capped)
		}
	}
	t.Logf("%d clients on three replicas sent %d checks; SIGKILL of one with %d unanswered; %d counted on the survivors: over-admitted 0, lost 0",
		clients, sent, inFlight, recorded)
}

// tcpProxy forwards connections to a server and can cut them all and
// refuse new ones, as a network partition or a stopped server would, then
// listen again on the same address.
type tcpProxy struct {
	t      *testing.T
	addr   string // where it listens
	target string

	mu    sync.Mutex
	ln    net.Listener
	conns []net.Conn
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	p := &tcpProxy{t: t, target: target}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.cut)
	return p
}

func (p *tcpProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { io.Copy(s, c); s.Close() }()
			go func() { io.Copy(c, s); c.Close() }()
		}
	}()
}

// cut closes the listener and every connection.
func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// restore listens again on the same address.
func (p *tcpProxy) restore() {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.serve(ln)
}

// TestReplicaSurvivesALostDatabase cuts a replica off from PostgreSQL
// (through a proxy that drops every connection and refuses new ones):
// checks answer 503, or are admitted unrecorded with -fail-open, and
// /healthz says so; once the database is reachable again both recover by
// themselves, with no restart.
func TestReplicaSurvivesALostDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	dsn, err := url.Parse(dbtest.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := newTCPProxy(t, dsn.Host)
	dsn.Host = proxy.addr
	bin := goBuild(t, ".")
	strict := startBinary(t, bin, append(replicaArgs(dsn.String()), "-pg-statement-timeout", "1s")...)
	open := startBinary(t, bin, append(replicaArgs(dsn.String()), "-pg-statement-timeout", "1s", "-fail-open")...)
	health := func(url string) int {
		res, err := http.Get(url + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	body := `{"context":{"user_id":"lost","user_tier":"pro"}}`
	for _, r := range []*binaryProc{strict, open} {
		if code, d, err := replicaCheck(t, http.DefaultClient, r.url, body); err != nil || code != http.StatusOK || d["guardrail"] != "rate_limiter" {
			t.Fatalf("before: %d %v %v", code, d, err)
		}
	}

	proxy.cut()
	if code, d, err := replicaCheck(t, http.DefaultClient, strict.url, body); err != nil || code != http.StatusServiceUnavailable || d["allowed"] != false || d["reason"] != "storage unavailable" {
		t.Fatalf("database unreachable: %d %v %v; want 503, storage unavailable", code, d, err)
	}
	if code, d, err := replicaCheck(t, http.DefaultClient, open.url, body); err != nil || code != http.StatusOK || d["guardrail"] != "fail_open" {
		t.Fatalf("database unreachable, -fail-open: %d %v %v; want 200 from fail_open", code, d, err)
	}
	for _, r := range []*binaryProc{strict, open} {
		if code := health(r.url); code != http.StatusServiceUnavailable {
			t.Fatalf("/healthz with the database unreachable: %d, want 503", code)
		}
	}

	proxy.restore()
	for _, r := range []*binaryProc{strict, open} {
		dbtest.WaitFor(t, "a check to succeed again", 30*time.Second, func() bool {
			code, d, err := replicaCheck(t, http.DefaultClient, r.url, body)
			return err == nil && code == http.StatusOK && d["guardrail"] == "rate_limiter"
		})
		if code := health(r.url); code != http.StatusOK {
			t.Fatalf("/healthz once the database is back: %d, want 200", code)
		}
	}
	// Two admissions before the cut and one after each recovery: the
	// fail-open one recorded nothing.
	if got := dayCount(t, strict.url, "lost"); got != 4 {
		t.Fatalf("lost has %d requests recorded, want 4", got)
	}
}
