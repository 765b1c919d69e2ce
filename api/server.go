// Package api is the HTTP face of the guardrail service: the check endpoint
// and the routes that finish and keep alive metered calls, the admin JSON
// API for tiers and usage, and health; the gateway, which forwards OpenAI-
// and Anthropic-compatible model calls to upstreams, metered as checks
// (package gateway, which this one mounts); the one wire shape of a tier and of a user
// record, which the tiers file of "policyguard tiers" shares; the price
// table's routes and its file, which also reads LiteLLM's; and the Guard
// middleware for an Echo application of one's own.
//
// It imports policy and nothing else of this module. It does not know the
// admin page: main mounts package web's on the same Echo instance
// (Config.Pages), behind the same middleware, and gives both the same
// policy.AdminGate. Its subpackages are for the API's users: client, a Go
// client on net/http alone, and guardtest, a real service in a Go test.
package api

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/api/gateway"
	"github.com/policyguard/policyguard/policy"
)

// MaxBodyBytes is the largest request body accepted.
const MaxBodyBytes = 1 << 20

// Config configures a Server.
type Config struct {
	// Service answers checks and manages tiers. Required.
	Service *policy.Service
	// Health reports whether storage is reachable; nil means always healthy.
	Health func(context.Context) error
	// Admin checks the tokens of the admin routes (the built-in admin's,
	// and named admins' through Service) and counts wrong ones per client.
	// Give the admin page the same one (web.Config.Gate), so that neither
	// is a way around the other's throttle. Nil admits no built-in admin.
	Admin *policy.AdminGate
	// Logger receives the access log and internal errors (default
	// slog.Default()).
	Logger *slog.Logger
	// Metrics records checks and is served at GET /metrics (default
	// NewMetrics(nil): a registry of the server's own).
	Metrics *Metrics
	// HideMetrics leaves GET /metrics off this server, for a caller that
	// serves Metrics.Handler on another address.
	HideMetrics bool
	// APIToken, when set, is the bearer token every POST /v1/check and
	// every call route (finish, keepalive) must carry; empty leaves checks open to whoever can reach the address.
	APIToken string
	// FailOpen admits a check that storage cannot decide instead of
	// refusing it with 503; every such admission is counted and logged.
	FailOpen bool
	// TrustedProxies are the reverse proxies whose X-Forwarded-For is
	// believed: a request's client is then the nearest address in it that
	// is not one of them. Empty, the client is the connection's address and
	// X-Forwarded-For is ignored, since anyone can send it. The client is
	// what wrong admin tokens are counted against and what the access log
	// shows.
	TrustedProxies []*net.IPNet
	// TestClock, when set, is the clock Service runs on (its Now given to
	// policy.WithClock): GET and POST /v1/test/clock then read and move it,
	// with the admin token, and GET /healthz says "test_clock": true.
	// Nil, the usual case, those routes do not exist.
	TestClock *policy.TestClock
	// Pages adds routes to the server's Echo instance after its own, under
	// the same middleware: request ids, the access log, the body limit and
	// the error handler. main mounts the admin page of package web with it
	// (web.Admin.Register). Nil adds none.
	Pages func(*echo.Echo)
	// Gateway, when set, adds the gateway: /llm/{upstream}/... forwards
	// OpenAI- and Anthropic-compatible model calls to its upstreams,
	// metered as checks (see package gateway). Nil, there are no /llm
	// routes.
	Gateway *gateway.Config
}

// Server is the HTTP API. It is an http.Handler and safe for concurrent use.
type Server struct {
	echo *echo.Echo
	svc  *policy.Service
	// admin checks the admin token and counts wrong ones per client, for
	// the admin API and the admin page's sign-in alike.
	admin    *policy.AdminGate
	health   func(context.Context) error
	log      *slog.Logger
	metrics  *Metrics
	apiToken *policy.Secret // nil: checks need no token
	failOpen failOpen
	// testClock is nil when the service runs on a real clock.
	testClock *policy.TestClock
	// gateway is nil when the server has no /llm routes.
	gateway *gateway.Gateway
	// upstreams are the names of the gateway's upstreams, sorted; empty
	// without a gateway.
	upstreams []string
	// access is who may use each route, by path and method.
	access map[string]map[string]access
}

// NewServer returns a Server for cfg with every route registered.
func NewServer(cfg Config) *Server {
	s := &Server{
		echo:      echo.New(),
		svc:       cfg.Service,
		admin:     cfg.Admin,
		health:    cfg.Health,
		log:       cfg.Logger,
		metrics:   cfg.Metrics,
		testClock: cfg.TestClock,
	}
	if s.admin == nil {
		s.admin = policy.NewAdminGate("")
	}
	if s.metrics == nil {
		s.metrics = NewMetrics(nil)
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.health == nil {
		s.health = func(context.Context) error { return nil }
	}
	if cfg.APIToken != "" {
		t := policy.NewSecret(cfg.APIToken)
		s.apiToken = &t
	}
	s.failOpen.enabled = cfg.FailOpen
	if cfg.Gateway != nil {
		s.gateway = gateway.New(cfg.Gateway, gateway.Deps{Keys: s.svc, Calls: s.svc, Metrics: gatewayMetrics{s.metrics}, Log: s.logRequest})
		s.upstreams = cfg.Gateway.UpstreamNames()
	}
	s.echo.HideBanner, s.echo.HidePort = true, true
	// Client addresses (sign-in throttle, access log) come from the
	// connection, X-Forwarded-For being whatever a client wants it to be,
	// unless the connection is from a proxy the operator named.
	s.echo.IPExtractor = echo.ExtractIPDirect()
	if len(cfg.TrustedProxies) > 0 {
		opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
		for _, p := range cfg.TrustedProxies {
			opts = append(opts, echo.TrustIPRange(p))
		}
		s.echo.IPExtractor = echo.ExtractIPFromXFFHeader(opts...)
	}
	s.echo.HTTPErrorHandler = s.handleError
	s.echo.JSONSerializer = jsonSerializer{}
	s.echo.Use(s.serve)
	s.routes()
	own := make(map[string]bool)
	for _, r := range s.echo.Routes() {
		own[r.Method+" "+r.Path] = true
	}
	if cfg.Pages != nil {
		cfg.Pages(s.echo)
	}
	if !cfg.HideMetrics {
		s.echo.GET("/metrics", echo.WrapHandler(s.metrics.Handler()))
	}
	s.access = routeAccess(s.echo.Routes(), own)
	return s
}

// isGatewayPath reports whether path is under /llm/, whose body limit the
// gateway applies itself.
func (s *Server) isGatewayPath(path string) bool {
	return s.gateway != nil && strings.HasPrefix(path, "/llm/")
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.echo.ServeHTTP(w, r) }

// routes lists every route of the service.
func (s *Server) routes() {
	e := s.echo
	e.GET("/healthz", s.handleHealth)
	e.GET("/openapi.yaml", s.handleOpenAPI)
	e.POST("/v1/check", s.handleCheck, s.guardCheck)
	e.POST("/v1/calls/:call_id/finish", s.handleFinishCall, s.guardCheck)
	e.POST("/v1/calls/:call_id/keepalive", s.handleKeepAlive, s.guardCheck)

	// Who may use each route is policy.Routes' business, checked before
	// any route's own middleware (see authorize): a route it does not list
	// is refused to everyone.
	e.GET("/v1/tiers", s.handleListTiers)
	e.GET("/v1/tiers/:name", s.handleGetTier)
	e.PUT("/v1/tiers/:name", s.handlePutTier, requireJSON)
	e.DELETE("/v1/tiers/:name", s.handleDeleteTier)
	e.GET("/v1/users", s.handleListUsers)
	e.GET("/v1/users/:user_id", s.handleGetUser)
	e.PUT("/v1/users/:user_id", s.handlePutUser, requireJSON)
	e.DELETE("/v1/users/:user_id", s.handleDeleteUser)
	e.GET("/v1/accounts", s.handleListAccounts)
	e.GET("/v1/accounts/:account_id", s.handleGetAccount)
	e.PUT("/v1/accounts/:account_id", s.handlePutAccount, requireJSON)
	e.DELETE("/v1/accounts/:account_id", s.handleDeleteAccount)
	e.GET("/v1/accounts/:account_id/usage", s.handleGetAccountUsage)
	e.GET("/v1/accounts/:account_id/usage/periods", s.handleGetAccountPeriods)
	e.DELETE("/v1/accounts/:account_id/usage", s.handleDeleteAccountUsage)
	e.POST("/v1/keys", s.handleCreateKey, requireJSON)
	e.GET("/v1/keys", s.handleListKeys)
	e.DELETE("/v1/keys/:id", s.handleRevokeKey)
	e.POST("/v1/tiers/:name/preview", s.handlePreviewTier, requireJSON)
	e.POST("/v1/tiers/:name/promote", s.handlePromoteTier)
	e.GET("/v1/usage/:user_id", s.handleGetUsage)
	e.GET("/v1/usage/:user_id/periods", s.handleGetUserPeriods)
	e.DELETE("/v1/usage/:user_id", s.handleDeleteUsage)
	e.GET("/v1/stats", s.handleStats)
	e.GET("/v1/prices", s.handleGetPrices)
	e.PUT("/v1/prices", s.handlePutPrices, requireJSON)
	e.GET("/v1/prices/versions", s.handleListPriceVersions)
	e.GET("/v1/admins", s.handleListAdmins)
	e.POST("/v1/admins", s.handleCreateAdmin, requireJSON)
	e.PUT("/v1/admins/:name", s.handlePutAdmin, requireJSON)
	e.DELETE("/v1/admins/:name", s.handleRevokeAdmin)
	e.GET("/v1/audit", s.handleAudit)
	e.GET("/v1/runs", s.handleListRuns)
	e.GET("/v1/runs/:run_id", s.handleGetRun)
	e.POST("/v1/runs/:run_id/end", s.handleEndRun, s.endOwnRun)
	s.testClockRoutes()
	if s.gateway != nil {
		// Every method: what is not metered is a 404 or, with
		// passthrough, forwarded (package gateway).
		e.Any("/llm/:name/*", s.gateway.Handle)
	}
}

// Route is one method and path the server answers. Path parameters are
// written as Echo writes them: /v1/tiers/:name.
type Route struct {
	Method, Path string
}

// Routes returns every route the server answers, including those Echo adds
// for its own purposes (their method names no HTTP method).
func (s *Server) Routes() []Route {
	routes := s.echo.Routes()
	out := make([]Route, len(routes))
	for i, r := range routes {
		out[i] = Route{Method: r.Method, Path: r.Path}
	}
	return out
}

// pathParam returns the named path parameter, unescaped. Echo routes on the
// raw path when the URL has escapes its default encoding would not produce,
// and then leaves parameters escaped.
func pathParam(c echo.Context, name string) (string, error) {
	v := c.Param(name)
	if c.Request().URL.RawPath == "" {
		return v, nil
	}
	u, err := url.PathUnescape(v)
	if err != nil {
		return "", policy.Errorf(policy.EINVALID, "path parameter %s is not a valid escaped string", name)
	}
	return u, nil
}

func (s *Server) handleHealth(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	if err := s.health(ctx); err != nil {
		s.metrics.storageError("ping", err)
		s.logRequest(c, slog.LevelError, "health check failed", slog.Any("err", err))
		return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "message": policy.ErrorMessage(err)})
	}
	return c.JSON(http.StatusOK, s.healthy())
}
