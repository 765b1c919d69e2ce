package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// recordsPage is how many user records the look-up page lists at once.
const recordsPage = 50

// noLimit is what the record form takes, in a token limit or
// max_concurrent, for "no limit for this user".
const noLimit = "none"

// adminRecordForm is the record of a looked-up user, with the form that
// changes it.
type adminRecordForm struct {
	UserID    string
	Exists    bool
	Summary   string // the record in words; empty when there is none
	Note      string
	UpdatedAt string
	// Account is the account the stored record names, and AccountHref
	// its page; empty for none.
	Account, AccountHref string
	// Period is the user's current billing period in words, by the
	// record's time zone and anchor, else its account's, else the
	// defaults.
	Period  string
	Fields  []adminField
	Changes []string // the latest changes of the record, newest first
}

// adminRecordRow is one user of the list of records.
type adminRecordRow struct {
	UserID, Href, Summary, Note string
}

// recordForm returns the record section of the look-up page for user: the
// stored record, or what the admin posted (form, with errs) when saving it
// failed. Its Account field is there when the service keeps accounts.
func (a *Admin) recordForm(ctx context.Context, user string, tiers []policy.Tier, form url.Values, errs map[string]string) (*adminRecordForm, error) {
	f := &adminRecordForm{UserID: user}
	r, err := a.svc.User(ctx, user)
	switch {
	case err == nil:
		f.Exists, f.Summary, f.Note = true, policy.UserSummary(&r), r.Note
		f.UpdatedAt = r.UpdatedAt.UTC().Format("2006-01-02 15:04:05 UTC")
		if r.Account != "" {
			f.Account, f.AccountHref = r.Account, accountHref(r.Account)
		}
	case policy.ErrorCode(err) != policy.ENOTFOUND:
		return nil, err
	}
	if form == nil { // the form shows the record as stored
		form = url.Values{"tier": {r.Tier}, "account": {r.Account}, "note": {r.Note}}
		setBillingValues(form, r.TimeZone, r.BillingAnchor)
		for f := range policy.FieldsIn(policy.ScopeTier) {
			if o := r.Limits.Get(f); o.Set && o.Limit == nil {
				form.Set(f.Name, noLimit)
			} else if o.Set {
				form.Set(f.Name, limitFormValue(f, o.Limit))
			}
		}
	}
	none := "None: the tier the check names"
	if a.svc.KeepsAccounts() {
		none = "None: the account's plan, else the tier the check names"
	}
	options := []adminOption{{Value: "", Label: none, Selected: form.Get("tier") == ""}}
	for _, t := range tiers {
		options = append(options, adminOption{Value: t.Name, Label: t.Name, Selected: t.Name == form.Get("tier")})
	}
	f.Fields = append(f.Fields, adminField{ID: "record-tier", Name: "tier", Label: "Assigned tier", Options: options, Error: errs["tier"],
		Hint: "Every check of this user is decided under this tier, whatever it names."})
	if a.svc.KeepsAccounts() {
		f.Fields = append(f.Fields, adminField{ID: "record-account", Name: "account", Label: "Account", Value: form.Get("account"), Error: errs["account"],
			Hint: "The account whose pooled limits this user's checks also draw on; empty for none."})
	}
	keeps := "the service's default"
	if a.svc.KeepsAccounts() {
		keeps = "the account's, else the service's default"
	}
	f.Fields = append(f.Fields, billingFields("record", form, errs, keeps)...)
	p, err := a.svc.UserPeriod(ctx, user)
	if err != nil {
		return nil, err
	}
	f.Period = periodText(p)
	for lf := range policy.FieldsIn(policy.ScopeTier) {
		name := lf.Name
		hint := "Empty keeps the tier's limit."
		if lf.Optional {
			hint = `Empty keeps the tier's limit; "none" removes it for this user.`
		}
		f.Fields = append(f.Fields, adminField{ID: "record-" + name, Name: name, Label: name, Value: form.Get(name),
			InputMode: limitInputMode(lf), Hint: limitHint(lf, hint), Error: errs[name]})
	}
	f.Fields = append(f.Fields, adminField{ID: "record-note", Name: "note", Label: "Note", Value: form.Get("note"),
		Textarea: true, Wide: true, Error: errs["note"]})
	changes, err := a.svc.UserChanges(ctx, user, 5)
	if err != nil {
		return nil, err
	}
	for _, c := range changes {
		what := "deleted"
		switch {
		case c.Old == nil && c.New != nil:
			what = "created: " + policy.UserSummary(c.New)
		case c.New != nil:
			what = "changed: " + policy.UserSummary(c.New)
		}
		f.Changes = append(f.Changes, fmt.Sprintf("%s, %s (%s)", c.At.UTC().Format("2006-01-02 15:04:05 UTC"), what, c.Source))
	}
	return f, nil
}

// recordList returns a page of the users with records, after the user id
// after, and the link to the next page ("" on the last).
func (a *Admin) recordList(ctx context.Context, after string) ([]adminRecordRow, string, error) {
	records, err := a.svc.Users(ctx, after, recordsPage+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(records) > recordsPage {
		records = records[:recordsPage]
		next = "/admin/usage?" + url.Values{"records_after": {records[recordsPage-1].UserID}}.Encode()
	}
	rows := make([]adminRecordRow, len(records))
	for i := range records {
		r := &records[i]
		rows[i] = adminRecordRow{UserID: r.UserID, Href: "/admin/usage?" + url.Values{"user_id": {r.UserID}}.Encode(),
			Summary: policy.UserSummary(r), Note: r.Note}
	}
	return rows, next, nil
}

// recordFromForm reads the record form; errs holds a message per field.
func (a *Admin) recordFromForm(user string, form url.Values) (policy.UserRecord, map[string]string) {
	errs := map[string]string{}
	r := policy.UserRecord{UserID: user, Tier: form.Get("tier"), Account: strings.TrimSpace(form.Get("account")),
		Note: strings.ReplaceAll(form.Get("note"), "\r\n", "\n")}
	r.TimeZone, r.BillingAnchor = billingFromForm(form, errs)
	values := map[string]*int64{}
	for lf := range policy.FieldsIn(policy.ScopeTier) {
		name := lf.Name
		raw := strings.TrimSpace(form.Get(name))
		switch {
		case raw == "":
			continue
		case lf.Optional && strings.EqualFold(raw, noLimit):
			values[name] = nil
			continue
		}
		v, err := policy.ParseLimit(name, raw)
		if err != nil {
			errs[name] = policy.ErrorMessage(err)
			continue
		}
		values[name] = &v
	}
	l, err := policy.LimitsOf(values)
	if err != nil {
		errs["note"] = policy.ErrorMessage(err) // cannot happen: the names are LimitNames
	}
	r.Limits = l
	for _, fe := range r.ValidateFields() {
		if errs[fe.Field] == "" {
			errs[fe.Field] = fe.Message
		}
	}
	return r, errs
}

func (a *Admin) handleSaveRecord(c echo.Context) error {
	ctx := c.Request().Context()
	form, err := c.FormParams()
	if err != nil {
		return a.renderError(c, http.StatusBadRequest, "Bad form", "The form could not be read.")
	}
	user := form.Get("user_id")
	if err := policy.ValidateUserID(user); err != nil || user == "" {
		return a.renderError(c, http.StatusBadRequest, "No user", "Look up a user before changing their record.")
	}
	r, errs := a.recordFromForm(user, form)
	if len(errs) == 0 {
		// Overrides that could not all bind on the tier, beside the
		// field to change; PutUser checks the same.
		var tier *policy.Tier
		if r.Tier != "" {
			if t, err := a.svc.Tier(ctx, r.Tier); err == nil {
				tier = &t
			}
		}
		for _, fe := range r.Limits.ValidateOn(tier) {
			if errs[fe.Field] == "" {
				errs[fe.Field] = fe.Message
			}
		}
	}
	if len(errs) == 0 {
		_, created, err := a.svc.PutUser(ctx, r)
		switch {
		case err == nil:
			verb := "Changed"
			if created {
				verb = "Created"
			}
			a.flash(c, fmt.Sprintf("%s the record of user %s — %s; it applies to their next check", verb, user, policy.UserSummary(&r)))
			return c.Redirect(http.StatusSeeOther, "/admin/usage?"+url.Values{"user_id": {user}}.Encode())
		case policy.ErrorCode(err) == policy.EINVALID:
			// The form was checked: the store refused the account or the
			// tier, as unknown, or one was changed meanwhile.
			errs[a.refusedRecordField(ctx, &r)] = policy.ErrorMessage(err)
		default:
			return a.fail(c, err)
		}
	}
	return a.renderUsage(c, user, "", true, usageForms{record: form, recordErrs: errs})
}

// refusedRecordField returns the field of r a store's refusal is about:
// the account when it names one that does not exist, else the tier.
func (a *Admin) refusedRecordField(ctx context.Context, r *policy.UserRecord) string {
	if r.Account != "" {
		if _, err := a.svc.Account(ctx, r.Account); policy.ErrorCode(err) == policy.ENOTFOUND {
			return "account"
		}
	}
	return "tier"
}

func (a *Admin) handleDeleteRecord(c echo.Context) error {
	user := c.Request().PostFormValue("user_id")
	if user == "" {
		return a.renderError(c, http.StatusBadRequest, "No user", "Look up a user before removing their record.")
	}
	if err := a.svc.DeleteUser(c.Request().Context(), user); err != nil {
		return a.fail(c, err)
	}
	a.flash(c, fmt.Sprintf("Removed the record of user %s — their checks are decided on the tier they name from the next one", user))
	return c.Redirect(http.StatusSeeOther, "/admin/usage?"+url.Values{"user_id": {user}}.Encode())
}
