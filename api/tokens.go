package api

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/api/auth"
	"github.com/policyguard/policyguard/policy"
)

// requireAdmin lets through requests with "Authorization: Bearer <admin
// token>". Wrong tokens count against the client in the same auth.Gate as
// the admin page's sign-in, so the API is no way around its throttle.
func (s *Server) requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		ok, secs := s.admin.Admit(auth.Client(c), auth.BearerToken(c.Request()), s.svc.Now())
		if secs > 0 {
			c.Response().Header().Set("Retry-After", strconv.FormatInt(secs, 10))
			return echo.NewHTTPError(http.StatusTooManyRequests,
				fmt.Sprintf("too many wrong admin tokens from your address: try again in %d seconds", secs))
		}
		if !ok {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="policyguard"`)
			return policy.Errorf(policy.EUNAUTHORIZED, "missing or wrong admin token")
		}
		return next(c)
	}
}

// requireAPIToken lets a check through only with "Authorization: Bearer
// <api token>" when the server has an API token; without one every check
// is let through, as on a loopback address.
func (s *Server) requireAPIToken(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.apiToken == nil {
			return next(c)
		}
		if !s.apiToken.Matches(auth.BearerToken(c.Request())) {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="policyguard"`)
			return policy.Errorf(policy.EUNAUTHORIZED, "missing or wrong API token")
		}
		return next(c)
	}
}
