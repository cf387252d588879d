package e2e

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// debianPython is the interpreter the Debian package python3-azure installs
// azure-data-tables for. The python3 on PATH may be another one (pyenv, venv) without it.
const debianPython = "/usr/bin/python3"

// compatSuiteTimeout bounds one run of the Python or Azure CLI compatibility suite.
const compatSuiteTimeout = 10 * time.Minute

// compatUnavailable skips the test because a client is missing, except under CI=true, where a
// missing client is a failure.
func compatUnavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true: "+format, args...)
	}
	t.Skipf(format, args...)
}

// compatRepoRoot is the repository root (the e2e package runs with cwd = e2e/).
func compatRepoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatalf("repo root: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repo root %s has no go.mod: %v", root, err)
	}
	return root
}

// compatConnectionString is the explicit connection string of srv's default account.
func compatConnectionString(srv *server) string {
	a := srv.Default()
	return "DefaultEndpointsProtocol=" + srv.scheme + ";AccountName=" + a.Name + ";AccountKey=" + a.Key +
		";TableEndpoint=" + srv.Endpoint(a.Name) + ";"
}

// compatServer starts the server a suite runs against: plain HTTP, or with https
// --tls-self-signed, with trustVar=<its certificate> in the returned environment of the
// client — the one mechanism that client documents for trusting a certificate.
func compatServer(t *testing.T, https bool, trustVar string) (*server, []string) {
	t.Helper()
	if !https {
		return startServer(t), nil
	}
	skipHTTPSSuiteOnOtherEngine(t)
	srv := startServer(t, withSelfSignedTLS())
	if !strings.HasPrefix(compatConnectionString(srv), "DefaultEndpointsProtocol=https;") {
		t.Fatalf("connection string %q is not https", compatConnectionString(srv))
	}
	return srv, []string{trustVar + "=" + srv.CAFile}
}

// skipHTTPSSuiteOnOtherEngine skips a whole suite over HTTPS when the run selects another
// engine (CERULEAN_TEST_ENGINE_ARGS, scripts/test's postgres pass): TLS is the same whatever
// the engine, and the pebble pass ran the suite already; the shorter HTTPS tests still run.
func skipHTTPSSuiteOnOtherEngine(t *testing.T) {
	t.Helper()
	if os.Getenv("CERULEAN_TEST_ENGINE_ARGS") != "" {
		t.Skip("the suite over HTTPS runs in the pass on the default engine")
	}
}

// requireUntrusted runs a small client command (name args, cwd dir) against srv without any
// trust variable and requires it to fail on the certificate: the suite that then passes with
// the variable set passes because of it (not because the client skips verification).
func requireUntrusted(t *testing.T, srv *server, dir, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "NODE_TLS_REJECT_UNAUTHORIZED":
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, "CERULEAN_CONNECTION_STRING="+compatConnectionString(srv))
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("%s connected to the self-signed server without trusting its certificate:\n%s", name, out)
	}
	if !strings.Contains(strings.ToLower(string(out)), "certificate") {
		t.Fatalf("%s failed without the trust variable, but not on the certificate: %v\n%s", name, err, out)
	}
	t.Logf("without the trust variable %s fails on the certificate, as it should", name)
}

// compatRun runs a client suite with cwd = root and CERULEAN_CONNECTION_STRING set, logs its
// output line by line, and fails the test on a non-zero exit or timeout.
func compatRun(t *testing.T, root, cs string, env []string, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), compatSuiteTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = root
	cmd.Env = append(append(os.Environ(), env...), "CERULEAN_CONNECTION_STRING="+cs, "NO_COLOR=1")
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = pw
	cmd.WaitDelay = 10 * time.Second

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			t.Log(sc.Text())
		}
		_, _ = io.Copy(io.Discard, pr)
	}()

	cmdline := name + " " + strings.Join(args, " ")
	t.Logf("running %s (cwd %s)", cmdline, root)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		pw.Close()
		wg.Wait()
		t.Fatalf("starting %s: %v", name, err)
	}
	runErr := cmd.Wait()
	pw.Close()
	wg.Wait()
	took := time.Since(start).Round(time.Millisecond)
	if ctx.Err() != nil {
		t.Fatalf("%s did not finish within %v", cmdline, compatSuiteTimeout)
	}
	if runErr != nil {
		t.Fatalf("%s failed after %v: %v (the failing checks are in the log above)", cmdline, took, runErr)
	}
	t.Logf("%s passed in %v", cmdline, took)
}

// TestCompatPython runs the Python SDK compatibility suite (compat/python/test_tables.py,
// azure-data-tables from the Debian package python3-azure, run by Debian's /usr/bin/python3)
// against a cerulean server started by the harness, so it runs on whichever engine
// CERULEAN_TEST_ENGINE_ARGS selects.
//
// Install: apt-get install -y python3-azure. Without it the test skips, except under CI=true.
func TestCompatPython(t *testing.T) { compatPython(t, false) }

// TestHTTPSCompatPython runs the same suite over HTTPS (--tls-self-signed), the
// certificate trusted the way requests-based clients trust one: REQUESTS_CA_BUNDLE.
func TestHTTPSCompatPython(t *testing.T) { compatPython(t, true) }

func compatPython(t *testing.T, https bool) {
	root := compatRepoRoot(t)
	if _, err := os.Stat(debianPython); err != nil {
		compatUnavailable(t, "%s is missing (apt-get install -y python3 python3-azure): %v", debianPython, err)
	}
	if out, err := exec.Command(debianPython, "-c",
		"import azure.data.tables; print(azure.data.tables.__version__)").CombinedOutput(); err != nil {
		compatUnavailable(t, "azure.data.tables is not importable by %s (apt-get install -y python3-azure): %v\n%s",
			debianPython, err, out)
	} else {
		t.Logf("azure-data-tables %s", strings.TrimSpace(string(out)))
	}

	srv, env := compatServer(t, https, "REQUESTS_CA_BUNDLE")
	if https {
		requireUntrusted(t, srv, root, debianPython, "-c", `import os
from azure.data.tables import TableServiceClient
c = TableServiceClient.from_connection_string(os.environ["CERULEAN_CONNECTION_STRING"], retry_total=0)
list(c.list_tables())`)
	}
	compatRun(t, root, compatConnectionString(srv), env, debianPython,
		"-W", "ignore::ResourceWarning", "-m", "unittest", "-v", "compat/python/test_tables.py")
}

// TestCompatPythonChanges runs the suite of the Python change feed helper
// (compat/python/changes.py, test_changes.py) against a server started by the harness; it
// skips like TestCompatPython without the SDK.
func TestCompatPythonChanges(t *testing.T) {
	root := compatRepoRoot(t)
	if _, err := os.Stat(debianPython); err != nil {
		compatUnavailable(t, "%s is missing (apt-get install -y python3 python3-azure): %v", debianPython, err)
	}
	if out, err := exec.Command(debianPython, "-c", "import azure.data.tables").CombinedOutput(); err != nil {
		compatUnavailable(t, "azure.data.tables is not importable by %s (apt-get install -y python3-azure): %v\n%s", debianPython, err, out)
	}
	srv := startServer(t)
	compatRun(t, root, compatConnectionString(srv), nil, debianPython,
		"-W", "ignore::ResourceWarning", "-m", "unittest", "-v", "compat/python/test_changes.py")
}
