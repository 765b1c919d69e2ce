package api

import (
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
	if c.Request().URL.RawQuery != "" { // parsing a query allocates; most checks have none
		if v := c.QueryParam("dry_run"); v != "" {
			var err error
			if dryRun, err = strconv.ParseBool(v); err != nil {
				return policy.Errorf(policy.EINVALID, "dry_run must be true or false")
			}
		}
	}
	var body checkRequest
	if err := readJSON(c.Request().Body, &body, checkBodyOptions); err != nil {
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
	return writeDecision(c, &d)
}

func windowOf(w policy.WindowState) windowResponse {
	return windowResponse{Limit: w.Limit, Remaining: w.Remaining, Reset: w.Reset}
}
