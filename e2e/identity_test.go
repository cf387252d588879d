package e2e

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/ceruleandb/cerulean/internal/oidctest"
)

// Sign-in with an identity (issue 47, docs/identity.md): a real OpenID provider on
// loopback (zitadel/oidc's op, internal/oidctest) issues tokens by the client-credentials
// grant; the server verifies them by discovery and JWKS and authorizes each operation by
// the role assignments file.

// providerToken is an azcore.TokenCredential that gets its tokens from the test provider
// for one principal, as DefaultAzureCredential gets them from Entra ID.
type providerToken struct {
	p      *oidctest.Provider
	oid    string
	tokens *[]string // every token handed out, for the log checks
}

func (c providerToken) GetToken(ctx context.Context, opts policy.TokenRequestOptions) (azcore.AccessToken, error) {
	if len(opts.Scopes) != 1 || opts.Scopes[0] != "https://storage.azure.com/.default" {
		return azcore.AccessToken{}, fmt.Errorf("scopes %q, want the storage resource's", opts.Scopes)
	}
	tok, err := c.p.Token(ctx, oidctest.TokenOptions{Subject: c.oid, Claims: map[string]any{"oid": c.oid}})
	if err != nil {
		return azcore.AccessToken{}, err
	}
	*c.tokens = append(*c.tokens, tok)
	return azcore.AccessToken{Token: tok, ExpiresOn: time.Now().Add(time.Hour)}, nil
}

// identityServer starts a provider and an HTTPS server taking its tokens, with role
// assignments (as JSON) in a file; extra are more flags.
func identityServer(t *testing.T, assignments string, extra ...string) (*server, *oidctest.Provider, string) {
	t.Helper()
	p, err := oidctest.Start(oidctest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	dir := t.TempDir()
	ca, err := oidctest.CertPEM()
	if err != nil {
		t.Fatal(err)
	}
	caFile, roles, accessLog := filepath.Join(dir, "provider-ca.pem"), filepath.Join(dir, "roles.json"), filepath.Join(dir, "access.log")
	if err := os.WriteFile(caFile, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(roles, []byte(assignments), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--oidc-issuer", p.Issuer(), "--role-assignments", roles, "--access-log", accessLog}, extra...)
	// The server reaches the provider over TLS, trusting its certificate.
	srv := startServer(t, withSelfSignedTLS(), withArgs(args...), withChildEnv("SSL_CERT_FILE="+caFile))
	return srv, p, accessLog
}

// tokenClient is an SDK service client of srv's default account authenticated by cred.
func tokenClient(t *testing.T, srv *server, cred azcore.TokenCredential) *aztables.ServiceClient {
	t.Helper()
	c, err := aztables.NewServiceClient(srv.Endpoint(srv.Default().Name), cred, clientOptions(trustingHTTP(t, srv)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// wantCode fails unless err is an answer with status and code.
func wantCode(t *testing.T, what string, err error, status int, code string) {
	t.Helper()
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.StatusCode != status || re.ErrorCode != code {
		t.Errorf("%s: %v; want %d %s", what, err, status, code)
	}
}

// TestBearerGoSDK: through the Go SDK with a token credential, a Contributor does every
// entity operation (and the table ones), a Reader only reads (its writes 403
// AuthorizationPermissionMismatch), a table-scoped assignment reaches only its table;
// the access log names the principals and no log holds a token.
func TestBearerGoSDK(t *testing.T) {
	scoped := tableName(t) + "s"
	srv, p, accessLog := identityServer(t, `{"assignments": [
		{"principal": "contrib-oid", "principalType": "User", "role": "Storage Table Data Contributor", "scope": "/devstoreaccount1"},
		{"principal": "reader-oid", "principalType": "User", "role": "Storage Table Data Reader", "scope": "/devstoreaccount1"},
		{"principal": "scoped-oid", "principalType": "User", "role": "Storage Table Data Contributor", "scope": "/devstoreaccount1/tables/`+scoped+`"}
	]}`)
	var tokens []string
	contrib := tokenClient(t, srv, providerToken{p, "contrib-oid", &tokens})
	reader := tokenClient(t, srv, providerToken{p, "reader-oid", &tokens})
	scopedSvc := tokenClient(t, srv, providerToken{p, "scoped-oid", &tokens})

	// The Contributor: tables and every entity operation.
	name := tableName(t)
	if _, err := contrib.CreateTable(ctx(t), name, nil); err != nil {
		t.Fatalf("Contributor CreateTable: %v", err)
	}
	if _, err := contrib.CreateTable(ctx(t), scoped, nil); err != nil {
		t.Fatalf("Contributor CreateTable: %v", err)
	}
	c := contrib.NewClient(name)
	ent := func(rk string, n int) []byte {
		return marshal(t, map[string]any{"PartitionKey": "p", "RowKey": rk, "N": n})
	}
	steps := []struct {
		what string
		do   func() error
	}{
		{"AddEntity", func() error { _, err := c.AddEntity(ctx(t), ent("a", 1), nil); return err }},
		{"GetEntity", func() error { _, err := c.GetEntity(ctx(t), "p", "a", nil); return err }},
		{"UpdateEntity (replace)", func() error {
			_, err := c.UpdateEntity(ctx(t), ent("a", 2), &aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeReplace})
			return err
		}},
		{"UpdateEntity (merge)", func() error { _, err := c.UpdateEntity(ctx(t), ent("a", 3), nil); return err }},
		{"UpsertEntity (merge)", func() error { _, err := c.UpsertEntity(ctx(t), ent("b", 1), nil); return err }},
		{"UpsertEntity (replace)", func() error {
			_, err := c.UpsertEntity(ctx(t), ent("c", 1), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
			return err
		}},
		{"ListEntities", func() error { _, err := c.NewListEntitiesPager(nil).NextPage(ctx(t)); return err }},
		{"SubmitTransaction", func() error {
			_, err := c.SubmitTransaction(ctx(t), []aztables.TransactionAction{
				{ActionType: aztables.TransactionTypeAdd, Entity: ent("d", 1)},
				{ActionType: aztables.TransactionTypeDelete, Entity: ent("c", 1)},
			}, nil)
			return err
		}},
		{"DeleteEntity", func() error { _, err := c.DeleteEntity(ctx(t), "p", "b", nil); return err }},
		{"ListTables", func() error { _, err := contrib.NewListTablesPager(nil).NextPage(ctx(t)); return err }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Errorf("Contributor %s: %v", s.what, err)
		}
	}

	// The Reader reads; every write is 403, and writes nothing.
	rc := reader.NewClient(name)
	if _, err := rc.GetEntity(ctx(t), "p", "a", nil); err != nil {
		t.Errorf("Reader GetEntity: %v", err)
	}
	if _, err := rc.NewListEntitiesPager(nil).NextPage(ctx(t)); err != nil {
		t.Errorf("Reader ListEntities: %v", err)
	}
	if _, err := reader.NewListTablesPager(nil).NextPage(ctx(t)); err != nil {
		t.Errorf("Reader ListTables: %v", err)
	}
	const denied = "AuthorizationPermissionMismatch"
	_, err := rc.AddEntity(ctx(t), ent("r", 1), nil)
	wantCode(t, "Reader AddEntity", err, http.StatusForbidden, denied)
	_, err = rc.UpsertEntity(ctx(t), ent("a", 9), nil)
	wantCode(t, "Reader UpsertEntity", err, http.StatusForbidden, denied)
	_, err = rc.DeleteEntity(ctx(t), "p", "a", nil)
	wantCode(t, "Reader DeleteEntity", err, http.StatusForbidden, denied)
	_, err = reader.CreateTable(ctx(t), tableName(t)+"r", nil)
	wantCode(t, "Reader CreateTable", err, http.StatusForbidden, denied)
	_, err = rc.SubmitTransaction(ctx(t), []aztables.TransactionAction{{ActionType: aztables.TransactionTypeAdd, Entity: ent("r", 1)}}, nil)
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.ErrorCode != denied {
		t.Errorf("Reader SubmitTransaction: %v; want %s", err, denied)
	}
	if got, err := c.GetEntity(ctx(t), "p", "a", nil); err != nil || !strings.Contains(string(got.Value), `"N":3`) {
		t.Errorf("after the Reader's writes: %s, %v; want N 3", got.Value, err)
	}

	// A table-scoped assignment reaches its table only.
	if _, err := scopedSvc.NewClient(scoped).AddEntity(ctx(t), ent("s", 1), nil); err != nil {
		t.Errorf("scoped AddEntity on its table: %v", err)
	}
	_, err = scopedSvc.NewClient(name).GetEntity(ctx(t), "p", "a", nil)
	wantCode(t, "scoped GetEntity on another table", err, http.StatusForbidden, denied)

	// The access log names the principals (its lines are written in the background, so
	// wait for them); no log holds a token.
	var logged []byte
	for deadline := time.Now().Add(10 * time.Second); ; {
		if logged, err = os.ReadFile(accessLog); err != nil {
			t.Fatal(err)
		}
		missing := ""
		for _, want := range []string{`"principal":"contrib-oid"`, `"principal":"reader-oid"`, `"principal":"scoped-oid"`, `"auth":"Bearer"`} {
			if !strings.Contains(string(logged), want) {
				missing = want
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the access log has no %s", missing)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(tokens) == 0 {
		t.Fatal("no token was handed out")
	}
	for _, tok := range tokens {
		sig := tok[strings.LastIndexByte(tok, '.')+1:]
		for what, text := range map[string]string{"access log": string(logged), "server log": srv.logs.Tail(1 << 30)} {
			if strings.Contains(text, sig) {
				t.Errorf("the %s holds a token's signature", what)
			}
		}
	}
}

// TestBearerTokensRefused: tokens that do not verify are 401 InvalidAuthenticationInfo with a
// WWW-Authenticate challenge (expired, not yet valid, another audience, another provider,
// alg none, HS256 signed with the provider's public key, a tampered payload, an unknown
// kid), and no assignment is 403. (A key rotation at the provider is followed within the
// verifier's refetch interval, a minute: internal/bearer's TestKeyRotation moves its clock.)
func TestBearerTokensRefused(t *testing.T) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	debug := fmt.Sprintf("127.0.0.1:%d", port)
	srv, p, accessLog := identityServer(t, `{"assignments": [{"principal": "someone", "role": "Storage Table Data Reader", "scope": "/"}]}`,
		"--debug-addr", debug)
	other, err := oidctest.Start(oidctest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	hc := trustingHTTP(t, srv)
	get := func(tok string) (int, string, string) {
		t.Helper()
		return bearerRequest(t, hc, srv, http.MethodGet, tok, "")
	}
	mint := func(p *oidctest.Provider, o oidctest.TokenOptions) string {
		t.Helper()
		tok, err := p.Token(ctx(t), o)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	for _, tc := range []struct {
		what string
		tok  string
	}{
		{"expired", mint(p, oidctest.TokenOptions{Subject: "someone", Lifetime: -time.Hour})},
		{"not yet valid", mint(p, oidctest.TokenOptions{Subject: "someone", NotBefore: time.Hour})},
		{"another audience", mint(p, oidctest.TokenOptions{Subject: "someone", Audience: []string{"https://vault.azure.net"}})},
		{"another provider", mint(other, oidctest.TokenOptions{Subject: "someone"})},
		{"not a token", "abc.def.ghi"},
		{"alg none", forge(t, mint(p, oidctest.TokenOptions{Subject: "someone"}), `{"alg":"none","typ":"JWT"}`, "", true)},
		{"HS256 with the provider's public key", hs256WithPublicKey(t, p, mint(p, oidctest.TokenOptions{Subject: "someone"}))},
		{"tampered payload", forge(t, mint(p, oidctest.TokenOptions{Subject: "someone"}), "", `"sub":"admin"`, false)},
		{"unknown kid", forge(t, mint(p, oidctest.TokenOptions{Subject: "someone"}), `{"alg":"RS256","kid":"no-such-key","typ":"JWT"}`, "", false)},
	} {
		status, code, challenge := get(tc.tok)
		if status != http.StatusUnauthorized || code != "InvalidAuthenticationInfo" || !strings.HasPrefix(challenge, "Bearer authorization_uri=") {
			t.Errorf("%s: %d %s, WWW-Authenticate %q; want 401 InvalidAuthenticationInfo with a challenge", tc.what, status, code, challenge)
		}
	}
	if status, code, _ := get(mint(p, oidctest.TokenOptions{Subject: "someone"})); status != http.StatusOK {
		t.Errorf("a Reader's listing: %d %s", status, code)
	}
	if status, code, _ := get(mint(p, oidctest.TokenOptions{Subject: "nobody"})); status != http.StatusForbidden || code != "AuthorizationPermissionMismatch" {
		t.Errorf("a principal without assignments: %d %s; want 403 AuthorizationPermissionMismatch", status, code)
	}

	// The metrics: the principals' requests, the refusals by reason, the assignments.
	metric := func(name string) string {
		t.Helper()
		_, _, body := getDebug(t, debug, "/metrics")
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, name+" ") {
				return strings.TrimPrefix(line, name+" ")
			}
		}
		return ""
	}
	for name, want := range map[string]string{
		`cerulean_principal_requests_total{principal="someone",status_class="2xx"}`: "1",
		`cerulean_principal_requests_total{principal="nobody",status_class="4xx"}`:  "1",
		`cerulean_auth_failures_total{reason="token"}`:                              "9",
		`cerulean_auth_failures_total{reason="role"}`:                               "1",
		`cerulean_role_assignments`:                                                 "1",
		`cerulean_role_assignments_refused`:                                         "0",
	} {
		if got := metric(name); got != want {
			t.Errorf("%s = %q, want %s", name, got, want)
		}
	}
	// A broken edit of the assignments is refused: the ones before it stay in force.
	roles := filepath.Join(filepath.Dir(accessLog), "roles.json")
	if err := os.WriteFile(roles, []byte(`{"assignments": [`), 0o600); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); metric("cerulean_role_assignments_refused") != "1"; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a broken assignments file is not reported in cerulean_role_assignments_refused")
		}
	}
	if status, code, _ := get(mint(p, oidctest.TokenOptions{Subject: "someone"})); status != http.StatusOK {
		t.Errorf("a Reader's listing after a broken edit: %d %s; want the assignments before it in force", status, code)
	}
}

// TestSharedKeyOffSDK: an account with --shared-key-off refuses the SDK's shared key and
// SAS clients (403 KeyBasedAuthenticationNotPermitted) and serves its token credential.
func TestSharedKeyOffSDK(t *testing.T) {
	srv, p, _ := identityServer(t, `{"assignments": [{"principal": "contrib-oid", "role": "Storage Table Data Contributor", "scope": "/devstoreaccount1"}]}`,
		"--shared-key-off", devAccount)
	var tokens []string
	svc := tokenClient(t, srv, providerToken{p, "contrib-oid", &tokens})
	name := tableName(t)
	if _, err := svc.CreateTable(ctx(t), name, nil); err != nil {
		t.Fatalf("a token, shared key off: %v", err)
	}
	keyed := trustingClient(t, srv, srv.CAFile)
	_, err := keyed.NewListTablesPager(nil).NextPage(ctx(t))
	wantCode(t, "a shared key, shared key off", err, http.StatusForbidden, "KeyBasedAuthenticationNotPermitted")
	// A SAS signed with the account's key (the SDK builds the URL; its query is the SAS).
	u, err := keyed.NewClient(name).GetTableSASURL(aztables.SASPermissions{Read: true}, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, qs, _ := strings.Cut(u, "?")
	sasClient, err := aztables.NewClientWithNoCredential(srv.Endpoint(devAccount)+"/"+name+"?"+qs, clientOptions(trustingHTTP(t, srv)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = sasClient.NewListEntitiesPager(nil).NextPage(ctx(t))
	wantCode(t, "a SAS, shared key off", err, http.StatusForbidden, "KeyBasedAuthenticationNotPermitted")
}

// trustingHTTP is an HTTP client trusting srv's certificate.
func trustingHTTP(t *testing.T, srv *server) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(srv.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(hc.CloseIdleConnections)
	return hc
}

// bearerRequest sends method to srv's table listing (/Tables) of its default account
// with a bearer token (body, if any, as JSON: a Create Table), through hc, and returns the
// answer's status, error code and WWW-Authenticate challenge.
func bearerRequest(t *testing.T, hc *http.Client, srv *server, method, tok, body string) (int, string, string) {
	t.Helper()
	r, err := http.NewRequest(method, srv.Endpoint(srv.Default().Name)+"/Tables", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Authorization", "Bearer "+tok)
	r.Header.Set("x-ms-version", "2020-12-06")
	r.Header.Set("Accept", "application/json;odata=nometadata")
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("x-ms-error-code"), resp.Header.Get("WWW-Authenticate")
}

// forge rewrites a genuine token: its header replaced by header (if not ""), its payload
// with the claim edit applied (a "name":value pair set in place of the original's), and its
// signature dropped when noSig.
func forge(t *testing.T, tok, header, claim string, noSig bool) string {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWS: %d parts", len(parts))
	}
	if header != "" {
		parts[0] = base64.RawURLEncoding.EncodeToString([]byte(header))
	}
	if claim != "" {
		payload, err := base64.RawURLEncoding.DecodeString(parts[1])
		if err != nil {
			t.Fatal(err)
		}
		name, _, _ := strings.Cut(claim, ":")
		re := regexp.MustCompile(regexp.QuoteMeta(name) + `:"[^"]*"`)
		if !re.Match(payload) {
			t.Fatalf("the token has no %s claim", name)
		}
		parts[1] = base64.RawURLEncoding.EncodeToString(re.ReplaceAll(payload, []byte(claim)))
	}
	if noSig {
		parts[2] = ""
	}
	return strings.Join(parts, ".")
}

// hs256WithPublicKey re-signs tok's payload with HS256, the provider's public key (its
// JWKS's first key, as PEM) as the HMAC secret: the key-confusion attack.
func hs256WithPublicKey(t *testing.T, p *oidctest.Provider, tok string) string {
	t.Helper()
	hc, err := oidctest.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(p.Issuer() + "/keys")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var set jose.JSONWebKeySet
	if err := json.NewDecoder(resp.Body).Decode(&set); err != nil || len(set.Keys) == 0 {
		t.Fatalf("the provider's keys: %v", err)
	}
	der, err := x509.MarshalPKIXPublicKey(set.Keys[0].Key)
	if err != nil {
		t.Fatal(err)
	}
	secret := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	head := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","kid":"` + set.Keys[0].KeyID + `","typ":"JWT"}`))
	signing := head + "." + strings.Split(tok, ".")[1]
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(signing))
	return signing + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}
