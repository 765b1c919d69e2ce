package client_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/api/client"
	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/policy"
)

const adminToken = "client-test-admin"

var t0 = time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)

type env struct {
	store *db.Store
	clock *policy.TestClock
	url   string
	svc   *policy.Service // the server's, as cfg left it
}

// newEnv serves the real API on a temp-file database. cfg may change the
// server's configuration.
func newEnv(t *testing.T, cfg func(*api.Config)) *env {
	t.Helper()
	store, err := db.Open(context.Background(), filepath.Join(t.TempDir(), "client.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	clk := policy.NewTestClock(t0)
	c := api.Config{
		Service: policy.NewService(store, store, policy.WithClock(clk.Now), policy.WithUsers(store), policy.WithKeys(store), policy.WithPrices(store),
			policy.WithAdmins(store), policy.WithAudit(store)),
		Admin:  policy.NewAdminGate(adminToken),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if cfg != nil {
		cfg(&c)
	}
	srv := httptest.NewServer(api.NewServer(c))
	t.Cleanup(srv.Close)
	return &env{store: store, clock: clk, url: srv.URL, svc: c.Service}
}

func newClient(t *testing.T, url string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// wantError asserts that err is an *client.Error with status and a message
// containing msg.
func wantError(t *testing.T, what string, err error, status int, msg string) {
	t.Helper()
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: err = %v, want a *client.Error", what, err)
	}
	if e.StatusCode != status || !strings.Contains(e.Message, msg) {
		t.Errorf("%s: %d %q, want %d with %q", what, e.StatusCode, e.Message, status, msg)
	}
	if client.StatusCode(err) != status {
		t.Errorf("%s: StatusCode = %d", what, client.StatusCode(err))
	}
}

func TestClientTiers(t *testing.T) {
	e := newEnv(t, nil)
	c := newClient(t, e.url, client.WithAdminToken(adminToken))
	ctx := context.Background()

	tiers, err := c.Tiers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(tiers) != 3 || tiers[1].Name != "free" || *tiers[1].RequestsPerMinute != 10 || !tiers[1].UpdatedAt.IsZero() {
		t.Fatalf("Tiers = %+v", tiers)
	}

	lesson := client.Tier{Name: "lesson", Limits: client.Limits{RequestsPerMinute: client.Limit(2), RequestsPerHour: client.Limit(10), RequestsPerDay: client.Limit(100)}, Features: []string{"chat"}, Description: "Lesson"}
	got, created, err := c.PutTier(ctx, lesson)
	if err != nil || !created {
		t.Fatalf("PutTier create: %v %v", created, err)
	}
	if !got.UpdatedAt.Equal(t0) || *got.RequestsPerMinute != 2 || got.Description != "Lesson" {
		t.Errorf("created tier %+v", got)
	}
	lesson.RequestsPerMinute = client.Limit(3)
	lesson.UpdatedAt = t0.Add(-time.Hour) // ignored: the service stamps changes
	if got, created, err = c.PutTier(ctx, lesson); err != nil || created || *got.RequestsPerMinute != 3 || !got.UpdatedAt.Equal(t0) {
		t.Fatalf("PutTier replace: %+v %v %v", got, created, err)
	}
	if got, err := c.Tier(ctx, "lesson"); err != nil || *got.RequestsPerMinute != 3 || got.Features[0] != "chat" {
		t.Fatalf("Tier = %+v, %v", got, err)
	}

	// CreateTier never replaces.
	_, err = c.CreateTier(ctx, client.Tier{Name: "lesson", Limits: client.Limits{RequestsPerMinute: client.Limit(99), RequestsPerHour: client.Limit(99), RequestsPerDay: client.Limit(99)}})
	wantError(t, "create an existing tier", err, http.StatusPreconditionFailed, `tier "lesson" already exists`)
	if got, err := c.Tier(ctx, "lesson"); err != nil || *got.RequestsPerMinute != 3 {
		t.Fatalf("after a refused create: %+v, %v", got, err)
	}
	team, err := c.CreateTier(ctx, client.Tier{Name: "team", Limits: client.Limits{RequestsPerMinute: client.Limit(5), RequestsPerHour: client.Limit(50), RequestsPerDay: client.Limit(500)}})
	if err != nil || team.Name != "team" || *team.RequestsPerMinute != 5 || team.Features == nil {
		t.Fatalf("CreateTier = %+v, %v", team, err)
	}

	_, _, err = c.PutTier(ctx, client.Tier{Name: "bad", Limits: client.Limits{RequestsPerMinute: client.Limit(-1), RequestsPerHour: client.Limit(1), RequestsPerDay: client.Limit(1)}})
	wantError(t, "invalid tier", err, http.StatusBadRequest, "requests_per_minute must be an integer")
	wantError(t, "delete the default tier", c.DeleteTier(ctx, "free"), http.StatusConflict, "default tier")

	if err := c.DeleteTier(ctx, "lesson"); err != nil {
		t.Fatal(err)
	}
	_, err = c.Tier(ctx, "lesson")
	wantError(t, "deleted tier", err, http.StatusNotFound, `tier "lesson" not found`)
	wantError(t, "delete twice", c.DeleteTier(ctx, "lesson"), http.StatusNotFound, "not found")

	// The tier change came through the API.
	log, err := e.store.TierChanges(ctx, 1)
	if err != nil || len(log) != 1 || log[0].Source != policy.SourceAPI {
		t.Errorf("audit log %+v, %v; want the deletion from the api", log, err)
	}
}

func TestClientChecksAndUsage(t *testing.T) {
	e := newEnv(t, nil)
	c := newClient(t, e.url, client.WithAdminToken(adminToken))
	ctx := context.Background()
	if _, _, err := c.PutTier(ctx, client.Tier{Name: "lesson", Limits: client.Limits{RequestsPerMinute: client.Limit(2), RequestsPerHour: client.Limit(10), RequestsPerDay: client.Limit(100)}, Features: []string{"chat"}}); err != nil {
		t.Fatal(err)
	}
	const user = "a/b c" // escaped in paths
	req := client.CheckRequest{UserID: user, Tier: "lesson", Feature: "chat", InputText: "hello"}

	d, err := c.CheckDryRun(ctx, req)
	if err != nil || !d.Allowed || d.Windows.Minute.Remaining != 1 {
		t.Fatalf("dry run: %+v, %v", d, err)
	}
	for i := 0; i < 2; i++ {
		d, err := c.Check(ctx, req)
		if err != nil || !d.Allowed || d.StatusCode != http.StatusOK || d.Reason != "" || d.Tier != "lesson" {
			t.Fatalf("check %d: %+v, %v", i, d, err)
		}
		e.clock.Advance(time.Second)
	}
	d, err = c.Check(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || !d.RateLimited() || d.Reason != "per-minute limit exceeded" || d.RetryAfter != 58 || d.Windows.Minute.Limit != 2 {
		t.Fatalf("third check: %+v", d)
	}
	d, err = c.Check(ctx, client.CheckRequest{UserID: user, Tier: "lesson", Feature: "search"})
	if err != nil || d.Allowed || d.StatusCode != http.StatusForbidden || d.RateLimited() || !strings.Contains(d.Reason, `"search"`) {
		t.Fatalf("feature outside the plan: %+v, %v", d, err)
	}
	_, err = c.Check(ctx, client.CheckRequest{UserID: user, Tier: "gold"})
	wantError(t, "unknown tier", err, http.StatusBadRequest, `unknown tier "gold"`)

	u, err := c.Usage(ctx, user, "lesson")
	if err != nil {
		t.Fatal(err)
	}
	if u.UserID != user || u.Tier != "lesson" || u.Windows.Minute.Count != 2 || u.Windows.Minute.Remaining != 0 || u.Windows.Day.Limit != 100 {
		t.Fatalf("Usage = %+v", u)
	}
	if err := c.ForgetUser(ctx, user); err != nil {
		t.Fatal(err)
	}
	if u, err := c.Usage(ctx, user, ""); err != nil || u.Windows.Day.Count != 0 || u.Windows.Day.Limit != 0 {
		t.Fatalf("Usage after ForgetUser = %+v, %v", u, err)
	}
}

func TestClientErrors(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, func(c *api.Config) { c.APIToken = "check-token" })

	_, err := newClient(t, e.url, client.WithAdminToken("wrong")).Tiers(ctx)
	wantError(t, "wrong admin token", err, http.StatusUnauthorized, "missing or wrong admin token")
	_, err = newClient(t, e.url).Check(ctx, client.CheckRequest{UserID: "u"})
	wantError(t, "check without the API token", err, http.StatusUnauthorized, "API token")
	if d, err := newClient(t, e.url, client.WithAPIToken("check-token")).Check(ctx, client.CheckRequest{UserID: "u"}); err != nil || !d.Allowed {
		t.Fatalf("check with the API token: %+v, %v", d, err)
	}

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := newClient(t, e.url, client.WithAPIToken("check-token")).Check(canceled, client.CheckRequest{}); !errors.Is(err, context.Canceled) || client.StatusCode(err) != 0 {
		t.Errorf("canceled context: err = %v, want context.Canceled", err)
	}

	e.store.Close()
	_, err = newClient(t, e.url, client.WithAPIToken("check-token")).Check(ctx, client.CheckRequest{UserID: "u"})
	wantError(t, "storage failed", err, http.StatusServiceUnavailable, "storage failed")

	// An answer from something other than policyguard, such as a proxy.
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "<html>bad gateway</html>", http.StatusBadGateway)
	}))
	defer proxy.Close()
	_, err = newClient(t, proxy.URL).Tiers(ctx)
	wantError(t, "proxy", err, http.StatusBadGateway, "Bad Gateway")

	// A 403 or 429 without a decision is an error, not a refusal: a proxy's
	// rate limit, or the service refusing a cross-site browser request.
	for _, tc := range []struct {
		status     int
		body, want string
	}{
		{http.StatusTooManyRequests, "slow down", "answer without a decision: Too Many Requests"},
		{http.StatusForbidden, `{"message":"cross-site requests from browsers are refused"}`, "cross-site requests from browsers are refused"},
		{http.StatusForbidden, `{"allowed":false}`, "answer without a decision: Forbidden"},
	} {
		gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tc.status)
			io.WriteString(w, tc.body)
		}))
		d, err := newClient(t, gate.URL).Check(ctx, client.CheckRequest{UserID: "u"})
		gate.Close()
		if err == nil {
			t.Errorf("%d %s: read as a decision %+v", tc.status, tc.body, d)
			continue
		}
		wantError(t, tc.body, err, tc.status, tc.want)
	}

	for _, bad := range []string{"", "127.0.0.1:8080", "ftp://host", "http://"} {
		if _, err := client.New(bad); err == nil {
			t.Errorf("New(%q) accepted", bad)
		}
	}
}

// A base URL with a path, as behind a gateway, keeps its path.
func TestClientBasePath(t *testing.T) {
	e := newEnv(t, nil)
	gateway := httptest.NewServer(http.StripPrefix("/policyguard", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		target := e.url + r.URL.RequestURI()
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, target, r.Body)
		req.Header = r.Header.Clone()
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer res.Body.Close()
		w.WriteHeader(res.StatusCode)
		io.Copy(w, res.Body)
	})))
	defer gateway.Close()
	c := newClient(t, gateway.URL+"/policyguard/", client.WithAdminToken(adminToken))
	if tier, err := c.Tier(context.Background(), "pro"); err != nil || *tier.RequestsPerMinute != 60 {
		t.Fatalf("Tier through the gateway: %+v, %v", tier, err)
	}
}
