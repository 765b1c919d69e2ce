package api

import (
	"context"
	"errors"
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
	// session, a header, the route), and for a tier that meters calls the
	// tokens the handler's model call may use (Request.Tokens, reserved at
	// admission). Empty fields take the service's defaults, as in POST
	// /v1/check. Required. An error it returns goes to
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
	// FinishError, when set, is told of a call Guard could not finish
	// (storage failed): the service then finishes it at its expiry, with
	// its reservation. By default such a failure is dropped.
	FinishError func(err error, c echo.Context)
}

// guardDecisionKey is where Guard leaves the decision in the echo.Context.
const guardDecisionKey = "policyguard.decision"

// guardReportKey is where ReportTokens and ReportUsage leave the
// handler's policy.Report.
const guardReportKey = "policyguard.report"

// finishTimeout bounds the finish of a guarded call, which runs after the
// request's own context may have ended.
const finishTimeout = 5 * time.Second

// Guard returns Echo middleware that runs each request through the
// service's guardrail chain before the handler, as POST /v1/check would:
// an admitted request reaches the handler with the rate-limit header
// fields set and is recorded; a refused one is answered 429 (with
// Retry-After) or 403, with the same body and header fields as a check,
// and never reaches the handler. The handler can read the decision with
// GuardDecision.
//
// Under a tier that meters calls, an admitted request opens a call that
// Guard finishes when the handler returns, whether it returned an error or
// panicked: with what the handler reported through ReportTokens or
// ReportUsage, or else with the reservation (Request.Tokens). A dry run
// opens no call.
//
// Guard panics if Service or Request is missing, as a mistake in the
// program rather than in a request. The middleware is safe for concurrent
// use.
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
					if d.CallID != "" {
						defer finishGuarded(cfg, c, d.CallID)
					}
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

// finishGuarded finishes the call Guard opened for c's request with what
// the handler reported, or its reservation. It runs even when the
// handler panicked or the client went away, so the slot is freed at once
// instead of at the call's expiry.
func finishGuarded(cfg GuardConfig, c echo.Context, id string) {
	report, _ := c.Get(guardReportKey).(policy.Report)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request().Context()), finishTimeout)
	defer cancel()
	before := cfg.Service.Now()
	call, err := cfg.Service.FinishCall(ctx, id, report)
	if cfg.Metrics != nil {
		cfg.Metrics.observeFinish(&call, err, before)
	}
	if err != nil && cfg.FinishError != nil {
		cfg.FinishError(err, c)
	}
}

// ReportTokens tells Guard how many tokens the guarded handler's model call
// used, for the finish of its call: the last count reported (here or by
// ReportUsage) counts. Under a spend limit they cost the model's highest
// per-token price. A handler that reports none leaves its reservation as
// used. It does nothing for a request Guard opened no call for.
func ReportTokens(c echo.Context, n int64) { c.Set(guardReportKey, policy.Report{Tokens: &n}) }

// ReportUsage is ReportTokens with the tokens split by the price each is
// billed at, as the model's provider reports them, so that a priced call
// costs exactly what they do.
func ReportUsage(c echo.Context, u policy.TokenUsage) {
	c.Set(guardReportKey, policy.Report{Usage: &u})
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
	return echo.NewHTTPError(policy.HTTPStatus(err), policy.ErrorMessage(err)).SetInternal(err)
}
