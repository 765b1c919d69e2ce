package web

import (
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// adminAdminsView is the Admins page: every named admin, a form that makes
// one, and the token of the one just made, shown this once.
type adminAdminsView struct {
	Rows     []adminAdminRow
	Fields   []adminField // the new admin's name, role and note
	NewName  string       // the admin just made, if any
	NewToken string       // its token: on this answer only
}

// adminAdminRow is one named admin: never its token, which is not kept.
type adminAdminRow struct {
	Name, Role, Note        string
	Created, LastUsed, Gone string // Gone: when it was revoked, "" while live
	Roles                   []adminOption
}

const adminsPage = "/admin/admins"

func roleOptions(selected string) []adminOption {
	opts := make([]adminOption, len(policy.Roles))
	for i, r := range policy.Roles {
		opts[i] = adminOption{Value: r.String(), Label: r.String(), Selected: r.String() == selected}
	}
	return opts
}

// adminsView returns the Admins page's view, with the form's values and
// their problem when making an admin failed.
func (a *Admin) adminsView(c echo.Context, name, role, note, nameErr string) (*adminAdminsView, error) {
	admins, err := a.svc.Admins(c.Request().Context())
	if err != nil {
		return nil, err
	}
	v := &adminAdminsView{}
	for _, ad := range admins {
		row := adminAdminRow{Name: ad.Name, Role: ad.Role.String(), Note: ad.Note, Created: ad.CreatedAt.UTC().Format(keyTime),
			LastUsed: "never", Roles: roleOptions(ad.Role.String())}
		if ad.LastUsedAt != nil {
			row.LastUsed = ad.LastUsedAt.UTC().Format(keyTime)
		}
		if ad.RevokedAt != nil {
			row.Gone = ad.RevokedAt.UTC().Format(keyTime)
		}
		v.Rows = append(v.Rows, row)
	}
	if role == "" {
		role = policy.RoleViewer.String()
	}
	v.Fields = []adminField{
		{ID: "admin-name", Name: "name", Label: "Name", Value: name, Error: nameErr, Hint: "Who will hold the token, as the audit log will name them."},
		{ID: "admin-role", Name: "role", Label: "Role", Options: roleOptions(role),
			Hint: "viewer reads; support also edits user records, keys and usage; admin may do everything."},
		{ID: "admin-note", Name: "note", Label: "Note", Value: note, Wide: true},
	}
	return v, nil
}

func (a *Admin) handleAdminsPage(c echo.Context) error {
	v := a.view(c, "Admins", "admins")
	var err error
	if v.Admins, err = a.adminsView(c, "", "", "", ""); err != nil {
		return a.fail(c, err)
	}
	return a.render(c, http.StatusOK, "admins", v)
}

func (a *Admin) handleCreateAdmin(c echo.Context) error {
	r := c.Request()
	name, roleName, note := r.PostFormValue("name"), r.PostFormValue("role"), r.PostFormValue("note")
	role, err := policy.ParseRole(roleName)
	var made policy.Admin
	var token string
	if err == nil {
		made, token, err = a.svc.CreateAdmin(r.Context(), name, role, note)
	}
	v := a.view(c, "Admins", "admins")
	status := http.StatusOK
	var nameErr string
	switch code := policy.ErrorCode(err); {
	case code == policy.EINVALID || code == policy.ECONFLICT:
		status, nameErr = policy.HTTPStatus(err), policy.ErrorMessage(err)
	case err != nil:
		return a.fail(c, err)
	default:
		name, note = "", ""
	}
	if v.Admins, err = a.adminsView(c, name, roleName, note, nameErr); err != nil {
		return a.fail(c, err)
	}
	if token != "" {
		// The token is on this page and nowhere else: shown, not stored
		// in a flash, and no cache keeps the page (see headers).
		v.Admins.NewName, v.Admins.NewToken = made.Name, token
	}
	return a.render(c, status, "admins", v)
}

func (a *Admin) handleSetAdminRole(c echo.Context) error {
	name, err := pathParam(c, "name")
	if err != nil {
		return a.fail(c, err)
	}
	role, err := policy.ParseRole(c.Request().PostFormValue("role"))
	if err == nil {
		_, err = a.svc.SetAdminRole(c.Request().Context(), name, role)
	}
	if err != nil {
		return a.fail(c, err)
	}
	a.flash(c, "Admin "+name+" is now of role "+role.String()+".")
	return c.Redirect(http.StatusSeeOther, adminsPage)
}

func (a *Admin) handleRevokeAdmin(c echo.Context) error {
	name, err := pathParam(c, "name")
	if err != nil {
		return a.fail(c, err)
	}
	if err := a.svc.RevokeAdmin(c.Request().Context(), name); err != nil {
		return a.fail(c, err)
	}
	a.flash(c, "Admin "+name+" is revoked: their token and sessions are refused from now on.")
	return c.Redirect(http.StatusSeeOther, adminsPage)
}

// adminAuditView is the Audit page: a page of entries, newest first, and
// the filter that chose them.
type adminAuditView struct {
	Fields []adminField // actor, kind, since, until
	Rows   []adminAuditRow
	Older  string // the URL of the next page, "" on the last
}

// adminAuditRow is one entry of the audit log as the page shows it.
type adminAuditRow struct {
	When, WhenISO                string
	Actor, Kind, Subject, Action string
	Source                       string
	Href                         string // the page of what changed, "" for none
	Old, New                     string
}

const auditPageSize = 50

func (a *Admin) handleAuditPage(c echo.Context) error {
	v := a.view(c, "Audit", "audit")
	q := policy.AuditQuery{Actor: c.QueryParam("actor"), Kind: c.QueryParam("kind"), Limit: auditPageSize + 1}
	fields := []adminField{
		{ID: "audit-actor", Name: "actor", Label: "Actor", Value: q.Actor},
		{ID: "audit-kind", Name: "kind", Label: "Kind", Options: []adminOption{{Value: "", Label: "any", Selected: q.Kind == ""}}},
		{ID: "audit-since", Name: "since", Label: "Since", Value: c.QueryParam("since"), Hint: "2026-01-02T15:04:05Z"},
		{ID: "audit-until", Name: "until", Label: "Until", Value: c.QueryParam("until")},
	}
	for _, k := range policy.AuditKinds {
		fields[1].Options = append(fields[1].Options, adminOption{Value: k, Label: k, Selected: q.Kind == k})
	}
	status := http.StatusOK
	for i, t := range []*time.Time{&q.Since, &q.Until} {
		f := &fields[2+i]
		if f.Value == "" {
			continue
		}
		var err error
		if *t, err = time.Parse(time.RFC3339Nano, f.Value); err != nil {
			f.Error, status = "A time in RFC 3339, such as 2026-01-02T15:04:05Z.", http.StatusBadRequest
		}
	}
	if b, err := strconv.ParseInt(c.QueryParam("before"), 10, 64); err == nil {
		q.Before = b
	}
	view := &adminAuditView{Fields: fields}
	v.Audit = view
	if status != http.StatusOK {
		return a.render(c, status, "audit", v)
	}
	entries, err := a.svc.AuditLog(c.Request().Context(), q)
	if policy.ErrorCode(err) == policy.EINVALID {
		view.Fields[1].Error = policy.ErrorMessage(err)
		return a.render(c, http.StatusBadRequest, "audit", v)
	} else if err != nil {
		return a.fail(c, err)
	}
	if len(entries) > auditPageSize {
		entries = entries[:auditPageSize]
		next := c.QueryParams()
		next.Set("before", strconv.FormatInt(entries[auditPageSize-1].ID, 10))
		view.Older = "/admin/audit?" + next.Encode()
	}
	for _, e := range entries {
		view.Rows = append(view.Rows, adminAuditRow{
			When: e.At.UTC().Format("2006-01-02 15:04:05 UTC"), WhenISO: e.At.UTC().Format(time.RFC3339),
			Actor: e.Actor, Kind: e.Kind, Subject: e.Subject, Action: e.Action, Source: e.Source,
			Href: auditHref(e), Old: e.Old, New: e.New,
		})
	}
	return a.render(c, http.StatusOK, "audit", v)
}

// auditHref returns the page of what e changed, or "" when none shows it.
func auditHref(e policy.AuditEntry) string {
	switch e.Kind {
	case policy.AuditTiers:
		if e.Action != policy.AuditDeleted {
			return "/admin/tiers/" + url.PathEscape(e.Subject)
		}
	case policy.AuditUsers, policy.AuditUsage:
		return "/admin/usage?" + url.Values{"user_id": {e.Subject}}.Encode()
	case policy.AuditAccounts:
		if e.Action != policy.AuditDeleted {
			return "/admin/account?" + url.Values{"account_id": {e.Subject}}.Encode()
		}
	case policy.AuditPrices:
		return "/admin/prices?" + url.Values{"version": {e.Subject}}.Encode()
	case policy.AuditAdmins:
		return adminsPage
	}
	return ""
}
