package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/api/gateway"
	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
	"github.com/policyguard/policyguard/web"
)

// TestEveryRouteByRole walks every route of the whole server as main
// wires it, the admin page's included, from Echo's route list (so a route
// added tomorrow is walked too), as no one, as a revoked admin, as an
// admin of each role and as the built-in one: bearer tokens on the JSON
// API, sessions on the page. Each answer is checked against the least role
// policy.Routes gives the route. POLICYGUARD_TEST_STORE=postgres runs it
// on PostgreSQL.
func TestEveryRouteByRole(t *testing.T) {
	ctx := context.Background()
	store, err := db.Open(ctx, dbtest.DSN(t, "walk.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	clock := policy.NewTestClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	svc := policy.NewService(store, store, policy.WithClock(clock.Now), policy.WithStats(store, store), policy.WithUsers(store),
		policy.WithKeys(store), policy.WithPrices(store), policy.WithAdmins(store), policy.WithAudit(store))
	gate := policy.NewAdminGate(token)
	quiet := slog.New(slog.DiscardHandler)
	upstream, _ := gateway.ParseUpstream("openai=openai:https://api.openai.invalid/v1")
	page := web.NewAdmin(web.Config{Service: svc, Gate: gate, TierJSON: api.TierJSON, Logger: quiet, Sessions: store})
	srv := api.NewServer(api.Config{Service: svc, Admin: gate, Logger: quiet, APIToken: "check-token", TestClock: clock,
		Pages: page.Register, Gateway: &gateway.Config{Upstreams: []gateway.Upstream{upstream}}})

	do := func(method, path, body string, header map[string]string, cookie *http.Cookie) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		for k, v := range header {
			req.Header.Set(k, v)
		}
		if cookie != nil {
			req.AddCookie(cookie)
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		return rec
	}
	type who struct {
		role   policy.Role // 0: no one
		token  string
		cookie *http.Cookie
		csrf   string
	}
	csrfRE := regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	signIn := func(tok string) (*http.Cookie, string) {
		rec := do("POST", "/admin/login", url.Values{"token": {tok}}.Encode(), map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, nil)
		if rec.Code != http.StatusSeeOther {
			t.Fatalf("sign in: %d %s", rec.Code, rec.Body)
		}
		cookie := rec.Result().Cookies()[0]
		m := csrfRE.FindStringSubmatch(do("GET", "/admin/audit", "", nil, cookie).Body.String())
		if m == nil {
			t.Fatal("no CSRF token on the Audit page")
		}
		return cookie, m[1]
	}
	people := map[string]*who{"none": {}, "bootstrap": {role: policy.RoleAdmin, token: token}}
	for _, r := range policy.Roles {
		_, tok, err := svc.CreateAdmin(ctx, "walk-"+r.String(), r, "")
		if err != nil {
			t.Fatal(err)
		}
		people[r.String()] = &who{role: r, token: tok}
	}
	_, revoked, err := svc.CreateAdmin(ctx, "walk-revoked", policy.RoleAdmin, "")
	if err != nil {
		t.Fatal(err)
	}
	people["revoked"] = &who{token: revoked}
	for _, p := range people {
		if p.token != "" {
			p.cookie, p.csrf = signIn(p.token)
		}
	}
	if err := svc.RevokeAdmin(ctx, "walk-revoked"); err != nil {
		t.Fatal(err)
	}

	param := regexp.MustCompile(`:[a-z_]+|\*`)
	methods := map[string]bool{"GET": true, "POST": true, "PUT": true, "DELETE": true, "PATCH": true, "HEAD": true, "OPTIONS": true, "TRACE": true}
	walked, pages := 0, 0
	for _, r := range srv.Routes() {
		if !methods[r.Method] {
			continue // Echo's own entries
		}
		access := policy.RouteAccess(r.Method, r.Path)
		need, isAdmin := access.Role()
		if access == policy.AccessRefused {
			t.Errorf("%s %s: not in policy.Routes, so refused to everyone", r.Method, r.Path)
			continue
		}
		walked++
		path := param.ReplaceAllString(r.Path, "walk")
		if strings.HasPrefix(r.Path, "/llm/") {
			path = "/llm/openai/chat/completions"
		}
		onPage := strings.HasPrefix(r.Path, "/admin")
		if onPage {
			pages++
		}
		for name, p := range people {
			var rec *httptest.ResponseRecorder
			if onPage {
				body := url.Values{"csrf": {p.csrf}}.Encode()
				rec = do(r.Method, path, body, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, p.cookie)
			} else {
				header := map[string]string{"Content-Type": "application/json"}
				if p.token != "" {
					header["Authorization"] = "Bearer " + p.token
				}
				rec = do(r.Method, path, "{}", header, nil)
			}
			code := rec.Code
			toLogin := code == http.StatusSeeOther && rec.Header().Get("Location") == "/admin/login"
			var ok bool
			var want string
			switch {
			case access == policy.AccessOpen:
				ok, want = code != 401 && code != 403, "neither 401 nor 403"
			case access == policy.AccessOwn:
				ok, want = code == 401, "401: no admin token is a check's or the gateway's credential"
			case !isAdmin:
				t.Fatalf("%s: access %v", r.Path, access)
			case p.role == 0 && onPage:
				ok, want = toLogin, "303 to the sign-in page"
			case p.role == 0:
				ok, want = code == 401, "401"
			case p.role < need:
				ok, want = code == 403 && strings.Contains(rec.Body.String(), "role "+need.String()), "403 naming "+need.String()
			default:
				// Signing out is the one way to the sign-in page.
				ok, want = code != 401 && code != 403 && (!toLogin || r.Path == "/admin/logout"), "neither 401, 403 nor the sign-in page"
			}
			if !ok {
				t.Errorf("%s %s as %s (route %s): %d %.100s, want %s", r.Method, path, name, access, code, rec.Body, want)
			}
			if r.Path == "/admin/logout" && p.role != 0 && p.role >= need {
				p.cookie, p.csrf = signIn(p.token) // signed out: sign in again
			}
		}
	}
	if walked < 70 || pages < 30 {
		t.Fatalf("walked %d routes, %d of the page; the server has more", walked, pages)
	}
}

// "policyguard admins add" makes the first named admin without the API;
// its token then works on the service, in its role, and the audit log
// names the command and the admin as the actors of what each did.
func TestAdminsAddCommand(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "guardrail.db")
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"admins", "add", "dana", "-role", "support", "-db", dbPath}, func(string) string { return "" }, &out, &errOut)
	if err != nil {
		t.Fatalf("admins add: %v\n%s", err, errOut.String())
	}
	dana := regexp.MustCompile(`pgadm_[A-Za-z0-9_-]{32}`).FindString(out.String())
	if dana == "" {
		t.Fatalf("no token printed:\n%s", out.String())
	}
	err = run(context.Background(), []string{"admins", "add", "eve", "-role", "boss", "-db", dbPath}, func(string) string { return "" }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `unknown role "boss"`) {
		t.Fatalf("unknown role: %v", err)
	}
	tiers := writeFile(t, "tiers.json", `{"tiers":[{"name":"free","requests_per_minute":10,"requests_per_hour":100,"requests_per_day":1000,"burst_allowance":5,"features":["chat"]},{"name":"gold","requests_per_minute":9,"requests_per_hour":90,"requests_per_day":900,"burst_allowance":0}]}`)
	if _, stderr, err := tiersCmd(map[string]string{"GUARDRAIL_DB": dbPath}, "import", tiers); err != nil {
		t.Fatalf("tiers import: %v\n%s", err, stderr)
	}
	if _, stderr, err := pricesCmd(map[string]string{"GUARDRAIL_DB": dbPath}, "import", "api/testdata/litellm_model_prices.json"); err != nil {
		t.Fatalf("prices import: %v\n%s", err, stderr)
	}

	url, stop := startInProcess(t, dbPath)
	defer stop()
	as := func(tok, method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := as(dana, "PUT", "/v1/users/alice", `{"tier":"gold"}`); code != 201 {
		t.Fatalf("support puts a record: %d %s", code, body)
	}
	if code, body := as(dana, "DELETE", "/v1/tiers/gold", ``); code != 403 || !strings.Contains(body, "role admin") {
		t.Fatalf("support deletes a tier: %d %s", code, body)
	}
	code, body := as(dana, "GET", "/v1/audit", "")
	if code != 200 {
		t.Fatalf("audit: %d %s", code, body)
	}
	for _, want := range []string{
		`"actor":"dana","kind":"users","subject":"alice","action":"created","source":"api"`,
		`"actor":"tiers import","kind":"tiers","subject":"gold","action":"created","source":"import"`,
		`"actor":"admins add","kind":"admins","subject":"dana","action":"created","source":"import"`,
		`"actor":"prices import","kind":"prices","subject":"1","action":"created","source":"import"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("audit lacks %s:\n%s", want, body)
		}
	}
}

// With a named admin in the database and no -admin-token, the service
// makes no token of its own: there is no built-in admin, and named
// admins sign in as before.
func TestRunWithNamedAdminsOnly(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "g.db")
	var out bytes.Buffer
	if err := run(context.Background(), []string{"admins", "add", "ann", "-role", "admin", "-db", dbPath}, func(string) string { return "" }, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	ann := regexp.MustCompile(`pgadm_[A-Za-z0-9_-]{32}`).FindString(out.String())
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-db", dbPath}, func(string) string { return "" }, pw, io.Discard)
		pw.Close()
	}()
	defer func() { cancel(); <-done }()
	sc := bufio.NewScanner(pr)
	var url string
	for url == "" && sc.Scan() {
		if strings.HasPrefix(sc.Text(), "admin token") {
			t.Fatalf("a token was made: %s", sc.Text())
		}
		if m := dbtest.ListeningRE.FindStringSubmatch(sc.Text()); m != nil {
			url = m[1]
		}
	}
	go io.Copy(io.Discard, pr)
	req, _ := http.NewRequest(http.MethodGet, url+"/v1/admins", nil)
	req.Header.Set("Authorization", "Bearer "+ann)
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("ann's token: %v %v", res, err)
	}
	res.Body.Close()
}
