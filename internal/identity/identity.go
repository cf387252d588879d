// Package identity names who made a request authenticated with a bearer token (issue 47):
// the principal the token's verified claims describe, which role assignments match
// (internal/rbac) and which the access log and metrics name — never the token itself.
package identity

// Principal is the identity a verified bearer token carries. Every field comes from a
// claim of a token whose signature, issuer, audience and lifetime were checked.
type Principal struct {
	// Issuer is the token's iss: the OpenID provider that issued it.
	Issuer string
	// Subject is the token's sub.
	Subject string
	// ObjectID is the principal's object id: Entra ID's oid claim, else sub (other
	// providers identify a principal by sub alone).
	ObjectID string
	// AppID is the client application's id: Entra ID's appid (v1 tokens) or azp (v2
	// tokens and most other providers); empty when the token names none.
	AppID string
	// TenantID is Entra ID's tid claim; empty for other providers.
	TenantID string
	// Groups are the token's group claims (groups), and Roles its app-role claims
	// (roles), as given.
	Groups []string
	Roles  []string
}

// Name is how logs and metrics name the principal: its object id, and the application
// it acted through when that differs ("oid" or "oid via appid").
func (p Principal) Name() string {
	if p.AppID == "" || p.AppID == p.ObjectID {
		return p.ObjectID
	}
	return p.ObjectID + " via " + p.AppID
}
