package tlsconf

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// pair makes a fresh self-signed PEM pair and its serial.
func pair(t *testing.T) (certPEM, keyPEM []byte, serial *big.Int) {
	t.Helper()
	c, k, err := newSelfSigned(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(c)
	x, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c, k, x.SerialNumber
}

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// serve runs a TLS listener with cfg that answers each connection's handshake.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.(*tls.Conn).Handshake()
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// servedSerial makes a handshake with addr and returns the serial of the certificate served.
func servedSerial(t *testing.T, addr string) *big.Int {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

// logBuffer collects the reloader's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestReloaderRotation(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	c1, k1, s1 := pair(t)
	write(t, certFile, c1)
	write(t, keyFile, k1)
	var logs logBuffer
	// A nanosecond interval: every handshake checks the files, so the test needs no sleeps.
	r, err := NewReloader(certFile, keyFile, time.Nanosecond, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, r.Config())
	if got := servedSerial(t, addr); got.Cmp(s1) != 0 {
		t.Fatalf("served serial %x, want the first certificate's %x", got, s1)
	}

	// A half-done rotation: the new certificate with the old key. The old pair stays.
	c2, k2, s2 := pair(t)
	write(t, certFile, c2)
	if got := servedSerial(t, addr); got.Cmp(s1) != 0 {
		t.Fatalf("with a mismatched pair on disk the served serial is %x, want the old %x", got, s1)
	}
	if !strings.Contains(logs.String(), "do not load") {
		t.Fatalf("a pair that does not load was not logged; log:\n%s", logs.String())
	}

	// The rotation completes: the next handshake gets the new certificate.
	write(t, keyFile, k2)
	if got := servedSerial(t, addr); got.Cmp(s2) != 0 {
		t.Fatalf("after rotation the served serial is %x, want the new %x", got, s2)
	}
	if !strings.Contains(logs.String(), "certificate reloaded") {
		t.Fatalf("the reload was not logged; log:\n%s", logs.String())
	}

	// Files removed (a rename-based rotation in progress): keep serving.
	os.Remove(certFile)
	if got := servedSerial(t, addr); got.Cmp(s2) != 0 {
		t.Fatalf("with the certificate file gone the served serial is %x, want %x", got, s2)
	}
}

func TestReloaderChecksAtMostOncePerInterval(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	c1, k1, s1 := pair(t)
	write(t, certFile, c1)
	write(t, keyFile, k1)
	r, err := NewReloader(certFile, keyFile, time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	c2, k2, _ := pair(t)
	write(t, certFile, c2)
	write(t, keyFile, k2)
	// Within the interval the cached certificate is served without looking at the files.
	if got := r.Certificate().Leaf.SerialNumber; got.Cmp(s1) != 0 {
		t.Fatalf("serial %x within the check interval, want the cached %x", got, s1)
	}
}

func TestNewReloaderRefusesBadPair(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	c1, _, _ := pair(t)
	_, k2, _ := pair(t)
	write(t, certFile, c1)
	write(t, keyFile, k2)
	if _, err := NewReloader(certFile, keyFile, 0, nil); err == nil {
		t.Fatal("NewReloader accepted a key that does not match the certificate")
	}
	if _, err := NewReloader(filepath.Join(dir, "missing.pem"), keyFile, 0, nil); err == nil {
		t.Fatal("NewReloader accepted a missing certificate file")
	}
}

func TestSelfSigned(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	certFile, keyFile, created, err := SelfSigned(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !created {
		t.Fatal("created = false on an empty directory")
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf := pair.Leaf
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	for _, name := range []string{"127.0.0.1", "::1", "localhost"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name}); err != nil {
			t.Errorf("the certificate does not verify for %s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "example.com"}); err == nil {
		t.Error("the certificate verifies for example.com")
	}
	if v := time.Until(leaf.NotAfter); v < 2*365*24*time.Hour {
		t.Errorf("valid for %v, want years", v)
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v (err %v), want 0600", fi.Mode().Perm(), err)
	}

	// A later start reuses the pair as it is.
	c2, k2, created2, err := SelfSigned(dir)
	if err != nil || created2 || c2 != certFile || k2 != keyFile {
		t.Fatalf("second call: %q %q created=%v err=%v, want the same files reused", c2, k2, created2, err)
	}
	again, err := tls.LoadX509KeyPair(c2, k2)
	if err != nil {
		t.Fatal(err)
	}
	if again.Leaf.SerialNumber.Cmp(leaf.SerialNumber) != 0 {
		t.Fatal("the second call made a new certificate")
	}

	// A lone key (a removed certificate) is refused rather than silently replaced.
	os.Remove(certFile)
	if _, _, _, err := SelfSigned(dir); err == nil {
		t.Fatal("SelfSigned accepted a key without its certificate")
	}
}

// TestSelfSignedServesLoopback checks a client trusting the file connects to 127.0.0.1.
func TestSelfSignedServesLoopback(t *testing.T) {
	certFile, keyFile, _, err := SelfSigned(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReloader(certFile, keyFile, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, r.Config())
	pem, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("no certificate in the file")
	}
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatalf("a client trusting the file cannot connect: %v", err)
	}
	c.Close()
	_, port, _ := net.SplitHostPort(addr)
	c, err = tls.Dial("tcp", net.JoinHostPort("localhost", port), &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatalf("a client trusting the file cannot connect by the name localhost: %v", err)
	}
	c.Close()
}
