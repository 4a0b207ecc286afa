package auth

import (
	"slices"
	"strconv"
	"strings"

	"github.com/svc-dev/svc/internal/api"
)

// Permission is one capability a key can be granted.
type Permission string

const (
	UsageRead      Permission = "usage:read"
	WorkersRead    Permission = "workers:read"
	ComputeWrite   Permission = "compute:write"
	InferenceWrite Permission = "inference:write"
)

// Permissions lists every permission, in display order.
func Permissions() []Permission {
	return []Permission{UsageRead, WorkersRead, ComputeWrite, InferenceWrite}
}

// DefaultPermissions are granted when a key is created without a list.
// GPU rental spends money, so it is never on by default.
func DefaultPermissions() []Permission {
	return []Permission{UsageRead, WorkersRead, InferenceWrite}
}

// Valid reports whether p is a known permission.
func (p Permission) Valid() bool { return slices.Contains(Permissions(), p) }

// Describe says what the permission allows, for help text and messages.
func (p Permission) Describe() string {
	switch p {
	case UsageRead:
		return "read usage (in-flight requests, logs, totals)"
	case WorkersRead:
		return "read workers, their events and power history"
	case ComputeWrite:
		return "rent and stop GPUs, read the catalogue and spend"
	case InferenceWrite:
		return "chat completions, embeddings, reranking, images, audio, moderations"
	}
	return ""
}

// Role is a user's role within one organisation.
type Role string

const (
	RoleOwner    Role = "owner"
	RoleOperator Role = "operator"
	RoleMember   Role = "member"
)

// Roles lists the roles, most powerful first.
func Roles() []Role { return []Role{RoleOwner, RoleOperator, RoleMember} }

// Valid reports whether r is a known role.
func (r Role) Valid() bool { return slices.Contains(Roles(), r) }

// CanOperate reports whether the role may rent and stop GPUs.
func (r Role) CanOperate() bool { return r == RoleOwner || r == RoleOperator }

// Principal is who a request acts as: an API key of a user in an
// organisation. It is resolved once per request by the server.
type Principal struct {
	OrgID  string
	UserID string
	KeyID  string
	Role   Role
	// Unrestricted keys predate permissions and may do everything a key can.
	Unrestricted bool
	Permissions  []Permission
	// ContentFilter checks the key's chat requests and replies.
	ContentFilter bool
}

// Has reports whether the key carries perm.
func (p *Principal) Has(perm Permission) bool {
	return p.Unrestricted || slices.Contains(p.Permissions, perm)
}

// Require returns a 403 naming perm when the key lacks it.
func (p *Principal) Require(perm Permission) error {
	if p.Has(perm) {
		return nil
	}
	return &api.Error{
		Kind:    api.KindForbidden,
		Code:    "missing_permission",
		Message: "This API key lacks the " + string(perm) + " permission; create a key with it in the console (svc admin keys create --perm " + string(perm) + ")",
	}
}

// RequireOperator returns a 403 unless the key's user is an owner or operator.
func (p *Principal) RequireOperator(action string) error {
	if p.Role.CanOperate() {
		return nil
	}
	return &api.Error{
		Kind:    api.KindForbidden,
		Code:    "role_required",
		Message: "Only an owner or operator of the organisation may " + action + "; this key belongs to a " + string(p.Role),
	}
}

// ParsePermissions validates a list of names, reporting bad entries under
// field (e.g. permissions.2).
func ParsePermissions(field string, names []string, v *api.Validator) []Permission {
	out := make([]Permission, 0, len(names))
	for i, n := range names {
		p := Permission(strings.TrimSpace(n))
		switch {
		case !p.Valid():
			v.Add(field+"."+strconv.Itoa(i), api.FieldEnum, "unknown permission %q; one of %s", n, joinPermissions(Permissions()))
		case slices.Contains(out, p):
			v.Add(field+"."+strconv.Itoa(i), api.FieldDuplicate, "permission %s listed twice", p)
		default:
			out = append(out, p)
		}
	}
	return out
}

func joinPermissions(ps []Permission) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = string(p)
	}
	return strings.Join(s, ", ")
}
