package api

import (
	"io"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// adminJSON is a named admin on the wire, as GET /v1/admins lists it:
// never its token.
type adminJSON struct {
	Name       string     `json:"name"`
	Role       string     `json:"role"`
	Note       string     `json:"note"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
}

func adminToJSON(a policy.Admin) adminJSON {
	utc := func(t *time.Time) *time.Time {
		if t == nil {
			return nil
		}
		u := t.UTC()
		return &u
	}
	return adminJSON{Name: a.Name, Role: a.Role.String(), Note: a.Note, CreatedAt: a.CreatedAt.UTC(),
		LastUsedAt: utc(a.LastUsedAt), RevokedAt: utc(a.RevokedAt)}
}

// adminBody is the body of POST /v1/admins and PUT /v1/admins/{name}.
type adminBody struct {
	Name *string `json:"name"`
	Role *string `json:"role"`
	Note string  `json:"note"`
}

// readAdminBody reads the body of c as an adminBody, its role parsed.
func readAdminBody(c echo.Context) (adminBody, policy.Role, error) {
	data, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return adminBody{}, 0, err // the body limit's 413, or a broken connection
	}
	var in adminBody
	if err := unmarshalObject(data, &in, strictOptions); err != nil {
		return adminBody{}, 0, err
	}
	if in.Role == nil {
		return adminBody{}, 0, policy.Errorf(policy.EINVALID, "role is required: viewer, support or admin")
	}
	role, err := policy.ParseRole(*in.Role)
	return in, role, err
}

func (s *Server) handleCreateAdmin(c echo.Context) error {
	in, role, err := readAdminBody(c)
	if err != nil {
		return err
	}
	if in.Name == nil {
		return policy.Errorf(policy.EINVALID, "name is required")
	}
	a, token, err := s.svc.CreateAdmin(c.Request().Context(), *in.Name, role, in.Note)
	if err != nil {
		return err
	}
	// The token is in this answer and nowhere else: no cache may keep it.
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusCreated, struct {
		Name      string    `json:"name"`
		Role      string    `json:"role"`
		Note      string    `json:"note"`
		Token     string    `json:"token"`
		CreatedAt time.Time `json:"created_at"`
	}{a.Name, a.Role.String(), a.Note, token, a.CreatedAt.UTC()})
}

func (s *Server) handleListAdmins(c echo.Context) error {
	admins, err := s.svc.Admins(c.Request().Context())
	if err != nil {
		return err
	}
	out := make([]adminJSON, len(admins))
	for i, a := range admins {
		out[i] = adminToJSON(a)
	}
	return c.JSON(http.StatusOK, struct {
		Admins []adminJSON `json:"admins"`
	}{out})
}

func (s *Server) handlePutAdmin(c echo.Context) error {
	name, err := pathParam(c, "name")
	if err != nil {
		return err
	}
	in, role, err := readAdminBody(c)
	if err != nil {
		return err
	}
	if in.Name != nil && *in.Name != name {
		return policy.Errorf(policy.EINVALID, "name %s in the body does not match %s in the path", policy.Quote(*in.Name), policy.Quote(name))
	}
	a, err := s.svc.SetAdminRole(c.Request().Context(), name, role)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, adminToJSON(a))
}

func (s *Server) handleRevokeAdmin(c echo.Context) error {
	name, err := pathParam(c, "name")
	if err != nil {
		return err
	}
	if err := s.svc.RevokeAdmin(c.Request().Context(), name); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
