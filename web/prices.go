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

// pricesPage is the page of the price table.
const pricesPage = "/admin/prices"

// maxDiffLines is how many lines of a version's changes the history shows.
const maxDiffLines = 8

// adminPricesView is the Prices page: a version of the table (the one in
// force, or the one asked for), the history of versions, and the form
// that makes a new one.
type adminPricesView struct {
	Shown      *adminPriceVersion // nil when no version is in force
	Asked      bool               // Shown is the version asked for, not the one in force
	History    []adminPriceVersion
	Fields     []adminField // the form's effective_from
	Table      string       // the form's table, one entry a line
	TableError string
}

// adminPriceVersion is a version as the page shows it.
type adminPriceVersion struct {
	ID              int64
	From, FromISO   string
	Made, MadeISO   string
	Source          string
	Entries         int
	InForce, Future bool
	Rows            []adminPriceRow // the shown version's entries
	Changes         []string        // against the version before it
}

type adminPriceRow struct {
	Model, Upstream                      string
	Input, Output, CacheRead, CacheWrite string
}

const priceTime = "2006-01-02 15:04:05 UTC"

func priceVersionRow(v *policy.PriceVersion, inForce int64, now time.Time) adminPriceVersion {
	return adminPriceVersion{
		ID: v.ID, Source: v.Source, Entries: v.Prices.Len(),
		From: v.EffectiveFrom.UTC().Format(priceTime), FromISO: v.EffectiveFrom.UTC().Format(time.RFC3339),
		Made: v.CreatedAt.UTC().Format(priceTime), MadeISO: v.CreatedAt.UTC().Format(time.RFC3339),
		InForce: v.ID == inForce, Future: v.EffectiveFrom.After(now),
	}
}

func (a *Admin) handlePricesPage(c echo.Context) error {
	return a.renderPrices(c, http.StatusOK, nil, "", "", "")
}

// renderPrices renders the Prices page. table and from are the form's
// values after a refused save (nil table: the version in force's), with
// their problems.
func (a *Admin) renderPrices(c echo.Context, status int, table *string, from, tableErr, fromErr string) error {
	v := a.view(c, "Prices", "prices")
	if !a.svc.KeepsPrices() {
		v.Message = "This service keeps no price table."
		return a.render(c, status, "prices", v)
	}
	ctx := c.Request().Context()
	versions, err := a.svc.PriceVersions(ctx)
	if err != nil {
		return a.fail(c, err)
	}
	now := a.svc.Now()
	current, found := policy.InForce(versions, now)
	view := &adminPricesView{}
	shown := current
	if id := c.QueryParam("version"); id != "" {
		n, _ := strconv.ParseInt(id, 10, 64)
		i := slices.IndexFunc(versions, func(v policy.PriceVersion) bool { return v.ID == n })
		if i < 0 {
			return a.renderError(c, http.StatusNotFound, "No such version", fmt.Sprintf("The price table has no version %s.", policy.Quote(id)))
		}
		shown, found, view.Asked = versions[i], true, true
	}
	// versions is newest first: each version's changes are against the
	// next one in the list, the one made before it.
	for i := range versions {
		row := priceVersionRow(&versions[i], current.ID, now)
		var before *policy.PriceTable
		if i+1 < len(versions) {
			before = versions[i+1].Prices
		}
		row.Changes = policy.PriceDiff(before, versions[i].Prices)
		if n := len(row.Changes); n > maxDiffLines {
			row.Changes = append(row.Changes[:maxDiffLines-1:maxDiffLines-1], fmt.Sprintf("and %d more", n-maxDiffLines+1))
		}
		view.History = append(view.History, row)
	}
	if found {
		s := priceVersionRow(&shown, current.ID, now)
		for _, p := range shown.Prices.Entries() {
			s.Rows = append(s.Rows, adminPriceRow{Model: p.Model, Upstream: p.Upstream, Input: p.Input.String(), Output: p.Output.String(),
				CacheRead: p.CacheRead.String(), CacheWrite: p.CacheWrite.String()})
		}
		view.Shown = &s
	}
	if table != nil {
		view.Table = *table
	} else if found {
		view.Table = formatPriceLines(current.Prices)
	}
	view.TableError = tableErr
	view.Fields = []adminField{{ID: "effective-from", Name: "effective_from", Label: "In force from", Value: from, Error: fromErr, Wide: true,
		Hint: "An RFC 3339 time such as 2026-12-01T00:00:00Z, not before now; empty for now."}}
	v.Prices = view
	return a.render(c, status, "prices", v)
}

func (a *Admin) handleSavePrices(c echo.Context) error {
	form, err := c.FormParams()
	if err != nil {
		return a.renderError(c, http.StatusBadRequest, "Bad form", "The form could not be read.")
	}
	text, fromText := form.Get("prices"), strings.TrimSpace(form.Get("effective_from"))
	var from *time.Time
	if fromText != "" {
		t, err := time.Parse(time.RFC3339Nano, fromText)
		if err != nil {
			return a.renderPrices(c, http.StatusBadRequest, &text, fromText, "", "In force from must be an RFC 3339 time such as 2026-12-01T00:00:00Z, or empty for now.")
		}
		from = &t
	}
	entries, err := parsePriceLines(text, a.upstreams)
	if err != nil {
		return a.renderPrices(c, http.StatusBadRequest, &text, fromText, policy.ErrorMessage(err), "")
	}
	v, err := a.svc.PutPrices(policy.WithChangeSource(c.Request().Context(), policy.SourceAdmin), from, entries)
	switch msg := policy.ErrorMessage(err); {
	case policy.ErrorCode(err) == policy.EINVALID && strings.HasPrefix(msg, "effective_from"):
		return a.renderPrices(c, http.StatusBadRequest, &text, fromText, "", msg)
	case policy.ErrorCode(err) == policy.EINVALID:
		return a.renderPrices(c, http.StatusBadRequest, &text, fromText, msg, "")
	case err != nil:
		return a.fail(c, err)
	}
	a.flash(c, fmt.Sprintf("Saved version %d: %d entries, in force from %s", v.ID, v.Prices.Len(), v.EffectiveFrom.UTC().Format(priceTime)))
	return c.Redirect(http.StatusSeeOther, pricesPage)
}

// The form's table has one entry a line, in dollars per million tokens:
//
//	MODEL[@UPSTREAM] INPUT OUTPUT [CACHE_READ [CACHE_WRITE]]
//
// A missing cache price is the input price, as in the JSON API. Blank
// lines and lines beginning with '#' are skipped.

// formatPriceLines writes t as the form's table, every price written.
func formatPriceLines(t *policy.PriceTable) string {
	var b strings.Builder
	for _, p := range t.Entries() {
		name := p.Model
		if p.Upstream != "" {
			name += "@" + p.Upstream
		}
		fmt.Fprintf(&b, "%s %s %s %s %s\n", name, p.Input, p.Output, p.CacheRead, p.CacheWrite)
	}
	return b.String()
}

// parsePriceLines reads the form's table. Its errors are EINVALID and name
// the line. An entry may name only one of upstreams, when there are any.
func parsePriceLines(text string, upstreams []string) ([]policy.Price, error) {
	var out []policy.Price
	lines := map[int]int{}       // entry index → line number
	first := map[[2]string]int{} // model and upstream → line number
	for n, line := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) < 3 || len(f) > 5 {
			return nil, policy.Errorf(policy.EINVALID, "line %d: write MODEL[@UPSTREAM] INPUT OUTPUT [CACHE_READ [CACHE_WRITE]], not %d words", n+1, len(f))
		}
		p := policy.Price{}
		p.Model, p.Upstream, _ = strings.Cut(f[0], "@")
		if p.Upstream != "" && len(upstreams) > 0 && !slices.Contains(upstreams, p.Upstream) {
			return nil, policy.Errorf(policy.EINVALID, "line %d: %s is not an upstream of the gateway (%s)", n+1, policy.Quote(p.Upstream), strings.Join(upstreams, ", "))
		}
		amounts := []*policy.Money{&p.Input, &p.Output, &p.CacheRead, &p.CacheWrite}
		names := []string{"input", "output", "cache read", "cache write"}
		for i, s := range f[1:] {
			m, err := policy.ParseMoney(s)
			if err == nil && m < 0 {
				err = policy.Errorf(policy.EINVALID, "%s is negative", policy.Quote(s))
			}
			if err != nil {
				return nil, policy.Errorf(policy.EINVALID, "line %d, %s price: %s", n+1, names[i], policy.ErrorMessage(err))
			}
			*amounts[i] = m
		}
		if len(f) < 4 {
			p.CacheRead = p.Input
		}
		if len(f) < 5 {
			p.CacheWrite = p.Input
		}
		k := [2]string{p.Model, p.Upstream}
		if l, dup := first[k]; dup {
			return nil, policy.Errorf(policy.EINVALID, "line %d: %s is listed again (first on line %d)", n+1, f[0], l)
		}
		first[k] = n + 1
		lines[len(out)] = n + 1
		out = append(out, p)
	}
	// The table's own checks of a name ('*', spaces), said by line: the
	// field "prices[2].model" is the word "model" of its line.
	if errs := policy.ValidatePrices(out); len(errs) > 0 {
		e := errs[0]
		var i int
		fmt.Sscanf(e.Field, "prices[%d]", &i)
		_, name, _ := strings.Cut(e.Field, ".")
		return nil, policy.Errorf(policy.EINVALID, "line %d: %s%s", lines[i], name, strings.TrimPrefix(e.Message, e.Field))
	}
	return out, nil
}
