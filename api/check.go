package api

import (
	"strconv"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

type checkRequest struct {
	InputText string       `json:"input_text"`
	Context   checkContext `json:"context"`
	// Tokens is kept raw so that every value that is not an integer from
	// 0 to MaxLimit (a fraction, null, a string) gets one message.
	Tokens jsontext.Value `json:"tokens"`
}

type checkContext struct {
	UserID   string `json:"user_id"`
	UserTier string `json:"user_tier"`
	Feature  string `json:"feature"`
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
	tokens, err := checkTokens(body.Tokens)
	if err != nil {
		return err
	}
	req := policy.Request{
		InputText: body.InputText,
		UserID:    body.Context.UserID,
		Tier:      body.Context.UserTier,
		Feature:   body.Context.Feature,
		Tokens:    tokens,
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

// checkTokens reads the tokens of a check body: absent is 0, and anything
// but an integer from 0 to MaxLimit is refused.
func checkTokens(raw jsontext.Value) (int64, error) {
	if raw == nil {
		return 0, nil
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || n < 0 || n > policy.MaxLimit {
		return 0, policy.Errorf(policy.EINVALID, "tokens must be an integer from 0 to %d", policy.MaxLimit)
	}
	return n, nil
}
