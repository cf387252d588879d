package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/oidctest"
)

// Sign-in with an identity through the JavaScript and Python SDKs (issue 47): the Go test
// obtains the tokens — from the real provider (oidctest) or from `cerulean token` and the
// server's own development issuer — and hands them to a script (compat/js/identity.mjs,
// compat/python/identity.py) whose token credential returns them; the script drives the
// SDK over HTTPS as a Contributor (every entity operation), a Reader (writes 403
// AuthorizationPermissionMismatch) and a table-scoped Contributor (its table only).

// sdkTokens are the three principals' tokens and the tables the script uses.
type sdkTokens struct {
	contributor, reader, scoped string
	table, scopedTable          string
}

func (k sdkTokens) env(srv *server) []string {
	return []string{
		"CERULEAN_ENDPOINT=" + srv.Endpoint(srv.Default().Name),
		"CERULEAN_TOKEN_CONTRIBUTOR=" + k.contributor,
		"CERULEAN_TOKEN_READER=" + k.reader,
		"CERULEAN_TOKEN_SCOPED=" + k.scoped,
		"CERULEAN_TABLE=" + k.table,
		"CERULEAN_SCOPED_TABLE=" + k.scopedTable,
	}
}

func (k sdkTokens) all() []string { return []string{k.contributor, k.reader, k.scoped} }

// providerTokens starts a provider and a server taking its tokens with the three
// principals' assignments, and mints their tokens.
func providerTokens(t *testing.T) (*server, string, sdkTokens) {
	t.Helper()
	k := sdkTokens{table: tableName(t), scopedTable: tableName(t) + "s"}
	srv, p, accessLog := identityServer(t, `{"assignments": [
		{"principal": "contrib-oid", "principalType": "User", "role": "Storage Table Data Contributor", "scope": "/devstoreaccount1"},
		{"principal": "reader-oid", "principalType": "User", "role": "Storage Table Data Reader", "scope": "/devstoreaccount1"},
		{"principal": "scoped-oid", "principalType": "User", "role": "Storage Table Data Contributor", "scope": "/devstoreaccount1/tables/`+k.scopedTable+`"}
	]}`)
	for _, x := range []struct {
		oid string
		dst *string
	}{{"contrib-oid", &k.contributor}, {"reader-oid", &k.reader}, {"scoped-oid", &k.scoped}} {
		tok, err := p.Token(ctx(t), oidctest.TokenOptions{Subject: x.oid, Claims: map[string]any{"oid": x.oid}})
		if err != nil {
			t.Fatal(err)
		}
		*x.dst = tok
	}
	return srv, accessLog, k
}

// devTokens starts a server with --dev-issuer alone and gets the three principals' tokens
// from `cerulean token`, as a developer's shell does.
func devTokens(t *testing.T, extra ...string) (*server, string, sdkTokens) {
	t.Helper()
	accessLog := filepath.Join(t.TempDir(), "access.log")
	srv := startServer(t, withDevIssuer(), withArgs(append([]string{"--access-log", accessLog}, extra...)...))
	k := sdkTokens{table: tableName(t), scopedTable: tableName(t) + "s"}
	k.contributor = cerulanToken(t, srv, "--role", "contributor")
	k.reader = cerulanToken(t, srv, "--role", "reader", "--subject", "reader")
	k.scoped = cerulanToken(t, srv, "--role", "contributor", "--table", k.scopedTable, "--subject", "scoped")
	return srv, accessLog, k
}

// withDevIssuer passes --dev-issuer alone (which turns --tls-self-signed on).
func withDevIssuer() serverOption {
	return func(c *serverConfig) { c.tls = "dev-issuer" }
}

// cerulanToken runs `cerulean token --data <srv's> args...` and returns what it printed,
// which must be the token alone.
func cerulanToken(t *testing.T, srv *server, args ...string) string {
	t.Helper()
	status, out, errOut := runCLI(t, append([]string{"token", "--data", srv.DataDir}, args...)...)
	if status != 0 || errOut != "" || strings.Count(out, "\n") != 1 || strings.Count(out, ".") != 2 {
		t.Fatalf("cerulean token %q: status %d, stdout %q, stderr %q; want one token line", args, status, out, errOut)
	}
	return strings.TrimSpace(out)
}

// noTokenInLogs fails if the access log or the server's log holds a token's signature.
func noTokenInLogs(t *testing.T, srv *server, accessLog string, tokens []string) {
	t.Helper()
	var logged []byte
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		// The access log is written in the background: wait for the Bearer lines.
		if logged, err = os.ReadFile(accessLog); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(logged), `"auth":"Bearer"`) || time.Now().After(deadline) {
			break
		}
	}
	if !strings.Contains(string(logged), `"auth":"Bearer"`) {
		t.Fatal("the access log has no Bearer request")
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

// jsIdentity runs compat/js/identity.mjs with k's tokens against srv.
func jsIdentity(t *testing.T, srv *server, k sdkTokens) {
	t.Helper()
	root := compatRepoRoot(t)
	node, err := exec.LookPath("node")
	if err != nil {
		compatUnavailable(t, "node is not installed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "compat", "js", "node_modules", "@azure", "data-tables")); err != nil {
		compatUnavailable(t, "the JS SDK is missing (run: cd compat/js && npm ci --no-audit --no-fund): %v", err)
	}
	compatRun(t, root, "", append(k.env(srv), "NODE_EXTRA_CA_CERTS="+srv.CAFile), node, filepath.Join("compat", "js", "identity.mjs"))
}

// pythonIdentity runs compat/python/identity.py with k's tokens against srv.
func pythonIdentity(t *testing.T, srv *server, k sdkTokens) {
	t.Helper()
	root := compatRepoRoot(t)
	if out, err := exec.Command(debianPython, "-c", "import azure.data.tables").CombinedOutput(); err != nil {
		compatUnavailable(t, "azure.data.tables is not importable by %s (apt-get install -y python3-azure): %v\n%s", debianPython, err, out)
	}
	compatRun(t, root, "", append(k.env(srv), "REQUESTS_CA_BUNDLE="+srv.CAFile), debianPython, filepath.Join("compat", "python", "identity.py"))
}

// TestBearerJS: the JavaScript SDK with a token credential, tokens from a real provider.
func TestBearerJS(t *testing.T) {
	srv, accessLog, k := providerTokens(t)
	jsIdentity(t, srv, k)
	noTokenInLogs(t, srv, accessLog, k.all())
}

// TestBearerPython: the Python SDK with a token credential, tokens from a real provider.
func TestBearerPython(t *testing.T) {
	srv, accessLog, k := providerTokens(t)
	pythonIdentity(t, srv, k)
	noTokenInLogs(t, srv, accessLog, k.all())
}

// TestDevIssuerPython: `cerulean --dev-issuer` alone and `cerulean token`, end to end
// through the Python SDK: the tokens' roles and scopes decide without any assignments file.
func TestDevIssuerPython(t *testing.T) {
	srv, accessLog, k := devTokens(t)
	pythonIdentity(t, srv, k)
	noTokenInLogs(t, srv, accessLog, k.all())
	// The access log is written in the background: wait for the line.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		logged, _ := os.ReadFile(accessLog)
		if strings.Contains(string(logged), `"principal":"scoped"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the access log does not name the dev token's subject")
		}
	}
}

// TestDevIssuerJS: the same through the JavaScript SDK.
func TestDevIssuerJS(t *testing.T) {
	srv, accessLog, k := devTokens(t)
	jsIdentity(t, srv, k)
	noTokenInLogs(t, srv, accessLog, k.all())
}

// TestDevIssuerServes: the server started with --dev-issuer alone serves HTTPS (and says
// so), its discovery document and keys on its own listener, says in its banner how to get
// a token, and keeps its key across a restart, so a token minted before still works.
func TestDevIssuerServes(t *testing.T) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	// A fixed port, so the restart below serves the same issuer URL.
	srv := startServer(t, withDevIssuer(), withPort(port))
	hc := trustingHTTP(t, srv)
	issuer := srv.BaseURL() + "/.cerulean/issuer"
	resp, err := hc.Get(issuer + "/.well-known/openid-configuration")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	err = json.NewDecoder(resp.Body).Decode(&doc)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || doc.Issuer != issuer || doc.JWKSURI != issuer+"/keys" {
		t.Fatalf("discovery: %d %+v %v; want issuer %s", resp.StatusCode, doc, err, issuer)
	}
	resp, err = hc.Get(doc.JWKSURI)
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(keys), `"kty":"EC"`) || strings.Contains(string(keys), `"d":`) {
		t.Fatalf("keys: %d %s", resp.StatusCode, keys)
	}
	logs := srv.logs.Tail(1 << 20)
	for _, want := range []string{"--dev-issuer turned --tls-self-signed on", "Development issuer (--dev-issuer): " + issuer, "cerulean token --role contributor"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the start-up output does not say %q", want)
		}
	}
	fi, err := os.Stat(filepath.Join(srv.DataDir, "cerulean-dev-issuer-key.pem"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the key file: %v %v; want mode 0600", fi, err)
	}
	tok := cerulanToken(t, srv, "--role", "reader")
	get := func(tok string) int {
		t.Helper()
		status, _, _ := bearerRequest(t, hc, srv, http.MethodGet, tok, "")
		return status
	}
	if s := get(tok); s != http.StatusOK {
		t.Fatalf("a Reader's dev token: %d", s)
	}
	if err, ok := srv.terminate(30 * time.Second); !ok {
		t.Fatalf("the server did not stop: %v", err)
	}
	srv.restart(t)
	hc.CloseIdleConnections()
	if s := get(tok); s != http.StatusOK {
		t.Errorf("the dev token after a restart: %d; want the key kept", s)
	}
	if s := get(cerulanToken(t, srv, "--role", "reader")); s != http.StatusOK {
		t.Errorf("a new dev token after a restart: %d", s)
	}
}

// TestDevIssuerRefusals: --dev-issuer is refused off loopback, and beside a real provider
// (with a role assignments file) a token of that provider carrying the dev issuer's role
// claim gets nothing from it, while the dev issuer's tokens and the file's assignments
// both decide.
func TestDevIssuerRefusals(t *testing.T) {
	status, _, errOut := runCLI(t, "serve", "--dev-issuer", "--addr", "0.0.0.0:0", "--data", t.TempDir())
	if status == 0 || !strings.Contains(errOut, "--dev-issuer needs a loopback address") {
		t.Errorf("--dev-issuer on 0.0.0.0: status %d, %q", status, errOut)
	}
	srv, p, _ := identityServer(t, `{"assignments": [{"principal": "filereader", "role": "Storage Table Data Reader", "scope": "/devstoreaccount1"}]}`, "--dev-issuer")
	hc := trustingHTTP(t, srv)
	do := func(method, tok string) (int, string) {
		t.Helper()
		status, code, _ := bearerRequest(t, hc, srv, method, tok, `{"TableName":"`+tableName(t)+`"}`)
		return status, code
	}
	mint := func(o oidctest.TokenOptions) string {
		t.Helper()
		tok, err := p.Token(ctx(t), o)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	forged := mint(oidctest.TokenOptions{Subject: "mallory", Claims: map[string]any{"roles": []string{"Storage Table Data Contributor@/", "Storage Table Data Contributor@/devstoreaccount1"}}})
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		if s, code := do(m, forged); s != http.StatusForbidden || code != "AuthorizationPermissionMismatch" {
			t.Errorf("%s by another issuer's token with a role claim: %d %s; want 403 AuthorizationPermissionMismatch", m, s, code)
		}
	}
	if s, code := do(http.MethodGet, mint(oidctest.TokenOptions{Subject: "filereader"})); s != http.StatusOK {
		t.Errorf("the file's Reader beside the dev issuer: %d %s", s, code)
	}
	if s, code := do(http.MethodPost, cerulanToken(t, srv, "--role", "contributor")); s != http.StatusCreated && s != http.StatusNoContent {
		t.Errorf("a dev Contributor beside a provider and a file: %d %s", s, code)
	}
}
