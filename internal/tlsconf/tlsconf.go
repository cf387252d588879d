// Package tlsconf serves HTTPS for Cerulean: a certificate read from PEM files and reloaded
// when the files change (rotation without a restart), and a self-signed development
// certificate created once and kept in the data directory.
package tlsconf

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// DefaultCheckInterval is how often, at most, Reloader looks at the files again: a
// handshake after it has passed stats both files, and reloads them if either changed.
const DefaultCheckInterval = time.Second

// Reloader hands out the certificate of a cert/key PEM pair, reloading it when the files
// change. Handshakes read a cached certificate; at most once per check interval a
// handshake also stats both files (cheap) and re-reads them when the modification time or
// size of either differs from what was loaded. A pair that does not load — a half-written
// rotation, a key that does not match the certificate — keeps the certificate being served
// and is logged; the next check tries again.
type Reloader struct {
	certFile, keyFile string
	interval          time.Duration
	log               *slog.Logger

	mu        sync.Mutex
	cert      *tls.Certificate
	certStamp stamp
	keyStamp  stamp
	checked   time.Time
	// failed is the stamps of a pair that did not load, so a broken pair is logged once
	// rather than at every check.
	failedCert, failedKey stamp
	// missing is set while a file cannot be stat'ed, so that too is logged once.
	missing bool
}

// stamp is what tells a file changed: its modification time and size.
type stamp struct {
	mod  time.Time
	size int64
}

func statStamp(path string) (stamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{}, err
	}
	return stamp{fi.ModTime(), fi.Size()}, nil
}

// NewReloader loads the pair once (an error here is fatal to the caller: there is nothing
// to serve yet). interval 0 means DefaultCheckInterval; log nil means slog.Default().
func NewReloader(certFile, keyFile string, interval time.Duration, log *slog.Logger) (*Reloader, error) {
	if interval <= 0 {
		interval = DefaultCheckInterval
	}
	if log == nil {
		log = slog.Default()
	}
	r := &Reloader{certFile: certFile, keyFile: keyFile, interval: interval, log: log}
	cs, ks, err := r.stamps()
	if err != nil {
		return nil, err
	}
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls certificate: %w", err)
	}
	r.cert, r.certStamp, r.keyStamp, r.checked = &c, cs, ks, time.Now()
	return r, nil
}

func (r *Reloader) stamps() (cs, ks stamp, err error) {
	if cs, err = statStamp(r.certFile); err != nil {
		return cs, ks, fmt.Errorf("tls certificate: %w", err)
	}
	if ks, err = statStamp(r.keyFile); err != nil {
		return cs, ks, fmt.Errorf("tls key: %w", err)
	}
	return cs, ks, nil
}

// GetCertificate is for tls.Config.GetCertificate.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.Certificate(), nil
}

// Certificate returns the certificate to serve now, reloading the files first if the check
// interval has passed and they changed.
func (r *Reloader) Certificate() *tls.Certificate {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.checked) >= r.interval {
		r.checked = now
		r.reloadLocked()
	}
	return r.cert
}

// reloadLocked re-reads the pair if either file changed since it was loaded.
func (r *Reloader) reloadLocked() {
	cs, ks, err := r.stamps()
	if err != nil {
		// Mid-rotation (a file renamed away) or removed: keep serving what was loaded.
		if !r.missing {
			r.missing = true
			r.log.Warn("tls: keeping the current certificate", "err", err)
		}
		return
	}
	r.missing = false
	if cs == r.certStamp && ks == r.keyStamp {
		return
	}
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		if cs != r.failedCert || ks != r.failedKey {
			r.failedCert, r.failedKey = cs, ks
			r.log.Warn("tls: the certificate files changed but do not load; keeping the current certificate", "cert", r.certFile, "key", r.keyFile, "err", err)
		}
		return
	}
	r.cert, r.certStamp, r.keyStamp = &c, cs, ks
	r.failedCert, r.failedKey = stamp{}, stamp{}
	serial := ""
	if c.Leaf != nil {
		serial = c.Leaf.SerialNumber.Text(16)
	}
	r.log.Info("tls: certificate reloaded", "cert", r.certFile, "serial", serial)
}

// Config returns a server tls.Config that serves r's certificate (TLS 1.2 and later).
func (r *Reloader) Config() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate}
}
