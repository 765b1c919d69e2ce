package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/api/gateway"
	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

// undocumented lists the path prefixes the OpenAPI description leaves out,
// and why. Every other route must be described, and every description must
// have a route.
var undocumented = map[string]string{
	"/admin": "the admin page: HTML forms for browsers, not an API",
	"/llm":   "the gateway: the OpenAI and Anthropic APIs, forwarded to an upstream, which their providers describe",
}

var httpMethods = []string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}

// specURL is where the description is filed in the schema compiler.
const specURL = "https://policyguard.invalid/openapi.json"

// spec is the OpenAPI description the server serves, parsed.
type spec struct {
	doc      any
	compiler *jsonschema.Compiler
	schemas  map[string]*jsonschema.Schema
}

func loadSpec(t *testing.T, h http.Handler) *spec {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi.yaml", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /openapi.yaml: %d", rec.Code)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/yaml" {
		t.Fatalf("GET /openapi.yaml: Content-Type %q", ct)
	}
	var y any
	if err := yaml.Unmarshal(rec.Body.Bytes(), &y); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	// Through JSON, so that numbers and maps have the types the schema
	// validator expects.
	j, err := json.Marshal(y)
	if err != nil {
		t.Fatalf("openapi.yaml as JSON: %v", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020) // OpenAPI 3.1's dialect
	c.AssertFormat()
	if err := c.AddResource(specURL, doc); err != nil {
		t.Fatal(err)
	}
	return &spec{doc: doc, compiler: c, schemas: map[string]*jsonschema.Schema{}}
}

// at returns the node at JSON pointer ptr ("" is the root).
func (s *spec) at(ptr string) (any, bool) {
	node := s.doc
	if ptr == "" {
		return node, true
	}
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := node.(map[string]any)
		if !ok {
			return nil, false
		}
		if node, ok = m[tok]; !ok {
			return nil, false
		}
	}
	return node, true
}

// resolve follows OpenAPI reference objects from ptr to the object they
// name, returning it and its own pointer.
func (s *spec) resolve(t *testing.T, ptr string) (map[string]any, string) {
	t.Helper()
	for range 10 {
		node, ok := s.at(ptr)
		if !ok {
			t.Fatalf("openapi.yaml has nothing at %s", ptr)
		}
		m, ok := node.(map[string]any)
		if !ok {
			t.Fatalf("openapi.yaml: %s is not an object", ptr)
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return m, ptr
		}
		if !strings.HasPrefix(ref, "#/") {
			t.Fatalf("openapi.yaml: %s refers outside the document: %s", ptr, ref)
		}
		ptr = ref[1:]
	}
	t.Fatalf("openapi.yaml: references loop at %s", ptr)
	return nil, ""
}

// schema compiles the schema at ptr.
func (s *spec) schema(t *testing.T, ptr string) *jsonschema.Schema {
	t.Helper()
	if sch, ok := s.schemas[ptr]; ok {
		return sch
	}
	sch, err := s.compiler.Compile(specURL + "#" + (&url.URL{Fragment: ptr}).EscapedFragment())
	if err != nil {
		t.Fatalf("openapi.yaml: schema at %s: %v", ptr, err)
	}
	s.schemas[ptr] = sch
	return sch
}

func pointer(tokens ...string) string {
	var b strings.Builder
	for _, tok := range tokens {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

// operations returns "METHOD /path" of every operation described.
func (s *spec) operations(t *testing.T) []string {
	t.Helper()
	paths, ok := s.doc.(map[string]any)["paths"].(map[string]any)
	if !ok {
		t.Fatal("openapi.yaml has no paths")
	}
	var ops []string
	for path, item := range paths {
		for method := range item.(map[string]any) {
			if slices.Contains(httpMethods, method) {
				ops = append(ops, strings.ToUpper(method)+" "+path)
			}
		}
	}
	sort.Strings(ops)
	return ops
}

var echoParam = regexp.MustCompile(`:([A-Za-z_][A-Za-z0-9_]*)`)

func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	e := newEnv(t)
	s := loadSpec(t, e.srv)
	var routes []string
	// Every route: those of -test-clock and of the gateway too.
	upstream, _ := gateway.ParseUpstream("openai=openai:https://api.openai.invalid/v1")
	gateway := api.NewServer(api.Config{Service: policy.NewService(e.store, e.store), Logger: slog.New(slog.DiscardHandler),
		Gateway: &gateway.Config{Upstreams: []gateway.Upstream{upstream}}})
	for _, r := range append(testClockServer(e).Routes(), gateway.Routes()...) {
		if !slices.Contains(httpMethods, strings.ToLower(r.Method)) {
			continue // Echo's own entries, such as its not-found handlers
		}
		skip := false
		for prefix := range undocumented {
			skip = skip || r.Path == prefix || strings.HasPrefix(r.Path, prefix+"/")
		}
		if !skip {
			routes = append(routes, r.Method+" "+echoParam.ReplaceAllString(r.Path, "{$1}"))
		}
	}
	sort.Strings(routes)
	if len(routes) < 5 {
		t.Fatalf("only %d routes: %v", len(routes), routes)
	}
	ops := s.operations(t)
	for _, r := range routes {
		if !slices.Contains(ops, r) {
			t.Errorf("route %s is not described in api/openapi.yaml", r)
		}
	}
	for _, op := range ops {
		if !slices.Contains(routes, op) {
			t.Errorf("api/openapi.yaml describes %s, which has no route", op)
		}
	}
}

// TestOpenAPIDocument checks what a code generator relies on: the version,
// an operationId and summary on every operation, a success answer on each,
// every reference resolving and every schema compiling.
func TestOpenAPIDocument(t *testing.T) {
	s := loadSpec(t, newEnv(t).srv)
	root := s.doc.(map[string]any)
	if v, _ := root["openapi"].(string); !strings.HasPrefix(v, "3.1.") {
		t.Errorf("openapi = %q, want 3.1.x", v)
	}
	ids := map[string]string{}
	for _, op := range s.operations(t) {
		method, path, _ := strings.Cut(op, " ")
		o, _ := s.resolve(t, pointer("paths", path, strings.ToLower(method)))
		id, _ := o["operationId"].(string)
		if id == "" || ids[id] != "" {
			t.Errorf("%s: operationId %q missing or also on %s", op, id, ids[id])
		}
		ids[id] = op
		if sum, _ := o["summary"].(string); sum == "" {
			t.Errorf("%s has no summary", op)
		}
		responses, _ := o["responses"].(map[string]any)
		ok2xx := false
		for status := range responses {
			ok2xx = ok2xx || strings.HasPrefix(status, "2")
		}
		if !ok2xx {
			t.Errorf("%s describes no success answer", op)
		}
	}
	var walk func(ptr string, node any)
	walk = func(ptr string, node any) {
		switch n := node.(type) {
		case map[string]any:
			if ref, ok := n["$ref"].(string); ok {
				if _, found := s.at(strings.TrimPrefix(ref, "#")); !strings.HasPrefix(ref, "#/") || !found {
					t.Errorf("%s: $ref %q does not resolve", ptr, ref)
				}
			}
			for k, v := range n {
				walk(ptr+pointer(k), v)
			}
		case []any:
			for i, v := range n {
				walk(ptr+"/"+strconv.Itoa(i), v)
			}
		}
	}
	walk("", s.doc)
	schemas, _ := s.at("/components/schemas")
	for name := range schemas.(map[string]any) {
		s.schema(t, pointer("components", "schemas", name))
	}
}

// TestOpenAPICheckRequest holds the description of a check body to what
// the service reads: a body written with the described names is valid
// exactly when the service takes it. (The service also takes names in
// another letter case, which the description cannot say.)
func TestOpenAPICheckRequest(t *testing.T) {
	e := newEnv(t)
	s := loadSpec(t, e.srv)
	sch := s.schema(t, pointer("components", "schemas", "CheckRequest"))
	if rec := e.do(http.MethodPut, "/v1/accounts/acme", `{"tier":"pro"}`, true); rec.Code != http.StatusCreated {
		t.Fatalf("put account: %d %s", rec.Code, rec.Body)
	}
	for _, body := range []string{
		`{"context":{"user_id":"oa","account_id":"acme"}}`,
		`{"context":{"user_id":"oa","account_id":null}}`,
		`{"context":{"user_id":"oa","account_id":5}}`,
		`{"account_id":"acme"}`,
		`{}`,
		`{"input_text":"hi","context":{"user_id":"oa","user_tier":"pro","feature":"search","session":{"id":1}},"tokens":10,"dry_run":true}`,
		`{"input_text":null,"context":null,"dry_run":false}`,
		`{"user_id":"oa"}`,
		`{"context":{"user_id":"oa"},"feature":"search"}`,
		`{"context":{"user_id":"oa","tokens":10}}`,
		`{"extra":1}`,
		`{"dry_run":"true"}`,
		`{"dry_run":null}`,
	} {
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		valid := sch.Validate(v) == nil
		rec := e.do(http.MethodPost, "/v1/check", body, false)
		if taken := rec.Code != http.StatusBadRequest; valid != taken {
			t.Errorf("%s: valid by the description: %v; the service answers %d %s", body, valid, rec.Code, rec.Body)
		}
	}
}

// TestOpenAPIKeyRequest holds the description of a POST /v1/keys body to
// what the service takes: valid by the description exactly when the
// service makes the key.
func TestOpenAPIKeyRequest(t *testing.T) {
	e := newEnv(t)
	s := loadSpec(t, e.srv)
	sch := s.schema(t, pointer("components", "schemas", "KeyInput"))
	for _, body := range []string{
		`{"user_id":"ok"}`,
		`{"user_id":"ok","service":false,"note":"n"}`,
		`{"user_id":"ok","service":null,"note":null}`,
		`{"service":true}`,
		`{"service":true,"user_id":null,"note":"n"}`,
		`{}`,
		`{"note":"n"}`,
		`{"service":false}`,
		`{"service":null}`,
		`{"user_id":null}`,
		`{"user_id":""}`,
		`{"user_id":"ok","service":true}`,
		`{"user_id":"ok","service":"true"}`,
		`{"user_id":"ok","extra":1}`,
		`{"user_id":"` + strings.Repeat("u", 257) + `"}`,
		`{"service":true,"note":"` + strings.Repeat("n", 1025) + `"}`,
		`{"user_id":"ok","note":5}`,
	} {
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		valid := sch.Validate(v) == nil
		rec := e.do(http.MethodPost, "/v1/keys", body, true)
		if taken := rec.Code == http.StatusCreated; valid != taken || !taken && rec.Code != http.StatusBadRequest {
			t.Errorf("%.80s: valid by the description: %v; the service answers %d %s", body, valid, rec.Code, rec.Body)
		}
	}
}

// TestOpenAPIAccountRequest holds the description of a PUT
// /v1/accounts/{account_id} body to what the service takes: valid by the
// description exactly when the service creates or replaces the account.
// (An unknown tier, an account_id other than the path's and pooled limits
// that cannot all bind are refused too, which a schema cannot say.)
func TestOpenAPIAccountRequest(t *testing.T) {
	e := newEnv(t)
	s := loadSpec(t, e.srv)
	sch := s.schema(t, pointer("components", "schemas", "AccountInput"))
	for _, body := range []string{
		`{"tier":"pro"}`,
		`{"tier":"pro","limits":{"requests_per_minute":5,"tokens_per_day":null,"max_concurrent":2},"note":"n"}`,
		`{"account_id":"acme","tier":"pro","limits":null,"note":null,"updated_at":"2026-03-01T12:00:00Z"}`,
		`{"tier":"pro","limits":{}}`,
		`{}`,
		`{"tier":null}`,
		`{"tier":""}`,
		`{"tier":"Pro"}`,
		`{"tier":5}`,
		`{"tier":"pro","limits":{"requests_per_minute":-1}}`,
		`{"tier":"pro","limits":{"requests_per_minute":2147483648}}`,
		`{"tier":"pro","limits":{"requests_per_minute":1.5}}`,
		`{"tier":"pro","limits":{"requests_per_minute":"5"}}`,
		`{"tier":"pro","limits":{"requests_per_second":5}}`,
		`{"tier":"pro","limits":[]}`,
		`{"tier":"pro","extra":1}`,
		`{"tier":"pro","note":5}`,
		`{"tier":"pro","note":"` + strings.Repeat("n", 1025) + `"}`,
	} {
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		valid := sch.Validate(v) == nil
		rec := e.do(http.MethodPut, "/v1/accounts/acme", body, true)
		if taken := rec.Code == http.StatusCreated || rec.Code == http.StatusOK; valid != taken || !taken && rec.Code != http.StatusBadRequest {
			t.Errorf("%.80s: valid by the description: %v; the service answers %d %s", body, valid, rec.Code, rec.Body)
		}
	}
}

// The description of a tier's run object says what PUT /v1/tiers/{name}
// takes: a body is valid by TierInput exactly when the service takes it.
func TestOpenAPITierRunRequest(t *testing.T) {
	e := newEnv(t)
	s := loadSpec(t, e.srv)
	sch := s.schema(t, pointer("components", "schemas", "TierInput"))
	limits := `"requests_per_minute":10,"requests_per_hour":100,"requests_per_day":1000,"burst_allowance":0`
	for _, run := range []string{
		`null`,
		`{}`,
		`{"max_requests":50,"max_tokens":null,"max_cost":"2.5","max_duration":600,"max_concurrent":4,"max_depth":64,"required":true}`,
		`{"required":false}`,
		`{"max_depth":0}`,
		`{"max_depth":65}`,
		`{"max_requests":-1}`,
		`{"max_requests":2147483648}`,
		`{"max_requests":"5"}`,
		`{"max_cost":2}`,
		`{"max_cost":"-1"}`,
		`{"required":"yes"}`,
		`{"requests_per_minute":5}`,
		`{"cost_per_day":"1"}`,
		`[]`,
		`5`,
	} {
		body := `{` + limits + `,"run":` + run + `}`
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		valid := sch.Validate(v) == nil
		rec := e.do(http.MethodPut, "/v1/tiers/agents", body, true)
		if taken := rec.Code == http.StatusCreated || rec.Code == http.StatusOK; valid != taken || !taken && rec.Code != http.StatusBadRequest {
			t.Errorf("run %s: valid by the description: %v; the service answers %d %s", run, valid, rec.Code, rec.Body)
		}
	}
	// A run's limit is none of the tier's own.
	for _, own := range []string{`"max_requests":5`, `"max_depth":2`} {
		body := `{` + limits + `,` + own + `}`
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if rec := e.do(http.MethodPut, "/v1/tiers/agents", body, true); sch.Validate(v) == nil || rec.Code != http.StatusBadRequest {
			t.Errorf("%s among the tier's own: valid by the description %v, the service answers %d", own, sch.Validate(v) == nil, rec.Code)
		}
	}
}

// answerCase is one request whose answer is checked against the
// description of its operation and status.
type answerCase struct {
	method, template, path, body string
	admin                        bool
	status                       int
	header                       map[string]string // beyond Content-Type: application/json
	srv                          string            // "" the main server, "token" one with an API token, "failopen" one failing open on a closed store, "throttled" one that has seen too many wrong admin tokens
}

// TestOpenAPIAnswersMatch sends requests that produce every answer the
// description lists, and validates each against it: status, media type,
// body schema and required headers. A status described but never produced
// here fails too.
func TestOpenAPIAnswersMatch(t *testing.T) {
	e := newEnv(t)
	s := loadSpec(t, e.srv)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	servers := map[string]http.Handler{
		"": e.srv,
		"token": api.NewServer(api.Config{
			Service:  policy.NewService(e.store, e.store, policy.WithClock(e.clock.Now)),
			Admin:    policy.NewAdminGate(adminToken),
			APIToken: "check-token",
			Logger:   quiet,
		}),
	}
	broken, err := db.Open(context.Background(), filepath.Join(t.TempDir(), "broken.db"))
	if err != nil {
		t.Fatal(err)
	}
	broken.Close()
	servers["failopen"] = api.NewServer(api.Config{
		Service:  policy.NewService(broken, broken),
		Admin:    policy.NewAdminGate(adminToken),
		FailOpen: true,
		Logger:   quiet,
	})
	// A server this client already sent too many wrong admin tokens.
	throttled := api.NewServer(api.Config{
		Service: policy.NewService(e.store, e.store, policy.WithClock(e.clock.Now)),
		Admin:   policy.NewAdminGate(adminToken),
		Logger:  quiet,
	})
	for range policy.MaxAdminFailures {
		send(throttled, "GET", "/v1/tiers", "", map[string]string{"Authorization": "Bearer wrong"})
	}
	servers["throttled"] = throttled
	servers["testclock"], servers["testclock-throttled"] = testClockServer(e), throttledTestClockServer(e)
	e.putTier("one", `{"requests_per_minute":1,"requests_per_hour":10,"requests_per_day":10,"burst_allowance":0}`)
	limits := `"requests_per_minute":3,"requests_per_hour":30,"requests_per_day":300,"burst_allowance":1`
	big := `{"input_text":"` + strings.Repeat("a", 1<<20) + `"}`
	e.putTier("metered", `{"requests_per_minute":100,"requests_per_hour":1000,"requests_per_day":1000,"burst_allowance":0,"tokens_per_minute":5000,"tokens_per_day":100000,"max_concurrent":2}`)
	done := e.openCall("om", "metered", 100)
	if rec := e.do("POST", "/v1/calls/"+done+"/finish", ``, false); rec.Code != 200 {
		t.Fatalf("finish: %d %s", rec.Code, rec.Body)
	}
	finished, kept := e.openCall("om", "metered", 100), e.openCall("om", "metered", 100)
	// On a server of its own, a tier with a spend limit of $0.03 a day:
	// two calls of $0.02 do not fit together.
	es := newEnv(t)
	es.putPrices(spendPrices)
	es.putTier("spend", `{"requests_per_minute":100,"requests_per_hour":1000,"requests_per_day":1000,"burst_allowance":0,"cost_per_day":"0.03"}`)
	spent := es.openCallBody(`{"context":{"user_id":"os","user_tier":"spend"},"tokens":2000,"model":"gpt-test"}`)
	servers["spend"] = es.srv
	keyRec := e.do("POST", "/v1/keys", `{"user_id":"ok"}`, true)
	if keyRec.Code != 201 {
		t.Fatalf("make a key: %d %s", keyRec.Code, keyRec.Body)
	}
	keyID := decode[createdKey](t, keyRec).ID
	_, viewerToken, err := e.svc.CreateAdmin(context.Background(), "oa-view", policy.RoleViewer, "")
	if err != nil {
		t.Fatal(err)
	}
	viewer := map[string]string{"Authorization": "Bearer " + viewerToken}
	e.putTier("agentrun", `{"requests_per_minute":100,"requests_per_hour":1000,"requests_per_day":1000,"burst_allowance":0,"run":{"max_requests":2}}`)
	for _, ctx := range []string{`"run_id":"oa-run"`, `"run_id":"oa-kid","parent_run_id":"oa-run"`} {
		if rec := e.do("POST", "/v1/check", `{"context":{"user_id":"oar","user_tier":"agentrun",`+ctx+`}}`, false); rec.Code != 200 {
			t.Fatalf("check in a run: %d %s", rec.Code, rec.Body)
		}
	}
	if rec := e.do("POST", "/v1/check", `{"context":{"user_id":"oar","user_tier":"agentrun","run_id":"oa-end"}}`, false); rec.Code != 200 {
		t.Fatalf("check in a run: %d %s", rec.Code, rec.Body)
	}
	cases := []answerCase{
		{"POST", "/v1/check", "/v1/check", `{"context":{"user_id":"oar","user_tier":"agentrun","run_id":"oa-other"}}`, false, 200, nil, ""},
		{"POST", "/v1/check", "/v1/check", `{"context":{"user_id":"oar","user_tier":"agentrun","run_id":"oa-kid"}}`, false, 403, nil, ""},
		{"POST", "/v1/check", "/v1/check", `{"context":{"user_id":"oax","user_tier":"agentrun","run_id":"oa-kid"}}`, false, 409, nil, ""},
		{"GET", "/v1/usage/{user_id}", "/v1/usage/oar?run_id=oa-run", "", true, 200, nil, ""},
		{"GET", "/v1/runs", "/v1/runs?user_id=oar", "", true, 200, nil, ""},
		{"GET", "/v1/runs", "/v1/runs?limit=1&state=open", "", false, 200, viewer, ""},
		{"GET", "/v1/runs", "/v1/runs?limit=0", "", true, 400, nil, ""},
		{"GET", "/v1/runs", "/v1/runs", "", false, 401, nil, ""},
		{"GET", "/v1/runs", "/v1/runs", "", true, 429, nil, "throttled"},
		{"GET", "/v1/runs/{run_id}", "/v1/runs/oa-run", "", true, 200, nil, ""},
		{"GET", "/v1/runs/{run_id}", "/v1/runs/a%01b", "", true, 400, nil, ""},
		{"GET", "/v1/runs/{run_id}", "/v1/runs/oa-run", "", false, 401, nil, ""},
		{"GET", "/v1/runs/{run_id}", "/v1/runs/oa-none", "", true, 404, nil, ""},
		{"GET", "/v1/runs/{run_id}", "/v1/runs/oa-run", "", true, 429, nil, "throttled"},
		{"POST", "/v1/runs/{run_id}/end", "/v1/runs/oa-end/end", "", true, 200, nil, ""},
		{"POST", "/v1/runs/{run_id}/end", "/v1/runs/a%01b/end", "", true, 400, nil, ""},
		{"POST", "/v1/runs/{run_id}/end", "/v1/runs/oa-end/end", "", false, 401, nil, ""},
		{"POST", "/v1/runs/{run_id}/end", "/v1/runs/oa-end/end", "", false, 403, viewer, ""},
		{"POST", "/v1/runs/{run_id}/end", "/v1/runs/oa-none/end", "", true, 404, nil, ""},
		{"POST", "/v1/runs/{run_id}/end", "/v1/runs/oa-end/end", "", true, 429, nil, "throttled"},
		{"POST", "/v1/check", "/v1/check", `{"input_text":"hi","context":{"user_id":"oa","user_tier":"pro","feature":"search"}}`, false, 200, nil, ""},
		{"POST", "/v1/check", "/v1/check?dry_run=true", `{"context":{"user_id":"oa"}}`, false, 200, nil, ""},
		{"POST", "/v1/check", "/v1/check", `{"context":null,"input_text":null}`, false, 200, nil, ""},
		{"POST", "/v1/check", "/v1/check", `{"context":{"extra":[1]},"dry_run":true}`, false, 200, nil, ""},
		{"POST", "/v1/check", "/v1/check", `{"user_id":"oa"}`, false, 400, nil, ""},
		{"POST", "/v1/check", "/v1/check", `{}`, false, 200, nil, "failopen"},
		{"POST", "/v1/check", "/v1/check", `{}`, false, 200, map[string]string{"Authorization": "Bearer check-token"}, "token"},
		{"POST", "/v1/check", "/v1/check", `{}`, false, 401, map[string]string{"Authorization": "Bearer wrong"}, "token"},
		{"POST", "/v1/check", "/v1/check", `{"context":{"user_tier":"gold"}}`, false, 400, nil, ""},
		{"POST", "/v1/check", "/v1/check", `{"context":{"feature":"search"}}`, false, 403, nil, ""},
		{"POST", "/v1/check", "/v1/check", `{}`, false, 403, map[string]string{"Sec-Fetch-Site": "cross-site"}, ""},
		{"POST", "/v1/check", "/v1/check", big, false, 413, nil, ""},
		{"POST", "/v1/check", "/v1/check", `{}`, false, 415, map[string]string{"Content-Type": "text/plain"}, ""},
		{"POST", "/v1/check", "/v1/check", `{"context":{"user_id":"o1","user_tier":"one"}}`, false, 200, nil, ""},
		{"POST", "/v1/check", "/v1/check", `{"context":{"user_id":"o1","user_tier":"one"}}`, false, 429, nil, ""},
		{"POST", "/v1/check", "/v1/check", `{"context":{"user_id":"om","user_tier":"metered"},"tokens":10}`, false, 429, nil, ""}, // 2 calls open
		{"POST", "/v1/check", "/v1/check", `{"context":{"user_id":"om2","user_tier":"metered"},"tokens":10}`, false, 200, nil, ""},
		{"POST", "/v1/check", "/v1/check", `{"context":{"user_id":"om2","user_tier":"metered"},"tokens":1.5}`, false, 400, nil, ""},
		{"POST", "/v1/check", "/v1/check", `{"context":{"user_id":"os","user_tier":"spend"},"tokens":2000,"model":"gpt-test"}`, false, 429, nil, "spend"},
		{"POST", "/v1/check", "/v1/check", `{"context":{"user_id":"os","user_tier":"spend"},"tokens":2000,"model":"gpt-none"}`, false, 400, nil, "spend"},
		{"POST", "/v1/check", "/v1/check", `{"context":{"user_id":"os2","user_tier":"spend"},"tokens":2000,"model":"gpt-test"}`, false, 200, nil, "spend"},
		{"POST", "/v1/calls/{call_id}/keepalive", "/v1/calls/" + spent + "/keepalive", ``, false, 200, nil, "spend"},
		{"POST", "/v1/calls/{call_id}/finish", "/v1/calls/" + spent + "/finish", `{"usage":{"input_tokens":100,"output_tokens":50,"cache_read_tokens":10,"cache_write_tokens":0}}`, false, 200, nil, "spend"},
		{"GET", "/v1/usage/{user_id}", "/v1/usage/os?tier=spend", "", true, 200, nil, "spend"},
		{"POST", "/v1/calls/{call_id}/finish", "/v1/calls/" + finished + "/finish", `{"tokens":42}`, false, 200, nil, ""},
		{"POST", "/v1/calls/{call_id}/finish", "/v1/calls/" + finished + "/finish", `{"tokens":42}`, false, 200, nil, ""},
		{"POST", "/v1/calls/{call_id}/finish", "/v1/calls/" + finished + "/finish", `{"tokens":43}`, false, 409, nil, ""},
		{"POST", "/v1/calls/{call_id}/finish", "/v1/calls/nosuchcall/finish", ``, false, 404, nil, ""},
		{"POST", "/v1/calls/{call_id}/finish", "/v1/calls/" + kept + "/finish", `{"tokens":-1}`, false, 400, nil, ""},
		{"POST", "/v1/calls/{call_id}/finish", "/v1/calls/" + kept + "/finish", `{}`, false, 401, map[string]string{"Authorization": "Bearer wrong"}, "token"},
		{"POST", "/v1/calls/{call_id}/finish", "/v1/calls/" + kept + "/finish", `{}`, false, 403, map[string]string{"Sec-Fetch-Site": "cross-site"}, ""},
		{"POST", "/v1/calls/{call_id}/finish", "/v1/calls/" + kept + "/finish", big, false, 413, nil, ""},
		{"POST", "/v1/calls/{call_id}/finish", "/v1/calls/" + kept + "/finish", `{}`, false, 415, map[string]string{"Content-Type": "text/plain"}, ""},
		{"POST", "/v1/calls/{call_id}/keepalive", "/v1/calls/" + kept + "/keepalive", ``, false, 200, nil, ""},
		{"POST", "/v1/calls/{call_id}/keepalive", "/v1/calls/" + done + "/keepalive", ``, false, 409, nil, ""},
		{"POST", "/v1/calls/{call_id}/keepalive", "/v1/calls/nosuchcall/keepalive", ``, false, 404, nil, ""},
		{"POST", "/v1/calls/{call_id}/keepalive", "/v1/calls/" + kept + "/keepalive", ``, false, 401, nil, "token"},
		{"POST", "/v1/calls/{call_id}/keepalive", "/v1/calls/" + kept + "/keepalive", ``, false, 403, map[string]string{"Sec-Fetch-Site": "cross-site"}, ""},
		{"POST", "/v1/calls/{call_id}/keepalive", "/v1/calls/" + kept + "/keepalive", `{}`, false, 415, map[string]string{"Content-Type": "text/plain"}, ""},
		{"GET", "/v1/usage/{user_id}", "/v1/usage/om?tier=metered", "", true, 200, nil, ""},
		{"GET", "/v1/tiers/{name}", "/v1/tiers/metered", "", true, 200, nil, ""},
		{"GET", "/v1/tiers", "/v1/tiers", "", true, 200, nil, ""},
		{"GET", "/v1/tiers", "/v1/tiers", "", false, 401, nil, ""},
		{"GET", "/v1/tiers/{name}", "/v1/tiers/pro", "", true, 200, nil, ""},
		{"GET", "/v1/tiers/{name}", "/v1/tiers/one", "", true, 200, nil, ""}, // with updated_at
		{"GET", "/v1/tiers/{name}", "/v1/tiers/pro", "", false, 401, nil, ""},
		{"GET", "/v1/tiers/{name}", "/v1/tiers/gold", "", true, 404, nil, ""},
		{"PUT", "/v1/tiers/{name}", "/v1/tiers/team", `{` + limits + `,"features":["chat"],"description":"Team"}`, true, 201, nil, ""},
		{"PUT", "/v1/tiers/{name}", "/v1/tiers/team", `{"name":"team",` + limits + `}`, true, 200, nil, ""},
		{"PUT", "/v1/tiers/{name}", "/v1/tiers/team", `{` + limits + `,"models":["gpt-4o-mini*","o3","*"]}`, true, 200, nil, ""},
		{"PUT", "/v1/tiers/{name}", "/v1/tiers/team", `{` + limits + `,"models":[]}`, true, 200, nil, ""},
		{"PUT", "/v1/tiers/{name}", "/v1/tiers/team", `{` + limits + `,"run":{"max_requests":50,"max_cost":"2.5","max_depth":3,"required":true}}`, true, 200, nil, ""},
		{"GET", "/v1/tiers/{name}", "/v1/tiers/team", "", true, 200, nil, ""}, // with its run object
		{"PUT", "/v1/tiers/{name}", "/v1/tiers/team", `{` + limits + `,"run":{"max_depth":0}}`, true, 400, nil, ""},
		{"PUT", "/v1/tiers/{name}", "/v1/tiers/team", `{` + limits + `,"run":null}`, true, 200, nil, ""},
		{"PUT", "/v1/tiers/{name}", "/v1/tiers/team", `{` + limits + `,"models":["*gpt"]}`, true, 400, nil, ""},
		{"PUT", "/v1/tiers/{name}", "/v1/tiers/team", `{` + limits + `}`, true, 412, map[string]string{"If-None-Match": "*"}, ""},
		{"PUT", "/v1/tiers/{name}", "/v1/tiers/team", `{"requests_per_minute":-1}`, true, 400, nil, ""},
		{"PUT", "/v1/tiers/{name}", "/v1/tiers/team", `{}`, false, 401, nil, ""},
		{"PUT", "/v1/tiers/{name}", "/v1/tiers/team", big, true, 413, nil, ""},
		{"PUT", "/v1/tiers/{name}", "/v1/tiers/team", `{` + limits + `}`, true, 415, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, ""},
		{"DELETE", "/v1/tiers/{name}", "/v1/tiers/team", "", true, 204, nil, ""},
		{"DELETE", "/v1/tiers/{name}", "/v1/tiers/team", "", false, 401, nil, ""},
		{"DELETE", "/v1/tiers/{name}", "/v1/tiers/team", "", true, 404, nil, ""},
		{"DELETE", "/v1/tiers/{name}", "/v1/tiers/free", "", true, 409, nil, ""},
		{"PUT", "/v1/users/{user_id}", "/v1/users/ou", `{"tier":"pro","limits":{"requests_per_minute":5,"tokens_per_day":null,"max_concurrent":2},"note":"n"}`, true, 201, nil, ""},
		{"PUT", "/v1/users/{user_id}", "/v1/users/ou", `{"tier":null,"limits":null}`, true, 200, nil, ""},
		{"PUT", "/v1/users/{user_id}", "/v1/users/ou", `{"tier":"gold"}`, true, 400, nil, ""},
		{"PUT", "/v1/users/{user_id}", "/v1/users/ou", `{}`, false, 401, nil, ""},
		{"PUT", "/v1/users/{user_id}", "/v1/users/ou", big, true, 413, nil, ""},
		{"PUT", "/v1/users/{user_id}", "/v1/users/ou", `{}`, true, 415, map[string]string{"Content-Type": "text/plain"}, ""},
		{"PUT", "/v1/users/{user_id}", "/v1/users/ou", `{}`, true, 429, nil, "throttled"},
		{"PUT", "/v1/users/{user_id}", "/v1/users/ov", `{"tier":"one","limits":{"tokens_per_minute":100}}`, true, 201, nil, ""},
		{"DELETE", "/v1/tiers/{name}", "/v1/tiers/one", "", true, 409, nil, ""},
		{"GET", "/v1/users/{user_id}", "/v1/users/ou", "", true, 200, nil, ""},
		{"GET", "/v1/users/{user_id}", "/v1/users/ov", "", true, 200, nil, ""},
		{"GET", "/v1/users/{user_id}", "/v1/users/nobody", "", true, 404, nil, ""},
		{"GET", "/v1/users/{user_id}", "/v1/users/" + strings.Repeat("u", 257), "", true, 400, nil, ""},
		{"GET", "/v1/users/{user_id}", "/v1/users/ou", "", false, 401, nil, ""},
		{"GET", "/v1/users/{user_id}", "/v1/users/ou", "", true, 429, nil, "throttled"},
		{"GET", "/v1/users", "/v1/users", "", true, 200, nil, ""},
		{"GET", "/v1/users", "/v1/users?limit=1", "", true, 200, nil, ""},
		{"GET", "/v1/users", "/v1/users?limit=0", "", true, 400, nil, ""},
		{"GET", "/v1/users", "/v1/users", "", false, 401, nil, ""},
		{"GET", "/v1/users", "/v1/users", "", true, 429, nil, "throttled"},
		{"DELETE", "/v1/users/{user_id}", "/v1/users/ov", "", true, 204, nil, ""},
		{"DELETE", "/v1/users/{user_id}", "/v1/users/ov", "", true, 404, nil, ""},
		{"DELETE", "/v1/users/{user_id}", "/v1/users/" + strings.Repeat("u", 257), "", true, 400, nil, ""},
		{"DELETE", "/v1/users/{user_id}", "/v1/users/ou", "", false, 401, nil, ""},
		{"DELETE", "/v1/users/{user_id}", "/v1/users/ou", "", true, 429, nil, "throttled"},
		// Accounts: a plan with pooled limits, accounts on it, members by
		// their record and by the check's context, the pool's usage.
		{"PUT", "/v1/tiers/{name}", "/v1/tiers/plan", `{` + limits + `,"account":{"requests_per_minute":2,"tokens_per_day":1000,"max_concurrent":1}}`, true, 201, nil, ""},
		{"PUT", "/v1/tiers/{name}", "/v1/tiers/plan", `{` + limits + `,"account":{"requests_per_minute":2,"requests_per_hour":1}}`, true, 400, nil, ""},
		{"GET", "/v1/tiers/{name}", "/v1/tiers/plan", "", true, 200, nil, ""},
		{"PUT", "/v1/accounts/{account_id}", "/v1/accounts/acme", `{"tier":"plan","limits":{"requests_per_hour":50,"max_concurrent":null},"note":"Acme"}`, true, 201, nil, ""},
		{"PUT", "/v1/accounts/{account_id}", "/v1/accounts/acme", `{"account_id":"acme","tier":"plan","limits":null,"note":"Acme","updated_at":"2026-03-01T12:00:00Z"}`, true, 200, nil, ""},
		{"PUT", "/v1/accounts/{account_id}", "/v1/accounts/initech", `{"tier":"plan"}`, true, 201, nil, ""},
		{"PUT", "/v1/accounts/{account_id}", "/v1/accounts/acme", `{"tier":"gold"}`, true, 400, nil, ""},
		{"PUT", "/v1/accounts/{account_id}", "/v1/accounts/acme", `{"tier":"plan"}`, false, 401, nil, ""},
		{"PUT", "/v1/accounts/{account_id}", "/v1/accounts/acme", big, true, 413, nil, ""},
		{"PUT", "/v1/accounts/{account_id}", "/v1/accounts/acme", `{"tier":"plan"}`, true, 415, map[string]string{"Content-Type": "text/plain"}, ""},
		{"PUT", "/v1/accounts/{account_id}", "/v1/accounts/acme", `{"tier":"plan"}`, true, 429, nil, "throttled"},
		{"GET", "/v1/accounts/{account_id}", "/v1/accounts/acme", "", true, 200, nil, ""},
		{"GET", "/v1/accounts/{account_id}", "/v1/accounts/" + strings.Repeat("a", 257), "", true, 400, nil, ""},
		{"GET", "/v1/accounts/{account_id}", "/v1/accounts/acme", "", false, 401, nil, ""},
		{"GET", "/v1/accounts/{account_id}", "/v1/accounts/nobody", "", true, 404, nil, ""},
		{"GET", "/v1/accounts/{account_id}", "/v1/accounts/acme", "", true, 429, nil, "throttled"},
		{"GET", "/v1/accounts", "/v1/accounts", "", true, 200, nil, ""},
		{"GET", "/v1/accounts", "/v1/accounts?limit=1", "", true, 200, nil, ""},
		{"GET", "/v1/accounts", "/v1/accounts?limit=1001", "", true, 400, nil, ""},
		{"GET", "/v1/accounts", "/v1/accounts", "", false, 401, nil, ""},
		{"GET", "/v1/accounts", "/v1/accounts", "", true, 429, nil, "throttled"},
		{"PUT", "/v1/users/{user_id}", "/v1/users/am", `{"account":"acme","note":"member"}`, true, 201, nil, ""},
		{"PUT", "/v1/users/{user_id}", "/v1/users/an", `{"account":"nobody"}`, true, 400, nil, ""},
		{"GET", "/v1/users/{user_id}", "/v1/users/am", "", true, 200, nil, ""},
		{"POST", "/v1/check", "/v1/check", `{"context":{"user_id":"am"},"tokens":10}`, false, 200, nil, ""},
		{"POST", "/v1/check", "/v1/check", `{"context":{"user_id":"ac","account_id":"acme"},"tokens":10}`, false, 429, nil, ""}, // the pool's one call is open
		{"POST", "/v1/check", "/v1/check?dry_run=true", `{"context":{"user_id":"ac","account_id":"acme"}}`, false, 429, nil, ""},
		{"POST", "/v1/check", "/v1/check", `{"context":{"user_id":"ac","account_id":"nobody"}}`, false, 400, nil, ""},
		{"POST", "/v1/check", "/v1/check", `{"context":{"user_id":"am","feature":"search"}}`, false, 403, nil, ""},
		{"DELETE", "/v1/tiers/{name}", "/v1/tiers/plan", "", true, 409, nil, ""}, // the plan of two accounts
		{"DELETE", "/v1/accounts/{account_id}", "/v1/accounts/acme", "", true, 409, nil, ""},
		{"DELETE", "/v1/accounts/{account_id}", "/v1/accounts/initech", "", true, 204, nil, ""},
		{"DELETE", "/v1/accounts/{account_id}", "/v1/accounts/initech", "", true, 404, nil, ""},
		{"DELETE", "/v1/accounts/{account_id}", "/v1/accounts/" + strings.Repeat("a", 257), "", true, 400, nil, ""},
		{"DELETE", "/v1/accounts/{account_id}", "/v1/accounts/acme", "", false, 401, nil, ""},
		{"DELETE", "/v1/accounts/{account_id}", "/v1/accounts/acme", "", true, 429, nil, "throttled"},
		{"GET", "/v1/accounts/{account_id}/usage", "/v1/accounts/acme/usage", "", true, 200, nil, ""},
		{"GET", "/v1/accounts/{account_id}/usage", "/v1/accounts/nobody/usage", "", true, 404, nil, ""},
		{"GET", "/v1/accounts/{account_id}/usage", "/v1/accounts/" + strings.Repeat("a", 257) + "/usage", "", true, 400, nil, ""},
		{"GET", "/v1/accounts/{account_id}/usage", "/v1/accounts/acme/usage", "", false, 401, nil, ""},
		{"GET", "/v1/accounts/{account_id}/usage", "/v1/accounts/acme/usage", "", true, 429, nil, "throttled"},
		{"DELETE", "/v1/accounts/{account_id}/usage", "/v1/accounts/acme/usage", "", true, 204, nil, ""},
		{"DELETE", "/v1/accounts/{account_id}/usage", "/v1/accounts/nobody/usage", "", true, 404, nil, ""},
		{"DELETE", "/v1/accounts/{account_id}/usage", "/v1/accounts/" + strings.Repeat("a", 257) + "/usage", "", true, 400, nil, ""},
		{"DELETE", "/v1/accounts/{account_id}/usage", "/v1/accounts/acme/usage", "", false, 401, nil, ""},
		{"DELETE", "/v1/accounts/{account_id}/usage", "/v1/accounts/acme/usage", "", true, 429, nil, "throttled"},
		// Gateway keys.
		{"POST", "/v1/keys", "/v1/keys", `{"user_id":"ok","note":"laptop"}`, true, 201, nil, ""},
		{"POST", "/v1/keys", "/v1/keys", `{"service":true}`, true, 201, nil, ""},
		{"POST", "/v1/keys", "/v1/keys", `{"user_id":null,"service":true,"note":"back end"}`, true, 201, nil, ""},
		{"POST", "/v1/keys", "/v1/keys", `{"user_id":"ok","service":false}`, true, 201, nil, ""},
		{"POST", "/v1/keys", "/v1/keys", `{"user_id":"ok","service":true}`, true, 400, nil, ""},
		{"POST", "/v1/keys", "/v1/keys", `{"user_id":"ok"}`, false, 401, nil, ""},
		{"POST", "/v1/keys", "/v1/keys", big, true, 413, nil, ""},
		{"POST", "/v1/keys", "/v1/keys", `{"user_id":"ok"}`, true, 415, map[string]string{"Content-Type": "text/plain"}, ""},
		{"POST", "/v1/keys", "/v1/keys", `{"user_id":"ok"}`, true, 429, nil, "throttled"},
		{"GET", "/v1/keys", "/v1/keys?user_id=ok", "", true, 200, nil, ""},
		{"GET", "/v1/keys", "/v1/keys?service=true", "", true, 200, nil, ""},
		{"GET", "/v1/keys", "/v1/keys?user_id=nobody", "", true, 200, nil, ""},
		{"GET", "/v1/keys", "/v1/keys", "", true, 400, nil, ""},
		{"GET", "/v1/keys", "/v1/keys?user_id=ok", "", false, 401, nil, ""},
		{"GET", "/v1/keys", "/v1/keys?user_id=ok", "", true, 429, nil, "throttled"},
		{"DELETE", "/v1/keys/{id}", "/v1/keys/" + keyID, "", true, 204, nil, ""},
		{"DELETE", "/v1/keys/{id}", "/v1/keys/" + keyID, "", true, 404, nil, ""},
		{"DELETE", "/v1/keys/{id}", "/v1/keys/" + keyID, "", false, 401, nil, ""},
		{"DELETE", "/v1/keys/{id}", "/v1/keys/" + keyID, "", true, 429, nil, "throttled"},
		// Shadow limits: on the tier, in decisions, previewed and promoted.
		{"PUT", "/v1/tiers/{name}", "/v1/tiers/sh", `{"requests_per_minute":2,"requests_per_hour":10,"requests_per_day":10,"burst_allowance":0,"shadow":{"requests_per_minute":1,"requests_per_hour":10,"requests_per_day":10,"burst_allowance":0}}`, true, 201, nil, ""},
		{"GET", "/v1/tiers/{name}", "/v1/tiers/sh", "", true, 200, nil, ""},
		{"POST", "/v1/check", "/v1/check", `{"context":{"user_id":"os","user_tier":"sh"}}`, false, 200, nil, ""},
		{"POST", "/v1/check", "/v1/check", `{"context":{"user_id":"os","user_tier":"sh"}}`, false, 200, nil, ""}, // shadow refuses
		{"POST", "/v1/check", "/v1/check", `{"context":{"user_id":"os","user_tier":"sh"}}`, false, 429, nil, ""},
		{"POST", "/v1/check", "/v1/check", `{"context":{"user_id":"os","user_tier":"sh","feature":"x"}}`, false, 403, nil, ""},
		{"POST", "/v1/tiers/{name}/preview", "/v1/tiers/sh/preview", `{` + limits + `}`, true, 200, nil, ""},
		{"POST", "/v1/tiers/{name}/preview", "/v1/tiers/sh/preview", `{"requests_per_minute":0,"requests_per_hour":0,"requests_per_day":0,"burst_allowance":0}`, true, 200, nil, ""},
		{"POST", "/v1/tiers/{name}/preview", "/v1/tiers/sh/preview", `{"requests_per_minute":-1}`, true, 400, nil, ""},
		{"POST", "/v1/tiers/{name}/preview", "/v1/tiers/sh/preview", `{` + limits + `}`, false, 401, nil, ""},
		{"POST", "/v1/tiers/{name}/preview", "/v1/tiers/gold/preview", `{` + limits + `}`, true, 404, nil, ""},
		{"POST", "/v1/tiers/{name}/preview", "/v1/tiers/sh/preview", big, true, 413, nil, ""},
		{"POST", "/v1/tiers/{name}/preview", "/v1/tiers/sh/preview", `{` + limits + `}`, true, 415, map[string]string{"Content-Type": "text/plain"}, ""},
		{"POST", "/v1/tiers/{name}/preview", "/v1/tiers/sh/preview", `{` + limits + `}`, true, 429, nil, "throttled"},
		{"POST", "/v1/tiers/{name}/promote", "/v1/tiers/sh/promote", "", true, 200, nil, ""},
		{"POST", "/v1/tiers/{name}/promote", "/v1/tiers/sh/promote", "", true, 400, nil, ""},
		{"POST", "/v1/tiers/{name}/promote", "/v1/tiers/sh/promote", "", false, 401, nil, ""},
		{"POST", "/v1/tiers/{name}/promote", "/v1/tiers/gold/promote", "", true, 404, nil, ""},
		{"POST", "/v1/tiers/{name}/promote", "/v1/tiers/sh/promote", "", true, 429, nil, "throttled"},
		{"GET", "/v1/usage/{user_id}", "/v1/usage/oa", "", true, 200, nil, ""},
		{"GET", "/v1/usage/{user_id}", "/v1/usage/oa?tier=pro", "", true, 200, nil, ""},
		{"GET", "/v1/usage/{user_id}", "/v1/usage/oa?tier=gold", "", true, 400, nil, ""},
		{"GET", "/v1/usage/{user_id}", "/v1/usage/oa", "", false, 401, nil, ""},
		{"DELETE", "/v1/usage/{user_id}", "/v1/usage/oa", "", true, 204, nil, ""},
		{"DELETE", "/v1/usage/{user_id}", "/v1/usage/" + strings.Repeat("u", 257), "", true, 400, nil, ""},
		{"DELETE", "/v1/usage/{user_id}", "/v1/usage/oa", "", false, 401, nil, ""},
		{"GET", "/v1/stats", "/v1/stats?period=hour", "", true, 200, nil, ""},
		{"GET", "/v1/stats", "/v1/stats", "", true, 200, nil, ""},
		{"GET", "/v1/stats", "/v1/stats?period=day&tier=pro", "", true, 200, nil, ""},
		{"GET", "/v1/stats", "/v1/stats?period=week", "", true, 400, nil, ""},
		{"GET", "/v1/stats", "/v1/stats?period=hour", "", false, 401, nil, ""},
		{"GET", "/v1/stats", "/v1/stats?period=hour", "", true, 429, nil, "throttled"},
		{"GET", "/v1/tiers", "/v1/tiers", "", true, 429, nil, "throttled"},
		{"GET", "/v1/tiers/{name}", "/v1/tiers/pro", "", true, 429, nil, "throttled"},
		{"PUT", "/v1/tiers/{name}", "/v1/tiers/team", `{` + limits + `}`, true, 429, nil, "throttled"},
		{"DELETE", "/v1/tiers/{name}", "/v1/tiers/team", "", true, 429, nil, "throttled"},
		{"GET", "/v1/usage/{user_id}", "/v1/usage/oa", "", true, 429, nil, "throttled"},
		{"DELETE", "/v1/usage/{user_id}", "/v1/usage/oa", "", true, 429, nil, "throttled"},
		{"GET", "/healthz", "/healthz", "", false, 200, nil, ""},
		{"GET", "/metrics", "/metrics", "", false, 200, nil, ""},
		{"GET", "/openapi.yaml", "/openapi.yaml", "", false, 200, nil, ""},
		{"GET", "/healthz", "/healthz", "", false, 200, nil, "testclock"},
		{"GET", "/v1/test/clock", "/v1/test/clock", "", true, 200, nil, "testclock"},
		{"GET", "/v1/test/clock", "/v1/test/clock", "", false, 401, nil, "testclock"},
		{"GET", "/v1/test/clock", "/v1/test/clock", "", true, 429, nil, "testclock-throttled"},
		{"POST", "/v1/test/clock", "/v1/test/clock", `{"advance":"1m"}`, true, 200, nil, "testclock"},
		{"POST", "/v1/test/clock", "/v1/test/clock", `{"set":"2026-03-01T12:00:00Z"}`, true, 200, nil, "testclock"},
		{"POST", "/v1/test/clock", "/v1/test/clock", `{"advance":"-1m"}`, true, 400, nil, "testclock"},
		{"POST", "/v1/test/clock", "/v1/test/clock", `{"advance":"1m"}`, false, 401, nil, "testclock"},
		{"POST", "/v1/test/clock", "/v1/test/clock", `{"advance":"1m"}`, true, 415, map[string]string{"Content-Type": "text/plain"}, "testclock"},
		{"POST", "/v1/test/clock", "/v1/test/clock", `{"advance":"1m"}`, true, 429, nil, "testclock-throttled"},
		{"GET", "/v1/prices", "/v1/prices", "", true, 404, nil, ""},
		{"PUT", "/v1/prices", "/v1/prices", `{"prices":[{"model":"gpt-4o-mini","input":"0.15","output":"0.6"},{"model":"claude-*","upstream":"anthropic","input":"3","output":"15"}]}`, true, 201, nil, ""},
		{"PUT", "/v1/prices", "/v1/prices", `{"prices":[{"model":"x","input":"0.1.5","output":"1"}]}`, true, 400, nil, ""},
		{"PUT", "/v1/prices", "/v1/prices", `{"prices":[]}`, false, 401, nil, ""},
		{"PUT", "/v1/prices", "/v1/prices", big, true, 413, nil, ""},
		{"PUT", "/v1/prices", "/v1/prices", `{"prices":[]}`, true, 415, map[string]string{"Content-Type": "text/plain"}, ""},
		{"PUT", "/v1/prices", "/v1/prices", `{"prices":[]}`, true, 429, nil, "throttled"},
		{"GET", "/v1/prices", "/v1/prices", "", true, 200, nil, ""},
		{"GET", "/v1/prices", "/v1/prices?at=soon", "", true, 400, nil, ""},
		{"GET", "/v1/prices", "/v1/prices", "", false, 401, nil, ""},
		{"GET", "/v1/prices", "/v1/prices", "", true, 429, nil, "throttled"},
		{"GET", "/v1/prices/versions", "/v1/prices/versions", "", true, 200, nil, ""},
		{"GET", "/v1/prices/versions", "/v1/prices/versions", "", false, 401, nil, ""},
		{"GET", "/v1/prices/versions", "/v1/prices/versions", "", true, 429, nil, "throttled"},
		// The body limit holds on every route, GETs included.
		{"GET", "/healthz", "/healthz", big, false, 413, nil, ""},
		{"GET", "/metrics", "/metrics", big, false, 413, nil, ""},
		{"GET", "/openapi.yaml", "/openapi.yaml", big, false, 413, nil, ""},
		// Named admins and the audit log.
		{"POST", "/v1/admins", "/v1/admins", `{"name":"oa-admin","role":"admin","note":"on call"}`, true, 201, nil, ""},
		{"POST", "/v1/admins", "/v1/admins", `{"name":"oa-admin","role":"viewer"}`, true, 409, nil, ""},
		{"POST", "/v1/admins", "/v1/admins", `{"name":"oa-boss","role":"boss"}`, true, 400, nil, ""},
		{"POST", "/v1/admins", "/v1/admins", `{"name":"oa-x","role":"viewer"}`, false, 401, nil, ""},
		{"POST", "/v1/admins", "/v1/admins", `{"name":"oa-x","role":"viewer"}`, false, 403, viewer, ""},
		{"POST", "/v1/admins", "/v1/admins", big, true, 413, nil, ""},
		{"POST", "/v1/admins", "/v1/admins", `{}`, true, 415, map[string]string{"Content-Type": "text/plain"}, ""},
		{"POST", "/v1/admins", "/v1/admins", `{}`, true, 429, nil, "throttled"},
		{"GET", "/v1/admins", "/v1/admins", "", true, 200, nil, ""},
		{"GET", "/v1/admins", "/v1/admins", "", false, 401, nil, ""},
		{"GET", "/v1/admins", "/v1/admins", "", false, 403, viewer, ""},
		{"GET", "/v1/admins", "/v1/admins", "", true, 429, nil, "throttled"},
		{"PUT", "/v1/admins/{name}", "/v1/admins/oa-admin", `{"role":"viewer"}`, true, 409, nil, ""},
		{"PUT", "/v1/admins/{name}", "/v1/admins/nobody", `{"role":"viewer"}`, true, 404, nil, ""},
		{"PUT", "/v1/admins/{name}", "/v1/admins/oa-view", `{"role":"boss"}`, true, 400, nil, ""},
		{"PUT", "/v1/admins/{name}", "/v1/admins/oa-view", `{"role":"support"}`, false, 401, nil, ""},
		{"PUT", "/v1/admins/{name}", "/v1/admins/oa-view", `{"role":"support"}`, false, 403, viewer, ""},
		{"PUT", "/v1/admins/{name}", "/v1/admins/oa-view", big, true, 413, nil, ""},
		{"PUT", "/v1/admins/{name}", "/v1/admins/oa-view", `{}`, true, 415, map[string]string{"Content-Type": "text/plain"}, ""},
		{"PUT", "/v1/admins/{name}", "/v1/admins/oa-view", `{}`, true, 429, nil, "throttled"},
		{"DELETE", "/v1/admins/{name}", "/v1/admins/oa-view", "", false, 401, nil, ""},
		{"DELETE", "/v1/admins/{name}", "/v1/admins/oa-view", "", false, 403, viewer, ""},
		{"DELETE", "/v1/admins/{name}", "/v1/admins/oa-view", "", true, 429, nil, "throttled"},
		{"DELETE", "/v1/admins/{name}", "/v1/admins/oa-admin", "", true, 409, nil, ""},
		{"DELETE", "/v1/admins/{name}", "/v1/admins/nobody", "", true, 404, nil, ""},
		{"GET", "/v1/audit", "/v1/audit", "", false, 200, viewer, ""},
		{"GET", "/v1/audit", "/v1/audit?kind=admins&limit=1", "", true, 200, nil, ""},
		{"GET", "/v1/audit", "/v1/audit?kind=nope", "", true, 400, nil, ""},
		{"GET", "/v1/audit", "/v1/audit", "", false, 401, nil, ""},
		{"GET", "/v1/audit", "/v1/audit", "", true, 429, nil, "throttled"},
		{"PUT", "/v1/admins/{name}", "/v1/admins/oa-view", `{"role":"support"}`, true, 200, nil, ""},
		{"DELETE", "/v1/admins/{name}", "/v1/admins/oa-view", "", true, 204, nil, ""},
		{"GET", "/v1/audit", "/v1/audit", "", false, 401, viewer, ""},
		// Storage gone: the answers that say so.
		{"close", "", "", "", false, 0, nil, ""},
		{"POST", "/v1/check", "/v1/check", `{}`, false, 503, nil, ""},
		{"POST", "/v1/calls/{call_id}/finish", "/v1/calls/" + kept + "/finish", ``, false, 503, nil, ""},
		{"POST", "/v1/calls/{call_id}/keepalive", "/v1/calls/" + kept + "/keepalive", ``, false, 503, nil, ""},
		{"GET", "/v1/usage/{user_id}", "/v1/usage/oa", "", true, 503, nil, ""},
		{"GET", "/v1/stats", "/v1/stats?period=day", "", true, 503, nil, ""},
		{"DELETE", "/v1/usage/{user_id}", "/v1/usage/oa", "", true, 503, nil, ""},
		{"GET", "/v1/accounts/{account_id}/usage", "/v1/accounts/acme/usage", "", true, 503, nil, ""},
		{"DELETE", "/v1/accounts/{account_id}/usage", "/v1/accounts/acme/usage", "", true, 503, nil, ""},
		{"GET", "/v1/prices", "/v1/prices", "", true, 503, nil, ""},
		{"GET", "/v1/prices/versions", "/v1/prices/versions", "", true, 503, nil, ""},
		{"GET", "/healthz", "/healthz", "", false, 503, nil, ""},
	}
	seen := map[string]bool{}
	for _, tc := range cases {
		if tc.method == "close" {
			e.store.Close()
			continue
		}
		header := map[string]string{"Content-Type": "application/json"}
		if tc.admin {
			header["Authorization"] = "Bearer " + adminToken
		}
		for k, v := range tc.header {
			header[k] = v
		}
		rec := send(servers[tc.srv], tc.method, tc.path, tc.body, header)
		name := fmt.Sprintf("%s %s → %d", tc.method, tc.path, tc.status)
		if len(name) > 80 {
			name = name[:80]
		}
		if rec.Code != tc.status {
			t.Errorf("%s: got %d %.200s", name, rec.Code, rec.Body)
			continue
		}
		status := strconv.Itoa(rec.Code)
		seen[tc.method+" "+tc.template+" "+status] = true
		s.checkAnswer(t, name, tc.method, tc.template, rec)
	}
	for _, op := range s.operations(t) {
		method, path, _ := strings.Cut(op, " ")
		o, _ := s.resolve(t, pointer("paths", path, strings.ToLower(method)))
		for status := range o["responses"].(map[string]any) {
			if status != "default" && !seen[op+" "+status] {
				t.Errorf("%s %s is described but no case here produces it", op, status)
			}
		}
	}
}

// checkAnswer validates rec against the description of method template's
// answer with rec's status (or the default answer).
func (s *spec) checkAnswer(t *testing.T, name, method, template string, rec *httptest.ResponseRecorder) {
	t.Helper()
	responses := pointer("paths", template, strings.ToLower(method), "responses")
	ptr := responses + pointer(strconv.Itoa(rec.Code))
	if _, ok := s.at(ptr); !ok {
		ptr = responses + pointer("default")
	}
	res, ptr := s.resolve(t, ptr)

	content, _ := res["content"].(map[string]any)
	if len(content) == 0 {
		if rec.Body.Len() != 0 {
			t.Errorf("%s: body %.100q where the description has none", name, rec.Body)
		}
	} else {
		mt, _, err := mime.ParseMediaType(rec.Header().Get("Content-Type"))
		if err != nil || content[mt] == nil {
			t.Errorf("%s: Content-Type %q, described: %v", name, rec.Header().Get("Content-Type"), keys(content))
		} else {
			var body any = rec.Body.String()
			if mt == "application/json" {
				if body, err = jsonschema.UnmarshalJSON(bytes.NewReader(rec.Body.Bytes())); err != nil {
					t.Errorf("%s: body is not JSON: %v", name, err)
				}
			}
			if err := s.schema(t, ptr+pointer("content", mt, "schema")).Validate(body); err != nil {
				t.Errorf("%s: body %.300s does not match the description: %v", name, rec.Body, err)
			}
		}
	}

	headers, _ := res["headers"].(map[string]any)
	for h := range headers {
		hdr, hptr := s.resolve(t, ptr+pointer("headers", h))
		values := rec.Header().Values(h)
		if len(values) == 0 {
			if req, _ := hdr["required"].(bool); req {
				t.Errorf("%s: lacks header %s", name, h)
			}
			continue
		}
		// A header is text; one that reads as a JSON number is validated
		// as that number, so integer schemas apply.
		var v any = values[0]
		if n, err := jsonschema.UnmarshalJSON(strings.NewReader(values[0])); err == nil {
			if _, isNum := n.(json.Number); isNum {
				v = n
			}
		}
		if err := s.schema(t, hptr+"/schema").Validate(v); err != nil {
			t.Errorf("%s: header %s: %q does not match the description: %v", name, h, values[0], err)
		}
	}
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
