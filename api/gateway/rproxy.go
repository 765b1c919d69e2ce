package gateway

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// EXPERIMENT: metered calls forwarded by httputil.ReverseProxy.
var useReverseProxy = os.Getenv("POLICYGUARD_RPROXY") == "1"

// rpBuffers lends ReverseProxy its copy buffers.
type rpBuffers struct{}

var rpPool = sync.Pool{New: func() any { return make([]byte, 32<<10) }}

func (rpBuffers) Get() []byte  { return rpPool.Get().([]byte) }
func (rpBuffers) Put(b []byte) { rpPool.Put(b) } //nolint:staticcheck

var errHandled = errors.New("answered")

var discardLog = log.New(io.Discard, "", 0)

func (x *exchange) forwardRP(body io.Reader, length int64, hideUsage bool) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(x.req.Context()))
	defer cancel(nil)
	ctx, cancelTimeout := context.WithTimeoutCause(ctx, x.g.timeout, errUpstreamTimeout)
	defer cancelTimeout()
	x.mu.Lock()
	x.cancelUp = cancel
	x.mu.Unlock()
	defer func() {
		x.mu.Lock()
		if x.drainT != nil {
			x.drainT.Stop()
		}
		x.cancelUp = nil
		x.mu.Unlock()
	}()
	stopWatch := context.AfterFunc(x.req.Context(), x.clientGone)
	defer stopWatch()
	rc := http.NewResponseController(x.c.Response())
	deadline := time.Now().Add(x.g.timeout + x.g.drain + time.Minute)
	_ = rc.SetReadDeadline(deadline)
	_ = rc.SetWriteDeadline(deadline)

	path, err := url.PathUnescape(x.path)
	if err != nil {
		x.settle(new(int64))
		x.failErr(policy.Errorf(policy.EINVALID, "the path is not a valid escaped path"))
		return
	}
	u := *x.up.BaseURL
	u.Path = x.up.BaseURL.Path + path
	u.RawPath = x.up.BaseURL.EscapedPath() + x.path
	u.RawQuery = x.req.URL.RawQuery
	// As http.NewRequest does: the path then starts with a slash.
	out, err := url.Parse(u.String())
	if err != nil {
		x.settle(new(int64))
		x.failErr(err)
		return
	}
	var start time.Time
	rp := &httputil.ReverseProxy{
		Transport:     x.g.transport,
		FlushInterval: -1,
		BufferPool:    rpBuffers{},
		ErrorLog:      discardLog,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL, pr.Out.Host = out, ""
			pr.Out.Header = upstreamHeader(x.req.Header, x.up)
			pr.Out.Body, pr.Out.ContentLength, pr.Out.TransferEncoding = io.NopCloser(body), length, nil
			if b, ok := body.(*bytes.Reader); ok {
				snapshot := *b
				pr.Out.GetBody = func() (io.ReadCloser, error) {
					r := snapshot
					return io.NopCloser(&r), nil
				}
			}
			start = time.Now()
		},
		ModifyResponse: func(res *http.Response) error {
			x.g.Metrics.ObserveUpstreamLatency(x.up.Name, time.Since(start))
			return x.modifyRP(ctx, res, hideUsage)
		},
		ErrorHandler: func(_ http.ResponseWriter, _ *http.Request, err error) {
			if !errors.Is(err, errHandled) {
				x.noAnswer(ctx, err)
			}
		},
	}
	rp.ServeHTTP(rpWriter{x}, x.req.WithContext(ctx))
}

// rpWriter never fails: the upstream's answer is read on after the
// client left, which ReverseProxy does not do (it stops at the first
// failed write and panics with http.ErrAbortHandler).
type rpWriter struct{ x *exchange }

func (w rpWriter) Header() http.Header         { return w.x.c.Response().Header() }
func (w rpWriter) WriteHeader(status int)      { w.x.c.Response().WriteHeader(status) }
func (w rpWriter) Write(p []byte) (int, error) { w.x.write(p); return len(p), nil }
func (w rpWriter) Flush()                      { w.x.flush() }

func (x *exchange) modifyRP(ctx context.Context, res *http.Response, hideUsage bool) error {
	up := &upstreamBody{body: res.Body}
	var rd io.Reader = res.Body
	decoded := false
	if strings.EqualFold(res.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(res.Body)
		if err != nil {
			up.close()
			x.badAnswer(res, "its gzip body could not be read")
			return errHandled
		}
		rd, decoded = zr, true
	}
	h := make(http.Header, len(res.Header))
	for k, vs := range res.Header {
		lk := strings.ToLower(k)
		switch {
		case k == "Set-Cookie" || k == "Content-Length":
		case decoded && k == "Content-Encoding":
		case strings.HasPrefix(lk, "x-ratelimit-") || strings.HasPrefix(lk, "anthropic-ratelimit-") || lk == "ratelimit" || lk == "ratelimit-policy":
		case k == echo.HeaderXRequestID:
			h["X-Upstream-Request-Id"] = x.redact(vs)
		default:
			h[k] = x.redact(vs)
		}
	}
	res.Header, res.ContentLength = h, -1
	switch {
	case res.StatusCode < 200 || res.StatusCode > 299:
		data, err := io.ReadAll(io.LimitReader(rd, maxErrorBody))
		data = bytes.ReplaceAll(data, []byte(x.up.Key), []byte("[redacted]"))
		var probe struct {
			Usage *usageJSON `json:"usage"`
		}
		tokens := int64(0)
		if json.Unmarshal(data, &probe, lenientJSON) == nil && probe.Usage != nil {
			if n, ok := x.up.proto.total(probe.Usage); ok {
				tokens = n
			}
		}
		var rest io.Reader = rd
		if err != nil || len(data) < maxErrorBody {
			rest = eofReader{err}
		}
		res.Body = &errorBody{x: x, up: up, r: io.MultiReader(bytes.NewReader(data), rest), tokens: tokens}
	case isEventStream(res.Header):
		res.Body = &streamBody{x: x, ctx: ctx, up: up, br: bufio.NewReaderSize(rd, 16<<10), st: streamState{hideUsage: hideUsage}}
	default:
		pr, pw := io.Pipe()
		b := &jsonBody{x: x, ctx: ctx, up: up, rd: rd, pw: pw, done: make(chan struct{})}
		go func() {
			b.u, b.found = readUsage(pr)
			io.Copy(io.Discard, pr)
			close(b.done)
		}()
		res.Body = b
	}
	return nil
}

type eofReader struct{ err error }

func (r eofReader) Read([]byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	return 0, io.EOF
}

type errorBody struct {
	x      *exchange
	up     *upstreamBody
	r      io.Reader
	tokens int64
}

func (b *errorBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil {
		if err != io.EOF {
			b.x.logCut(context.Background(), err)
			b.x.cut = true
		}
		b.Close()
		return n, io.EOF
	}
	return n, nil
}

func (b *errorBody) Close() error {
	b.up.close()
	b.x.settle(&b.tokens)
	return nil
}

// jsonBody relays a JSON answer while a goroutine reads its usage from
// its first maxUsageScan bytes: ReverseProxy pushes, readUsage pulls.
type jsonBody struct {
	x       *exchange
	ctx     context.Context
	up      *upstreamBody
	rd      io.Reader
	pw      *io.PipeWriter
	scanned int64
	done    chan struct{}
	u       usageJSON
	found   bool
	ended   bool
}

func (b *jsonBody) Read(p []byte) (int, error) {
	if b.ended {
		return 0, io.EOF
	}
	n, err := b.rd.Read(p)
	if n > 0 && b.scanned < maxUsageScan {
		m := min(int64(n), maxUsageScan-b.scanned)
		b.pw.Write(p[:m])
		if b.scanned += m; b.scanned == maxUsageScan {
			b.pw.Close()
		}
	}
	if err != nil {
		b.end(err)
		return n, io.EOF
	}
	return n, nil
}

func (b *jsonBody) end(err error) {
	if b.ended {
		return
	}
	b.ended = true
	b.pw.Close()
	<-b.done
	b.up.close()
	if n, ok := b.x.up.proto.total(&b.u); b.found && ok {
		b.x.settle(&n)
		return
	}
	if err != nil && err != io.EOF {
		b.x.logCut(b.ctx, err)
		b.x.cut = true
	}
	b.x.settle(nil)
}

func (b *jsonBody) Close() error {
	b.end(errors.New("closed early"))
	return nil
}

// streamBody yields the events of a stream the client is to see.
type streamBody struct {
	x    *exchange
	ctx  context.Context
	up   *upstreamBody
	br   *bufio.Reader
	st   streamState
	ev   []byte
	out  []byte
	pend []byte
	done bool
}

func (s *streamBody) Read(p []byte) (int, error) {
	for len(s.pend) == 0 {
		if s.done {
			return 0, io.EOF
		}
		s.next()
	}
	n := copy(p, s.pend)
	s.pend = s.pend[n:]
	return n, nil
}

func (s *streamBody) emit(ev []byte) {
	s.out = append(s.out[:0], ev...)
	s.pend = s.out
}

func (s *streamBody) next() {
	x := s.x
	line, err := s.br.ReadSlice('\n')
	s.ev = append(s.ev, line...)
	if len(s.ev) > maxEvent {
		x.logCut(s.ctx, fmt.Errorf("an event longer than %d bytes", maxEvent))
		x.cut, s.st.final = true, false
		s.finish()
		return
	}
	if err == bufio.ErrBufferFull {
		return
	}
	if err == nil && (len(line) == 1 || len(line) == 2 && line[0] == '\r') {
		switch x.event(&s.st, s.ev) {
		case eventForward:
			s.emit(s.ev)
		case eventEnd:
			s.finish()
			s.emit(s.ev)
		}
		s.ev = s.ev[:0]
	}
	if err != nil {
		if err != io.EOF {
			x.logCut(s.ctx, err)
			x.cut = true
		}
		s.emit(s.ev)
		s.finish()
	}
}

func (s *streamBody) finish() {
	if !s.done {
		s.done = true
		s.up.close()
		s.x.settleStream(&s.st)
	}
}

func (s *streamBody) Close() error {
	s.finish()
	return nil
}
