// Package client is a typed Go client for the policyguard HTTP API: checks,
// metered calls, tiers, user records, accounts, gateway keys, usage and prices. It uses only the standard library and imports nothing
// else of this module, so a program that only calls the service does not
// compile the service in.
//
// A refusal is an answer, not an error: Check returns a Decision with
// Allowed false for a 429 or a 403. Every other answer outside 2xx is an
// *Error carrying the status code and the server's message.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// maxAnswerBytes bounds how much of an answer is read; policyguard's
// largest, the list of tiers, is far smaller.
const maxAnswerBytes = 4 << 20

// Client calls one policyguard service. Its zero value is not usable; call
// New. It is safe for concurrent use.
type Client struct {
	base       *url.URL
	hc         *http.Client
	adminToken string
	apiToken   string
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client requests go through (default
// http.DefaultClient), for timeouts, proxies and TLS settings.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithAdminToken sets the bearer token of the admin API, which Tiers, Tier,
// PutTier, DeleteTier, Usage, ForgetUser, the record methods and the
// account methods need.
func WithAdminToken(token string) Option { return func(c *Client) { c.adminToken = token } }

// WithAPIToken sets the bearer token checks carry, for a service started
// with -api-token.
func WithAPIToken(token string) Option { return func(c *Client) { c.apiToken = token } }

// New returns a Client of the service at baseURL, such as
// "http://127.0.0.1:8080".
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimSuffix(baseURL, "/"))
	if err != nil {
		return nil, fmt.Errorf("policyguard client: base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("policyguard client: base URL %q: want http://host:port or https://host:port", baseURL)
	}
	c := &Client{base: u, hc: http.DefaultClient}
	for _, opt := range opts {
		opt(c)
	}
	return c, nil
}

// Error is an answer of the service that is neither a success nor a
// decision: a bad request (400), a missing or wrong token (401), an unknown
// tier (404), a conflict (409), failed storage (503). Use errors.As to
// reach it.
type Error struct {
	// StatusCode is the HTTP status of the answer.
	StatusCode int
	// Message is the service's explanation, or the status text when the
	// answer carried none (from a proxy, say).
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("policyguard: %d %s: %s", e.StatusCode, http.StatusText(e.StatusCode), e.Message)
}

// StatusCode returns the status code of the *Error in err's chain, or 0
// when there is none (the request did not get an answer).
func StatusCode(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.StatusCode
	}
	return 0
}

// CheckRequest is what a check asks about. Every field may be empty: the
// user is then "anonymous", the tier the service's default, and no feature
// is checked.
type CheckRequest struct {
	UserID  string
	Tier    string
	Feature string
	// AccountID names the account of a user whose record names none: the
	// check must then also pass the account's pooled limits. An unknown
	// account is an *Error with status 400; a service started with
	// -trust-client-tier=false ignores it.
	AccountID string
	// RunID names the agent run the request is a step of: its first
	// request opens it, and every request must fit the tier's run budget
	// of the run and its ancestors. ParentRunID names, on a sub-agent's
	// first request, its parent run. See Run.
	RunID, ParentRunID string
	// InputText is the prompt. The service neither stores nor logs it.
	InputText string
	// Tokens is the most tokens the call may use (prompt plus the
	// completion's maximum), reserved when a tier that limits tokens
	// admits it; 0 reserves none.
	Tokens int64
	// Model names the model the call is for, which prices it: required
	// when the tier (or the account's pooled limits) limit spend, and
	// then the tokens are reserved at its highest per-token price. A
	// model the price table does not price is an *Error with status 400
	// under a spend limit.
	Model string
}

// Decision is the service's answer to a check.
type Decision struct {
	// Allowed reports whether the request may go to the model.
	Allowed bool `json:"allowed"`
	// Reason says why the request was refused; empty when admitted.
	Reason string `json:"reason"`
	// RetryAfter is the whole seconds after which the same request would be
	// admitted when rate-limited; 0 otherwise.
	RetryAfter int64 `json:"retry_after"`
	// Tier is the tier the request was checked under.
	Tier string `json:"tier"`
	// Guardrail names the guardrail that refused, or the last that ran.
	Guardrail string  `json:"guardrail"`
	Windows   Windows `json:"windows"`
	// CallID names the call an admitted check of a metered tier (one that
	// limits tokens, spend or concurrent calls) opened: finish it with FinishCall
	// when the model call ends. Empty when no call was opened.
	CallID string `json:"call_id"`
	// Concurrency is the user's calls in flight against the tier's
	// max_concurrent, counting this one when admitted; nil when the tier
	// sets none.
	Concurrency *Concurrency `json:"concurrency"`
	// Shadow is how the tier's shadow limits decided the request; nil when
	// the tier has none. They never refuse anything.
	Shadow *ShadowDecision `json:"shadow,omitzero"`
	// Account is the pooled state of the account a member's check drew
	// on; nil for a user in no account. A refusal by the account's pooled
	// limits has a Reason beginning "account ".
	Account *AccountState `json:"account,omitzero"`
	// Run is the run the check named, as the check leaves it; nil for a
	// check in no run. A refusal by the run's budget or state is a 403:
	// never worth retrying.
	Run *RunUsage `json:"run,omitzero"`
	// StatusCode is the answer's status: 200 admitted, 429 rate-limited,
	// 403 not in the plan or over a run's budget.
	StatusCode int `json:"-"`
}

// ShadowDecision is how a tier's shadow limits decided a check.
type ShadowDecision struct {
	// Allowed reports whether the shadow limits would have admitted it.
	Allowed bool `json:"allowed"`
	// Reason is the reason they would have refused it with; empty when
	// Allowed.
	Reason string `json:"reason"`
}

// RateLimited reports whether the request was refused because a window is
// full; retrying after RetryAfter seconds can succeed.
func (d *Decision) RateLimited() bool { return d.StatusCode == http.StatusTooManyRequests }

// Windows is a user's state in each rolling window after a check.
type Windows struct {
	Minute Window `json:"minute"`
	Hour   Window `json:"hour"`
	Day    Window `json:"day"`
}

// Window is one rolling window's state.
type Window struct {
	// Limit is the window's ceiling (the minute's includes the burst).
	Limit int64 `json:"limit"`
	// Remaining is how many more requests the window admits.
	Remaining int64 `json:"remaining"`
	// Reset is the whole seconds until the window next frees a slot.
	Reset int64 `json:"reset"`
	// Tokens is the window's tokens; nil unless the tier limits them.
	Tokens *WindowTokens `json:"tokens"`
	// Cost is the window's spend; nil unless the tier limits it.
	Cost *WindowCost `json:"cost"`
}

// WindowTokens is one window's tokens under the tier's token limit.
type WindowTokens struct {
	Limit int64 `json:"limit"`
	// Used is the tokens of calls finished in the window plus the
	// reservations of calls open, this call's included when admitted.
	Used      int64 `json:"used"`
	Remaining int64 `json:"remaining"`
	// Reset is the whole seconds until the oldest finished tokens in the
	// window leave it; 0 when none are.
	Reset int64 `json:"reset"`
}

// WindowCost is one window's spend under a spend limit, in US dollars as
// the service writes them: exact decimal strings such as "19.9875".
type WindowCost struct {
	Limit string `json:"limit"`
	// Used is the cost of calls finished in the window plus the reserved
	// cost of calls open, this call's included when admitted.
	Used      string `json:"used"`
	Remaining string `json:"remaining"`
	// Reset is the whole seconds until the oldest finished spend in the
	// window leaves it; 0 when none is.
	Reset int64 `json:"reset"`
}

// Concurrency is a user's calls in flight against max_concurrent.
type Concurrency struct {
	Limit    int64 `json:"limit"`
	InFlight int64 `json:"in_flight"`
}

// Check asks whether req may go to the model now and, when admitted,
// records it. A refusal is a Decision with Allowed false, not an error.
func (c *Client) Check(ctx context.Context, req CheckRequest) (Decision, error) {
	return c.check(ctx, req, false)
}

// CheckDryRun answers exactly as Check would and records nothing, for
// showing a user's remaining quota.
func (c *Client) CheckDryRun(ctx context.Context, req CheckRequest) (Decision, error) {
	return c.check(ctx, req, true)
}

func (c *Client) check(ctx context.Context, req CheckRequest, dryRun bool) (Decision, error) {
	cx := map[string]string{"user_id": req.UserID, "user_tier": req.Tier, "feature": req.Feature}
	if req.AccountID != "" {
		cx["account_id"] = req.AccountID
	}
	if req.RunID != "" {
		cx["run_id"] = req.RunID
	}
	if req.ParentRunID != "" {
		cx["parent_run_id"] = req.ParentRunID
	}
	body := map[string]any{"input_text": req.InputText, "context": cx}
	if req.Tokens != 0 {
		body["tokens"] = req.Tokens
	}
	if req.Model != "" {
		body["model"] = req.Model
	}
	path := "/v1/check"
	if dryRun {
		path += "?dry_run=true"
	}
	var raw []byte
	status, err := c.do(ctx, http.MethodPost, path, c.apiToken, body, &raw,
		http.StatusOK, http.StatusTooManyRequests, http.StatusForbidden)
	if err != nil {
		return Decision{}, err
	}
	// A 403 or 429 is a refusal only when it carries a decision: the
	// service's own 403 for a cross-site request, or a proxy's 429, carries
	// a message or nothing, and reading it as a refusal would lose why.
	var shape struct {
		Allowed   *bool   `json:"allowed"`
		Guardrail *string `json:"guardrail"`
		Message   string  `json:"message"`
	}
	if err := json.Unmarshal(raw, &shape); err != nil || shape.Allowed == nil || shape.Guardrail == nil {
		e := &Error{StatusCode: status, Message: shape.Message}
		if e.Message == "" {
			e.Message = "answer without a decision: " + http.StatusText(status)
		}
		return Decision{}, e
	}
	var d Decision
	if err := json.Unmarshal(raw, &d); err != nil {
		return Decision{}, fmt.Errorf("policyguard client: POST %s: decoding the answer: %w", path, err)
	}
	d.StatusCode = status
	return d, nil
}

// Tier is a subscription plan: the limits of its rolling windows, the
// features it includes and the models its users may call.
type Tier struct {
	Name string `json:"name"`
	// Limits are the tier's own limits.
	Limits
	Features    []string `json:"features"`
	Description string   `json:"description"`
	// Models lists the models the tier's users may call through the
	// gateway, each exact or ending in a "*" wildcard ("gpt-4o-mini*"
	// matches every name that begins "gpt-4o-mini"); nil allows any
	// model, an empty list none.
	Models []string `json:"models"`
	// UpdatedAt is the time of the last change; zero for a seeded tier
	// never changed. The service sets it; PutTier does not send it.
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	// Shadow holds limits every check under the tier is also decided
	// against and never refused by; nil for none.
	Shadow *ShadowLimits `json:"shadow,omitzero"`
	// Account holds the pooled limits of an account on this plan, which
	// every member's check must also pass; nil for none.
	Account *Limits `json:"account,omitzero"`
	// Run holds the limits of each run of an agent under the tier; nil
	// for none.
	Run *RunLimits `json:"run,omitzero"`
}

// Preview is what replaying a tier's last day of requests through proposed
// limits found.
type Preview struct {
	Tier            string    `json:"tier"`
	From            time.Time `json:"from"`
	To              time.Time `json:"to"`
	Users           int64     `json:"users"`
	Requests        int64     `json:"requests"`
	UsersRefused    int64     `json:"users_refused"`
	RequestsRefused int64     `json:"requests_refused"`
	RefusedByWindow struct {
		Minute int64 `json:"minute"`
		Hour   int64 `json:"hour"`
		Day    int64 `json:"day"`
	} `json:"refused_by_window"`
	TopUsers []PreviewUser `json:"top_users"`
	// AccountsRefused counts the accounts whose pool had a request
	// refused, RefusedByAccountWindow those requests by window: the
	// figures above are users' own.
	AccountsRefused        int64 `json:"accounts_refused"`
	RefusedByAccountWindow struct {
		Minute int64 `json:"minute"`
		Hour   int64 `json:"hour"`
		Day    int64 `json:"day"`
	} `json:"refused_by_account_window"`
}

// PreviewUser is one user's share of a Preview.
type PreviewUser struct {
	UserID   string `json:"user_id"`
	Requests int64  `json:"requests"`
	Refused  int64  `json:"refused"`
}

// PreviewTier replays the requests recorded under t.Name in the last 24
// hours through t's request limits and reports what they would have
// refused. It changes nothing; an unknown tier is an *Error with status 404.
func (c *Client) PreviewTier(ctx context.Context, t Tier) (Preview, error) {
	var out Preview
	_, err := c.do(ctx, http.MethodPost, "/v1/tiers/"+url.PathEscape(t.Name)+"/preview", c.adminToken, tierBody(t), &out, http.StatusOK)
	return out, err
}

// PromoteTier makes the named tier's shadow limits its real limits, in one
// audited change, and returns the tier as stored. A tier without shadow
// limits is an *Error with status 400.
func (c *Client) PromoteTier(ctx context.Context, name string) (Tier, error) {
	var out Tier
	_, err := c.do(ctx, http.MethodPost, "/v1/tiers/"+url.PathEscape(name)+"/promote", c.adminToken, nil, &out, http.StatusOK)
	return out, err
}

// Tiers returns every tier, ordered by name.
func (c *Client) Tiers(ctx context.Context) ([]Tier, error) {
	var out struct {
		Tiers []Tier `json:"tiers"`
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/tiers", c.adminToken, nil, &out, http.StatusOK)
	return out.Tiers, err
}

// Tier returns the named tier; an unknown one is an *Error with status 404.
func (c *Client) Tier(ctx context.Context, name string) (Tier, error) {
	var t Tier
	_, err := c.do(ctx, http.MethodGet, "/v1/tiers/"+url.PathEscape(name), c.adminToken, nil, &t, http.StatusOK)
	return t, err
}

// PutTier creates or replaces t.Name and returns the tier as stored and
// whether it was created. The change applies to the very next check.
func (c *Client) PutTier(ctx context.Context, t Tier) (Tier, bool, error) {
	var out Tier
	status, err := c.do(ctx, http.MethodPut, "/v1/tiers/"+url.PathEscape(t.Name), c.adminToken, tierBody(t), &out,
		http.StatusOK, http.StatusCreated)
	return out, status == http.StatusCreated, err
}

// CreateTier creates t.Name and returns the tier as stored. It never
// replaces a tier: if one of that name exists, it returns an *Error with
// status 412 and changes nothing (the request carries If-None-Match: *).
func (c *Client) CreateTier(ctx context.Context, t Tier) (Tier, error) {
	var out Tier
	_, err := c.doWithHeader(ctx, http.Header{"If-None-Match": {"*"}}, http.MethodPut, "/v1/tiers/"+url.PathEscape(t.Name),
		c.adminToken, tierBody(t), &out, http.StatusCreated)
	return out, err
}

// tierBody is t as a PUT sends it: without UpdatedAt, which the service
// sets, and with features as a list even when there are none.
func tierBody(t Tier) Tier {
	t.UpdatedAt = time.Time{}
	if t.Features == nil {
		t.Features = []string{}
	}
	return t
}

// DeleteTier removes the named tier. The service refuses (409) to delete
// its default tier.
func (c *Client) DeleteTier(ctx context.Context, name string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/tiers/"+url.PathEscape(name), c.adminToken, nil, nil, http.StatusNoContent)
	return err
}

// Usage is a user's recorded requests in each window.
type Usage struct {
	UserID string `json:"user_id"`
	// Tier is the tier the limits are of; empty when none was asked for.
	Tier    string `json:"tier"`
	Windows struct {
		Minute UsageWindow `json:"minute"`
		Hour   UsageWindow `json:"hour"`
		Day    UsageWindow `json:"day"`
	} `json:"windows"`
	// CallsInFlight is the user's metered calls open now.
	CallsInFlight int64 `json:"calls_in_flight"`
	// Period is the user's current billing period: by its record's time
	// zone and anchor, else its account's, else the service's defaults.
	Period Period `json:"period"`
}

// Period is a billing period, from Start to End (not included), which carry
// the offset of the time zone named TimeZone.
type Period struct {
	Start         time.Time `json:"start"`
	End           time.Time `json:"end"`
	TimeZone      string    `json:"time_zone"`
	BillingAnchor int       `json:"billing_anchor"`
}

// UsageWindow is one window of a Usage. Limit, Remaining and Reset are set
// only when Usage was asked with a tier.
type UsageWindow struct {
	Count     int64 `json:"count"`
	Limit     int64 `json:"limit"`
	Remaining int64 `json:"remaining"`
	Reset     int64 `json:"reset"`
	// Tokens is the window's tokens: Used always; Limit, Remaining and
	// Reset when Usage was asked with a tier that limits them.
	Tokens UsageTokens `json:"tokens"`
	// Cost is the window's spend in dollars, as Tokens; nil from a
	// service that keeps no calls.
	Cost *UsageCost `json:"cost"`
}

// UsageCost is one window's spend in a Usage, in US dollars as decimal
// strings; Limit and Remaining are empty, and Reset 0, unless Usage was
// asked with a tier that limits spend.
type UsageCost struct {
	Used      string `json:"used"`
	Limit     string `json:"limit"`
	Remaining string `json:"remaining"`
	Reset     int64  `json:"reset"`
}

// UsageTokens is one window's tokens in a Usage.
type UsageTokens struct {
	Used      int64 `json:"used"`
	Limit     int64 `json:"limit"`
	Remaining int64 `json:"remaining"`
	Reset     int64 `json:"reset"`
}

// Usage returns userID's counts in each window and, with a tier name, that
// tier's limits, remaining quota and reset.
func (c *Client) Usage(ctx context.Context, userID, tier string) (Usage, error) {
	path := "/v1/usage/" + url.PathEscape(userID)
	if tier != "" {
		path += "?tier=" + url.QueryEscape(tier)
	}
	var u Usage
	_, err := c.do(ctx, http.MethodGet, path, c.adminToken, nil, &u, http.StatusOK)
	return u, err
}

// ForgetUser deletes userID's recorded requests: its quota starts afresh.
func (c *Client) ForgetUser(ctx context.Context, userID string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/usage/"+url.PathEscape(userID), c.adminToken, nil, nil, http.StatusNoContent)
	return err
}

// Call is a metered call as the call routes answer it.
type Call struct {
	ID     string `json:"call_id"`
	UserID string `json:"user_id"`
	// Tokens is what the call counts once finished; 0 while open.
	Tokens int64 `json:"tokens"`
	// Reserved is the tokens its check reserved.
	Reserved  int64     `json:"reserved"`
	OpenedAt  time.Time `json:"opened_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// FinishedAt is when the call finished; zero while it is open.
	FinishedAt time.Time `json:"finished_at"`
	// Expired reports whether the service finished the call at its expiry
	// because no finish or keepalive came in time.
	Expired bool `json:"expired"`
	// Model is the model its check named; empty for none.
	Model string `json:"model"`
	// PriceVersion is the version of the price table that prices the
	// call, the one in force when it was admitted; 0 when unpriced.
	PriceVersion int64 `json:"price_version"`
	// ReservedCost and Cost are what its reservation costs and what it
	// cost once finished, in US dollars as exact decimal strings; empty
	// when unpriced, and Cost while the call is open.
	ReservedCost string `json:"reserved_cost"`
	Cost         string `json:"cost"`
}

// CallUsage is the tokens a call used by the price each is billed at, as
// a provider reports them.
type CallUsage struct {
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	CacheReadTokens  int64 `json:"cache_read_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
}

// FinishCall finishes the call named id (Decision.CallID) with the tokens
// it used; nil tokens lets its reservation stand as used. A priced call
// costs its tokens at its model's highest per-token price; FinishCallUsage
// prices them exactly. Finishing again with the same count is no error, so
// a caller may retry; a different count after the call finished is an
// *Error with status 409, an unknown id 404.
func (c *Client) FinishCall(ctx context.Context, id string, tokens *int64) (Call, error) {
	var body any
	if tokens != nil {
		body = map[string]int64{"tokens": *tokens}
	}
	var out Call
	_, err := c.do(ctx, http.MethodPost, "/v1/calls/"+url.PathEscape(id)+"/finish", c.apiToken, body, &out, http.StatusOK)
	return out, err
}

// FinishCallUsage finishes the call named id as FinishCall does, with the
// tokens it used split by price, which a priced call costs exactly.
func (c *Client) FinishCallUsage(ctx context.Context, id string, usage CallUsage) (Call, error) {
	var out Call
	_, err := c.do(ctx, http.MethodPost, "/v1/calls/"+url.PathEscape(id)+"/finish", c.apiToken,
		map[string]CallUsage{"usage": usage}, &out, http.StatusOK)
	return out, err
}

// KeepAlive moves the expiry of the open call named id to now plus the
// service's call timeout, so a long call keeps its slot, and returns the
// call. A finished or expired call is an *Error with status 409, an unknown
// id 404.
func (c *Client) KeepAlive(ctx context.Context, id string) (Call, error) {
	var out Call
	_, err := c.do(ctx, http.MethodPost, "/v1/calls/"+url.PathEscape(id)+"/keepalive", c.apiToken, nil, &out, http.StatusOK)
	return out, err
}

// do sends one request with in as its JSON body (none when nil) and decodes
// the answer into out when its status is one of ok; an out of type *[]byte
// gets the answer's bytes as they came. Any other status is an *Error.
func (c *Client) do(ctx context.Context, method, path, token string, in, out any, ok ...int) (int, error) {
	return c.doWithHeader(ctx, nil, method, path, token, in, out, ok...)
}

// doWithHeader is do with extra request header fields.
func (c *Client) doWithHeader(ctx context.Context, header http.Header, method, path, token string, in, out any, ok ...int) (int, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, fmt.Errorf("policyguard client: %w", err)
		}
		body = bytes.NewReader(b)
	}
	// The path is already escaped; appending it to the base keeps a base
	// path such as https://gateway/policyguard.
	u, err := url.Parse(c.base.String() + path)
	if err != nil {
		return 0, fmt.Errorf("policyguard client: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return 0, fmt.Errorf("policyguard client: %w", err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := c.hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("policyguard client: %s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, maxAnswerBytes))
	if err != nil {
		return res.StatusCode, fmt.Errorf("policyguard client: %s %s: reading the answer: %w", method, path, err)
	}
	for _, s := range ok {
		if res.StatusCode != s {
			continue
		}
		if b, ok := out.(*[]byte); ok {
			*b = data // for the caller to read as it sees fit
			return res.StatusCode, nil
		}
		if out != nil {
			if err := json.Unmarshal(data, out); err != nil {
				return res.StatusCode, fmt.Errorf("policyguard client: %s %s: decoding the answer: %w", method, path, err)
			}
		}
		return res.StatusCode, nil
	}
	e := &Error{StatusCode: res.StatusCode}
	var msg struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(data, &msg) == nil && msg.Message != "" {
		e.Message = msg.Message
	} else {
		e.Message = http.StatusText(res.StatusCode)
	}
	return res.StatusCode, e
}
