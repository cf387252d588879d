package bearer_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/ceruleandb/cerulean/internal/bearer"
)

// staticIssuer serves a discovery document and a JWKS holding key's public half under
// kid "static": an issuer for tokens the real provider will not mint (no exp, odd
// claims) and for the fuzz test, which must not depend on anything slow.
func staticIssuer(t testing.TB) (issuer string, key *rsa.PrivateKey, v *bearer.Verifier) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	issuer = srv.URL
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"issuer": issuer, "jwks_uri": issuer + "/keys"})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
			{Key: &key.PublicKey, KeyID: "static", Algorithm: "RS256", Use: "sig"},
			// Keys a verifier must skip: an encryption key and a symmetric one.
			{Key: &key.PublicKey, KeyID: "enc", Use: "enc"},
			{Key: []byte("0123456789abcdef0123456789abcdef"), KeyID: "hmac", Algorithm: "HS256"},
		}})
	})
	v, err = bearer.New(bearer.Config{Issuers: []bearer.IssuerConfig{{URL: issuer}}, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return issuer, key, v
}

func TestClaimsTheProviderWillNotMint(t *testing.T) {
	iss, key, v := staticIssuer(t)
	exp := time.Now().Add(time.Hour).Unix()
	for _, tc := range []struct {
		name   string
		kid    string
		claims map[string]any
		want   bearer.Kind // 0: accepted
	}{
		{"valid", "static", map[string]any{"iss": iss, "sub": "s", "aud": "https://storage.azure.com", "exp": exp}, 0},
		{"no exp", "static", map[string]any{"iss": iss, "sub": "s", "aud": "https://storage.azure.com"}, bearer.KindExpired},
		{"iat in the future", "static", map[string]any{"iss": iss, "sub": "s", "aud": "https://storage.azure.com", "exp": exp, "iat": time.Now().Add(10 * time.Minute).Unix()}, bearer.KindNotYetValid},
		{"no aud", "static", map[string]any{"iss": iss, "sub": "s", "exp": exp}, bearer.KindAudience},
		{"no subject", "static", map[string]any{"iss": iss, "aud": "https://storage.azure.com", "exp": exp}, bearer.KindMalformed},
		{"groups not strings", "static", map[string]any{"iss": iss, "sub": "s", "aud": "https://storage.azure.com", "exp": exp, "groups": 7}, bearer.KindMalformed},
		{"exp not a number", "static", map[string]any{"iss": iss, "sub": "s", "aud": "https://storage.azure.com", "exp": "soon"}, bearer.KindMalformed},
		{"encryption key", "enc", map[string]any{"iss": iss, "sub": "s", "aud": "https://storage.azure.com", "exp": exp}, bearer.KindUnknownKey},
		{"no kid, one key", "", map[string]any{"iss": iss, "sub": "s", "aud": "https://storage.azure.com", "exp": exp}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := sign(t, jose.RS256, key, tc.kid, tc.claims)
			_, err := v.Verify(context.Background(), raw, "")
			if tc.want == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			refused(t, raw, err, tc.want)
		})
	}
	// The symmetric key in the set is never used, even by an HS256 token naming it.
	h := sign(t, jose.HS256, []byte("0123456789abcdef0123456789abcdef"), "hmac", map[string]any{"iss": iss, "sub": "s", "aud": "https://storage.azure.com", "exp": exp})
	_, err := v.Verify(context.Background(), h, "")
	refused(t, h, err, bearer.KindAlgorithm)
}

// noNetwork fails every request, so a test sees any fetch.
type noNetwork struct{ t testing.TB }

func (n noNetwork) RoundTrip(r *http.Request) (*http.Response, error) {
	n.t.Errorf("fetched %s: an issuer with static keys must fetch nothing", r.URL)
	return nil, http.ErrNotSupported
}

// TestStaticKeys: an issuer configured with its keys (IssuerConfig.Keys) verifies tokens
// without fetching anything, and every other check stays: another kid, another issuer,
// expiry, audience, an HMAC key. A key set with no public signing key is refused.
func TestStaticKeys(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	const iss = "https://127.0.0.1:10002/.cerulean/issuer"
	v, err := bearer.New(bearer.Config{
		Issuers: []bearer.IssuerConfig{{URL: iss, Keys: []jose.JSONWebKey{
			// The private key: only its public half may be kept.
			{Key: key, KeyID: "dev", Algorithm: "RS256", Use: "sig"},
			{Key: []byte("0123456789abcdef0123456789abcdef"), KeyID: "hmac", Algorithm: "HS256"},
		}}},
		HTTPClient: &http.Client{Transport: noNetwork{t}},
	})
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour).Unix()
	ok := map[string]any{"iss": iss, "sub": "dev", "aud": "https://storage.azure.com", "exp": exp}
	with := func(k string, val any) map[string]any {
		c := map[string]any{}
		for k, v := range ok {
			c[k] = v
		}
		c[k] = val
		return c
	}
	raw := sign(t, jose.RS256, key, "dev", ok)
	if p, err := v.Verify(context.Background(), raw, "devstoreaccount1"); err != nil || p.ObjectID != "dev" || p.Issuer != iss {
		t.Fatalf("valid token: %+v, %v", p, err)
	}
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		raw  string
		want bearer.Kind
	}{
		{"unknown kid", sign(t, jose.RS256, key, "other", ok), bearer.KindUnknownKey},
		{"another key", sign(t, jose.RS256, other, "dev", ok), bearer.KindSignature},
		{"another issuer", sign(t, jose.RS256, key, "dev", with("iss", "https://127.0.0.1:10003/.cerulean/issuer")), bearer.KindIssuer},
		{"expired", sign(t, jose.RS256, key, "dev", with("exp", time.Now().Add(-time.Hour).Unix())), bearer.KindExpired},
		{"another audience", sign(t, jose.RS256, key, "dev", with("aud", "https://vault.azure.net")), bearer.KindAudience},
		{"hmac", sign(t, jose.HS256, []byte("0123456789abcdef0123456789abcdef"), "hmac", ok), bearer.KindAlgorithm},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.Verify(context.Background(), tc.raw, "devstoreaccount1")
			refused(t, tc.raw, err, tc.want)
		})
	}
	_, err = bearer.New(bearer.Config{Issuers: []bearer.IssuerConfig{{URL: iss, Keys: []jose.JSONWebKey{
		{Key: []byte("0123456789abcdef0123456789abcdef"), KeyID: "hmac", Algorithm: "HS256"}}}}})
	if err == nil || !strings.Contains(err.Error(), "no public signing key") {
		t.Errorf("only a symmetric key: %v", err)
	}
}
