package api

import (
	"log/slog"
	"net/http"
	"sync/atomic"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// failOpen is what a check does when storage cannot decide it. Its zero
// value fails closed.
type failOpen struct {
	enabled  bool
	admitted atomic.Int64
}

// storageFailureResponse is the body of a check that storage could not
// decide: a decision, so that a client reading only "allowed" reads the
// right thing, with the failure in message.
type storageFailureResponse struct {
	Allowed    bool    `json:"allowed"`
	Reason     *string `json:"reason"`
	RetryAfter int64   `json:"retry_after"` // always 0: nobody knows when storage comes back
	Tier       string  `json:"tier"`
	Guardrail  string  `json:"guardrail"`
	CallID     *string `json:"call_id"` // always null: no call is opened
	Message    string  `json:"message"`
}

// FailOpenAdmissions returns how many checks were admitted because storage
// failed and Config.FailOpen was set.
func (s *Server) FailOpenAdmissions() int64 { return s.failOpen.admitted.Load() }

// checkStorageFailed answers a check whose storage failed (err has code
// EUNAVAILABLE). By default it fails closed: 503 with allowed false and
// the failure in message. With Config.FailOpen it admits the request,
// recording nothing, and counts and logs the admission.
func (s *Server) checkStorageFailed(c echo.Context, req policy.Request, err error) error {
	user, tier := req.UserID, req.Tier
	if user == "" {
		user = policy.AnonymousUser
	}
	if tier == "" {
		tier = s.svc.DefaultTier()
	}
	msg := policy.ErrorMessage(err)
	if !s.failOpen.enabled {
		s.logRequest(c, slog.LevelError, "request failed", slog.Int("status", http.StatusServiceUnavailable), slog.Any("err", err))
		reason := "storage unavailable"
		return c.JSON(http.StatusServiceUnavailable, storageFailureResponse{
			Allowed: false, Reason: &reason, Tier: tier, Guardrail: "rate_limiter", Message: msg,
		})
	}
	n := s.failOpen.admitted.Add(1)
	s.metrics.failOpen.Inc()
	s.logRequest(c, slog.LevelWarn, "check admitted without a decision (fail-open)",
		slog.String("user_id", user), slog.String("tier", tier), slog.Int64("fail_open_admissions", n), slog.Any("err", err))
	return c.JSON(http.StatusOK, storageFailureResponse{
		Allowed: true, Tier: tier, Guardrail: "fail_open", Message: "admitted without a check (fail-open): " + msg,
	})
}
