// Package bearer verifies OAuth 2.0 bearer tokens (`Authorization: Bearer <JWT>`, issue 47)
// against configured OpenID Connect issuers, the way Azure Storage verifies Microsoft Entra
// ID tokens, and names the principal a valid token carries.
//
// A token is accepted only when all of these hold:
//   - it is a compact JWS whose header alg is in the allow-list (never "none", never an
//     HMAC algorithm: a public key must never serve as an HMAC secret);
//   - its unverified iss names a configured issuer; that issuer's keys, found by OpenID
//     Connect discovery and fetched from its jwks_uri (or given as IssuerConfig.Keys), hold a key with the token's kid whose
//     type (and curve) suits the alg, and the signature verifies with that key;
//   - exp is present and not past, nbf (when present) not in the future and iat (when
//     present) not in the future, each within the clock skew;
//   - aud contains an accepted audience.
//
// The libraries do the cryptography: github.com/coreos/go-oidc/v3 performs discovery (and
// its check that the discovery document names the configured issuer exactly), and
// github.com/go-jose/go-jose/v4 (which go-oidc itself uses) parses the JWS, checks the
// algorithm allow-list, verifies the signature and validates the registered claims.
// go-oidc's own IDTokenVerifier and RemoteKeySet are not used, for what they lack (read in
// v3.21.0): the verifier checks a single client id as audience where Azure accepts
// several, checks exp without leeway and ignores iat, and answers in untyped strings; the
// remote key set fetches the JWKS again for every token with an unknown kid, with no rate
// limit, so a flood of bogus kids would hammer the provider. This package adds a key cache
// whose refresh is rate limited, lazy discovery retried with backoff (the server starts
// while the provider is down), the audience rule and typed errors.
//
// Neither the token nor any part of it appears in an error or a log line: errors say which
// check failed and, at most, the configured issuer concerned.
package bearer

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/ceruleandb/cerulean/internal/identity"
)

// Defaults. DefaultClockSkew is the tolerance Microsoft's token validation library
// (Microsoft.IdentityModel.Tokens, TokenValidationParameters.DefaultClockSkew = 300
// seconds) applies to exp, nbf and iat — the library Entra ID's resource servers use — and
// the nbf leeway go-oidc hard-codes for the same reason; Azure Storage documents no other
// value.
const (
	DefaultClockSkew = 5 * time.Minute
	// DefaultKeyRefreshInterval is the least time between two JWKS fetches caused by
	// tokens naming a kid the cache lacks: at most one fetch per interval per issuer,
	// however many bogus kids arrive. Microsoft.IdentityModel's ConfigurationManager uses
	// 5 minutes; one minute follows a rotation sooner at a load no provider notices.
	DefaultKeyRefreshInterval = time.Minute
	// DefaultKeyMaxAge is how long fetched keys are used before the next verification
	// fetches them again, so a key the provider removed (say, a compromised one) stops
	// verifying even when no token names a new kid. If that fetch fails, the cached keys
	// stay in use: an outage of the provider does not stop the server.
	DefaultKeyMaxAge = time.Hour
	// DefaultRetryMin and DefaultRetryMax bound the backoff between discovery attempts of
	// an unreachable issuer; each failure doubles the wait.
	DefaultRetryMin = time.Second
	DefaultRetryMax = time.Minute
	// StorageResource is Azure Storage's resource id: the audience of tokens for any
	// storage account and the resource_id of its bearer challenge.
	StorageResource = "https://storage.azure.com"
	// maxTokenLen refuses absurd tokens before any parsing; Entra ID tokens stay far
	// below it even with many group claims.
	maxTokenLen = 64 << 10
)

// DefaultAlgorithms are the asymmetric JWS algorithms accepted unless configured
// otherwise: RSA PKCS#1 v1.5 and PSS, ECDSA and Ed25519.
var DefaultAlgorithms = []string{
	"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA",
}

// DefaultAudiences are the audiences Azure Storage accepts for any account: the storage
// resource id with and without its trailing slash (Entra ID issues either, depending on
// how the client named the scope).
var DefaultAudiences = []string{StorageResource, StorageResource + "/"}

// Config configures a Verifier. Only Issuers is required.
type Config struct {
	// Issuers are the OpenID providers whose tokens are accepted.
	Issuers []IssuerConfig
	// Audiences are accepted for tokens of every issuer; empty means DefaultAudiences.
	// Besides these, Verify accepts the account's table endpoint
	// (https://<account>.table.core.windows.net) and, for each of Endpoints, the
	// endpoint itself and the endpoint followed by /<account>.
	Audiences []string
	// Endpoints are the server's own endpoint URLs (e.g. https://127.0.0.1:10002), so a
	// token requested for the server's address is accepted too.
	Endpoints []string
	// Algorithms is the JWS alg allow-list; empty means DefaultAlgorithms. New refuses
	// "none" and the HMAC algorithms, and any name go-jose does not know.
	Algorithms []string
	// ClockSkew tolerates clocks that differ: 0 means DefaultClockSkew; negative is an
	// error.
	ClockSkew time.Duration
	// HTTPClient fetches discovery documents and key sets; nil means a client with a
	// 10-second timeout. Tests pass one that trusts their provider's certificate.
	HTTPClient *http.Client
	// KeyRefreshInterval, KeyMaxAge, RetryMin and RetryMax: 0 means the Default values.
	KeyRefreshInterval time.Duration
	KeyMaxAge          time.Duration
	RetryMin, RetryMax time.Duration
	// Now is the clock; nil means time.Now. Tests move it.
	Now func() time.Time
}

// IssuerConfig is one accepted OpenID provider.
type IssuerConfig struct {
	// URL is the issuer identifier: a token's iss must equal it exactly, and discovery
	// reads URL + "/.well-known/openid-configuration", whose issuer must equal it too.
	URL string
	// Audiences, when set, replace Config.Audiences for this issuer's tokens.
	Audiences []string
	// Keys, when set, are the issuer's verification keys, used instead of discovery and
	// its JWKS: nothing is fetched, and a kid outside them is KindUnknownKey. It is for an
	// issuer whose keys the server holds itself (the development issuer, package
	// devissuer), which need not — and, when the issuer is the server, cannot safely —
	// be fetched over the network. Every other check is the same as for a discovered
	// issuer; private keys are reduced to their public halves, symmetric and encryption
	// keys dropped, as from a fetched JWKS.
	Keys []jose.JSONWebKey
}

// Verifier verifies bearer tokens. It is safe for concurrent use; create one and keep it,
// since it caches each issuer's discovery and keys.
type Verifier struct {
	issuers   map[string]*issuer
	order     []string
	audiences []string
	endpoints []string
	algs      []jose.SignatureAlgorithm
	skew      time.Duration
	now       func() time.Time
}

// New checks cfg and returns a Verifier. It contacts no provider: discovery happens on
// the first token of each issuer, so the server starts while a provider is down.
func New(cfg Config) (*Verifier, error) {
	if len(cfg.Issuers) == 0 {
		return nil, errors.New("no issuer configured")
	}
	v := &Verifier{
		issuers:   make(map[string]*issuer, len(cfg.Issuers)),
		audiences: cfg.Audiences,
		endpoints: cfg.Endpoints,
		skew:      cfg.ClockSkew,
		now:       cfg.Now,
	}
	if len(v.audiences) == 0 {
		v.audiences = DefaultAudiences
	}
	if v.skew < 0 {
		return nil, errors.New("negative clock skew")
	}
	if v.skew == 0 {
		v.skew = DefaultClockSkew
	}
	if v.now == nil {
		v.now = time.Now
	}
	algs := cfg.Algorithms
	if len(algs) == 0 {
		algs = DefaultAlgorithms
	}
	for _, a := range algs {
		if !slices.Contains(DefaultAlgorithms, a) {
			return nil, fmt.Errorf("algorithm %q not allowed: only asymmetric signatures", a)
		}
		v.algs = append(v.algs, jose.SignatureAlgorithm(a))
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	timing := timing{
		refresh:  orDefault(cfg.KeyRefreshInterval, DefaultKeyRefreshInterval),
		maxAge:   orDefault(cfg.KeyMaxAge, DefaultKeyMaxAge),
		retryMin: orDefault(cfg.RetryMin, DefaultRetryMin),
		retryMax: orDefault(cfg.RetryMax, DefaultRetryMax),
	}
	for _, ic := range cfg.Issuers {
		if ic.URL == "" {
			return nil, errors.New("issuer with no url")
		}
		if _, dup := v.issuers[ic.URL]; dup {
			return nil, fmt.Errorf("issuer %s configured twice", ic.URL)
		}
		iss, err := newIssuer(ic, client, timing, v.now)
		if err != nil {
			return nil, err
		}
		v.issuers[ic.URL] = iss
		v.order = append(v.order, ic.URL)
	}
	return v, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Issuers are the configured issuer URLs, in configuration order.
func (v *Verifier) Issuers() []string { return slices.Clone(v.order) }

// TokenFromHeader returns the token of an Authorization header value "Bearer <token>"
// (the scheme compared without case, as RFC 7235 says); ok is false when the header uses
// another scheme or carries no token.
func TokenFromHeader(h string) (token string, ok bool) {
	scheme, rest, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(rest)
	return token, token != ""
}

// claims are the claims Verify reads besides the registered ones.
type claims struct {
	ObjectID string      `json:"oid"`
	AppID    string      `json:"appid"`
	AZP      string      `json:"azp"`
	TenantID string      `json:"tid"`
	Groups   stringOrArr `json:"groups"`
	Roles    stringOrArr `json:"roles"`
}

// stringOrArr reads a claim given as an array of strings or as one string.
type stringOrArr []string

func (s *stringOrArr) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		*s = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("expected a string or an array of strings")
	}
	*s = many
	return nil
}

// Verify checks raw (the token, without "Bearer ") for a request to account's tables and
// returns the principal it names. account may be empty (no account-specific audience).
// Every failure is an *Error whose Kind says which check failed; the token never appears
// in it.
func (v *Verifier) Verify(ctx context.Context, raw string, account string) (identity.Principal, error) {
	if len(raw) > maxTokenLen {
		return identity.Principal{}, newError(KindMalformed, "", errors.New("token too long"))
	}
	tok, err := jwt.ParseSigned(raw, v.algs)
	if err != nil {
		return identity.Principal{}, parseError(raw, v.algs)
	}
	hdr := tok.Headers[0]
	var unverified struct {
		Issuer string `json:"iss"`
	}
	if err := tok.UnsafeClaimsWithoutVerification(&unverified); err != nil {
		return identity.Principal{}, newError(KindMalformed, "", errors.New("claims are not a json object"))
	}
	iss, ok := v.issuers[unverified.Issuer]
	if !ok {
		return identity.Principal{}, newError(KindIssuer, "", errors.New("issuer not configured"))
	}
	key, err := iss.key(ctx, hdr.KeyID, hdr.Algorithm)
	if err != nil {
		return identity.Principal{}, err
	}
	var std jwt.Claims
	var extra claims
	if err := tok.Claims(key, &std, &extra); err != nil {
		if errors.Is(err, jose.ErrCryptoFailure) {
			return identity.Principal{}, newError(KindSignature, iss.url, errors.New("signature does not verify"))
		}
		return identity.Principal{}, newError(KindMalformed, iss.url, errors.New("claims do not decode"))
	}
	if std.Expiry == nil {
		return identity.Principal{}, newError(KindExpired, iss.url, errors.New("token has no exp"))
	}
	// Issuer is checked again on the verified claims; the audience is checked below.
	switch err := std.ValidateWithLeeway(jwt.Expected{Issuer: iss.url, Time: v.now()}, v.skew); {
	case err == nil:
	case errors.Is(err, jwt.ErrExpired):
		return identity.Principal{}, newError(KindExpired, iss.url, errors.New("token expired"))
	case errors.Is(err, jwt.ErrNotValidYet):
		return identity.Principal{}, newError(KindNotYetValid, iss.url, errors.New("nbf in the future"))
	case errors.Is(err, jwt.ErrIssuedInTheFuture):
		return identity.Principal{}, newError(KindNotYetValid, iss.url, errors.New("iat in the future"))
	case errors.Is(err, jwt.ErrInvalidIssuer):
		return identity.Principal{}, newError(KindIssuer, iss.url, errors.New("issuer mismatch"))
	default:
		return identity.Principal{}, newError(KindMalformed, iss.url, errors.New("claims invalid"))
	}
	if !v.audienceOK(iss, std.Audience, account) {
		return identity.Principal{}, newError(KindAudience, iss.url, errors.New("no accepted audience"))
	}
	p := identity.Principal{
		Issuer:   std.Issuer,
		Subject:  std.Subject,
		ObjectID: extra.ObjectID,
		AppID:    extra.AppID,
		TenantID: extra.TenantID,
		Groups:   extra.Groups,
		Roles:    extra.Roles,
	}
	if p.ObjectID == "" {
		p.ObjectID = std.Subject
	}
	if p.AppID == "" {
		p.AppID = extra.AZP
	}
	if p.ObjectID == "" {
		return identity.Principal{}, newError(KindMalformed, iss.url, errors.New("token names no subject"))
	}
	return p, nil
}

// parseError classifies a go-jose parse failure: a token whose header names an alg
// outside the allow-list (none, HS256, …) is KindAlgorithm, anything else KindMalformed.
// go-jose tells the cases apart only in its error text, so the header is read here.
func parseError(raw string, allowed []jose.SignatureAlgorithm) error {
	var hdr struct {
		Alg string `json:"alg"`
	}
	if h, _, ok := strings.Cut(raw, "."); ok {
		if b, err := base64.RawURLEncoding.DecodeString(h); err == nil && json.Unmarshal(b, &hdr) == nil && hdr.Alg != "" {
			if !slices.Contains(allowed, jose.SignatureAlgorithm(hdr.Alg)) {
				return newError(KindAlgorithm, "", errors.New("algorithm not allowed"))
			}
		}
	}
	return newError(KindMalformed, "", errors.New("not a signed jwt"))
}

// keyFits says whether k may verify a signature made with alg: its own alg (when the
// JWKS names one) must be alg, and its type must be alg's — RSA for RS*/PS*, ECDSA on the
// matching curve for ES*, Ed25519 for EdDSA. Symmetric keys never fit.
func keyFits(k jose.JSONWebKey, alg string) bool {
	if k.Algorithm != "" && k.Algorithm != alg {
		return false
	}
	switch pk := k.Key.(type) {
	case *rsa.PublicKey:
		return strings.HasPrefix(alg, "RS") || strings.HasPrefix(alg, "PS")
	case *ecdsa.PublicKey:
		switch alg {
		case "ES256":
			return pk.Curve == elliptic.P256()
		case "ES384":
			return pk.Curve == elliptic.P384()
		case "ES512":
			return pk.Curve == elliptic.P521()
		}
		return false
	case ed25519.PublicKey:
		return alg == "EdDSA"
	}
	return false
}

// audienceOK says whether one of aud is accepted for iss and account. Comparison ignores
// one trailing slash, as Azure accepts both https://storage.azure.com and
// https://storage.azure.com/.
func (v *Verifier) audienceOK(iss *issuer, aud jwt.Audience, account string) bool {
	accepted := iss.audiences
	if len(accepted) == 0 {
		accepted = v.audiences
	}
	accepted = slices.Clone(accepted)
	if account != "" {
		accepted = append(accepted, "https://"+account+".table.core.windows.net")
	}
	for _, e := range v.endpoints {
		accepted = append(accepted, e)
		if account != "" {
			accepted = append(accepted, strings.TrimSuffix(e, "/")+"/"+account)
		}
	}
	for _, a := range aud {
		for _, b := range accepted {
			if a != "" && strings.TrimSuffix(a, "/") == strings.TrimSuffix(b, "/") {
				return true
			}
		}
	}
	return false
}
