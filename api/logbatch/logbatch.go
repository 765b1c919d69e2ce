// Package logbatch writes log lines in batches: the access log writes a
// line per request, and written one by one, each line cost a system call
// under the log handler's lock, which every request then queued behind.
package logbatch

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// FlushInterval is how long a log line may wait in a Writer.
const FlushInterval = 100 * time.Millisecond

// Writer gathers log lines and writes them out together: at most
// FlushInterval after the first one waits, at once for a warning or an
// error (see NewHandler), and at Close. It is safe for concurrent use.
type Writer struct {
	mu       sync.Mutex
	w        *bufio.Writer
	pending  bool // a flush is scheduled
	closed   bool
	schedule func(time.Duration, func()) // time.AfterFunc, but for tests
}

// NewWriter returns a Writer that writes to w.
func NewWriter(w io.Writer) *Writer {
	return &Writer{
		w:        bufio.NewWriterSize(w, 64<<10),
		schedule: func(d time.Duration, f func()) { time.AfterFunc(d, f) },
	}
}

func (b *Writer) Write(p []byte) (int, error) {
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
		b.schedule(FlushInterval, func() { b.Flush() })
	}
	return n, err
}

// Flush writes out what is buffered.
func (b *Writer) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending = false
	return b.w.Flush()
}

// Close flushes and makes every later write go out at once.
func (b *Writer) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return b.w.Flush()
}

// NewHandler returns a handler that passes records to h, which writes into
// w, and flushes w after each warning or error, so that those are never
// held back.
func NewHandler(h slog.Handler, w *Writer) slog.Handler {
	return flushingHandler{h, w}
}

type flushingHandler struct {
	slog.Handler
	buf *Writer
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
