package api_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/db/dbtest"
)

// TestHostileInput sends what an attacker or a broken client would, through
// the whole server, and checks each answer's status and message and that
// only the requests answered 200 were recorded.
func TestHostileInput(t *testing.T) {
	e := newGuardEnv(t, api.Config{})
	// The JSON library's nesting limit.
	const maxDepth = 10_000
	deep := strings.Repeat(`{"a":`, maxDepth+1) + `1` + strings.Repeat(`}`, maxDepth+1)
	notDeep := `{"context":{"x":` + strings.Repeat(`[`, maxDepth-2) + strings.Repeat(`]`, maxDepth-2) + `}}`
	admin := map[string]string{"Authorization": "Bearer " + adminToken}
	const ok, bad = 200, 400
	for _, tc := range []struct {
		name   string
		method string // POST when empty
		path   string // /v1/check when empty
		header map[string]string
		body   string
		status int
		want   string // in the body
	}{
		// Malformed and truncated JSON.
		{name: "truncated", body: `{"context":{"user_id":"a"`, status: bad, want: "malformed JSON"},
		{name: "unclosed string", body: `{"context":{"user_id":"a}}`, status: bad, want: "malformed JSON"},
		{name: "bare word", body: `{context}`, status: bad, want: "malformed JSON"},
		{name: "single quotes", body: `{'context':{}}`, status: bad, want: "malformed JSON"},
		{name: "trailing comma", body: `{"context":{},}`, status: bad, want: "malformed JSON"},
		// White space JSON does not allow around the object, which a strict
		// proxy in front would call invalid.
		{name: "trailing vertical tab", body: "{\"context\":{\"user_id\":\"a\"}}\v", status: bad, want: "malformed JSON"},
		{name: "trailing no-break space", body: "{\"context\":{\"user_id\":\"a\"}}\u00a0", status: bad, want: "malformed JSON"},
		{name: "leading form feed", body: "\f{\"context\":{\"user_id\":\"a\"}}", status: bad, want: "must be a JSON object"},
		{name: "trailing garbage", body: `{"context":{}} x`, status: bad, want: "malformed JSON"},
		{name: "two objects", body: `{} {}`, status: bad, want: "single JSON object"},
		{name: "null body", body: `null`, status: bad, want: "must be a JSON object"},
		{name: "array body", body: `[{"context":{}}]`, status: bad, want: "must be a JSON object"},
		{name: "byte order mark", body: "\ufeff{}", status: bad, want: "must be a JSON object"},
		{name: "empty body", body: "", header: map[string]string{"Content-Type": "application/json"}, status: bad, want: "request body is empty"},
		{name: "whitespace body", body: " \n\t ", status: bad, want: "request body is empty"},
		// Wrong types.
		{name: "user_id number", body: `{"context":{"user_id":7}}`, status: bad, want: "context.user_id must be a string, not number"},
		{name: "user_id huge number", body: `{"context":{"user_id":1e999}}`, status: bad, want: "context.user_id must be a string"},
		{name: "user_id object", body: `{"context":{"user_id":{"$ne":null}}}`, status: bad, want: "context.user_id must be a string, not object"},
		{name: "user_tier bool", body: `{"context":{"user_tier":true}}`, status: bad, want: "context.user_tier must be a string, not bool"},
		{name: "context array", body: `{"context":["user_id","a"]}`, status: bad, want: "context must be an object, not array"},
		{name: "input_text object", body: `{"input_text":{"a":1}}`, status: bad, want: "input_text must be a string, not object"},
		// Duplicate keys: encoding/json would keep the last, a proxy in front
		// may have read the first.
		{name: "duplicate user_id", body: `{"context":{"user_id":"a","user_id":"b"}}`, status: bad, want: `duplicate key \"user_id\"`},
		{name: "duplicate context", body: `{"context":{"user_id":"a"},"context":{"user_id":"b"}}`, status: bad, want: `duplicate key \"context\"`},
		{name: "duplicate by escape", body: `{"context":{"user_id":"a","user\u005fid":"b"}}`, status: bad, want: `duplicate key \"user_id\"`},
		{name: "duplicate by case", body: `{"context":{"user_id":"a","USER_ID":"b"}}`, status: bad, want: `duplicate key \"USER_ID\"`},
		// Only names that land on one field are one name: the other
		// members of context are ignored, and need only differ exactly.
		{name: "case variants of an ignored field", body: `{"context":{"k":1,"\u212a":2,"K":3}}`, status: ok, want: `"allowed":true`},
		{name: "duplicate by case of another field", body: `{"input_text":"a","Input_Text":"b"}`, status: bad, want: `duplicate key \"Input_Text\"`},
		{name: "duplicate in ignored field", body: `{"context":{"extra":{"x":1,"x":2}}}`, status: bad, want: `duplicate key \"x\"`},
		{name: "duplicate in unknown field", body: `{"extra":{"x":1,"x":2}}`, status: bad, want: `duplicate key \"x\"`},
		{name: "same key in sibling objects", body: `{"context":{"a":{"x":1},"b":{"x":2},"user_id":"siblings"}}`, status: ok, want: `"allowed":true`},
		// Nesting.
		{name: "nested too deep", body: deep, status: bad, want: "nests deeper than 10000 levels"},
		{name: "nested a megabyte deep", body: `{"a":` + strings.Repeat("[", 1<<20-10), status: bad, want: "nests deeper than 10000 levels"},
		{name: "nested as deep as allowed", body: notDeep, status: ok, want: `"allowed":true`},
		// Huge strings.
		{name: "user_id at the limit", body: `{"context":{"user_id":"` + strings.Repeat("u", 256) + `"}}`, status: ok, want: `"allowed":true`},
		{name: "user_id over the limit", body: `{"context":{"user_id":"` + strings.Repeat("u", 257) + `"}}`, status: bad, want: "user_id must be at most 256 bytes"},
		{name: "user_id over the limit in multibyte", body: `{"context":{"user_id":"` + strings.Repeat("é", 129) + `"}}`, status: bad, want: "at most 256 bytes"},
		{name: "huge prompt is fine", body: `{"input_text":"` + strings.Repeat("p", 1000000) + `","context":{"user_id":"prompt"}}`, status: ok, want: `"allowed":true`},
		{name: "huge tier name", body: `{"context":{"user_tier":"` + strings.Repeat("t", 100000) + `"}}`, status: bad, want: `unknown tier \"tttt`},
		{name: "huge key", body: `{"context":{"` + strings.Repeat("k", 500000) + `":1,"user_id":"hugekey"}}`, status: ok, want: `"allowed":true`},
		{name: "huge unknown key", body: `{"` + strings.Repeat("k", 500000) + `":1,"context":{"user_id":"hugekey"}}`, status: bad, want: `unknown field \"kkkk`},
		// Invalid UTF-8 and unpaired surrogates would each become U+FFFD.
		{name: "invalid UTF-8 in user_id", body: "{\"context\":{\"user_id\":\"a\xff\"}}", status: bad, want: "request body must be UTF-8"},
		{name: "overlong UTF-8", body: "{\"context\":{\"user_id\":\"\xc0\xaf\"}}", status: bad, want: "must be UTF-8"},
		{name: "UTF-16 body", body: "{\x00\"\x00}\x00", status: bad, want: "malformed JSON"},
		{name: "lone high surrogate", body: `{"context":{"user_id":"\ud800"}}`, status: bad, want: `unpaired UTF-16 surrogate (\\ud800)`},
		{name: "lone low surrogate", body: `{"context":{"user_id":"\uDC00x"}}`, status: bad, want: "unpaired UTF-16 surrogate"},
		{name: "reversed pair", body: `{"context":{"user_id":"\udc00\ud800"}}`, status: bad, want: "unpaired UTF-16 surrogate"},
		{name: "escaped backslash then u", body: `{"context":{"user_id":"\\ud800"}}`, status: ok, want: `"allowed":true`},
		{name: "surrogate pair", body: `{"context":{"user_id":"\ud83d\ude00"}}`, status: ok, want: `"allowed":true`},
		// Control characters.
		{name: "raw control character", body: "{\"context\":{\"user_id\":\"a\x01\"}}", status: bad, want: "malformed JSON"},
		{name: "escaped NUL in user_id", body: `{"context":{"user_id":"alice\u0000"}}`, status: bad, want: "user_id must not contain control characters (found U+0000)"},
		{name: "newline in user_id", body: `{"context":{"user_id":"alice\nadmin"}}`, status: bad, want: "must not contain control characters"},
		{name: "escape sequence in user_id", body: `{"context":{"user_id":"\u001b[31mred"}}`, status: bad, want: "must not contain control characters"},
		{name: "C1 control in user_id", body: `{"context":{"user_id":"a\u0085"}}`, status: bad, want: "must not contain control characters"},
		{name: "control character in tier", body: `{"context":{"user_tier":"fr\u0000ee"}}`, status: bad, want: `unknown tier \"fr?ee\"`},
		// SQL fragments are data.
		{name: "SQL in user_id", body: `{"context":{"user_id":"alice'; DROP TABLE requests; --"}}`, status: ok, want: `"allowed":true`},
		{name: "SQL tautology in user_id", body: `{"context":{"user_id":"' OR '1'='1"}}`, status: ok, want: `"allowed":true`},
		{name: "SQL in tier", body: `{"context":{"user_tier":"free' OR '1'='1"}}`, status: bad, want: `unknown tier \"free' OR '1'='1\"`},
		{name: "SQL in tier path", method: "PUT", path: "/v1/tiers/x';DROP%20TABLE%20tiers;--", header: admin,
			body: `{"requests_per_minute":1,"requests_per_hour":1,"requests_per_day":1,"burst_allowance":0}`, status: bad, want: "tier name must match"},
		{name: "SQL in usage path", method: "GET", path: "/v1/usage/'%20OR%201=1%20--", header: admin, status: ok, want: `"count":0`},
		// Methods and content types that do not fit.
		{name: "GET check", method: "GET", status: 405, want: "Method Not Allowed"},
		{name: "PUT check", method: "PUT", body: `{}`, status: 405, want: "Method Not Allowed"},
		{name: "DELETE check", method: "DELETE", status: 405, want: "Method Not Allowed"},
		{name: "form content type", body: `{"context":{"user_id":"form"}}`, header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, status: 415, want: "Content-Type must be application/json"},
		{name: "text/plain", body: `{"context":{"user_id":"text"}}`, header: map[string]string{"Content-Type": "text/plain"}, status: 415, want: "Content-Type must be application/json"},
		{name: "multipart", body: `{}`, header: map[string]string{"Content-Type": "multipart/form-data; boundary=x"}, status: 415, want: "Content-Type must be application/json"},
		{name: "latin1 charset", body: `{}`, header: map[string]string{"Content-Type": "application/json; charset=latin1"}, status: 415, want: "charset=utf-8"},
		{name: "unparsable content type", body: `{}`, header: map[string]string{"Content-Type": "application/json;;;"}, status: 415, want: "Content-Type must be application/json"},
		{name: "json with charset", body: `{"context":{"user_id":"charset"}}`, header: map[string]string{"Content-Type": "Application/JSON; charset=UTF-8"}, status: ok, want: `"allowed":true`},
		{name: "no content type", body: `{"context":{"user_id":"notype"}}`, header: map[string]string{"Content-Type": ""}, status: ok, want: `"allowed":true`},
		{name: "tier PUT as a form", method: "PUT", path: "/v1/tiers/formtier", header: map[string]string{"Authorization": "Bearer " + adminToken, "Content-Type": "application/x-www-form-urlencoded"},
			body: `{"requests_per_minute":1,"requests_per_hour":1,"requests_per_day":1,"burst_allowance":0}`, status: 415, want: "Content-Type must be application/json"},
		{name: "dry_run not a boolean", path: "/v1/check?dry_run=yes", body: `{}`, status: bad, want: "dry_run must be true or false"},
		// A page on another site cannot spend quota through its visitor's browser.
		{name: "cross-site fetch", body: `{"context":{"user_id":"victim"}}`, header: map[string]string{"Sec-Fetch-Site": "cross-site", "Content-Type": ""}, status: 403, want: "cross-site requests from browsers are refused"},
		{name: "cross-origin form", body: `{"context":{"user_id":"victim"}}`, header: map[string]string{"Origin": "https://evil.example"}, status: 403, want: "cross-site requests"},
		{name: "same-origin fetch", body: `{"context":{"user_id":"samesite"}}`, header: map[string]string{"Sec-Fetch-Site": "same-origin"}, status: ok, want: `"allowed":true`},
		// Oversized bodies, with and without a length.
		{name: "body of exactly 1 MiB", body: `{"input_text":"` + strings.Repeat("a", api.MaxBodyBytes-len(`{"input_text":""}`)) + `"}`, status: ok, want: `"allowed":true`},
		{name: "body over 1 MiB", body: `{"input_text":"` + strings.Repeat("a", api.MaxBodyBytes-len(`{"input_text":""}`)+1) + `"}`, status: 413, want: "larger than 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method, path := tc.method, tc.path
			if method == "" {
				method = http.MethodPost
			}
			if path == "" {
				path = "/v1/check"
			}
			before := e.requests.recorded.Load()
			rec := e.send(method, path, tc.body, tc.header)
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.want) {
				t.Fatalf("got %d %.300s, want %d containing %s", rec.Code, rec.Body, tc.status, tc.want)
			}
			if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("Content-Type %q", ct)
			}
			if tc.status >= 400 && message(rec) == "" {
				t.Errorf("error answer without a message: %s", rec.Body)
			}
			recorded := e.requests.recorded.Load() - before
			if wantRecorded := int64(0); method == http.MethodPost && tc.status == ok {
				wantRecorded = 1
				if recorded != wantRecorded {
					t.Fatalf("recorded %d requests, want %d", recorded, wantRecorded)
				}
			} else if recorded != 0 {
				t.Fatalf("a %d answer recorded %d requests", tc.status, recorded)
			}
		})
	}
	// The SQL in user ids was stored as data: each such user has its own
	// count, and the tables are intact.
	for user, want := range map[string]int64{"alice'; DROP TABLE requests; --": 1, "' OR '1'='1": 1, "alice": 0, "victim": 0, "form": 0} {
		if got := e.dayCount(user); got != want {
			t.Errorf("user %q has %d requests, want %d", user, got, want)
		}
	}
	if rec := e.send("GET", "/v1/tiers/free", "", admin); rec.Code != ok {
		t.Fatalf("tiers after the SQL cases: %d %s", rec.Code, rec.Body)
	}
	// A 405 says which method fits.
	if rec := e.send("GET", "/v1/check", "", nil); !strings.Contains(rec.Header().Get("Allow"), "POST") {
		t.Errorf("405 without Allow: POST: %q", rec.Header().Get("Allow"))
	}
	// A CORS preflight is answered without granting anything, so a browser
	// never sends the check that would follow it.
	rec := e.send("OPTIONS", "/v1/check", "", map[string]string{"Origin": "https://evil.example", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"})
	for k := range rec.Header() {
		if strings.HasPrefix(strings.ToLower(k), "access-control-") {
			t.Errorf("preflight answered with %s: %q", k, rec.Header().Get(k))
		}
	}
	if rec.Code >= 300 && rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("preflight: %d", rec.Code)
	}
}

// TestOversizedBodyWithoutLength streams a body with no Content-Length: the
// limit holds all the same.
func TestOversizedBodyWithoutLength(t *testing.T) {
	e := newGuardEnv(t, api.Config{})
	srv := httpServer(t, e.srv)
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte(`{"input_text":"`))
		chunk := []byte(strings.Repeat("a", 64<<10))
		for range 20 { // 1.25 MiB
			if _, err := pw.Write(chunk); err != nil {
				break
			}
		}
		pw.Write([]byte(`"}`))
		pw.Close()
	}()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/check", pr)
	req.Header.Set("Content-Type", "application/json")
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked 1.25 MiB body: %d", res.StatusCode)
	}
	if n := e.requests.recorded.Load(); n != 0 {
		t.Fatalf("recorded %d", n)
	}
}

// TestBurstOfDistinctUsers sends 10,000 checks for 10,000 different users
// from 32 clients at once over HTTP: every one is admitted, answered 200
// and counted once. (2,000 under the race detector.)
func TestBurstOfDistinctUsers(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 requests")
	}
	e := newGuardEnv(t, api.Config{})
	srv := httpServer(t, e.srv)
	users, clients := 10000, 32
	if dbtest.RaceEnabled {
		users = 2000
	}
	var next atomic.Int64
	var statuses sync.Map
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Transport: &http.Transport{}}
			defer client.CloseIdleConnections()
			for {
				i := next.Add(1)
				if i > int64(users) {
					return
				}
				body := fmt.Sprintf(`{"context":{"user_id":"burst-%05d"}}`, i)
				res, err := client.Post(srv.URL+"/v1/check", "application/json", strings.NewReader(body))
				if err != nil {
					statuses.Store(fmt.Sprint("error: ", err), true)
					continue
				}
				drain(res)
				if res.StatusCode != http.StatusOK {
					statuses.Store(fmt.Sprint("status ", res.StatusCode), true)
				}
			}
		}()
	}
	wg.Wait()
	statuses.Range(func(k, _ any) bool { t.Errorf("answer: %v", k); return true })
	if got := e.requests.recorded.Load(); got != int64(users) {
		t.Fatalf("recorded %d, want %d", got, users)
	}
	for _, i := range []int{1, users / 2, users} {
		if got := e.dayCount(fmt.Sprintf("burst-%05d", i)); got != 1 {
			t.Fatalf("user %d counted %d times", i, got)
		}
	}
	t.Logf("%d distinct users from %d clients in %v", users, clients, time.Since(start).Round(time.Millisecond))
}
