package api

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"mime"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// The middleware that guards the API's routes, in the order a request meets
// it: every route gets an id and an access-log line (NewServer), a check
// must come from no other site's page, carry the API token if there is one
// and declare JSON (routes), and the admin routes need the admin token.

// serve is the middleware of every route, in one layer: it gives the
// request an id, limits its body, answers a panic as an internal error and
// writes the access-log line. Echo builds every middleware layer's closure
// again for each request, so one layer costs a quarter of four.
//
// The id is answered in X-Request-Id and logged on each of the request's
// lines. An incoming X-Request-Id, such as a proxy's, is kept when it is at
// most 128 visible ASCII characters; anything else is replaced rather than
// copied into logs and answers. (Echo's RequestID middleware copies
// whatever it is sent.) The access log never holds a body, a query string
// or a header, so prompts and tokens stay out of logs.
func (s *Server) serve(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		req, res := c.Request(), c.Response()
		id := req.Header.Get(echo.HeaderXRequestID)
		if !validRequestID(id) {
			id = newRequestID()
		}
		res.Header()[echo.HeaderXRequestID] = []string{id}
		if err := s.guard(c, next); err != nil {
			c.Error(err)
		}
		ctx := req.Context()
		if h := s.log.Handler(); h.Enabled(ctx, slog.LevelInfo) {
			// The record is made here rather than by LogAttrs, which
			// walks the stack for the caller's program counter on every
			// line (runtime.Callers: a quarter of the access log's CPU);
			// the counter is the same every time, so it is taken once.
			end := time.Now() // the line's time, and the end of took
			r := slog.NewRecord(end, slog.LevelInfo, "request", accessLogPC())
			r.AddAttrs(
				slog.String("id", id),
				slog.String("method", req.Method),
				slog.String("path", policy.RedactKeySecrets(req.URL.Path)),
				slog.Int("status", res.Status),
				slog.Int64("bytes", res.Size),
				slog.Duration("took", end.Sub(start)),
				slog.String("remote", c.RealIP()),
			)
			_ = h.Handle(ctx, r)
		}
		return nil
	}
}

// accessLogPCs holds the program counter of the access log's call to
// accessLogPC, the source a handler with AddSource names for its lines.
var accessLogPCs atomic.Uintptr

// accessLogPC returns the program counter of its caller, taken on the
// first call only.
func accessLogPC() uintptr {
	if pc := accessLogPCs.Load(); pc != 0 {
		return pc
	}
	var pcs [1]uintptr
	runtime.Callers(2, pcs[:]) // skip runtime.Callers and accessLogPC
	accessLogPCs.Store(pcs[0])
	return pcs[0]
}

// guard runs next with the request body limited to MaxBodyBytes (413
// beyond; the gateway's routes apply gateway.Config.MaxBody), and turns a panic into the error answered, after logging it with
// its stack.
func (s *Server) guard(c echo.Context, next echo.HandlerFunc) (err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if r == http.ErrAbortHandler {
			panic(r)
		}
		e, ok := r.(error)
		if !ok {
			e = fmt.Errorf("%v", r)
		}
		stack := make([]byte, 4<<10)
		err = s.logPanic(c, e, stack[:runtime.Stack(stack, false)])
	}()
	if err := s.authorize(c); err != nil {
		return err
	}
	req := c.Request()
	if s.isGatewayPath(req.URL.Path) {
		return next(c) // the gateway's own limit, answered in its shape
	}
	if req.ContentLength > MaxBodyBytes {
		return echo.ErrStatusRequestEntityTooLarge
	}
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = &limitedBody{ReadCloser: req.Body, left: MaxBodyBytes}
	}
	return next(c)
}

// limitedBody is a request body that fails with 413 once more than left
// bytes were read from it.
type limitedBody struct {
	io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, echo.ErrStatusRequestEntityTooLarge
	}
	n, err := b.ReadCloser.Read(p)
	if b.left -= int64(n); b.left < 0 {
		return n, echo.ErrStatusRequestEntityTooLarge
	}
	return n, err
}

func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// newRequestID returns 32 random hex digits. The ids need to be unique, not
// secret, so the fast per-thread generator of math/rand/v2 serves.
func newRequestID() string {
	var b [32]byte
	const digits = "0123456789abcdef"
	for half, v := range [2]uint64{rand.Uint64(), rand.Uint64()} {
		for i := range 16 {
			b[half*16+i] = digits[v>>(60-4*i)&0xf]
		}
	}
	return string(b[:])
}

// crossSite judges requests by Sec-Fetch-Site, or else Origin against Host.
var crossSite = http.NewCrossOriginProtection()

// crossSiteError refuses with 403 a request a browser sends from a page of
// another site, nil for any other. Browsers send some requests to other
// sites without asking first (a form, or a fetch of a body with no type),
// so without this any page a user opened could spend quota on a service
// only their machine can reach. Clients that are not browsers send neither
// header and pass.
func crossSiteError(req *http.Request) error {
	if err := crossSite.Check(req); err != nil {
		return echo.NewHTTPError(http.StatusForbidden, "cross-site requests from browsers are refused")
	}
	return nil
}

// requireJSON refuses with 415 a request whose body is declared as anything
// but JSON, such as curl's default form type: the body would not be read
// as what its sender meant. A body with no Content-Type at all is read as
// JSON, for the simplest clients.
func requireJSON(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := contentTypeError(c.Request()); err != nil {
			return err
		}
		return next(c)
	}
}

// contentTypeError is the error requireJSON answers req with, nil when it
// passes.
func contentTypeError(req *http.Request) error {
	ct := req.Header.Get(echo.HeaderContentType)
	if ct == "" || ct == echo.MIMEApplicationJSON {
		return nil // the usual cases, without parsing
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != echo.MIMEApplicationJSON {
		return echo.NewHTTPError(http.StatusUnsupportedMediaType, "Content-Type must be application/json")
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return echo.NewHTTPError(http.StatusUnsupportedMediaType, "Content-Type must be application/json with no charset or charset=utf-8")
	}
	return nil
}

// access is who may use one route of the server.
type access struct {
	policy.Access
	// page is set for a route of the admin page (Config.Pages), which
	// judges its sessions and roles itself, from the same table, and
	// refuses the routes it does not list as this server does.
	page bool
}

// routeAccess returns who may use each of routes, by path then method:
// two lookups of strings Echo already holds, so that judging a check
// costs no allocation. own names the server's own routes ("GET /v1/tiers"),
// the rest being pages'. Echo's routes of its own, whose methods name no
// HTTP method, are left out.
func routeAccess(routes []*echo.Route, own map[string]bool) map[string]map[string]access {
	m := make(map[string]map[string]access)
	for _, r := range routes {
		if r.Method == echo.RouteNotFound {
			continue
		}
		if m[r.Path] == nil {
			m[r.Path] = make(map[string]access)
		}
		m[r.Path][r.Method] = access{Access: policy.RouteAccess(r.Method, r.Path), page: !own[r.Method+" "+r.Path]}
	}
	return m
}

// authorize judges c's request by who may use its route (policy.Routes),
// before the route's own middleware: a route the table does not list is
// refused to everyone with 403; an admin route needs "Authorization:
// Bearer <admin token>" of an admin of at least its role (401 without
// one, 403 below the role), and its changes are then recorded as that
// admin's (policy.WithActor), made through the API. Wrong tokens count
// against the client (the address Echo's IP extractor gives) in the same
// policy.AdminGate as the admin page's sign-in, so the API is no way
// around its throttle. Routes Echo does not know pass, for Echo's 404 or
// 405; the page's routes pass, for the page to judge their sessions.
func (s *Server) authorize(c echo.Context) error {
	a, known := s.access[c.Path()][c.Request().Method]
	if !known || a.page {
		return nil
	}
	need, admin := a.Role()
	switch {
	case a.Access == policy.AccessOpen || a.Access == policy.AccessOwn:
		return nil
	case !admin:
		return policy.Errorf(policy.EFORBIDDEN, "this route declares no role that may use it, so it is refused to everyone")
	case a.Access == policy.AccessAdminOrKey:
		if byKey, err := s.authorizeKey(c); byKey || err != nil {
			return err
		}
	}
	req := c.Request()
	who, secs, err := s.admin.SignIn(req.Context(), s.svc, c.RealIP(), bearerToken(req), s.svc.Now())
	if secs > 0 {
		c.Response().Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		return echo.NewHTTPError(http.StatusTooManyRequests,
			fmt.Sprintf("too many wrong admin tokens from your address: try again in %d seconds", secs))
	}
	if policy.ErrorCode(err) == policy.EUNAUTHORIZED {
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="policyguard"`)
		return err
	} else if err != nil {
		return err
	}
	if who.Role < need {
		return policy.ForbiddenError(who.Role, need)
	}
	ctx := policy.WithChangeSource(policy.WithActor(req.Context(), who.Name), policy.SourceAPI)
	c.SetRequest(req.WithContext(ctx))
	return nil
}

// apiTokenError refuses a request without "Authorization: Bearer <api
// token>" when the server has an API token, nil otherwise: without one
// every check is let through, as on a loopback address.
func (s *Server) apiTokenError(c echo.Context) error {
	if s.apiToken == nil || s.apiToken.Matches(bearerToken(c.Request())) {
		return nil
	}
	c.Response().Header().Set("WWW-Authenticate", `Bearer realm="policyguard"`)
	return policy.Errorf(policy.EUNAUTHORIZED, "missing or wrong API token")
}

// bearerToken returns the token of r's "Authorization: Bearer <token>"
// header, or "" when it has none.
func bearerToken(r *http.Request) string {
	scheme, token, ok := strings.Cut(r.Header.Get(echo.HeaderAuthorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.Trim(token, " \t")
}

// guardCheck is the middleware of POST /v1/check and of the call routes in
// one layer: no cross-site browser request, the API token when there is
// one, and a JSON body, in that order.
func (s *Server) guardCheck(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if err := crossSiteError(req); err != nil {
			return err
		}
		if err := s.apiTokenError(c); err != nil {
			return err
		}
		if err := contentTypeError(req); err != nil {
			return err
		}
		return next(c)
	}
}
