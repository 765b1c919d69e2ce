package gateway

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// anthropic is the Anthropic protocol: messages are metered;
// input_tokens, output_tokens, cache_creation_input_tokens and
// cache_read_input_tokens (of the body, or in a stream of message_start
// and the last message_delta) settle a call, each at its price.
type anthropic struct{}

var anthropicPaths = map[string]route{"/v1/messages": routeMessages}

func (anthropic) paths() (map[string]route, string) { return anthropicPaths, "/v1/models" }

// unmetered are the paths that make model calls the gateway does not
// meter: message batches, and the legacy text completions.
func (anthropic) unmetered() []string { return []string{"/v1/messages/batches", "/v1/complete"} }

func (anthropic) gatewayKey(h http.Header) (string, string) {
	return strings.Trim(h.Get("X-Api-Key"), " \t"), "Authorization: Bearer <key> or x-api-key: <key>"
}

// defaultAnthropicVersion is sent to an anthropic upstream when the
// client names no version.
const defaultAnthropicVersion = "2023-06-01"

func (anthropic) authorize(h http.Header, key string) {
	h["X-Api-Key"] = []string{key}
	if h.Get("Anthropic-Version") == "" {
		h["Anthropic-Version"] = []string{defaultAnthropicVersion}
	}
}

// anthropicErrorTypes gives each kind its type:
//
//	{"type": "error", "error": {"type": ..., "message": ...}}
var anthropicErrorTypes = map[errKind]string{
	errInvalid:         "invalid_request_error",
	errAuth:            "authentication_error",
	errPermission:      "permission_error",
	errNotFound:        "not_found_error",
	errTooLarge:        "request_too_large",
	errRateLimit:       "rate_limit_error",
	errRateLimitTokens: "rate_limit_error",
	errQuota:           "rate_limit_error",
	errUnpriced:        "permission_error",
	errRunBudget:       "permission_error",
	errConflict:        "invalid_request_error", // Anthropic names no type for a 409
	errUpstream:        "api_error",
	errTimeout:         "api_error",
	errUnavailable:     "api_error",
	errInternal:        "api_error",
}

type anthropicError struct {
	Type  string             `json:"type"`
	Error anthropicErrorBody `json:"error"`
}

type anthropicErrorBody struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

func (anthropic) writeError(c echo.Context, status int, kind errKind, msg string) error {
	return c.JSON(status, anthropicError{Type: "error", Error: anthropicErrorBody{Type: anthropicErrorTypes[kind], Message: msg}})
}

// Rate-limit header names, canonical.
const (
	headerAnthropicRequestsLimit     = "Anthropic-Ratelimit-Requests-Limit"
	headerAnthropicRequestsRemaining = "Anthropic-Ratelimit-Requests-Remaining"
	headerAnthropicRequestsReset     = "Anthropic-Ratelimit-Requests-Reset"
	headerAnthropicTokensLimit       = "Anthropic-Ratelimit-Tokens-Limit"
	headerAnthropicTokensRemaining   = "Anthropic-Ratelimit-Tokens-Remaining"
	headerAnthropicTokensReset       = "Anthropic-Ratelimit-Tokens-Reset"
)

// limitHeaders writes anthropic-ratelimit-requests-limit, -remaining and
// -reset, and the tokens- ones; resets as Anthropic writes them, an RFC
// 3339 time.
func (anthropic) limitHeaders(h http.Header, reqs policy.WindowState, tokens *policy.TokenState, now time.Time) {
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

// reservation is the prompt's bound and max_tokens, which a message
// always sets.
func (anthropic) reservation(cb *callBody, _ route, size int, maxOutput int64) policy.TokenUsage {
	return cb.reservation(size, true, maxOutput)
}

// prepare sends the body as it came: a stream always tells its usage.
func (anthropic) prepare(_ *callBody, _ route, body []byte) ([]byte, bool, error) {
	return body, false, nil
}

// report prices input_tokens at the input price,
// cache_creation_input_tokens at the cache write price,
// cache_read_input_tokens at the cache read price and output_tokens at
// the output price.
func (anthropic) report(u *usageJSON) (policy.Report, bool) {
	if u.InputTokens == nil && u.OutputTokens == nil && u.CacheCreationTokens == nil && u.CacheReadTokens == nil {
		return policy.Report{}, false
	}
	return usageReport(policy.TokenUsage{
		Input:      count(u.InputTokens),
		Output:     count(u.OutputTokens),
		CacheWrite: count(u.CacheCreationTokens),
		CacheRead:  count(u.CacheReadTokens),
	}), true
}

func (anthropic) event(st *streamState, _ route, name string, data []byte) eventAction {
	if name == "" {
		name = eventType(data)
	}
	switch name {
	case "message_start":
		var e struct {
			Message struct {
				Usage *usageJSON `json:"usage"`
			} `json:"message"`
		}
		if json.Unmarshal(data, &e, lenientJSON) == nil && e.Message.Usage != nil {
			st.usage.merge(e.Message.Usage)
		}
	case "message_delta":
		var e struct {
			Usage *usageJSON `json:"usage"`
		}
		if json.Unmarshal(data, &e, lenientJSON) == nil && e.Usage != nil {
			st.usage.merge(e.Usage)
			st.final = true
		}
	case "message_stop":
		return eventEnd
	}
	return eventForward
}
