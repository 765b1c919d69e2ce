package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// auditJSON is an entry of the audit log on the wire. Old and New are the
// thing before and after as JSON objects with the API's field names, null
// for none.
type auditJSON struct {
	ID      int64          `json:"id"`
	At      time.Time      `json:"at"`
	Actor   string         `json:"actor"`
	Kind    string         `json:"kind"`
	Subject string         `json:"subject"`
	Action  string         `json:"action"`
	Source  string         `json:"source"`
	Old     jsontext.Value `json:"old"`
	New     jsontext.Value `json:"new"`
}

func auditToJSON(e policy.AuditEntry) auditJSON {
	raw := func(s string) jsontext.Value {
		if s == "" {
			return jsontext.Value("null")
		}
		return jsontext.Value(s)
	}
	return auditJSON{ID: e.ID, At: e.At.UTC(), Actor: e.Actor, Kind: e.Kind, Subject: e.Subject, Action: e.Action,
		Source: e.Source, Old: raw(e.Old), New: raw(e.New)}
}

// auditQuery reads GET /v1/audit's ?actor=, ?kind=, ?since= and ?until=
// (RFC 3339 times), and its page: ?limit= and ?after=, the id of the last
// entry of the page before.
func auditQuery(c echo.Context) (policy.AuditQuery, error) {
	q := policy.AuditQuery{Actor: c.QueryParam("actor"), Kind: c.QueryParam("kind"), Limit: DefaultUsersPage}
	for name, t := range map[string]*time.Time{"since": &q.Since, "until": &q.Until} {
		if v := c.QueryParam(name); v != "" {
			var err error
			if *t, err = time.Parse(time.RFC3339Nano, v); err != nil {
				return q, policy.Errorf(policy.EINVALID, "%s must be a time in RFC 3339 (2026-01-02T15:04:05Z), not %s", name, policy.Quote(v))
			}
		}
	}
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxUsersPage {
			return q, policy.Errorf(policy.EINVALID, "limit must be an integer from 1 to %d", MaxUsersPage)
		}
		q.Limit = n
	}
	if v := c.QueryParam("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return q, policy.Errorf(policy.EINVALID, "after must be the id of an entry: the next of the page before")
		}
		q.Before = n
	}
	return q, nil
}

func (s *Server) handleAudit(c echo.Context) error {
	q, err := auditQuery(c)
	if err != nil {
		return err
	}
	limit := q.Limit
	q.Limit++ // one more than asked, to know whether there is a next page
	entries, err := s.svc.AuditLog(c.Request().Context(), q)
	if err != nil {
		return err
	}
	var next *string
	if len(entries) > limit {
		entries = entries[:limit]
		n := strconv.FormatInt(entries[limit-1].ID, 10)
		next = &n
	}
	out := make([]auditJSON, len(entries))
	for i, e := range entries {
		out[i] = auditToJSON(e)
	}
	return c.JSON(http.StatusOK, struct {
		Entries []auditJSON `json:"entries"`
		Next    *string     `json:"next"`
	}{out, next})
}
