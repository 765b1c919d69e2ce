package gateway_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api/gateway"
	"github.com/policyguard/policyguard/api/internal/fakeupstream"
	"github.com/policyguard/policyguard/db/dbtest"
)

// passthroughPrefixes are the passthrough prefixes of the tests that
// forward: every path they forward is under one.
var passthroughPrefixes = []string{"/files", "/audio", "/chat", "/v1/chat", "/v1/messages/count_tokens"}

// A path or query an upstream might read otherwise than the gateway (an
// escaped letter, which common servers decode before routing, a space or
// control character, an escape escaped twice, a ";" parameter) is a 400
// in the protocol's shape, even with passthrough: so no metered route is
// forwarded unmetered under another spelling, and nothing is counted or
// sent.
func TestGatewayCanonicalPath(t *testing.T) {
	e, key := newGatewayEnv(t, func(c *gateway.Config) { c.Passthrough = passthroughPrefixes })
	auth := map[string]string{"Authorization": "Bearer " + key}
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct{ protocol, path string }{
		{gateway.ProtocolOpenAI, "/llm/openai/chat/%63ompletions"},
		{gateway.ProtocolOpenAI, "/llm/openai/%63hat/completions"},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions%20"},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions;x=1"},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions%3bx=1"},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions%00"},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions%09"},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions%252e"},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completion%73"},
		{gateway.ProtocolOpenAI, "/llm/openai/files/file%2Dabc"},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions?api-version=%2561"},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions?a=%00"},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions?a=1;b=2"},
		{gateway.ProtocolOpenAI, "/llm/openai/files?purpose=%62atch"},
		{gateway.ProtocolAnthropic, "/llm/claude/v1/%6Dessages"},
		{gateway.ProtocolAnthropic, "/llm/claude/v1/messages%00"},
	} {
		sent := len(e.fake.Requests())
		_, _, before := e.usage("alice")
		res, got := e.rawURL(http.MethodPost, tc.path, body, auth)
		if res.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", tc.path, res.StatusCode, got)
			continue
		}
		wantError(t, tc.protocol, got, "invalid_request_error", "", "send it plainly")
		if n := len(e.fake.Requests()); n != sent {
			t.Errorf("%s reached the upstream", tc.path)
		}
		if _, _, after := e.usage("alice"); after != before {
			t.Errorf("%s was counted", tc.path)
		}
	}
	// An escape of a character that needs one is kept as it came, and so
	// forwarded.
	res, got := e.rawURL(http.MethodGet, "/llm/openai/files/a%3Ab?purpose=a%2Bb", "", auth)
	reqs := e.fake.Requests()
	if res.StatusCode != 200 || len(reqs) == 0 || reqs[len(reqs)-1].Path != "/v1/files/a:b" || reqs[len(reqs)-1].RawQuery != "purpose=a%2Bb" {
		t.Errorf("an escaped colon: %d %s, want it forwarded as it came", res.StatusCode, got)
	}
	if !strings.Contains(got, `"ok":true`) {
		t.Errorf("an escaped colon: answer %s", got)
	}
}

// A metered body naming a member the gateway reads (model, the output
// caps, stream, stream_options and its include_usage) in another letter
// case is a 400, as /v1/check refuses such duplicates: an upstream that
// matches names ignoring case would otherwise run another model, or
// another cap, than the one the gateway checked.
func TestGatewayCaseVariantNames(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	setTierModels(t, e.env, "gw", []string{"gpt-4o-mini", "claude-sonnet-4-5"})
	auth := map[string]string{"Authorization": "Bearer " + key}
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct{ protocol, path, body string }{
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions", `{"model":"gpt-4o-mini","Model":"gpt-4o",` + msgs + `}`},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions", `{"MODEL":"gpt-4o",` + msgs + `}`},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions", `{"model":"gpt-4o-mini","max_completion_tokens":10,"Max_Completion_Tokens":100000,` + msgs + `}`},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions", `{"model":"gpt-4o-mini","N":50,` + msgs + `}`},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions", `{"model":"gpt-4o-mini","stream":false,"Stream":true,` + msgs + `}`},
		{gateway.ProtocolOpenAI, "/llm/openai/chat/completions", `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true,"Include_Usage":false},` + msgs + `}`},
		{gateway.ProtocolOpenAI, "/llm/openai/responses", `{"model":"gpt-4o-mini","max_output_tokens":10,"Max_output_tokens":100000,"input":"hi"}`},
		{gateway.ProtocolAnthropic, "/llm/claude/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":10,"Max_tokens":100000,` + msgs + `}`},
		{gateway.ProtocolAnthropic, "/llm/claude/v1/messages", `{"model":"claude-sonnet-4-5","mOdel":"claude-opus-4-1","max_tokens":10,` + msgs + `}`},
	} {
		sent := len(e.fake.Requests())
		res, got := e.raw(http.MethodPost, tc.path, tc.body, auth)
		if res.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", tc.body, res.StatusCode, got)
			continue
		}
		wantError(t, tc.protocol, got, "invalid_request_error", "", "names that differ only in case count as the same")
		if len(e.fake.Requests()) != sent {
			t.Errorf("%s reached the upstream", tc.body)
		}
	}
	if tokens, inFlight, requests := e.usage("alice"); tokens != 0 || inFlight != 0 || requests != 0 {
		t.Errorf("alice: %d tokens, %d in flight, %d requests; want nothing counted", tokens, inFlight, requests)
	}
}

// Passthrough forwards only the paths under the prefixes it lists, and
// refuses at start a prefix that would reach model calls the gateway
// cannot meter (batches, realtime sessions, assistants' runs, ...): a way
// to spend any model's tokens unmetered.
func TestGatewayPassthroughAllowlist(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	for _, tc := range []struct {
		prefixes []string
		want     string // in the error; "" for none
	}{
		{passthroughPrefixes, ""},
		{[]string{"/files", "/batches"}, "/batches"},
		{[]string{"/BATCHES"}, "/batches"},
		{[]string{"/"}, "/batches"},
		{[]string{"/realtime/sessions"}, "/realtime"},
		{[]string{"/threads"}, "/threads"},
		{[]string{"/assistants/"}, "/assistants"},
		{[]string{"/v1"}, "/v1/messages/batches"},
		{[]string{"/v1/messages"}, "/v1/messages/batches"},
		{[]string{"/v1/complete"}, "/v1/complete"},
		{[]string{"files"}, "want a plain path"},
		{[]string{"/files/../batches"}, "want a plain path"},
	} {
		cfg := gateway.Config{Upstreams: []gateway.Upstream{
			{Name: "openai", Protocol: gateway.ProtocolOpenAI, BaseURL: mustURL(t, e.server.URL), Key: "k"},
			{Name: "claude", Protocol: gateway.ProtocolAnthropic, BaseURL: mustURL(t, e.server.URL), Key: "k"},
		}, Passthrough: tc.prefixes}
		err := cfg.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Validate of %q: %v, want an error naming %q", tc.prefixes, err, tc.want)
		}
	}

	e, key = newGatewayEnv(t, func(c *gateway.Config) { c.Passthrough = []string{"/files", "/v1/files"} })
	for _, tc := range []struct {
		method, path string
		forwarded    bool
	}{
		{"GET", "/llm/openai/files", true},
		{"GET", "/llm/openai/files/file-abc/content", true},
		{"GET", "/llm/claude/v1/files", true},
		{"POST", "/llm/openai/batches", false},
		{"GET", "/llm/openai/batches/batch_1", false},
		{"POST", "/llm/claude/v1/messages/batches", false},
		{"POST", "/llm/openai/realtime/sessions", false},
		{"POST", "/llm/openai/threads/runs", false},
		{"GET", "/llm/openai/filesystem", false},
		{"GET", "/llm/openai/Files", false},
		{"POST", "/llm/openai/audio/speech", false},
	} {
		sent := len(e.fake.Requests())
		res, body := e.rawURL(tc.method, tc.path, `{}`, map[string]string{"Authorization": "Bearer " + key})
		forwarded := len(e.fake.Requests()) > sent
		if forwarded != tc.forwarded || tc.forwarded && res.StatusCode != 200 || !tc.forwarded && res.StatusCode != 404 {
			t.Errorf("%s %s: %d %s (forwarded %t), want forwarded %t", tc.method, tc.path, res.StatusCode, body, forwarded, tc.forwarded)
		}
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// peakRSS returns the process's peak resident set since resetPeakRSS, in
// bytes, from VmHWM in /proc/self/status.
func peakRSS(t *testing.T) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Skip("no VmHWM in /proc/self/status")
	return 0
}

// resetPeakRSS starts peakRSS's count again (Linux 4.0 on).
func resetPeakRSS(t *testing.T) {
	t.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak RSS: %v", err)
	}
}

// bigBody is a chat completion body of about size bytes, made as it is
// read: a long conversation of 4 KiB messages. It returns its length.
func bigBody(size int) (io.Reader, int64) {
	const head, tail = `{"model":"gpt-4o-mini","messages":[`, `{"role":"user","content":"end"}]}`
	msg := `{"role":"user","content":"` + strings.Repeat("a", 4096) + `"},`
	n := size / len(msg)
	return io.MultiReader(strings.NewReader(head), &repeatReader{s: msg, n: n}, strings.NewReader(tail)),
		int64(len(head) + n*len(msg) + len(tail))
}

type repeatReader struct {
	s   string
	n   int
	off int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	total := 0
	for len(p) > 0 && r.n > 0 {
		c := copy(p, r.s[r.off:])
		p, total, r.off = p[c:], total+c, r.off+c
		if r.off == len(r.s) {
			r.off, r.n = 0, r.n-1
		}
	}
	if total == 0 && r.n == 0 {
		return 0, io.EOF
	}
	return total, nil
}

// One key holder posting 30 bodies of 32 MiB at once does not take the
// process's memory: the user's body reads at once are at most its
// max_concurrent (5), the others a 429 before their body is read, and
// every body held counts against -gateway-body-memory. All are answered
// 429 (the tier's tokens do not cover them), none is forwarded, and the
// process's peak RSS stays under 400 MiB (30 bodies read at once took
// 1.5 GB).
func TestGatewayBodyMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 960 MiB over loopback")
	}
	e, key := newGatewayEnv(t, nil)
	e.putTier("big", `{"requests_per_minute":1000,"requests_per_hour":10000,"requests_per_day":100000,"burst_allowance":0,"tokens_per_day":1000,"max_concurrent":5}`)
	e.assign("alice", "big")
	resetPeakRSS(t)
	const size = 32 << 20
	statuses := make([]int, 30)
	var wg sync.WaitGroup
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, length := bigBody(size)
			req, _ := http.NewRequest(http.MethodPost, e.server.URL+"/llm/openai/chat/completions", body)
			req.ContentLength = length
			req.Header.Set("Authorization", "Bearer "+key)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				statuses[i] = -1 // refused before the body was sent whole
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			statuses[i] = res.StatusCode
		}()
	}
	wg.Wait()
	peak := peakRSS(t)
	answered := 0
	for i, status := range statuses {
		if status != http.StatusTooManyRequests && status != -1 {
			t.Errorf("request %d: %d, want 429", i, status)
		}
		if status > 0 {
			answered++
		}
	}
	if answered < 5 {
		t.Errorf("%d requests answered, want at least the 5 read", answered)
	}
	if n := len(e.fake.Requests()); n != 0 {
		t.Errorf("%d requests reached the upstream", n)
	}
	t.Logf("peak RSS %d MiB", peak>>20)
	// The race detector's shadow memory multiplies the RSS of the bodies
	// held: the bound is the service's, measured without it.
	if peak > 400<<20 && !dbtest.RaceEnabled {
		t.Errorf("peak RSS %d MiB, want under 400 MiB", peak>>20)
	}
}

// A key holder's body sent slowly is cut by the server's read timeout, as
// anyone's is: the long deadline of an upstream exchange begins only once
// the body is read and the call checked.
func TestGatewaySlowBodyCut(t *testing.T) {
	e, key := newGatewayEnv(t, nil)
	srv := httptest.NewUnstartedServer(e.srv)
	srv.Config.ReadTimeout = 300 * time.Millisecond
	srv.Start()
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "POST /llm/openai/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", key)
	answered := make(chan struct{})
	go func() {
		io.Copy(io.Discard, conn) // until the server answers and closes, or only closes
		close(answered)
	}()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-answered:
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("the slow body was cut after %v, want about the read timeout", took)
			}
			if n := len(e.fake.Requests()); n != 0 {
				t.Errorf("%d requests reached the upstream", n)
			}
			return
		case <-tick.C:
			conn.Write([]byte(" ")) // a byte of white space at a time
			if time.Since(start) > 6*time.Second {
				t.Fatalf("the slow body was still being read after %v", time.Since(start))
			}
		}
	}
}

// An upstream's answer cannot take the process's memory: a gzip body of
// about 512 KiB that expands to 512 MiB, as a JSON answer (its usage
// after the expanse) and as an event stream (one line of it), keeps the
// process's peak RSS under 400 MiB. The JSON answer is relayed whole and
// settled at its reservation (its usage is past what the gateway reads);
// the stream is cut at its long line, charged its reservation. Either
// way the call is settled, and the upstream's connection closed.
func TestGatewayAnswerBomb(t *testing.T) {
	if testing.Short() {
		t.Skip("decompresses 1 GiB")
	}
	e, key := newGatewayEnv(t, nil)
	for _, tc := range []struct {
		flag      string
		wholeSize int64 // relayed whole; -1: cut
	}{
		{"bomb-json", 512 << 20},
		{"bomb-stream", -1},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			tokensBefore, _, _ := e.usage("alice")
			resetPeakRSS(t)
			req, _ := http.NewRequest(http.MethodPost, e.server.URL+"/llm/openai/chat/completions", strings.NewReader(chatBody))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("X-Fake", tc.flag)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			n, err := io.Copy(io.Discard, res.Body)
			res.Body.Close()
			peak := peakRSS(t)
			if res.StatusCode != 200 {
				t.Errorf("status %d, want 200", res.StatusCode)
			}
			if tc.wholeSize > 0 && (err != nil || n < tc.wholeSize) {
				t.Errorf("relayed %d bytes (%v), want all of the answer", n, err)
			}
			if tc.wholeSize < 0 && (err == nil || n > 2<<20) {
				t.Errorf("relayed %d bytes (%v), want the stream cut at its long line", n, err)
			}
			await(t, e.settled, "the settle")
			tokens, inFlight, _ := e.usage("alice")
			if inFlight != 0 || tokens-tokensBefore <= fakeupstream.ChatTokens {
				t.Errorf("%d tokens charged, %d in flight; want the reservation charged", tokens-tokensBefore, inFlight)
			}
			t.Logf("peak RSS %d MiB", peak>>20)
			if peak > 400<<20 && !dbtest.RaceEnabled { // see TestGatewayBodyMemory
				t.Errorf("peak RSS %d MiB, want under 400 MiB", peak>>20)
			}
		})
	}
}
