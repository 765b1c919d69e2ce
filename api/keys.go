package api

import (
	"io"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// keyJSON is a gateway key on the wire, as GET /v1/keys lists it: never
// its secret.
type keyJSON struct {
	ID         string     `json:"id"`
	UserID     *string    `json:"user_id"` // null for a service key
	Service    bool       `json:"service"`
	Note       string     `json:"note"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
}

func keyToJSON(k policy.Key) keyJSON {
	j := keyJSON{ID: k.ID, Service: k.Service, Note: k.Note, CreatedAt: k.CreatedAt.UTC()}
	if !k.Service {
		j.UserID = &k.UserID
	}
	if k.LastUsedAt != nil {
		t := k.LastUsedAt.UTC()
		j.LastUsedAt = &t
	}
	return j
}

// createdKeyJSON is the answer of POST /v1/keys: the only one that holds
// the key's secret.
type createdKeyJSON struct {
	ID        string    `json:"id"`
	Key       string    `json:"key"`
	UserID    *string   `json:"user_id"`
	Service   bool      `json:"service"`
	Note      string    `json:"note"`
	CreatedAt time.Time `json:"created_at"`
}

// keyBody is the body of POST /v1/keys.
type keyBody struct {
	UserID  *string `json:"user_id"`
	Service *bool   `json:"service"`
	Note    string  `json:"note"`
}

func (s *Server) handleCreateKey(c echo.Context) error {
	data, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return err // the body limit's 413, or a broken connection
	}
	var in keyBody
	if err := unmarshalObject(data, &in, strictOptions); err != nil {
		return err
	}
	if in.UserID != nil && *in.UserID == "" {
		return policy.Errorf(policy.EINVALID, "user_id must not be empty: name the user, or send service true for a service key")
	}
	var userID string
	if in.UserID != nil {
		userID = *in.UserID
	}
	k, secret, err := s.svc.CreateKey(c.Request().Context(), userID, in.Service != nil && *in.Service, in.Note)
	if err != nil {
		return err
	}
	j := keyToJSON(k)
	// The secret is in this answer and nowhere else: no cache may keep it.
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusCreated, createdKeyJSON{ID: j.ID, Key: secret, UserID: j.UserID, Service: j.Service, Note: j.Note, CreatedAt: j.CreatedAt})
}

func (s *Server) handleListKeys(c echo.Context) error {
	q := c.QueryParams()
	userID, service := q.Get("user_id"), q.Has("service")
	switch {
	case service && q.Get("service") != "true":
		return policy.Errorf(policy.EINVALID, "service must be true: ?service=true lists the service keys")
	case service && userID != "":
		return policy.Errorf(policy.EINVALID, "name user_id or service=true, not both: a service key has no user")
	case !service && userID == "":
		return policy.Errorf(policy.EINVALID, "name whose keys to list: ?user_id=... for a user's, ?service=true for the service keys")
	}
	keys, err := s.svc.Keys(c.Request().Context(), userID)
	if err != nil {
		return err
	}
	out := make([]keyJSON, len(keys))
	for i, k := range keys {
		out[i] = keyToJSON(k)
	}
	return c.JSON(http.StatusOK, struct {
		Keys []keyJSON `json:"keys"`
	}{out})
}

func (s *Server) handleRevokeKey(c echo.Context) error {
	id, err := pathParam(c, "id")
	if err != nil {
		return err
	}
	if err := s.svc.RevokeKey(c.Request().Context(), id); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
