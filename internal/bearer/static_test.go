package bearer_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
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
