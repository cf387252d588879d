package rbac

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/identity"
)

// Role claims: an issuer the server trusts with the roles themselves — the development
// issuer (package devissuer, `cerulean token`) — writes each role a token grants as one
// value of its roles claim, "<role>@<scope>" ("Storage Table Data Reader@/devstoreaccount1/tables/orders"),
// and the server reads the assignment from the token instead of from an assignments file.
// Only for that issuer: ClaimAuthorizer ignores every other issuer's tokens, since for
// them a roles value is an app role that an assignment must name.

// RoleClaim is the roles-claim value that grants role at scope.
func RoleClaim(role *Role, scope Scope) string {
	return role.Name + "@" + scope.String()
}

// ParseRoleClaim reads a RoleClaim value: a built-in role's name or id, '@', and a scope
// as ParseScope reads it. A value without "@/" is the role at every account ("/").
func ParseRoleClaim(v string) (*Role, Scope, error) {
	name, scope := v, "/"
	if i := strings.LastIndex(v, "@/"); i >= 0 {
		name, scope = v[:i], v[i+1:]
	}
	r := BuiltinRole(name)
	if r == nil {
		return nil, Scope{}, fmt.Errorf("unknown role %q (want a built-in role's name or id: %s)", name, builtinIndex().names())
	}
	sc, err := ParseScope(scope)
	if err != nil {
		return nil, Scope{}, err
	}
	return r, sc, nil
}

// BuiltinRole finds a built-in role (BuiltinRoles) by name, case-insensitively, or by
// id, as an assignments file names one; nil when there is none.
func BuiltinRole(nameOrID string) *Role { return builtinIndex().lookup(nameOrID) }

var builtinIndex = sync.OnceValue(func() *roleIndex {
	x := newRoleIndex()
	for _, r := range BuiltinRoles {
		x.add(r)
	}
	return x
})

// maxClaimPolicies bounds ClaimAuthorizer's cache of compiled role claims; past it the
// cache starts over (a development server sees a handful of distinct tokens' roles).
const maxClaimPolicies = 1024

// ClaimAuthorizer decides for the tokens of one issuer by the role claims they carry
// (RoleClaim), as if an assignments file gave the token's principal each role at its
// scope: the claims become a Policy of AppRole assignments restricted to that issuer, and
// Policy.Check decides, so the decision is the file's, not a second one. Tokens of any
// other issuer, and values that do not parse (an unknown role, a bad scope), are given
// nothing. It is safe for concurrent use.
type ClaimAuthorizer struct {
	issuer string

	mu       sync.Mutex
	policies map[string]*Policy // by the roles claim's values, joined by NUL
}

// NewClaimAuthorizer returns a ClaimAuthorizer for the tokens whose iss is issuer.
func NewClaimAuthorizer(issuer string) (*ClaimAuthorizer, error) {
	if issuer == "" {
		return nil, errors.New("claim authorizer: no issuer")
	}
	return &ClaimAuthorizer{issuer: issuer, policies: map[string]*Policy{}}, nil
}

// Issuer is the issuer whose tokens' role claims are honoured.
func (c *ClaimAuthorizer) Issuer() string { return c.issuer }

// Check is Policy.Check with the policy of p's role claims; p of another issuer is denied.
func (c *ClaimAuthorizer) Check(p identity.Principal, account, table string, ops ...auth.OpKind) error {
	var pol *Policy // nil denies everything
	if p.Issuer == c.issuer {
		pol = c.policy(p.Roles)
	}
	return pol.Check(p, account, table, ops...)
}

// Allowed reports whether Check allows op.
func (c *ClaimAuthorizer) Allowed(p identity.Principal, account, table string, op auth.OpKind) bool {
	return c.Check(p, account, table, op) == nil
}

// policy compiles (once, then from the cache) the assignments roles grant.
func (c *ClaimAuthorizer) policy(roles []string) *Policy {
	key := strings.Join(roles, "\x00")
	c.mu.Lock()
	defer c.mu.Unlock()
	if pol, ok := c.policies[key]; ok {
		return pol
	}
	pol := newPolicy()
	for _, v := range roles {
		r, sc, err := ParseRoleClaim(v)
		if err != nil {
			continue
		}
		pol.add(Assignment{Principal: v, PrincipalType: AppRole, Role: r, Scope: sc, Issuer: c.issuer,
			Description: "the token's role claim"})
	}
	if len(c.policies) >= maxClaimPolicies {
		clear(c.policies)
	}
	c.policies[key] = pol
	return pol
}

// Decider is what the server asks about each operation of a verified token
// (server.RoleAuthorizer): Authorizer, ClaimAuthorizer and Union are Deciders.
type Decider interface {
	Allowed(p identity.Principal, account, table string, op auth.OpKind) bool
}

// Union allows an operation when any of its Deciders does: the development issuer's role
// claims beside an assignments file. Each decides alone, so an operation that needs two
// permissions (an upsert's add and update actions, when no role holds write) is allowed
// only when one Decider grants both.
type Union []Decider

// Allowed reports whether any Decider allows op.
func (u Union) Allowed(p identity.Principal, account, table string, op auth.OpKind) bool {
	for _, d := range u {
		if d.Allowed(p, account, table, op) {
			return true
		}
	}
	return false
}
