package gateway

import (
	"bytes"
	"net/http"
	"strconv"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// openAI is the OpenAI protocol: chat and text completions, responses
// and embeddings are metered; usage (of the body, or in a stream of the
// chunk that carries only the usage, or of response.completed or
// response.incomplete) settles a call, priced as report says.
type openAI struct{}

var openAIPaths = map[string]route{
	"/chat/completions": routeChat,
	"/completions":      routeCompletions,
	"/responses":        routeResponses,
	"/embeddings":       routeEmbeddings,
}

func (openAI) paths() (map[string]route, string) { return openAIPaths, "/models" }

// unmetered are the paths that make model calls whose tokens no answer
// of theirs reports to the gateway: batches, realtime sessions, the
// assistants' threads and runs, evals and fine-tuning jobs.
func (openAI) unmetered() []string {
	return []string{"/batches", "/realtime", "/assistants", "/threads", "/evals", "/fine_tuning"}
}

func (openAI) gatewayKey(http.Header) (string, string) { return "", "Authorization: Bearer <key>" }

func (openAI) authorize(h http.Header, key string) { h["Authorization"] = []string{"Bearer " + key} }

// openAIErrorTypes gives each kind its type and code (a code "" is null):
//
//	{"error": {"message": ..., "type": ..., "param": null, "code": ...}}
var openAIErrorTypes = map[errKind]struct{ typ, code string }{
	errInvalid:         {"invalid_request_error", ""},
	errAuth:            {"invalid_request_error", "invalid_api_key"},
	errPermission:      {"invalid_request_error", "model_not_allowed"},
	errNotFound:        {"invalid_request_error", "unknown_url"},
	errTooLarge:        {"invalid_request_error", "request_too_large"},
	errRateLimit:       {"requests", "rate_limit_exceeded"},
	errRateLimitTokens: {"tokens", "rate_limit_exceeded"},
	// What OpenAI answers, with 429, for an exhausted quota; its SDKs'
	// users know to stop on it.
	errQuota:       {"insufficient_quota", "insufficient_quota"},
	errUnpriced:    {"permission_denied", "model_not_priced"},
	errRunBudget:   {"permission_denied", "run_budget_exceeded"},
	errConflict:    {"invalid_request_error", "run_conflict"},
	errUpstream:    {"server_error", "upstream_error"},
	errTimeout:     {"server_error", "upstream_timeout"},
	errUnavailable: {"server_error", "unavailable"},
	errInternal:    {"server_error", ""},
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

func (openAI) writeError(c echo.Context, status int, kind errKind, msg string) error {
	t := openAIErrorTypes[kind]
	body := openAIError{Error: openAIErrorBody{Message: msg, Type: t.typ}}
	if t.code != "" {
		body.Error.Code = &t.code
	}
	return c.JSON(status, body)
}

// Rate-limit header names, canonical.
const (
	headerOpenAILimitRequests     = "X-Ratelimit-Limit-Requests"
	headerOpenAIRemainingRequests = "X-Ratelimit-Remaining-Requests"
	headerOpenAIResetRequests     = "X-Ratelimit-Reset-Requests"
	headerOpenAILimitTokens       = "X-Ratelimit-Limit-Tokens"
	headerOpenAIRemainingTokens   = "X-Ratelimit-Remaining-Tokens"
	headerOpenAIResetTokens       = "X-Ratelimit-Reset-Tokens"
)

// limitHeaders writes x-ratelimit-limit-requests, -remaining-requests and
// -reset-requests, and the -tokens ones; resets as OpenAI writes them, a
// duration such as "1s" or "6m0s".
func (openAI) limitHeaders(h http.Header, reqs policy.WindowState, tokens *policy.TokenState, _ time.Time) {
	reset := func(secs int64) string { return (time.Duration(secs) * time.Second).String() }
	h[headerOpenAILimitRequests] = []string{strconv.FormatInt(reqs.Limit, 10)}
	h[headerOpenAIRemainingRequests] = []string{strconv.FormatInt(reqs.Remaining, 10)}
	h[headerOpenAIResetRequests] = []string{reset(reqs.Reset)}
	if tokens != nil {
		h[headerOpenAILimitTokens] = []string{strconv.FormatInt(tokens.Limit, 10)}
		h[headerOpenAIRemainingTokens] = []string{strconv.FormatInt(tokens.Remaining, 10)}
		h[headerOpenAIResetTokens] = []string{reset(tokens.Reset)}
	}
}

// reservation is the prompt's bound and, but for embeddings, which have
// no output, the output's.
func (openAI) reservation(cb *callBody, r route, size int, maxOutput int64) policy.TokenUsage {
	return cb.reservation(size, r != routeEmbeddings, maxOutput)
}

// prepare asks the upstream for usage in a chat or text completion
// streamed without stream_options.include_usage; the chunk that carries
// only the usage is then kept from the client.
func (openAI) prepare(cb *callBody, r route, body []byte) ([]byte, bool, error) {
	if !cb.stream || cb.includeUsage || (r != routeChat && r != routeCompletions) {
		return body, false, nil
	}
	body, err := withIncludeUsage(body)
	return body, true, err
}

// report prices prompt_tokens (input_tokens in a response) less its
// cached_tokens at the input price, the cached ones at the cache read
// price, and completion_tokens (output_tokens), reasoning included, at the
// output price. A total_tokens above those parts (a server that counts
// more than it itemizes) counts the rest as output, so that every token
// reported is priced; one with no parts at all reports its total alone.
func (openAI) report(u *usageJSON) (policy.Report, bool) {
	prompt, completion, details := u.PromptTokens, u.CompletionTokens, u.PromptDetails
	if prompt == nil && completion == nil {
		prompt, completion, details = u.InputTokens, u.OutputTokens, u.InputDetails
	}
	if prompt == nil && completion == nil {
		if u.TotalTokens == nil {
			return policy.Report{}, false
		}
		return tokensReport(count(u.TotalTokens)), true
	}
	tu := policy.TokenUsage{Input: count(prompt), Output: count(completion)}
	if details != nil {
		tu.CacheRead = min(count(details.CachedTokens), tu.Input)
		tu.Input -= tu.CacheRead
	}
	if total := count(u.TotalTokens); total > tu.Total() {
		tu.Output += total - tu.Total()
	}
	return usageReport(tu), true
}

func (openAI) event(st *streamState, r route, name string, data []byte) eventAction {
	if r == routeResponses {
		if name == "" && bytes.Contains(data, []byte(`"response.`)) {
			name = eventType(data)
		}
		switch name {
		case "response.completed", "response.incomplete", "response.failed":
			var e struct {
				Response struct {
					Usage *usageJSON `json:"usage"`
				} `json:"response"`
			}
			if json.Unmarshal(data, &e, lenientJSON) == nil && e.Response.Usage != nil {
				st.usage, st.final = *e.Response.Usage, true
			}
			return eventEnd
		}
		return eventForward
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("[DONE]")) {
		return eventEnd
	}
	if !hasUsageObject(data) {
		return eventForward
	}
	var chunk struct {
		Choices []jsontext.Value `json:"choices"`
		Usage   *usageJSON       `json:"usage"`
	}
	if json.Unmarshal(data, &chunk, lenientJSON) == nil && chunk.Usage != nil {
		st.usage, st.final = *chunk.Usage, true
		if st.hideUsage && len(chunk.Choices) == 0 {
			return eventDrop
		}
	}
	return eventForward
}

// hasUsageObject reports whether data has a member "usage" whose value is
// an object: OpenAI chunks carry "usage": null but for the usage's own.
func hasUsageObject(data []byte) bool {
	for {
		i := bytes.Index(data, []byte(`"usage"`))
		if i < 0 {
			return false
		}
		data = bytes.TrimLeft(data[i+len(`"usage"`):], " \t\r\n")
		if len(data) > 0 && data[0] == ':' {
			if rest := bytes.TrimLeft(data[1:], " \t\r\n"); len(rest) > 0 && rest[0] == '{' {
				return true
			}
		}
	}
}

// withIncludeUsage returns body with stream_options.include_usage set to
// true, the other members and stream options kept.
func withIncludeUsage(body []byte) ([]byte, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	var out bytes.Buffer
	out.Grow(len(body) + 40)
	enc := jsontext.NewEncoder(&out)
	if _, err := dec.ReadToken(); err != nil {
		return nil, err
	}
	if err := enc.WriteToken(jsontext.BeginObject); err != nil {
		return nil, err
	}
	opts := map[string]jsontext.Value{}
	for dec.PeekKind() == '"' {
		tok, err := dec.ReadToken()
		if err != nil {
			return nil, err
		}
		name := tok.String() // the token is valid only until the next read
		v, err := dec.ReadValue()
		if err != nil {
			return nil, err
		}
		if name == "stream_options" {
			if v.Kind() == '{' {
				if err := json.Unmarshal(v, &opts); err != nil {
					return nil, err
				}
			}
			continue
		}
		if err := enc.WriteToken(jsontext.String(name)); err != nil {
			return nil, err
		}
		if err := enc.WriteValue(v); err != nil {
			return nil, err
		}
	}
	opts["include_usage"] = jsontext.Value("true")
	if err := enc.WriteToken(jsontext.String("stream_options")); err != nil {
		return nil, err
	}
	if err := json.MarshalEncode(enc, opts, json.Deterministic(true)); err != nil {
		return nil, err
	}
	if err := enc.WriteToken(jsontext.EndObject); err != nil {
		return nil, err
	}
	return bytes.TrimRight(out.Bytes(), "\n"), nil
}
