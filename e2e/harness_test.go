package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/tlsconf"
)

const (
	devAccount = "devstoreaccount1"
	devKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

	readyTimeout = 10 * time.Second
	stopTimeout  = 10 * time.Second
)

// binaryPath is the cerulean binary every test starts; set by TestMain.
var binaryPath string

// runID makes table and account names unique per test-binary run.
var runID = func() string {
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b[:])
}()

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if os.Getenv("CERULEAN_TEST_HTTPS") == "1" && os.Getenv("CERULEAN_TEST_TLS_CERT") == "" {
		dir, err := wholeRunOverHTTPS()
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e: CERULEAN_TEST_HTTPS:", err)
			return 1
		}
		defer os.RemoveAll(dir)
	}
	if p := os.Getenv("CERULEAN_TEST_BINARY"); p != "" {
		binaryPath = p
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "cerulean-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binaryPath = filepath.Join(dir, "cerulean")
	cmd := exec.Command("go", "build", "-o", binaryPath, "github.com/ceruleandb/cerulean/cmd/cerulean")
	out, err := cmd.CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: building cerulean failed: %v\n%s\n", err, out)
		return 1
	}
	return m.Run()
}

// wholeRunOverHTTPS makes the whole run serve HTTPS (CERULEAN_TEST_HTTPS=1, scripts/test's
// postgres pass): a self-signed pair in a new directory, which every server of the run
// serves (CERULEAN_TEST_TLS_CERT/KEY) and every Go client trusts the usual Go way
// (SSL_CERT_FILE, read when the first TLS connection is verified — after this), as do the
// JavaScript SDK (NODE_EXTRA_CA_CERTS) and the Python SDK and Azure CLI (REQUESTS_CA_BUNDLE)
// that the compatibility suites run. It returns the directory, for the caller to remove.
func wholeRunOverHTTPS() (string, error) {
	dir, err := os.MkdirTemp("", "cerulean-e2e-tls-")
	if err != nil {
		return "", err
	}
	cert, key, _, err := tlsconf.SelfSigned(dir)
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	for k, v := range map[string]string{"CERULEAN_TEST_TLS_CERT": cert, "CERULEAN_TEST_TLS_KEY": key,
		"SSL_CERT_FILE": cert, "NODE_EXTRA_CA_CERTS": cert, "REQUESTS_CA_BUNDLE": cert} {
		os.Setenv(k, v)
	}
	return dir, nil
}

// account is one storage account a server serves.
type account struct {
	Name string
	Key  string // base64
}

// server is one running (or stopped) cerulean child process.
type server struct {
	t        testing.TB
	Addr     string // 127.0.0.1:PORT
	Port     int
	DataDir  string
	Accounts []account
	args     []string
	env      []string
	// fixedPort, when not 0, is the one port start uses (withPort).
	fixedPort int
	// scheme is "https" when the server serves TLS (withTLS, or the whole run under
	// CERULEAN_TEST_TLS_CERT), else "http".
	scheme string
	// CAFile is the PEM file a client trusts to reach an HTTPS server ("" over HTTP).
	CAFile string

	logs *syncBuffer

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{} // closed when the current process has exited
	exitErr  error
	stopping bool // the test asked the process to stop (signal sent)
}

// Default is the server's first account (devstoreaccount1 unless --accounts was given).
func (s *server) Default() account { return s.Accounts[0] }

// Endpoint is the path-style service URL of the account.
func (s *server) Endpoint(acct string) string {
	return s.BaseURL() + "/" + acct
}

// BaseURL is scheme://host:port of the server.
func (s *server) BaseURL() string {
	return s.scheme + "://" + s.Addr
}

// HTTPS reports whether the server serves TLS.
func (s *server) HTTPS() bool { return s.scheme == "https" }

// clientTLS is the TLS configuration of a client that trusts the server's certificate (its
// CAFile) and nothing else; serverName is the name verified ("" for the dialled host).
func (s *server) clientTLS(serverName string) *tls.Config {
	s.t.Helper()
	pem, err := os.ReadFile(s.CAFile)
	if err != nil {
		s.t.Fatalf("the server's certificate: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		s.t.Fatalf("no certificate in %s", s.CAFile)
	}
	return &tls.Config{RootCAs: pool, ServerName: serverName}
}

// dial opens a connection to the server as its clients do: plain TCP, or TLS over HTTPS
// (the handshake done, within d.Timeout), for tests that write HTTP by hand.
func (s *server) dial(d *net.Dialer) (net.Conn, error) {
	if !s.HTTPS() {
		return d.Dial("tcp", s.Addr)
	}
	return tls.DialWithDialer(d, "tcp", s.Addr, s.clientTLS(""))
}

type serverOption func(*serverConfig)

type serverConfig struct {
	dataDir  string
	accounts []account
	extra    []string
	env      []string
	// tls: "" (plain HTTP unless CERULEAN_TEST_TLS_CERT), "self-signed", "files"
	// (tlsCert/tlsKey, trusted through tlsCA), or "dev-issuer" (--dev-issuer alone, which
	// turns --tls-self-signed on).
	tls                    string
	tlsCert, tlsKey, tlsCA string
	// port, when not 0, is the port the server listens on instead of a free one.
	port int
}

// withPort makes the server listen on 127.0.0.1:port rather than on a free port of its
// own: for a caller that must know the address before the server starts (TestDocs builds
// programs that name it).
func withPort(port int) serverOption {
	return func(c *serverConfig) { c.port = port }
}

// withSelfSignedTLS passes --tls-self-signed; the server's CAFile is the certificate it
// creates in its data directory.
func withSelfSignedTLS() serverOption {
	return func(c *serverConfig) { c.tls = "self-signed" }
}

// withTLSFiles passes --tls-cert/--tls-key; caFile is what clients trust.
func withTLSFiles(cert, key, caFile string) serverOption {
	return func(c *serverConfig) { c.tls, c.tlsCert, c.tlsKey, c.tlsCA = "files", cert, key, caFile }
}

// withAccounts passes --accounts; the first account becomes the server's default.
func withAccounts(accts ...account) serverOption {
	return func(c *serverConfig) { c.accounts = accts }
}

// getDebug GETs path (with its query) on a server's diagnostics address (--debug-addr)
// and returns the status, Content-Type and body. No retry is needed: cerulean binds that
// address before it answers on --addr, which startServer waits for.
func getDebug(t testing.TB, addr, path string) (status int, contentType string, body []byte) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s on the diagnostics address: %v", path, err)
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s on the diagnostics address: %v", path, err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), body
}

// ownAccounts numbers the accounts startOwnServer makes.
var ownAccounts atomic.Int64

// startOwnServer starts a server whose one account is new to the run, so that the tables
// it lists are only those its test made, even when every server of the run shares one
// database (the postgres pass): for tests that move data between servers or act on
// every table of an account.
func startOwnServer(t testing.TB, opts ...serverOption) *server {
	t.Helper()
	name := fmt.Sprintf("own%s%d", runID, ownAccounts.Add(1))
	return startServer(t, append([]serverOption{withAccounts(account{name, devKey})}, opts...)...)
}

// startServer starts a cerulean child process on a free port with a fresh data directory
// (unless withDataDir is given), waits until it answers HTTP, and stops it on cleanup.
func startServer(t testing.TB, opts ...serverOption) *server {
	t.Helper()
	cfg := serverConfig{}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.dataDir == "" {
		cfg.dataDir = t.TempDir()
	}
	if cfg.tls == "" {
		// The whole run over HTTPS (TestHTTPSGoSDK runs a set of tests so, with
		// SSL_CERT_FILE naming this certificate): every server uses the same pair.
		if cert := os.Getenv("CERULEAN_TEST_TLS_CERT"); cert != "" {
			cfg.tls, cfg.tlsCert, cfg.tlsKey, cfg.tlsCA = "files", cert, os.Getenv("CERULEAN_TEST_TLS_KEY"), cert
		}
	}
	s := &server{t: t, DataDir: cfg.dataDir, logs: &syncBuffer{}, env: cfg.env, scheme: "http", fixedPort: cfg.port}
	switch cfg.tls {
	case "self-signed":
		s.scheme, s.CAFile = "https", filepath.Join(cfg.dataDir, "cerulean-tls-cert.pem")
		s.args = append(s.args, "--tls-self-signed")
	case "files":
		s.scheme, s.CAFile = "https", cfg.tlsCA
		s.args = append(s.args, "--tls-cert", cfg.tlsCert, "--tls-key", cfg.tlsKey)
	case "dev-issuer":
		// --dev-issuer alone: it turns --tls-self-signed on itself.
		s.scheme, s.CAFile = "https", filepath.Join(cfg.dataDir, "cerulean-tls-cert.pem")
		s.args = append(s.args, "--dev-issuer")
	}
	if len(cfg.accounts) > 0 {
		s.Accounts = cfg.accounts
	} else {
		s.Accounts = []account{{devAccount, devKey}}
	}
	s.args = append(s.args, "--data", cfg.dataDir)
	if len(cfg.accounts) > 0 {
		parts := make([]string, len(cfg.accounts))
		for i, a := range cfg.accounts {
			parts[i] = a.Name + ":" + a.Key
		}
		s.args = append(s.args, "--accounts", strings.Join(parts, ";"))
	}
	if lvl := os.Getenv("CERULEAN_TEST_LOG_LEVEL"); lvl != "" {
		s.args = append(s.args, "--log-level", lvl)
	}
	s.args = append(s.args, cfg.extra...)
	s.args = append(s.args, strings.Fields(os.Getenv("CERULEAN_TEST_ENGINE_ARGS"))...)

	t.Cleanup(func() {
		s.stopForCleanup()
		if t.Failed() || os.Getenv("CERULEAN_TEST_VERBOSE_LOGS") != "" {
			t.Logf("---- cerulean output (data dir %s, args %q) ----\n%s\n---- end of cerulean output ----",
				s.DataDir, s.args, s.logs.Tail(64<<10))
		}
	})
	s.start(t)
	if s.HTTPS() {
		t.Logf("cerulean serving %s", s.BaseURL())
	}
	return s
}

// start launches the process on a new free port (or its fixed one, withPort) and waits for
// it to answer. It retries, with another port unless fixed, if the process exits at once
// (the port may have been taken in between).
func (s *server) start(t testing.TB) {
	t.Helper()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		if s.fixedPort != 0 {
			port = s.fixedPort
		}
		s.Port = port
		s.Addr = fmt.Sprintf("127.0.0.1:%d", port)
		args := append([]string{"serve", "--addr", s.Addr}, s.args...)
		cmd := exec.Command(binaryPath, args...)
		cmd.Env = append(os.Environ(), s.env...)
		// Keep CERULEAN_* from the developer's shell out of the child, except what we set.
		cmd.Env = filterEnv(cmd.Env)
		fmt.Fprintf(s.logs, "==== %s cerulean %s\n", time.Now().Format("15:04:05.000"), strings.Join(args, " "))
		cmd.Stdout = s.logs
		cmd.Stderr = s.logs
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting cerulean: %v", err)
		}
		done := make(chan struct{})
		s.mu.Lock()
		s.cmd, s.done, s.exitErr, s.stopping = cmd, done, nil, false
		s.mu.Unlock()
		go func() {
			err := cmd.Wait()
			s.mu.Lock()
			s.exitErr = err
			s.mu.Unlock()
			close(done)
		}()
		if err := s.waitReady(done); err != nil {
			lastErr = err
			select {
			case <-done:
				continue // exited early: try another port
			default:
			}
			s.kill()
			break
		}
		return
	}
	t.Fatalf("cerulean did not become ready: %v\n%s", lastErr, s.logs.Tail(16<<10))
}

// filterEnv drops CERULEAN_ADDR/DATA/ACCOUNTS inherited from the environment so that only
// the flags the harness passes decide where the server listens and what it serves.
func filterEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if strings.HasPrefix(kv, "CERULEAN_ADDR=") || strings.HasPrefix(kv, "CERULEAN_DATA=") ||
			strings.HasPrefix(kv, "CERULEAN_ACCOUNTS=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// waitReady polls until the server accepts TCP connections and answers an HTTP request.
func (s *server) waitReady(done <-chan struct{}) error {
	deadline := time.Now().Add(readyTimeout)
	// Readiness only: whether the certificate is trusted is what the tests check.
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer client.CloseIdleConnections()
	for {
		select {
		case <-done:
			s.mu.Lock()
			err := s.exitErr
			s.mu.Unlock()
			return fmt.Errorf("process exited before becoming ready: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not answering after %v", readyTimeout)
		}
		conn, err := net.DialTimeout("tcp", s.Addr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			resp, err := client.Get(s.BaseURL() + "/" + s.Default().Name + "/Tables")
			if err == nil {
				resp.Body.Close()
				return nil
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// running reports whether the current process is still alive.
func (s *server) running() bool {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// signal sends sig to the current process and marks the stop as intended.
func (s *server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopping = true
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// kill SIGKILLs the process and waits for it to be reaped.
func (s *server) kill() {
	s.signal(syscall.SIGKILL)
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done != nil {
		<-done
	}
}

// terminate sends SIGTERM and waits up to timeout for the process to exit. It returns the
// exit error (nil for exit status 0) and whether it exited in time; on timeout it kills.
func (s *server) terminate(timeout time.Duration) (exitErr error, inTime bool) {
	s.signal(syscall.SIGTERM)
	return s.waitExit(timeout)
}

// waitExit waits up to timeout for a process already told to stop (a signal sent by the
// test) to exit, and kills it after that. Unlike terminate it sends no signal: a second
// SIGTERM during a shutdown, once the server has stopped listening for it, ends the
// process at once with the signal's default action.
func (s *server) waitExit(timeout time.Duration) (exitErr error, inTime bool) {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	select {
	case <-done:
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.exitErr, true
	case <-time.After(timeout):
		s.kill()
		return errors.New("killed: no exit after the signal"), false
	}
}

// restart starts a new process on the same data directory (after a stop or a kill).
func (s *server) restart(t testing.TB) {
	t.Helper()
	if s.running() {
		t.Fatalf("restart: server still running")
	}
	s.start(t)
}

// stopForCleanup stops the process at the end of the test. An exit that the test did not
// ask for (a crash or panic) is reported as a test failure.
func (s *server) stopForCleanup() {
	s.mu.Lock()
	done, stopping := s.done, s.stopping
	s.mu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
		if !stopping {
			s.mu.Lock()
			err := s.exitErr
			s.mu.Unlock()
			s.t.Errorf("cerulean exited on its own during the test: %v", err)
		}
		return
	default:
	}
	if err, inTime := s.terminate(stopTimeout); !inTime {
		s.t.Errorf("cerulean did not exit within %v of SIGTERM; killed", stopTimeout)
	} else if err != nil {
		s.t.Logf("cerulean exit after SIGTERM at cleanup: %v", err)
	}
}

// syncBuffer collects the child's output.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// Tail returns at most n bytes from the end of the output.
func (b *syncBuffer) Tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	data := b.buf.Bytes()
	if len(data) <= n {
		return string(data)
	}
	return fmt.Sprintf("... (%d bytes omitted) ...\n%s", len(data)-n, data[len(data)-n:])
}

// logLines returns the first n lines of the server's output that contain any of subs,
// with how many more there were: what a failing test reports first, so that the server's
// own account leads the test's output.
func logLines(s *server, n int, subs ...string) string {
	var out []string
	more := 0
	for line := range strings.Lines(s.logs.Tail(16 << 20)) {
		for _, sub := range subs {
			if strings.Contains(line, sub) {
				if len(out) < n {
					out = append(out, strings.TrimRight(line, "\n"))
				} else {
					more++
				}
				break
			}
		}
	}
	if more > 0 {
		out = append(out, fmt.Sprintf("... and %d more such lines", more))
	}
	return strings.Join(out, "\n")
}

// ctx returns a context bounded by a generous per-call timeout.
func ctx(t testing.TB) context.Context { return ctxFor(t, 30*time.Second) }

// ctxWithTimeout is context.WithTimeout on Background, for goroutines without a test.
func ctxWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// ctxFor returns a context with the given timeout, cancelled when the test ends.
func ctxFor(t testing.TB, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

// pid is the operating-system process id of the running child.
func (s *server) pid(t testing.TB) int {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		t.Fatalf("server has no process")
	}
	return s.cmd.Process.Pid
}

// memKB reads the child's resident memory (VmRSS) and its peak (VmHWM), in KiB.
func (s *server) memKB(t testing.TB) (rss, hwm int64) {
	t.Helper()
	pid := s.pid(t)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("reading /proc/%d/status: %v", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			t.Fatalf("/proc/%d/status: %q: %v", pid, line, err)
		}
		if k == "VmRSS" {
			rss = n
		} else {
			hwm = n
		}
	}
	return rss, hwm
}
