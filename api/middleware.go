package api

import (
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/policyguard/policyguard/policy"
)

// GuardConfig configures Guard.
type GuardConfig struct {
	// Service decides each request. Required.
	Service *policy.Service
	// Request says who is asking for what: the user id, tier and feature
	// of an incoming request, read however the application knows them (a
	// session, a header, the route). Empty fields take the service's
	// defaults, as in POST /v1/check. Required. An error it returns goes to
	// ErrorHandler, so returning echo.ErrUnauthorized answers 401.
	Request func(c echo.Context) (policy.Request, error)
	// Skipper leaves the requests it returns true for unguarded (default:
	// none).
	Skipper middleware.Skipper
	// DryRun decides without recording anything: requests are refused when
	// over a limit but admitted ones consume no quota.
	DryRun bool
	// ErrorHandler answers a request the guard could not decide: Request
	// failed, the tier is unknown, or storage failed. Returning nil lets the
	// request through undecided (fail open). The default returns an
	// *echo.HTTPError with the status POST /v1/check would give (400, 503,
	// ...) and its message, for the application's HTTPErrorHandler.
	ErrorHandler func(err error, c echo.Context) error
	// Metrics, when set, counts each request the service was asked about in
	// policyguard_checks_total and policyguard_check_duration_seconds, as
	// POST /v1/check does; serve them with Metrics.Handler. Requests whose
	// Request function failed never became checks and are not counted.
	Metrics *Metrics
}

// guardDecisionKey is where Guard leaves the decision in the echo.Context.
const guardDecisionKey = "policyguard.decision"

// Guard returns Echo middleware that runs each request through the
// service's guardrail chain before the handler, as POST /v1/check would:
// an admitted request reaches the handler with the rate-limit header
// fields set and is recorded; a refused one is answered 429 (with
// Retry-After) or 403, with the same body and header fields as a check,
// and never reaches the handler. The handler can read the decision with
// GuardDecision. Guard panics if Service or Request is missing, as a
// mistake in the program rather than in a request. The middleware is safe
// for concurrent use.
func Guard(cfg GuardConfig) echo.MiddlewareFunc {
	if cfg.Service == nil || cfg.Request == nil {
		panic("api.Guard: GuardConfig needs a Service and a Request function")
	}
	if cfg.Skipper == nil {
		cfg.Skipper = middleware.DefaultSkipper
	}
	if cfg.ErrorHandler == nil {
		cfg.ErrorHandler = guardError
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if cfg.Skipper(c) {
				return next(c)
			}
			req, err := cfg.Request(c)
			if err == nil {
				start := time.Now()
				var d policy.Decision
				d, err = cfg.Service.Check(c.Request().Context(), req, cfg.DryRun)
				if cfg.Metrics != nil {
					cfg.Metrics.observeCheck(&d, err, cfg.DryRun, time.Since(start))
				}
				if err == nil {
					c.Set(guardDecisionKey, d)
					if !d.Allowed() {
						return writeDecision(c, &d)
					}
					setDecisionHeaders(c.Response().Header(), &d)
					return next(c)
				}
			}
			if err := cfg.ErrorHandler(err, c); err != nil {
				return err
			}
			return next(c)
		}
	}
}

// GuardDecision returns the decision Guard made for c's request, and false
// when Guard did not decide it (skipped, or undecided and let through).
func GuardDecision(c echo.Context) (policy.Decision, bool) {
	d, ok := c.Get(guardDecisionKey).(policy.Decision)
	return d, ok
}

// guardError is the default GuardConfig.ErrorHandler. Echo's own errors,
// such as echo.ErrUnauthorized from a Request function, pass unchanged;
// domain errors become the status and message the JSON API gives them,
// and anything else a bare 500, since its text may name files or SQL.
func guardError(err error, _ echo.Context) error {
	var he *echo.HTTPError
	if errors.As(err, &he) {
		return err
	}
	status := statusOf[policy.ErrorCode(err)]
	if status == 0 {
		status = http.StatusInternalServerError
	}
	return echo.NewHTTPError(status, policy.ErrorMessage(err)).SetInternal(err)
}
