package gateway

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// How the gateway settles an exchange with the upstream:
//
//   - An answer of status 2xx settles with the usage it reports, where
//     its protocol says and split by price as it says (openai.go,
//     anthropic.go). One that reports none (it was cut, it timed out, its
//     client left and it did not end within the drain time) is charged its
//     reservation, at its reserved cost: the upstream may have spent it all.
//   - Any other answer (an error, a redirect) settles with the usage it
//     reports, else 0 tokens; the request still counts as admitted.
//   - No answer: 0 tokens when the upstream could not be reached, the
//     reservation when the gateway gave up waiting (the upstream timeout,
//     or the drain time after its client left).
//
// The call is settled after the upstream exchange ended, and before the
// client sees the end of its answer (the last event of a stream is held
// until then): its slot is free, and its tokens counted, by the time the
// client can make another call.

// relayMode is how an upstream's answer is relayed.
type relayMode int

const (
	relayMetered relayMode = iota // a metered call: its usage settles it
	relayModels                   // the model list, filtered by the tier
	relayRaw                      // passthrough: as it comes
)

// What the gateway holds of an upstream's answer is bounded, whatever
// the answer, compressed or not:
//
//   - maxModelList of a model list, which is filtered whole;
//   - maxUsageScan of a JSON answer, which is relayed as it comes while
//     its usage is read from it: an answer whose usage is not within its
//     first maxUsageScan bytes (decompressed) is relayed on and settled at
//     its reservation;
//   - maxEvent of an event of a stream: a longer line or event ends the
//     relay, as an answer cut short, and the call is charged its
//     reservation;
//   - maxErrorBody of an answer other than 2xx, the rest relayed as it
//     comes.
const (
	maxModelList = 16 << 20
	maxUsageScan = 16 << 20
	maxEvent     = 1 << 20
)

// maxErrorBody is how much of an answer other than 2xx the gateway reads
// to remove the upstream's key from it, should the upstream echo it.
const maxErrorBody = 1 << 20

// forward sends the request upstream with body and relays the answer in
// mode, settling the call as the comment at the top of this file says.
// tier filters the model list.
func (x *exchange) forward(body io.Reader, length int64, mode relayMode, hideUsage bool, tier *policy.Tier) {
	// The upstream exchange outlives the client's request by the drain
	// time at most: its context is not the request's.
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
	// The body is read and the call checked: the exchange may take as
	// long as the upstream does, which the server's own deadlines (made
	// for checks) do not allow.
	rc := http.NewResponseController(x.c.Response())
	deadline := time.Now().Add(x.g.timeout + x.g.drain + time.Minute)
	_ = rc.SetReadDeadline(deadline)
	_ = rc.SetWriteDeadline(deadline)

	req, err := x.upstreamRequest(ctx, body, length)
	if err != nil {
		x.settle(zeroReport())
		x.failErr(err)
		return
	}
	start := time.Now()
	res, err := x.g.transport.RoundTrip(req)
	if err != nil {
		x.noAnswer(ctx, err)
		return
	}
	x.g.Metrics.ObserveUpstreamLatency(x.up.Name, time.Since(start))
	up := &upstreamBody{body: res.Body}
	defer up.close()

	var rd io.Reader = res.Body
	decoded := false
	if strings.EqualFold(res.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(res.Body)
		if err != nil {
			up.close()
			x.badAnswer(res, "its gzip body could not be read")
			return
		}
		rd, decoded = zr, true
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		x.relayError(res, rd, up, decoded)
		return
	}
	switch {
	case mode == relayModels:
		data, err := io.ReadAll(io.LimitReader(rd, maxModelList+1))
		up.close()
		var out []byte
		if err == nil && len(data) <= maxModelList {
			out, err = filterModels(data, tier)
		}
		if err != nil || len(data) > maxModelList {
			x.badAnswer(res, "its model list could not be read")
			return
		}
		x.writeHeader(res, decoded)
		x.write(out)
	case mode == relayRaw:
		x.writeHeader(res, decoded)
		x.flush()
		if err := x.copyRaw(rd); err != nil {
			x.logCut(ctx, err)
			x.cut = true
		}
		up.close()
		// settled with its reservation, 0, by passthrough
	case isEventStream(res.Header):
		x.writeHeader(res, decoded)
		x.flush() // the SDK waits for the header fields
		x.relayStream(ctx, rd, up, hideUsage)
	default:
		x.writeHeader(res, decoded)
		x.relayJSON(ctx, rd, up)
	}
}

// relayJSON relays a JSON answer as it comes, and settles the call with
// the usage read from its first maxUsageScan bytes, or its reservation.
func (x *exchange) relayJSON(ctx context.Context, rd io.Reader, up *upstreamBody) {
	tee := io.TeeReader(rd, writerFunc(x.write))
	u, found := readUsage(io.LimitReader(tee, maxUsageScan))
	_, err := io.Copy(io.Discard, tee)
	up.close()
	if r, ok := x.up.proto.report(&u); found && ok {
		x.settle(&r)
		return
	}
	if err != nil {
		x.logCut(ctx, err)
		x.cut = true
	}
	x.settle(nil)
}

// upstreamRequest returns the request to send upstream: the path after
// /llm/{name} appended to the upstream's base URL, the query kept, the
// header fields of the client but hop-by-hop ones, its credentials and
// the gateway's own, and the upstream's key as its protocol expects.
func (x *exchange) upstreamRequest(ctx context.Context, body io.Reader, length int64) (*http.Request, error) {
	path, err := url.PathUnescape(x.path)
	if err != nil {
		return nil, policy.Errorf(policy.EINVALID, "the path is not a valid escaped path")
	}
	u := *x.up.BaseURL
	u.Path = x.up.BaseURL.Path + path
	u.RawPath = x.up.BaseURL.EscapedPath() + x.path
	u.RawQuery = x.req.URL.RawQuery
	req, err := http.NewRequestWithContext(ctx, x.req.Method, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header = upstreamHeader(x.req.Header, x.up)
	if body != http.NoBody {
		req.Body, req.ContentLength = io.NopCloser(body), length
		if b, ok := body.(*bytes.Reader); ok {
			snapshot := *b
			req.GetBody = func() (io.ReadCloser, error) {
				r := snapshot
				return io.NopCloser(&r), nil
			}
		}
	} else {
		req.Body = http.NoBody
	}
	return req, nil
}

// hopHeaders are the hop-by-hop header fields (RFC 9110, 7.6.1, and the
// older ones proxies still see): they are the connection's, not the
// message's, and never forwarded either way.
var hopHeaders = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true,
	"Proxy-Authenticate": true, "Proxy-Authorization": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// connectionTokens returns the header fields h's Connection field names,
// which are hop-by-hop too.
func connectionTokens(h http.Header) map[string]bool {
	var names map[string]bool
	for _, v := range h["Connection"] {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				if names == nil {
					names = map[string]bool{}
				}
				names[http.CanonicalHeaderKey(name)] = true
			}
		}
	}
	return names
}

// droppedRequestHeaders are the client's header fields never sent
// upstream, besides the hop-by-hop ones and X-Guard-*: its credentials
// (the gateway key, a cookie of the admin page), what the transport sets
// itself, and what would tell the upstream about the client's network.
var droppedRequestHeaders = map[string]bool{
	"Authorization": true, "X-Api-Key": true, "Cookie": true, "Host": true,
	"Content-Length": true, "Accept-Encoding": true, "Expect": true,
	"Forwarded": true, "X-Forwarded-For": true, "X-Forwarded-Host": true,
	"X-Forwarded-Proto": true, "X-Real-Ip": true,
}

// upstreamHeader returns the header fields to send up for the client's in.
func upstreamHeader(in http.Header, up *upstream) http.Header {
	conn := connectionTokens(in)
	out := make(http.Header, len(in)+2)
	for k, vs := range in {
		if hopHeaders[k] || conn[k] || droppedRequestHeaders[k] || strings.HasPrefix(k, "X-Guard-") {
			continue
		}
		out[k] = vs
	}
	// Asked for, and read, by the gateway: a compressed answer is
	// decompressed here, so its usage can be read and its events relayed.
	out["Accept-Encoding"] = []string{"gzip"}
	up.proto.authorize(out, up.Key)
	return out
}

// writeHeader writes the upstream's status and header fields, but the
// hop-by-hop ones, its cookies, its rate-limit fields (the gateway's own
// replace them) and Content-Length (the body may change). Its request id
// is answered as X-Upstream-Request-Id beside the gateway's X-Request-Id.
func (x *exchange) writeHeader(res *http.Response, decoded bool) {
	h := x.c.Response().Header()
	conn := connectionTokens(res.Header)
	for k, vs := range res.Header {
		lk := strings.ToLower(k)
		switch {
		case hopHeaders[k] || conn[k] || k == "Set-Cookie" || k == "Content-Length":
		case decoded && k == "Content-Encoding":
		case strings.HasPrefix(lk, "x-ratelimit-") || strings.HasPrefix(lk, "anthropic-ratelimit-") || lk == "ratelimit" || lk == "ratelimit-policy":
		case k == echo.HeaderXRequestID:
			h["X-Upstream-Request-Id"] = x.redact(vs)
		default:
			h[k] = x.redact(vs)
		}
	}
	x.c.Response().WriteHeader(res.StatusCode)
}

// redact returns vs with the upstream's key replaced, should the upstream
// have echoed it.
func (x *exchange) redact(vs []string) []string {
	for i, v := range vs {
		if strings.Contains(v, x.up.Key) {
			out := append([]string(nil), vs...)
			out[i] = strings.ReplaceAll(v, x.up.Key, "[redacted]")
			return x.redact(out)
		}
	}
	return vs
}

// relayError relays an answer other than 2xx (the body, up to
// maxErrorBody, with the upstream's key removed) and settles the call
// with the usage it reports, else 0.
func (x *exchange) relayError(res *http.Response, rd io.Reader, up *upstreamBody, decoded bool) {
	data, err := io.ReadAll(io.LimitReader(rd, maxErrorBody))
	data = bytes.ReplaceAll(data, []byte(x.up.Key), []byte("[redacted]"))
	var u usageJSON
	var probe struct {
		Usage *usageJSON `json:"usage"`
	}
	r := tokensReport(0)
	if json.Unmarshal(data, &probe, lenientJSON) == nil && probe.Usage != nil {
		u = *probe.Usage
		if reported, ok := x.up.proto.report(&u); ok {
			r = reported
		}
	}
	x.writeHeader(res, decoded)
	x.write(data)
	if err == nil && len(data) == maxErrorBody {
		err = x.copyRaw(rd)
	}
	if err != nil {
		x.logCut(context.Background(), err)
		x.cut = true
	}
	up.close()
	x.settle(&r)
}

// noAnswer handles an upstream that did not answer.
func (x *exchange) noAnswer(ctx context.Context, err error) {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errDrained):
		// No one to answer.
		x.settle(nil)
		x.outcome = outcomeUpstreamFailed
	case errors.Is(cause, errUpstreamTimeout):
		x.settle(nil)
		x.g.Log(x.c, slog.LevelWarn, "upstream timed out", slog.String("upstream", x.up.Name), slog.Duration("timeout", x.g.timeout))
		x.fail(http.StatusGatewayTimeout, errTimeout, fmt.Sprintf("upstream %s did not answer within %v", x.up.Name, x.g.timeout))
	default:
		x.settle(zeroReport())
		x.g.Log(x.c, slog.LevelWarn, "upstream failed", slog.String("upstream", x.up.Name), slog.String("err", strings.ReplaceAll(err.Error(), x.up.Key, "[redacted]")))
		x.fail(http.StatusBadGateway, errUpstream, fmt.Sprintf("upstream %s could not be reached", x.up.Name))
	}
}

// badAnswer answers 502 for a 2xx answer the gateway could not read,
// charging the call its reservation.
func (x *exchange) badAnswer(res *http.Response, why string) {
	x.settle(nil)
	x.g.Log(x.c, slog.LevelWarn, "upstream answer unreadable", slog.String("upstream", x.up.Name), slog.Int("status", res.StatusCode), slog.String("why", why))
	x.fail(http.StatusBadGateway, errUpstream, fmt.Sprintf("upstream %s answered %d, but %s", x.up.Name, res.StatusCode, why))
}

// logCut logs an answer that ended early.
func (x *exchange) logCut(ctx context.Context, err error) {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause
	}
	x.g.Log(x.c, slog.LevelWarn, "upstream answer cut", slog.String("upstream", x.up.Name), slog.String("err", strings.ReplaceAll(err.Error(), x.up.Key, "[redacted]")))
}

// upstreamBody closes an upstream's body once: closing it ends the
// exchange, which must come before the settle.
type upstreamBody struct {
	body   io.Closer
	closed bool
}

func (u *upstreamBody) close() {
	if !u.closed {
		u.closed = true
		u.body.Close()
	}
}

// write writes p to the client, unless it went away; a failed write means
// it did.
func (x *exchange) write(p []byte) {
	if x.gone.Load() || len(p) == 0 {
		return
	}
	if _, err := x.c.Response().Write(p); err != nil {
		x.clientGone()
	}
}

// flush sends what was written to the client at once.
func (x *exchange) flush() {
	if x.gone.Load() {
		return
	}
	if err := http.NewResponseController(x.c.Response().Writer).Flush(); err != nil {
		x.clientGone()
	}
}

// writerFunc is an io.Writer that never fails: a client that went away
// must not stop the upstream's answer from being read.
type writerFunc func([]byte)

func (f writerFunc) Write(p []byte) (int, error) {
	f(p)
	return len(p), nil
}

// copyRaw relays r to the client as it comes, flushing each read, and
// returns the error that ended r, nil at its end.
func (x *exchange) copyRaw(r io.Reader) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			x.write(buf[:n])
			x.flush()
		}
		if err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// isEventStream reports whether h declares a stream of server-sent events.
func isEventStream(h http.Header) bool {
	ct := h.Get("Content-Type")
	return strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)), "text/event-stream")
}

// lenientJSON reads what an upstream sends: its usage must be read even
// from a body the gateway would not accept from a client.
var lenientJSON = json.JoinOptions(jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))

// usageJSON is a usage object of either protocol; a field is nil when
// absent.
type usageJSON struct {
	TotalTokens         *int64 `json:"total_tokens"`
	PromptTokens        *int64 `json:"prompt_tokens"`
	CompletionTokens    *int64 `json:"completion_tokens"`
	InputTokens         *int64 `json:"input_tokens"`
	OutputTokens        *int64 `json:"output_tokens"`
	CacheCreationTokens *int64 `json:"cache_creation_input_tokens"`
	CacheReadTokens     *int64 `json:"cache_read_input_tokens"`
	// The prompt's cached tokens, which OpenAI counts in prompt_tokens
	// (input_tokens of a response) and bills at the cache read price.
	PromptDetails *tokenDetails `json:"prompt_tokens_details"`
	InputDetails  *tokenDetails `json:"input_tokens_details"`
}

type tokenDetails struct {
	CachedTokens *int64 `json:"cached_tokens"`
}

// merge sets the fields o has: a later event's count replaces an
// earlier one's.
func (u *usageJSON) merge(o *usageJSON) {
	for _, f := range [...]struct{ dst, src **int64 }{
		{&u.TotalTokens, &o.TotalTokens}, {&u.PromptTokens, &o.PromptTokens},
		{&u.CompletionTokens, &o.CompletionTokens}, {&u.InputTokens, &o.InputTokens},
		{&u.OutputTokens, &o.OutputTokens}, {&u.CacheCreationTokens, &o.CacheCreationTokens},
		{&u.CacheReadTokens, &o.CacheReadTokens},
	} {
		if *f.src != nil {
			*f.dst = *f.src
		}
	}
	if o.PromptDetails != nil {
		u.PromptDetails = o.PromptDetails
	}
	if o.InputDetails != nil {
		u.InputDetails = o.InputDetails
	}
}

// count returns the count f points to, 0 for none, from 0 to
// policy.MaxLimit.
func count(f *int64) int64 {
	if f == nil {
		return 0
	}
	return min(max(*f, 0), policy.MaxLimit)
}

// tokensReport reports n tokens of no known kind.
func tokensReport(n int64) policy.Report { return policy.Report{Tokens: &n} }

// usageReport reports u, each count from 0 to policy.MaxLimit; a sum past
// policy.MaxLimit, which no call reserves, is reported as policy.MaxLimit
// tokens of no known kind, priced at the call's highest price.
func usageReport(u policy.TokenUsage) policy.Report {
	if u.Total() > policy.MaxLimit {
		return tokensReport(policy.MaxLimit)
	}
	return policy.Report{Usage: &u}
}

// reportTotal returns the tokens r counts.
func reportTotal(r policy.Report) int64 {
	if r.Usage != nil {
		return r.Usage.Total()
	}
	return *r.Tokens
}

// readUsage reads the top-level usage of the JSON object r holds,
// skipping the rest without keeping it, and reports whether it found one.
func readUsage(r io.Reader) (usageJSON, bool) {
	var u usageJSON
	dec := jsontext.NewDecoder(r, lenientJSON)
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return u, false
	}
	found := false
	for dec.PeekKind() == '"' {
		name, err := dec.ReadToken()
		if err != nil {
			break
		}
		if name.String() == "usage" && dec.PeekKind() == '{' {
			v, err := dec.ReadValue()
			if err != nil {
				break
			}
			found = json.Unmarshal(v, &u, lenientJSON) == nil
			continue
		}
		if dec.SkipValue() != nil {
			break
		}
	}
	return u, found
}

// filterModels returns the model list data with only the models t
// includes.
func filterModels(data []byte, t *policy.Tier) ([]byte, error) {
	var list struct {
		Data []jsontext.Value `json:"data"`
		Rest jsontext.Value   `json:",unknown"`
	}
	if err := json.Unmarshal(data, &list, lenientJSON); err != nil {
		return nil, err
	}
	kept := list.Data[:0]
	for _, m := range list.Data {
		var model struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(m, &model, lenientJSON) == nil && t.AllowsModel(model.ID) {
			kept = append(kept, m)
		}
	}
	list.Data = kept
	return json.Marshal(list)
}

// relayStream relays a stream of server-sent events as they come, each
// flushed at once, and settles the call from the usage they carry. The
// events of a chat or text completion stream that carry only the usage
// the gateway asked for are kept from the client (hideUsage). The event
// that ends the stream (data: [DONE], message_stop, response.completed
// or response.incomplete) is held until the exchange ended and the call
// was settled.
func (x *exchange) relayStream(ctx context.Context, r io.Reader, up *upstreamBody, hideUsage bool) {
	br := bufio.NewReaderSize(r, 16<<10)
	st := streamState{hideUsage: hideUsage}
	var ev []byte
	for {
		line, err := br.ReadSlice('\n')
		ev = append(ev, line...)
		if len(ev) > maxEvent {
			x.logCut(ctx, fmt.Errorf("an event longer than %d bytes", maxEvent))
			x.cut, st.final = true, false // charged its reservation
			break
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == nil && (len(line) == 1 || len(line) == 2 && line[0] == '\r') {
			switch x.event(&st, ev) {
			case eventForward:
				x.write(ev)
				x.flush()
			case eventEnd:
				up.close()
				x.settleStream(&st)
				x.write(ev)
				x.flush()
				return
			}
			ev = ev[:0]
		}
		if err != nil {
			if err != io.EOF {
				x.logCut(ctx, err)
				x.cut = true
			}
			x.write(ev) // what came of an event cut short
			x.flush()
			break
		}
	}
	up.close()
	x.settleStream(&st)
}

// settleStream settles the call with the usage the stream reported, or
// its reservation.
func (x *exchange) settleStream(st *streamState) {
	if r, ok := x.up.proto.report(&st.usage); ok && st.final {
		x.settle(&r)
		return
	}
	x.settle(nil)
}

// eventAction is what relayStream does with an event.
type eventAction int

const (
	eventForward eventAction = iota
	eventDrop                // the usage the gateway asked for and the client did not
	eventEnd                 // the stream's last event
)

// streamState is what a stream told of its usage so far.
type streamState struct {
	hideUsage bool
	usage     usageJSON
	// final reports whether the usage is the whole call's: OpenAI's
	// usage chunk or final response, or an Anthropic message_delta.
	final bool
}

// event reads one event, its lines as they came, and says what to do
// with it.
func (x *exchange) event(st *streamState, ev []byte) eventAction {
	name, data := parseEvent(ev)
	if data == nil {
		return eventForward
	}
	return x.up.proto.event(st, x.route, name, data)
}

// parseEvent returns the event name and the data of an event, its data
// lines joined by newlines; data is nil when it has none.
func parseEvent(ev []byte) (name string, data []byte) {
	lines := 0
	for len(ev) > 0 {
		line := ev
		if i := bytes.IndexByte(ev, '\n'); i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			ev = nil
		}
		line = bytes.TrimSuffix(line, []byte{'\r'})
		field, value, _ := bytes.Cut(line, []byte{':'})
		value = bytes.TrimPrefix(value, []byte{' '})
		switch string(field) {
		case "event":
			name = string(value)
		case "data":
			if lines++; lines == 1 {
				data = value
			} else {
				data = append(append(append([]byte(nil), data...), '\n'), value...)
			}
		}
	}
	return name, data
}

// eventType returns the "type" member of an event's data.
func eventType(data []byte) string {
	var e struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(data, &e, lenientJSON)
	return e.Type
}
