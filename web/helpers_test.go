package web_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/net/html"

	"github.com/policyguard/policyguard/db"
	"github.com/policyguard/policyguard/db/dbtest"
	"github.com/policyguard/policyguard/policy"
	"github.com/policyguard/policyguard/web"
)

// pageToken is the admin token of the admin page tests.
const pageToken = "page-test-token"

// pageT0 is when every admin page test starts.
var pageT0 = time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)

// pageEnv is the admin page of the service on a temp-file database,
// mounted on an Echo instance as main mounts it on the API's, driven
// through ServeHTTP like a browser would. Checks go to the service itself:
// the page serves none.
type pageEnv struct {
	t     testing.TB
	srv   http.Handler
	svc   *policy.Service
	store *db.Store
	clock *policy.TestClock
}

func newPageEnv(t *testing.T) *pageEnv {
	t.Helper()
	return newPageEnvAt(t, dbtest.DSN(t, "test.db"), pageToken, policy.NewTestClock(pageT0))
}

// newPageEnvAt is newPageEnv on the database at path, with admin token
// token and clock: a second one on the same path is the service restarted.
func newPageEnvAt(t testing.TB, path, token string, clock *policy.TestClock) *pageEnv {
	t.Helper()
	store, err := db.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	svc := policy.NewService(store, store, policy.WithClock(clock.Now), policy.WithStats(store, store), policy.WithUsers(store),
		policy.WithKeys(store), policy.WithPrices(store), policy.WithAdmins(store), policy.WithAudit(store))
	srv := newPageServer(web.Config{Service: svc, Gate: policy.NewAdminGate(token), TierJSON: pageTierJSON, Sessions: store})
	return &pageEnv{t: t, srv: srv, svc: svc, store: store, clock: clock}
}

// newPageServer serves the admin page for cfg on an Echo instance of its
// own, set up as the API's server sets up the one main mounts the page on:
// a request's client is the connection's address, whatever
// X-Forwarded-For says. A nil Logger discards.
func newPageServer(cfg web.Config) *echo.Echo {
	e := echo.New()
	e.IPExtractor = echo.ExtractIPDirect()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	web.NewAdmin(cfg).Register(e)
	return e
}

// pageTierJSON stands in for api.TierJSON, which main gives the page and
// its tests cannot import: a tier's name and per-minute limit as JSON.
func pageTierJSON(t policy.Tier) string {
	b, err := json.Marshal(struct {
		Name              string `json:"name"`
		RequestsPerMinute int64  `json:"requests_per_minute"`
	}{t.Name, t.Limits.Value(policy.RequestsPerMinute)})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// pageRequest is one request; fields left zero are left out.
type pageRequest struct {
	method string
	path   string
	form   url.Values
	cookie *http.Cookie
	header map[string]string
	remote string // RemoteAddr, default httptest's 192.0.2.1:1234
}

func (e *pageEnv) do(r pageRequest) *httptest.ResponseRecorder {
	e.t.Helper()
	return e.doWith(r, func(*http.Request) {})
}

// doWith is do with a last change to the request, such as marking it TLS.
func (e *pageEnv) doWith(r pageRequest, change func(*http.Request)) *httptest.ResponseRecorder {
	e.t.Helper()
	var body io.Reader
	if r.form != nil {
		body = strings.NewReader(r.form.Encode())
	}
	req := httptest.NewRequest(r.method, r.path, body)
	if r.form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if r.cookie != nil {
		req.AddCookie(r.cookie)
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	if r.remote != "" {
		req.RemoteAddr = r.remote
	}
	change(req)
	rec := httptest.NewRecorder()
	e.srv.ServeHTTP(rec, req)
	return rec
}

// check decides one check for user under tier ("" names none) at the
// clock's time, as POST /v1/check decides it, and returns its answer:
// "admitted", "feature" for a feature outside the plan, the window that
// refused it ("minute", "hour" or "day"), or the code of its error, such
// as "invalid" for a tier that does not exist.
func (e *pageEnv) check(user, tier string) string {
	e.t.Helper()
	return e.checkFeature(user, tier, "")
}

// checkFeature is check for a request of feature.
func (e *pageEnv) checkFeature(user, tier, feature string) string {
	e.t.Helper()
	d, err := e.svc.Check(context.Background(), policy.Request{UserID: user, Tier: tier, Feature: feature}, false)
	switch {
	case err != nil:
		return policy.ErrorCode(err)
	case d.Outcome == policy.Admitted:
		return "admitted"
	case d.Outcome == policy.Denied:
		return "feature"
	}
	for _, w := range policy.Windows {
		if d.Reason == "per-"+w.String()+" limit exceeded" {
			return w.String()
		}
	}
	e.t.Fatalf("check of %s under %q: %+v", user, tier, d)
	return ""
}

// tier returns the stored tier name.
func (e *pageEnv) tier(name string) policy.Tier {
	e.t.Helper()
	t, err := e.svc.Tier(context.Background(), name)
	if err != nil {
		e.t.Fatalf("tier %s: %v", name, err)
	}
	return t
}

// pageBrowser is a signed-in admin: a session cookie and its CSRF token.
type pageBrowser struct {
	e      *pageEnv
	cookie *http.Cookie
	csrf   string
}

// signIn signs in with the admin token and reads the CSRF token from the
// tiers page.
func (e *pageEnv) signIn() *pageBrowser {
	e.t.Helper()
	rec := e.do(pageRequest{method: http.MethodPost, path: "/admin/login", form: url.Values{"token": {pageToken}}})
	if rec.Code != http.StatusSeeOther {
		e.t.Fatalf("sign in: status %d, want 303\n%s", rec.Code, rec.Body)
	}
	b := &pageBrowser{e: e, cookie: pageSessionCookie(e.t, rec)}
	doc := parsePage(e.t, b.get("/admin"), http.StatusOK)
	b.csrf = doc.csrf()
	if b.csrf == "" {
		e.t.Fatal("no CSRF token on the tiers page")
	}
	return b
}

func (b *pageBrowser) get(path string) *httptest.ResponseRecorder {
	b.e.t.Helper()
	return b.e.do(pageRequest{method: http.MethodGet, path: path, cookie: b.cookie})
}

// post sends form with the session's CSRF token, unless form sets its own.
func (b *pageBrowser) post(path string, form url.Values) *httptest.ResponseRecorder {
	b.e.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if _, ok := form["csrf"]; !ok {
		form.Set("csrf", b.csrf)
	}
	return b.e.do(pageRequest{method: http.MethodPost, path: path, form: form, cookie: b.cookie})
}

// follow asserts that rec redirects with 303 to want and returns the page
// it leads to.
func (b *pageBrowser) follow(rec *httptest.ResponseRecorder, want string) *pageDoc {
	b.e.t.Helper()
	if rec.Code != http.StatusSeeOther {
		b.e.t.Fatalf("status %d, want 303 to %s\n%s", rec.Code, want, rec.Body)
	}
	if got := rec.Header().Get("Location"); got != want {
		b.e.t.Fatalf("Location %q, want %q", got, want)
	}
	return parsePage(b.e.t, b.get(want), http.StatusOK)
}

// pageSessionCookie returns the session cookie rec sets.
func pageSessionCookie(t testing.TB, rec *httptest.ResponseRecorder) *http.Cookie {
	t.Helper()
	for _, c := range rec.Result().Cookies() {
		if c.Name == "policyguard_admin" {
			return c
		}
	}
	t.Fatalf("no session cookie in %q", rec.Header().Values("Set-Cookie"))
	return nil
}

// pageTierForm returns the edit form values of t, to change one at a time.
func pageTierForm(t policy.Tier) url.Values {
	itoa := func(n int64) string { return strconv.FormatInt(n, 10) }
	return url.Values{
		"name":                {t.Name},
		"requests_per_minute": {itoa(t.Limits.Value(policy.RequestsPerMinute))},
		"requests_per_hour":   {itoa(t.Limits.Value(policy.RequestsPerHour))},
		"requests_per_day":    {itoa(t.Limits.Value(policy.RequestsPerDay))},
		"burst_allowance":     {itoa(t.Limits.Value(policy.BurstAllowance))},
		"features":            {strings.Join(t.Features, ", ")},
		"models":              {pageModels(t.Models)},
		"description":         {t.Description},
		"version":             {pageTierVersion(t)},
	}
}

// pageModels is a tier's models as the form shows them: empty for any
// model, "none" for none.
func pageModels(models []string) string {
	if models != nil && len(models) == 0 {
		return "none"
	}
	return strings.Join(models, ", ")
}

// pageTierVersion is t's version as the edit form carries it.
func pageTierVersion(t policy.Tier) string {
	if t.UpdatedAt.IsZero() {
		return "0"
	}
	return strconv.FormatInt(t.UpdatedAt.UnixMicro(), 10)
}

// pageDoc is a parsed admin page.
type pageDoc struct {
	t    testing.TB
	root *html.Node
	raw  string
}

// parsePage asserts rec's status and that it is an HTML page, and parses it.
func parsePage(t testing.TB, rec *httptest.ResponseRecorder, status int) *pageDoc {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status %d, want %d\n%s", rec.Code, status, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Fatalf("Content-Type %q, want text/html", ct)
	}
	raw := rec.Body.String()
	root, err := html.Parse(strings.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return &pageDoc{t: t, root: root, raw: raw}
}

// find returns every element for which match is true, in document order.
func (d *pageDoc) find(match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && match(n) {
			out = append(out, n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(d.root)
	return out
}

func (d *pageDoc) byID(id string) *html.Node {
	if ns := d.find(func(n *html.Node) bool { return pageAttr(n, "id") == id }); len(ns) > 0 {
		return ns[0]
	}
	return nil
}

// text returns the trimmed text of the element with id, "" if there is none.
func (d *pageDoc) text(id string) string {
	n := d.byID(id)
	if n == nil {
		return ""
	}
	return pageText(n)
}

// cell returns the text of the element with data-field=field inside the
// element with id rowID.
func (d *pageDoc) cell(rowID, field string) string {
	d.t.Helper()
	row := d.byID(rowID)
	if row == nil {
		d.t.Fatalf("no element #%s", rowID)
	}
	sub := &pageDoc{t: d.t, root: row}
	ns := sub.find(func(n *html.Node) bool { return pageAttr(n, "data-field") == field })
	if len(ns) == 0 {
		d.t.Fatalf("no %s cell in #%s", field, rowID)
	}
	return pageText(ns[0])
}

// csrf returns the value of the first hidden csrf field.
func (d *pageDoc) csrf() string { return d.hidden("csrf") }

// hidden returns the value of the first hidden field called name, "" if
// there is none.
func (d *pageDoc) hidden(name string) string {
	ns := d.find(func(n *html.Node) bool {
		return n.Data == "input" && pageAttr(n, "type") == "hidden" && pageAttr(n, "name") == name
	})
	if len(ns) == 0 {
		return ""
	}
	return pageAttr(ns[0], "value")
}

// flash returns the text of the page's success message.
func (d *pageDoc) flash() string {
	ns := d.find(func(n *html.Node) bool { return pageAttr(n, "role") == "status" })
	if len(ns) == 0 {
		return ""
	}
	return pageText(ns[0])
}

// alert returns the text of the page's error message.
func (d *pageDoc) alert() string {
	ns := d.find(func(n *html.Node) bool { return pageAttr(n, "role") == "alert" })
	if len(ns) == 0 {
		return ""
	}
	return pageText(ns[0])
}

// control returns the form control whose <label> reads exactly label.
func (d *pageDoc) control(label string) *html.Node {
	d.t.Helper()
	for _, l := range d.find(func(n *html.Node) bool { return n.Data == "label" }) {
		if pageText(l) == label {
			if c := d.byID(pageAttr(l, "for")); c != nil {
				return c
			}
			d.t.Fatalf("label %q is for %q, which does not exist", label, pageAttr(l, "for"))
		}
	}
	d.t.Fatalf("no label %q", label)
	return nil
}

// pageValue returns what the control shows: a textarea's text or the value
// attribute.
func pageValue(n *html.Node) string {
	if n.Data == "textarea" {
		return pageText(n)
	}
	return pageAttr(n, "value")
}

// buttons returns the text of every button.
func (d *pageDoc) buttons() []string {
	var out []string
	for _, b := range d.find(func(n *html.Node) bool { return n.Data == "button" }) {
		out = append(out, pageText(b))
	}
	return out
}

func pageAttr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func pageHasAttr(n *html.Node, key string) bool {
	for _, a := range n.Attr {
		if a.Key == key {
			return true
		}
	}
	return false
}

func pageText(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.Join(strings.Fields(b.String()), " ")
}
