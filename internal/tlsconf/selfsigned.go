package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Names of the self-signed pair in the data directory.
const (
	SelfSignedCertFile = "cerulean-tls-cert.pem"
	SelfSignedKeyFile  = "cerulean-tls-key.pem"
)

// SelfSignedValidity is how long a created self-signed certificate is valid.
const SelfSignedValidity = 3 * 365 * 24 * time.Hour

// SelfSigned returns the paths of the development certificate kept in dir, creating it
// first if it is not there: an ECDSA P-256 certificate for 127.0.0.1, ::1 and localhost,
// valid for SelfSignedValidity, that is its own CA (so a client trusts it by adding the
// certificate file to its CA bundle). An existing pair is reused as it is, so clients that
// trust it keep trusting it across restarts; created reports whether it was made now.
func SelfSigned(dir string) (certFile, keyFile string, created bool, err error) {
	certFile = filepath.Join(dir, SelfSignedCertFile)
	keyFile = filepath.Join(dir, SelfSignedKeyFile)
	_, cerr := os.Stat(certFile)
	_, kerr := os.Stat(keyFile)
	if cerr == nil && kerr == nil {
		if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
			return "", "", false, fmt.Errorf("self-signed certificate in %s: %w (remove both files to make a new one)", dir, err)
		}
		return certFile, keyFile, false, nil
	}
	if (cerr == nil) != (kerr == nil) {
		return "", "", false, fmt.Errorf("self-signed certificate in %s: only one of %s and %s exists (remove it to make a new pair)", dir, SelfSignedCertFile, SelfSignedKeyFile)
	}
	if !errors.Is(cerr, os.ErrNotExist) {
		return "", "", false, fmt.Errorf("self-signed certificate: %w", cerr)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", false, fmt.Errorf("self-signed certificate: %w", err)
	}
	certPEM, keyPEM, err := newSelfSigned(time.Now())
	if err != nil {
		return "", "", false, err
	}
	// The key first and the certificate last, each written whole before it is renamed into
	// place: a crash leaves either no pair or a whole one (a lone key is caught above).
	if err := writeAtomic(keyFile, keyPEM, 0o600); err != nil {
		return "", "", false, err
	}
	if err := writeAtomic(certFile, certPEM, 0o644); err != nil {
		return "", "", false, err
	}
	return certFile, keyFile, true, nil
}

// newSelfSigned makes the PEM certificate and PKCS#8 key of a development certificate.
func newSelfSigned(now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("self-signed certificate: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, nil, fmt.Errorf("self-signed certificate: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "Cerulean development certificate (localhost)", Organization: []string{"Cerulean"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(SelfSignedValidity),
		// Its own CA, so CA bundles (NODE_EXTRA_CA_CERTS, REQUESTS_CA_BUNDLE,
		// SSL_CERT_FILE) accept it as a trust anchor; Python's OpenSSL wants CA:TRUE.
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("self-signed certificate: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("self-signed certificate: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

// writeAtomic writes data to a temporary file in path's directory, syncs it and renames it
// to path.
func writeAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("self-signed certificate: %w", err)
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return fmt.Errorf("self-signed certificate: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("self-signed certificate: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("self-signed certificate: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("self-signed certificate: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("self-signed certificate: %w", err)
	}
	return nil
}

// TrustHelp is the start-up text telling how each SDK and the Azure CLI trust the
// self-signed certificate at certFile.
func TrustHelp(certFile string) string {
	return fmt.Sprintf(`HTTPS with a self-signed certificate: %[1]s
Trust it in the client:
  Go (aztables, Linux):           SSL_CERT_FILE=%[1]s (replaces the system CA bundle for that process)
  JavaScript (@azure/data-tables): NODE_EXTRA_CA_CERTS=%[1]s
  Python (azure-data-tables):     REQUESTS_CA_BUNDLE=%[1]s
  Azure CLI (az storage):         REQUESTS_CA_BUNDLE=%[1]s
  .NET (Azure.Data.Tables):       add it to the system store, e.g. on Debian/Ubuntu: sudo cp %[1]s /usr/local/share/ca-certificates/cerulean.crt && sudo update-ca-certificates
                                  (Windows: Import-Certificate -FilePath %[1]s -CertStoreLocation Cert:\CurrentUser\Root)
`, certFile)
}
