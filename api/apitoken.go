package api

import (
	"crypto/sha256"
	"crypto/subtle"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// requireAPIToken lets a check through only with "Authorization: Bearer
// <api token>" when the server has an API token; without one every check
// is let through, as on a loopback address. The comparison is of hashes in
// constant time, as for the admin token.
func (s *Server) requireAPIToken(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.apiToken == nil {
			return next(c)
		}
		token := bearerToken(c.Request())
		got := sha256.Sum256([]byte(token))
		if token == "" || subtle.ConstantTimeCompare(got[:], s.apiToken[:]) != 1 {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="policyguard"`)
			return policy.Errorf(policy.EUNAUTHORIZED, "missing or wrong API token")
		}
		return next(c)
	}
}
