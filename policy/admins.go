package policy

import (
	"context"
	"crypto/sha256"
	"strings"
	"time"
	"unicode/utf8"
)

// Role is what a named admin may do. Roles are ordered: each may do
// everything the one before it may. The zero Role is no role at all.
type Role int8

const (
	// RoleViewer reads everything the admin API and page show and changes
	// nothing.
	RoleViewer Role = iota + 1
	// RoleSupport is a viewer who may also edit user records and their
	// account membership, create and revoke gateway keys and forget a
	// user's usage.
	RoleSupport
	// RoleAdmin may do everything, including tiers, accounts, prices and
	// admins.
	RoleAdmin
)

// Roles lists every role, least first.
var Roles = []Role{RoleViewer, RoleSupport, RoleAdmin}

var roleNames = [...]string{RoleViewer: "viewer", RoleSupport: "support", RoleAdmin: "admin"}

// String returns the role's name: "viewer", "support" or "admin"; "" for
// the zero Role.
func (r Role) String() string {
	if r < RoleViewer || r > RoleAdmin {
		return ""
	}
	return roleNames[r]
}

// ParseRole returns the role named s, or an EINVALID error naming s.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles {
		if r.String() == s {
			return r, nil
		}
	}
	return 0, Errorf(EINVALID, "unknown role %s: want viewer, support or admin", Quote(s))
}

// BootstrapAdmin is the name of the built-in admin whose token is the
// service's -admin-token; its role is RoleAdmin. No named admin may take
// it.
const BootstrapAdmin = "bootstrap"

// ActorUnknown is the actor of a change made without one named: by a Go
// program calling the service, or logged before changes named their actor.
const ActorUnknown = "unknown"

// AdminTokenPrefix begins every named admin's token, so that one is known
// for what it is wherever it turns up. A token is AdminTokenPrefix and 32
// base64url characters: 192 random bits.
const AdminTokenPrefix = "pgadm_"

const adminTokenBytes = 24

var adminTokenLen = len(AdminTokenPrefix) + 32

// AdminUseInterval is how often at most a process records that an admin's
// token was used (Admin.LastUsedAt), as KeyUseInterval is for keys.
const AdminUseInterval = time.Minute

// Admin is a named admin. Its token is not part of it: the service shows
// the token once, when it creates the admin, and keeps only its SHA-256.
type Admin struct {
	Name       string
	Role       Role
	Note       string
	CreatedAt  time.Time
	LastUsedAt *time.Time // nil until first used
	// RevokedAt is when the admin was revoked; nil while it is live.
	RevokedAt *time.Time
}

// AdminStore keeps named admins; only the SHA-256 of a token is ever
// stored. Implementations are safe for concurrent use, and a change is
// seen at once by every process sharing the storage. Every change is
// recorded in the audit log in its own transaction, with the actor ctx
// carries (see WithActor).
type AdminStore interface {
	// CreateAdmin stores a, whose token's SHA-256 is tokenHash. A name a
	// live admin has is an ECONFLICT error; a revoked admin's row is
	// replaced.
	CreateAdmin(ctx context.Context, a Admin, tokenHash [32]byte) error
	// Admins returns every admin, revoked ones too, by name.
	Admins(ctx context.Context) ([]Admin, error)
	// AdminByTokenHash returns the live admin whose token's SHA-256 is h,
	// as stored now, or an ENOTFOUND error (a revoked admin is not found).
	AdminByTokenHash(ctx context.Context, h [32]byte) (Admin, error)
	// UpdateAdmin sets the live admin's role, or revokes it when revoke is
	// set, at at, and returns it as changed. ENOTFOUND for no such live
	// admin; ECONFLICT when the change would leave no live admin of role
	// RoleAdmin.
	UpdateAdmin(ctx context.Context, name string, role Role, revoke bool, at time.Time) (Admin, error)
	// TouchAdmin records that the admin was used at at, unless a later use
	// is recorded already; an unknown name is no error.
	TouchAdmin(ctx context.Context, name string, at time.Time) error
}

// WithAdmins makes the service keep named admins in as. Without it only
// the built-in admin exists, and the admin methods fail with EINTERNAL.
func WithAdmins(as AdminStore) Option { return func(s *Service) { s.admins = as } }

func errNoAdmins() error {
	return Errorf(EINTERNAL, "this service keeps no named admins (see policy.WithAdmins)")
}

// ValidateAdmin reports the first problem with a as a new admin: its name
// follows the rules of user ids and is not empty nor BootstrapAdmin or
// ActorUnknown, its role is one of Roles, its note at most MaxNote bytes
// of UTF-8.
func ValidateAdmin(a *Admin) error {
	switch {
	case a.Name == "":
		return Errorf(EINVALID, "name is required")
	case a.Role.String() == "":
		return Errorf(EINVALID, "role is required: viewer, support or admin")
	case len(a.Note) > MaxNote:
		return Errorf(EINVALID, "note must be at most 1024 bytes")
	case !utf8.ValidString(a.Note):
		return Errorf(EINVALID, "note must be valid UTF-8")
	case a.Name == BootstrapAdmin || a.Name == ActorUnknown:
		return Errorf(ECONFLICT, "name %s is in use: it is the built-in admin's", Quote(a.Name))
	}
	if err := ValidateUserID(a.Name); err != nil {
		return Errorf(EINVALID, "%s", strings.Replace(ErrorMessage(err), "user_id", "name", 1))
	}
	return nil
}

// CreateAdmin creates a named admin and returns it with its token. The
// token is not kept: this is the only time anyone sees it.
func (s *Service) CreateAdmin(ctx context.Context, name string, role Role, note string) (a Admin, token string, err error) {
	if s.admins == nil {
		return Admin{}, "", errNoAdmins()
	}
	a = Admin{Name: name, Role: role, Note: note}
	if err := ValidateAdmin(&a); err != nil {
		return Admin{}, "", err
	}
	token = AdminTokenPrefix + randomText(adminTokenBytes)
	a.CreatedAt = s.now().UTC().Truncate(Resolution)
	if err := s.admins.CreateAdmin(ctx, a, sha256.Sum256([]byte(token))); err != nil {
		return Admin{}, "", err
	}
	return a, token, nil
}

// Admins returns every named admin, revoked ones too, by name.
func (s *Service) Admins(ctx context.Context) ([]Admin, error) {
	if s.admins == nil {
		return nil, errNoAdmins()
	}
	return s.admins.Admins(ctx)
}

// SetAdminRole gives the live admin name the role. Demoting the last admin
// of RoleAdmin is an ECONFLICT error.
func (s *Service) SetAdminRole(ctx context.Context, name string, role Role) (Admin, error) {
	if s.admins == nil {
		return Admin{}, errNoAdmins()
	}
	if role.String() == "" {
		return Admin{}, Errorf(EINVALID, "role is required: viewer, support or admin")
	}
	return s.admins.UpdateAdmin(ctx, name, role, false, s.now().UTC().Truncate(Resolution))
}

// RevokeAdmin revokes the live admin name: from the next request on, its
// token and the page sessions it signed in are refused, by every process
// sharing the storage. Revoking the last admin of RoleAdmin is an
// ECONFLICT error.
func (s *Service) RevokeAdmin(ctx context.Context, name string) error {
	if s.admins == nil {
		return errNoAdmins()
	}
	_, err := s.admins.UpdateAdmin(ctx, name, 0, true, s.now().UTC().Truncate(Resolution))
	return err
}

// AdminByToken returns the live named admin whose token this is; ENOTFOUND
// for any other token, including one that is not shaped as an admin's. It
// reads the store every time, so a revoked admin is refused at once on
// every replica, and records LastUsedAt at most once per AdminUseInterval
// per admin, best effort.
func (s *Service) AdminByToken(ctx context.Context, token string) (Admin, error) {
	if s.admins == nil || !wellFormedKeyText(token, AdminTokenPrefix, adminTokenLen) {
		return Admin{}, Errorf(ENOTFOUND, "no such admin")
	}
	a, err := s.admins.AdminByTokenHash(ctx, sha256.Sum256([]byte(token)))
	if err != nil {
		return Admin{}, err
	}
	now := s.now().UTC().Truncate(Resolution)
	if s.adminUses.due(a.Name, a.LastUsedAt, now) {
		if s.admins.TouchAdmin(ctx, a.Name, now) == nil {
			a.LastUsedAt = &now
		}
	}
	return a, nil
}

// AdminNamed returns the live named admin name, reading the store: the
// admin page asks it on every request of a session, so that a revoked
// admin's session ends at once.
func (s *Service) AdminNamed(ctx context.Context, name string) (Admin, error) {
	if s.admins == nil {
		return Admin{}, Errorf(ENOTFOUND, "no such admin")
	}
	all, err := s.admins.Admins(ctx)
	if err != nil {
		return Admin{}, err
	}
	for _, a := range all {
		if a.Name == name && a.RevokedAt == nil {
			return a, nil
		}
	}
	return Admin{}, Errorf(ENOTFOUND, "admin %s not found", Quote(name))
}

type actorKey struct{}

// WithActor returns a copy of ctx under which changes are recorded in the
// audit log as made by actor: a named admin, BootstrapAdmin, or a
// command's name ("tiers import"). Like the change source, it travels with
// the request, so the layers between the handler and the store need not
// pass it along.
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// Actor returns the actor set on ctx by WithActor, or ActorUnknown.
func Actor(ctx context.Context) string {
	if a, ok := ctx.Value(actorKey{}).(string); ok && a != "" {
		return a
	}
	return ActorUnknown
}
