package oidctest

import (
	"context"
	"errors"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// storage is the provider's in-memory storage: just enough of op.Storage for discovery,
// the JWKS and the client-credentials grant. The embedded op.Storage is nil, so any other
// flow (authorization code, refresh, introspection, …) panics — inside the op handler,
// which answers 500 — instead of silently half-working.
type storage struct {
	op.Storage

	mu        sync.Mutex
	tickets   map[string]*ticket // by client id
	signing   *key
	published []*key
}

// ticket is a client registered for one Token call, with the token it is to get.
type ticket struct {
	secret string
	opts   TokenOptions
}

var (
	_ op.Storage                        = (*storage)(nil)
	_ op.ClientCredentialsStorage       = (*storage)(nil)
	_ op.CanGetPrivateClaimsFromRequest = (*storage)(nil)
)

func (s *storage) ticket(clientID string) (*ticket, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tickets[clientID]
	return t, ok
}

func (s *storage) Health(context.Context) error { return nil }

func (s *storage) SigningKey(context.Context) (op.SigningKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.signing, nil
}

func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return []jose.SignatureAlgorithm{s.signing.alg}, nil
}

func (s *storage) KeySet(context.Context) ([]op.Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]op.Key, len(s.published))
	for i, k := range s.published {
		keys[i] = publicKey{k}
	}
	return keys, nil
}

func (s *storage) ClientCredentials(_ context.Context, clientID, clientSecret string) (op.Client, error) {
	t, ok := s.ticket(clientID)
	if !ok || t.secret != clientSecret {
		return nil, errors.New("unknown client or wrong secret")
	}
	return &client{id: clientID, skew: -t.opts.NotBefore}, nil
}

func (s *storage) ClientCredentialsTokenRequest(_ context.Context, clientID string, scopes []string) (op.TokenRequest, error) {
	t, ok := s.ticket(clientID)
	if !ok {
		return nil, errors.New("unknown client")
	}
	return &tokenRequest{clientID: clientID, opts: t.opts, scopes: scopes}, nil
}

func (s *storage) CreateAccessToken(_ context.Context, r op.TokenRequest) (string, time.Time, error) {
	tr, ok := r.(*tokenRequest)
	if !ok {
		return "", time.Time{}, errors.New("only client-credentials tokens")
	}
	return randomHex(8), time.Now().Add(tr.opts.Lifetime), nil
}

func (s *storage) GetPrivateClaimsFromRequest(_ context.Context, r op.TokenRequest, _ []string) (map[string]any, error) {
	tr, ok := r.(*tokenRequest)
	if !ok {
		return nil, errors.New("only client-credentials tokens")
	}
	return tr.opts.Claims, nil
}

type tokenRequest struct {
	clientID string
	opts     TokenOptions
	scopes   []string
}

func (r *tokenRequest) GetSubject() string    { return r.opts.Subject }
func (r *tokenRequest) GetAudience() []string { return r.opts.Audience }
func (r *tokenRequest) GetScopes() []string   { return r.scopes }

// client is a confidential client allowed the client-credentials grant, whose access
// tokens are JWTs. Its clock skew is how op sets iat and nbf (now minus the skew), which
// is how Token moves them into the future.
type client struct {
	id   string
	skew time.Duration
}

func (c *client) GetID() string                       { return c.id }
func (c *client) RedirectURIs() []string              { return nil }
func (c *client) PostLogoutRedirectURIs() []string    { return nil }
func (c *client) ApplicationType() op.ApplicationType { return op.ApplicationTypeWeb }
func (c *client) AuthMethod() oidc.AuthMethod         { return oidc.AuthMethodBasic }
func (c *client) ResponseTypes() []oidc.ResponseType  { return nil }
func (c *client) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeClientCredentials}
}
func (c *client) LoginURL(string) string               { return "" }
func (c *client) AccessTokenType() op.AccessTokenType  { return op.AccessTokenTypeJWT }
func (c *client) IDTokenLifetime() time.Duration       { return time.Hour }
func (c *client) DevMode() bool                        { return false }
func (c *client) IsScopeAllowed(string) bool           { return true }
func (c *client) IDTokenUserinfoClaimsAssertion() bool { return false }
func (c *client) ClockSkew() time.Duration             { return c.skew }
func (c *client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
