package api

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// decisionBody returns the body of a check answer for d.
func decisionBody(d *policy.Decision) decisionResponse {
	res := decisionResponse{
		Allowed:    d.Allowed(),
		RetryAfter: d.RetryAfter,
		Tier:       d.Tier,
		Guardrail:  d.Guardrail,
	}
	if d.Reason != "" {
		res.Reason = &d.Reason
	}
	if d.CallID != "" {
		res.CallID = &d.CallID
	}
	if c := d.Concurrency; c != nil {
		res.Concurrency = &concurrencyResponse{Limit: c.Limit, InFlight: c.InFlight}
	}
	if w := d.Windows; w != nil {
		res.Windows = windowsResponse{
			Minute: windowOf(w[policy.Minute]),
			Hour:   windowOf(w[policy.Hour]),
			Day:    windowOf(w[policy.Day]),
		}
	}
	if sd := d.Shadow; sd != nil {
		res.Shadow = &shadowResponse{Allowed: sd.Allowed}
		if r := sd.Reason(); r != "" {
			res.Shadow.Reason = &r
		}
	}
	return res
}

// decisionStatus returns the status of a check answer for d: 200 when
// admitted, 429 when rate-limited, 403 when denied.
func decisionStatus(d *policy.Decision) int {
	switch d.Outcome {
	case policy.RateLimited:
		return http.StatusTooManyRequests
	case policy.Denied:
		return http.StatusForbidden
	}
	return http.StatusOK
}

// setDecisionHeaders sets the header fields of a check answer for d: the
// rate-limit fields, and Retry-After when rate-limited.
func setDecisionHeaders(h http.Header, d *policy.Decision) {
	setRateLimitHeaders(h, d.Windows)
	setTokenHeaders(h, d.Windows)
	if d.Outcome == policy.RateLimited {
		h.Set("Retry-After", strconv.FormatInt(d.RetryAfter, 10))
	}
}

// writeDecision answers c with d as POST /v1/check does, so a check and a
// route guarded by Guard answer alike: the status, the header fields and
// the decision as the body.
func writeDecision(c echo.Context, d *policy.Decision) error {
	setDecisionHeaders(c.Response().Header(), d)
	return c.JSON(decisionStatus(d), decisionBody(d))
}
