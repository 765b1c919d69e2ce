package cli

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// The access log writes a line per request, and written one by one, each
// line cost a system call under the log handler's lock, which every request
// then queued behind.

// LogFlushInterval is how long a log line may wait in a LogWriter.
const LogFlushInterval = 100 * time.Millisecond

// LogWriter gathers log lines and writes them out together: at most
// LogFlushInterval after the first one waits, at once for a warning or an
// error (see NewFlushingHandler), and at Close. It is safe for concurrent
// use.
type LogWriter struct {
	mu       sync.Mutex
	w        *bufio.Writer
	pending  bool // a flush is scheduled
	closed   bool
	schedule func(time.Duration, func()) // time.AfterFunc, but for tests
}

// NewLogWriter returns a LogWriter that writes to w.
func NewLogWriter(w io.Writer) *LogWriter {
	return &LogWriter{
		w:        bufio.NewWriterSize(w, 64<<10),
		schedule: func(d time.Duration, f func()) { time.AfterFunc(d, f) },
	}
}

func (b *LogWriter) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.w.Write(p)
	if b.closed { // after Close, every line goes out at once
		if ferr := b.w.Flush(); err == nil {
			err = ferr
		}
		return n, err
	}
	if !b.pending && b.w.Buffered() > 0 {
		b.pending = true
		b.schedule(LogFlushInterval, func() { b.Flush() })
	}
	return n, err
}

// Flush writes out what is buffered.
func (b *LogWriter) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending = false
	return b.w.Flush()
}

// Close flushes and makes every later write go out at once.
func (b *LogWriter) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return b.w.Flush()
}

// NewFlushingHandler returns a handler that passes records to h, which
// writes into w, and flushes w after each warning or error, so that those
// are never held back.
func NewFlushingHandler(h slog.Handler, w *LogWriter) slog.Handler {
	return flushingHandler{h, w}
}

type flushingHandler struct {
	slog.Handler
	buf *LogWriter
}

func (h flushingHandler) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Level >= slog.LevelWarn {
		_ = h.buf.Flush()
	}
	return err
}

func (h flushingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return flushingHandler{h.Handler.WithAttrs(attrs), h.buf}
}

func (h flushingHandler) WithGroup(name string) slog.Handler {
	return flushingHandler{h.Handler.WithGroup(name), h.buf}
}

// NewLogHandler returns the handler of the service's log, in format (text
// or json), which writes into logs and flushes it after a warning or an
// error.
func NewLogHandler(format string, logs *LogWriter) slog.Handler {
	var h slog.Handler = slog.NewTextHandler(logs, nil)
	if format == "json" {
		h = slog.NewJSONHandler(logs, nil)
	}
	return NewFlushingHandler(h, logs)
}
