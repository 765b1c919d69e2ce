package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/api"
	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
)

// BenchmarkCheckHTTP measures POST /v1/check through the whole Echo
// instance, wired as main wires it (metrics on the storage, the access log
// written to a file in batches), on a real store, for 10,000 rotating users from 64
// goroutines. Beside it runs a do-nothing Echo handler that decodes the
// same body, the baseline of the load benchmark, so the output shows the
// ratio of the two without the network. "log=off" discards the access log
// before it is formatted, which shows what the log costs.
func BenchmarkCheckHTTP(b *testing.B) {
	const users = 10_000
	bodies := make([]string, users)
	for i := range bodies {
		bodies[i] = fmt.Sprintf(`{"input_text":"Summarize the attached report in three sentences.","context":{"user_id":"user-%05d","user_tier":"bench","feature":"summarize"}}`, i)
	}
	dir := b.TempDir()
	logFile, err := os.Create(filepath.Join(dir, "access.log"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { logFile.Close() })

	for _, tc := range []struct {
		name    string
		handler func(b *testing.B) http.Handler
	}{
		{"baseline", func(*testing.B) http.Handler { return baselineHandler() }},
		{"service", func(b *testing.B) http.Handler {
			logs := &bufferedLog{w: bufio.NewWriterSize(logFile, 64<<10)} // as main buffers it
			b.Cleanup(func() { logs.w.Flush() })
			return benchServer(b, filepath.Join(dir, "log-on.db"), slog.New(slog.NewTextHandler(logs, nil)))
		}},
		{"service/log=off", func(b *testing.B) http.Handler {
			return benchServer(b, filepath.Join(dir, "log-off.db"), slog.New(slog.DiscardHandler))
		}},
	} {
		h := tc.handler(b)
		b.Run(tc.name, func(b *testing.B) {
			var next atomic.Int64
			b.SetParallelism(max(64/runtime.GOMAXPROCS(0), 1))
			b.ReportAllocs()
			defer reportCPU(b, dbtest.CPUTime())
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req := httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(bodies[next.Add(1)%users]))
					req.Header.Set("Content-Type", "application/json")
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK {
						b.Errorf("status %d: %s", rec.Code, rec.Body)
						return
					}
				}
			})
		})
	}
}

// bufferedLog is a log file written in batches, as main writes its log.
type bufferedLog struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (l *bufferedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// benchServer returns the API over a store at path with a tier that admits
// everything, so that every check records.
func benchServer(b *testing.B, path string, log *slog.Logger) http.Handler {
	b.Helper()
	ctx := context.Background()
	store, err := db.Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	_, err = store.UpdateTiers(ctx, policy.TierUpdate{Put: []policy.Tier{{Name: "bench", Limits: policy.LimitSet{policy.RequestsPerMinute: new(int64(policy.MaxLimit)), policy.RequestsPerHour: new(int64(policy.MaxLimit)), policy.RequestsPerDay: new(int64(policy.MaxLimit))}, Features: []string{policy.AllFeatures}}}})
	if err != nil {
		b.Fatal(err)
	}
	metrics := api.NewMetrics(nil)
	tiers, requests := metrics.MeterStorage(store, store)
	return api.NewServer(api.Config{
		Service: policy.NewService(tiers, requests),
		Health:  store.Ping,
		Admin:   policy.NewAdminGate("bench-admin-token"),
		Logger:  log,
		Metrics: metrics,
	})
}

// baselineHandler is the do-nothing handler of the load benchmark.
func baselineHandler() http.Handler {
	type checkBody struct {
		InputText string `json:"input_text"`
		Context   struct {
			UserID   string `json:"user_id"`
			UserTier string `json:"user_tier"`
			Feature  string `json:"feature"`
		} `json:"context"`
	}
	type answer struct {
		Allowed bool   `json:"allowed"`
		Tier    string `json:"tier"`
	}
	e := echo.New()
	e.POST("/v1/check", func(c echo.Context) error {
		var body checkBody
		if err := json.NewDecoder(c.Request().Body).Decode(&body); err != nil {
			return echo.NewHTTPError(http.StatusBadRequest, err.Error())
		}
		return c.JSON(http.StatusOK, answer{Allowed: true, Tier: body.Context.UserTier})
	})
	return e
}

// reportCPU adds the process's CPU time per operation since start as a
// metric: the cost of an operation however busy the machine is.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(dbtest.CPUTime()-start)/float64(b.N), "cpu-ns/op")
}
