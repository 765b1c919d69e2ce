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

// adminKeys is the gateway keys section of a looked-up user: their keys
// and the form that makes one.
type adminKeys struct {
	UserID string
	Rows   []adminKeyRow
	Fields []adminField // the new key's note
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
	UserID, ID, Note, Secret string
	Back                     string // the user's page
}

// keyTime is how the keys section writes a time: to the minute, as a
// key's last use is recorded.
const keyTime = "2006-01-02 15:04 UTC"

// keySection returns the keys section of user's page, with the note typed
// into the form and its problem when making a key failed.
func (a *Admin) keySection(ctx context.Context, user, note, noteErr string) (*adminKeys, error) {
	keys, err := a.svc.Keys(ctx, user)
	if err != nil {
		return nil, err
	}
	k := &adminKeys{UserID: user}
	for _, key := range keys {
		row := adminKeyRow{ID: key.ID, Note: key.Note, Created: key.CreatedAt.UTC().Format(keyTime), CreatedISO: key.CreatedAt.UTC().Format(time.RFC3339)}
		if key.LastUsedAt != nil {
			row.LastUsed, row.LastUsedISO = key.LastUsedAt.UTC().Format(keyTime), key.LastUsedAt.UTC().Format(time.RFC3339)
		}
		k.Rows = append(k.Rows, row)
	}
	k.Fields = []adminField{{ID: "key-note", Name: "note", Label: "Note of a new key", Value: note, Wide: true, Error: noteErr,
		Hint: "What the key is for, such as the agent or the machine that will hold it; at most 1024 bytes."}}
	return k, nil
}

// userPage is the look-up page of user.
func userPage(user string) string { return "/admin/usage?" + url.Values{"user_id": {user}}.Encode() }

func (a *Admin) handleCreateKey(c echo.Context) error {
	form, err := c.FormParams()
	if err != nil {
		return a.renderError(c, http.StatusBadRequest, "Bad form", "The form could not be read.")
	}
	user := form.Get("user_id")
	if user == "" || policy.ValidateUserID(user) != nil {
		return a.renderError(c, http.StatusBadRequest, "No user", "Look up a user before making them a key.")
	}
	note := strings.ReplaceAll(form.Get("note"), "\r\n", "\n")
	k, secret, err := a.svc.CreateKey(c.Request().Context(), user, false, note)
	switch {
	case policy.ErrorCode(err) == policy.EINVALID:
		return a.renderUsage(c, user, "", true, usageForms{keyNote: note, keyErr: policy.ErrorMessage(err)})
	case err != nil:
		return a.fail(c, err)
	}
	// The secret goes on this page, the answer to the form, and nowhere
	// else: not in a redirect, a flash kept in memory or the session, so
	// that it is shown once whichever replica serves the next page.
	v := a.view(c, "New key for user "+user, "usage")
	v.NewKey = &adminNewKey{UserID: user, ID: k.ID, Note: k.Note, Secret: secret, Back: userPage(user)}
	return a.render(c, http.StatusOK, "key", v)
}

func (a *Admin) handleRevokeKey(c echo.Context) error {
	id, err := pathParam(c, "id")
	if err != nil {
		return a.fail(c, err)
	}
	user := c.Request().PostFormValue("user_id")
	if err := a.svc.RevokeKey(c.Request().Context(), id); err != nil {
		return a.fail(c, err)
	}
	back := "/admin/usage"
	if user != "" {
		back = userPage(user)
	}
	a.flash(c, fmt.Sprintf("Revoked key %s — the gateway refuses it from its next request on", id))
	return c.Redirect(http.StatusSeeOther, back)
}
