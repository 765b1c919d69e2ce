package web_test

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/policyguard/policyguard/policy"
	"github.com/policyguard/policyguard/web"
)

func TestAdminPageSignIn(t *testing.T) {
	e := newPageEnv(t)

	rec := e.do(pageRequest{method: http.MethodGet, path: "/admin"})
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/admin/login" {
		t.Fatalf("GET /admin signed out: %d to %q, want 303 to /admin/login", rec.Code, rec.Header().Get("Location"))
	}

	login := parsePage(t, e.do(pageRequest{method: http.MethodGet, path: "/admin/login"}), http.StatusOK)
	if got := pageAttr(login.control("Admin token"), "type"); got != "password" {
		t.Errorf("Admin token input type %q, want password", got)
	}
	if !slices.Contains(login.buttons(), "Sign in") {
		t.Errorf("buttons %q, want Sign in", login.buttons())
	}

	for _, tc := range []struct {
		name, token string
		query       string
		status      int
		msg         string
	}{
		{"wrong token", "not-the-token", "", http.StatusUnauthorized, "Wrong admin token."},
		{"token prefix", pageToken[:4], "", http.StatusUnauthorized, "Wrong admin token."},
		{"empty", "", "", http.StatusBadRequest, "Enter the admin token."},
		// A token in a URL stays in histories and logs: it signs no one in.
		{"token in the URL", "", "?token=" + url.QueryEscape(pageToken), http.StatusBadRequest, "Enter the admin token."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := e.do(pageRequest{method: http.MethodPost, path: "/admin/login" + tc.query, form: url.Values{"token": {tc.token}}})
			doc := parsePage(t, rec, tc.status)
			if got := doc.text("admin-token-error"); got != tc.msg {
				t.Errorf("error beside the field %q, want %q", got, tc.msg)
			}
			if got := pageAttr(doc.control("Admin token"), "aria-invalid"); got != "true" {
				t.Errorf("aria-invalid %q, want true", got)
			}
			if sc := rec.Header().Values("Set-Cookie"); len(sc) != 0 {
				t.Errorf("Set-Cookie %q after a failed sign-in", sc)
			}
		})
	}

	rec = e.do(pageRequest{method: http.MethodPost, path: "/admin/login", form: url.Values{"token": {pageToken}}})
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/admin" {
		t.Fatalf("sign in: %d to %q, want 303 to /admin", rec.Code, rec.Header().Get("Location"))
	}
	c := pageSessionCookie(t, rec)
	if !c.HttpOnly {
		t.Error("session cookie is not HttpOnly")
	}
	if c.SameSite != http.SameSiteStrictMode {
		t.Errorf("SameSite %v, want Strict", c.SameSite)
	}
	if c.Secure {
		t.Error("session cookie is Secure over plain HTTP: the browser would never send it back")
	}
	if c.Path != "/admin" {
		t.Errorf("Path %q, want /admin", c.Path)
	}
	if want := pageT0.Add(web.SessionTTL); !c.Expires.Equal(want) {
		t.Errorf("Expires %v, want %v", c.Expires, want)
	}
	if want := int(web.SessionTTL / time.Second); c.MaxAge != want {
		t.Errorf("Max-Age %d, want %d", c.MaxAge, want)
	}
	if len(c.Value) < 43 {
		t.Errorf("session id %q is shorter than 32 random bytes", c.Value)
	}

	tiers := parsePage(t, e.do(pageRequest{method: http.MethodGet, path: "/admin", cookie: c}), http.StatusOK)
	if tiers.byID("tier-free") == nil {
		t.Error("the tiers page has no row for tier free")
	}
	if got := e.do(pageRequest{method: http.MethodGet, path: "/admin/login", cookie: c}); got.Code != http.StatusSeeOther {
		t.Errorf("GET /admin/login signed in: status %d, want 303 to /admin", got.Code)
	}
}

func TestAdminPageSecureCookieOverTLS(t *testing.T) {
	e := newPageEnv(t)
	for _, tc := range []struct {
		name       string
		tls        bool
		remote     string
		header     map[string]string
		wantSecure bool
	}{
		{name: "TLS", tls: true, wantSecure: true},
		{name: "proxy on a private address says https", remote: "10.0.0.5:40000",
			header: map[string]string{"X-Forwarded-Proto": "https"}, wantSecure: true},
		{name: "public client claims https", remote: "203.0.113.5:40000",
			header: map[string]string{"X-Forwarded-Proto": "https"}, wantSecure: false},
		{name: "plain HTTP", wantSecure: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := pageRequest{method: http.MethodPost, path: "/admin/login", form: url.Values{"token": {pageToken}},
				header: tc.header, remote: tc.remote}
			rec := e.doTLS(req, tc.tls)
			if rec.Code != http.StatusSeeOther {
				t.Fatalf("status %d, want 303", rec.Code)
			}
			if got := pageSessionCookie(t, rec).Secure; got != tc.wantSecure {
				t.Errorf("Secure %v, want %v", got, tc.wantSecure)
			}
		})
	}
}

// doTLS is do, with the request marked as received over TLS when tls is set.
func (e *pageEnv) doTLS(r pageRequest, overTLS bool) *httptest.ResponseRecorder {
	e.t.Helper()
	if !overTLS {
		return e.do(r)
	}
	return e.doWith(r, func(req *http.Request) { req.TLS = &tls.ConnectionState{} })
}

func TestAdminPageSessionExpiry(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()

	e.clock.Advance(web.SessionTTL - time.Second)
	if rec := b.get("/admin"); rec.Code != http.StatusOK {
		t.Fatalf("a second before expiry: status %d, want 200", rec.Code)
	}

	e.clock.Advance(time.Second)
	rec := b.get("/admin")
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/admin/login" {
		t.Fatalf("at expiry: %d to %q, want 303 to /admin/login", rec.Code, rec.Header().Get("Location"))
	}
	if c := pageSessionCookie(t, rec); c.MaxAge >= 0 {
		t.Errorf("expired session's cookie not cleared: Max-Age %d", c.MaxAge)
	}

	form := pageTierForm(e.tier("free"))
	form.Set("requests_per_minute", "1")
	rec = b.post("/admin/tiers/free", form)
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/admin/login" {
		t.Fatalf("POST after expiry: %d to %q, want 303 to /admin/login", rec.Code, rec.Header().Get("Location"))
	}
	if got := e.tier("free").Limits.Value(policy.RequestsPerMinute); got != 10 {
		t.Errorf("an expired session changed the tier: requests_per_minute %d, want 10", got)
	}

	// Signing in again starts a fresh session.
	if rec := e.signIn().get("/admin"); rec.Code != http.StatusOK {
		t.Errorf("after signing in again: status %d, want 200", rec.Code)
	}
}

func TestAdminPageSignOut(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()

	if rec := b.post("/admin/logout", url.Values{"csrf": {""}}); rec.Code != http.StatusForbidden {
		t.Fatalf("sign out without the CSRF token: status %d, want 403", rec.Code)
	}
	if rec := b.get("/admin"); rec.Code != http.StatusOK {
		t.Fatalf("a refused sign-out ended the session: status %d", rec.Code)
	}

	rec := b.post("/admin/logout", nil)
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/admin/login" {
		t.Fatalf("sign out: %d to %q, want 303 to /admin/login", rec.Code, rec.Header().Get("Location"))
	}
	if c := pageSessionCookie(t, rec); c.MaxAge >= 0 || c.Value != "" {
		t.Errorf("sign out left the cookie: %v", c)
	}
	// A browser that kept the cookie anyway is signed out all the same.
	if rec := b.get("/admin"); rec.Code != http.StatusSeeOther {
		t.Errorf("old cookie after sign out: status %d, want 303", rec.Code)
	}
}

func TestAdminPageSignInThrottle(t *testing.T) {
	e := newPageEnv(t)
	login := func(token, remote string, header map[string]string) *httptest.ResponseRecorder {
		return e.do(pageRequest{method: http.MethodPost, path: "/admin/login", form: url.Values{"token": {token}}, remote: remote, header: header})
	}
	const client = "198.51.100.7:4000"
	for i := range policy.MaxAdminFailures {
		e.clock.Advance(time.Second)
		if rec := login("wrong", client, nil); rec.Code != http.StatusUnauthorized {
			t.Fatalf("failure %d: status %d, want 401", i+1, rec.Code)
		}
	}

	// Even the right token is refused now: otherwise the answer would tell a
	// guesser when a guess was right.
	rec := login(pageToken, client, nil)
	doc := parsePage(t, rec, http.StatusTooManyRequests)
	if got, want := doc.text("admin-token-error"), "Too many failed sign-ins from your address. Try again in 14m 56s."; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	if got := rec.Header().Get("Retry-After"); got != "896" {
		t.Errorf("Retry-After %q, want 896", got)
	}
	if len(rec.Header().Values("Set-Cookie")) != 0 {
		t.Error("a throttled sign-in set a cookie")
	}
	// Claiming another address in a header does not escape the throttle.
	if rec := login(pageToken, client, map[string]string{"X-Forwarded-For": "203.0.113.9", "X-Real-IP": "203.0.113.9"}); rec.Code != http.StatusTooManyRequests {
		t.Errorf("with X-Forwarded-For: status %d, want 429", rec.Code)
	}
	// Another client is not affected.
	if rec := login(pageToken, "198.51.100.8:4000", nil); rec.Code != http.StatusSeeOther {
		t.Errorf("another client: status %d, want 303", rec.Code)
	}

	// The oldest failure leaves the window after SignInWindow: one attempt
	// is allowed again, not five.
	e.clock.Advance(policy.AdminFailureWindow - policy.MaxAdminFailures*time.Second + time.Second)
	if rec := login("wrong", client, nil); rec.Code != http.StatusUnauthorized {
		t.Fatalf("after the first failure left the window: status %d, want 401", rec.Code)
	}
	if rec := login(pageToken, client, nil); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("right after another failure: status %d, want 429", rec.Code)
	}
	e.clock.Advance(policy.AdminFailureWindow)
	if rec := login(pageToken, client, nil); rec.Code != http.StatusSeeOther {
		t.Fatalf("after the window: status %d, want 303", rec.Code)
	}
	// A success forgets the failures.
	for range policy.MaxAdminFailures - 1 {
		login("wrong", client, nil)
	}
	if rec := login(pageToken, client, nil); rec.Code != http.StatusSeeOther {
		t.Errorf("after %d failures: status %d, want 303", policy.MaxAdminFailures-1, rec.Code)
	}
}

func TestAdminPageCSRF(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	other := e.signIn()
	form := func(csrf string) url.Values {
		f := pageTierForm(e.tier("free"))
		f.Set("requests_per_minute", "1")
		f.Set("csrf", csrf)
		return f
	}
	withoutCSRF := func(f url.Values) url.Values {
		f.Del("csrf")
		return f
	}
	for _, tc := range []struct {
		name   string
		form   url.Values
		path   string // default /admin/tiers/free
		header map[string]string
	}{
		{name: "no token", form: form("")},
		{name: "wrong token", form: form(otherFirstByte(b.csrf))},
		{name: "another session's token", form: form(other.csrf)},
		{name: "token in the URL only", form: withoutCSRF(form("")), path: "/admin/tiers/free?csrf=" + url.QueryEscape(b.csrf)},
		{name: "cross-site Sec-Fetch-Site", form: form(b.csrf), header: map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{name: "same-site Sec-Fetch-Site", form: form(b.csrf), header: map[string]string{"Sec-Fetch-Site": "same-site"}},
		{name: "foreign Origin", form: form(b.csrf), header: map[string]string{"Origin": "https://evil.example"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path
			if path == "" {
				path = "/admin/tiers/free"
			}
			rec := e.do(pageRequest{method: http.MethodPost, path: path, form: tc.form, cookie: b.cookie, header: tc.header})
			doc := parsePage(t, rec, http.StatusForbidden)
			if !strings.Contains(doc.raw, "refused") {
				t.Errorf("the page does not say the request was refused:\n%s", doc.raw)
			}
			if got := e.tier("free").Limits.Value(policy.RequestsPerMinute); got != 10 {
				t.Fatalf("a refused form changed the tier: requests_per_minute %d", got)
			}
		})
	}

	t.Run("cross-site sign-in", func(t *testing.T) {
		rec := e.do(pageRequest{method: http.MethodPost, path: "/admin/login", form: url.Values{"token": {pageToken}},
			header: map[string]string{"Sec-Fetch-Site": "cross-site"}})
		parsePage(t, rec, http.StatusForbidden)
		if len(rec.Header().Values("Set-Cookie")) != 0 {
			t.Error("a cross-site sign-in set a cookie")
		}
	})

	// The same form from the page itself goes through.
	rec := e.do(pageRequest{method: http.MethodPost, path: "/admin/tiers/free", form: form(b.csrf), cookie: b.cookie,
		header: map[string]string{"Origin": "http://example.com", "Sec-Fetch-Site": "same-origin"}})
	if rec.Code != http.StatusSeeOther {
		t.Fatalf("same-origin form: status %d, want 303\n%s", rec.Code, rec.Body)
	}
	if got := e.tier("free").Limits.Value(policy.RequestsPerMinute); got != 1 {
		t.Errorf("requests_per_minute %d, want 1", got)
	}
}

func TestAdminPageTierValidation(t *testing.T) {
	limitMsg := func(field string) string { return field + " must be an integer from 0 to 2147483647" }
	for _, tc := range []struct {
		name   string
		fields map[string]string // changed from the free tier's values
		want   map[string]string // error beside each field, by input id
	}{
		{"letters", map[string]string{"requests_per_minute": "ten"}, map[string]string{"tier-requests-per-minute": limitMsg("requests_per_minute")}},
		{"negative", map[string]string{"requests_per_hour": "-1"}, map[string]string{"tier-requests-per-hour": limitMsg("requests_per_hour")}},
		{"fraction", map[string]string{"requests_per_day": "1.5"}, map[string]string{"tier-requests-per-day": limitMsg("requests_per_day")}},
		{"too big", map[string]string{"burst_allowance": "2147483648"}, map[string]string{"tier-burst-allowance": limitMsg("burst_allowance")}},
		{"empty", map[string]string{"requests_per_minute": ""}, map[string]string{"tier-requests-per-minute": "requests_per_minute is required"}},
		{"bad feature", map[string]string{"features": "chat, two words"},
			map[string]string{"tier-features": `feature "two words" must be "*" or match [A-Za-z0-9][A-Za-z0-9_.:-]{0,63}`}},
		{"feature twice", map[string]string{"features": "chat,search, chat"}, map[string]string{"tier-features": `feature "chat" is listed twice`}},
		{"long description", map[string]string{"description": strings.Repeat("x", 1025)}, map[string]string{"tier-description": "description must be at most 1024 bytes"}},
		{"two fields", map[string]string{"requests_per_minute": "x", "requests_per_day": "-5"}, map[string]string{
			"tier-requests-per-minute": limitMsg("requests_per_minute"),
			"tier-requests-per-day":    limitMsg("requests_per_day"),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newPageEnv(t)
			b := e.signIn()
			before := e.tier("free")
			form := pageTierForm(before)
			for k, v := range tc.fields {
				form.Set(k, v)
			}
			doc := parsePage(t, b.post("/admin/tiers/free", form), http.StatusBadRequest)
			if got, want := doc.alert(), "The tier was not saved: correct the fields marked below."; got != want {
				t.Errorf("alert %q, want %q", got, want)
			}
			for id, want := range tc.want {
				if got := doc.text(id + "-error"); got != want {
					t.Errorf("beside %s: %q, want %q", id, got, want)
				}
				input := doc.byID(id)
				if got := pageAttr(input, "aria-invalid"); got != "true" {
					t.Errorf("%s aria-invalid %q, want true", id, got)
				}
				if got := pageAttr(input, "aria-describedby"); !strings.Contains(got, id+"-error") {
					t.Errorf("%s aria-describedby %q does not name its error", id, got)
				}
			}
			// Every field keeps what the admin typed, valid or not.
			for field, typed := range form {
				if field == "csrf" || field == "name" || field == "version" {
					continue
				}
				id := "tier-" + strings.ReplaceAll(field, "_", "-")
				if got := pageValue(doc.byID(id)); got != strings.Join(strings.Fields(typed[0]), " ") {
					t.Errorf("%s shows %q, want what was typed, %q", id, got, typed[0])
				}
				if _, bad := tc.want[id]; !bad && doc.byID(id+"-error") != nil {
					t.Errorf("%s has an error but was valid", id)
				}
			}
			if after := e.tier("free"); !after.UpdatedAt.Equal(before.UpdatedAt) || after.Limits.Value(policy.RequestsPerMinute) != before.Limits.Value(policy.RequestsPerMinute) {
				t.Errorf("an invalid form changed the tier: %+v", after)
			}
		})
	}
}

func TestAdminPageCreateValidation(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	for _, tc := range []struct {
		name, tier, want string
	}{
		{"bad name", "Gold Plan", "name must match [a-z0-9][a-z0-9_-]{0,62}"},
		{"no name", "", "name must match [a-z0-9][a-z0-9_-]{0,62}"},
		{"existing", "pro", "a tier named pro already exists: edit it instead"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			form := url.Values{"name": {tc.tier}, "requests_per_minute": {"5"}, "requests_per_hour": {"50"},
				"requests_per_day": {"500"}, "burst_allowance": {"0"}, "features": {"chat"}, "description": {"typed"}}
			doc := parsePage(t, b.post("/admin/tiers", form), http.StatusBadRequest)
			if got := doc.text("tier-name-error"); got != tc.want {
				t.Errorf("beside Name: %q, want %q", got, tc.want)
			}
			if got := pageValue(doc.control("Name")); got != tc.tier {
				t.Errorf("Name shows %q, want %q", got, tc.tier)
			}
			if got := pageValue(doc.control("Description")); got != "typed" {
				t.Errorf("Description shows %q, want what was typed", got)
			}
			if doc.byID("tier-free") == nil {
				t.Error("the tiers table is missing from the page sent back")
			}
		})
	}
	if got := e.tier("pro").Limits.Value(policy.RequestsPerMinute); got != 60 {
		t.Errorf("creating an existing tier replaced it: requests_per_minute %d", got)
	}
}

func TestAdminPageEscaping(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	const xss = `<script>alert(1)</script>`
	form := url.Values{"name": {"xss"}, "requests_per_minute": {"1"}, "requests_per_hour": {"2"},
		"requests_per_day": {"3"}, "burst_allowance": {"0"}, "features": {"chat"}, "description": {xss}}
	doc := b.follow(b.post("/admin/tiers", form), "/admin")
	if got := doc.cell("tier-xss", "description"); got != xss {
		t.Errorf("description cell reads %q, want the text %q", got, xss)
	}
	if !strings.Contains(doc.raw, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Error("the tiers page does not contain the escaped description")
	}
	if strings.Contains(doc.raw, xss) {
		t.Error("the tiers page contains the description unescaped")
	}

	edit := parsePage(t, b.get("/admin/tiers/xss"), http.StatusOK)
	if got := pageValue(edit.control("Description")); got != xss {
		t.Errorf("edit form Description %q, want %q", got, xss)
	}
	if strings.Contains(edit.raw, xss) {
		t.Error("the edit page contains the description unescaped")
	}

	// Values that fail validation come back escaped too: in the input and
	// in the message that quotes them.
	bad := pageTierForm(e.tier("free"))
	bad.Set("requests_per_minute", `"><img src=x>`)
	bad.Set("features", `<img src=x>`)
	page := parsePage(t, b.post("/admin/tiers/free", bad), http.StatusBadRequest)
	if strings.Contains(page.raw, "<img") {
		t.Errorf("an invalid value came back unescaped:\n%s", page.raw)
	}
	if got := pageValue(page.control("Requests per minute")); got != `"><img src=x>` {
		t.Errorf("Requests per minute shows %q", got)
	}
	if got := page.text("tier-features-error"); !strings.Contains(got, `"<img src=x>"`) {
		t.Errorf("features error %q does not quote the value", got)
	}

	// A user id is escaped in the look-up heading.
	e.check(`<b>bold</b>`, "")
	usage := parsePage(t, b.get("/admin/usage?user_id="+url.QueryEscape(`<b>bold</b>`)), http.StatusOK)
	if strings.Contains(usage.raw, "<b>bold") || !strings.Contains(usage.raw, "&lt;b&gt;bold&lt;/b&gt;") {
		t.Error("the user id is not escaped on the look-up page")
	}

	if csp := b.get("/admin").Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy %q does not forbid scripts", csp)
	}
}

func TestAdminPageSaveAppliesToNextCheck(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()

	for i := range 3 {
		if got := e.check("before", "free"); got != "admitted" {
			t.Fatalf("check %d before the edit: %s, want admitted", i+1, got)
		}
	}
	edit := parsePage(t, b.get("/admin/tiers/free"), http.StatusOK)
	if got := pageValue(edit.control("Requests per minute")); got != "10" {
		t.Fatalf("edit form Requests per minute %q, want 10", got)
	}
	if !pageHasAttr(edit.control("Name"), "readonly") {
		t.Error("the edit form lets the name change")
	}

	form := pageTierForm(e.tier("free"))
	form.Set("requests_per_minute", "1")
	form.Set("burst_allowance", "0")
	form.Set("features", " chat , search,, ")
	e.clock.Advance(90 * time.Second)
	doc := b.follow(b.post("/admin/tiers/free", form), "/admin")
	if got, want := doc.flash(), "Saved tier free — applies to the next check"; got != want {
		t.Errorf("flash %q, want %q", got, want)
	}
	if got := doc.cell("tier-free", "requests_per_minute"); got != "1" {
		t.Errorf("table shows requests_per_minute %q, want 1", got)
	}
	if got := doc.cell("tier-free", "features"); got != "chat search" {
		t.Errorf("table shows features %q, want chat and search", got)
	}
	if got, want := doc.cell("tier-free", "updated_at"), "2026-05-04 12:01:30 UTC"; got != want {
		t.Errorf("last change %q, want %q", got, want)
	}
	// The flash shows once.
	if again := parsePage(t, b.get("/admin"), http.StatusOK); again.flash() != "" {
		t.Errorf("flash shown twice: %q", again.flash())
	}

	if got := e.check("after", "free"); got != "admitted" {
		t.Fatalf("first check after the edit: %s, want admitted", got)
	}
	if got := e.check("after", "free"); got != "minute" {
		t.Fatalf("second check after the edit: %s, want refused by the minute: the new limit of 1 is not enforced", got)
	}
}

func TestAdminPageCreateAndDelete(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()

	form := url.Values{"name": {" gold "}, "requests_per_minute": {"1"}, "requests_per_hour": {"1000"},
		"requests_per_day": {"100000"}, "burst_allowance": {"0"}, "features": {"chat, *"}, "description": {"Gold plan"}}
	doc := b.follow(b.post("/admin/tiers", form), "/admin")
	if got, want := doc.flash(), "Created tier gold — applies to the next check"; got != want {
		t.Errorf("flash %q, want %q", got, want)
	}
	if got := doc.cell("tier-gold", "requests_per_day"); got != "100,000" {
		t.Errorf("requests_per_day cell %q, want 100,000", got)
	}
	if got := e.check("g", "gold"); got != "admitted" {
		t.Fatalf("first check on the new tier: %s", got)
	}
	if got := e.check("g", "gold"); got != "minute" {
		t.Fatalf("second check on the new tier: %s, want refused by the minute", got)
	}

	confirm := parsePage(t, b.get("/admin/tiers/gold/delete"), http.StatusOK)
	if !slices.Contains(confirm.buttons(), "Delete") {
		t.Fatalf("the confirmation page has no Delete button: %q", confirm.buttons())
	}
	if e.tier("gold").Name != "gold" {
		t.Fatal("opening the confirmation deleted the tier")
	}
	doc = b.follow(b.post("/admin/tiers/gold/delete", nil), "/admin")
	if got := doc.flash(); !strings.HasPrefix(got, "Deleted tier gold") {
		t.Errorf("flash %q, want Deleted tier gold…", got)
	}
	if doc.byID("tier-gold") != nil {
		t.Error("the deleted tier is still in the table")
	}
	if got := b.get("/admin/tiers/gold"); got.Code != http.StatusNotFound {
		t.Errorf("edit page of the deleted tier: status %d, want 404", got.Code)
	}
	if got := e.check("g", "gold"); got != policy.EINVALID {
		t.Errorf("check on the deleted tier: %s, want %s", got, policy.EINVALID)
	}

	// The default tier cannot go: the page says so and offers no button,
	// and a forged form is refused.
	free := parsePage(t, b.get("/admin/tiers/free/delete"), http.StatusOK)
	if slices.Contains(free.buttons(), "Delete") {
		t.Error("the default tier's confirmation page offers Delete")
	}
	if !strings.Contains(free.alert(), "default tier") {
		t.Errorf("alert %q does not explain why", free.alert())
	}
	conflict := parsePage(t, b.post("/admin/tiers/free/delete", nil), http.StatusConflict)
	if !strings.Contains(conflict.alert(), "cannot be deleted") {
		t.Errorf("alert %q", conflict.alert())
	}
	e.tier("free") // still there
}

func TestAdminPageUsage(t *testing.T) {
	e := newPageEnv(t)
	b := e.signIn()
	for range 3 {
		if got := e.check("alice", "free"); got != "admitted" {
			t.Fatalf("check: %s", got)
		}
		e.clock.Advance(10 * time.Second)
	}
	// Now t0+30s; the requests were at t0, t0+10s and t0+20s.

	doc := parsePage(t, b.get("/admin/usage?user_id=alice&tier="), http.StatusOK)
	for _, w := range []string{"minute", "hour", "day"} {
		if got := doc.cell("window-"+w, "count"); got != "3" {
			t.Errorf("%s count %q, want 3", w, got)
		}
	}
	if doc.byID("window-minute") != nil && strings.Contains(pageText(doc.byID("window-minute")), "15") {
		t.Error("counts-only look-up shows a limit")
	}

	doc = parsePage(t, b.get("/admin/usage?user_id=alice&tier=free"), http.StatusOK)
	for _, c := range []struct{ window, field, want string }{
		{"minute", "limit", "15"},
		{"minute", "remaining", "12"},
		{"minute", "reset", "in 30s (12:01:00 UTC)"},
		{"hour", "limit", "100"},
		{"hour", "remaining", "97"},
		{"day", "remaining", "997"},
	} {
		if got := doc.cell("window-"+c.window, c.field); got != c.want {
			t.Errorf("%s %s %q, want %q", c.window, c.field, got, c.want)
		}
	}
	if got := pageValue(doc.control("User id")); got != "alice" {
		t.Errorf("User id shows %q", got)
	}

	doc = b.follow(b.post("/admin/usage/clear", url.Values{"user_id": {"alice"}, "tier": {"free"}}), "/admin/usage?tier=free&user_id=alice")
	if got := doc.flash(); !strings.HasPrefix(got, "Cleared the history of user alice") {
		t.Errorf("flash %q", got)
	}
	if got := doc.cell("window-day", "count"); got != "0" {
		t.Errorf("day count after clearing %q, want 0", got)
	}
	if got := doc.cell("window-minute", "reset"); got != "—" {
		t.Errorf("reset of an empty window %q, want —", got)
	}

	for _, tc := range []struct{ query, id, want string }{
		{"user_id=&tier=", "user-id-error", "Enter a user id."},
		{"user_id=" + strings.Repeat("u", 257), "user-id-error", "user_id must be at most 256 bytes"},
		{"user_id=alice&tier=nope", "usage-tier-error", `unknown tier "nope"`},
	} {
		doc := parsePage(t, b.get("/admin/usage?"+tc.query), http.StatusBadRequest)
		if got := doc.text(tc.id); got != tc.want {
			t.Errorf("%s: %s %q, want %q", tc.query, tc.id, got, tc.want)
		}
	}
}

// TestAdminPageLabels checks that every control has a visible label tied to
// it, and that labels and buttons read as documented: they are how people
// and the browser test find them.
func TestAdminPageLabels(t *testing.T) {
	e := newPageEnv(t)
	login := parsePage(t, e.do(pageRequest{method: http.MethodGet, path: "/admin/login"}), http.StatusOK)
	b := e.signIn()
	e.check("bob", "")
	e.putAccount("acme", "pro")
	e.putMember("carol", "acme", "")
	pages := []*pageDoc{
		login,
		parsePage(t, b.get("/admin"), http.StatusOK),
		parsePage(t, b.get("/admin/tiers/pro"), http.StatusOK),
		parsePage(t, b.get("/admin/tiers/pro/delete"), http.StatusOK),
		parsePage(t, b.get("/admin/usage?user_id=bob&tier=free"), http.StatusOK),
		parsePage(t, b.get("/admin/accounts"), http.StatusOK),
		parsePage(t, b.get("/admin/account?account_id=acme"), http.StatusOK),
	}
	labels, buttons := map[string]bool{}, map[string]bool{}
	for _, doc := range pages {
		for _, c := range doc.find(func(n *html.Node) bool {
			return (n.Data == "input" && pageAttr(n, "type") != "hidden") || n.Data == "select" || n.Data == "textarea"
		}) {
			id := pageAttr(c, "id")
			ls := doc.find(func(n *html.Node) bool { return n.Data == "label" && pageAttr(n, "for") == id && id != "" })
			if len(ls) != 1 || pageText(ls[0]) == "" {
				t.Errorf("%s %q has %d labels", c.Data, pageAttr(c, "name"), len(ls))
				continue
			}
			labels[pageText(ls[0])] = true
		}
		for _, text := range doc.buttons() {
			buttons[text] = true
		}
		if !strings.Contains(doc.raw, `name="viewport"`) {
			t.Error("a page has no viewport meta tag: phones would zoom out")
		}
	}
	for _, want := range []string{"Admin token", "Name", "Requests per minute", "Requests per hour", "Requests per day",
		"Burst allowance", "Features", "Description", "User id", "Account", "Pooled limits for accounts on this plan",
		"Account: requests per minute", "Account id", "Plan"} {
		if !labels[want] {
			t.Errorf("no label reads %q; labels: %v", want, labels)
		}
	}
	for _, want := range []string{"Sign in", "Save", "Create tier", "Delete", "Look up", "Clear history", "Sign out",
		"Create account", "Save account", "Delete account", "Clear pooled history"} {
		if !buttons[want] {
			t.Errorf("no button reads %q; buttons: %v", want, buttons)
		}
	}
}

func TestAdminPageStaticAssets(t *testing.T) {
	e := newPageEnv(t)
	rec := e.do(pageRequest{method: http.MethodGet, path: "/admin/static/admin.css"})
	if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/css") {
		t.Fatalf("admin.css: status %d, Content-Type %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	// Everything the page loads comes from the service itself.
	for _, path := range []string{"/admin/login", "/admin/static/admin.css"} {
		body := e.do(pageRequest{method: http.MethodGet, path: path}).Body.String()
		for _, ext := range []string{"http://", "https://", "//"} {
			for _, attr := range []string{`src="` + ext, `href="` + ext, "url(" + ext, "@import"} {
				if strings.Contains(body, attr) {
					t.Errorf("%s refers to another site: %s", path, attr)
				}
			}
		}
	}
}

// otherFirstByte returns token with its first byte changed: a wrong token
// that differs from the right one by one character, whatever it starts with.
func otherFirstByte(token string) string {
	if token[0] == 'x' {
		return "y" + token[1:]
	}
	return "x" + token[1:]
}
