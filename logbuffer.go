package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// logFlushInterval is how long a log line may wait in the buffer.
const logFlushInterval = 100 * time.Millisecond

// logBuffer gathers log lines and writes them out together: at most
// logFlushInterval after the first one waits, at once for a warning or an
// error (see flushingHandler), and at Close. The access log writes a line
// per request; written one by one, each line cost a system call under the
// handler's lock, which every request then queued behind. It is safe for
// concurrent use.
type logBuffer struct {
	mu       sync.Mutex
	w        *bufio.Writer
	pending  bool // a flush is scheduled
	closed   bool
	schedule func(time.Duration, func()) // time.AfterFunc, but for tests
}

func newLogBuffer(w io.Writer) *logBuffer {
	return &logBuffer{
		w:        bufio.NewWriterSize(w, 64<<10),
		schedule: func(d time.Duration, f func()) { time.AfterFunc(d, f) },
	}
}

func (b *logBuffer) Write(p []byte) (int, error) {
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
		b.schedule(logFlushInterval, func() { b.Flush() })
	}
	return n, err
}

// Flush writes out what is buffered.
func (b *logBuffer) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending = false
	return b.w.Flush()
}

// Close flushes and makes every later write go out at once.
func (b *logBuffer) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return b.w.Flush()
}

// flushingHandler passes records to a handler that writes into a
// logBuffer, and flushes the buffer after each warning or error, so that
// those are never held back.
type flushingHandler struct {
	slog.Handler
	buf *logBuffer
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
