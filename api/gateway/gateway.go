// Package gateway forwards OpenAI- and Anthropic-compatible model calls to
// upstreams, metered as checks of the guardrail service: under
// /llm/{upstream}/... an agent changes its SDK's base URL and nothing else,
// and can neither skip its limits nor misreport its tokens. Package api
// mounts it (api.Config.Gateway).
//
// A request passes through these steps, each refusing in the upstream's
// own error shape:
//
//  1. The upstream is found by name, and the path after it must be
//     clean, or it is a 404: no dot segments, no empty segments, no
//     escaped slash or dot. The path and the query must be unambiguous,
//     or they are a 400: no escape of a character that needs none, no
//     control character, no escape escaped twice, no ";" parameter. So
//     the path the gateway routes and meters is the one the upstream
//     receives and routes, byte for byte.
//  2. The gateway key is read from Authorization: Bearer (any route) or
//     the protocol's own field (x-api-key for anthropic) and
//     Keys.Authenticate reads it from the store, so a revoked key is
//     refused at once on every replica. A service key names its user in
//     X-Guard-User; a user key must not.
//  3. The route decides what is metered. A metered call's body is read
//     (at most MaxBody), its model must be one the user's tier allows
//     (the tier of the user's record, else the default tier; never one
//     the client names), and Calls.Check decides it, reserving an upper
//     bound of its tokens (body.go) in a call it opens whatever the tier
//     limits, so every call's tokens are recorded. Under a spend limit
//     the call is priced by its model and upstream: the prompt's bound at
//     the input price, the output cap at the output price; a model with
//     no price is a 403, and a spend limit's refusal is the protocol's
//     answer to an exhausted quota, which the SDKs do not retry. A call
//     naming a run (X-Guard-Run, runs.go) counts in it and its ancestors,
//     and a run's spent budget is a 403 no SDK retries. A refusal never
//     reaches the upstream.
//  4. The call is forwarded with the upstream's key instead of the
//     gateway key, and its answer relayed as it arrives (relay.go); the
//     usage the upstream reports settles the call (FinishCall), each kind
//     of token at its price, which frees its concurrency slot. While the
//     exchange is live the call is kept alive, so a stream longer than
//     the call timeout keeps its slot.
//
// What differs between protocols lives in one file each (openai.go,
// anthropic.go): the metered paths and how their bodies bound a call's
// tokens, where the usage is in an answer and in an event stream, the
// error shape, and the rate-limit header fields. The relay knows none of
// it. A third protocol is one new file implementing protocol and one line
// in protocols.
//
// The relay is written by hand, not built on httputil.ReverseProxy. A
// ReverseProxy (Rewrite, ModifyResponse, FlushInterval -1, a pooled
// BufferPool) forwarding the metered calls passed every test of this
// package, but only with 350 lines around it: a ResponseWriter that never
// fails, since ReverseProxy stops reading at the first failed write and
// the upstream must be read on after the client left; the usage scan and
// the event filter turned into response bodies that ReverseProxy pulls
// (the JSON scan then needs a goroutine and a pipe per call); settling on
// the body's end; the header filter and the error body redaction in
// ModifyResponse; the 502 and 504 in ErrorHandler. It saved only the
// hop-by-hop filter of the answer, and it was not faster: on 2026-12-03,
// BenchmarkGatewayChat/gateway, 8 alternated runs each on a shared
// 2-core machine (load 4.5 to 6.4), medians 477,500 ns/op and 516
// allocs/op by hand, 564,658 ns/op and 550 allocs/op through
// ReverseProxy (1.18 times slower); a streamed variant, 6 runs each,
// 994,540 and 586 by hand, 849,925 and 613 through ReverseProxy (0.85,
// within the noise: single runs ranged from 563,000 to 1,334,000).
// The experiment is commit da95f78: POLICYGUARD_RPROXY=1 go test
// -run '^$' -bench 'BenchmarkGatewayChat/gateway' -benchmem ./api/gateway.
package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/sync/semaphore"

	"github.com/policyguard/policyguard/policy"
)

// Protocols an upstream speaks.
const (
	ProtocolOpenAI    = "openai"
	ProtocolAnthropic = "anthropic"
)

// protocol is what the gateway knows of one model API; the relay knows
// none of it.
type protocol interface {
	// paths returns the metered paths (POST only) with their routes, and
	// the path of the model list (GET only).
	paths() (metered map[string]route, models string)
	// gatewayKey returns the gateway key the request sends in a field of
	// the protocol's own ("" for none: Authorization: Bearer is read for
	// every protocol), and where a client may send it, for messages.
	gatewayKey(h http.Header) (secret, where string)
	// authorize sets the upstream's key in h as the protocol expects,
	// with any other field it requires.
	authorize(h http.Header, key string)
	// writeError answers c with status and msg in the protocol's shape.
	writeError(c echo.Context, status int, kind errKind, msg string) error
	// limitHeaders writes the rate-limit fields: reqs is the tightest
	// request window, tokens the tightest token window (nil when the tier
	// limits no tokens), at now.
	limitHeaders(h http.Header, reqs policy.WindowState, tokens *policy.TokenState, now time.Time)
	// reservation returns the tokens a call of route r with body cb of
	// size bytes may use: its prompt's bound as Input, its output cap as
	// Output.
	reservation(cb *callBody, r route, size int, maxOutput int64) policy.TokenUsage
	// prepare returns the body to send upstream for a call of route r,
	// and whether the relay keeps from the client the usage the gateway
	// asked for on its behalf.
	prepare(cb *callBody, r route, body []byte) ([]byte, bool, error)
	// report returns what u says the call used, split by the price each
	// token is billed at where u tells it (Report.Usage), else its total
	// (Report.Tokens), and whether u counts any tokens. Each count is
	// from 0 to policy.MaxLimit, and so is their sum.
	report(u *usageJSON) (policy.Report, bool)
	// unmetered returns the path prefixes that reach model calls the
	// gateway cannot meter: never forwarded, whatever Config.Passthrough
	// says.
	unmetered() []string
	// event reads one event of a stream of route r, its name and its data,
	// into st and says what to do with it.
	event(st *streamState, r route, name string, data []byte) eventAction
}

// protocols are the protocols the gateway speaks: a protocol is one
// line here and a file of its own.
var protocols = []struct {
	name string
	protocol
}{
	{ProtocolOpenAI, openAI{}},
	{ProtocolAnthropic, anthropic{}},
}

// protocolNamed returns the protocol of name, nil for none.
func protocolNamed(name string) protocol {
	for _, p := range protocols {
		if p.name == name {
			return p.protocol
		}
	}
	return nil
}

// protocolNames returns the names of protocols, for messages.
func protocolNames() string {
	names := make([]string, len(protocols))
	for i, p := range protocols {
		names[i] = p.name
	}
	return strings.Join(names, " or ")
}

// Defaults of the Config fields left zero.
const (
	DefaultMaxOutput       = 4096
	DefaultDrain           = 60 * time.Second
	DefaultUpstreamTimeout = 10 * time.Minute
	DefaultMaxBody         = 32 << 20
	DefaultBodyMemory      = 256 << 20
	DefaultMaxRetryWait    = 60 * time.Second
)

// defaultBodyReads is how many request bodies a user may send at once
// when its tier sets no max_concurrent.
const defaultBodyReads = 4

// bodyMemoryWait is how long a request waits for room among the bytes of
// request bodies held before it is answered 503.
const bodyMemoryWait = 2 * time.Second

// Upstream is a model API the gateway forwards to.
type Upstream struct {
	// Name is the path segment after /llm/: [a-z0-9][a-z0-9_-]{0,62}.
	Name string
	// Protocol is ProtocolOpenAI or ProtocolAnthropic.
	Protocol string
	// BaseURL is where the path after /llm/{Name} is appended, with no
	// trailing slash, query or credentials.
	BaseURL *url.URL
	// Key is sent upstream as the protocol expects. It is never logged,
	// answered or exported.
	Key string
}

// Config configures the gateway routes, /llm/{upstream}/...
type Config struct {
	Upstreams []Upstream
	// Passthrough lists the path prefixes (such as /files, at a segment
	// boundary) whose paths no metered route takes the gateway forwards,
	// each counted as a request with no tokens; other paths are a 404. A
	// prefix that reaches model calls the gateway cannot meter (each
	// protocol names them: batches, realtime sessions, assistants'
	// runs, ...) is refused by Validate.
	Passthrough []string
	// MaxOutput is the output cap reserved for a call that sets none
	// (0: DefaultMaxOutput).
	MaxOutput int64
	// Drain is how long the gateway keeps reading an upstream after its
	// client went away, to learn the usage (0: DefaultDrain).
	Drain time.Duration
	// UpstreamTimeout bounds a whole exchange with the upstream, its
	// answer included (0: DefaultUpstreamTimeout).
	UpstreamTimeout time.Duration
	// MaxBody is the largest request body accepted; more is a 413
	// (0: DefaultMaxBody).
	MaxBody int64
	// BodyMemory bounds the bytes of request bodies held at once, from
	// their reading to the end of their upstream exchange; a request that
	// finds no room within bodyMemoryWait is a 503 (0: DefaultBodyMemory).
	BodyMemory int64
	// MaxRetryWait is the longest wait a refusal leaves to the client's
	// SDK: one whose Retry-After is longer also carries x-should-retry:
	// false, so that the official SDKs, which would sleep as long as it
	// says, raise their rate-limit error at once (0: DefaultMaxRetryWait).
	MaxRetryWait time.Duration
	// Transport sends the requests upstream; nil is a transport of the
	// gateway's own. Redirects are never followed either way.
	Transport http.RoundTripper

	// Tests set these (export_test.go): ticker paces the keepalives of
	// live calls; onClientGone runs when an exchange's client went away,
	// onSettled when an exchange ended and its call, if any, was settled;
	// settleTimeout replaces defaultSettleTimeout.
	ticker                  func(time.Duration) (<-chan time.Time, func())
	onClientGone, onSettled func()
	settleTimeout           time.Duration
}

// UpstreamNames returns the names of c's upstreams, sorted; nil for a nil
// c (no gateway).
func (c *Config) UpstreamNames() []string {
	if c == nil {
		return nil
	}
	var names []string
	for _, up := range c.Upstreams {
		names = append(names, up.Name)
	}
	slices.Sort(names)
	return names
}

// Keys is what the gateway asks of the service about a request's key,
// user and tier. *policy.Service implements it.
type Keys interface {
	Authenticate(ctx context.Context, secret string) (policy.Key, error)
	TierOf(ctx context.Context, userID, account string) (policy.Tier, error)
	Tier(ctx context.Context, name string) (policy.Tier, error)
	Account(ctx context.Context, id string) (policy.Account, error)
}

// Calls is what the gateway asks of the service to meter a call.
// *policy.Service implements it.
type Calls interface {
	Check(ctx context.Context, req policy.Request, dryRun bool) (policy.Decision, error)
	KeepAlive(ctx context.Context, id string) (policy.Call, error)
	FinishCall(ctx context.Context, id string, r policy.Report) (policy.Call, error)
	CallTimeout() time.Duration
	Now() time.Time
}

// Metrics records what the gateway does. Its methods must be safe for
// concurrent use.
type Metrics interface {
	// ObserveCheck records a check the gateway made, as POST /v1/check's.
	ObserveCheck(d *policy.Decision, err error, took time.Duration)
	// ObserveFinish records the settle of a call; before is the service's
	// time before it.
	ObserveFinish(call *policy.Call, err error, before time.Time)
	// ObserveRequest counts one request with its outcome; tier is empty
	// before the user is known.
	ObserveRequest(upstream, tier, outcome string)
	// ObserveSettle counts the tokens a call was charged; drained reports
	// whether its client had gone away, and usage whether the upstream's
	// count settled it.
	ObserveSettle(upstream, tier string, tokens int64, drained, usage bool)
	// ObserveUpstreamLatency records the time an upstream took to answer.
	ObserveUpstreamLatency(upstream string, took time.Duration)
}

// LogFunc logs a line about the request of c.
type LogFunc func(c echo.Context, level slog.Level, msg string, attrs ...slog.Attr)

// Deps are the parts of the service the gateway uses.
type Deps struct {
	Keys    Keys
	Calls   Calls
	Metrics Metrics
	Log     LogFunc
}

var upstreamNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// ParseUpstream reads an upstream written NAME=PROTOCOL:URL, such as
// openai=openai:https://api.openai.com/v1. Its key is not part of it.
func ParseUpstream(spec string) (Upstream, error) {
	name, rest, ok := strings.Cut(spec, "=")
	if !ok {
		return Upstream{}, fmt.Errorf("upstream %q: want NAME=PROTOCOL:URL, such as openai=openai:https://api.openai.com/v1", spec)
	}
	if !upstreamNameRE.MatchString(name) {
		return Upstream{}, fmt.Errorf("upstream %q: the name must match [a-z0-9][a-z0-9_-]{0,62}", name)
	}
	protocol, raw, _ := strings.Cut(rest, ":")
	if protocolNamed(protocol) == nil {
		return Upstream{}, fmt.Errorf("upstream %s: the protocol must be %s, as in %s=openai:https://api.openai.com/v1", name, protocolNames(), name)
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "":
		return Upstream{}, fmt.Errorf("upstream %s: the URL must be an absolute http or https URL", name)
	case u.User != nil:
		// Not printed: it holds a password.
		return Upstream{}, fmt.Errorf("upstream %s: the URL must not hold credentials; give the key in the environment instead", name)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return Upstream{}, fmt.Errorf("upstream %s: the URL must have no query or fragment", name)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = strings.TrimRight(u.RawPath, "/")
	return Upstream{Name: name, Protocol: protocol, BaseURL: u}, nil
}

// Validate reports whether c is a configuration New takes: each upstream
// has a name, a known protocol and a base URL, no name is given twice,
// and no passthrough prefix reaches a path a protocol of its upstreams
// cannot meter (or holds one: "/" would forward everything).
func (c *Config) Validate() error {
	seen := map[string]bool{}
	for _, up := range c.Upstreams {
		p := protocolNamed(up.Protocol)
		switch {
		case up.BaseURL == nil || !upstreamNameRE.MatchString(up.Name) || p == nil:
			return fmt.Errorf("upstream %q needs a name, a protocol (%s) and a base URL", up.Name, protocolNames())
		case seen[up.Name]:
			return fmt.Errorf("upstream %q is given twice", up.Name)
		}
		seen[up.Name] = true
		for _, prefix := range c.Passthrough {
			if !strings.HasPrefix(prefix, "/") || ambiguous(prefix) != "" || !cleanPath(prefix) {
				return fmt.Errorf("passthrough prefix %q: want a plain path such as /files", prefix)
			}
			var reached []string
			for _, u := range p.unmetered() {
				if underPrefix(u, prefix) || underPrefix(prefix, u) {
					reached = append(reached, u)
				}
			}
			if len(reached) > 0 {
				return fmt.Errorf("passthrough prefix %s would forward %s of upstream %s (%s) unmetered: the gateway cannot meter the model calls they make; name narrower prefixes",
					prefix, strings.Join(reached, ", "), up.Name, up.Protocol)
			}
		}
	}
	return nil
}

// underPrefix reports whether path is prefix or under it, at a segment
// boundary, ignoring letter case as some upstreams do.
func underPrefix(path, prefix string) bool {
	prefix = strings.TrimRight(prefix, "/")
	return len(path) >= len(prefix) && strings.EqualFold(path[:len(prefix)], prefix) &&
		(len(path) == len(prefix) || path[len(prefix)] == '/')
}

// passes reports whether the gateway forwards path, which no metered
// route takes, of an upstream speaking p.
func (g *Gateway) passes(p protocol, path string) bool {
	for _, u := range p.unmetered() {
		if underPrefix(path, u) {
			return false
		}
	}
	for _, prefix := range g.passthrough {
		if strings.HasPrefix(path, strings.TrimRight(prefix, "/")) && underPrefix(path, prefix) {
			return true
		}
	}
	return false
}

// upstream is a configured upstream with its protocol.
type upstream struct {
	Upstream
	proto protocol
}

// Gateway serves the /llm routes of a server. It is safe for concurrent
// use.
type Gateway struct {
	Deps
	upstreams   map[string]*upstream
	transport   http.RoundTripper
	passthrough []string
	maxOutput   int64
	// bodyMem holds a unit per byte of request body held; bodyReads
	// counts each user's bodies being read.
	bodyMem   *semaphore.Weighted
	readsMu   sync.Mutex
	bodyReads map[string]int64
	maxBody   int64
	drain     time.Duration
	timeout   time.Duration
	// maxRetryWait: see Config.MaxRetryWait.
	maxRetryWait time.Duration

	ticker                  func(time.Duration) (<-chan time.Time, func())
	onClientGone, onSettled func()
	// settleTimeout bounds a settle or a keepalive (see
	// defaultSettleTimeout).
	settleTimeout time.Duration
}

// New returns the gateway of cfg. It panics on a configuration Validate
// refuses (main validates what it reads before).
func New(cfg *Config, deps Deps) *Gateway {
	g := &Gateway{
		Deps:          deps,
		upstreams:     make(map[string]*upstream, len(cfg.Upstreams)),
		transport:     cfg.Transport,
		passthrough:   cfg.Passthrough,
		maxOutput:     orDefault(cfg.MaxOutput, DefaultMaxOutput),
		maxBody:       orDefault(cfg.MaxBody, DefaultMaxBody),
		bodyMem:       semaphore.NewWeighted(orDefault(cfg.BodyMemory, DefaultBodyMemory)),
		bodyReads:     map[string]int64{},
		drain:         orDefault(cfg.Drain, DefaultDrain),
		timeout:       orDefault(cfg.UpstreamTimeout, DefaultUpstreamTimeout),
		maxRetryWait:  orDefault(cfg.MaxRetryWait, DefaultMaxRetryWait),
		ticker:        cfg.ticker,
		onClientGone:  cfg.onClientGone,
		onSettled:     cfg.onSettled,
		settleTimeout: orDefault(cfg.settleTimeout, defaultSettleTimeout),
	}
	if g.ticker == nil {
		g.ticker = func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}
	}
	g.maxOutput = min(g.maxOutput, policy.MaxLimit)
	if err := cfg.Validate(); err != nil {
		panic("gateway: " + err.Error())
	}
	for _, up := range cfg.Upstreams {
		g.upstreams[up.Name] = &upstream{Upstream: up, proto: protocolNamed(up.Protocol)}
	}
	if g.transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// Many agents call one upstream at once: keep their connections.
		t.MaxIdleConnsPerHost = 256
		// The gateway asks for gzip itself and reads it (relay.go).
		t.DisableCompression = true
		g.transport = t
	}
	return g
}

func orDefault[T int64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// route is what the gateway does with a path of an upstream.
type route int

const (
	routeOther       route = iota // passthrough, or 404
	routeChat                     // openai POST /chat/completions
	routeCompletions              // openai POST /completions
	routeResponses                // openai POST /responses
	routeEmbeddings               // openai POST /embeddings
	routeMessages                 // anthropic POST /v1/messages
	routeModels                   // the model list: GET only
)

// findRoute returns the route of method and path (after /llm/{name}) of
// an upstream speaking p.
func findRoute(p protocol, method, path string) route {
	metered, models := p.paths()
	if r, ok := metered[path]; ok && method == http.MethodPost {
		return r
	}
	if path == models && method == http.MethodGet {
		return routeModels
	}
	return routeOther
}

// nearRoute reports whether path is not, but would be at an upstream that
// reads paths loosely, the path of a metered route or of the model list:
// the same but for letter case or trailing slashes. Passthrough refuses
// it, so that no variant of a metered path is forwarded unmetered. (The
// paths themselves pass with other methods: GET /chat/completions lists
// stored completions.)
func nearRoute(p protocol, path string) bool {
	metered, models := p.paths()
	lower := strings.ToLower(strings.TrimRight(path, "/"))
	_, isMetered := metered[lower]
	return lower != path && (isMetered || lower == models)
}

// cleanPath reports whether path, escaped as it came, is a plain path:
// it starts with a slash and holds no empty, "." or ".." segment, no
// backslash, and no escaped slash, backslash or dot, which an upstream
// might read as another path than the one the gateway matched.
func cleanPath(path string) bool {
	if !strings.HasPrefix(path, "/") || strings.ContainsRune(path, '\\') {
		return false
	}
	lower := strings.ToLower(path)
	for _, esc := range []string{"%2f", "%5c", "%2e"} {
		if strings.Contains(lower, esc) {
			return false
		}
	}
	for _, seg := range strings.Split(path[1:], "/") {
		if seg == "." || seg == ".." {
			return false
		}
	}
	return !strings.Contains(path, "//")
}

// ambiguous returns why the escaped path or query s could be read
// otherwise by an upstream than by the gateway, or "" when it could not:
// an escape of an unreserved character (%63 for c, which many servers
// decode before routing), an escaped or raw control character or space,
// a second round of escaping (%25), or a ";" parameter. The gateway
// neither decodes nor rewrites s: what it routes and meters on is the
// path the upstream receives, byte for byte.
func ambiguous(s string) string {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c < 0x20 || c == 0x7f || c == ' ':
			return "a control character or space"
		case c == ';':
			return `a ";" parameter`
		case c != '%':
			continue
		}
		if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
			return "an invalid escape"
		}
		d := unhex(s[i+1])<<4 | unhex(s[i+2])
		switch {
		case d < 0x20 || d == 0x7f || d == ' ':
			return "an escaped control character or space"
		case d == '%':
			return "an escape escaped twice"
		case d == ';':
			return `an escaped ";"`
		case 'a' <= d && d <= 'z', 'A' <= d && d <= 'Z', '0' <= d && d <= '9', d == '-', d == '.', d == '_', d == '~':
			return fmt.Sprintf("%%%c%c, an escape of %q, which needs none", s[i+1], s[i+2], rune(d))
		}
		i += 2
	}
	return ""
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// exchange is one request to the gateway, from its arrival to the settle
// of its call. Its methods run on the request's goroutine, but for
// clientGone, which the request's context may run at any time.
type exchange struct {
	g     *Gateway
	up    *upstream
	c     echo.Context
	req   *http.Request
	route route
	path  string // after /llm/{name}, escaped

	user string
	// account is the account X-Guard-Account names, for a service key;
	// empty for none (see policy.Request.Account).
	account string
	tier    string // the tier's name once known, for metrics
	// runID and parentRunID are what X-Guard-Run and X-Guard-Parent-Run
	// name, "" for none (see runs.go).
	runID, parentRunID string
	// limitsSet reports whether the answer's rate-limit fields are set.
	limitsSet bool

	// The call the check opened, if any, and its reservation.
	callID   string
	reserved int64
	settled  bool
	stopKeep func()

	// cancelUp ends the upstream exchange; its cause tells why.
	cancelUp context.CancelCauseFunc

	gone     atomic.Bool // the client went away
	goneOnce sync.Once
	mu       sync.Mutex
	drainT   *time.Timer

	outcome string // the label of policyguard_gateway_requests_total
	// bodyHeld is the bytes of body memory the exchange holds; reading
	// reports whether it holds one of its user's body reads.
	bodyHeld int64
	reading  bool
	// cut reports whether the upstream's answer ended early: the
	// client's is then cut too, so that it does not take a part for the
	// whole.
	cut bool
}

// Causes of an upstream exchange's end, other than its own.
var (
	errDrained         = errors.New("the client went away and the upstream did not end within the drain time")
	errUpstreamTimeout = errors.New("the upstream did not end within the upstream timeout")
)

// defaultSettleTimeout bounds a settle or a keepalive of a call, which
// the client's leaving must not cancel. A settle that fails leaves the
// call to expire with its reservation.
const defaultSettleTimeout = 5 * time.Second

// Handle answers a request of the route /llm/:name/*.
func (g *Gateway) Handle(c echo.Context) error {
	up := g.upstreams[c.Param("name")]
	if up == nil {
		// No protocol to answer in: the Anthropic shape, whose
		// error.message and error.type OpenAI's SDKs read as well.
		return anthropic{}.writeError(c, http.StatusNotFound, errNotFound,
			fmt.Sprintf("no upstream named %s", policy.Quote(c.Param("name"))))
	}
	req := c.Request()
	x := &exchange{g: g, up: up, c: c, req: req, outcome: outcomeForwarded}
	x.path = strings.TrimPrefix(req.URL.EscapedPath(), "/llm/"+up.Name)
	x.route = findRoute(up.proto, req.Method, x.path)
	x.serve()
	if x.bodyHeld > 0 {
		g.bodyMem.Release(x.bodyHeld)
	}
	g.Metrics.ObserveRequest(up.Name, x.tier, x.outcome)
	if x.cut && !x.gone.Load() {
		// As httputil.ReverseProxy does: the server drops the
		// connection instead of ending the answer.
		panic(http.ErrAbortHandler)
	}
	return nil
}

// serve answers the exchange's request.
func (x *exchange) serve() {
	if !cleanPath(x.path) {
		x.fail(http.StatusNotFound, errNotFound, fmt.Sprintf("no route %s %s", x.req.Method, policy.Quote(x.path)))
		return
	}
	if why := ambiguous(x.path); why != "" {
		x.fail(http.StatusBadRequest, errInvalid, fmt.Sprintf("the path %s holds %s: send it plainly", policy.Quote(x.path), why))
		return
	}
	if why := ambiguous(x.req.URL.RawQuery); why != "" {
		x.fail(http.StatusBadRequest, errInvalid, fmt.Sprintf("the query holds %s: send it plainly", why))
		return
	}
	key, ok := x.authenticate()
	if !ok {
		return
	}
	if x.user, ok = x.userOf(key); !ok {
		return
	}
	if x.account, ok = x.accountOf(key); !ok {
		return
	}
	if x.runID, x.parentRunID, ok = x.runOf(); !ok {
		return
	}
	switch {
	case x.route == routeModels:
		x.models()
	case x.route != routeOther:
		x.metered()
	case !x.g.passes(x.up.proto, x.path) || nearRoute(x.up.proto, x.path):
		x.fail(http.StatusNotFound, errNotFound, fmt.Sprintf("no route %s %s: the gateway forwards only its metered routes and the passthrough prefixes", x.req.Method, policy.Quote(x.path)))
	default:
		x.passthrough()
	}
}

// authenticate reads the gateway key of the request and returns it, or
// answers 401 (503 when storage failed) and returns false.
func (x *exchange) authenticate() (policy.Key, bool) {
	secret, where := x.up.proto.gatewayKey(x.req.Header)
	if secret == "" {
		if scheme, token, ok := strings.Cut(x.req.Header.Get(echo.HeaderAuthorization), " "); ok && strings.EqualFold(scheme, "Bearer") {
			secret = strings.Trim(token, " \t")
		}
	}
	if secret == "" {
		x.fail(http.StatusUnauthorized, errAuth, "missing gateway key: send it as "+where)
		return policy.Key{}, false
	}
	key, err := x.g.Keys.Authenticate(x.req.Context(), secret)
	switch code := policy.ErrorCode(err); {
	case err == nil:
		return key, true
	case code == policy.EUNAUTHORIZED:
		x.fail(http.StatusUnauthorized, errAuth, "invalid gateway key: it is unknown or was revoked")
	default:
		x.failErr(err)
	}
	return policy.Key{}, false
}

// headerGuardUser names the user of a service key's request.
const headerGuardUser = "X-Guard-User"

// userOf returns the user the request is for: the key's, or for a service
// key the one X-Guard-User names. Otherwise it answers 400.
func (x *exchange) userOf(key policy.Key) (string, bool) {
	named, has := x.req.Header[headerGuardUser]
	switch {
	case !key.Service && has:
		x.fail(http.StatusBadRequest, errInvalid, "X-Guard-User is for service keys: this key speaks for its own user, so send no X-Guard-User")
	case !key.Service:
		return key.UserID, true
	case !has:
		x.fail(http.StatusBadRequest, errInvalid, "a service key must name the user in X-Guard-User")
	case len(named) != 1:
		x.fail(http.StatusBadRequest, errInvalid, "X-Guard-User must be given once")
	case named[0] == "":
		x.fail(http.StatusBadRequest, errInvalid, "X-Guard-User must not be empty")
	default:
		if err := policy.ValidateUserID(named[0]); err != nil {
			x.fail(http.StatusBadRequest, errInvalid, "X-Guard-User: "+policy.ErrorMessage(err))
			return "", false
		}
		return named[0], true
	}
	return "", false
}

// headerGuardAccount names the account of a service key's request, for a
// user whose record names none.
const headerGuardAccount = "X-Guard-Account"

// accountOf returns the account X-Guard-Account names: only a service key
// may send it. Otherwise it answers 400.
func (x *exchange) accountOf(key policy.Key) (string, bool) {
	named, has := x.req.Header[headerGuardAccount]
	switch {
	case !has:
		return "", true
	case !key.Service:
		x.fail(http.StatusBadRequest, errInvalid, "X-Guard-Account is for service keys: this key speaks for its own user, whose record names the account")
	case len(named) != 1:
		x.fail(http.StatusBadRequest, errInvalid, "X-Guard-Account must be given once")
	case named[0] == "":
		x.fail(http.StatusBadRequest, errInvalid, "X-Guard-Account must not be empty")
	default:
		return named[0], true
	}
	return "", false
}

// userTier returns the tier the user's checks are decided under: their
// record's, else their account's, else the default tier, never one the
// client names. It records nothing; the check that follows confirms it
// (see metered).
func (x *exchange) userTier() (policy.Tier, error) {
	t, err := x.g.Keys.TierOf(x.req.Context(), x.user, x.account)
	if policy.ErrorCode(err) != policy.EINVALID {
		return t, err
	}
	if x.account != "" {
		// An account X-Guard-Account names that does not exist is the
		// client's doing, as context.account_id's is a check's.
		switch _, aerr := x.g.Keys.Account(x.req.Context(), x.account); policy.ErrorCode(aerr) {
		case policy.ENOTFOUND, policy.EINVALID:
			return policy.Tier{}, policy.Errorf(policy.EINVALID, "%s: %s", headerGuardAccount, policy.ErrorMessage(err))
		}
	}
	// The default tier went missing, or the record's tier was deleted a
	// moment ago: not the client's doing.
	return policy.Tier{}, policy.Errorf(policy.EUNAVAILABLE, "the tier of user %s is not found; try again", policy.Quote(x.user))
}

// windowHeaders sets the rate-limit fields of an answer decided before a
// check, from a dry run: what the user has left, with nothing consumed.
func (x *exchange) windowHeaders() {
	x.limitsSet = true
	d, err := x.g.Calls.Check(x.req.Context(), policy.Request{UserID: x.user, Account: x.account, NoModel: true}, true)
	if err != nil || d.Windows == nil {
		return
	}
	if d.Allowed() {
		// A dry run admitted counts itself in each window, as the
		// check it stands for would; this request consumed nothing.
		ws := *d.Windows
		for w := range ws {
			s := &ws[w]
			s.Count--
			s.Remaining = max(s.Limit-s.Count, 0)
			if s.Count == 0 {
				s.Reset = 0 // the reset was the dry run's own
			}
		}
		d.Windows = &ws
	}
	x.limitHeaders(&d)
}

// limitHeaders writes the rate-limit fields of d in the protocol's words:
// for requests, the tightest window and for tokens, when the tier limits
// them, the tightest token window (policy.TightestWindow, TightestTokens),
// each reset at least the refusal's wait when its kind of limit refused.
func (x *exchange) limitHeaders(d *policy.Decision) {
	if d.Windows == nil {
		return
	}
	ws := d.TighterWindows()
	reqs := ws[policy.TightestWindow(ws)]
	reqs.Reset = max(reqs.Reset, d.MinReset(policy.KindRequests))
	var tokens *policy.TokenState
	if t := policy.TightestTokens(ws); t != nil {
		tt := *t
		tt.Reset = max(tt.Reset, d.MinReset(policy.KindTokens))
		tokens = &tt
	}
	x.up.proto.limitHeaders(x.c.Response().Header(), reqs, tokens, x.g.Calls.Now())
}

// check decides the call as POST /v1/check does: req says its model and
// what it reserves (the gateway sets its user, account and upstream). It
// opens a call whatever the tier limits (policy.Request.OpenCall), so that
// the tokens the upstream reports are recorded, and usage shows them, on a
// tier that limits none as well. It answers a refusal or a failure itself
// and then returns false.
func (x *exchange) check(req policy.Request) (policy.Decision, bool) {
	start := time.Now()
	req.UserID, req.Account, req.Upstream, req.OpenCall = x.user, x.account, x.up.Name, true
	req.RunID, req.ParentRunID = x.runID, x.parentRunID
	d, err := x.g.Calls.Check(x.req.Context(), req, false)
	x.g.Metrics.ObserveCheck(&d, err, time.Since(start))
	if u, ok := policy.IsUnpriced(err); ok && u.Model != "" {
		x.unpriced(u)
		return d, false
	}
	if err != nil {
		x.failErr(err)
		return d, false
	}
	x.tier, x.limitsSet = d.Tier, true
	x.limitHeaders(&d)
	switch d.Outcome {
	case policy.Admitted:
		x.callID, x.reserved = d.CallID, req.Tokens
		return d, true
	case policy.RateLimited:
		x.rateLimited(&d)
	case policy.Denied:
		if d.RunRefused != policy.CauseNone {
			x.runRefused(&d)
			break
		}
		fallthrough
	default:
		x.fail(http.StatusForbidden, errPermission, d.Reason)
		x.outcome = outcomeDenied
	}
	return d, false
}

// keepAlive keeps the exchange's call alive until stopKeep is called, a
// third of the call timeout apart, so a stream longer than the call
// timeout keeps its slot. A gateway that dies stops keeping it alive, and
// the call then expires as any other.
func (x *exchange) keepAlive() {
	if x.callID == "" {
		x.stopKeep = func() {}
		return
	}
	ticks, stop := x.g.ticker(max(x.g.Calls.CallTimeout()/3, time.Millisecond))
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			case <-ticks:
				ctx, cancel := context.WithTimeout(context.Background(), x.g.settleTimeout)
				_, err := x.g.Calls.KeepAlive(ctx, x.callID)
				cancel()
				if err != nil {
					x.g.Log(x.c, slog.LevelWarn, "gateway keepalive failed", slog.String("call_id", x.callID), slog.String("err", policy.ErrorMessage(err)))
				}
			}
		}
	}()
	x.stopKeep = func() {
		stop()
		close(done)
		<-finished
	}
}

// settle finishes the exchange's call, once, with what r reports (nil:
// its reservation, at its reserved cost), and counts its tokens. The
// upstream exchange must have ended: the slot is then free for the next
// call.
func (x *exchange) settle(r *policy.Report) {
	if x.settled {
		return
	}
	x.settled = true
	if x.stopKeep != nil {
		x.stopKeep()
	}
	charged := x.reserved
	var report policy.Report // the zero Report keeps the reservation
	if r != nil {
		charged, report = reportTotal(*r), *r
	}
	x.g.Metrics.ObserveSettle(x.up.Name, x.tier, charged, x.gone.Load(), r != nil)
	if x.callID != "" {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(x.req.Context()), x.g.settleTimeout)
		before := x.g.Calls.Now()
		call, err := x.g.Calls.FinishCall(ctx, x.callID, report)
		cancel()
		x.g.Metrics.ObserveFinish(&call, err, before)
		if err != nil {
			// The call then expires with its reservation.
			x.g.Log(x.c, slog.LevelError, "gateway settle failed", slog.String("call_id", x.callID), slog.String("err", policy.ErrorMessage(err)))
		}
	}
	if x.g.onSettled != nil {
		x.g.onSettled()
	}
}

// clientGone notes that the client went away, once: the upstream then
// has the drain time left to end and tell the usage.
func (x *exchange) clientGone() {
	x.goneOnce.Do(func() {
		x.gone.Store(true)
		x.mu.Lock()
		if x.cancelUp != nil {
			cancel := x.cancelUp
			x.drainT = time.AfterFunc(x.g.drain, func() { cancel(errDrained) })
		}
		x.mu.Unlock()
		if x.g.onClientGone != nil {
			x.g.onClientGone()
		}
	})
}

// metered handles a call on a metered route.
func (x *exchange) metered() {
	tier, err := x.userTier()
	if err != nil {
		x.failErr(err)
		return
	}
	x.tier = tier.Name
	if !x.runRequired(&tier) {
		return
	}
	body, ok := x.readBody(&tier)
	if !ok {
		return
	}
	defer x.bodyRead()
	cb, err := readCallBody(body)
	if err != nil {
		x.failErr(err)
		return
	}
	if !tier.AllowsModel(cb.model) {
		x.modelRefused(cb.model, tier.Name)
		return
	}
	// Under a spend limit the prompt's bound is reserved at the model's
	// input price, the output cap at its output price.
	reserve := x.up.proto.reservation(&cb, x.route, len(body), x.g.maxOutput)
	d, ok := x.check(policy.Request{Model: cb.model, Tokens: reserve.Total(), Reserve: &reserve})
	if !ok {
		return
	}
	defer x.settle(nil) // on every way out, the slot is freed
	if d.Tier != tier.Name {
		// The user's record changed in between: the tier the call was
		// decided under must include the model as well.
		t, err := x.g.Keys.Tier(x.req.Context(), d.Tier)
		if err != nil || !t.AllowsModel(cb.model) {
			x.settle(zeroReport())
			if err != nil {
				x.failErr(err)
			} else {
				x.modelRefused(cb.model, d.Tier)
			}
			return
		}
	}
	body, hide, err := x.up.proto.prepare(&cb, x.route, body)
	if err != nil {
		x.settle(zeroReport())
		x.failErr(err)
		return
	}
	x.bodyRead()
	x.keepAlive()
	x.forward(bytes.NewReader(body), int64(len(body)), relayMetered, hide, nil)
}

// models relays the upstream's model list, filtered to the models the
// user's tier includes. It is not a call: it is checked for nothing.
func (x *exchange) models() {
	tier, err := x.userTier()
	if err != nil {
		x.failErr(err)
		return
	}
	x.tier = tier.Name
	x.windowHeaders()
	x.forward(http.NoBody, 0, relayModels, false, &tier)
}

// passthrough forwards a request no metered route takes, counted as a
// request with no tokens.
func (x *exchange) passthrough() {
	// Read whole before the check, so that one over the limit is
	// refused before anything is counted or sent.
	tier, err := x.userTier()
	if err != nil {
		x.failErr(err)
		return
	}
	if !x.runRequired(&tier) {
		return
	}
	body, ok := x.readBody(&tier)
	if !ok {
		return
	}
	defer x.bodyRead()
	if _, ok := x.check(policy.Request{NoModel: true}); !ok { // it calls no model: it costs nothing
		return
	}
	x.bodyRead()
	defer x.settle(nil) // its reservation: 0
	x.keepAlive()
	var rd io.Reader = http.NoBody
	if len(body) > 0 {
		rd = bytes.NewReader(body)
	}
	x.forward(rd, int64(len(body)), relayRaw, false, nil)
}

// readBody reads the request's body, at most MaxBody bytes (beyond
// that it answers 413) and returns false, holding body memory for it; the
// exchange then holds one of the user's body reads until bodyRead. A
// user's body reads at once are at most its tier's max_concurrent (or
// defaultBodyReads): more is a 429. Body memory that does not come within
// bodyMemoryWait is a 503. The server's read deadline, meant for checks,
// stands until the body is read and checked: only the upstream exchange
// (forward) gets the long one.
func (x *exchange) readBody(t *policy.Tier) ([]byte, bool) {
	if x.req.ContentLength > x.g.maxBody {
		x.tooLarge()
		return nil, false
	}
	reads := int64(defaultBodyReads)
	if m := t.Limits[policy.MaxConcurrent]; m != nil && *m > 0 {
		reads = *m
	}
	x.g.readsMu.Lock()
	if x.g.bodyReads[x.user] >= reads {
		x.g.readsMu.Unlock()
		x.waitFields(1, true)
		x.fail(http.StatusTooManyRequests, errRateLimit, fmt.Sprintf("user %s is sending %d request bodies already, the most its tier's max_concurrent allows", policy.Quote(x.user), reads))
		return nil, false
	}
	x.g.bodyReads[x.user]++
	x.g.readsMu.Unlock()
	x.reading = true
	body, status := x.readHeld()
	switch status {
	case http.StatusOK:
		return body, true
	case http.StatusServiceUnavailable:
		x.waitFields(1, true)
		x.fail(status, errUnavailable, "the gateway holds as many request bodies as it may; try again")
	case http.StatusRequestEntityTooLarge:
		x.tooLarge()
	default:
		x.fail(http.StatusBadRequest, errInvalid, "the request body could not be read")
	}
	x.bodyRead()
	return nil, false
}

// readHeld reads the body into memory it holds (x.bodyHeld), the declared
// length at once, else a MiB at a time, and returns it with 200, or 400,
// 413 or 503.
func (x *exchange) readHeld() ([]byte, int) {
	hold := func(n int64) bool {
		ctx, cancel := context.WithTimeout(x.req.Context(), bodyMemoryWait)
		defer cancel()
		if x.g.bodyMem.Acquire(ctx, n) != nil {
			return false
		}
		x.bodyHeld += n
		return true
	}
	if n := x.req.ContentLength; n >= 0 {
		if !hold(n) {
			return nil, http.StatusServiceUnavailable
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(x.req.Body, body); err != nil {
			return nil, http.StatusBadRequest
		}
		return body, http.StatusOK
	}
	var buf bytes.Buffer
	for {
		const step = 1 << 20
		if !hold(step) {
			return nil, http.StatusServiceUnavailable
		}
		buf.Grow(step)
		n, err := io.CopyN(&buf, x.req.Body, step)
		switch {
		case int64(buf.Len()) > x.g.maxBody:
			return nil, http.StatusRequestEntityTooLarge
		case err == io.EOF:
			// Give back what the last step did not take.
			x.g.bodyMem.Release(step - n)
			x.bodyHeld -= step - n
			return buf.Bytes(), http.StatusOK
		case err != nil:
			return nil, http.StatusBadRequest
		}
	}
}

// bodyRead ends the exchange's body read, once: the user may send
// another.
func (x *exchange) bodyRead() {
	if !x.reading {
		return
	}
	x.reading = false
	x.g.readsMu.Lock()
	if x.g.bodyReads[x.user]--; x.g.bodyReads[x.user] <= 0 {
		delete(x.g.bodyReads, x.user)
	}
	x.g.readsMu.Unlock()
}

func (x *exchange) tooLarge() {
	x.fail(http.StatusRequestEntityTooLarge, errTooLarge, fmt.Sprintf("request body is larger than %d bytes", x.g.maxBody))
}
