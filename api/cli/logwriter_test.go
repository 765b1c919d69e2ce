package cli

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestLogWriterHoldsInfoAndFlushesWarnings(t *testing.T) {
	var out bytes.Buffer
	buf := NewLogWriter(&out)
	var scheduled []func()
	buf.schedule = func(d time.Duration, f func()) {
		if d != LogFlushInterval {
			t.Errorf("flush scheduled in %v, want %v", d, LogFlushInterval)
		}
		scheduled = append(scheduled, f)
	}
	log := slog.New(NewFlushingHandler(slog.NewTextHandler(buf, nil), buf))

	log.Info("request", "path", "/v1/check")
	log.Info("request", "path", "/v1/check")
	if out.Len() != 0 || len(scheduled) != 1 {
		t.Fatalf("after two info lines: %q written, %d flushes scheduled; want nothing written, one scheduled", out.String(), len(scheduled))
	}
	scheduled[0]() // the interval has passed
	if got := strings.Count(out.String(), "msg=request"); got != 2 {
		t.Fatalf("after the scheduled flush: %d lines written, want 2:\n%s", got, out.String())
	}

	log.Info("request", "path", "/healthz")
	log.Error("request failed", "status", 503)
	if !strings.Contains(out.String(), "path=/healthz") || !strings.Contains(out.String(), "request failed") {
		t.Fatalf("an error did not flush what came before it:\n%s", out.String())
	}

	log.Info("shutting down")
	if err := buf.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "shutting down") {
		t.Fatalf("Close did not flush:\n%s", out.String())
	}
	log.Info("after close")
	if !strings.Contains(out.String(), "after close") {
		t.Fatalf("a line after Close waited:\n%s", out.String())
	}
}
