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

// The Accounts pages: the list of accounts with the form that creates
// one, and an account's own page with its pooled limits, its pooled usage
// against them, its members with their own usage, and the forms that
// change, clear and delete it. An account is named in the query or a
// hidden field rather than the path, as a user is: account ids follow the
// user-id rules, so "a/b" and ".." are ids a path could not carry.

// accountsPage is how many accounts the Accounts page lists at once, and
// how many members an account's page lists.
const accountsPage = 50

// adminAccountsView is the Accounts page: a page of accounts (Next links
// the next) and the create form; nil Form for a service that keeps no
// accounts.
type adminAccountsView struct {
	Rows []adminAccountRow
	Next string
	Form *adminAccountForm
}

// adminAccountRow is one account in the list.
type adminAccountRow struct {
	ID, Href, Tier, Pool, Note string
	Updated, UpdatedISO        string
}

// adminAccountForm is the create form (AccountID empty) or the edit form
// of account AccountID.
type adminAccountForm struct {
	AccountID string
	Fields    []adminField
}

// adminAccountView is an account's page.
type adminAccountView struct {
	ID, Tier, Summary, Note, Updated string
	// Period is the pool's current billing period in words.
	Period string
	// Limits are the pooled limits, a row per policy.LimitFields: the
	// plan's, the account's override and the one that applies.
	Limits []adminPoolLimitRow
	// Windows is the pooled usage of each window against the limits.
	Windows []adminPoolWindowRow
	// CallsKept reports whether the store keeps calls: whether the token
	// columns and CallsInFlight are known.
	CallsKept     bool
	CallsInFlight string
	CallsLimit    string // empty when the pool sets no max_concurrent
	AsOf          string
	Members       []adminMemberRow
	NextMembers   string
	Form          *adminAccountForm
}

type adminPoolLimitRow struct {
	Field, Label, Plan, Override, Applies string
}

// adminPoolWindowRow is one window of an account's pooled usage. Limit,
// Remaining and Reset are empty for a window whose requests the pool does
// not limit; the token limit and remaining, for one whose tokens it does
// not.
type adminPoolWindowRow struct {
	Name, Title                    string
	Count, Limit, Remaining, Reset string
	TokensUsed, TokenLimit         string
	TokensRemaining                string
}

// adminMemberRow is one member of an account with their own usage, under
// the tier their checks are decided on.
type adminMemberRow struct {
	UserID, Href, Tier string
	OwnTier            bool // the record assigns Tier; else it is the account's
	Windows            []adminMemberWindow
	CallsKept          bool
	TokensDay          string
	CallsInFlight      string
}

type adminMemberWindow struct {
	Name, Count, Limit string
}

// accountHref is the address of account id's page.
func accountHref(id string) string {
	return "/admin/account?" + url.Values{"account_id": {id}}.Encode()
}

// noAccounts renders the Accounts page of a service without accounts.
func (a *Admin) noAccounts(c echo.Context, status int) error {
	v := a.view(c, "Accounts", "accounts")
	v.Accounts = &adminAccountsView{}
	v.Alert = "This service keeps no accounts."
	return a.render(c, status, "accounts", v)
}

func (a *Admin) handleAccountsPage(c echo.Context) error {
	if !a.svc.KeepsAccounts() {
		return a.noAccounts(c, http.StatusOK)
	}
	return a.renderAccounts(c, nil, nil)
}

// renderAccounts renders the Accounts page with the create form as
// posted (nil: empty) and its problems.
func (a *Admin) renderAccounts(c echo.Context, form url.Values, errs map[string]string) error {
	ctx := c.Request().Context()
	tiers, err := a.svc.Tiers(ctx)
	if err != nil {
		return a.fail(c, err)
	}
	accounts, err := a.svc.Accounts(ctx, c.QueryParam("after"), accountsPage+1)
	if err != nil {
		return a.fail(c, err)
	}
	view := &adminAccountsView{}
	if len(accounts) > accountsPage {
		accounts = accounts[:accountsPage]
		view.Next = "/admin/accounts?" + url.Values{"after": {accounts[accountsPage-1].AccountID}}.Encode()
	}
	byName := make(map[string]*policy.Tier, len(tiers))
	for i := range tiers {
		byName[tiers[i].Name] = &tiers[i]
	}
	for i := range accounts {
		acct := &accounts[i]
		row := adminAccountRow{ID: acct.AccountID, Href: accountHref(acct.AccountID), Tier: acct.Tier, Note: acct.Note,
			Updated: acct.UpdatedAt.UTC().Format("2006-01-02 15:04:05 UTC"), UpdatedISO: acct.UpdatedAt.UTC().Format(time.RFC3339)}
		if t, ok := byName[acct.Tier]; ok {
			pool := acct.Pool(t)
			row.Pool = policy.PoolSummary(&pool)
		}
		view.Rows = append(view.Rows, row)
	}
	if form == nil {
		form = url.Values{"tier": {defaultAccountTier(tiers, a.svc.DefaultTier())}}
	}
	view.Form = accountForm("", tiers, form, errs)
	v := a.view(c, "Accounts", "accounts")
	v.Accounts = view
	status := http.StatusOK
	if len(errs) > 0 {
		status = http.StatusBadRequest
		v.Alert = accountNotSaved("created")
	}
	return a.render(c, status, "accounts", v)
}

// defaultAccountTier is the plan the create form offers first: the first
// tier with pooled limits, else the default tier.
func defaultAccountTier(tiers []policy.Tier, def string) string {
	for _, t := range tiers {
		if t.Account != nil {
			return t.Name
		}
	}
	return def
}

// accountForm builds the create form (id empty) or the edit form of
// account id from form, the values as typed, and errs, a message per
// field. The overrides follow the record form's: empty keeps the plan's
// limit, noLimit removes it, a number replaces it.
func accountForm(id string, tiers []policy.Tier, form url.Values, errs map[string]string) *adminAccountForm {
	f := &adminAccountForm{AccountID: id}
	if id == "" {
		f.Fields = append(f.Fields, adminField{ID: "account-id", Name: "account_id", Label: "Account id", Value: form.Get("account_id"),
			Error: errs["account_id"], Hint: "The id a user's record or a check names the account by."})
	}
	var options []adminOption
	for _, t := range tiers {
		options = append(options, adminOption{Value: t.Name, Label: t.Name, Selected: t.Name == form.Get("tier")})
	}
	f.Fields = append(f.Fields, adminField{ID: "account-tier", Name: "tier", Label: "Plan", Options: options, Error: errs["tier"],
		Hint: "The tier whose pooled limits the account has; members without a tier of their own are checked under it."})
	for lf := range policy.FieldsIn(policy.ScopeAccount) {
		name := "limits." + lf.Name
		f.Fields = append(f.Fields, adminField{ID: "account-" + strings.ReplaceAll(lf.Name, "_", "-"), Name: name, Label: lf.Label,
			Value: form.Get(name), InputMode: limitInputMode(lf), Error: errs[name],
			Hint: limitHint(lf, `Empty keeps the plan's pooled limit; "none" removes it for this account.`)})
	}
	f.Fields = append(f.Fields, billingFields("account", form, errs, "the service's default")...)
	f.Fields = append(f.Fields, adminField{ID: "account-note", Name: "note", Label: "Note", Value: form.Get("note"),
		Textarea: true, Wide: true, Error: errs["note"]})
	return f
}

// accountFormValues returns acct as its edit form shows it.
func accountFormValues(acct *policy.Account) url.Values {
	form := url.Values{"tier": {acct.Tier}, "note": {acct.Note}}
	setBillingValues(form, acct.TimeZone, acct.BillingAnchor)
	for f := range policy.FieldsIn(policy.ScopeAccount) {
		if o := acct.Limits.Get(f); o.Set && o.Limit == nil {
			form.Set("limits."+f.Name, noLimit)
		} else if o.Set {
			form.Set("limits."+f.Name, limitFormValue(f, o.Limit))
		}
	}
	return form
}

// accountFromForm reads the account form for account id; errs holds a
// message per field, in the words of the JSON API.
func accountFromForm(id string, form url.Values) (policy.Account, map[string]string) {
	errs := map[string]string{}
	acct := policy.Account{AccountID: id, Tier: form.Get("tier"), Note: strings.ReplaceAll(form.Get("note"), "\r\n", "\n")}
	acct.TimeZone, acct.BillingAnchor = billingFromForm(form, errs)
	values := map[string]*int64{}
	for f := range policy.FieldsIn(policy.ScopeAccount) {
		name := "limits." + f.Name
		raw := strings.TrimSpace(form.Get(name))
		switch {
		case raw == "":
			continue
		case strings.EqualFold(raw, noLimit):
			values[f.Name] = nil
			continue
		}
		v, err := policy.ParseLimit(name, raw)
		if err != nil {
			errs[name] = policy.ErrorMessage(err)
			continue
		}
		values[f.Name] = &v
	}
	o, err := policy.PoolOverridesOf(values)
	if err != nil {
		errs["note"] = policy.ErrorMessage(err) // cannot happen: the names are LimitFields'
	}
	acct.Limits = o
	for _, fe := range acct.ValidateFields() {
		if errs[fe.Field] == "" {
			errs[fe.Field] = fe.Message
		}
	}
	return acct, errs
}

// putAccount stores acct unless the form found problems (errs), adding
// those the service finds: pooled limits that could not all bind on the
// plan, beside the field that names them, and a plan refused.
func (a *Admin) putAccount(ctx context.Context, acct policy.Account, errs map[string]string) (created bool, err error) {
	if len(errs) == 0 {
		// PutAccount checks the same; this says which field.
		if t, err := a.svc.Tier(ctx, acct.Tier); err == nil {
			pool := acct.Pool(&t)
			for _, fe := range pool.ValidateFields(policy.ScopeAccount, "limits.") {
				if errs[fe.Field] == "" {
					errs[fe.Field] = fe.Message
				}
			}
		}
	}
	if len(errs) > 0 {
		return false, nil
	}
	_, created, err = a.svc.PutAccount(ctx, acct)
	if policy.ErrorCode(err) == policy.EINVALID {
		// The form was checked: the plan is refused, or was changed
		// meanwhile.
		errs["tier"] = policy.ErrorMessage(err)
		return false, nil
	}
	return created, err
}

// accountNotSaved is the page-level message of an account form sent back
// with errors.
func accountNotSaved(verb string) string {
	return "The account was not " + verb + ": correct the fields marked below."
}

func (a *Admin) handleCreateAccount(c echo.Context) error {
	if !a.svc.KeepsAccounts() {
		return a.noAccounts(c, http.StatusNotFound)
	}
	ctx := c.Request().Context()
	form, err := c.FormParams()
	if err != nil {
		return a.renderError(c, http.StatusBadRequest, "Bad form", "The form could not be read.")
	}
	id := strings.TrimSpace(form.Get("account_id"))
	form.Set("account_id", id)
	acct, errs := accountFromForm(id, form)
	if len(errs) == 0 {
		// Creating never replaces: the account's page edits it.
		switch _, err := a.svc.Account(ctx, id); policy.ErrorCode(err) {
		case "":
			errs["account_id"] = fmt.Sprintf("an account named %s already exists: edit it on its page instead", policy.Quote(id))
		case policy.ENOTFOUND:
		default:
			return a.fail(c, err)
		}
	}
	if _, err := a.putAccount(ctx, acct, errs); err != nil {
		return a.fail(c, err)
	}
	if len(errs) > 0 {
		return a.renderAccounts(c, form, errs)
	}
	a.flash(c, fmt.Sprintf("Created account %s — %s; it applies to its members' next checks", id, policy.AccountSummary(&acct)))
	return c.Redirect(http.StatusSeeOther, "/admin/accounts")
}

func (a *Admin) handleAccountPage(c echo.Context) error {
	if !a.svc.KeepsAccounts() {
		return a.noAccounts(c, http.StatusNotFound)
	}
	return a.renderAccount(c, c.QueryParam("account_id"), http.StatusOK, "", nil, nil)
}

// renderAccount renders account id's page with status, alert as its
// page-level message, and its edit form as posted (nil: as stored) with
// its problems.
func (a *Admin) renderAccount(c echo.Context, id string, status int, alert string, form url.Values, errs map[string]string) error {
	ctx := c.Request().Context()
	u, err := a.svc.AccountUsage(ctx, id)
	if err != nil {
		return a.fail(c, err)
	}
	acct := &u.Account
	tiers, err := a.svc.Tiers(ctx)
	if err != nil {
		return a.fail(c, err)
	}
	var plan policy.LimitSet
	for _, t := range tiers {
		if t.Name == acct.Tier && t.Account != nil {
			plan = *t.Account
		}
	}
	now := a.svc.Now()
	view := &adminAccountView{ID: acct.AccountID, Tier: acct.Tier, Summary: policy.AccountSummary(acct), Note: acct.Note,
		Updated: acct.UpdatedAt.UTC().Format("2006-01-02 15:04:05 UTC"), AsOf: now.UTC().Format("2006-01-02 15:04:05 UTC"),
		CallsKept: u.CallsKept, CallsInFlight: policy.GroupDigits(u.CallsInFlight)}
	p, err := a.svc.AccountPeriod(acct)
	if err != nil {
		return a.fail(c, err)
	}
	view.Period = periodText(p)
	for f := range policy.FieldsIn(policy.ScopeAccount) {
		i := f.ID()
		row := adminPoolLimitRow{Field: f.Name, Label: f.Label, Plan: f.Text(plan.Get(f)), Override: "—", Applies: f.Text(u.Limits.Get(f))}
		if o := acct.Limits[i]; o.Set {
			row.Override = f.Text(o.Limit)
		}
		view.Limits = append(view.Limits, row)
		if f.Kind == policy.KindConcurrency && u.Limits.Get(f) != nil {
			view.CallsLimit = policy.GroupDigits(*u.Limits.Get(f))
		}
	}
	state := policy.AccountState{Limits: u.Limits}
	for _, w := range policy.Windows {
		ws := u.Windows[w]
		row := adminPoolWindowRow{Name: w.String(), Title: adminWindowTitles[w], Count: policy.GroupDigits(ws.Count)}
		if state.Limited(w) {
			row.Limit, row.Remaining, row.Reset = policy.GroupDigits(ws.Limit), policy.GroupDigits(ws.Remaining), resetText(now, ws.Reset)
		}
		if tok := ws.Tokens; tok != nil {
			row.TokensUsed = policy.GroupDigits(tok.Used)
			if tok.Limited {
				row.TokenLimit, row.TokensRemaining = policy.GroupDigits(tok.Limit), policy.GroupDigits(tok.Remaining)
			}
		}
		view.Windows = append(view.Windows, row)
	}
	if view.Members, view.NextMembers, err = a.memberRows(ctx, acct, c.QueryParam("members_after")); err != nil {
		return a.fail(c, err)
	}
	if form == nil {
		form = accountFormValues(acct)
	}
	view.Form = accountForm(acct.AccountID, tiers, form, errs)
	v := a.view(c, "Account "+acct.AccountID, "accounts")
	v.Account, v.Alert = view, alert
	return a.render(c, status, "account", v)
}

// memberRows returns a page of acct's members, after the user id after,
// each with their usage under the tier their checks are decided on, and
// the link to the next page ("" on the last).
func (a *Admin) memberRows(ctx context.Context, acct *policy.Account, after string) ([]adminMemberRow, string, error) {
	members, err := a.svc.Members(ctx, acct.AccountID, after, accountsPage+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(members) > accountsPage {
		members = members[:accountsPage]
		next = "/admin/account?" + url.Values{"account_id": {acct.AccountID}, "members_after": {members[accountsPage-1].UserID}}.Encode()
	}
	rows := make([]adminMemberRow, len(members))
	for i := range members {
		r := &members[i]
		row := adminMemberRow{UserID: r.UserID, Tier: r.Tier, OwnTier: r.Tier != ""}
		if !row.OwnTier {
			row.Tier = acct.Tier
		}
		row.Href = "/admin/usage?" + url.Values{"user_id": {r.UserID}, "tier": {row.Tier}}.Encode()
		report, err := a.svc.UsageReport(ctx, r.UserID, row.Tier)
		if err != nil {
			return nil, "", err
		}
		for _, w := range policy.Windows {
			ws := report.Windows[w]
			row.Windows = append(row.Windows, adminMemberWindow{Name: w.String(), Count: policy.GroupDigits(ws.Count), Limit: policy.GroupDigits(ws.Limit)})
		}
		row.CallsKept = report.CallsKept
		if report.CallsKept {
			row.CallsInFlight = policy.GroupDigits(report.CallsInFlight)
			if tok := report.Windows[policy.Day].Tokens; tok != nil {
				row.TokensDay = policy.GroupDigits(tok.Used)
			}
		}
		rows[i] = row
	}
	return rows, next, nil
}

// postedAccount returns the account a form names in account_id, as
// stored: an edit, a clearing or a deletion acts on an existing account,
// and one deleted meanwhile stays deleted.
func (a *Admin) postedAccount(c echo.Context) (policy.Account, error) {
	if !a.svc.KeepsAccounts() {
		return policy.Account{}, policy.Errorf(policy.ENOTFOUND, "this service keeps no accounts")
	}
	return a.svc.Account(c.Request().Context(), c.Request().PostFormValue("account_id"))
}

func (a *Admin) handleSaveAccount(c echo.Context) error {
	stored, err := a.postedAccount(c)
	if err != nil {
		return a.fail(c, err)
	}
	form, err := c.FormParams()
	if err != nil {
		return a.renderError(c, http.StatusBadRequest, "Bad form", "The form could not be read.")
	}
	acct, errs := accountFromForm(stored.AccountID, form)
	if _, err := a.putAccount(c.Request().Context(), acct, errs); err != nil {
		return a.fail(c, err)
	}
	if len(errs) > 0 {
		return a.renderAccount(c, stored.AccountID, http.StatusBadRequest, accountNotSaved("saved"), form, errs)
	}
	a.flash(c, fmt.Sprintf("Saved account %s — %s; it applies to its members' next checks", acct.AccountID, policy.AccountSummary(&acct)))
	return c.Redirect(http.StatusSeeOther, accountHref(acct.AccountID))
}

func (a *Admin) handleDeleteAccount(c echo.Context) error {
	acct, err := a.postedAccount(c)
	if err != nil {
		return a.fail(c, err)
	}
	err = a.svc.DeleteAccount(c.Request().Context(), acct.AccountID)
	if policy.ErrorCode(err) == policy.ECONFLICT {
		// The service's words say how many members hold it.
		return a.renderAccount(c, acct.AccountID, http.StatusConflict, "The account was not deleted: "+policy.ErrorMessage(err)+".", nil, nil)
	} else if err != nil {
		return a.fail(c, err)
	}
	a.flash(c, fmt.Sprintf("Deleted account %s — its pooled requests are kept until they age out", acct.AccountID))
	return c.Redirect(http.StatusSeeOther, "/admin/accounts")
}

func (a *Admin) handleClearAccount(c echo.Context) error {
	acct, err := a.postedAccount(c)
	if err != nil {
		return a.fail(c, err)
	}
	if err := a.svc.ForgetAccount(c.Request().Context(), acct.AccountID); err != nil {
		return a.fail(c, err)
	}
	a.flash(c, fmt.Sprintf("Cleared the pooled history of account %s — every pooled window starts empty; its members' own histories stay", acct.AccountID))
	return c.Redirect(http.StatusSeeOther, accountHref(acct.AccountID))
}
