package gateway

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/policyguard/policyguard/policy"
)

// The gateway answers what it decides itself in the error shape of the
// upstream's protocol (each protocol's writeError), so that an SDK reads
// it as it reads the provider's.

// errKind is a class of gateway error, worded by each protocol.
type errKind int

const (
	errInvalid errKind = iota
	errAuth
	errPermission
	errNotFound
	errTooLarge
	errRateLimit
	errRateLimitTokens
	errQuota     // a spend limit refused
	errUnpriced  // the model has no price, under a spend limit
	errRunBudget // a run's budget refused, for good
	errConflict  // the run is another user's, or another parent's
	errUpstream
	errTimeout
	errUnavailable
	errInternal
)

// Outcomes of policyguard_gateway_requests_total.
const (
	outcomeForwarded      = "forwarded"       // the upstream answered, whatever its status
	outcomeUpstreamFailed = "upstream_failed" // the upstream did not answer
	outcomeRateLimited    = "rate_limited"    // the check refused: a window is full
	outcomeDenied         = "denied"          // the check refused as it stands
	outcomeModelDenied    = "model_denied"    // the tier does not include the model
	outcomeBadRequest     = "bad_request"     // 400, 404 or 413: nothing checked
	outcomeUnauthorized   = "unauthorized"    // no key, or an unknown or revoked one
	outcomeGatewayError   = "error"           // storage or internal failure
)

// outcomeOf is the outcome label of an answer the gateway gave itself.
func outcomeOf(kind errKind) string {
	switch kind {
	case errAuth:
		return outcomeUnauthorized
	case errPermission, errRunBudget:
		return outcomeDenied
	case errRateLimit, errRateLimitTokens, errQuota:
		return outcomeRateLimited
	case errUnpriced:
		return outcomeModelDenied
	case errUpstream, errTimeout:
		return outcomeUpstreamFailed
	case errUnavailable, errInternal:
		return outcomeGatewayError
	}
	return outcomeBadRequest
}

// fail answers the exchange's request with an error of its own: with
// the rate-limit fields, as every answer to a known user.
func (x *exchange) fail(status int, kind errKind, msg string) {
	x.outcome = outcomeOf(kind)
	if x.user != "" && !x.limitsSet && kind != errUnavailable && kind != errInternal {
		x.windowHeaders()
	}
	if err := x.up.proto.writeError(x.c, status, kind, msg); err != nil {
		x.g.Log(x.c, slog.LevelWarn, "write gateway answer", slog.Any("err", err))
	}
}

// failErr answers a failure of the service: its status and message for
// invalid input, 503 for storage, 500 (logged) for anything else.
func (x *exchange) failErr(err error) {
	switch status := policy.HTTPStatus(err); {
	case status == http.StatusBadRequest:
		x.fail(status, errInvalid, policy.ErrorMessage(err))
	case status == http.StatusConflict:
		x.conflict(policy.ErrorMessage(err))
	case status == http.StatusServiceUnavailable:
		x.g.Log(x.c, slog.LevelError, "gateway request failed", slog.Int("status", status), slog.Any("err", err))
		x.fail(status, errUnavailable, policy.ErrorMessage(err))
	default:
		x.g.Log(x.c, slog.LevelError, "gateway request failed", slog.Int("status", http.StatusInternalServerError), slog.Any("err", err))
		x.fail(http.StatusInternalServerError, errInternal, "internal error")
	}
}

// rateLimited answers a check the rate limiter refused: 429 with the
// decision's reason, and its wait (see waitFields). A spend limit's
// refusal is the protocol's answer to an exhausted quota, and is never
// retried by the SDK: the wait for money to leave a window is the
// window's, which no client should sleep through, and a budget is not a
// rate. A month limit's refusal is answered alike, whatever it counts:
// nothing leaves a billing period before it ends.
func (x *exchange) rateLimited(d *policy.Decision) {
	kind, retry := errRateLimit, true
	switch k, _ := d.RefusedBy(); {
	case d.RefusedByMonth():
		kind, retry = errQuota, false
	case k == policy.KindTokens:
		kind = errRateLimitTokens
	case k == policy.KindCost:
		kind, retry = errQuota, false
	}
	x.waitFields(max(d.RetryAfter, 1), retry)
	x.fail(http.StatusTooManyRequests, kind, d.Reason)
}

// unpriced answers a call for a model the price table does not price,
// under a spend limit: 403, for such a call is refused, never free.
func (x *exchange) unpriced(u *policy.UnpricedError) {
	x.fail(http.StatusForbidden, errUnpriced, u.Error())
}

// zeroReport reports a call that used nothing.
func zeroReport() *policy.Report {
	r := tokensReport(0)
	return &r
}

// headerShouldRetry tells the official SDKs, OpenAI's and Anthropic's
// alike, whether to retry an answer, whatever its status: they read it
// before Retry-After.
const headerShouldRetry = "X-Should-Retry"

// waitFields sets the fields of an answer that asks the client to wait
// wait seconds: Retry-After, and retry-after-ms, which the official SDKs
// read first. Those SDKs retry a 429 or a 503 after as long a wait as it
// says (some without a cap: a day window's refusal would hang a call for
// a day), so a wait longer than MaxRetryWait, or a refusal that retry
// says no wait lifts, also carries x-should-retry: false, and the SDK
// raises its error at once.
func (x *exchange) waitFields(wait int64, retry bool) {
	h := x.c.Response().Header()
	h.Set("Retry-After", strconv.FormatInt(wait, 10))
	h.Set("Retry-After-Ms", strconv.FormatInt(wait*1000, 10))
	if !retry || wait > int64(x.g.maxRetryWait/time.Second) {
		h.Set(headerShouldRetry, "false")
	}
}

// modelRefused answers a call for a model the tier does not include.
func (x *exchange) modelRefused(model, tier string) {
	x.windowHeaders()
	x.fail(http.StatusForbidden, errPermission, fmt.Sprintf("model %s is not included in tier %s", policy.Quote(model), policy.Quote(tier)))
	x.outcome = outcomeModelDenied
}
