package server

import (
	"context"
	"errors"
	"strings"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/identity"
)

// Bearer tokens (docs/identity.md): a request whose Authorization is "Bearer <JWT>" is
// authenticated by Options.Bearer (package bearer: the token's signature, issuer,
// audience and lifetime, against the configured OpenID providers) and authorized by
// Options.Roles (package rbac: the principal's role assignments), operation by operation
// — each operation of a $batch or bulk request too — as Azure RBAC does for tables.

// BearerVerifier verifies OAuth 2.0 bearer tokens.
type BearerVerifier interface {
	// Verify checks token, presented to account (whose endpoint is one of the accepted
	// audiences), and returns the principal it names, or an error saying which check
	// failed — its Detail() (or Error()) is the answer's AuthenticationErrorDetail, and
	// never holds the token.
	Verify(ctx context.Context, token, account string) (identity.Principal, error)
	// Challenge is the WWW-Authenticate value of a 401 answer to a refused token.
	Challenge() string
}

// RoleAuthorizer decides what the principal of a verified token may do.
type RoleAuthorizer interface {
	// Allowed reports whether p may perform op on table of account (table "" for the
	// operations of the service and of the table listing).
	Allowed(p identity.Principal, account, table string, op auth.OpKind) bool
}

// bearerToken returns the token of an Authorization value in the Bearer scheme.
func bearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, auth.SchemeBearer) {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// authenticateBearer verifies the request's bearer token and keeps its principal on rq.
// Azure takes tokens over HTTPS only (a token sent in clear is a leaked one), answering
// plain HTTP with 403 AuthenticationFailed; a token that does not verify is 401
// InvalidAuthenticationInfo with a WWW-Authenticate challenge naming the authority; one
// that cannot be checked now (the issuer out of reach) is 503 ServerBusy.
func (s *Server) authenticateBearer(rq *request, token string) error {
	if rq.r.TLS == nil {
		return azerr.New(azerr.AuthenticationFailed).WithDetail("Authentication scheme Bearer is not allowed with HTTP.")
	}
	if _, ok := s.verifier.Account(rq.account); !ok {
		// No token reaches an account this server does not serve; like an unknown
		// account under a shared key, it fails as a refused credential would.
		rq.w.Header().Set("WWW-Authenticate", s.bearer.Challenge())
		return azerr.BearerRefused("The account '" + rq.account + "' is not served here.")
	}
	p, err := s.bearer.Verify(rq.r.Context(), token, rq.account)
	if err != nil {
		detail := err.Error()
		var d interface{ Detail() string }
		if errors.As(err, &d) {
			detail = d.Detail()
		}
		var t interface{ Temporary() bool }
		if errors.As(err, &t) && t.Temporary() {
			// The token could not be checked (its issuer's keys are out of reach): the
			// client should retry, not fetch another token.
			return azerr.New(azerr.ServerBusy).WithDetail(detail)
		}
		rq.w.Header().Set("WWW-Authenticate", s.bearer.Challenge())
		return azerr.BearerRefused(detail)
	}
	rq.principal = &p
	return nil
}

// authorizeBearer refuses, 403 AuthorizationPermissionMismatch, an operation the
// request's principal has no role for on table (the request's own unless given).
// Operations a handler names itself (those of a $batch or bulk request) and unknown ones
// (which their handler answers 400) pass here.
func (s *Server) authorizeBearer(rq *request, op auth.OpKind, table string) error {
	if rq.principal == nil || op == auth.OpBatch || op == auth.OpUnknown {
		return nil
	}
	if s.roles != nil && s.roles.Allowed(*rq.principal, rq.account, table, op) {
		return nil
	}
	return azerr.New(azerr.AuthorizationPermissionMismatch)
}
