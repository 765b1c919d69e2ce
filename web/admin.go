package web

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// adminCSP lets admin pages load only the service's own stylesheet and icon,
// run no script at all and submit forms only to the service: an injected
// tag, were one ever to get past the escaping, could do nothing.
const adminCSP = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Config configures an Admin.
type Config struct {
	// Service answers every page and form. Required.
	Service *policy.Service
	// Gate checks the admin token at sign-in and counts wrong ones. The
	// JSON API's bearer check must use the same one (api.Config.Admin), so
	// that neither is a way around the other's throttle. Required.
	Gate *policy.AdminGate
	// TierJSON writes a tier as the JSON API does (main gives it
	// api.TierJSON): the audit log on the tiers page shows the before and
	// after of each change in it. Nil leaves them out.
	TierJSON func(policy.Tier) string
	// Logger receives internal failures (default slog.Default()).
	Logger *slog.Logger
	// Sessions keeps the sessions, so that they outlive the process; nil
	// keeps them in memory. Sessions of another admin token are ended.
	Sessions policy.SessionStore
	// Upstreams are the names of the gateway's upstreams: an entry of the
	// price table may name only one of them. Nil checks no name.
	Upstreams []string
}

// Admin is the browser admin page under /admin: sign-in, sessions and the
// forms that edit tiers and look up users. It talks only to the
// policy.Service, as the JSON API does. It is safe for concurrent use.
type Admin struct {
	svc        *policy.Service
	gate       *policy.AdminGate
	tierToJSON func(policy.Tier) string
	log        *slog.Logger
	sessions   *adminSessions
	origin     *http.CrossOriginProtection
	upstreams  []string
	// routes are the page's routes ("GET /admin/usage"), set by Register:
	// what else reaches the group is Echo's 404 or 405, not a route to
	// refuse.
	routes map[string]bool
}

// NewAdmin returns the admin page for cfg; Register serves it.
func NewAdmin(cfg Config) *Admin {
	a := &Admin{svc: cfg.Service, gate: cfg.Gate, tierToJSON: cfg.TierJSON, log: cfg.Logger, origin: http.NewCrossOriginProtection(), upstreams: cfg.Upstreams}
	if a.log == nil {
		a.log = slog.Default()
	}
	a.sessions = newAdminSessions(cfg.Sessions, cfg.Gate.Fingerprint(), cfg.Service.AdminNamed)
	if cfg.Sessions != nil {
		// Sessions of a former admin token would be refused one by one
		// anyway; ending them now leaves none behind.
		if err := cfg.Sessions.EndSessionsExcept(context.Background(), a.sessions.adminHash); err != nil {
			a.log.Error("ending the sessions of a former admin token failed", "err", err)
		}
	}
	return a
}

// adminView is the view model of every admin page; each page sets its own
// fields besides the common ones.
type adminView struct {
	Title string
	Nav   string // the current section: "overview", "tiers", "usage", "accounts", "keys", "prices", "audit" or "admins"
	CSRF  string // set when signed in; the header then shows the navigation
	// Who is signed in, and in what role; the page hides the forms the
	// role may not use (the server refuses them anyway).
	Who, Role            string
	CanSupport, CanAdmin bool
	Flash                string // what the last change did
	Alert                string // an error about the page as a whole

	LoginError string             // login
	Tiers      []adminTierRow     // tiers
	Changes    []adminChangeRow   // tiers: the latest entries of the audit log
	Form       *adminTierForm     // tiers (create), tier (edit)
	Tier       string             // delete: the tier in question
	CanDelete  bool               // delete
	Usage      *adminUsageView    // usage
	Overview   *adminOverview     // overview
	Shadow     *adminShadowView   // tier: its shadow limits, when it has some
	Preview    *adminPreviewView  // tier: the figures of a preview
	NewKey     *adminNewKey       // key: a key just made, with its secret
	Keys       *adminKeys         // keys: the service keys
	Accounts   *adminAccountsView // accounts
	Account    *adminAccountView  // account
	Prices     *adminPricesView   // prices
	Admins     *adminAdminsView   // admins
	Audit      *adminAuditView    // audit
	Message    string             // error
}

// Register adds the admin page's routes to e, under the middleware e
// already has (main gives it to api.Config.Pages, so that the page is
// served behind the API's). Every page and form except sign-in needs a
// session; the JSON API under /v1 keeps its bearer token. The client
// whose wrong tokens are counted is e's IPExtractor's, which the API
// server sets.
func (a *Admin) Register(e *echo.Echo) {
	// Every route of the group is judged by policy.Routes first
	// (authorize): a page or form the table does not list is refused to
	// everyone, and one it does needs a session of an admin of its role.
	g := e.Group("/admin", a.headers, a.sameOrigin, a.authorize)
	static := http.StripPrefix("/admin/static/", http.FileServerFS(Static))
	g.GET("/static/*", echo.WrapHandler(static))
	g.GET("/login", a.handleLoginPage)
	g.POST("/login", a.handleLogin)

	g.GET("", a.handleTiersPage)
	g.GET("/", a.redirectTo("/admin"))
	g.GET("/tiers", a.redirectTo("/admin"))
	g.GET("/tiers/:name", a.handleTierPage)
	g.GET("/tiers/:name/delete", a.handleDeletePage)
	g.GET("/usage", a.handleUsagePage)
	g.GET("/overview", a.handleOverviewPage)
	g.GET("/accounts", a.handleAccountsPage)
	g.GET("/account", a.handleAccountPage)
	g.GET("/keys", a.handleKeysPage)
	g.GET("/prices", a.handlePricesPage)
	g.GET("/admins", a.handleAdminsPage)
	g.GET("/audit", a.handleAuditPage)

	forms := []echo.MiddlewareFunc{a.requireCSRF}
	g.POST("/logout", a.handleLogout, forms...)
	g.POST("/tiers", a.handleCreateTier, forms...)
	g.POST("/tiers/:name", a.handleSaveTier, forms...)
	g.POST("/tiers/:name/delete", a.handleDeleteTier, forms...)
	g.POST("/tiers/:name/preview", a.handlePreviewTier, forms...)
	g.POST("/tiers/:name/promote", a.handlePromoteTier, forms...)
	g.POST("/usage/clear", a.handleClearUsage, forms...)
	g.POST("/users/save", a.handleSaveRecord, forms...)
	g.POST("/users/delete", a.handleDeleteRecord, forms...)
	g.POST("/keys", a.handleCreateKey, forms...)
	g.POST("/accounts", a.handleCreateAccount, forms...)
	g.POST("/accounts/save", a.handleSaveAccount, forms...)
	g.POST("/accounts/delete", a.handleDeleteAccount, forms...)
	g.POST("/accounts/clear", a.handleClearAccount, forms...)
	g.POST("/keys/:id/revoke", a.handleRevokeKey, forms...)
	g.POST("/runs/end", a.handleEndRun, forms...)
	g.POST("/prices", a.handleSavePrices, forms...)
	g.POST("/admins", a.handleCreateAdmin, forms...)
	g.POST("/admins/:name/role", a.handleSetAdminRole, forms...)
	g.POST("/admins/:name/revoke", a.handleRevokeAdmin, forms...)
	a.routes = make(map[string]bool)
	for _, r := range e.Routes() {
		if strings.HasPrefix(r.Path, "/admin") {
			a.routes[r.Method+" "+r.Path] = true
		}
	}
}

// headers sets the security headers of every admin response. Pages carry
// CSRF tokens and user data, so no cache keeps them.
func (a *Admin) headers(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("Content-Security-Policy", adminCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		return next(c)
	}
}

// sameOrigin refuses state-changing requests sent by another site, judged
// by Sec-Fetch-Site or else Origin against Host. It covers the sign-in form
// too, which has no session token yet to check.
func (a *Admin) sameOrigin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := a.origin.Check(c.Request()); err != nil {
			return a.renderError(c, http.StatusForbidden, "Request refused",
				"This form was sent from another site, so it was refused. Open the admin page and send it from there.")
		}
		return next(c)
	}
}

// adminKey is where authorize leaves the signed-in admin in a request's
// context, for the parts of a page that hide what its role may not use.
type adminKey struct{}

// roleOf returns the role of the admin signed in for ctx's request.
func roleOf(ctx context.Context) policy.Role {
	a, _ := ctx.Value(adminKey{}).(policy.Admin)
	return a.Role
}

// authorize judges every request of the page by policy.Routes: a route it
// does not list is refused to everyone (403); an open one (sign-in, the
// stylesheet) passes; any other needs a live session (else the sign-in
// page) of an admin of the route's least role (else 403, naming it).
// Nothing is changed for a request without a session, whatever its
// method. Changes are then recorded as the admin's, made through the page.
func (a *Admin) authorize(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		method, path := c.Request().Method, c.Path()
		access := policy.RouteAccess(method, path)
		need, admin := access.Role()
		switch {
		case access == policy.AccessOpen || !a.routes[method+" "+path]:
			return next(c)
		case !admin:
			return a.renderError(c, http.StatusForbidden, "Request refused", "This page declares no role that may use it, so it is refused to everyone.")
		}
		return a.requireSession(need, next)(c)
	}
}

// requireSession lets through requests with a live session of an admin of
// at least role need, and sends every request without a session to the
// sign-in page.
func (a *Admin) requireSession(need policy.Role, next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := adminSessionID(c)
		sess, ok, err := a.sessions.get(c.Request().Context(), id, a.svc.Now())
		if err != nil {
			return a.fail(c, err)
		}
		if !ok {
			if id != "" {
				a.clearCookie(c) // expired or from before a restart
			}
			return c.Redirect(http.StatusSeeOther, "/admin/login")
		}
		c.Set("admin.session", sess)
		c.Set("admin.session_id", id)
		if sess.admin.Role < need {
			return a.renderError(c, http.StatusForbidden, "Not for your role", policy.ErrorMessage(policy.ForbiddenError(sess.admin.Role, need)))
		}
		r := c.Request()
		ctx := policy.WithChangeSource(policy.WithActor(r.Context(), sess.admin.Name), policy.SourceAdmin)
		c.SetRequest(r.WithContext(context.WithValue(ctx, adminKey{}, sess.admin)))
		return next(c)
	}
}

// requireCSRF refuses a form whose token is not its session's.
func (a *Admin) requireCSRF(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		sess := adminSessionOf(c)
		// Only the body counts: a token in a URL would end up in logs and history.
		if !sess.validCSRF(c.Request().PostFormValue("csrf")) {
			return a.renderError(c, http.StatusForbidden, "Request refused",
				"This form is out of date or did not come from the admin page, so it was refused. Reload the page and try again.")
		}
		return next(c)
	}
}

// pathParam returns the named path parameter, unescaped. Echo routes on the
// raw path when the URL has escapes its default encoding would not produce,
// and then leaves parameters escaped.
func pathParam(c echo.Context, name string) (string, error) {
	v := c.Param(name)
	if c.Request().URL.RawPath == "" {
		return v, nil
	}
	u, err := url.PathUnescape(v)
	if err != nil {
		return "", policy.Errorf(policy.EINVALID, "path parameter %s is not a valid escaped string", name)
	}
	return u, nil
}

func adminSessionID(c echo.Context) string {
	ck, err := c.Cookie(adminSessionCookie)
	if err != nil {
		return ""
	}
	return ck.Value
}

func adminSessionOf(c echo.Context) adminSession {
	s, _ := c.Get("admin.session").(adminSession)
	return s
}

// view returns the common fields of a signed-in page and takes the
// session's flash message, which is shown once.
func (a *Admin) view(c echo.Context, title, nav string) adminView {
	id, _ := c.Get("admin.session_id").(string)
	who := adminSessionOf(c).admin
	return adminView{Title: title, Nav: nav, CSRF: adminSessionOf(c).csrf, Flash: a.sessions.takeFlash(id),
		Who: who.Name, Role: who.Role.String(), CanSupport: who.Role >= policy.RoleSupport, CanAdmin: who.Role >= policy.RoleAdmin}
}

// flash stores msg for the page the redirect after this request shows.
func (a *Admin) flash(c echo.Context, msg string) {
	id, _ := c.Get("admin.session_id").(string)
	a.sessions.setFlash(id, msg)
}

func (a *Admin) redirectTo(path string) echo.HandlerFunc {
	return func(c echo.Context) error { return c.Redirect(http.StatusSeeOther, path) }
}

// render executes the named page template with v.
func (a *Admin) render(c echo.Context, status int, name string, v adminView) error {
	var buf bytes.Buffer
	if err := Templates.ExecuteTemplate(&buf, name, v); err != nil {
		return fmt.Errorf("render admin page %s: %w", name, err)
	}
	return c.HTMLBlob(status, buf.Bytes())
}

// renderError shows a page that says what went wrong.
func (a *Admin) renderError(c echo.Context, status int, title, msg string) error {
	who := adminSessionOf(c).admin
	v := adminView{Title: title, Message: msg, CSRF: adminSessionOf(c).csrf, Who: who.Name, Role: who.Role.String(),
		CanSupport: who.Role >= policy.RoleSupport, CanAdmin: who.Role >= policy.RoleAdmin}
	return a.render(c, status, "error", v)
}

// fail shows err as a page, with the status the JSON API would give it.
// Internal failures are logged and shown without their text.
func (a *Admin) fail(c echo.Context, err error) error {
	status := policy.HTTPStatus(err)
	if status >= 500 {
		a.log.LogAttrs(c.Request().Context(), slog.LevelError, "admin page failed",
			slog.String("id", c.Response().Header().Get(echo.HeaderXRequestID)),
			slog.String("method", c.Request().Method),
			slog.String("path", policy.RedactKeySecrets(c.Request().URL.Path)),
			slog.Any("err", err))
	}
	return a.renderError(c, status, http.StatusText(status), policy.ErrorMessage(err))
}

func (a *Admin) handleLoginPage(c echo.Context) error {
	if _, ok, _ := a.sessions.get(c.Request().Context(), adminSessionID(c), a.svc.Now()); ok {
		return c.Redirect(http.StatusSeeOther, "/admin")
	}
	return a.render(c, http.StatusOK, "login", adminView{Title: "Sign in"})
}

func (a *Admin) handleLogin(c echo.Context) error {
	now := a.svc.Now()
	// From the body only: a token in a URL stays in histories and logs.
	token := c.Request().PostFormValue("token")
	v := adminView{Title: "Sign in"}
	if token == "" {
		v.LoginError = "Enter the admin token."
		return a.render(c, http.StatusBadRequest, "login", v)
	}
	who, secs, err := a.gate.SignIn(c.Request().Context(), a.svc, c.RealIP(), token, now)
	if secs > 0 {
		c.Response().Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		v.LoginError = fmt.Sprintf("Too many failed sign-ins from your address. Try again in %s.", humanDuration(secs))
		return a.render(c, http.StatusTooManyRequests, "login", v)
	}
	if policy.ErrorCode(err) == policy.EUNAUTHORIZED {
		v.LoginError = "Wrong admin token."
		return a.render(c, http.StatusUnauthorized, "login", v)
	} else if err != nil {
		return a.fail(c, err)
	}
	id, sess, err := a.sessions.create(c.Request().Context(), who, now)
	if err != nil {
		return a.fail(c, err)
	}
	c.SetCookie(&http.Cookie{
		Name:     adminSessionCookie,
		Value:    id,
		Path:     "/admin",
		Expires:  sess.expires,
		MaxAge:   int(SessionTTL / time.Second),
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
		Secure:   secureRequest(c),
	})
	return c.Redirect(http.StatusSeeOther, "/admin")
}

func (a *Admin) handleLogout(c echo.Context) error {
	id, _ := c.Get("admin.session_id").(string)
	if err := a.sessions.end(c.Request().Context(), id); err != nil {
		return a.fail(c, err)
	}
	a.clearCookie(c)
	return c.Redirect(http.StatusSeeOther, "/admin/login")
}

func (a *Admin) clearCookie(c echo.Context) {
	c.SetCookie(&http.Cookie{
		Name:     adminSessionCookie,
		Path:     "/admin",
		MaxAge:   -1,
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
		Secure:   secureRequest(c),
	})
}

// secureRequest reports whether the page was served over TLS, directly or
// through a proxy that says so; the session cookie is then Secure.
func secureRequest(c echo.Context) bool {
	return c.Request().TLS != nil || c.Scheme() == "https"
}

// humanDuration renders whole seconds as "42s", "3m 5s" or "2h 10m".
func humanDuration(secs int64) string {
	switch {
	case secs < 60:
		return fmt.Sprintf("%ds", secs)
	case secs < 3600:
		if secs%60 == 0 {
			return fmt.Sprintf("%dm", secs/60)
		}
		return fmt.Sprintf("%dm %ds", secs/60, secs%60)
	default:
		if secs%3600/60 == 0 {
			return fmt.Sprintf("%dh", secs/3600)
		}
		return fmt.Sprintf("%dh %dm", secs/3600, secs%3600/60)
	}
}
