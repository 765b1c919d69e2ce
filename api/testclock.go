package api

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// testClockFormat is RFC 3339 with every fractional digit, so that clients
// see a fixed-width time and the clock's exact reading.
const testClockFormat = "2006-01-02T15:04:05.000000000Z07:00"

// testClockAnswer is the body of both test clock routes.
type testClockAnswer struct {
	Now string `json:"now"`
}

// testClockMove is the body of POST /v1/test/clock: exactly one member.
type testClockMove struct {
	Advance *string `json:"advance"`
	Set     *string `json:"set"`
}

// testClockRoutes registers GET and POST /v1/test/clock when the server
// runs on a test clock; without one the routes do not exist (404).
func (s *Server) testClockRoutes() {
	if s.testClock == nil {
		return
	}
	s.echo.GET("/v1/test/clock", s.handleGetTestClock)
	s.echo.POST("/v1/test/clock", s.handleMoveTestClock, requireJSON)
}

func (s *Server) handleGetTestClock(c echo.Context) error {
	return c.JSON(http.StatusOK, testClockAnswer{Now: s.testClock.Now().Format(testClockFormat)})
}

// handleMoveTestClock moves the clock by {"advance": "<Go duration>"},
// which must not be negative, or to {"set": "<RFC 3339>"}, forward or back.
func (s *Server) handleMoveTestClock(c echo.Context) error {
	var in testClockMove
	if err := readJSON(c.Request().Body, &in, strictOptions); err != nil {
		return err
	}
	var now time.Time
	switch {
	case (in.Advance == nil) == (in.Set == nil):
		return policy.Errorf(policy.EINVALID, `send exactly one of "advance" (a Go duration such as "90s") and "set" (an RFC 3339 time)`)
	case in.Advance != nil:
		d, err := time.ParseDuration(*in.Advance)
		if err != nil {
			return policy.Errorf(policy.EINVALID, "advance %q: not a Go duration such as 90s or 1h30m", *in.Advance)
		}
		if d < 0 {
			return policy.Errorf(policy.EINVALID, "advance %q: must not be negative; use set to move the clock back", *in.Advance)
		}
		now = s.testClock.Advance(d)
	default:
		t, err := time.Parse(time.RFC3339Nano, *in.Set)
		if err != nil {
			return policy.Errorf(policy.EINVALID, "set %q: not an RFC 3339 time such as 2026-01-02T15:04:05Z", *in.Set)
		}
		now = s.testClock.Set(t)
	}
	return c.JSON(http.StatusOK, testClockAnswer{Now: now.Format(testClockFormat)})
}

// healthy is the body of a healthy GET /healthz; on a test clock it says
// so, so that a test service is never taken for a real one.
func (s *Server) healthy() any {
	if s.testClock != nil {
		return struct {
			Status    string `json:"status"`
			TestClock bool   `json:"test_clock"`
		}{"ok", true}
	}
	return map[string]string{"status": "ok"}
}
