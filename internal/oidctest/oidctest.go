// Package oidctest runs a real OpenID Connect provider on loopback for tests: zitadel/oidc's
// op package serving discovery, the JWKS and the token endpoint over TLS, with an in-memory
// storage that issues JWT access tokens through the client-credentials grant. A test asks
// for a token with the claims, audience and lifetime it wants (Token), and can rotate the
// signing key (RotateKey) or stop and restart the provider at the same address.
//
// It is a test helper: the certificate is self-signed, generated once per process, and
// trusted by HTTPClient; nothing here is fit to run a real identity provider.
package oidctest

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// Options configure a Provider; the zero value is fine.
type Options struct {
	// Addr is the listening address; empty means 127.0.0.1:0 (a free port). A test that
	// needs the issuer URL before the provider runs picks a port with FreeAddr.
	Addr string
	// Algorithm signs the tokens: RS256 (default), RS384, RS512, PS256, PS384, PS512,
	// ES256, ES384, ES512 or EdDSA.
	Algorithm jose.SignatureAlgorithm
}

// Provider is a running OpenID provider.
type Provider struct {
	issuer string
	alg    jose.SignatureAlgorithm
	store  *storage
	srv    *http.Server
	ln     net.Listener
	done   chan struct{}
	// keyRequests counts requests to the JWKS endpoint.
	keyRequests atomic.Int64
}

// Start starts a provider; Close stops it.
func Start(opts Options) (*Provider, error) {
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	alg := opts.Algorithm
	if alg == "" {
		alg = jose.RS256
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &Provider{issuer: "https://" + ln.Addr().String(), alg: alg, done: make(chan struct{})}
	k, err := newKey(alg)
	if err != nil {
		ln.Close()
		return nil, err
	}
	p.store = &storage{tickets: map[string]*ticket{}, signing: k, published: []*key{k}}
	if err := p.serve(ln); err != nil {
		ln.Close()
		return nil, err
	}
	return p, nil
}

func (p *Provider) serve(ln net.Listener) error {
	var cryptoKey [32]byte
	if _, err := rand.Read(cryptoKey[:]); err != nil {
		return err
	}
	o, err := op.NewProvider(&op.Config{CryptoKey: cryptoKey}, p.store, op.StaticIssuer(p.issuer))
	if err != nil {
		return fmt.Errorf("new provider: %w", err)
	}
	h := http.Handler(o)
	mux := http.NewServeMux()
	mux.HandleFunc("/keys", func(w http.ResponseWriter, r *http.Request) {
		p.keyRequests.Add(1)
		h.ServeHTTP(w, r)
	})
	mux.Handle("/", h)
	cert, err := certificate()
	if err != nil {
		return err
	}
	p.ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert.tls}})
	p.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
	p.done = make(chan struct{})
	go func() {
		defer close(p.done)
		_ = p.srv.Serve(p.ln)
	}()
	return nil
}

// Issuer is the provider's issuer URL (https://127.0.0.1:port).
func (p *Provider) Issuer() string { return p.issuer }

// Addr is the provider's listening address (127.0.0.1:port).
func (p *Provider) Addr() string { return strings.TrimPrefix(p.issuer, "https://") }

// KeyRequests is how many times the JWKS has been requested.
func (p *Provider) KeyRequests() int64 { return p.keyRequests.Load() }

// Close stops the provider.
func (p *Provider) Close() error {
	err := p.srv.Close()
	<-p.done
	return err
}

// Restart starts a provider stopped by Close again, at the same address, with the same
// keys.
func (p *Provider) Restart() error {
	ln, err := net.Listen("tcp", p.Addr())
	if err != nil {
		return err
	}
	if err := p.serve(ln); err != nil {
		ln.Close()
		return err
	}
	return nil
}

// RotateKey makes a new key the signing key. With keepOld the old key stays published
// in the JWKS (a graceful rotation); without, it is removed (tokens it signed no longer
// verify once a verifier fetches the keys again).
func (p *Provider) RotateKey(keepOld bool) error {
	k, err := newKey(p.alg)
	if err != nil {
		return err
	}
	p.store.mu.Lock()
	defer p.store.mu.Unlock()
	if keepOld {
		p.store.published = append(p.store.published, k)
	} else {
		p.store.published = []*key{k}
	}
	p.store.signing = k
	return nil
}

// KeyID is the kid of the current signing key.
func (p *Provider) KeyID() string {
	p.store.mu.Lock()
	defer p.store.mu.Unlock()
	return p.store.signing.id
}

// TokenOptions say what token Token asks for.
type TokenOptions struct {
	// Subject is the sub claim; empty means a fresh client id.
	Subject string
	// Audience is the aud claim; empty means https://storage.azure.com.
	Audience []string
	// Lifetime is exp minus now (negative: an expired token); 0 means one hour.
	Lifetime time.Duration
	// NotBefore moves nbf and iat from now (positive: a token not yet valid).
	NotBefore time.Duration
	// Claims are added to the token (oid, tid, appid, azp, groups, roles, …).
	Claims map[string]any
}

// Token obtains a JWT access token from the provider's token endpoint by the
// client-credentials grant, for a client registered for this one request.
func (p *Provider) Token(ctx context.Context, o TokenOptions) (string, error) {
	id, secret := randomHex(8), randomHex(16)
	if o.Subject == "" {
		o.Subject = id
	}
	if len(o.Audience) == 0 {
		o.Audience = []string{"https://storage.azure.com"}
	}
	if o.Lifetime == 0 {
		o.Lifetime = time.Hour
	}
	p.store.mu.Lock()
	p.store.tickets[id] = &ticket{secret: secret, opts: o}
	p.store.mu.Unlock()
	defer func() {
		p.store.mu.Lock()
		delete(p.store.tickets, id)
		p.store.mu.Unlock()
	}()
	form := url.Values{"grant_type": {"client_credentials"}, "scope": {"https://storage.azure.com/.default"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.issuer+"/oauth/token", strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(id, secret)
	client, err := HTTPClient()
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("token endpoint: %s: %s", resp.Status, body)
	}
	var tr struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.Unmarshal(body, &tr); err != nil || tr.AccessToken == "" {
		return "", fmt.Errorf("token endpoint: no access_token in %s", body)
	}
	return tr.AccessToken, nil
}

// FreeAddr returns a loopback address with a port free at the time of the call, for a
// provider started later.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// key is a signing key with its public half published in the JWKS.
type key struct {
	id     string
	alg    jose.SignatureAlgorithm
	signer crypto.Signer
}

func (k *key) SignatureAlgorithm() jose.SignatureAlgorithm { return k.alg }
func (k *key) Key() any                                    { return k.signer }
func (k *key) ID() string                                  { return k.id }

// publicKey is what the JWKS endpoint publishes.
type publicKey struct{ *key }

func (k publicKey) Algorithm() jose.SignatureAlgorithm { return k.alg }
func (k publicKey) Use() string                        { return "sig" }
func (k publicKey) Key() any                           { return k.signer.Public() }

func newKey(alg jose.SignatureAlgorithm) (*key, error) {
	var (
		s   crypto.Signer
		err error
	)
	switch alg {
	case jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512:
		s, err = rsa.GenerateKey(rand.Reader, 2048)
	case jose.ES256:
		s, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case jose.ES384:
		s, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case jose.ES512:
		s, err = ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	case jose.EdDSA:
		_, s, err = ed25519.GenerateKey(rand.Reader)
	default:
		return nil, fmt.Errorf("algorithm %s not supported", alg)
	}
	if err != nil {
		return nil, err
	}
	return &key{id: randomHex(8), alg: alg, signer: s}, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// cert is the process's self-signed loopback certificate.
type cert struct {
	tls    tls.Certificate
	pem    []byte
	client *http.Client
}

var (
	certOnce sync.Once
	certVal  *cert
	certErr  error
)

func certificate() (*cert, error) {
	certOnce.Do(func() { certVal, certErr = newCert() })
	return certVal, certErr
}

func newCert() (*cert, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "oidctest"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		return nil, err
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(parsed)
	return &cert{
		tls: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv, Leaf: parsed},
		pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		client: &http.Client{
			Timeout:   10 * time.Second,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		},
	}, nil
}

// HTTPClient returns the client, shared by the process, that trusts every provider of
// this process (and nothing else).
func HTTPClient() (*http.Client, error) {
	c, err := certificate()
	if err != nil {
		return nil, err
	}
	return c.client, nil
}

// CertPEM is the providers' certificate in PEM, for clients in other processes (e.g.
// NODE_EXTRA_CA_CERTS, REQUESTS_CA_BUNDLE).
func CertPEM() ([]byte, error) {
	c, err := certificate()
	if err != nil {
		return nil, err
	}
	return c.pem, nil
}
