package rbac

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Assignment is one role assignment of the file: Role granted to Principal at Scope.
type Assignment struct {
	// Principal is the id a token must carry, PrincipalType which claim carries it.
	Principal     string
	PrincipalType PrincipalType
	Role          *Role
	Scope         Scope
	// Issuer, when set, is the only token issuer (iss) the assignment applies to: object
	// ids are unique only within one tenant or provider.
	Issuer      string
	Description string
	// Line is where the assignment starts in the file, for messages.
	Line int
}

// PrincipalType says which of a token's claims an assignment's principal is compared with.
type PrincipalType string

// The principal types. An assignment without one (Any) matches the object id, the groups
// or the app roles — never the app id, which must be asked for (ServicePrincipal): a
// token a user obtains through an application carries the application's id too, and
// matching it would give the user the application's roles.
const (
	Any PrincipalType = ""
	// User matches the token's object id (oid, else sub).
	User PrincipalType = "User"
	// ServicePrincipal matches the object id, or the application (client) id (appid or
	// azp), as `az role assignment create --assignee <appId>` accepts one. Every token
	// issued to that client matches, including a user's delegated one: assign by app id
	// only to clients that act for themselves (daemons, client credentials).
	ServicePrincipal PrincipalType = "ServicePrincipal"
	// Group matches any of the token's groups claims.
	Group PrincipalType = "Group"
	// AppRole matches any of the token's roles claims (an app role's value).
	AppRole PrincipalType = "AppRole"
)

// FileError is a problem in an assignments file, with where it is: the line and column of
// the value (or the start of the item) at fault, and its path ("assignments[2].scope").
type FileError struct {
	Line, Col int
	Path      string
	Err       error
}

func (e *FileError) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("line %d col %d: %v", e.Line, e.Col, e.Err)
	}
	return fmt.Sprintf("line %d col %d: %s: %v", e.Line, e.Col, e.Path, e.Err)
}

func (e *FileError) Unwrap() error { return e.Err }

// maxFileSize bounds what Parse and the watcher read: an assignments file is small, and a
// runaway one must not take the server's memory.
const maxFileSize = 16 << 20

// parser reads the file with json.Decoder's tokens, so that every key is checked exactly
// (encoding/json matches struct fields case-insensitively and keeps the last of duplicate
// keys, either of which would let a misspelt or repeated field pass) and every error can
// say where it is.
type parser struct {
	data []byte
	dec  *json.Decoder
}

// Parse reads an assignments file (see the package documentation for its format) into a
// Policy. Unknown or repeated fields, unknown roles, bad scopes, bad principal types and
// trailing data are errors (*FileError) naming the line, column and field.
func Parse(data []byte) (*Policy, error) {
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("file is %d bytes, more than %d", len(data), maxFileSize)
	}
	p := &parser{data: data, dec: json.NewDecoder(bytes.NewReader(data))}
	p.dec.UseNumber()
	var rawDefs []roleDefJSON
	var rawAssigns []assignJSON
	err := p.object("", func(key string, at int64) error {
		switch key {
		case "roleDefinitions":
			return p.array(key, func(path string, at int64) error {
				var d roleDefJSON
				d.at = at
				d.path = path
				if err := p.roleDef(path, &d); err != nil {
					return err
				}
				rawDefs = append(rawDefs, d)
				return nil
			})
		case "assignments":
			return p.array(key, func(path string, at int64) error {
				var a assignJSON
				a.at = at
				a.path = path
				if err := p.assignment(path, &a); err != nil {
					return err
				}
				rawAssigns = append(rawAssigns, a)
				return nil
			})
		}
		return p.errAt(at, "", fmt.Errorf("unknown field %q (want roleDefinitions, assignments)", key))
	})
	if err != nil {
		return nil, err
	}
	if _, err := p.dec.Token(); err != io.EOF {
		return nil, p.errAt(p.dec.InputOffset(), "", errors.New("data after the top-level object"))
	}
	return p.build(rawDefs, rawAssigns)
}

type roleDefJSON struct {
	at                                               int64
	path                                             string
	name, id, description                            string
	actions, notActions, dataActions, notDataActions []string
	nameAt, idAt                                     int64
	hid                                              bool
}

type assignJSON struct {
	at                                                   int64
	path                                                 string
	principal, principalType, role, scope, issuer, descr string
	principalAt, typeAt, roleAt, scopeAt, issuerAt       int64
	hasPrincipal, hasType, hasRole, hasScope, hasIssuer  bool
}

func (p *parser) roleDef(path string, d *roleDefJSON) error {
	return p.object(path, func(key string, at int64) error {
		fp := path + "." + key
		switch key {
		case "roleName":
			d.nameAt = at
			return p.str(fp, &d.name)
		case "id":
			d.idAt, d.hid = at, true
			return p.str(fp, &d.id)
		case "description":
			return p.str(fp, &d.description)
		case "actions":
			return p.strs(fp, &d.actions)
		case "notActions":
			return p.strs(fp, &d.notActions)
		case "dataActions":
			return p.strs(fp, &d.dataActions)
		case "notDataActions":
			return p.strs(fp, &d.notDataActions)
		}
		return p.errAt(at, path, fmt.Errorf("unknown field %q (want roleName, id, description, actions, notActions, dataActions, notDataActions)", key))
	})
}

func (p *parser) assignment(path string, a *assignJSON) error {
	return p.object(path, func(key string, at int64) error {
		fp := path + "." + key
		switch key {
		case "principal":
			a.principalAt, a.hasPrincipal = at, true
			return p.str(fp, &a.principal)
		case "principalType":
			a.typeAt, a.hasType = at, true
			return p.str(fp, &a.principalType)
		case "role":
			a.roleAt, a.hasRole = at, true
			return p.str(fp, &a.role)
		case "scope":
			a.scopeAt, a.hasScope = at, true
			return p.str(fp, &a.scope)
		case "issuer":
			a.issuerAt, a.hasIssuer = at, true
			return p.str(fp, &a.issuer)
		case "description":
			return p.str(fp, &a.descr)
		}
		return p.errAt(at, path, fmt.Errorf("unknown field %q (want principal, principalType, role, scope, issuer, description)", key))
	})
}

// object reads one JSON object, calling field for each key (with the key's offset) to
// read its value; a repeated key is an error.
func (p *parser) object(path string, field func(key string, at int64) error) error {
	if err := p.delim(path, '{'); err != nil {
		return err
	}
	seen := map[string]bool{}
	for p.dec.More() {
		at := p.next()
		tok, err := p.dec.Token()
		if err != nil {
			return p.syntax(err, path)
		}
		key, ok := tok.(string)
		if !ok {
			return p.errAt(at, path, errors.New("want a field name"))
		}
		if seen[key] {
			return p.errAt(at, path, fmt.Errorf("field %q repeated", key))
		}
		seen[key] = true
		if err := field(key, at); err != nil {
			return err
		}
	}
	_, err := p.dec.Token() // '}'
	if err != nil {
		return p.syntax(err, path)
	}
	return nil
}

// array reads one JSON array, calling item for each element with its path and offset.
func (p *parser) array(path string, item func(path string, at int64) error) error {
	if err := p.delim(path, '['); err != nil {
		return err
	}
	for i := 0; p.dec.More(); i++ {
		if err := item(fmt.Sprintf("%s[%d]", path, i), p.next()); err != nil {
			return err
		}
	}
	if _, err := p.dec.Token(); err != nil { // ']'
		return p.syntax(err, path)
	}
	return nil
}

func (p *parser) delim(path string, want json.Delim) error {
	at := p.next()
	tok, err := p.dec.Token()
	if err != nil {
		return p.syntax(err, path)
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		what := "an object"
		if want == '[' {
			what = "an array"
		}
		return p.errAt(at, path, fmt.Errorf("want %s, not %s", what, describe(tok)))
	}
	return nil
}

func (p *parser) str(path string, out *string) error {
	at := p.next()
	tok, err := p.dec.Token()
	if err != nil {
		return p.syntax(err, path)
	}
	s, ok := tok.(string)
	if !ok {
		return p.errAt(at, path, fmt.Errorf("want a string, not %s", describe(tok)))
	}
	*out = s
	return nil
}

func (p *parser) strs(path string, out *[]string) error {
	if err := p.delim(path, '['); err != nil {
		return err
	}
	list := []string{}
	for i := 0; p.dec.More(); i++ {
		var s string
		if err := p.str(fmt.Sprintf("%s[%d]", path, i), &s); err != nil {
			return err
		}
		list = append(list, s)
	}
	if _, err := p.dec.Token(); err != nil {
		return p.syntax(err, path)
	}
	*out = list
	return nil
}

func describe(tok json.Token) string {
	switch v := tok.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case json.Delim:
		switch v {
		case '{':
			return "an object"
		case '[':
			return "an array"
		}
		return fmt.Sprintf("%q", string(v))
	}
	return fmt.Sprintf("%v", tok)
}

// next is the offset where the next token starts: the decoder's offset is the end of the
// last one, before any whitespace, ':' or ',' that follows it.
func (p *parser) next() int64 {
	off := p.dec.InputOffset()
	for off < int64(len(p.data)) {
		switch p.data[off] {
		case ' ', '\t', '\r', '\n', ',', ':':
			off++
			continue
		}
		break
	}
	return off
}

func (p *parser) syntax(err error, path string) error {
	off := p.dec.InputOffset()
	var se *json.SyntaxError
	if errors.As(err, &se) {
		off = se.Offset
	}
	if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
		off = int64(len(p.data))
		err = errors.New("unexpected end of file")
	}
	return p.errAt(off, path, err)
}

func (p *parser) errAt(off int64, path string, err error) *FileError {
	return errAt(p.data, off, path, err)
}

func errAt(data []byte, off int64, path string, err error) *FileError {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	if off < 0 {
		off = 0
	}
	before := data[:off]
	line := bytes.Count(before, []byte{'\n'}) + 1
	col := int(off) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return &FileError{Line: line, Col: col, Path: path, Err: err}
}

// build checks the decoded file and compiles it.
func (p *parser) build(defs []roleDefJSON, assigns []assignJSON) (*Policy, error) {
	roles := newRoleIndex()
	for _, r := range BuiltinRoles {
		roles.add(r)
	}
	for _, d := range defs {
		if d.name == "" || strings.TrimSpace(d.name) != d.name {
			at := d.nameAt
			if at == 0 {
				at = d.at
			}
			return nil, p.errAt(at, d.path+".roleName", errors.New("want a role name without surrounding spaces"))
		}
		if roles.lookup(d.name) != nil {
			return nil, p.errAt(d.nameAt, d.path+".roleName", fmt.Errorf("role %q is already defined", d.name))
		}
		if d.hid {
			if !isGUID(d.id) {
				return nil, p.errAt(d.idAt, d.path+".id", fmt.Errorf("%q is not a GUID", d.id))
			}
			if r := roles.lookup(d.id); r != nil {
				return nil, p.errAt(d.idAt, d.path+".id", fmt.Errorf("id %s is already role %q's", d.id, r.Name))
			}
		}
		if len(d.actions) == 0 && len(d.dataActions) == 0 {
			return nil, p.errAt(d.at, d.path, errors.New("role grants nothing: want actions or dataActions"))
		}
		for _, list := range [][]string{d.actions, d.notActions, d.dataActions, d.notDataActions} {
			for _, a := range list {
				if a == "" || strings.ContainsAny(a, " \t\r\n") {
					return nil, p.errAt(d.at, d.path, fmt.Errorf("action %q is empty or holds spaces", a))
				}
			}
		}
		roles.add(&Role{Name: d.name, ID: strings.ToLower(d.id), Description: d.description,
			Actions: d.actions, NotActions: d.notActions, DataActions: d.dataActions, NotDataActions: d.notDataActions})
	}
	pol := newPolicy()
	for _, a := range assigns {
		missing := func(field string) error {
			return p.errAt(a.at, a.path, fmt.Errorf("%s is required", field))
		}
		switch {
		case !a.hasPrincipal:
			return nil, missing("principal")
		case !a.hasRole:
			return nil, missing("role")
		case !a.hasScope:
			return nil, missing("scope")
		}
		if a.principal == "" || strings.TrimSpace(a.principal) != a.principal {
			return nil, p.errAt(a.principalAt, a.path+".principal", errors.New("want an id without surrounding spaces"))
		}
		pt := PrincipalType(a.principalType)
		switch pt {
		case User, ServicePrincipal, Group, AppRole:
		case Any:
			if a.hasType {
				return nil, p.errAt(a.typeAt, a.path+".principalType", errors.New("empty: leave it out to match object ids, groups and app roles"))
			}
		default:
			return nil, p.errAt(a.typeAt, a.path+".principalType", fmt.Errorf("%q is not User, ServicePrincipal, Group or AppRole", a.principalType))
		}
		role := roles.lookup(a.role)
		if role == nil {
			return nil, p.errAt(a.roleAt, a.path+".role", fmt.Errorf("unknown role %q (want a built-in role's or roleDefinitions' name or id: %s)", a.role, roles.names()))
		}
		sc, err := ParseScope(a.scope)
		if err != nil {
			return nil, p.errAt(a.scopeAt, a.path+".scope", err)
		}
		if a.hasIssuer && (a.issuer == "" || strings.TrimSpace(a.issuer) != a.issuer) {
			return nil, p.errAt(a.issuerAt, a.path+".issuer", errors.New("want an issuer (a token's iss) without surrounding spaces, or no issuer field"))
		}
		line := errAt(p.data, a.at, "", nil).Line
		pol.add(Assignment{Principal: a.principal, PrincipalType: pt, Role: role, Scope: sc,
			Issuer: a.issuer, Description: a.descr, Line: line})
	}
	return pol, nil
}

// roleIndex finds a role by name (case-insensitively, as Azure's tools do) or by id, bare
// or as a role definition's resource id (…/providers/Microsoft.Authorization/roleDefinitions/<id>).
type roleIndex struct {
	byKey map[string]*Role
	order []*Role
}

func newRoleIndex() *roleIndex { return &roleIndex{byKey: map[string]*Role{}} }

func (x *roleIndex) add(r *Role) {
	x.byKey[strings.ToLower(r.Name)] = r
	if r.ID != "" {
		x.byKey[strings.ToLower(r.ID)] = r
	}
	x.order = append(x.order, r)
}

func (x *roleIndex) lookup(s string) *Role {
	const defs = "/providers/microsoft.authorization/roledefinitions/"
	k := strings.ToLower(s)
	if i := strings.LastIndex(k, defs); i >= 0 && isGUID(k[i+len(defs):]) {
		k = k[i+len(defs):]
	}
	return x.byKey[k]
}

func (x *roleIndex) names() string {
	n := make([]string, len(x.order))
	for i, r := range x.order {
		n[i] = fmt.Sprintf("%q", r.Name)
	}
	return strings.Join(n, ", ")
}

// isGUID reports whether s is a GUID in its usual 8-4-4-4-12 hexadecimal form.
func isGUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
			continue
		}
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}
