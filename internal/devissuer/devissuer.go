// Package devissuer is the development issuer of `cerulean --dev-issuer` (issue 47,
// docs/identity.md "For development"): the server as its own small OpenID provider, so
// that code written for a token credential (DefaultAzureCredential and the like) runs
// against a local server without an identity provider of its own.
//
// The issuer is one ECDSA P-256 key kept in the data directory (KeyFile, PKCS#8 PEM,
// mode 0600), created on the first start and reused by every later one, so tokens and
// trust outlive a restart. Its identifier is the server's own URL followed by Path
// (https://127.0.0.1:10002/.cerulean/issuer), where Handler serves the OpenID discovery
// document and the JWKS, so any OpenID client (and the server's bearer.Verifier, were it
// configured by discovery) can verify its tokens. The server itself verifies them with the
// key it holds (bearer.IssuerConfig.Keys), fetching nothing.
//
// `cerulean token` mints a token with Load and Token: ES256-signed, audience
// https://storage.azure.com, the role and its scope carried in the roles claim as
// rbac.RoleClaim writes them — which the server honours for this issuer's tokens only
// (rbac.ClaimAuthorizer). The issuer URL the token command puts in iss is the one the
// server recorded in StateFile when it last started with --dev-issuer.
//
// Anyone who can read the key can mint any role: the server refuses --dev-issuer on an
// address that is not loopback, and the key is readable by its owner only.
package devissuer

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/ceruleandb/cerulean/internal/bearer"
	"github.com/ceruleandb/cerulean/internal/rbac"
)

const (
	// Path is where the issuer lives on the server's listener. Its first segment starts
	// with a dot, which no account name (lowercase letters and digits) and no table name
	// (letters and digits) can, so it never shadows an account or, in host-style
	// addressing, a table.
	Path = "/.cerulean/issuer"
	// DiscoveryPath and KeysPath are the discovery document's and the JWKS's paths.
	DiscoveryPath = Path + "/.well-known/openid-configuration"
	KeysPath      = Path + "/keys"
	// KeyFile is the signing key's file in the data directory, StateFile the file that
	// records the issuer URL the server last served, for `cerulean token`.
	KeyFile   = "cerulean-dev-issuer-key.pem"
	StateFile = "cerulean-dev-issuer.json"
	// Algorithm signs the tokens.
	Algorithm = jose.ES256
	// DefaultLifetime is a token's lifetime unless asked otherwise, and MaxLifetime the
	// longest taken: a day, so a token pasted somewhere stops working soon.
	DefaultLifetime = time.Hour
	MaxLifetime     = 24 * time.Hour
	// DefaultSubject is the sub of a token that names none.
	DefaultSubject = "developer"
)

// Issuer is the development issuer of one data directory.
type Issuer struct {
	url string
	key *ecdsa.PrivateKey
	kid string
}

// state is StateFile's content.
type state struct {
	Issuer string `json:"issuer"`
}

// Open returns the issuer of the server at baseURL (its scheme, host and port, e.g.
// https://127.0.0.1:10002) with its key in dir: the key is read, or created first (created
// says so), and the issuer URL is recorded in dir for `cerulean token`.
func Open(dir, baseURL string) (iss *Issuer, created bool, err error) {
	if !strings.HasPrefix(baseURL, "https://") {
		return nil, false, fmt.Errorf("dev issuer: %s is not an https url: tokens are taken over HTTPS only", baseURL)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, false, fmt.Errorf("dev issuer: %w", err)
	}
	path := filepath.Join(dir, KeyFile)
	key, err := readKey(path)
	if errors.Is(err, os.ErrNotExist) {
		if key, err = createKey(path); err == nil {
			created = true
		}
	}
	if err != nil {
		return nil, false, err
	}
	iss, err = newIssuer(strings.TrimSuffix(baseURL, "/")+Path, key)
	if err != nil {
		return nil, false, err
	}
	b, err := json.Marshal(state{Issuer: iss.url})
	if err != nil {
		return nil, false, fmt.Errorf("dev issuer: %w", err)
	}
	if err := writeAtomic(filepath.Join(dir, StateFile), append(b, '\n'), 0o644); err != nil {
		return nil, false, err
	}
	return iss, created, nil
}

// Load returns the issuer a server started with --dev-issuer and --data dir made: its key
// and the issuer URL it recorded. It creates nothing.
func Load(dir string) (*Issuer, error) {
	b, err := os.ReadFile(filepath.Join(dir, StateFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no development issuer in %s: start the server with --dev-issuer --data %s first", dir, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("dev issuer: %w", err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil || st.Issuer == "" {
		return nil, fmt.Errorf("dev issuer: %s does not name an issuer", filepath.Join(dir, StateFile))
	}
	key, err := readKey(filepath.Join(dir, KeyFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no development issuer key in %s: start the server with --dev-issuer --data %s first", dir, dir)
	}
	if err != nil {
		return nil, err
	}
	return newIssuer(st.Issuer, key)
}

func newIssuer(url string, key *ecdsa.PrivateKey) (*Issuer, error) {
	pub := jose.JSONWebKey{Key: &key.PublicKey, Algorithm: string(Algorithm), Use: "sig"}
	tp, err := pub.Thumbprint(crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("dev issuer: key thumbprint: %w", err)
	}
	// The kid is the key's RFC 7638 thumbprint: a new key is a new kid, and the same key
	// the same kid on every start.
	return &Issuer{url: url, key: key, kid: base64.RawURLEncoding.EncodeToString(tp)}, nil
}

// URL is the issuer identifier: the iss of its tokens.
func (i *Issuer) URL() string { return i.url }

// Keys are the issuer's public verification keys, for bearer.IssuerConfig.Keys and the JWKS.
func (i *Issuer) Keys() []jose.JSONWebKey {
	return []jose.JSONWebKey{{Key: &i.key.PublicKey, KeyID: i.kid, Algorithm: string(Algorithm), Use: "sig"}}
}

// TokenOptions say what a token grants and to whom.
type TokenOptions struct {
	// Role is granted at Scope (the zero Scope is every account).
	Role  *rbac.Role
	Scope rbac.Scope
	// Subject is the sub (and so the principal the access log names); "" is
	// DefaultSubject.
	Subject string
	// Lifetime is from Now to exp; 0 is DefaultLifetime. Now is the issue time; zero is
	// time.Now().
	Lifetime time.Duration
	Now      time.Time
}

// Token mints a signed token (a compact JWS) for o.
func (i *Issuer) Token(o TokenOptions) (string, error) {
	if o.Role == nil {
		return "", errors.New("token: no role")
	}
	if o.Subject == "" {
		o.Subject = DefaultSubject
	}
	if o.Lifetime == 0 {
		o.Lifetime = DefaultLifetime
	}
	if o.Lifetime < 0 || o.Lifetime > MaxLifetime {
		return "", fmt.Errorf("token: lifetime %v: want more than 0 and at most %v", o.Lifetime, MaxLifetime)
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: Algorithm, Key: i.key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", i.kid))
	if err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	claims := jwt.Claims{
		Issuer:    i.url,
		Subject:   o.Subject,
		Audience:  jwt.Audience{bearer.StorageResource},
		IssuedAt:  jwt.NewNumericDate(o.Now),
		NotBefore: jwt.NewNumericDate(o.Now),
		Expiry:    jwt.NewNumericDate(o.Now.Add(o.Lifetime)),
	}
	roles := struct {
		Roles []string `json:"roles"`
	}{[]string{rbac.RoleClaim(o.Role, o.Scope)}}
	raw, err := jwt.Signed(signer).Claims(claims).Claims(roles).Serialize()
	if err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	return raw, nil
}

// IsPath reports whether an HTTP request path is the issuer's: Path or below it.
func IsPath(p string) bool {
	return strings.HasPrefix(p, Path) && (len(p) == len(Path) || p[len(Path)] == '/')
}

// Mount returns a handler that serves the issuer's paths (IsPath) and sends every other
// request to next.
func (i *Issuer) Mount(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if IsPath(r.URL.Path) {
			i.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ServeHTTP serves the discovery document at DiscoveryPath and the JWKS at KeysPath
// (GET and HEAD); anything else under Path is 404. The discovery document names no
// authorization or token endpoint: tokens come from `cerulean token`, not from an OAuth
// flow.
func (i *Issuer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body any
	switch r.URL.Path {
	case DiscoveryPath:
		body = map[string]any{
			"issuer":                                i.url,
			"jwks_uri":                              i.url + "/keys",
			"response_types_supported":              []string{"id_token"},
			"subject_types_supported":               []string{"public"},
			"id_token_signing_alg_values_supported": []string{string(Algorithm)},
			"claims_supported":                      []string{"iss", "sub", "aud", "exp", "nbf", "iat", "roles"},
		}
	case KeysPath:
		body = jose.JSONWebKeySet{Keys: i.Keys()}
	default:
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	b, err := json.Marshal(body)
	if err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "max-age=300")
	if r.Method == http.MethodGet {
		_, _ = w.Write(b)
	}
}

// readKey reads the PKCS#8 PEM ECDSA P-256 key at path.
func readKey(path string) (*ecdsa.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("dev issuer key: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("dev issuer key %s: not a PEM private key (remove it to make a new one)", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("dev issuer key %s: %w (remove it to make a new one)", path, err)
	}
	ec, ok := k.(*ecdsa.PrivateKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, fmt.Errorf("dev issuer key %s: not an ECDSA P-256 key (remove it to make a new one)", path)
	}
	return ec, nil
}

// createKey makes a key and writes it to path, mode 0600, whole or not at all.
func createKey(path string) (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("dev issuer key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("dev issuer key: %w", err)
	}
	if err := writeAtomic(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	return key, nil
}

// writeAtomic writes data to a temporary file beside path (created with perm, so a key is
// never readable by others, even briefly), syncs it and renames it to path.
func writeAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("dev issuer: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(data)
	if cerr := f.Chmod(perm); err == nil {
		err = cerr
	}
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("dev issuer: %w", err)
	}
	return nil
}
