package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/ceruleandb/cerulean/internal/tlsconf"
)

// HTTPS (docs/operations.md "HTTPS"): --tls-self-signed and --tls-cert/--tls-key, each SDK trusting the
// certificate its usual way (the compat suites: TestHTTPSCompat*), rotation without a
// restart, and SAS spr=https.

// certPair makes a fresh self-signed pair in its own directory (tlsconf, the code of
// --tls-self-signed) and returns its files and serial.
func certPair(t *testing.T) (cert, key string, serial *big.Int) {
	t.Helper()
	cert, key, _, err := tlsconf.SelfSigned(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return cert, key, certSerial(t, cert)
}

func certSerial(t *testing.T, file string) *big.Int {
	t.Helper()
	c, err := tls.LoadX509KeyPair(file, strings.TrimSuffix(file, tlsconf.SelfSignedCertFile)+tlsconf.SelfSignedKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return c.Leaf.SerialNumber
}

// servedSerial makes a TLS handshake with srv and returns the serial of the certificate it
// serves (not verified: rotation tests look at which one it is).
func servedSerial(t *testing.T, srv *server) *big.Int {
	t.Helper()
	c, err := tls.Dial("tcp", srv.Addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("TLS handshake with %s: %v", srv.Addr, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

// trustingClient is an SDK service client whose transport trusts only caFile.
func trustingClient(t *testing.T, srv *server, caFile string) *aztables.ServiceClient {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", caFile)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(hc.CloseIdleConnections)
	a := srv.Default()
	return newServiceClientFor(t, srv.Endpoint(a.Name), a.Name, a.Key, hc)
}

// cerulean runs the cerulean binary (a Go client: `cerulean table` uses net/http's default
// trust, the system pool that SSL_CERT_FILE replaces) and returns its output and error.
func cerulean(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(c, binaryPath, args...)
	cmd.Env = append(filterEnv(os.Environ()), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestHTTPSSelfSigned(t *testing.T) {
	srv := startServer(t, withSelfSignedTLS())
	cert := srv.CAFile
	if _, err := os.Stat(cert); err != nil {
		t.Fatalf("--tls-self-signed left no certificate in the data directory: %v", err)
	}
	out := srv.logs.Tail(64 << 10)
	want := "DefaultEndpointsProtocol=https;AccountName=" + devAccount + ";AccountKey=" + devKey + ";TableEndpoint=" + srv.Endpoint(devAccount) + ";"
	if !strings.HasPrefix(want, "DefaultEndpointsProtocol=https;") || !strings.Contains(want, "TableEndpoint=https://") || !strings.Contains(out, want) {
		t.Errorf("the start-up output does not print the https connection string %q:\n%s", want, out)
	}
	for _, line := range []string{"SSL_CERT_FILE=" + cert, "NODE_EXTRA_CA_CERTS=" + cert, "REQUESTS_CA_BUNDLE=" + cert, ".NET", "Azure CLI"} {
		if !strings.Contains(out, line) {
			t.Errorf("the start-up output does not say %q:\n%s", line, out)
		}
	}

	// Go: SSL_CERT_FILE makes a Go client trust it (here the cerulean binary's own client);
	// without it the same command fails on the certificate.
	args := []string{"table", "list", "--endpoint", srv.Endpoint(devAccount)}
	if out, err := cerulean(t, []string{"SSL_CERT_FILE=" + cert}, args...); err != nil {
		t.Errorf("cerulean table list with SSL_CERT_FILE: %v\n%s", err, out)
	}
	if out, err := cerulean(t, []string{"SSL_CERT_FILE=/dev/null"}, args...); err == nil || !strings.Contains(out, "certificate") {
		t.Errorf("cerulean table list not trusting the certificate: err %v, want a certificate error; output:\n%s", err, out)
	}

	// The SDK, trusting the file, works over the https endpoint.
	svc := trustingClient(t, srv, cert)
	c, name := newTable(t, svc)
	if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r", "V": 1}), nil); err != nil {
		t.Fatalf("AddEntity over https: %v", err)
	}

	// Plain HTTP on the HTTPS port reaches no handler: Go's server answers 400.
	resp, err := http.Get("http://" + srv.Addr + "/" + devAccount + "/Tables")
	if err != nil {
		t.Fatalf("plain HTTP to the HTTPS port: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "HTTPS") {
		t.Errorf("plain HTTP to the HTTPS port: %d %q, want 400 naming HTTPS", resp.StatusCode, body)
	}

	// A restart reuses the certificate: clients that trust it keep trusting it.
	before := servedSerial(t, srv)
	if err, _ := srv.terminate(stopTimeout); err != nil {
		t.Fatalf("stop: %v", err)
	}
	srv.restart(t)
	if after := servedSerial(t, srv); after.Cmp(before) != 0 {
		t.Fatalf("after a restart the served serial is %x, want the same certificate %x", after, before)
	}
	if got := certSerial(t, cert); got.Cmp(before) != 0 {
		t.Fatalf("the file holds serial %x, the server served %x", got, before)
	}
	if _, err := trustingClient(t, srv, cert).NewClient(name).GetEntity(ctx(t), "p", "r", nil); err != nil { // the restart chose a new port
		t.Fatalf("GetEntity over https after a restart: %v", err)
	}
}

// TestHTTPSRotation swaps the certificate files of --tls-cert/--tls-key under a running
// server: new handshakes get the new certificate, without a restart.
func TestHTTPSRotation(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	c1, k1, s1 := certPair(t)
	copyFile(t, c1, cert)
	copyFile(t, k1, key)
	srv := startServer(t, withTLSFiles(cert, key, cert))
	if got := servedSerial(t, srv); got.Cmp(s1) != 0 {
		t.Fatalf("served serial %x, want %x", got, s1)
	}
	pid := srv.pid(t)

	// The key first, as a rotation tool might: for a moment the pair does not match, and
	// the old certificate stays served.
	c2, k2, s2 := certPair(t)
	copyFile(t, k2, key)
	copyFile(t, c2, cert)
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := servedSerial(t, srv)
		if got.Cmp(s2) == 0 {
			break
		}
		if got.Cmp(s1) != 0 {
			t.Fatalf("served serial %x is neither the old %x nor the new %x", got, s1, s2)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new certificate (serial %x) was not served within 30s of the swap; still %x", s2, got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if srv.pid(t) != pid || !srv.running() {
		t.Fatal("the server restarted")
	}
	// A client trusting only the new certificate works.
	svc := trustingClient(t, srv, c2)
	if _, err := svc.NewListTablesPager(nil).NextPage(ctx(t)); err != nil {
		t.Fatalf("list tables trusting the new certificate: %v", err)
	}
	if !strings.Contains(srv.logs.Tail(64<<10), "certificate reloaded") {
		t.Errorf("the reload was not logged")
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestHTTPSSAS: over HTTPS a SAS signed spr=https (what GetAccountSASURL always signs) and
// one signed spr=https,http are accepted. (A plain-HTTP request cannot reach an HTTPS
// server — TestHTTPSSelfSigned; the refusal of spr=https over plain HTTP when the check is
// on is tested in package server, TestStrictProtocol.)
func TestHTTPSSAS(t *testing.T) {
	srv := startServer(t, withSelfSignedTLS())
	svc := trustingClient(t, srv, srv.CAFile)
	c, name := newTable(t, svc)
	if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "r"}), nil); err != nil {
		t.Fatal(err)
	}
	cred, err := aztables.NewSharedKeyCredential(devAccount, devKey)
	if err != nil {
		t.Fatal(err)
	}
	pem, _ := os.ReadFile(srv.CAFile)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(hc.CloseIdleConnections)
	exp := time.Now().Add(time.Hour)
	for _, proto := range []aztables.SASProtocol{aztables.SASProtocolHTTPS, aztables.SASProtocolHTTPSandHTTP} {
		v := aztables.SASSignatureValues{Protocol: proto, ExpiryTime: exp, Permissions: "r", TableName: name}
		qs, err := v.Sign(cred)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(qs, "spr=") {
			t.Fatalf("no spr in %s", qs)
		}
		tc := sasTableClient(t, srv.Endpoint(devAccount)+"/"+name+"?"+qs, hc)
		if _, err := tc.GetEntity(ctx(t), "p", "r", nil); err != nil {
			t.Errorf("GetEntity over https with spr=%s: %v", proto, err)
		}
	}
}

// httpsGoSDKTests are the Go SDK tests TestHTTPSGoSDK runs again over HTTPS: tables,
// entities, types, keys, batches, SAS.
var httpsGoSDKTests = []string{
	"TestTables", "TestEntities", "TestTypes", "TestKeys", "TestBatchTransactionSDK",
	"TestSASTablePermissions", "TestSASAccountPermissions", "TestSASIPAndProtocol", "TestSASStoredPolicy",
}

// TestHTTPSGoSDK runs a representative set of this package's Go SDK tests over HTTPS: this
// test binary again, with every server it starts on --tls-cert/--tls-key (a pair made here)
// and the certificate trusted the usual Go way, SSL_CERT_FILE.
func TestHTTPSGoSDK(t *testing.T) {
	if os.Getenv("CERULEAN_TEST_TLS_CERT") != "" {
		t.Skip("already running over HTTPS")
	}
	skipHTTPSSuiteOnOtherEngine(t)
	cert, key, _ := certPair(t)
	run := "^(" + strings.Join(httpsGoSDKTests, "|") + ")$"
	c, cancel := context.WithTimeout(context.Background(), compatSuiteTimeout)
	defer cancel()
	cmd := exec.CommandContext(c, os.Args[0], "-test.run", run, "-test.count", "1", "-test.v")
	cmd.Env = append(os.Environ(), "CERULEAN_TEST_BINARY="+binaryPath,
		"CERULEAN_TEST_TLS_CERT="+cert, "CERULEAN_TEST_TLS_KEY="+key, "SSL_CERT_FILE="+cert)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, "--- ") || strings.HasPrefix(line, "ok") || strings.HasPrefix(line, "FAIL") {
			t.Log(line)
		}
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("the tests over HTTPS failed: %v\n%s", err, tail(out.String(), 32<<10))
		}
		t.Fatal(err)
	}
	for _, name := range httpsGoSDKTests {
		if !strings.Contains(out.String(), "--- PASS: "+name+" ") {
			t.Errorf("%s did not pass over HTTPS (not run?)", name)
		}
	}
	if !strings.Contains(out.String(), "cerulean serving https://") {
		t.Errorf("the servers of the run did not serve HTTPS (no 'cerulean serving https://' in the output)")
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("...\n%s", s[len(s)-n:])
}
