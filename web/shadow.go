package web

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// adminShadowView is the edit page's account of a tier's shadow limits:
// what they are and what they would have refused, replayed over the
// stored requests rather than kept as a count.
type adminShadowView struct {
	Limits      string
	RefusedHour string
	RefusedDay  string
	CheckedHour string
	CheckedDay  string
	// Pooled is set when the shadow limits hold accounts' pooled limits:
	// what they would have refused in the pools, which are no users.
	Pooled *adminShadowPools
	// Version is the tier's UpdatedAt as the page read it: promoting
	// refuses a tier changed since, as saving does.
	Version string
}

// adminShadowPools is what the pooled shadow limits of a tier would have
// refused in its accounts' pools.
type adminShadowPools struct {
	RefusedHour, AccountsHour string
	RefusedDay, AccountsDay   string
}

// adminPreviewView is the figures of a preview, as the edit page shows
// them.
type adminPreviewView struct {
	Tier, Limits, From, To        string
	Users, Requests               string
	UsersRefused, RequestsRefused string
	RefusedMinute, RefusedHour    string
	RefusedDay                    string
	TopUsers                      []adminPreviewUser
	// The pools of the tier's accounts, replayed apart from users.
	AccountsRefused                                             string
	AccountRefusedMinute, AccountRefusedHour, AccountRefusedDay string
}

type adminPreviewUser struct {
	UserID, Requests, Refused string
}

func previewView(p *policy.Preview, l policy.RequestLimits) *adminPreviewView {
	const layout = "2006-01-02 15:04:05 UTC"
	v := &adminPreviewView{
		Tier: p.Tier, Limits: policy.LimitsSummary(l), From: p.From.UTC().Format(layout), To: p.To.UTC().Format(layout),
		Users: policy.GroupDigits(p.Users), Requests: policy.GroupDigits(p.Requests),
		UsersRefused: policy.GroupDigits(p.UsersRefused), RequestsRefused: policy.GroupDigits(p.RequestsRefused),
		RefusedMinute: policy.GroupDigits(p.RefusedBy[policy.Minute]), RefusedHour: policy.GroupDigits(p.RefusedBy[policy.Hour]),
		RefusedDay:           policy.GroupDigits(p.RefusedBy[policy.Day]),
		AccountsRefused:      policy.GroupDigits(p.AccountsRefused),
		AccountRefusedMinute: policy.GroupDigits(p.RefusedByAccount[policy.Minute]),
		AccountRefusedHour:   policy.GroupDigits(p.RefusedByAccount[policy.Hour]),
		AccountRefusedDay:    policy.GroupDigits(p.RefusedByAccount[policy.Day]),
	}
	for _, u := range p.TopUsers {
		v.TopUsers = append(v.TopUsers, adminPreviewUser{u.UserID, policy.GroupDigits(u.Requests), policy.GroupDigits(u.Refused)})
	}
	return v
}

// shadowView returns the shadow section of t's edit page, nil when t has
// no shadow limits (which replays nothing).
func (a *Admin) shadowView(c echo.Context, t *policy.Tier) (*adminShadowView, error) {
	if t.Shadow == nil {
		return nil, nil
	}
	hour, day, err := a.svc.ShadowRefusals(c.Request().Context(), t.Name)
	if err != nil {
		return nil, err
	}
	v := &adminShadowView{
		Limits:      policy.LimitsSummary(*t.Shadow),
		RefusedHour: policy.GroupDigits(hour.RequestsRefused), CheckedHour: policy.GroupDigits(hour.Requests),
		RefusedDay: policy.GroupDigits(day.RequestsRefused), CheckedDay: policy.GroupDigits(day.Requests),
		Version: tierVersion(*t),
	}
	if t.Shadow.Account != nil {
		v.Pooled = &adminShadowPools{
			RefusedHour: policy.GroupDigits(sumCounts(hour.RefusedByAccount[:])), AccountsHour: policy.GroupDigits(hour.AccountsRefused),
			RefusedDay: policy.GroupDigits(sumCounts(day.RefusedByAccount[:])), AccountsDay: policy.GroupDigits(day.AccountsRefused),
		}
	}
	return v, nil
}

func sumCounts(ns []int64) int64 {
	var total int64
	for _, n := range ns {
		total += n
	}
	return total
}

// handlePreviewTier shows what the limits typed into the edit form would
// have refused over the last day, and the form again as typed, so that
// Save follows with the same values and the version read at first.
func (a *Admin) handlePreviewTier(c echo.Context) error {
	ctx := c.Request().Context()
	name, err := pathParam(c, "name")
	if err != nil {
		return a.fail(c, err)
	}
	stored, err := a.svc.Tier(ctx, name)
	if err != nil {
		return a.fail(c, err)
	}
	version := c.Request().PostFormValue("version")
	if _, ok := parseTierVersion(version); !ok {
		version = tierVersion(stored)
	}
	values := postedTierValues(c)
	t, errs := a.tierFromForm(name, values)
	v := a.view(c, "Edit tier "+name, "tiers")
	v.Form = newAdminTierForm(values, errs, name)
	v.Form.Version = version
	if v.Shadow, err = a.shadowView(c, &stored); err != nil {
		return a.fail(c, err)
	}
	if len(errs) > 0 {
		v.Alert = "Nothing was previewed: correct the fields marked below."
		return a.render(c, http.StatusBadRequest, "tier", v)
	}
	p, err := a.svc.PreviewTier(ctx, name, t.PreviewLimits())
	if err != nil {
		return a.fail(c, err)
	}
	v.Preview = previewView(&p, t.PreviewLimits())
	return a.render(c, http.StatusOK, "tier", v)
}

// handlePromoteTier makes the tier's shadow limits its real limits in one
// audited change, unless someone changed the tier since the page was read.
func (a *Admin) handlePromoteTier(c echo.Context) error {
	ctx := c.Request().Context()
	name, err := pathParam(c, "name")
	if err != nil {
		return a.fail(c, err)
	}
	readAt, ok := parseTierVersion(c.Request().PostFormValue("version"))
	if !ok {
		return a.renderError(c, http.StatusBadRequest, "Not promoted",
			"The form does not say which version of the tier it promotes. Open the tier again from the tiers page.")
	}
	t, err := a.svc.PromoteShadow(ctx, name, &readAt)
	switch policy.ErrorCode(err) {
	case "":
		a.flash(c, fmt.Sprintf("Promoted the shadow limits of tier %s — %s applies to the next check", name, policy.LimitsSummary(t.RequestLimits())))
		return c.Redirect(http.StatusSeeOther, "/admin")
	case policy.ECONFLICT, policy.EINVALID:
		current, err2 := a.svc.Tier(ctx, name)
		if err2 != nil {
			return a.fail(c, err2)
		}
		v := a.view(c, "Edit tier "+name, "tiers")
		v.Form = newAdminTierForm(tierFormValues(current), nil, name)
		v.Form.Version = tierVersion(current)
		if v.Shadow, err2 = a.shadowView(c, &current); err2 != nil {
			return a.fail(c, err2)
		}
		v.Alert = "The shadow limits were not promoted: " + policy.ErrorMessage(err) + ". The page now shows the tier as stored."
		status := http.StatusConflict
		if policy.ErrorCode(err) == policy.EINVALID {
			status = http.StatusBadRequest
		}
		return a.render(c, status, "tier", v)
	default:
		return a.fail(c, err)
	}
}
