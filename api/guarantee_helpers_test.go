package api_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

// recordingStore is the real store's RequestStore with two additions for
// tests: it counts the requests that were recorded (Admit committed a row),
// and it fails on demand, the way storage fails (fault injection).
type recordingStore struct {
	policy.RequestStore
	recorded atomic.Int64

	mu       sync.Mutex
	fault    error
	onRecord func(user string, at time.Time) // called after each recording, if set
}

func (s *recordingStore) setFault(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = err
}

func (s *recordingStore) faultErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fault
}

func (s *recordingStore) Admit(ctx context.Context, user string, decide func(policy.History) (policy.Admission, error)) error {
	if err := s.faultErr(); err != nil {
		return err
	}
	var a policy.Admission
	err := s.RequestStore.Admit(ctx, user, func(h policy.History) (policy.Admission, error) {
		var err error
		a, err = decide(h)
		return a, err
	})
	if err == nil && a.Record {
		s.recorded.Add(1)
		if s.onRecord != nil {
			s.onRecord(user, a.At)
		}
	}
	return err
}

func (s *recordingStore) View(ctx context.Context, user string, fn func(policy.History) error) error {
	if err := s.faultErr(); err != nil {
		return err
	}
	return s.RequestStore.View(ctx, user, fn)
}

func (s *recordingStore) Forget(ctx context.Context, user string) error {
	if err := s.faultErr(); err != nil {
		return err
	}
	return s.RequestStore.Forget(ctx, user)
}

// lockedBuffer is the log destination of the gateway's tests, which keep
// their own name for it.
type lockedBuffer = dbtest.LockedBuffer

// guardEnv is a server on a real store whose recordings are counted and
// whose logs are kept.
type guardEnv struct {
	t        testing.TB
	dbPath   string
	cfg      api.Config
	store    *db.Store
	requests *recordingStore
	svc      *policy.Service
	srv      *api.Server
	clock    *policy.TestClock
	logs     *dbtest.LockedBuffer
}

// newGuardEnv returns a guardEnv for cfg; Service, Health, Logger and, when
// nil, Admin (for adminToken) are filled in.
func newGuardEnv(t testing.TB, cfg api.Config, opts ...db.Option) *guardEnv {
	t.Helper()
	path := dbtest.DSN(t, "guard.db")
	store, err := db.Open(context.Background(), path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	e := &guardEnv{t: t, dbPath: path, cfg: cfg, store: store, requests: &recordingStore{RequestStore: store}, clock: policy.NewTestClock(t0), logs: &dbtest.LockedBuffer{}}
	if e.cfg.Admin == nil {
		e.cfg.Admin = policy.NewAdminGate(adminToken)
	}
	e.cfg.Logger = slog.New(slog.NewJSONHandler(e.logs, nil))
	e.build()
	return e
}

// build makes the service and server anew on e.store.
func (e *guardEnv) build() {
	e.svc = policy.NewService(e.store, e.requests, policy.WithClock(e.clock.Now))
	e.cfg.Service, e.cfg.Health = e.svc, e.store.Ping
	e.srv = api.NewServer(e.cfg)
}

// send passes one request through the whole Echo instance. A body sent
// without a Content-Type in header goes as application/json.
func (e *guardEnv) send(method, path, body string, header map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	rec := httptest.NewRecorder()
	e.srv.ServeHTTP(rec, req)
	return rec
}

// putTier creates or replaces a tier through the admin API.
func (e *guardEnv) putTier(name, body string) {
	e.t.Helper()
	rec := e.send(http.MethodPut, "/v1/tiers/"+name, body, map[string]string{"Authorization": "Bearer " + adminToken})
	if rec.Code != http.StatusOK && rec.Code != http.StatusCreated {
		e.t.Fatalf("put tier %s: %d %s", name, rec.Code, rec.Body)
	}
}

// dayCount returns user's admitted requests in the last day, from the store.
func (e *guardEnv) dayCount(user string) int64 {
	e.t.Helper()
	states, err := e.svc.Usage(context.Background(), user, "")
	if err != nil {
		e.t.Fatal(err)
	}
	return states[policy.Day].Count
}

// httpServer serves h on a loopback port for the test's duration.
func httpServer(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// drain reads and closes an answer's body, so its connection can be reused.
func drain(res *http.Response) {
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
}

// message returns the "message" of a JSON answer.
func message(rec *httptest.ResponseRecorder) string {
	var b struct {
		Message string `json:"message"`
	}
	json.Unmarshal(rec.Body.Bytes(), &b)
	return b.Message
}
