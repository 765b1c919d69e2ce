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
		if !s.validAPIToken(bearerToken(c.Request())) {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="policyguard"`)
			return policy.Errorf(policy.EUNAUTHORIZED, "missing or wrong API token")
		}
		return next(c)
	}
}

// validAPIToken reports whether token is the API token. Like the admin
// token it is compared as a hash in constant time, so the time taken says
// nothing about how much of a guess was right.
func (s *Server) validAPIToken(token string) bool {
	got := sha256.Sum256([]byte(token))
	return token != "" && subtle.ConstantTimeCompare(got[:], s.apiToken[:]) == 1
}
