package api

// The gateway: /llm/{upstream}/... is an OpenAI- or Anthropic-compatible
// model API that forwards to an upstream, so that an agent changes its
// SDK's base URL and nothing else, and can neither skip its limits nor
// misreport its tokens.
//
// A request passes through these steps, each refusing in the upstream's
// own error shape (gateway_answer.go):
//
//  1. The upstream is found by name, and the path after it must be
//     clean: no dot segments, no empty segments, no escaped slash or dot.
//  2. The gateway key is read from Authorization: Bearer (any route) or
//     x-api-key (anthropic routes) and Service.Authenticate reads it from
//     the store, so a revoked key is refused at once on every replica. A
//     service key names its user in X-Guard-User; a user key must not.
//  3. The route decides what is metered. A metered call's body is read
//     (at most MaxBody), its model must be one the user's tier allows
//     (the tier of the user's record, else the default tier; never one
//     the client names), and Service.Check decides it, reserving an
//     upper bound of its tokens (gateway_body.go). A refusal never
//     reaches the upstream.
//  4. The call is forwarded with the upstream's key instead of the
//     gateway key, and its answer relayed as it arrives (gateway_relay.go);
//     the tokens the upstream reports settle the call (FinishCall), which
//     frees its concurrency slot. While the exchange is live the call is
//     kept alive, so a stream longer than the call timeout keeps its slot.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// Protocols an upstream speaks.
const (
	ProtocolOpenAI    = "openai"
	ProtocolAnthropic = "anthropic"
)

// Defaults of the GatewayConfig fields left zero.
const (
	DefaultGatewayMaxOutput = 4096
	DefaultGatewayDrain     = 60 * time.Second
	DefaultUpstreamTimeout  = 10 * time.Minute
	DefaultGatewayMaxBody   = 32 << 20
)

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

// GatewayConfig configures the gateway routes, /llm/{upstream}/...
type GatewayConfig struct {
	Upstreams []Upstream
	// Passthrough forwards the paths no metered route takes, each counted
	// as a request with no tokens; without it they are a 404.
	Passthrough bool
	// MaxOutput is the output cap reserved for a call that sets none
	// (0: DefaultGatewayMaxOutput).
	MaxOutput int64
	// Drain is how long the gateway keeps reading an upstream after its
	// client went away, to learn the usage (0: DefaultGatewayDrain).
	Drain time.Duration
	// UpstreamTimeout bounds a whole exchange with the upstream, its
	// answer included (0: DefaultUpstreamTimeout).
	UpstreamTimeout time.Duration
	// MaxBody is the largest request body accepted; more is a 413
	// (0: DefaultGatewayMaxBody).
	MaxBody int64
	// Transport sends the requests upstream; nil is a transport of the
	// gateway's own. Redirects are never followed either way.
	Transport http.RoundTripper
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
	if protocol != ProtocolOpenAI && protocol != ProtocolAnthropic {
		return Upstream{}, fmt.Errorf("upstream %s: the protocol must be openai or anthropic, as in %s=openai:https://api.openai.com/v1", name, name)
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

// gateway is the configured gateway of a Server.
type gateway struct {
	upstreams   map[string]*Upstream
	transport   http.RoundTripper
	passthrough bool
	maxOutput   int64
	maxBody     int64
	drain       time.Duration
	timeout     time.Duration

	// ticker paces the keepalives of live calls; tests give their own
	// (export_test.go), as they do the hooks below, which may be nil.
	ticker func(time.Duration) (<-chan time.Time, func())
	// onClientGone runs when an exchange's client went away; onSettled
	// when an exchange ended and its call, if any, was settled.
	onClientGone, onSettled func()
}

// newGateway returns the gateway of cfg. It panics on a configuration no
// caller should make: a nil base URL, an unknown protocol or a name given
// twice (main checks what it reads before).
func newGateway(cfg *GatewayConfig) *gateway {
	g := &gateway{
		upstreams:   make(map[string]*Upstream, len(cfg.Upstreams)),
		transport:   cfg.Transport,
		passthrough: cfg.Passthrough,
		maxOutput:   orDefault(cfg.MaxOutput, DefaultGatewayMaxOutput),
		maxBody:     orDefault(cfg.MaxBody, DefaultGatewayMaxBody),
		drain:       orDefault(cfg.Drain, DefaultGatewayDrain),
		timeout:     orDefault(cfg.UpstreamTimeout, DefaultUpstreamTimeout),
		ticker: func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		},
	}
	g.maxOutput = min(g.maxOutput, policy.MaxLimit)
	for i := range cfg.Upstreams {
		up := cfg.Upstreams[i]
		if up.BaseURL == nil || !upstreamNameRE.MatchString(up.Name) || (up.Protocol != ProtocolOpenAI && up.Protocol != ProtocolAnthropic) {
			panic(fmt.Sprintf("api: upstream %q needs a name, a protocol (openai or anthropic) and a base URL", up.Name))
		}
		if g.upstreams[up.Name] != nil {
			panic(fmt.Sprintf("api: upstream %q is given twice", up.Name))
		}
		g.upstreams[up.Name] = &up
	}
	if g.transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// Many agents call one upstream at once: keep their connections.
		t.MaxIdleConnsPerHost = 256
		// The gateway asks for gzip itself and reads it (gateway_relay.go).
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

// isGatewayPath reports whether path is under /llm/, whose body limit the
// gateway applies itself.
func (s *Server) isGatewayPath(path string) bool {
	return s.gateway != nil && strings.HasPrefix(path, "/llm/")
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
	routeModels                   // openai GET /models, anthropic GET /v1/models
)

// meteredPaths are the metered routes' paths by protocol: POST only.
var meteredPaths = map[string]map[string]route{
	ProtocolOpenAI: {
		"/chat/completions": routeChat,
		"/completions":      routeCompletions,
		"/responses":        routeResponses,
		"/embeddings":       routeEmbeddings,
	},
	ProtocolAnthropic: {"/v1/messages": routeMessages},
}

// modelsPaths are the paths of the model lists, by protocol: GET only.
var modelsPaths = map[string]string{ProtocolOpenAI: "/models", ProtocolAnthropic: "/v1/models"}

// findRoute returns the route of method and path (after /llm/{name}) of
// an upstream speaking protocol.
func findRoute(protocol, method, path string) route {
	if r, ok := meteredPaths[protocol][path]; ok && method == http.MethodPost {
		return r
	}
	if path == modelsPaths[protocol] && method == http.MethodGet {
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
func nearRoute(protocol, path string) bool {
	p := strings.ToLower(strings.TrimRight(path, "/"))
	_, metered := meteredPaths[protocol][p]
	return p != path && (metered || p == modelsPaths[protocol])
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

// exchange is one request to the gateway, from its arrival to the settle
// of its call. Its methods run on the request's goroutine, but for
// clientGone, which the request's context may run at any time.
type exchange struct {
	s     *Server
	g     *gateway
	up    *Upstream
	c     echo.Context
	req   *http.Request
	route route
	path  string // after /llm/{name}, escaped

	user string
	// account is the account X-Guard-Account names, for a service key;
	// empty for none (see policy.Request.Account).
	account string
	tier    string // the tier's name once known, for metrics
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

func (s *Server) handleGateway(c echo.Context) error {
	up := s.gateway.upstreams[c.Param("name")]
	if up == nil {
		// No protocol to answer in: the Anthropic shape, whose
		// error.message and error.type OpenAI's SDKs read as well.
		return writeGatewayError(c, ProtocolAnthropic, http.StatusNotFound, errNotFound,
			fmt.Sprintf("no upstream named %s", policy.Quote(c.Param("name"))))
	}
	req := c.Request()
	x := &exchange{s: s, g: s.gateway, up: up, c: c, req: req, outcome: outcomeForwarded}
	x.path = strings.TrimPrefix(req.URL.EscapedPath(), "/llm/"+up.Name)
	x.route = findRoute(up.Protocol, req.Method, x.path)
	x.serve()
	s.metrics.observeGatewayRequest(up.Name, x.tier, x.outcome)
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
	// The request is a key holder's: it may take as long as the upstream
	// does, which the server's own deadlines (made for checks) do not
	// allow.
	rc := http.NewResponseController(x.c.Response())
	deadline := time.Now().Add(x.g.timeout + x.g.drain + time.Minute)
	_ = rc.SetReadDeadline(deadline)
	_ = rc.SetWriteDeadline(deadline)
	switch {
	case x.route == routeModels:
		x.models()
	case x.route != routeOther:
		x.metered()
	case !x.g.passthrough || nearRoute(x.up.Protocol, x.path):
		x.fail(http.StatusNotFound, errNotFound, fmt.Sprintf("no route %s %s: the gateway forwards only its metered routes", x.req.Method, policy.Quote(x.path)))
	default:
		x.passthrough()
	}
}

// authenticate reads the gateway key of the request and returns it, or
// answers 401 (503 when storage failed) and returns false.
func (x *exchange) authenticate() (policy.Key, bool) {
	secret := ""
	if x.up.Protocol == ProtocolAnthropic {
		secret = strings.Trim(x.req.Header.Get("X-Api-Key"), " \t")
	}
	if secret == "" {
		secret = bearerToken(x.req)
	}
	if secret == "" {
		where := "Authorization: Bearer <key>"
		if x.up.Protocol == ProtocolAnthropic {
			where += " or x-api-key: <key>"
		}
		x.fail(http.StatusUnauthorized, errAuth, "missing gateway key: send it as "+where)
		return policy.Key{}, false
	}
	key, err := x.s.svc.Authenticate(x.req.Context(), secret)
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
	t, err := x.s.svc.TierOf(x.req.Context(), x.user, x.account)
	if policy.ErrorCode(err) != policy.EINVALID {
		return t, err
	}
	if x.account != "" {
		// An account X-Guard-Account names that does not exist is the
		// client's doing, as context.account_id's is a check's.
		switch _, aerr := x.s.svc.Account(x.req.Context(), x.account); policy.ErrorCode(aerr) {
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
	d, err := x.s.svc.Check(x.req.Context(), policy.Request{UserID: x.user, Account: x.account}, true)
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
	setGatewayLimitHeaders(x.c.Response().Header(), x.up.Protocol, &d, x.s.svc.Now())
}

// check decides the call as POST /v1/check does, reserving tokens. It
// answers a refusal or a failure itself and then returns false.
func (x *exchange) check(tokens int64) (policy.Decision, bool) {
	start := time.Now()
	d, err := x.s.svc.Check(x.req.Context(), policy.Request{UserID: x.user, Account: x.account, Tokens: tokens}, false)
	x.s.metrics.observeCheck(&d, err, false, time.Since(start))
	if err != nil {
		x.failErr(err)
		return d, false
	}
	x.tier, x.limitsSet = d.Tier, true
	setGatewayLimitHeaders(x.c.Response().Header(), x.up.Protocol, &d, x.s.svc.Now())
	switch d.Outcome {
	case policy.Admitted:
		x.callID, x.reserved = d.CallID, tokens
		return d, true
	case policy.RateLimited:
		x.rateLimited(&d)
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
	ticks, stop := x.g.ticker(max(x.s.svc.CallTimeout()/3, time.Millisecond))
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			case <-ticks:
				ctx, cancel := context.WithTimeout(context.Background(), finishTimeout)
				_, err := x.s.svc.KeepAlive(ctx, x.callID)
				cancel()
				if err != nil {
					x.s.logRequest(x.c, slog.LevelWarn, "gateway keepalive failed", slog.String("call_id", x.callID), slog.String("err", policy.ErrorMessage(err)))
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

// settle finishes the exchange's call, once, with tokens (nil: its
// reservation), and counts them. The upstream exchange must have ended:
// the slot is then free for the next call.
func (x *exchange) settle(tokens *int64) {
	if x.settled {
		return
	}
	x.settled = true
	if x.stopKeep != nil {
		x.stopKeep()
	}
	charged := x.reserved
	if tokens != nil {
		charged = *tokens
	}
	x.s.metrics.observeGatewayTokens(x.up.Name, x.tier, charged)
	if x.gone.Load() {
		x.s.metrics.observeGatewayDrain(x.up.Name, tokens != nil)
	}
	if x.callID != "" {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(x.req.Context()), finishTimeout)
		before := x.s.svc.Now()
		call, err := x.s.svc.FinishCall(ctx, x.callID, tokens)
		cancel()
		x.s.metrics.observeFinish(&call, err, before)
		if err != nil {
			// The call then expires with its reservation.
			x.s.logRequest(x.c, slog.LevelError, "gateway settle failed", slog.String("call_id", x.callID), slog.String("err", policy.ErrorMessage(err)))
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
