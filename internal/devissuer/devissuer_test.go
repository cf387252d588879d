package devissuer_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/bearer"
	"github.com/ceruleandb/cerulean/internal/devissuer"
	"github.com/ceruleandb/cerulean/internal/rbac"
)

// TestKeyKeptAcrossStarts: the first Open creates the key, readable by its owner only;
// later ones reuse it (same kid), and record the address they serve for Load.
func TestKeyKeptAcrossStarts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if _, err := devissuer.Load(dir); err == nil || !strings.Contains(err.Error(), "start the server with --dev-issuer") {
		t.Fatalf("Load before any start: %v", err)
	}
	a, created, err := devissuer.Open(dir, "https://127.0.0.1:10002")
	if err != nil || !created {
		t.Fatalf("first Open: created %v, %v", created, err)
	}
	if a.URL() != "https://127.0.0.1:10002/.cerulean/issuer" {
		t.Errorf("issuer %s", a.URL())
	}
	fi, err := os.Stat(filepath.Join(dir, devissuer.KeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v; want mode 0600", fi.Mode(), err)
	}
	b, created, err := devissuer.Open(dir, "https://127.0.0.1:10003/")
	if err != nil || created {
		t.Fatalf("second Open: created %v, %v", created, err)
	}
	if a.Keys()[0].KeyID != b.Keys()[0].KeyID {
		t.Errorf("the key changed across starts: kid %s, then %s", a.Keys()[0].KeyID, b.Keys()[0].KeyID)
	}
	l, err := devissuer.Load(dir)
	if err != nil || l.URL() != "https://127.0.0.1:10003/.cerulean/issuer" || l.Keys()[0].KeyID != a.Keys()[0].KeyID {
		t.Fatalf("Load: %v, %v; want the last start's issuer and the same key", l, err)
	}
	if _, _, err := devissuer.Open(t.TempDir(), "http://127.0.0.1:10002"); err == nil {
		t.Error("Open over plain HTTP")
	}
	if err := os.WriteFile(filepath.Join(dir, devissuer.KeyFile), []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := devissuer.Open(dir, "https://127.0.0.1:10002"); err == nil || !strings.Contains(err.Error(), "remove it") {
		t.Errorf("Open with a broken key file: %v", err)
	}
}

// TestTokensVerify: a minted token verifies both by discovery (the served document and
// JWKS, read by the same bearer.Verifier any issuer gets) and by the held key, carries its
// role and scope, and the claim authorizer decides by them; a lifetime out of bounds is
// refused.
func TestTokensVerify(t *testing.T) {
	var iss *devissuer.Issuer
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		iss.Mount(http.NotFoundHandler()).ServeHTTP(w, r)
	}))
	defer srv.Close()
	var err error
	if iss, _, err = devissuer.Open(t.TempDir(), srv.URL); err != nil {
		t.Fatal(err)
	}
	scope, err := rbac.ParseScope("/devstoreaccount1/tables/orders")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := iss.Token(devissuer.TokenOptions{Role: rbac.BuiltinRole("Storage Table Data Reader"), Scope: scope, Subject: "ada"})
	if err != nil {
		t.Fatal(err)
	}
	discovered, err := bearer.New(bearer.Config{Issuers: []bearer.IssuerConfig{{URL: iss.URL()}}, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	held, err := bearer.New(bearer.Config{Issuers: []bearer.IssuerConfig{{URL: iss.URL(), Keys: iss.Keys()}}})
	if err != nil {
		t.Fatal(err)
	}
	claims, err := rbac.NewClaimAuthorizer(iss.URL())
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]*bearer.Verifier{"by discovery": discovered, "by the held key": held} {
		p, err := v.Verify(context.Background(), tok, "devstoreaccount1")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p.ObjectID != "ada" || len(p.Roles) != 1 || p.Roles[0] != "Storage Table Data Reader@/devstoreaccount1/tables/orders" {
			t.Errorf("%s: principal %+v", name, p)
		}
		if !claims.Allowed(p, "devstoreaccount1", "orders", auth.OpQueryEntities) ||
			claims.Allowed(p, "devstoreaccount1", "orders", auth.OpInsert) ||
			claims.Allowed(p, "devstoreaccount1", "other", auth.OpQueryEntities) {
			t.Errorf("%s: the token's role and scope decided wrong", name)
		}
	}
	// The token's claims, as any JWT reader sees them.
	seg := strings.Split(tok, ".")
	var hdr, body map[string]any
	for i, dst := range []*map[string]any{&hdr, &body} {
		b, err := base64.RawURLEncoding.DecodeString(seg[i])
		if err != nil || json.Unmarshal(b, dst) != nil {
			t.Fatalf("segment %d: %v", i, err)
		}
	}
	if hdr["alg"] != "ES256" || hdr["kid"] != iss.Keys()[0].KeyID || !strings.Contains(string(mustJSON(body["aud"])), "https://storage.azure.com") {
		t.Errorf("header %v, claims %v", hdr, body)
	}
	if exp, iat := body["exp"].(float64), body["iat"].(float64); exp-iat != time.Hour.Seconds() {
		t.Errorf("lifetime %v s, want an hour by default", exp-iat)
	}
	for _, d := range []time.Duration{-time.Minute, 25 * time.Hour} {
		if _, err := iss.Token(devissuer.TokenOptions{Role: rbac.BuiltinRole("Reader"), Lifetime: d}); err == nil {
			t.Errorf("lifetime %v taken", d)
		}
	}
	if _, err := iss.Token(devissuer.TokenOptions{}); err == nil {
		t.Error("a token without a role")
	}
}

func mustJSON(v any) []byte { b, _ := json.Marshal(v); return b }

// TestMount: the issuer answers its own paths (GET and HEAD), 404 for others below it,
// and hands every other path — an account's, one merely starting alike — to the API.
func TestMount(t *testing.T) {
	iss, _, err := devissuer.Open(t.TempDir(), "https://127.0.0.1:10002")
	if err != nil {
		t.Fatal(err)
	}
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := iss.Mount(api)
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{"GET", devissuer.DiscoveryPath, 200},
		{"HEAD", devissuer.KeysPath, 200},
		{"GET", devissuer.KeysPath, 200},
		{"POST", devissuer.KeysPath, 405},
		{"GET", devissuer.Path, 404},
		{"GET", devissuer.Path + "/token", 404},
		{"GET", devissuer.Path + "x/keys", http.StatusTeapot},
		{"GET", "/devstoreaccount1/Tables", http.StatusTeapot},
		{"GET", "/.cerulean", http.StatusTeapot},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if rec.Code != tc.status {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, rec.Code, tc.status)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", devissuer.DiscoveryPath, nil))
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil || doc.Issuer != iss.URL() || doc.JWKSURI != "https://127.0.0.1:10002"+devissuer.KeysPath {
		t.Errorf("discovery %s: %+v, %v", rec.Body, doc, err)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", devissuer.KeysPath, nil))
	if strings.Contains(rec.Body.String(), `"d"`) {
		t.Errorf("the JWKS holds a private part: %s", rec.Body)
	}
}
