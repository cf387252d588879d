package h1

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"time"
)

// handshake does a TLS connection's handshake as net/http's server does: within the
// shortest of the fallback's ReadTimeout, WriteTimeout and ReadHeaderTimeout, answering
// a client that speaks plain HTTP to the TLS port with a 400 on the raw connection, and
// logging a failure. It reports whether the handshake succeeded; c.tls is then the
// connection's state.
func (c *conn) handshake(tc *tls.Conn) bool {
	d := handshakeTimeout(c.s.HTTP)
	if d > 0 {
		dl := time.Now().Add(d)
		_ = tc.SetReadDeadline(dl)
		_ = tc.SetWriteDeadline(dl)
	}
	if err := tc.HandshakeContext(context.Background()); err != nil {
		reason := err.Error()
		if re, ok := err.(tls.RecordHeaderError); ok && re.Conn != nil && looksLikeHTTP(re.RecordHeader) {
			_, _ = io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
			_ = re.Conn.Close()
			reason = "client sent an HTTP request to an HTTPS server"
		}
		c.s.logf("http: TLS handshake error from %s: %v", c.remote, reason)
		return false
	}
	if d > 0 {
		_ = tc.SetReadDeadline(time.Time{})
		_ = tc.SetWriteDeadline(time.Time{})
	}
	st := tc.ConnectionState()
	c.tls = &st
	return true
}

// handshakeTimeout is net/http's: the shortest of the timeouts that are set.
func handshakeTimeout(hs *http.Server) time.Duration {
	var d time.Duration
	for _, v := range []time.Duration{hs.ReadTimeout, hs.WriteTimeout, hs.ReadHeaderTimeout} {
		if v > 0 && (d == 0 || v < d) {
			d = v
		}
	}
	return d
}

// looksLikeHTTP reports whether a TLS record header is the start of a plain HTTP request
// (net/http's tlsRecordHeaderLooksLikeHTTP).
func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
}

// fallbackKey is the context key of a handed-over connection's fallbackConn.
type fallbackKey struct{}

// withFallbackConn wraps the fallback's ConnContext: the requests of a handed-over
// connection carry its fallbackConn, for fallbackHandler.
func withFallbackConn(next func(context.Context, net.Conn) context.Context) func(context.Context, net.Conn) context.Context {
	return func(ctx context.Context, nc net.Conn) context.Context {
		if next != nil {
			ctx = next(ctx, nc)
		}
		if fc, ok := nc.(*fallbackConn); ok {
			ctx = context.WithValue(ctx, fallbackKey{}, fc)
		}
		return ctx
	}
}

// fallbackHandler is the fallback's handler. For a request on a handed-over connection, it
// tells the connection that a response begins (fallbackConn.beginResponse) and gives a TLS
// connection's request its Request.TLS, which net/http leaves nil: the connection is a
// fallbackConn, not a *tls.Conn.
type fallbackHandler struct{ h http.Handler }

func (f fallbackHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if fc, ok := r.Context().Value(fallbackKey{}).(*fallbackConn); ok {
		fc.beginResponse()
		if r.TLS == nil && fc.tls != nil {
			r = r.WithContext(r.Context()) // a copy: the handler may keep r
			r.TLS = fc.tls
		}
	}
	f.h.ServeHTTP(w, r)
}
