package rbac

import (
	"fmt"
	"strings"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/identity"
)

// Policy is one assignments file, compiled for decisions: its assignments indexed by the
// claim they match, each carrying its role's permissions as a bit mask, so that a decision
// is a few map lookups and no pattern matching or allocation. A Policy is immutable once
// built and safe for concurrent use.
type Policy struct {
	assignments []Assignment
	byObject    map[string][]grant // User, ServicePrincipal and Any: the object id
	byApp       map[string][]grant // ServicePrincipal: the app id
	byGroup     map[string][]grant // Group and Any
	byRole      map[string][]grant // AppRole and Any
}

type grant struct {
	issuer  string
	account string // "" every account
	table   string // "" the whole account; else lower case
	mask    uint32
}

func newPolicy() *Policy {
	return &Policy{byObject: map[string][]grant{}, byApp: map[string][]grant{},
		byGroup: map[string][]grant{}, byRole: map[string][]grant{}}
}

func (p *Policy) add(a Assignment) {
	p.assignments = append(p.assignments, a)
	g := grant{issuer: a.Issuer, account: a.Scope.Account, table: strings.ToLower(a.Scope.Table), mask: a.Role.mask()}
	id := idKey(a.Principal)
	switch a.PrincipalType {
	case User:
		p.byObject[id] = append(p.byObject[id], g)
	case ServicePrincipal:
		p.byObject[id] = append(p.byObject[id], g)
		p.byApp[id] = append(p.byApp[id], g)
	case Group:
		p.byGroup[id] = append(p.byGroup[id], g)
	case AppRole:
		p.byRole[a.Principal] = append(p.byRole[a.Principal], g)
	case Any:
		p.byObject[id] = append(p.byObject[id], g)
		p.byGroup[id] = append(p.byGroup[id], g)
		p.byRole[a.Principal] = append(p.byRole[a.Principal], g)
	}
}

// idKey is how object, application and group ids compare: a GUID (Entra ID's ids)
// case-insensitively, since the same GUID is written in either case; anything else (the
// sub of another provider, which may be case-sensitive base64) exactly. App role values
// always compare exactly, as Entra ID compares them.
func idKey(s string) string {
	if isGUID(s) {
		return strings.ToLower(s) // no allocation when already lower case
	}
	return s
}

// Assignments are the policy's assignments, in file order. The caller must not modify them.
func (p *Policy) Assignments() []Assignment { return p.assignments }

// masks are the permissions principal holds over the account's table service and over
// table (equal to the account's when table is ""): the union of the roles of every
// assignment that matches the principal, honours its issuer and covers the resource.
func (p *Policy) masks(pr identity.Principal, account, table string) (acct, tbl uint32) {
	visit := func(gs []grant) {
		for i := range gs {
			g := &gs[i]
			if g.issuer != "" && g.issuer != pr.Issuer {
				continue
			}
			if g.account != "" && g.account != account {
				continue
			}
			if g.table == "" {
				acct |= g.mask
				tbl |= g.mask
			} else if table != "" && strings.EqualFold(g.table, table) {
				tbl |= g.mask
			}
		}
	}
	if pr.ObjectID != "" {
		visit(p.byObject[idKey(pr.ObjectID)])
	}
	if pr.AppID != "" {
		visit(p.byApp[idKey(pr.AppID)])
	}
	for _, g := range pr.Groups {
		visit(p.byGroup[idKey(g)])
	}
	for _, r := range pr.Roles {
		visit(p.byRole[r])
	}
	return acct, tbl
}

// Check decides whether the principal may perform ops on table of account (table "" for
// the account's service-level operations): nil when every op's Need is met, else a
// *DeniedError naming the first op refused and what it lacks. Several ops are the union
// a $batch needs — the server passes OpBatch and every contained operation. A nil Policy
// denies everything.
func (p *Policy) Check(pr identity.Principal, account, table string, ops ...auth.OpKind) error {
	if len(ops) == 0 {
		return nil
	}
	var acct, tbl uint32
	if p != nil {
		acct, tbl = p.masks(pr, account, table)
	}
	for _, op := range ops {
		need, ok := needMasks[op]
		if !ok {
			return &DeniedError{Op: op, Account: account, Table: table}
		}
		have := tbl
		if need.accountLevel {
			have = acct
		}
		if !satisfied(need, have) {
			return &DeniedError{Op: op, Account: account, Table: table, Need: need.alts, have: have}
		}
	}
	return nil
}

func satisfied(n needMask, have uint32) bool {
	if len(n.anyOf) == 0 {
		return true
	}
	for _, alt := range n.anyOf {
		if have&alt == alt {
			return true
		}
	}
	return false
}

// Allowed reports whether Check allows op.
func (p *Policy) Allowed(pr identity.Principal, account, table string, op auth.OpKind) bool {
	return p.Check(pr, account, table, op) == nil
}

// DeniedError is a refusal: Op on Account/Table needs one of Need's alternatives (nil:
// the operation has no mapping and is refused whatever the roles).
type DeniedError struct {
	Op             auth.OpKind
	Account, Table string
	Need           [][]Permission
	have           uint32
}

// Missing is, for each alternative of Need, the permissions the principal lacks.
func (e *DeniedError) Missing() [][]string {
	var out [][]string
	for _, alt := range e.Need {
		var m []string
		for _, perm := range alt {
			if e.have&(1<<permissionIndex[perm]) == 0 {
				m = append(m, perm.Action)
			}
		}
		out = append(out, m)
	}
	return out
}

func (e *DeniedError) Error() string {
	where := e.Account
	if e.Table != "" {
		where += "/" + e.Table
	}
	if e.Need == nil {
		return fmt.Sprintf("%s on %s: no role can allow it", e.Op, where)
	}
	alts := make([]string, 0, len(e.Need))
	for _, m := range e.Missing() {
		alts = append(alts, strings.Join(m, " and "))
	}
	return fmt.Sprintf("%s on %s needs %s", e.Op, where, strings.Join(alts, ", or "))
}

// AzureError is the answer Azure gives a bearer token whose roles do not allow the
// operation: 403 AuthorizationPermissionMismatch, "This request is not authorized to
// perform this operation using this permission.", with what was missing as the detail
// (which the server appends to the message, as it does for a SAS lacking a permission).
func (e *DeniedError) AzureError() *azerr.Error {
	return azerr.New(azerr.AuthorizationPermissionMismatch).WithDetail(e.Error())
}
