package web

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// adminTierRow is one tier as the tiers table shows it.
type adminTierRow struct {
	Name        string
	Default     bool
	Limits      []adminLimitCell // in the order of TierColumns
	Pool        string           // the pooled limits of its accounts, in words; "" for none
	Run         string           // its run object in words, and whether runs are required; "" for none
	Features    []string
	Models      []string
	AnyModel    bool // Models is nil: the tier allows every model
	Description string
	Updated     string
	UpdatedISO  string // empty when the tier has not changed since it was seeded
}

// adminLimitCell is one limit of a tier in the tiers table.
type adminLimitCell struct {
	Field, Label, Value string
}

// tierColumns are the limits the tiers table shows, a column each: every
// limit of a tier's own.
var tierColumns = slices.Collect(policy.FieldsIn(policy.ScopeTier))

// TierColumns returns the headings of the tiers table's limit columns.
func (adminView) TierColumns() []string {
	labels := make([]string, len(tierColumns))
	for i, f := range tierColumns {
		labels[i] = columnLabel(f)
	}
	return labels
}

// TierTableWidth returns the number of columns of the tiers table.
func (adminView) TierTableWidth() int { return len(tierColumns) + 7 }

// columnLabel is the short heading of limit f's column: "Per minute".
func columnLabel(f *policy.LimitField) string {
	switch f.Kind {
	case policy.KindRequests:
		return "Per " + f.Window.String()
	case policy.KindBurst:
		return "Burst"
	case policy.KindTokens:
		return "Tokens per " + f.Window.String()
	}
	return f.Label
}

// adminField is one labelled control of a form. Value is what the admin
// typed, kept when the form comes back with errors.
type adminField struct {
	ID        string
	Name      string
	Label     string
	Value     string
	Hint      string
	Error     string
	InputMode string
	Wide      bool
	Textarea  bool
	ReadOnly  bool
	Options   []adminOption // makes the control a select
	// Checkbox makes the control a checkbox, sent as "on" when Checked.
	Checkbox bool
	Checked  bool
}

type adminOption struct {
	Value, Label string
	Selected     bool
}

// DescribedBy returns the ids of the hint and error tied to the control, for
// aria-describedby.
func (f adminField) DescribedBy() string {
	var ids []string
	if f.Hint != "" {
		ids = append(ids, f.ID+"-hint")
	}
	if f.Error != "" {
		ids = append(ids, f.ID+"-error")
	}
	return strings.Join(ids, " ")
}

// adminTierForm is the create form (Name empty) or the edit form of tier
// Name.
type adminTierForm struct {
	Name   string
	Fields []adminField
	// Version is the edited tier's UpdatedAt as the form was filled from
	// it: saving refuses to overwrite a tier changed since.
	Version string
}

// tierVersion is t's UpdatedAt as the edit form carries it: Unix
// microseconds, 0 for a tier never changed since it was seeded.
func tierVersion(t policy.Tier) string {
	if t.UpdatedAt.IsZero() {
		return "0"
	}
	return strconv.FormatInt(t.UpdatedAt.UnixMicro(), 10)
}

// parseTierVersion reverses tierVersion.
func parseTierVersion(s string) (time.Time, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil || n < 0:
		return time.Time{}, false
	case n == 0:
		return time.Time{}, true
	}
	return time.UnixMicro(n).UTC(), true
}

// adminTierField is one field of the tier form.
type adminTierField struct {
	name, label, hint string
	inputMode         string // "numeric", "decimal": a limit's
	wide, checkbox    bool
}

// adminTierFields lists the tier form's fields in order, named as in the
// JSON API, so that policy.FieldError.Field finds its field: the name,
// every limit of policy.LimitFields, the features, models and description,
// the shadow limits and the pooled shadow limits of accounts, then the
// account object: its checkbox and its pooled limits, one per row of
// policy.LimitFields in policy.ScopeAccount; then the run object: its
// checkbox, its limits (the rows in policy.ScopeRun) and "Run required".
var adminTierFields = func() []adminTierField {
	fields := []adminTierField{{name: "name", label: "Name", hint: "Lowercase letters, digits, - and _."}}
	for f := range policy.FieldsIn(policy.ScopeTier) {
		hint := f.Doc
		if f.Optional {
			hint = strings.TrimSpace(hint + " Empty for no limit.")
		}
		fields = append(fields, adminTierField{name: f.Name, label: f.Label, hint: limitHint(f, hint), inputMode: limitInputMode(f)})
	}
	fields = append(fields,
		adminTierField{name: "features", label: "Features", hint: "Comma-separated, * for all.", wide: true},
		adminTierField{name: "models", label: "Models", hint: "Models the gateway lets users call, comma-separated; a * may end a name (gpt-4o-mini*). Empty for any model, " + noModels + " for no model.", wide: true},
		adminTierField{name: "description", label: "Description", wide: true})
	for i, name := range shadowFields {
		f, _ := policy.LimitFieldNamed(strings.TrimPrefix(name, "shadow."))
		d := adminTierField{name: name, label: "Shadow: " + strings.ToLower(f.Label[:1]) + f.Label[1:], inputMode: limitInputMode(f)}
		if i == 0 {
			d.hint = "Shadow limits are checked and counted, never enforced; leave all " + countWord(len(shadowFields)) + " empty for none."
		}
		fields = append(fields, d)
	}
	for i, name := range shadowAccountFields {
		f, _ := policy.LimitFieldNamed(strings.TrimPrefix(name, "shadow.account."))
		d := adminTierField{name: name, label: "Shadow, each account's pool: " + strings.ToLower(f.Label[:1]) + f.Label[1:], inputMode: limitInputMode(f)}
		if i == 0 {
			d.hint = "Pooled shadow limits of every account on this plan, which need the shadow limits above; empty for no limit."
		}
		fields = append(fields, d)
	}
	fields = append(fields, adminTierField{name: accountField, label: "Pooled limits for accounts on this plan", checkbox: true, wide: true,
		hint: "The members of an account on this plan share these limits, checked with each one's own. An empty field sets no pooled limit; an account may override each."})
	for f := range policy.FieldsIn(policy.ScopeAccount) {
		fields = append(fields, adminTierField{name: accountField + "." + f.Name, label: "Account: " + strings.ToLower(f.Label[:1]) + f.Label[1:],
			hint: limitHint(f, ""), inputMode: limitInputMode(f)})
	}
	fields = append(fields, adminTierField{name: runField, label: "Run budget for each agent run", checkbox: true, wide: true,
		hint: "Limits each run an agent names (X-Guard-Run, context.run_id), its sub-agents' use included, from the run's first request. An empty field sets no limit."})
	for f := range policy.FieldsIn(policy.ScopeRun) {
		fields = append(fields, adminTierField{name: runField + "." + f.Name, label: "Run: " + strings.ToLower(f.Label[:1]) + f.Label[1:],
			hint: limitHint(f, f.Doc), inputMode: limitInputMode(f)})
	}
	return append(fields, adminTierField{name: runRequiredField, label: "Run required", checkbox: true, wide: true,
		hint: "Every gateway request under this tier must name a run; needs the run budget above, which may set no limit."})
}()

// runField is the tier form's checkbox of the tier's run object, and the
// prefix of its limits' fields; runRequiredField is its "Run required"
// checkbox. Both are named as the API names them.
const (
	runField         = "run"
	runRequiredField = "run.required"
)

// accountField is the tier form's checkbox of the tier's account object,
// and the prefix of its pooled limits' fields, as the API names them.
const accountField = "account"

// shadowFields are the form fields of a tier's shadow limits, and
// shadowAccountFields those of its pooled shadow limits.
var shadowFields, shadowAccountFields = func() (names, pooled []string) {
	for i := range policy.LimitFields {
		if f := &policy.LimitFields[i]; f.InRequestLimits() {
			names = append(names, "shadow."+f.Name)
			pooled = append(pooled, "shadow.account."+f.Name)
		}
	}
	return names, pooled
}()

// countWord spells a small count out: "four".
func countWord(n int) string {
	if words := [...]string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"}; n < len(words) {
		return words[n]
	}
	return strconv.Itoa(n)
}

// newAdminTierForm builds the form from values and per-field errors. editing
// names the tier being edited, whose name cannot change; "" is the create
// form.
func newAdminTierForm(values, errs map[string]string, editing string) *adminTierForm {
	f := &adminTierForm{Name: editing}
	for _, d := range adminTierFields {
		field := adminField{
			ID:        "tier-" + strings.NewReplacer("_", "-", ".", "-").Replace(d.name),
			Name:      d.name,
			Label:     d.label,
			Value:     values[d.name],
			Hint:      d.hint,
			Error:     errs[d.name],
			Wide:      d.wide,
			Textarea:  d.name == "description",
			Checkbox:  d.checkbox,
			Checked:   d.checkbox && values[d.name] != "",
			InputMode: d.inputMode,
		}
		if d.name == "name" && editing != "" {
			field.Value, field.ReadOnly = editing, true
			field.Hint = "A tier keeps its name: to rename one, create the new tier and delete the old."
		}
		f.Fields = append(f.Fields, field)
	}
	return f
}

// tierFormValues returns t as the form shows it.
func tierFormValues(t policy.Tier) map[string]string {
	v := map[string]string{
		"name":        t.Name,
		"features":    strings.Join(t.Features, ", "),
		"models":      modelsFormValue(t.Models),
		"description": t.Description,
	}
	for i := range policy.LimitFields {
		f := &policy.LimitFields[i]
		if f.In(policy.ScopeTier) {
			v[f.Name] = limitFormValue(f, f.Get(&t))
		}
		if t.Shadow != nil && f.InRequestLimits() {
			v["shadow."+f.Name] = strconv.FormatInt(t.Shadow.Limits.Value(f.ID()), 10)
			if t.Shadow.Account != nil {
				v["shadow.account."+f.Name] = limitFormValue(f, t.Shadow.Account.Get(f))
			}
		}
		if t.Run != nil && f.In(policy.ScopeRun) {
			v[runField+"."+f.Name] = limitFormValue(f, t.Run.Get(f))
		}
		if t.Account != nil && f.In(policy.ScopeAccount) {
			v[accountField+"."+f.Name] = limitFormValue(f, t.Account.Get(f))
		}
	}
	if t.Account != nil {
		v[accountField] = "on"
	}
	if t.Run != nil {
		v[runField] = "on"
	}
	if t.RunRequired {
		v[runRequiredField] = "on"
	}
	return v
}

// limitFormValue returns v, a value of limit f, as the forms show it,
// which policy.ParseLimit reads back: empty for none, a spend limit in
// dollars ("$20.50", as the tiers table words it), any other an integer
// without separators.
func limitFormValue(f *policy.LimitField, v *int64) string {
	switch {
	case v == nil:
		return ""
	case f.Kind == policy.KindCost:
		return f.Format(*v)
	}
	return strconv.FormatInt(*v, 10)
}

// limitInputMode is the inputmode of a form's control for limit f: a
// spend limit has decimals.
func limitInputMode(f *policy.LimitField) string {
	if f.Kind == policy.KindCost {
		return "decimal"
	}
	return "numeric"
}

// limitHint returns hint with what the value of limit f is written in,
// when hint does not say it: the dollars of a spend limit.
func limitHint(f *policy.LimitField, hint string) string {
	if f.Kind != policy.KindCost || strings.Contains(hint, "dollars") {
		return hint
	}
	return strings.TrimSpace("In US dollars, such as 20 or 0.15. " + hint)
}

// postedTierValues returns the tier fields of the posted form.
func postedTierValues(c echo.Context) map[string]string {
	v := make(map[string]string, len(adminTierFields))
	for _, d := range adminTierFields {
		v[d.name] = c.Request().PostFormValue(d.name)
	}
	// Browsers send a textarea's line breaks as CRLF.
	v["description"] = strings.ReplaceAll(v["description"], "\r\n", "\n")
	return v
}

// tierFromForm builds the tier named name from form values and returns it
// with a message per invalid field. The checks and their words are the JSON
// API's: policy.ParseLimit for the limits, then policy's own validation.
func (a *Admin) tierFromForm(name string, values map[string]string) (policy.Tier, map[string]string) {
	t := policy.Tier{Name: name, Description: values["description"], Features: splitFeatures(values["features"]), Models: parseModels(values["models"])}
	errs := make(map[string]string)
	// parse reads field: nil, and no error, for an optional field left
	// empty, which sets no limit.
	parse := func(field string, optional bool) *int64 {
		raw := strings.TrimSpace(values[field])
		if optional && raw == "" {
			return nil
		}
		v, err := policy.ParseLimit(field, raw)
		if err != nil {
			errs[field] = policy.ErrorMessage(err)
			return nil
		}
		return &v
	}
	// Shadow limits are all or none: empty fields mean none. Pooled
	// shadow limits are each optional, and all empty mean none; any of
	// them asks for the shadow limits they belong to.
	var pooledShadow bool
	for _, f := range shadowAccountFields {
		pooledShadow = pooledShadow || strings.TrimSpace(values[f]) != ""
	}
	for _, f := range shadowFields {
		if pooledShadow || strings.TrimSpace(values[f]) != "" {
			t.Shadow = &policy.RequestLimits{}
		}
	}
	if pooledShadow {
		t.Shadow.Account = &policy.LimitSet{}
	}
	// The checkbox says whether the tier has an account object; limits
	// typed without it would be dropped unseen, so they are refused.
	pooled := values[accountField] != ""
	if pooled {
		t.Account = &policy.LimitSet{}
	}
	// The run object's checkbox likewise.
	budget := values[runField] != ""
	if budget {
		t.Run = &policy.LimitSet{}
	}
	t.RunRequired = values[runRequiredField] != ""
	for i := range policy.LimitFields {
		f := &policy.LimitFields[i]
		if f.In(policy.ScopeTier) {
			f.Set(&t, parse(f.Name, f.Optional))
		}
		if t.Shadow != nil && f.InRequestLimits() {
			if v := parse("shadow."+f.Name, false); v != nil {
				t.Shadow.Limits.Set(f, v)
			}
			if pooledShadow {
				t.Shadow.Account.Set(f, parse("shadow.account."+f.Name, true))
			}
		}
		name := accountField + "." + f.Name
		switch {
		case !f.In(policy.ScopeAccount):
		case pooled:
			t.Account.Set(f, parse(name, true))
		case strings.TrimSpace(values[name]) != "" && errs[accountField] == "":
			errs[accountField] = "tick this box to give the tier pooled limits, or empty the account fields below"
		}
		name = runField + "." + f.Name
		switch {
		case !f.In(policy.ScopeRun):
		case budget:
			t.Run.Set(f, parse(name, true))
		case strings.TrimSpace(values[name]) != "" && errs[runField] == "":
			errs[runField] = "tick this box to give the tier a run budget, or empty the run fields below"
		}
	}
	for _, fe := range t.ValidateFields() {
		if _, seen := errs[fe.Field]; !seen {
			errs[fe.Field] = fe.Message
		}
	}
	return t, errs
}

// splitFeatures splits a comma-separated list, trimming each item and
// dropping empty ones.
func splitFeatures(s string) []string {
	features := []string{}
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			features = append(features, f)
		}
	}
	return features
}

// noModels is what the form's Models field holds for a tier that allows
// no model; empty allows any.
const noModels = "none"

// modelsFormValue returns a tier's models as the form shows them: empty
// for any model, noModels for none, else the names comma-separated.
func modelsFormValue(models []string) string {
	switch {
	case models == nil:
		return ""
	case len(models) == 0:
		return noModels
	}
	return strings.Join(models, ", ")
}

// parseModels reverses modelsFormValue: a field that lists no name allows
// any model, and noModels (in any case) allows none.
func parseModels(s string) []string {
	if strings.EqualFold(strings.TrimSpace(s), noModels) {
		return []string{}
	}
	if models := splitFeatures(s); len(models) > 0 {
		return models
	}
	return nil
}

// tiersView returns the tiers page with form as its create form.
func (a *Admin) tiersView(c echo.Context, form *adminTierForm) (adminView, error) {
	tiers, err := a.svc.Tiers(c.Request().Context())
	if err != nil {
		return adminView{}, err
	}
	v := a.view(c, "Tiers", "tiers")
	v.Form = form
	if v.Changes, err = a.recentChanges(c.Request().Context()); err != nil {
		return adminView{}, err
	}
	v.Tiers = make([]adminTierRow, len(tiers))
	for i, t := range tiers {
		v.Tiers[i] = adminTierRow{
			Name:        t.Name,
			Default:     t.Name == a.svc.DefaultTier(),
			Features:    t.Features,
			Models:      t.Models,
			AnyModel:    t.Models == nil,
			Description: t.Description,
			Updated:     "not changed yet",
		}
		for _, f := range tierColumns {
			v.Tiers[i].Limits = append(v.Tiers[i].Limits, adminLimitCell{Field: f.Name, Label: columnLabel(f), Value: f.Text(f.Get(&t))})
		}
		if t.Account != nil {
			v.Tiers[i].Pool = policy.PoolSummary(t.Account)
		}
		if t.Run != nil {
			v.Tiers[i].Run = policy.RunSummary(t.Run)
			if t.RunRequired {
				v.Tiers[i].Run += ", required"
			}
		}
		if !t.UpdatedAt.IsZero() {
			v.Tiers[i].Updated = t.UpdatedAt.UTC().Format("2006-01-02 15:04:05 UTC")
			v.Tiers[i].UpdatedISO = t.UpdatedAt.UTC().Format(time.RFC3339)
		}
	}
	return v, nil
}

func (a *Admin) handleTiersPage(c echo.Context) error {
	v, err := a.tiersView(c, newAdminTierForm(map[string]string{"burst_allowance": "0"}, nil, ""))
	if err != nil {
		return a.fail(c, err)
	}
	return a.render(c, http.StatusOK, "tiers", v)
}

func (a *Admin) handleCreateTier(c echo.Context) error {
	ctx := c.Request().Context()
	values := postedTierValues(c)
	values["name"] = strings.TrimSpace(values["name"])
	t, errs := a.tierFromForm(values["name"], values)
	if len(errs) == 0 {
		// Creating never replaces, even a tier created a moment ago by
		// someone else: the edit form is for that.
		_, err := a.svc.CreateTier(ctx, t)
		switch policy.ErrorCode(err) {
		case "":
			a.flash(c, fmt.Sprintf("Created tier %s — applies to the next check", t.Name))
			return c.Redirect(http.StatusSeeOther, "/admin")
		case policy.ECONFLICT:
			errs["name"] = fmt.Sprintf("a tier named %s already exists: edit it instead", t.Name)
		case policy.EINVALID:
			errs[""] = policy.ErrorMessage(err)
		default:
			return a.fail(c, err)
		}
	}
	v, err := a.tiersView(c, newAdminTierForm(values, errs, ""))
	if err != nil {
		return a.fail(c, err)
	}
	v.Alert = notSaved("created", errs)
	return a.render(c, http.StatusBadRequest, "tiers", v)
}

func (a *Admin) handleTierPage(c echo.Context) error {
	name, err := pathParam(c, "name")
	if err != nil {
		return a.fail(c, err)
	}
	t, err := a.svc.Tier(c.Request().Context(), name)
	if err != nil {
		return a.fail(c, err)
	}
	v := a.view(c, "Edit tier "+name, "tiers")
	v.Form = newAdminTierForm(tierFormValues(t), nil, name)
	v.Form.Version = tierVersion(t)
	if v.Shadow, err = a.shadowView(c, &t); err != nil {
		return a.fail(c, err)
	}
	return a.render(c, http.StatusOK, "tier", v)
}

func (a *Admin) handleSaveTier(c echo.Context) error {
	ctx := c.Request().Context()
	name, err := pathParam(c, "name")
	if err != nil {
		return a.fail(c, err)
	}
	// Saving edits an existing tier; one deleted meanwhile stays deleted.
	if _, err := a.svc.Tier(ctx, name); err != nil {
		return a.fail(c, err)
	}
	readAt, ok := parseTierVersion(c.Request().PostFormValue("version"))
	if !ok {
		return a.renderError(c, http.StatusBadRequest, "Not saved",
			"The form does not say which version of the tier it edits. Open the tier again from the tiers page.")
	}
	values := postedTierValues(c)
	t, errs := a.tierFromForm(name, values)
	if len(errs) == 0 {
		_, err := a.svc.ReplaceTier(ctx, t, readAt)
		switch policy.ErrorCode(err) {
		case "":
			a.flash(c, fmt.Sprintf("Saved tier %s — applies to the next check", name))
			return c.Redirect(http.StatusSeeOther, "/admin")
		case policy.ECONFLICT:
			// Someone else saved the tier since this form was filled:
			// keep what this admin typed, show what is stored now, and
			// let a second Save overwrite it knowingly.
			current, err := a.svc.Tier(ctx, name)
			if err != nil {
				return a.fail(c, err)
			}
			v := a.view(c, "Edit tier "+name, "tiers")
			v.Form = newAdminTierForm(values, nil, name)
			v.Form.Version = tierVersion(current)
			v.Alert = fmt.Sprintf("The tier was not saved: someone else changed it since you opened this page. Stored now: %s. Save again to replace it with the values below.", policy.TierSummary(&current))
			return a.render(c, http.StatusConflict, "tier", v)
		case policy.EINVALID:
			errs[""] = policy.ErrorMessage(err)
		default:
			return a.fail(c, err)
		}
	}
	v := a.view(c, "Edit tier "+name, "tiers")
	v.Form = newAdminTierForm(values, errs, name)
	// Still the version this admin read: a change made meanwhile by
	// someone else must be noticed when the corrected form is saved.
	v.Form.Version = tierVersion(policy.Tier{UpdatedAt: readAt})
	v.Alert = notSaved("saved", errs)
	return a.render(c, http.StatusBadRequest, "tier", v)
}

// notSaved is the page-level message of a form sent back with errors.
func notSaved(verb string, errs map[string]string) string {
	if msg := errs[""]; msg != "" {
		return "The tier was not " + verb + ": " + msg + "."
	}
	return "The tier was not " + verb + ": correct the fields marked below."
}

func (a *Admin) handleDeletePage(c echo.Context) error {
	name, err := pathParam(c, "name")
	if err != nil {
		return a.fail(c, err)
	}
	if _, err := a.svc.Tier(c.Request().Context(), name); err != nil {
		return a.fail(c, err)
	}
	v := a.view(c, "Delete tier "+name, "tiers")
	v.Tier, v.CanDelete = name, name != a.svc.DefaultTier()
	if !v.CanDelete {
		v.Alert = fmt.Sprintf("%s is the default tier: requests that name no tier use it, so it cannot be deleted.", name)
	}
	return a.render(c, http.StatusOK, "delete", v)
}

func (a *Admin) handleDeleteTier(c echo.Context) error {
	name, err := pathParam(c, "name")
	if err != nil {
		return a.fail(c, err)
	}
	err = a.svc.DeleteTier(c.Request().Context(), name)
	if policy.ErrorCode(err) == policy.ECONFLICT {
		v := a.view(c, "Delete tier "+name, "tiers")
		v.Tier, v.Alert = name, policy.ErrorMessage(err)
		return a.render(c, http.StatusConflict, "delete", v)
	} else if err != nil {
		return a.fail(c, err)
	}
	a.flash(c, fmt.Sprintf("Deleted tier %s — checks that name it are refused from now on", name))
	return c.Redirect(http.StatusSeeOther, "/admin")
}
