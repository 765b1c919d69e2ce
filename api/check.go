package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

type checkRequest struct {
	InputText string       `json:"input_text"`
	Context   checkContext `json:"context"`
}

type checkContext struct {
	UserID   string `json:"user_id"`
	UserTier string `json:"user_tier"`
	Feature  string `json:"feature"`
}

// decisionResponse is the body of every check answer: 200, 403 and 429.
type decisionResponse struct {
	Allowed    bool            `json:"allowed"`
	Reason     *string         `json:"reason"`
	RetryAfter int64           `json:"retry_after"`
	Tier       string          `json:"tier"`
	Guardrail  string          `json:"guardrail"`
	Windows    windowsResponse `json:"windows"`
}

type windowsResponse struct {
	Minute windowResponse `json:"minute"`
	Hour   windowResponse `json:"hour"`
	Day    windowResponse `json:"day"`
}

type windowResponse struct {
	Limit     int64 `json:"limit"`
	Remaining int64 `json:"remaining"`
	Reset     int64 `json:"reset"`
}

func (s *Server) handleCheck(c echo.Context) error {
	start := time.Now()
	dryRun := false
	if v := c.QueryParam("dry_run"); v != "" {
		var err error
		if dryRun, err = strconv.ParseBool(v); err != nil {
			return policy.Errorf(policy.EINVALID, "dry_run must be true or false")
		}
	}
	var body checkRequest
	if err := decodeJSON(c.Request().Body, &body, false); err != nil {
		return err
	}
	req := policy.Request{
		InputText: body.InputText,
		UserID:    body.Context.UserID,
		Tier:      body.Context.UserTier,
		Feature:   body.Context.Feature,
	}
	d, err := s.svc.Check(c.Request().Context(), req, dryRun)
	s.metrics.observeCheck(&d, err, dryRun, time.Since(start))
	if policy.ErrorCode(err) == policy.EUNAVAILABLE {
		return s.checkStorageFailed(c, req, err)
	}
	if err != nil {
		return err
	}
	res := decisionResponse{
		Allowed:    d.Allowed(),
		RetryAfter: d.RetryAfter,
		Tier:       d.Tier,
		Guardrail:  d.Guardrail,
	}
	if d.Reason != "" {
		res.Reason = &d.Reason
	}
	if w := d.Windows; w != nil {
		res.Windows = windowsResponse{
			Minute: windowOf(w[policy.Minute]),
			Hour:   windowOf(w[policy.Hour]),
			Day:    windowOf(w[policy.Day]),
		}
	}
	setRateLimitHeaders(c.Response().Header(), d.Windows)
	status := http.StatusOK
	switch d.Outcome {
	case policy.RateLimited:
		status = http.StatusTooManyRequests
		c.Response().Header().Set("Retry-After", strconv.FormatInt(d.RetryAfter, 10))
	case policy.Denied:
		status = http.StatusForbidden
	}
	return c.JSON(status, res)
}

func windowOf(w policy.WindowState) windowResponse {
	return windowResponse{Limit: w.Limit, Remaining: w.Remaining, Reset: w.Reset}
}
