package api

import (
	"bytes"
	"io"
	"net/http"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// finishRequest is the optional body of POST /v1/calls/{call_id}/finish.
type finishRequest struct {
	// Tokens is kept raw, as a check's is, so that every value that is not
	// an integer from 0 to MaxLimit gets one message.
	Tokens jsontext.Value `json:"tokens"`
	// Usage splits the tokens by the price each is billed at, so the call
	// is priced exactly; tokens alone are priced at the model's highest
	// price.
	Usage *usageRequest `json:"usage"`
}

// usageRequest is a finish's usage: every count optional, 0 when missing.
type usageRequest struct {
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	CacheReadTokens  int64 `json:"cache_read_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
}

// callResponse is the answer of the call routes: finish fills Tokens and
// FinishedAt, keepalive ExpiresAt.
type callResponse struct {
	CallID     string     `json:"call_id"`
	UserID     string     `json:"user_id"`
	Tokens     *int64     `json:"tokens,omitzero"`
	Reserved   int64      `json:"reserved"`
	OpenedAt   time.Time  `json:"opened_at"`
	ExpiresAt  time.Time  `json:"expires_at"`
	FinishedAt *time.Time `json:"finished_at,omitzero"`
	// Expired reports whether the service finished the call at its expiry
	// because no finish came before.
	Expired bool `json:"expired"`
	// Model is the model the check named, null for none.
	Model *string `json:"model"`
	// PriceVersion, ReservedCost and Cost are null for an unpriced call,
	// Cost also while the call is open; amounts are decimal dollars.
	PriceVersion *int64  `json:"price_version"`
	ReservedCost *string `json:"reserved_cost"`
	Cost         *string `json:"cost"`
}

func callToJSON(c policy.Call) callResponse {
	r := callResponse{CallID: c.ID, UserID: c.UserID, Reserved: c.Reserved,
		OpenedAt: c.OpenedAt.UTC(), ExpiresAt: c.ExpiresAt.UTC(), Expired: c.Expired}
	if !c.Open() {
		tokens, at := c.Tokens, c.FinishedAt.UTC()
		r.Tokens, r.FinishedAt = &tokens, &at
	}
	if c.Model != "" {
		r.Model = &c.Model
	}
	if c.Price != nil {
		version, reserved := c.PriceVersion, c.ReservedCost.String()
		r.PriceVersion, r.ReservedCost = &version, &reserved
		if !c.Open() {
			cost := c.Cost.String()
			r.Cost = &cost
		}
	}
	return r
}

func (s *Server) handleFinishCall(c echo.Context) error {
	id, err := pathParam(c, "call_id")
	if err != nil {
		return err
	}
	data, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return err // the body limit's 413, or a broken connection
	}
	var report policy.Report
	// An empty body finishes the call with its reservation.
	if len(bytes.TrimLeft(data, " \t\r\n")) > 0 {
		var body finishRequest
		if err := unmarshalObject(data, &body, strictOptions); err != nil {
			return err
		}
		if body.Tokens != nil {
			n, err := checkTokens(body.Tokens)
			if err != nil {
				return err
			}
			report.Tokens = &n
		}
		if u := body.Usage; u != nil {
			report.Usage = &policy.TokenUsage{Input: u.InputTokens, Output: u.OutputTokens,
				CacheRead: u.CacheReadTokens, CacheWrite: u.CacheWriteTokens}
		}
	}
	before := s.svc.Now()
	call, err := s.svc.FinishCall(c.Request().Context(), id, report)
	s.metrics.observeFinish(&call, err, before)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, callToJSON(call))
}

func (s *Server) handleKeepAlive(c echo.Context) error {
	id, err := pathParam(c, "call_id")
	if err != nil {
		return err
	}
	call, err := s.svc.KeepAlive(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, callToJSON(call))
}
