package policy

import "fmt"

// Access is who may use a route of the service: no one, anyone, the
// holder of the route's own credential, or an admin of a least role. The
// zero Access refuses everyone, so that a route nobody thought about is
// closed rather than open.
type Access int8

const (
	// AccessRefused refuses everyone: the Access of a route the table
	// does not list.
	AccessRefused Access = iota
	// AccessOpen needs no credential: health, the API's description,
	// metrics, the page's sign-in and its stylesheet.
	AccessOpen
	// AccessOwn needs the route's own credential, never an admin token:
	// the API token of checks and calls, a gateway key.
	AccessOwn
	// AccessViewer, AccessSupport and AccessAdmin need an admin of at
	// least that role: a bearer token on the JSON API, a session on the
	// page.
	AccessViewer
	AccessSupport
	AccessAdmin
	// AccessAdminOrKey needs an admin (AccessAdmin), or a gateway key of
	// the user the route's resource belongs to: the route confirms the
	// resource is the key's user's before it acts, and answers 404 for
	// another user's, as for one that does not exist. A service key,
	// which speaks for many users, is refused.
	AccessAdminOrKey
)

// Role returns the least role a holds to, and false when a asks for no
// admin.
func (a Access) Role() (Role, bool) {
	switch a {
	case AccessViewer:
		return RoleViewer, true
	case AccessSupport:
		return RoleSupport, true
	case AccessAdmin, AccessAdminOrKey:
		return RoleAdmin, true
	}
	return 0, false
}

// String returns the role a needs, or "refused", "open" or "own".
func (a Access) String() string {
	if a == AccessAdminOrKey {
		return "admin or own key"
	}
	if r, ok := a.Role(); ok {
		return r.String()
	}
	switch a {
	case AccessOpen:
		return "open"
	case AccessOwn:
		return "own"
	}
	return "refused"
}

// RouteRule is one route of the access table.
type RouteRule struct {
	// Method is an HTTP method, or "*" for every method.
	Method string
	// Path is written as Echo writes it: /v1/tiers/:name.
	Path   string
	Access Access
}

// Routes is the one table of who may use each route of the JSON API and
// the admin page. The API and the page ask RouteAccess before any handler
// runs; a route it does not list is refused to everyone.
var Routes = []RouteRule{
	{"GET", "/healthz", AccessOpen},
	{"GET", "/openapi.yaml", AccessOpen},
	{"GET", "/metrics", AccessOpen},
	{"POST", "/v1/check", AccessOwn},
	{"POST", "/v1/calls/:call_id/finish", AccessOwn},
	{"POST", "/v1/calls/:call_id/keepalive", AccessOwn},
	{"*", "/llm/:name/*", AccessOwn},

	{"GET", "/v1/tiers", AccessViewer},
	{"GET", "/v1/tiers/:name", AccessViewer},
	{"PUT", "/v1/tiers/:name", AccessAdmin},
	{"DELETE", "/v1/tiers/:name", AccessAdmin},
	{"POST", "/v1/tiers/:name/preview", AccessViewer}, // changes nothing
	{"POST", "/v1/tiers/:name/promote", AccessAdmin},
	{"GET", "/v1/users", AccessViewer},
	{"GET", "/v1/users/:user_id", AccessViewer},
	{"PUT", "/v1/users/:user_id", AccessSupport},
	{"DELETE", "/v1/users/:user_id", AccessSupport},
	{"GET", "/v1/accounts", AccessViewer},
	{"GET", "/v1/accounts/:account_id", AccessViewer},
	{"PUT", "/v1/accounts/:account_id", AccessAdmin},
	{"DELETE", "/v1/accounts/:account_id", AccessAdmin},
	{"GET", "/v1/accounts/:account_id/usage", AccessViewer},
	{"GET", "/v1/accounts/:account_id/usage/periods", AccessViewer},
	{"DELETE", "/v1/accounts/:account_id/usage", AccessAdmin},
	{"GET", "/v1/keys", AccessViewer},
	{"POST", "/v1/keys", AccessSupport},
	{"DELETE", "/v1/keys/:id", AccessSupport},
	{"GET", "/v1/usage/:user_id", AccessViewer},
	{"GET", "/v1/usage/:user_id/periods", AccessViewer},
	{"DELETE", "/v1/usage/:user_id", AccessSupport},
	{"GET", "/v1/stats", AccessViewer},
	{"GET", "/v1/prices", AccessViewer},
	{"PUT", "/v1/prices", AccessAdmin},
	{"GET", "/v1/prices/versions", AccessViewer},
	{"GET", "/v1/admins", AccessAdmin},
	{"POST", "/v1/admins", AccessAdmin},
	{"PUT", "/v1/admins/:name", AccessAdmin},
	{"DELETE", "/v1/admins/:name", AccessAdmin},
	{"GET", "/v1/audit", AccessViewer},
	{"GET", "/v1/runs", AccessViewer},
	{"GET", "/v1/runs/:run_id", AccessViewer},
	{"POST", "/v1/runs/:run_id/end", AccessAdminOrKey}, // the kill switch, for the run's own agent too
	{"GET", "/v1/test/clock", AccessViewer},
	{"POST", "/v1/test/clock", AccessAdmin},

	{"GET", "/admin/static/*", AccessOpen},
	{"GET", "/admin/login", AccessOpen},
	{"POST", "/admin/login", AccessOpen},
	{"POST", "/admin/logout", AccessViewer},
	{"GET", "/admin", AccessViewer},
	{"GET", "/admin/", AccessViewer},
	{"GET", "/admin/tiers", AccessViewer},
	{"GET", "/admin/tiers/:name", AccessViewer},
	{"GET", "/admin/tiers/:name/delete", AccessAdmin},
	{"GET", "/admin/usage", AccessViewer},
	{"GET", "/admin/overview", AccessViewer},
	{"GET", "/admin/accounts", AccessViewer},
	{"GET", "/admin/account", AccessViewer},
	{"GET", "/admin/keys", AccessViewer},
	{"GET", "/admin/prices", AccessViewer},
	{"GET", "/admin/admins", AccessAdmin},
	{"GET", "/admin/audit", AccessViewer},
	{"POST", "/admin/tiers", AccessAdmin},
	{"POST", "/admin/tiers/:name", AccessAdmin},
	{"POST", "/admin/tiers/:name/delete", AccessAdmin},
	{"POST", "/admin/tiers/:name/preview", AccessViewer}, // changes nothing
	{"POST", "/admin/tiers/:name/promote", AccessAdmin},
	{"POST", "/admin/usage/clear", AccessSupport},
	{"POST", "/admin/users/save", AccessSupport},
	{"POST", "/admin/users/delete", AccessSupport},
	{"POST", "/admin/keys", AccessSupport},
	{"POST", "/admin/keys/:id/revoke", AccessSupport},
	{"POST", "/admin/runs/end", AccessAdmin},
	{"POST", "/admin/accounts", AccessAdmin},
	{"POST", "/admin/accounts/save", AccessAdmin},
	{"POST", "/admin/accounts/delete", AccessAdmin},
	{"POST", "/admin/accounts/clear", AccessAdmin},
	{"POST", "/admin/prices", AccessAdmin},
	{"POST", "/admin/admins", AccessAdmin},
	{"POST", "/admin/admins/:name/role", AccessAdmin},
	{"POST", "/admin/admins/:name/revoke", AccessAdmin},
}

var routeAccess = func() map[string]Access {
	m := make(map[string]Access, len(Routes))
	for _, r := range Routes {
		k := r.Method + " " + r.Path
		if _, dup := m[k]; dup {
			panic(fmt.Sprintf("policy.Routes lists %s twice", k))
		}
		m[k] = r.Access
	}
	return m
}()

// RouteAccess returns who may use the route of method and path (as Echo
// writes it), from Routes: AccessRefused for a route it does not list.
func RouteAccess(method, path string) Access {
	if a, ok := routeAccess[method+" "+path]; ok {
		return a
	}
	return routeAccess["* "+path]
}

// ForbiddenError is the error of an admin whose role is below the one a
// route needs: an EFORBIDDEN *Error naming the role needed.
func ForbiddenError(have Role, need Role) error {
	return Errorf(EFORBIDDEN, "this needs the role %s or above; you are %s", need, have)
}
