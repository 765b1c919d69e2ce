package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Admin is a named admin, without its token.
type Admin struct {
	Name string
	// Role is "viewer", "support" or "admin".
	Role      string
	Note      string
	CreatedAt time.Time
	// LastUsedAt is when the admin's token was last used, to the minute;
	// zero until first used.
	LastUsedAt time.Time
	// RevokedAt is when the admin was revoked; zero while it is live.
	RevokedAt time.Time
}

type adminWire struct {
	Name       string     `json:"name"`
	Role       string     `json:"role"`
	Note       string     `json:"note"`
	Token      string     `json:"token"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
}

func (w *adminWire) admin() Admin {
	a := Admin{Name: w.Name, Role: w.Role, Note: w.Note, CreatedAt: w.CreatedAt}
	if w.LastUsedAt != nil {
		a.LastUsedAt = *w.LastUsedAt
	}
	if w.RevokedAt != nil {
		a.RevokedAt = *w.RevokedAt
	}
	return a
}

// CreateAdmin makes a named admin of role ("viewer", "support" or
// "admin") and returns it with its token, shown this once: the service
// keeps only its hash. A name a live admin has is an *Error with status
// 409; an unknown role one with status 400.
func (c *Client) CreateAdmin(ctx context.Context, name, role, note string) (Admin, string, error) {
	in := struct {
		Name string `json:"name"`
		Role string `json:"role"`
		Note string `json:"note"`
	}{name, role, note}
	var out adminWire
	if _, err := c.do(ctx, http.MethodPost, "/v1/admins", c.adminToken, in, &out, http.StatusCreated); err != nil {
		return Admin{}, "", err
	}
	return out.admin(), out.Token, nil
}

// Admins returns every named admin, revoked ones too, by name.
func (c *Client) Admins(ctx context.Context) ([]Admin, error) {
	var out struct {
		Admins []adminWire `json:"admins"`
	}
	if _, err := c.do(ctx, http.MethodGet, "/v1/admins", c.adminToken, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	admins := make([]Admin, len(out.Admins))
	for i := range out.Admins {
		admins[i] = out.Admins[i].admin()
	}
	return admins, nil
}

// SetAdminRole gives the live admin name the role. Demoting the last
// admin of role admin is an *Error with status 409.
func (c *Client) SetAdminRole(ctx context.Context, name, role string) (Admin, error) {
	var out adminWire
	in := struct {
		Role string `json:"role"`
	}{role}
	if _, err := c.do(ctx, http.MethodPut, "/v1/admins/"+url.PathEscape(name), c.adminToken, in, &out, http.StatusOK); err != nil {
		return Admin{}, err
	}
	return out.admin(), nil
}

// RevokeAdmin revokes the live admin name: its token and page sessions
// are refused from their next request on, on every replica.
func (c *Client) RevokeAdmin(ctx context.Context, name string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/admins/"+url.PathEscape(name), c.adminToken, nil, nil, http.StatusNoContent)
	return err
}

// AuditEntry is one change in the audit log.
type AuditEntry struct {
	ID int64
	At time.Time
	// Actor is who made the change: an admin's name, "bootstrap" for the
	// service's admin token, a command's name, or "unknown".
	Actor string
	// Kind is "tiers", "users", "accounts", "keys", "usage", "prices" or
	// "admins"; Subject names what changed within it.
	Kind, Subject string
	// Action is "created", "updated", "deleted", "revoked" or
	// "forgotten"; Source the path it came through ("api", "admin",
	// "import", "library").
	Action, Source string
	// Old and New are the thing before and after, as JSON with the API's
	// field names; nil for none.
	Old, New []byte
}

// AuditQuery selects entries of the audit log; its zero value selects
// every one.
type AuditQuery struct {
	Actor, Kind  string
	Since, Until time.Time // zero: no bound
}

// Audit returns a page of the audit log's entries q selects, newest
// first: up to limit (0: the service's default) entries after the entry
// whose id is after (empty: from the newest), and the after of the next
// page, empty on the last.
func (c *Client) Audit(ctx context.Context, q AuditQuery, after string, limit int) (entries []AuditEntry, next string, err error) {
	v := url.Values{}
	for k, s := range map[string]string{"actor": q.Actor, "kind": q.Kind, "after": after} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if !q.Until.IsZero() {
		v.Set("until", q.Until.UTC().Format(time.RFC3339Nano))
	}
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	var out struct {
		Entries []struct {
			ID      int64           `json:"id"`
			At      time.Time       `json:"at"`
			Actor   string          `json:"actor"`
			Kind    string          `json:"kind"`
			Subject string          `json:"subject"`
			Action  string          `json:"action"`
			Source  string          `json:"source"`
			Old     json.RawMessage `json:"old"`
			New     json.RawMessage `json:"new"`
		} `json:"entries"`
		Next *string `json:"next"`
	}
	if _, err := c.do(ctx, http.MethodGet, "/v1/audit?"+v.Encode(), c.adminToken, nil, &out, http.StatusOK); err != nil {
		return nil, "", err
	}
	object := func(r json.RawMessage) []byte {
		if string(r) == "null" {
			return nil
		}
		return r
	}
	entries = make([]AuditEntry, len(out.Entries))
	for i, e := range out.Entries {
		entries[i] = AuditEntry{ID: e.ID, At: e.At, Actor: e.Actor, Kind: e.Kind, Subject: e.Subject, Action: e.Action, Source: e.Source,
			Old: object(e.Old), New: object(e.New)}
	}
	if out.Next != nil {
		next = *out.Next
	}
	return entries, next, nil
}
