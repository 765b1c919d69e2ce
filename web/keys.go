package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// adminKeys is a list of gateway keys and the form that makes one: a
// looked-up user's on their page, or the service keys on the Keys page.
type adminKeys struct {
	UserID  string // empty for the service keys
	Service bool   // the service keys, which act for any user
	CSRF    string // the session's, for the forms
	CanEdit bool   // the admin's role may make and revoke keys
	Rows    []adminKeyRow
	Fields  []adminField // the new key's note
}

// adminKeyRow is one key of the list: never its secret, which is not kept.
type adminKeyRow struct {
	ID, Note              string
	Created, CreatedISO   string
	LastUsed, LastUsedISO string // empty until first used
}

// adminNewKey is the page that shows a key just made, with its secret,
// this once.
type adminNewKey struct {
	UserID, ID, Note, Secret string // UserID is empty for a service key
	Back                     string // the page the key was made from
}

// keyTime is how the keys section writes a time: to the minute, as a
// key's last use is recorded.
const keyTime = "2006-01-02 15:04 UTC"

// keysPage is the page of the service keys.
const keysPage = "/admin/keys"

// keySection returns the keys section of user's page, or the service keys
// when user is empty, with the note typed into the form and its problem
// when making a key failed.
func (a *Admin) keySection(ctx context.Context, user, note, noteErr string) (*adminKeys, error) {
	keys, err := a.svc.Keys(ctx, user)
	if err != nil {
		return nil, err
	}
	k := &adminKeys{UserID: user, Service: user == "", CanEdit: roleOf(ctx) >= policy.RoleSupport}
	for _, key := range keys {
		row := adminKeyRow{ID: key.ID, Note: key.Note, Created: key.CreatedAt.UTC().Format(keyTime), CreatedISO: key.CreatedAt.UTC().Format(time.RFC3339)}
		if key.LastUsedAt != nil {
			row.LastUsed, row.LastUsedISO = key.LastUsedAt.UTC().Format(keyTime), key.LastUsedAt.UTC().Format(time.RFC3339)
		}
		k.Rows = append(k.Rows, row)
	}
	hint := "What the key is for, such as the agent or the machine that will hold it; at most 1024 bytes."
	if k.Service {
		hint = "What the key is for, such as the back end that will hold it; at most 1024 bytes."
	}
	k.Fields = []adminField{{ID: "key-note", Name: "note", Label: "Note of a new key", Value: note, Wide: true, Error: noteErr, Hint: hint}}
	return k, nil
}

func (a *Admin) handleKeysPage(c echo.Context) error {
	return a.renderKeys(c, http.StatusOK, "", "")
}

// renderKeys renders the page of the service keys, with the note typed
// into its form and the note's problem when making a key failed.
func (a *Admin) renderKeys(c echo.Context, status int, note, noteErr string) error {
	v := a.view(c, "Service keys", "keys")
	if !a.svc.KeepsKeys() {
		v.Message = "This service keeps no gateway keys."
		return a.render(c, status, "keys", v)
	}
	keys, err := a.keySection(c.Request().Context(), "", note, noteErr)
	if err != nil {
		return a.fail(c, err)
	}
	keys.CSRF = v.CSRF
	v.Keys = keys
	return a.render(c, status, "keys", v)
}

// userPage is the look-up page of user.
func userPage(user string) string { return "/admin/usage?" + url.Values{"user_id": {user}}.Encode() }

// keyFormService reports whether a key form is the Keys page's, which
// makes and revokes service keys, rather than a user's page's.
func keyFormService(form url.Values) bool { return form.Get("service") == "true" }

func (a *Admin) handleCreateKey(c echo.Context) error {
	form, err := c.FormParams()
	if err != nil {
		return a.renderError(c, http.StatusBadRequest, "Bad form", "The form could not be read.")
	}
	service, user := keyFormService(form), form.Get("user_id")
	switch {
	case service && user != "":
		return a.renderError(c, http.StatusBadRequest, "Bad form", "A service key has no user.")
	case !service && (user == "" || policy.ValidateUserID(user) != nil):
		return a.renderError(c, http.StatusBadRequest, "No user", "Look up a user before making them a key.")
	}
	note := strings.ReplaceAll(form.Get("note"), "\r\n", "\n")
	k, secret, err := a.svc.CreateKey(c.Request().Context(), user, service, note)
	switch {
	case policy.ErrorCode(err) == policy.EINVALID && service:
		return a.renderKeys(c, http.StatusBadRequest, note, policy.ErrorMessage(err))
	case policy.ErrorCode(err) == policy.EINVALID:
		return a.renderUsage(c, user, "", true, usageForms{keyNote: note, keyErr: policy.ErrorMessage(err)})
	case err != nil:
		return a.fail(c, err)
	}
	// The secret goes on this page, the answer to the form, and nowhere
	// else: not in a redirect, a flash kept in memory or the session, so
	// that it is shown once whichever replica serves the next page.
	title, nav, back := "New key for user "+user, "usage", userPage(user)
	if service {
		title, nav, back = "New service key", "keys", keysPage
	}
	v := a.view(c, title, nav)
	v.NewKey = &adminNewKey{UserID: user, ID: k.ID, Note: k.Note, Secret: secret, Back: back}
	return a.render(c, http.StatusOK, "key", v)
}

func (a *Admin) handleRevokeKey(c echo.Context) error {
	id, err := pathParam(c, "id")
	if err != nil {
		return a.fail(c, err)
	}
	form, err := c.FormParams()
	if err != nil {
		return a.renderError(c, http.StatusBadRequest, "Bad form", "The form could not be read.")
	}
	if err := a.svc.RevokeKey(c.Request().Context(), id); err != nil {
		return a.fail(c, err)
	}
	back := "/admin/usage"
	switch user := form.Get("user_id"); {
	case keyFormService(form):
		back = keysPage
	case user != "":
		back = userPage(user)
	}
	a.flash(c, fmt.Sprintf("Revoked key %s — the gateway refuses it from its next request on", id))
	return c.Redirect(http.StatusSeeOther, back)
}
