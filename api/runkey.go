package api

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// An agent stops its own runaway run with the gateway key it calls the
// gateway with: POST /v1/runs/{run_id}/end takes an admin token of the
// admin role or a gateway key (policy.AccessAdminOrKey), and a key ends
// only its own user's runs. Another user's run is answered as one that
// does not exist, so that a key cannot learn which run ids others use.

// keyUserKey is where authorizeKey leaves the user of the gateway key a
// request was let in by.
const keyUserKey = "policyguard.key_user"

// authorizeKey lets c's request in by its gateway key ("Authorization:
// Bearer pgk_..."), for a route of policy.AccessAdminOrKey: byKey reports
// whether it did. A token that is no gateway key, or an unknown or
// revoked one, is left to the admin sign-in, which counts a wrong token
// against the client as it counts any. A service key is refused: it
// speaks for every user it names, and a run is its own user's.
func (s *Server) authorizeKey(c echo.Context) (byKey bool, err error) {
	token := bearerToken(c.Request())
	if !strings.HasPrefix(token, policy.KeyPrefix) {
		return false, nil
	}
	key, err := s.svc.Authenticate(c.Request().Context(), token)
	switch {
	case policy.ErrorCode(err) == policy.EUNAUTHORIZED:
		return false, nil
	case err != nil:
		return false, err
	case key.Service:
		return false, policy.Errorf(policy.EFORBIDDEN, "a service key cannot end runs: end a run with its user's own gateway key, or as an admin")
	}
	c.Set(keyUserKey, key.UserID)
	// The audit log names the key that ended a run, as it names an admin.
	req := c.Request()
	c.SetRequest(req.WithContext(policy.WithChangeSource(policy.WithActor(req.Context(), key.ID), policy.SourceAPI)))
	return true, nil
}

// endOwnRun ends the run of a request let in by a gateway key, when it
// is the key's user's (policy.Service.EndOwnRun): another user's is a
// 404, worded as for an unknown id. A request of an admin goes on to
// the admin's handler.
func (s *Server) endOwnRun(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		user, byKey := c.Get(keyUserKey).(string)
		if !byKey {
			return next(c)
		}
		id, err := pathParam(c, "run_id")
		if err != nil {
			return err
		}
		r, err := s.svc.EndOwnRun(c.Request().Context(), user, id)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, runToJSON(&r))
	}
}
