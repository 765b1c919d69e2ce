package api

import (
	"net/http"
	"testing"
	"time"

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
		setRateLimitHeaders(h, windows)
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
