package api

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// The gateway answers what it decides itself in the error shape of the
// upstream's protocol, so that an SDK reads it as it reads the provider's:
//
//	openai:    {"error": {"message": ..., "type": ..., "param": null, "code": ...}}
//	anthropic: {"type": "error", "error": {"type": ..., "message": ...}}

// errKind is a class of gateway error, worded per protocol by errorTypes.
type errKind int

const (
	errInvalid errKind = iota
	errAuth
	errPermission
	errNotFound
	errTooLarge
	errRateLimit
	errRateLimitTokens
	errUpstream
	errTimeout
	errUnavailable
	errInternal
)

// errorTypes gives each kind its type and code in the OpenAI shape (a
// code "" is null) and its type in the Anthropic shape.
var errorTypes = map[errKind]struct{ openAIType, openAICode, anthropicType string }{
	errInvalid:         {"invalid_request_error", "", "invalid_request_error"},
	errAuth:            {"invalid_request_error", "invalid_api_key", "authentication_error"},
	errPermission:      {"invalid_request_error", "model_not_allowed", "permission_error"},
	errNotFound:        {"invalid_request_error", "unknown_url", "not_found_error"},
	errTooLarge:        {"invalid_request_error", "request_too_large", "request_too_large"},
	errRateLimit:       {"requests", "rate_limit_exceeded", "rate_limit_error"},
	errRateLimitTokens: {"tokens", "rate_limit_exceeded", "rate_limit_error"},
	errUpstream:        {"server_error", "upstream_error", "api_error"},
	errTimeout:         {"server_error", "upstream_timeout", "api_error"},
	errUnavailable:     {"server_error", "unavailable", "api_error"},
	errInternal:        {"server_error", "", "api_error"},
}

type openAIError struct {
	Error openAIErrorBody `json:"error"`
}

type openAIErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

type anthropicError struct {
	Type  string             `json:"type"`
	Error anthropicErrorBody `json:"error"`
}

type anthropicErrorBody struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// writeGatewayError answers c with status and msg in protocol's shape.
func writeGatewayError(c echo.Context, protocol string, status int, kind errKind, msg string) error {
	t := errorTypes[kind]
	if protocol == ProtocolOpenAI {
		body := openAIError{Error: openAIErrorBody{Message: msg, Type: t.openAIType}}
		if t.openAICode != "" {
			body.Error.Code = &t.openAICode
		}
		return c.JSON(status, body)
	}
	return c.JSON(status, anthropicError{Type: "error", Error: anthropicErrorBody{Type: t.anthropicType, Message: msg}})
}

// Outcomes of policyguard_gateway_requests_total.
const (
	outcomeForwarded      = "forwarded"       // the upstream answered, whatever its status
	outcomeUpstreamFailed = "upstream_failed" // the upstream did not answer
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
	case errPermission:
		return outcomeDenied
	case errRateLimit, errRateLimitTokens:
		return outcomeRateLimited
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
	if err := writeGatewayError(x.c, x.up.Protocol, status, kind, msg); err != nil {
		x.s.logRequest(x.c, slog.LevelWarn, "write gateway answer", slog.Any("err", err))
	}
}

// failErr answers a failure of the service: its status and message for
// invalid input, 503 for storage, 500 (logged) for anything else.
func (x *exchange) failErr(err error) {
	switch status := policy.HTTPStatus(err); {
	case status == http.StatusBadRequest:
		x.fail(status, errInvalid, policy.ErrorMessage(err))
	case status == http.StatusServiceUnavailable:
		x.s.logRequest(x.c, slog.LevelError, "gateway request failed", slog.Int("status", status), slog.Any("err", err))
		x.fail(status, errUnavailable, policy.ErrorMessage(err))
	default:
		x.s.logRequest(x.c, slog.LevelError, "gateway request failed", slog.Int("status", http.StatusInternalServerError), slog.Any("err", err))
		x.fail(http.StatusInternalServerError, errInternal, "internal error")
	}
}

// rateLimited answers a check the rate limiter refused: 429 with the
// decision's reason, and the wait in Retry-After (seconds) and
// retry-after-ms, which the official SDKs read first.
func (x *exchange) rateLimited(d *policy.Decision) {
	wait := max(d.RetryAfter, 1)
	h := x.c.Response().Header()
	h.Set("Retry-After", strconv.FormatInt(wait, 10))
	h.Set("Retry-After-Ms", strconv.FormatInt(wait*1000, 10))
	kind := errRateLimit
	// An account's pooled token limit refuses tokens too.
	reason := strings.TrimPrefix(d.Reason, policy.AccountReasonPrefix)
	for _, w := range policy.Windows {
		if reason == w.TokenReason() {
			kind = errRateLimitTokens
		}
	}
	x.fail(http.StatusTooManyRequests, kind, d.Reason)
}

// Rate-limit header names of each protocol, canonical.
const (
	headerOpenAILimitRequests     = "X-Ratelimit-Limit-Requests"
	headerOpenAIRemainingRequests = "X-Ratelimit-Remaining-Requests"
	headerOpenAIResetRequests     = "X-Ratelimit-Reset-Requests"

	headerAnthropicRequestsLimit     = "Anthropic-Ratelimit-Requests-Limit"
	headerAnthropicRequestsRemaining = "Anthropic-Ratelimit-Requests-Remaining"
	headerAnthropicRequestsReset     = "Anthropic-Ratelimit-Requests-Reset"
	headerAnthropicTokensLimit       = "Anthropic-Ratelimit-Tokens-Limit"
	headerAnthropicTokensRemaining   = "Anthropic-Ratelimit-Tokens-Remaining"
	headerAnthropicTokensReset       = "Anthropic-Ratelimit-Tokens-Reset"
)

// setGatewayLimitHeaders writes the rate-limit fields of protocol from
// d's windows at now: for requests, the tightest window (the fewest
// remaining, the shorter on a tie) and for tokens, when the tier limits
// them, the tightest token window. Each gives its limit, what remains and
// when its next slot frees (0 for an empty window):
//
//   - openai: x-ratelimit-limit-requests, -remaining-requests and
//     -reset-requests, and the -tokens ones; resets as OpenAI writes
//     them, a duration such as "1s" or "6m0s".
//   - anthropic: anthropic-ratelimit-requests-limit, -remaining and
//     -reset, and the tokens- ones; resets as Anthropic writes them, an
//     RFC 3339 time.
func setGatewayLimitHeaders(h http.Header, protocol string, d *policy.Decision, now time.Time) {
	if d.Windows == nil {
		return
	}
	ws := tighterWindows(d)
	tw := policy.Windows[0]
	for _, w := range policy.Windows {
		if ws[w].Remaining < ws[tw].Remaining {
			tw = w
		}
	}
	var tokens *policy.TokenState
	for _, w := range policy.Windows {
		if t := ws[w].Tokens; t != nil && t.Limited && (tokens == nil || t.Remaining < tokens.Remaining) {
			tokens = t
		}
	}
	reqs := ws[tw]
	if protocol == ProtocolOpenAI {
		reset := func(secs int64) string { return (time.Duration(secs) * time.Second).String() }
		h[headerOpenAILimitRequests] = []string{strconv.FormatInt(reqs.Limit, 10)}
		h[headerOpenAIRemainingRequests] = []string{strconv.FormatInt(reqs.Remaining, 10)}
		h[headerOpenAIResetRequests] = []string{reset(reqs.Reset)}
		if tokens != nil {
			h[headerXLimitTokens] = []string{strconv.FormatInt(tokens.Limit, 10)}
			h[headerXRemainingTokens] = []string{strconv.FormatInt(tokens.Remaining, 10)}
			h[headerXResetTokens] = []string{reset(tokens.Reset)}
		}
		return
	}
	reset := func(secs int64) string {
		return now.UTC().Truncate(time.Second).Add(time.Duration(secs) * time.Second).Format(time.RFC3339)
	}
	h[headerAnthropicRequestsLimit] = []string{strconv.FormatInt(reqs.Limit, 10)}
	h[headerAnthropicRequestsRemaining] = []string{strconv.FormatInt(reqs.Remaining, 10)}
	h[headerAnthropicRequestsReset] = []string{reset(reqs.Reset)}
	if tokens != nil {
		h[headerAnthropicTokensLimit] = []string{strconv.FormatInt(tokens.Limit, 10)}
		h[headerAnthropicTokensRemaining] = []string{strconv.FormatInt(tokens.Remaining, 10)}
		h[headerAnthropicTokensReset] = []string{reset(tokens.Reset)}
	}
}

// modelRefused answers a call for a model the tier does not include.
func (x *exchange) modelRefused(model, tier string) {
	x.windowHeaders()
	x.fail(http.StatusForbidden, errPermission, fmt.Sprintf("model %s is not included in tier %s", policy.Quote(model), policy.Quote(tier)))
	x.outcome = outcomeModelDenied
}
