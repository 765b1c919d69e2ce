package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api/cli"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

// selfSigned writes a certificate for 127.0.0.1 and localhost and its key,
// and returns their files and a pool that trusts the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "policyguard test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestTLS serves HTTPS from a certificate and key given by flags or by
// environment variables, and refuses plain HTTP, old TLS and bad key pairs.
func TestTLS(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	for _, how := range []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"flags", []string{"-tls-cert", certFile, "-tls-key", keyFile}, nil},
		{"environment", nil, map[string]string{"GUARDRAIL_TLS_CERT": certFile, "GUARDRAIL_TLS_KEY": keyFile}},
	} {
		t.Run(how.name, func(t *testing.T) {
			args := append([]string{"-addr", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "tls.db"), "-admin-token", token}, how.args...)
			u, _, stop := runInProcess(t, args, how.env)
			if !strings.HasPrefix(u, "https://") {
				t.Fatalf("URL %q, want https", u)
			}
			client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
			res, err := postJSON(client, u+"/v1/check", `{"context":{"user_id":"tls"}}`)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusOK || res.TLS == nil || res.TLS.Version < tls.VersionTLS12 {
				t.Fatalf("check over TLS: %d %+v", res.StatusCode, res.TLS)
			}
			// Plain HTTP to the TLS port is refused.
			plain := "http://" + strings.TrimPrefix(u, "https://")
			if res, err := postJSON(http.DefaultClient, plain+"/v1/check", `{}`); err == nil {
				res.Body.Close()
				if res.StatusCode != http.StatusBadRequest {
					t.Fatalf("plain HTTP to the TLS port: %d", res.StatusCode)
				}
			}
			// TLS 1.1 is refused; so is a client that does not trust the
			// certificate.
			old := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MaxVersion: tls.VersionTLS11}}}
			if _, err := old.Get(u + "/healthz"); err == nil {
				t.Fatal("TLS 1.1 accepted")
			}
			if _, err := http.Get(u + "/healthz"); err == nil || !strings.Contains(err.Error(), "certificate") {
				t.Fatalf("an untrusted certificate was accepted: %v", err)
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
		})
	}

	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	os.WriteFile(garbage, []byte("not PEM"), 0o600)
	_, otherKey, _ := selfSigned(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"cert without key", []string{"-tls-cert", certFile}, "TLS needs both -tls-cert and -tls-key"},
		{"key without cert", []string{"-tls-key", keyFile}, "TLS needs both"},
		{"missing file", []string{"-tls-cert", filepath.Join(dir, "none.pem"), "-tls-key", keyFile}, "TLS certificate"},
		{"not PEM", []string{"-tls-cert", garbage, "-tls-key", keyFile}, "TLS certificate"},
		{"key of another certificate", []string{"-tls-cert", certFile, "-tls-key", otherKey}, "private key does not match public key"},
	} {
		dbPath := filepath.Join(dir, "never.db")
		args := append([]string{"-addr", "127.0.0.1:0", "-db", dbPath}, tc.args...)
		err := run(context.Background(), args, func(string) string { return "" }, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
		if _, err := os.Stat(dbPath); err == nil {
			t.Errorf("%s: a TLS mistake created the database before stopping", tc.name)
		}
	}
}

// TestAPITokenFlag: -api-token and GUARDRAIL_API_TOKEN make checks need
// the token.
func TestAPITokenFlag(t *testing.T) {
	for _, how := range []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"flag", []string{"-api-token", "agents-key"}, nil},
		{"environment", nil, map[string]string{"GUARDRAIL_API_TOKEN": "agents-key"}},
		{"flag over environment", []string{"-api-token", "agents-key"}, map[string]string{"GUARDRAIL_API_TOKEN": "other-key"}},
	} {
		t.Run(how.name, func(t *testing.T) {
			args := append([]string{"-addr", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "key.db"), "-admin-token", token}, how.args...)
			u, logs, stop := runInProcess(t, args, how.env)
			for _, tc := range []struct {
				auth   string
				status int
			}{{"", 401}, {"Bearer other-key", 401}, {"Bearer agents-key", 200}} {
				req, _ := http.NewRequest("POST", u+"/v1/check", strings.NewReader(`{}`))
				req.Header.Set("Content-Type", "application/json")
				if tc.auth != "" {
					req.Header.Set("Authorization", tc.auth)
				}
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				if res.StatusCode != tc.status {
					t.Fatalf("%q: %d, want %d", tc.auth, res.StatusCode, tc.status)
				}
			}
			stop()
			if strings.Contains(logs.String(), "agents-key") {
				t.Fatalf("the log carries the API token:\n%s", logs)
			}
		})
	}
}

// TestWarnsWithoutAPITokenBeyondLoopback: a service that anyone on the
// network can reach says so when checks need no token.
func TestWarnsWithoutAPITokenBeyondLoopback(t *testing.T) {
	for _, tc := range []struct {
		addr  string
		token string
		warn  bool
	}{{"127.0.0.1:0", "", false}, {"0.0.0.0:0", "", true}, {"0.0.0.0:0", "k", false}} {
		args := []string{"-addr", tc.addr, "-db", filepath.Join(t.TempDir(), "w.db"), "-admin-token", token, "-api-token", tc.token}
		_, logs, stop := runInProcess(t, args, nil)
		stop()
		if got := strings.Contains(logs.String(), "set -api-token"); got != tc.warn {
			t.Errorf("%s with token %q: warned %v, want %v\n%s", tc.addr, tc.token, got, tc.warn, logs)
		}
	}
}

// TestHTTPServerLimits checks the server's limits: each phase of a
// connection has a deadline, headers are bounded, and both hold on the
// running service: an oversized header is refused with 431 and a client
// that never finishes its headers is cut off.
func TestHTTPServerLimits(t *testing.T) {
	srv := cli.NewHTTPServer(http.NotFoundHandler(), nil, slog.DiscardHandler)
	for name, d := range map[string]time.Duration{
		"ReadHeaderTimeout": srv.ReadHeaderTimeout, "ReadTimeout": srv.ReadTimeout,
		"WriteTimeout": srv.WriteTimeout, "IdleTimeout": srv.IdleTimeout,
	} {
		if d <= 0 || d > 2*time.Minute {
			t.Errorf("%s = %v: want a deadline, of at most two minutes", name, d)
		}
	}
	if srv.MaxHeaderBytes <= 0 || srv.MaxHeaderBytes > 1<<20 {
		t.Errorf("MaxHeaderBytes = %d", srv.MaxHeaderBytes)
	}

	u, _, _ := runInProcess(t, []string{"-addr", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "limits.db"), "-admin-token", token}, nil)
	req, _ := http.NewRequest("POST", u+"/v1/check", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Padding", strings.Repeat("p", 100<<10))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("100 KiB header: %d, want 431", res.StatusCode)
	}

	if testing.Short() {
		return
	}
	// A client that sends half a request line and stops is disconnected
	// once ReadHeaderTimeout passes (a real wait of a few seconds: this is
	// the server's clock, not a rate-limit window).
	addr, _ := url.Parse(u)
	conn, err := net.Dial("tcp", addr.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	conn.Write([]byte("POST /v1/check HTTP/1.1\r\nHost: x\r\n"))
	conn.SetReadDeadline(time.Now().Add(srv.ReadHeaderTimeout + 10*time.Second))
	_, err = io.ReadAll(conn)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("slow client still connected after %v: %v", took, err)
	}
	if took < srv.ReadHeaderTimeout-time.Second || took > srv.ReadHeaderTimeout+5*time.Second {
		t.Fatalf("slow client cut off after %v, want about %v", took, srv.ReadHeaderTimeout)
	}
}

// TestSecretsStayOutOfLogs runs the service, signs in to the admin page
// with wrong and right tokens, calls the admin API and checks with right,
// wrong and misplaced tokens, and then searches everything the service
// wrote and answered: neither token appears in its output, its log, an
// answer's body or a redirect, and a token in a URL signs nobody in.
func TestSecretsStayOutOfLogs(t *testing.T) {
	const adminSecret, apiSecret = "ADMIN-SECRET-8c1f0e", "API-SECRET-77d2aa"
	guesses := []string{adminSecret[:len(adminSecret)-1], adminSecret + "0", apiSecret[:len(apiSecret)-1]}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout, logs := &dbtest.LockedBuffer{}, &dbtest.LockedBuffer{}
	done := make(chan error, 1)
	args := []string{"-addr", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "secrets.db"), "-admin-token", adminSecret, "-api-token", apiSecret}
	go func() { done <- run(ctx, args, func(string) string { return "" }, stdout, logs) }()
	var u string
	dbtest.WaitFor(t, "start-up", 30*time.Second, func() bool {
		m := dbtest.ListeningRE.FindStringSubmatch(stdout.String())
		if m != nil {
			u = m[1]
		}
		return m != nil
	})

	var answers strings.Builder
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(method, path, contentType, body string, header map[string]string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, u+path, strings.NewReader(body))
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		res, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		answers.Write(b)
		for k, vs := range res.Header {
			if k != "Set-Cookie" { // the session cookie is a secret of its own, not a token
				answers.WriteString(k + ": " + strings.Join(vs, ",") + "\n")
			}
		}
		return res
	}
	form := "application/x-www-form-urlencoded"
	for _, g := range guesses {
		if res := send("POST", "/admin/login", form, url.Values{"token": {g}}.Encode(), nil); res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("sign-in with a guess: %d", res.StatusCode)
		}
	}
	res := send("POST", "/admin/login", form, url.Values{"token": {adminSecret}}.Encode(), nil)
	if res.StatusCode != http.StatusTooManyRequests && res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in with the token: %d", res.StatusCode)
	}
	// A token in the URL signs nobody in.
	if res := send("GET", "/admin/login?token="+adminSecret, "", "", nil); len(res.Cookies()) != 0 {
		t.Fatal("a token in the URL set a session cookie")
	}
	if res := send("GET", "/admin?token="+adminSecret, "", "", nil); res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/admin/login" {
		t.Fatalf("admin page with the token in the URL: %d %s", res.StatusCode, res.Header.Get("Location"))
	}
	for _, auth := range append([]string{adminSecret, apiSecret}, guesses...) {
		send("GET", "/v1/tiers", "", "", map[string]string{"Authorization": "Bearer " + auth})
		send("GET", "/v1/tiers?token="+auth, "", "", nil)
		send("POST", "/v1/check", "application/json", `{"context":{"user_id":"s"}}`, map[string]string{"Authorization": "Bearer " + auth})
		send("POST", "/v1/check?api_key="+auth, "application/json", `{"context":{`, map[string]string{"X-Api-Key": auth})
		send("PUT", "/v1/tiers/secrets", "application/json", `{"requests_per_minute":-1}`, map[string]string{"Authorization": "Bearer " + auth})
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for where, text := range map[string]string{"stdout": stdout.String(), "log": logs.String(), "answers": answers.String()} {
		for _, secret := range append([]string{adminSecret, apiSecret}, guesses...) {
			if strings.Contains(text, secret) || strings.Contains(strings.ToLower(text), strings.ToLower(secret)) {
				t.Errorf("%s contains %q", where, secret)
			}
		}
	}
	if !strings.Contains(logs.String(), "path=/v1/check") {
		t.Fatalf("the log has no access lines to search:\n%s", logs)
	}
}

// TestAdminPageAndAPIShareOneGate runs the service as main wires it: the
// admin page is served behind the API's middleware (a request id, an
// access-log line), and wrong admin tokens count the same whether they are
// typed into the page's sign-in or sent to the JSON API, so neither is a
// way around the other's throttle.
func TestAdminPageAndAPIShareOneGate(t *testing.T) {
	const adminSecret = "shared-gate-token"
	u, logs, stop := runInProcess(t, []string{"-addr", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "gate.db"), "-admin-token", adminSecret}, nil)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	signIn := func(token string) *http.Response {
		t.Helper()
		res, err := noRedirect.PostForm(u+"/admin/login", url.Values{"token": {token}})
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	listTiers := func(token string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, u+"/v1/tiers", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}

	res := signIn("wrong")
	if res.StatusCode != http.StatusUnauthorized || res.Header.Get("X-Request-Id") == "" {
		t.Fatalf("wrong sign-in: %d, X-Request-Id %q; want 401 with a request id", res.StatusCode, res.Header.Get("X-Request-Id"))
	}
	for i := 1; i < policy.MaxAdminFailures; i++ {
		if res := listTiers("wrong"); res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong token %d on the API: %d, want 401", i+1, res.StatusCode)
		}
	}
	if res := signIn(adminSecret); res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the right token on the page after %d wrong ones, one there and the rest on the API: %d, want 429",
			policy.MaxAdminFailures, res.StatusCode)
	}
	if res := listTiers(adminSecret); res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the right token on the API after them: %d, want 429", res.StatusCode)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "path=/admin/login status=401") {
		t.Errorf("no access-log line for the sign-in:\n%s", logs)
	}
}

// TestKeySecretsStayOutOfLogs makes gateway keys through the JSON API and
// the admin page, then sends their secrets every wrong way (as the admin
// token, in a path where an id goes, in a query) and reads the keys back
// every way there is: no secret appears in the log, in /metrics or in any
// answer but the one that made it.
func TestKeySecretsStayOutOfLogs(t *testing.T) {
	const adminSecret = "ADMIN-SECRET-keys-5e1"
	u, logs, stop := runInProcess(t, []string{"-addr", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "keys.db"), "-admin-token", adminSecret}, nil)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var answers strings.Builder
	send := func(method, path, contentType, body string, header map[string]string, cookie *http.Cookie) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, u+path, strings.NewReader(body))
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		if cookie != nil {
			req.AddCookie(cookie)
		}
		res, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return res, string(b)
	}
	// keep adds an answer to those searched.
	keep := func(res *http.Response, body string) {
		answers.WriteString(body)
		for k, vs := range res.Header {
			answers.WriteString(k + ": " + strings.Join(vs, ",") + "\n")
		}
	}
	admin := map[string]string{"Authorization": "Bearer " + adminSecret}
	secretRE := regexp.MustCompile(`pgk_[A-Za-z0-9_-]{32}`)

	// A key from the JSON API.
	res, body := send("POST", "/v1/keys", "application/json", `{"user_id":"alice","note":"api"}`, admin, nil)
	apiSecret := secretRE.FindString(body)
	if res.StatusCode != http.StatusCreated || apiSecret == "" {
		t.Fatalf("POST /v1/keys: %d %s", res.StatusCode, body)
	}
	// A key from the admin page: sign in, read the form's CSRF token.
	form := "application/x-www-form-urlencoded"
	res, _ = send("POST", "/admin/login", form, url.Values{"token": {adminSecret}}.Encode(), nil, nil)
	if res.StatusCode != http.StatusSeeOther || len(res.Cookies()) == 0 {
		t.Fatalf("sign-in: %d", res.StatusCode)
	}
	session := res.Cookies()[0]
	res, body = send("GET", "/admin/usage?user_id=alice", "", "", nil, session)
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	if res.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("user page: %d, CSRF token %v", res.StatusCode, m)
	}
	csrf := m[1]
	res, body = send("POST", "/admin/keys", form, url.Values{"csrf": {csrf}, "user_id": {"alice"}, "note": {"page"}}.Encode(), nil, session)
	pageSecret := secretRE.FindString(body)
	if res.StatusCode != http.StatusOK || pageSecret == "" || pageSecret == apiSecret {
		t.Fatalf("make a key on the page: %d, secret %q", res.StatusCode, pageSecret)
	}

	for _, secret := range []string{apiSecret, pageSecret} {
		keep(send("GET", "/v1/tiers", "", "", map[string]string{"Authorization": "Bearer " + secret}, nil))
		keep(send("POST", "/v1/keys", "application/json", `{"user_id":"bob"}`, map[string]string{"Authorization": "Bearer " + secret}, nil))
		keep(send("POST", "/v1/check", "application/json", `{"context":{"user_id":"alice"}}`, map[string]string{"Authorization": "Bearer " + secret, "X-Api-Key": secret}, nil))
		keep(send("DELETE", "/v1/keys/"+secret, "", "", admin, nil))
		keep(send("GET", "/v1/keys?user_id=alice&key="+secret, "", "", admin, nil))
		keep(send("POST", "/admin/keys/"+secret+"/revoke", form, url.Values{"csrf": {csrf}, "user_id": {"alice"}}.Encode(), nil, session))
		keep(send("GET", "/admin/usage/"+secret, "", "", nil, session))
	}
	res, body = send("GET", "/v1/keys?user_id=alice", "", "", admin, nil)
	if res.StatusCode != http.StatusOK || strings.Count(body, `"id":"key_`) != 2 {
		t.Fatalf("the keys: %d %s", res.StatusCode, body)
	}
	keep(res, body)
	keep(send("GET", "/admin/usage?user_id=alice", "", "", nil, session))
	keep(send("GET", "/metrics", "", "", nil, nil))
	keep(send("GET", "/healthz", "", "", nil, nil))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for where, text := range map[string]string{"log": logs.String(), "answers": answers.String()} {
		for _, secret := range []string{apiSecret, pageSecret} {
			if strings.Contains(text, secret) || strings.Contains(text, secret[len(policy.KeyPrefix):]) {
				t.Errorf("%s contain the secret %s", where, secret)
			}
		}
	}
	if !strings.Contains(logs.String(), "path=/v1/keys/pgk_[redacted]") {
		t.Fatalf("the log has no access line of the secret sent for an id, redacted:\n%s", logs)
	}
}
