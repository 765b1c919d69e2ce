package api

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// The per-check cost of what this package adds to every check answer: the
// rate-limit header fields and the metrics.

func BenchmarkRateLimitHeaders(b *testing.B) {
	windows := &[len(policy.Windows)]policy.WindowState{
		{Count: 1, Limit: 15, Remaining: 14, Reset: 60},
		{Count: 1, Limit: 100, Remaining: 99, Reset: 3600},
		{Count: 1, Limit: 1000, Remaining: 999, Reset: 86400},
	}
	h := make(http.Header, 8)
	b.ReportAllocs()
	for b.Loop() {
		setRateLimitHeaders(h, windows, 0)
	}
}

func BenchmarkObserveCheck(b *testing.B) {
	m := NewMetrics(nil)
	d := policy.Decision{
		Outcome:   policy.Admitted,
		Tier:      "free",
		Guardrail: "rate_limiter",
		Windows:   &[len(policy.Windows)]policy.WindowState{},
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.observeCheck(&d, nil, false, 300*time.Microsecond)
		}
	})
}

// BenchmarkServe is the middleware every route has (request id, body
// limit, access log written by a text handler) around a handler that
// does nothing.
func BenchmarkServe(b *testing.B) {
	s := NewServer(Config{Service: policy.NewService(nil, nil), Admin: policy.NewAdminGate("t"),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	h := s.serve(func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
	req := httptest.NewRequest(http.MethodPost, "/v1/check", nil)
	rec := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		clear(rec.Header())
		c := s.echo.NewContext(req, rec)
		h(c)
	}
}
