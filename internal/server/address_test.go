package server

import (
	"net"
	"testing"
)

// TestIsIP checks isIP against net.ParseIP, which address used before: the two must agree
// on every host, or a request's addressing style (path or host name) would change.
func TestIsIP(t *testing.T) {
	for _, h := range []string{
		"127.0.0.1", "10.0.0.255", "::1", "fe80::1", "::ffff:127.0.0.1", "2001:db8::",
		"fe80::1%eth0", "127.000.0.1", "127.0.0", "256.0.0.1", "1.2.3.4.5", "",
		"localhost", "devstoreaccount1.table.core.windows.net", "host.docker.internal",
		"[::1]", "1.2.3.4:10002", "0x7f.0.0.1",
	} {
		if got, want := isIP(h), net.ParseIP(h) != nil; got != want {
			t.Errorf("isIP(%q) = %v, net.ParseIP says %v", h, got, want)
		}
	}
}
