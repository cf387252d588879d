package e2e

// Secrets and logs (issue 42 items 10 and 11): no SAS signature and no account key in any
// log line, however a client mangles its URL or headers; with --access-log -, standard
// output is JSON Lines only.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// splitServer is a cerulean process whose standard output and standard error are kept
// apart (the harness's server merges them), for tests about what goes where.
type splitServer struct {
	*server
	stdout, stderr *syncBuffer
	cmd            *exec.Cmd
	done           chan struct{}
}

// startSplitServer starts cerulean serve with one account and the extra arguments (and
// the run's engine and TLS settings), waits until it answers, and stops it on cleanup.
func startSplitServer(t *testing.T, acct account, extra ...string) *splitServer {
	t.Helper()
	dir := t.TempDir()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	s := &splitServer{
		server: &server{t: t, Port: port, Addr: fmt.Sprintf("127.0.0.1:%d", port), DataDir: dir,
			Accounts: []account{acct}, scheme: "http", logs: &syncBuffer{}},
		stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{}),
	}
	args := []string{"serve", "--addr", s.Addr, "--data", dir, "--accounts", acct.Name + ":" + acct.Key}
	if cert := os.Getenv("CERULEAN_TEST_TLS_CERT"); cert != "" {
		s.scheme, s.CAFile = "https", cert
		args = append(args, "--tls-cert", cert, "--tls-key", os.Getenv("CERULEAN_TEST_TLS_KEY"))
	}
	args = append(args, extra...)
	args = append(args, strings.Fields(os.Getenv("CERULEAN_TEST_ENGINE_ARGS"))...)
	s.cmd = exec.Command(binaryPath, args...)
	s.cmd.Env = filterEnv(os.Environ())
	s.cmd.Stdout, s.cmd.Stderr = s.stdout, s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("---- stdout ----\n%s\n---- stderr ----\n%s", s.stdout.Tail(32<<10), s.stderr.Tail(32<<10))
		}
	})
	if err := s.waitReady(s.done); err != nil {
		t.Fatalf("cerulean did not become ready: %v\n%s", err, s.stderr.Tail(8<<10))
	}
	return s
}

// stop sends SIGTERM (the access log is flushed on the way out) and waits for the exit.
func (s *splitServer) stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(stopTimeout):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// secretForms are the spellings of a secret a log could hold: as it is, percent-encoded
// once, twice and as a path, and its longest runs of letters and digits (a fragment that
// survived some other encoding).
func secretForms(secret string) []string {
	forms := []string{secret, url.QueryEscape(secret), url.QueryEscape(url.QueryEscape(secret)), url.PathEscape(secret)}
	return append(forms, regexp.MustCompile(`[A-Za-z0-9]{12,}`).FindAllString(secret, -1)...)
}

// requireNoSecret fails for every line of text that holds a form of a secret.
func requireNoSecret(t *testing.T, where, text string, secrets map[string]string) {
	t.Helper()
	for line := range strings.Lines(text) {
		for what, secret := range secrets {
			for _, f := range secretForms(secret) {
				if strings.Contains(line, f) {
					t.Errorf("%s holds the %s (%q): %s", where, what, f, strings.TrimSpace(line))
					break
				}
			}
		}
	}
}

// Hostile requests — a SAS whose '?' (and '&', '=') are percent-encoded into the path,
// once or twice, in any case; a signature in the account segment, a table name, a key, the
// client request id; an account key in a connection string, a path and a header — against
// a server with the access log on standard output and debug logging: no line of what the
// process wrote holds the signature or the account key, in any encoding.
func TestSecretsNotLogged(t *testing.T) {
	acct := account{"sec" + runID, randomKey(t)}
	srv := startSplitServer(t, acct, "--access-log", "-", "--log-level", "debug")
	svc := newServiceClient(t, srv.server)
	client, name := newTable(t, svc)
	if _, err := client.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r"}), nil); err != nil {
		t.Fatal(err)
	}
	u, err := client.GetTableSASURL(aztables.SASPermissions{Read: true, Add: true}, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, qs, _ := strings.Cut(u, "?")
	q, err := url.ParseQuery(qs)
	if err != nil || q.Get("sig") == "" {
		t.Fatalf("SAS %q: %v", qs, err)
	}
	sig := q.Get("sig")
	// The signature is valid: the SAS works as a SAS.
	r := srv.do(t, rawReq{Method: "GET", Path: "/" + acct.Name + "/" + name + "()", Query: qs, NoAuth: true})
	requireStatus(t, r, http.StatusOK, "the SAS itself")

	enc := func(s string) string { // what a client that escapes a whole URL sends
		return strings.NewReplacer("?", "%3F", "&", "%26", "=", "%3D").Replace(s)
	}
	sasEsc := qs                                        // sig escaped once, as in a URL
	sasPath := enc(sasEsc)                              // ? & = escaped: one layer
	sasTwice := strings.ReplaceAll(sasPath, "%", "%25") // two layers
	lower := strings.NewReplacer("%3F", "%3f", "%3D", "%3d", "sig", "SiG").Replace(sasPath)
	keyEsc := url.QueryEscape(acct.Key)
	a := "/" + acct.Name
	ent := func(pk string) string { return entityPath(acct.Name, name, pk, "r") }
	for _, h := range []rawReq{
		// Unauthenticated: the SAS is part of the path.
		{Method: "GET", Path: a + "/Tables%3F" + sasPath, NoAuth: true},
		{Method: "GET", Path: a + "/Tables%253F" + sasTwice, NoAuth: true},
		{Method: "GET", Path: a + "/Tables%3f" + lower, NoAuth: true},
		{Method: "GET", Path: a + "/" + name + "()%3F" + sasPath, NoAuth: true},
		{Method: "GET", Path: a + "%3F" + sasPath + "/Tables", NoAuth: true},
		{Method: "GET", Path: a + "/" + name + "%3F" + sasPath + "(PartitionKey='p',RowKey='r')", NoAuth: true},
		{Method: "GET", Path: a + "/Tables%3FAccountKey%3D" + url.QueryEscape(keyEsc), NoAuth: true},
		// Authenticated, so that they are routed and their table and keys logged.
		{Method: "GET", Path: a + "/t%3F" + sasPath + "()"},
		{Method: "GET", Path: a + "/" + url.PathEscape(acct.Key) + "()"},
		{Method: "GET", Path: ent("p&sig=" + sig)},
		{Method: "GET", Path: ent("p%26sig%3D" + url.QueryEscape(sig))},
		{Method: "GET", Path: ent("AccountKey=" + acct.Key)},
		{Method: "POST", Path: a + "/Tables", Body: []byte(`{"TableName":"x?sig=` + sig + `"}`)},
		{Method: "POST", Path: a + "/" + name, Body: marshal(t, map[string]any{"PartitionKey": "q&sig=" + sig, "RowKey": "r"})},
		{Method: "POST", Path: a + "/" + name, Body: marshal(t, map[string]any{"PartitionKey": "k " + acct.Key, "RowKey": "r"})},
		// Headers.
		{Method: "GET", Path: a + "/Tables", Header: map[string]string{"x-ms-client-request-id": "sig=" + sig}},
		{Method: "GET", Path: a + "/Tables", Header: map[string]string{"x-ms-client-request-id": "AccountName=" + acct.Name + ";AccountKey=" + acct.Key}},
		{Method: "GET", Path: a + "/Tables", Header: map[string]string{"x-ms-client-request-id": acct.Key}},
		{Method: "GET", Path: a + "/Tables", Query: qs, NoAuth: true, Header: map[string]string{"x-ms-client-request-id": url.QueryEscape(sig)}},
	} {
		r := srv.do(t, h)
		if r.Status >= 500 {
			t.Errorf("%s %s: %d %s", h.Method, h.Path, r.Status, r.Body)
		}
	}
	// A $batch whose operation names the signature in its key.
	b, bb := buildBatchBody([]egtPart{{Method: "POST", URL: srv.BaseURL() + a + "/" + name,
		Header: [][2]string{{"Content-Type", "application/json"}},
		Body:   `{"PartitionKey":"b&sig=` + sig + `","RowKey":"r"}`}})
	requireStatus(t, egtPost(t, srv.server, b, bb, nil), http.StatusAccepted, "batch")

	srv.stop()
	out, errOut := srv.stdout.Tail(16<<20), srv.stderr.Tail(16<<20)
	if !strings.Contains(errOut, "level=DEBUG msg=request") || !strings.Contains(out, `"operation":`) {
		t.Fatalf("the logs are not on: stdout %d bytes, stderr %d bytes", len(out), len(errOut))
	}
	secrets := map[string]string{"SAS signature": sig, "account key": acct.Key}
	requireNoSecret(t, "stdout (access log)", out, secrets)
	requireNoSecret(t, "stderr (request log)", errOut, secrets)
	// Redacted, not dropped: the lines still say what was asked.
	if !strings.Contains(out, "sig=REDACTED") || !strings.Contains(errOut, "sig=REDACTED") {
		t.Errorf("no redacted signature in the logs")
	}
}

// The access log on a file: its lines, and the request log, hold no secret either.
func TestSecretsNotLoggedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	acct := account{"secf" + runID, randomKey(t)}
	srv := startSplitServer(t, acct, "--access-log", path, "--log-level", "debug")
	svc := newServiceClient(t, srv.server)
	client, name := newTable(t, svc)
	u, err := client.GetTableSASURL(aztables.SASPermissions{Read: true}, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, qs, _ := strings.Cut(u, "?")
	q, _ := url.ParseQuery(qs)
	sig := q.Get("sig")
	enc := strings.NewReplacer("?", "%3F", "&", "%26", "=", "%3D").Replace(qs)
	srv.do(t, rawReq{Method: "GET", Path: "/" + acct.Name + "/Tables%3F" + enc, NoAuth: true})
	srv.do(t, rawReq{Method: "GET", Path: "/" + acct.Name + "/" + name + "%3F" + enc + "()"})
	srv.stop()
	lines, text := readAccessLog(t, path)
	if len(lines) < 3 {
		t.Fatalf("access log: %d lines", len(lines))
	}
	secrets := map[string]string{"SAS signature": sig, "account key": acct.Key}
	requireNoSecret(t, "the access log", text, secrets)
	requireNoSecret(t, "stderr", srv.stderr.Tail(16<<20), secrets)
}

// --access-log -: standard output is JSON Lines from its first line (jq reads it), the
// start-up banner goes to standard error, and no key is printed while standard output is
// a log.
func TestAccessLogStdoutIsJSONLines(t *testing.T) {
	acct := account{"jl" + runID, randomKey(t)}
	srv := startSplitServer(t, acct, "--access-log", "-")
	for range 3 {
		requireStatus(t, srv.do(t, rawReq{Method: "GET", Path: "/" + acct.Name + "/Tables"}), http.StatusOK, "query tables")
	}
	srv.stop()
	out := srv.stdout.Tail(16 << 20)
	n := 0
	sc := bufio.NewScanner(bytes.NewReader([]byte(out)))
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("stdout line %d is not JSON: %q", n+1, sc.Text())
		}
		n++
	}
	if n < 3 {
		t.Errorf("stdout holds %d access lines, want at least 3:\n%s", n, out)
	}
	errOut := srv.stderr.Tail(16 << 20)
	if !strings.Contains(errOut, "Account "+acct.Name) {
		t.Errorf("the banner is not on stderr:\n%s", errOut)
	}
	requireNoSecret(t, "the output", out+errOut, map[string]string{"account key": acct.Key})
}
