package bearer_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/ceruleandb/cerulean/internal/bearer"
	"github.com/ceruleandb/cerulean/internal/identity"
	"github.com/ceruleandb/cerulean/internal/oidctest"
)

func startProvider(t *testing.T, opts oidctest.Options) *oidctest.Provider {
	t.Helper()
	p, err := oidctest.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// clock is a test clock: real time moved by an offset.
type clock struct{ offset atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) advance(d time.Duration) { c.offset.Add(int64(d)) }

func newVerifier(t *testing.T, mod func(*bearer.Config), issuers ...string) *bearer.Verifier {
	t.Helper()
	client, err := oidctest.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	cfg := bearer.Config{HTTPClient: client}
	for _, iss := range issuers {
		cfg.Issuers = append(cfg.Issuers, bearer.IssuerConfig{URL: iss})
	}
	if mod != nil {
		mod(&cfg)
	}
	v, err := bearer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func mint(t *testing.T, p *oidctest.Provider, o oidctest.TokenOptions) string {
	t.Helper()
	tok, err := p.Token(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// refused checks that err is a *bearer.Error of kind want that does not quote the token.
func refused(t *testing.T, raw string, err error, want bearer.Kind) {
	t.Helper()
	var be *bearer.Error
	if !errors.As(err, &be) {
		t.Fatalf("err = %v, want a *bearer.Error of kind %q", err, want)
	}
	if be.Kind != want {
		t.Fatalf("kind = %q (%v), want %q", be.Kind, err, want)
	}
	for _, seg := range strings.Split(raw, ".") {
		if len(seg) >= 8 && strings.Contains(err.Error(), seg) {
			t.Fatalf("error %q quotes the token", err)
		}
	}
}

func segments(t *testing.T, raw string) (hdr, claims map[string]any, sig string) {
	t.Helper()
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		t.Fatalf("token has %d segments", len(parts))
	}
	for i, dst := range []*map[string]any{&hdr, &claims} {
		b, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, dst); err != nil {
			t.Fatal(err)
		}
	}
	return hdr, claims, parts[2]
}

func encodeSegment(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// sign signs claims with key under alg, naming kid.
func sign(t testing.TB, alg jose.SignatureAlgorithm, key any, kid string, claims map[string]any) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType("JWT")
	if kid != "" {
		opts = opts.WithHeader("kid", kid)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestValidToken(t *testing.T) {
	p := startProvider(t, oidctest.Options{})
	v := newVerifier(t, nil, p.Issuer())
	raw := mint(t, p, oidctest.TokenOptions{
		Subject: "sub-1",
		Claims: map[string]any{
			"oid": "oid-1", "tid": "tenant-1", "appid": "app-1", "azp": "azp-1",
			"groups": []string{"g1", "g2"}, "roles": []string{"Tables.Read"},
		},
	})
	got, err := v.Verify(context.Background(), raw, "devstoreaccount1")
	if err != nil {
		t.Fatal(err)
	}
	want := identity.Principal{
		Issuer: p.Issuer(), Subject: "sub-1", ObjectID: "oid-1", AppID: "app-1", TenantID: "tenant-1",
		Groups: []string{"g1", "g2"}, Roles: []string{"Tables.Read"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("principal = %+v, want %+v", got, want)
	}

	// Without oid and appid, sub and azp stand in (other providers than Entra ID).
	raw = mint(t, p, oidctest.TokenOptions{Subject: "sub-2", Claims: map[string]any{"azp": "azp-2", "groups": "one"}})
	got, err = v.Verify(context.Background(), raw, "")
	if err != nil {
		t.Fatal(err)
	}
	want = identity.Principal{Issuer: p.Issuer(), Subject: "sub-2", ObjectID: "sub-2", AppID: "azp-2", Groups: []string{"one"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("principal = %+v, want %+v", got, want)
	}
}

func TestAlgorithms(t *testing.T) {
	for _, alg := range []jose.SignatureAlgorithm{jose.RS256, jose.PS384, jose.ES256, jose.ES512, jose.EdDSA} {
		t.Run(string(alg), func(t *testing.T) {
			p := startProvider(t, oidctest.Options{Algorithm: alg})
			v := newVerifier(t, nil, p.Issuer())
			raw := mint(t, p, oidctest.TokenOptions{Subject: "s"})
			if hdr, _, _ := segments(t, raw); hdr["alg"] != string(alg) {
				t.Fatalf("provider signed with %v, want %s", hdr["alg"], alg)
			}
			if _, err := v.Verify(context.Background(), raw, ""); err != nil {
				t.Fatal(err)
			}
			// The same token is refused when its alg is outside the allow-list.
			strict := newVerifier(t, func(c *bearer.Config) { c.Algorithms = []string{"RS512"} }, p.Issuer())
			_, err := strict.Verify(context.Background(), raw, "")
			refused(t, raw, err, bearer.KindAlgorithm)
		})
	}
}

func TestAudiences(t *testing.T) {
	p := startProvider(t, oidctest.Options{})
	v := newVerifier(t, func(c *bearer.Config) { c.Endpoints = []string{"https://127.0.0.1:10002/"} }, p.Issuer())
	for _, tc := range []struct {
		aud     string
		account string
		ok      bool
	}{
		{"https://storage.azure.com", "", true},
		{"https://storage.azure.com/", "", true},
		{"https://devstoreaccount1.table.core.windows.net", "devstoreaccount1", true},
		{"https://devstoreaccount1.table.core.windows.net/", "devstoreaccount1", true},
		{"https://devstoreaccount1.table.core.windows.net", "other", false},
		{"https://127.0.0.1:10002", "", true},
		{"https://127.0.0.1:10002/devstoreaccount1", "devstoreaccount1", true},
		{"https://127.0.0.1:10002/devstoreaccount1", "other", false},
		{"https://management.azure.com", "devstoreaccount1", false},
		{"https://storage.azure.com.evil", "", false},
	} {
		raw := mint(t, p, oidctest.TokenOptions{Audience: []string{tc.aud}})
		_, err := v.Verify(context.Background(), raw, tc.account)
		if tc.ok && err != nil {
			t.Errorf("aud %s account %q: %v", tc.aud, tc.account, err)
		}
		if !tc.ok {
			refused(t, raw, err, bearer.KindAudience)
		}
	}
	// A token with several audiences passes when one is accepted.
	raw := mint(t, p, oidctest.TokenOptions{Audience: []string{"api://other", "https://storage.azure.com"}})
	if _, err := v.Verify(context.Background(), raw, ""); err != nil {
		t.Fatal(err)
	}
	// An issuer's own audiences replace the default ones.
	own := newVerifier(t, func(c *bearer.Config) { c.Issuers[0].Audiences = []string{"api://cerulean"} }, p.Issuer())
	raw = mint(t, p, oidctest.TokenOptions{Audience: []string{"api://cerulean"}})
	if _, err := own.Verify(context.Background(), raw, ""); err != nil {
		t.Fatal(err)
	}
	raw = mint(t, p, oidctest.TokenOptions{})
	_, err := own.Verify(context.Background(), raw, "")
	refused(t, raw, err, bearer.KindAudience)
}

func TestLifetime(t *testing.T) {
	p := startProvider(t, oidctest.Options{})
	v := newVerifier(t, nil, p.Issuer())
	for _, tc := range []struct {
		name     string
		opts     oidctest.TokenOptions
		wantKind bearer.Kind // 0: accepted
	}{
		{"expired", oidctest.TokenOptions{Lifetime: -10 * time.Minute}, bearer.KindExpired},
		{"expired within skew", oidctest.TokenOptions{Lifetime: -time.Minute}, 0},
		{"not yet valid", oidctest.TokenOptions{NotBefore: 10 * time.Minute, Lifetime: time.Hour}, bearer.KindNotYetValid},
		{"not yet valid within skew", oidctest.TokenOptions{NotBefore: time.Minute, Lifetime: time.Hour}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := mint(t, p, tc.opts)
			_, err := v.Verify(context.Background(), raw, "")
			if tc.wantKind == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			refused(t, raw, err, tc.wantKind)
		})
	}
	// A smaller configured skew refuses what the default tolerates.
	strict := newVerifier(t, func(c *bearer.Config) { c.ClockSkew = 10 * time.Second }, p.Issuer())
	raw := mint(t, p, oidctest.TokenOptions{Lifetime: -time.Minute})
	_, err := strict.Verify(context.Background(), raw, "")
	refused(t, raw, err, bearer.KindExpired)
}

func TestIssuers(t *testing.T) {
	a := startProvider(t, oidctest.Options{})
	b := startProvider(t, oidctest.Options{})
	onlyA := newVerifier(t, nil, a.Issuer())
	both := newVerifier(t, nil, a.Issuer(), b.Issuer())

	// A genuine token of an unconfigured provider.
	rawB := mint(t, b, oidctest.TokenOptions{})
	_, err := onlyA.Verify(context.Background(), rawB, "")
	refused(t, rawB, err, bearer.KindIssuer)
	if _, err := both.Verify(context.Background(), rawB, ""); err != nil {
		t.Fatal(err)
	}

	// A's token with iss rewritten: to an unknown issuer, then to B (whose keys do
	// not hold A's kid; the verifier picks B's keys by the unverified iss).
	rawA := mint(t, a, oidctest.TokenOptions{})
	hdr, claims, sig := segments(t, rawA)
	for _, iss := range []string{"https://evil.example", b.Issuer()} {
		claims["iss"] = iss
		forged := encodeSegment(t, hdr) + "." + encodeSegment(t, claims) + "." + sig
		_, err := both.Verify(context.Background(), forged, "")
		want := bearer.KindIssuer
		if iss == b.Issuer() {
			want = bearer.KindUnknownKey
		}
		refused(t, forged, err, want)
	}
}

func TestForgedTokens(t *testing.T) {
	p := startProvider(t, oidctest.Options{})
	v := newVerifier(t, nil, p.Issuer())
	genuine := mint(t, p, oidctest.TokenOptions{Subject: "alice"})
	if _, err := v.Verify(context.Background(), genuine, ""); err != nil {
		t.Fatal(err)
	}
	hdr, claims, sig := segments(t, genuine)
	h64, c64 := strings.Split(genuine, ".")[0], strings.Split(genuine, ".")[1]

	t.Run("alg none", func(t *testing.T) {
		for _, alg := range []string{"none", "None", "NONE"} {
			h := map[string]any{"alg": alg, "typ": "JWT", "kid": hdr["kid"]}
			for _, s := range []string{"", sig} {
				raw := encodeSegment(t, h) + "." + c64 + "." + s
				_, err := v.Verify(context.Background(), raw, "")
				refused(t, raw, err, bearer.KindAlgorithm)
			}
		}
	})

	t.Run("HS256 with the public key", func(t *testing.T) {
		pub := providerRSAKey(t, p, hdr["kid"].(string))
		pkix, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			t.Fatal(err)
		}
		secrets := [][]byte{
			pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pkix}),
			pkix,
			x509.MarshalPKCS1PublicKey(pub),
			pub.N.Bytes(),
		}
		for _, secret := range secrets {
			for _, alg := range []string{"HS256", "HS384", "HS512"} {
				h := map[string]any{"alg": alg, "typ": "JWT", "kid": hdr["kid"]}
				signing := encodeSegment(t, h) + "." + c64
				mac := hmac.New(sha256.New, secret)
				io.WriteString(mac, signing)
				raw := signing + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
				_, err := v.Verify(context.Background(), raw, "")
				refused(t, raw, err, bearer.KindAlgorithm)
			}
		}
		// An HMAC algorithm cannot even be configured.
		if _, err := bearer.New(bearer.Config{Issuers: []bearer.IssuerConfig{{URL: p.Issuer()}}, Algorithms: []string{"HS256"}}); err == nil {
			t.Fatal("HS256 configured")
		}
		if _, err := bearer.New(bearer.Config{Issuers: []bearer.IssuerConfig{{URL: p.Issuer()}}, Algorithms: []string{"none"}}); err == nil {
			t.Fatal("none configured")
		}
	})

	t.Run("alg not fitting the key", func(t *testing.T) {
		// ES256 under the kid of the provider's RSA key, signed with an EC key.
		ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		raw := sign(t, jose.ES256, ec, hdr["kid"].(string), claims)
		_, err = v.Verify(context.Background(), raw, "")
		refused(t, raw, err, bearer.KindAlgorithm)
		// PS256 fits an RSA key, but not one the JWKS names RS256.
		rk, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		raw = sign(t, jose.PS256, rk, hdr["kid"].(string), claims)
		_, err = v.Verify(context.Background(), raw, "")
		refused(t, raw, err, bearer.KindAlgorithm)
		// RS256 under the same kid, signed with another RSA key: a bad signature.
		raw = sign(t, jose.RS256, rk, hdr["kid"].(string), claims)
		_, err = v.Verify(context.Background(), raw, "")
		refused(t, raw, err, bearer.KindSignature)
	})

	t.Run("tampered", func(t *testing.T) {
		tampered := map[string]any{}
		for k, val := range claims {
			tampered[k] = val
		}
		tampered["sub"] = "mallory"
		raw := h64 + "." + encodeSegment(t, tampered) + "." + sig
		_, err := v.Verify(context.Background(), raw, "")
		refused(t, raw, err, bearer.KindSignature)

		tampered["sub"] = claims["sub"]
		tampered["roles"] = []string{"admin"}
		raw = h64 + "." + encodeSegment(t, tampered) + "." + sig
		_, err = v.Verify(context.Background(), raw, "")
		refused(t, raw, err, bearer.KindSignature)

		b, _ := base64.RawURLEncoding.DecodeString(sig)
		b[len(b)/2] ^= 1
		raw = h64 + "." + c64 + "." + base64.RawURLEncoding.EncodeToString(b)
		_, err = v.Verify(context.Background(), raw, "")
		refused(t, raw, err, bearer.KindSignature)

		// The header is signed too: a changed typ breaks the signature.
		h := map[string]any{}
		for k, val := range hdr {
			h[k] = val
		}
		h["typ"] = "at+jwt"
		raw = encodeSegment(t, h) + "." + c64 + "." + sig
		_, err = v.Verify(context.Background(), raw, "")
		refused(t, raw, err, bearer.KindSignature)
	})

	t.Run("malformed", func(t *testing.T) {
		for _, raw := range []string{"", "abc", "a.b.c", h64 + "." + c64, h64 + ".." + sig, genuine + ".x", strings.Repeat("A", 70<<10)} {
			_, err := v.Verify(context.Background(), raw, "")
			refused(t, raw, err, bearer.KindMalformed)
		}
	})
}

// providerRSAKey fetches the provider's JWKS, as anyone can, and returns the key kid.
func providerRSAKey(t *testing.T, p *oidctest.Provider, kid string) *rsa.PublicKey {
	t.Helper()
	client, err := oidctest.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Get(p.Issuer() + "/keys")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var set jose.JSONWebKeySet
	if err := json.NewDecoder(resp.Body).Decode(&set); err != nil {
		t.Fatal(err)
	}
	for _, k := range set.Key(kid) {
		if pub, ok := k.Key.(*rsa.PublicKey); ok {
			return pub
		}
	}
	t.Fatalf("no RSA key %s in the provider's JWKS", kid)
	return nil
}

func TestUnknownKeyIsRateLimited(t *testing.T) {
	p := startProvider(t, oidctest.Options{})
	var clk clock
	v := newVerifier(t, func(c *bearer.Config) { c.Now = clk.now }, p.Issuer())
	genuine := mint(t, p, oidctest.TokenOptions{})
	if _, err := v.Verify(context.Background(), genuine, ""); err != nil {
		t.Fatal(err)
	}
	if n := p.KeyRequests(); n != 1 {
		t.Fatalf("key requests after the first token = %d, want 1", n)
	}
	_, claims, _ := segments(t, genuine)
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	// The first unknown kid after the refresh interval fetches the keys again; the
	// others within the interval do not.
	clk.advance(bearer.DefaultKeyRefreshInterval)
	for i := range 20 {
		raw := sign(t, jose.RS256, rk, "bogus-"+string(rune('a'+i)), claims)
		_, err := v.Verify(context.Background(), raw, "")
		refused(t, raw, err, bearer.KindUnknownKey)
	}
	if n := p.KeyRequests(); n != 2 {
		t.Fatalf("key requests after 20 bogus kids = %d, want 2", n)
	}
	// The genuine token still verifies from the cache.
	if _, err := v.Verify(context.Background(), genuine, ""); err != nil {
		t.Fatal(err)
	}
	if n := p.KeyRequests(); n != 2 {
		t.Fatalf("key requests = %d, want 2", n)
	}
}

func TestKeyRotation(t *testing.T) {
	p := startProvider(t, oidctest.Options{})
	var clk clock
	v := newVerifier(t, func(c *bearer.Config) { c.Now = clk.now }, p.Issuer())
	old := mint(t, p, oidctest.TokenOptions{})
	if _, err := v.Verify(context.Background(), old, ""); err != nil {
		t.Fatal(err)
	}
	if err := p.RotateKey(false); err != nil {
		t.Fatal(err)
	}
	clk.advance(bearer.DefaultKeyRefreshInterval)
	fresh := mint(t, p, oidctest.TokenOptions{})
	if _, err := v.Verify(context.Background(), fresh, ""); err != nil {
		t.Fatalf("token of the new key: %v", err)
	}
	// The old key is gone from the provider's set, and so from the verifier's.
	_, err := v.Verify(context.Background(), old, "")
	refused(t, old, err, bearer.KindUnknownKey)

	// A rotation that keeps the old key published keeps its tokens valid.
	if err := p.RotateKey(true); err != nil {
		t.Fatal(err)
	}
	clk.advance(bearer.DefaultKeyRefreshInterval)
	newer := mint(t, p, oidctest.TokenOptions{})
	for _, raw := range []string{newer, fresh} {
		if _, err := v.Verify(context.Background(), raw, ""); err != nil {
			t.Fatal(err)
		}
	}

	// A removed key stops verifying once the cache is older than KeyMaxAge, even if no
	// token names a new kid.
	if err := p.RotateKey(false); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), newer, ""); err != nil {
		t.Fatalf("cached key: %v", err)
	}
	clk.advance(bearer.DefaultKeyMaxAge)
	_, err = v.Verify(context.Background(), newer, "")
	refused(t, newer, err, bearer.KindUnknownKey)
}

func TestProviderOutage(t *testing.T) {
	p := startProvider(t, oidctest.Options{})
	var clk clock
	v := newVerifier(t, func(c *bearer.Config) { c.Now = clk.now }, p.Issuer())
	raw := mint(t, p, oidctest.TokenOptions{})
	if _, err := v.Verify(context.Background(), raw, ""); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	// Cached keys keep verifying while the provider is down, even past KeyMaxAge.
	if _, err := v.Verify(context.Background(), raw, ""); err != nil {
		t.Fatal(err)
	}
	clk.advance(bearer.DefaultKeyMaxAge)
	if _, err := v.Verify(context.Background(), raw, ""); err != nil {
		t.Fatal(err)
	}
	// An unknown kid cannot be looked up: the provider is unavailable (the token may be
	// signed by a key published since); asked again within the refresh interval, the
	// verifier does not retry and the kid is unknown.
	_, claims, _ := segments(t, raw)
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	clk.advance(bearer.DefaultKeyRefreshInterval)
	bogus := sign(t, jose.RS256, rk, "bogus", claims)
	_, err = v.Verify(context.Background(), bogus, "")
	refused(t, bogus, err, bearer.KindUnavailable)
	_, err = v.Verify(context.Background(), bogus, "")
	refused(t, bogus, err, bearer.KindUnknownKey)
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), raw, ""); err != nil {
		t.Fatal(err)
	}
}

func TestProviderDownAtStart(t *testing.T) {
	addr, err := oidctest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	issuer := "https://" + addr
	v := newVerifier(t, func(c *bearer.Config) {
		c.RetryMin, c.RetryMax = 20*time.Millisecond, 200*time.Millisecond
	}, issuer)

	// A token naming the issuer, verified while the provider is down.
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	early := sign(t, jose.RS256, rk, "k", map[string]any{
		"iss": issuer, "sub": "s", "aud": "https://storage.azure.com", "exp": time.Now().Add(time.Hour).Unix(),
	})
	_, err = v.Verify(context.Background(), early, "")
	refused(t, early, err, bearer.KindUnavailable)
	// Within the backoff, no new attempt: the same answer at once.
	_, err = v.Verify(context.Background(), early, "")
	refused(t, early, err, bearer.KindUnavailable)

	p := startProvider(t, oidctest.Options{Addr: addr})
	raw := mint(t, p, oidctest.TokenOptions{})
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := v.Verify(context.Background(), raw, "")
		if err == nil {
			break
		}
		refused(t, raw, err, bearer.KindUnavailable)
		if time.Now().After(deadline) {
			t.Fatalf("still refused once the provider is up: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestTokenFromHeader(t *testing.T) {
	for h, want := range map[string]string{
		"Bearer abc":    "abc",
		"bearer abc":    "abc",
		"BEARER  abc ":  "abc",
		"Bearer ":       "",
		"Bearer":        "",
		"SharedKey a:b": "",
		"":              "",
		"Bearerabc":     "",
	} {
		got, ok := bearer.TokenFromHeader(h)
		if got != want || ok != (want != "") {
			t.Errorf("TokenFromHeader(%q) = %q, %v; want %q", h, got, ok, want)
		}
	}
}

func TestChallenge(t *testing.T) {
	const tenant = "72f988bf-86f1-41af-91ab-2d7cd011db47"
	azure := "Bearer authorization_uri=https://login.microsoftonline.com/" + tenant + "/oauth2/authorize resource_id=https://storage.azure.com"
	for iss, want := range map[string]string{
		"https://sts.windows.net/" + tenant + "/":               azure,
		"https://login.microsoftonline.com/" + tenant + "/v2.0": azure,
		"":                       "Bearer authorization_uri=https://login.microsoftonline.com/common/oauth2/authorize resource_id=https://storage.azure.com",
		"https://127.0.0.1:8443": "Bearer authorization_uri=https://127.0.0.1:8443 resource_id=https://storage.azure.com",
		"https://sts.windows.net.evil/" + tenant + "/": "Bearer authorization_uri=https://sts.windows.net.evil/" + tenant + "/ resource_id=https://storage.azure.com",
	} {
		if got := bearer.Challenge(iss); got != want {
			t.Errorf("Challenge(%q) = %q, want %q", iss, got, want)
		}
	}
	v, err := bearer.New(bearer.Config{Issuers: []bearer.IssuerConfig{{URL: "https://sts.windows.net/" + tenant + "/"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := v.Challenge(); got != azure {
		t.Errorf("Verifier.Challenge = %q", got)
	}
	e := &bearer.Error{Kind: bearer.KindAudience}
	if got := e.Detail(); got != "Audience validation failed. Audience did not match." {
		t.Errorf("audience detail = %q", got)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	iss := []bearer.IssuerConfig{{URL: "https://a"}}
	for name, cfg := range map[string]bearer.Config{
		"no issuer":      {},
		"empty url":      {Issuers: []bearer.IssuerConfig{{}}},
		"duplicate":      {Issuers: []bearer.IssuerConfig{{URL: "https://a"}, {URL: "https://a"}}},
		"negative skew":  {Issuers: iss, ClockSkew: -time.Second},
		"unknown alg":    {Issuers: iss, Algorithms: []string{"RS1"}},
		"hmac algorithm": {Issuers: iss, Algorithms: []string{"RS256", "HS512"}},
	} {
		if _, err := bearer.New(cfg); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}
