// Package h1 serves HTTP/1.1 requests of the plain shape table clients send — a request
// line in origin form, well-formed headers, a Content-Length body or none — with less work
// per request than net/http, and hands every other connection to a net/http Server.
//
// Why: on a small machine a point read costs the server about as much CPU in net/http's
// connection loop as in the table service itself. Most of that loop is general machinery a
// keep-alive client of a table service never needs per request: a goroutine started for
// each request to watch the idle connection, three read deadlines, a context with its
// own cancellation, the response header map cloned and sorted. This server reads a request
// head with one buffered peek, builds the *http.Request the handler expects, and writes the
// response's head once, at the end, with its Content-Length.
//
// What it does not handle it leaves to net/http, whole: at the first request on a
// connection that is not of the plain shape (HTTP/1.0, a Transfer-Encoding or Expect
// header, an obsolete folded header line, a line ending in a bare LF, a request target in
// absolute or asterisk form, a head larger than the read buffer, anything malformed), the
// bytes read so far are handed with the connection to the fallback http.Server, which
// serves it from there on as if it had accepted it, errors included — as soon as what has
// arrived shows the head is not plain, and with the deadline the head began with. So the
// rules of HTTP that net/http enforces still hold for every request: this server only
// answers the requests whose parsing leaves no room for interpretation, and tolerates what
// net/http tolerates (up to four CR or LF bytes after a POST's body). The differential
// test (differential_test.go) holds it to net/http's answers, byte sequence by byte
// sequence.
//
// Around the connections it hands over it keeps what net/http does not do (fallbackConn):
// the heads net/http reads share a budget (MaxHeadMemory), and the requests net/http
// refuses itself, before any handler, are answered by Refused instead of its plain text.
//
// TLS connections (a listener of tls.NewListener) get their handshake here, as net/http
// does it (its timeout, its 400 to a client speaking plain HTTP, its log line); one that
// negotiates a protocol other than HTTP/1.1 by ALPN (h2) goes to the fallback untouched,
// and the others are served here, with Request.TLS set. A TLS connection handed over
// reaches the fallback wrapped, no longer a *tls.Conn, so Serve wraps the fallback's
// Handler and ConnContext to give its requests their Request.TLS all the same.
//
// The handler sees the usual types. Its ResponseWriter supports http.ResponseController
// (Flush, SetReadDeadline, SetWriteDeadline); there is no Hijack, no full duplex and no
// trailers. As with net/http, neither the ResponseWriter nor the request's body may be used
// once the handler has returned; here they are each request's own (the header map too), and
// do nothing then (ErrHandlerReturned), so that a handler that breaks the rule cannot write
// into the next response on the connection. A request's context ends when the handler
// returns, when the server closes the connection (Close), and when the client goes away
// while the request runs, which is noticed only once it has run for watchDelay (watch.go).
package h1

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Server serves HTTP/1.1 on a listener with the settings of its fallback: Handler,
// ReadHeaderTimeout, IdleTimeout, ConnState and ErrorLog are read from it, and it serves
// the connections this server hands over. Its other settings (ReadTimeout, WriteTimeout,
// MaxHeaderBytes, TLSConfig) apply to those connections only: for the requests this server
// answers, a handler sets its deadlines through http.ResponseController, and a head larger
// than the read buffer goes to the fallback anyway. (ReadTimeout and WriteTimeout, with
// ReadHeaderTimeout, do bound a TLS handshake here, as in net/http. The TLS configuration
// is the listener's, as for net/http's Serve.)
//
// The heads net/http reads on the connections handed over are bounded twice: each by
// HTTP.MaxHeaderBytes, and all together by MaxHeadMemory (see fallbackConn).
//
// Serve replaces HTTP.Handler, HTTP.ConnContext and HTTP.ConnState with wrappers of them
// (fallbackHandler, withFallbackConn, fallbackState): set them before Serve, not after.
type Server struct {
	HTTP *http.Server

	// Refused, if set, answers the requests refused before any handler could see them
	// (see RequestError): net/http's own answers to a head it will not take, and the
	// 503 to a head that finds the memory for unfinished heads spent. It gets the request
	// as far as its head could be read (its method, target and header lines when they
	// are valid; nothing in it has been checked) and writes the answer, which is sent
	// whole, with Connection: close. Without it those requests get net/http's plain-text
	// answers.
	Refused func(w http.ResponseWriter, r *http.Request, e *RequestError)

	// MaxHeadMemory bounds the bytes of unfinished request heads held beyond the first
	// 4 KiB of each (a connection's buffer, which every connection has), all connections
	// together; a head that would go past it is refused with 503 (HeadBudget) and its
	// connection closed. 0 means DefaultMaxHeadMemory, a negative value no bound.
	MaxHeadMemory int64

	// FallbackOnly hands every connection to the fallback as soon as it is accepted
	// (after its TLS handshake): net/http serves every request, with this server's
	// bounds and refusals around it (for comparison, or to rule this server out).
	FallbackOnly bool

	handler http.Handler // HTTP.Handler as Serve found it

	mu      sync.Mutex
	conns   map[*conn]struct{}
	ln      net.Listener
	handoff *handoffListener
	closing atomic.Bool
	done    chan struct{} // closed when Shutdown or Close begins (and closing is set)

	// The watch for clients going away (watch.go): the loop waits on watchWake while
	// watchIdle. watchNew holds the connections whose request began since the loop's
	// last look and that were not on its list.
	watchIdle atomic.Bool
	watchWake chan struct{}
	watchMu   sync.Mutex
	watchNew  []*conn
	// watchTicks counts the watch's looks and watchLooks the connections it looked at,
	// for tests.
	watchTicks, watchLooks atomic.Int64

	connState func(net.Conn, http.ConnState) // HTTP.ConnState as Serve found it
	heads     headBudget
}

// Serve accepts connections on ln until Shutdown or Close, serving each on its own
// goroutine. It returns http.ErrServerClosed after Shutdown or Close, and otherwise the
// listener's error.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.done == nil {
		s.done = make(chan struct{})
	}
	if s.closing.Load() {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.ln = ln
	s.conns = map[*conn]struct{}{}
	s.handoff = newHandoffListener(ln.Addr())
	s.watchWake = make(chan struct{}, 1)
	s.handler = s.HTTP.Handler
	if s.handler == nil {
		s.handler = http.DefaultServeMux
	}
	s.HTTP.Handler = fallbackHandler{s.handler}
	s.HTTP.ConnContext = withFallbackConn(s.HTTP.ConnContext)
	s.connState = s.HTTP.ConnState
	s.HTTP.ConnState = s.fallbackState
	s.heads.limit = s.MaxHeadMemory
	if s.heads.limit == 0 {
		s.heads.limit = DefaultMaxHeadMemory
	}
	s.mu.Unlock()
	go s.watchLoop()

	fallbackErr := make(chan error, 1)
	go func() { fallbackErr <- s.HTTP.Serve(s.handoff) }()

	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return http.ErrServerClosed
			}
			if te, ok := err.(interface{ Temporary() bool }); ok && te.Temporary() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.logf("h1: accept error: %v; retrying in %v", err, delay)
				time.Sleep(delay)
				continue
			}
			s.beginClose()
			_ = s.HTTP.Close()
			<-fallbackErr
			return err
		}
		delay = 0
		c := s.newConn(nc)
		if c == nil {
			continue
		}
		if s.connState != nil {
			s.connState(nc, http.StateNew)
		}
		go c.serve()
	}
}

// fallbackState is the fallback's ConnState hook: it keeps a handed-over connection's
// fallbackConn informed, then calls the hook Serve found.
func (s *Server) fallbackState(nc net.Conn, st http.ConnState) {
	if fc, ok := nc.(*fallbackConn); ok {
		fc.setState(st)
	}
	if s.connState != nil {
		s.connState(nc, st)
	}
}

func (s *Server) logf(format string, args ...any) {
	if s.HTTP.ErrorLog != nil {
		s.HTTP.ErrorLog.Printf(format, args...)
	}
}

// newConn registers a connection; nil (and the connection closed) if shutdown has begun.
func (s *Server) newConn(nc net.Conn) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		_ = nc.Close()
		return nil
	}
	c := &conn{s: s, nc: nc}
	c.state.Store(int32(http.StateNew))
	s.conns[c] = struct{}{}
	return c
}

// forget removes a connection that is closed or handed over.
func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// Shutdown stops accepting, closes the idle connections, lets every request being served
// finish (closing each connection after its response), and shuts the fallback server down,
// all within ctx. As net/http's, a connection that has not begun its first request is
// given up to five seconds.
func (s *Server) Shutdown(ctx context.Context) error {
	s.beginClose()
	fallback := make(chan error, 1)
	go func() { fallback <- s.HTTP.Shutdown(ctx) }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	started := time.Now()
	for {
		if s.closeIdle(time.Since(started) > 5*time.Second) {
			break
		}
		select {
		case <-ctx.Done():
			<-fallback
			return ctx.Err()
		case <-tick.C:
		}
	}
	return <-fallback
}

// Close closes the listener and every connection at once, and the fallback server.
func (s *Server) Close() error {
	s.beginClose()
	s.mu.Lock()
	for c := range s.conns {
		c.close()
	}
	s.mu.Unlock()
	return s.HTTP.Close()
}

func (s *Server) beginClose() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		s.done = make(chan struct{})
	}
	if !s.closing.Swap(true) {
		close(s.done)
	}
	if s.ln != nil {
		_ = s.ln.Close()
	}
}

// closeIdle closes the connections waiting for a request (and those that have not begun
// their first one, if newToo), and reports whether none is left.
func (s *Server) closeIdle(newToo bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		st := http.ConnState(c.state.Load())
		if st == http.StateIdle || newToo && st == http.StateNew {
			// Only an idle connection that has not just begun a request: the CAS
			// in conn.await decides the race.
			if c.state.CompareAndSwap(int32(st), int32(http.StateClosed)) {
				c.close()
			}
		}
	}
	return len(s.conns) == 0
}

// bufioPools recycle the connections' buffers between connections.
var (
	readerPool sync.Pool // of *bufio.Reader
	writerPool sync.Pool // of *bufio.Writer
)

// bufSize is the size of a connection's read and write buffers, as net/http's. A request
// head that does not fit is handed to the fallback.
const bufSize = 4096

func getReader(r io.Reader) *bufio.Reader {
	if br, ok := readerPool.Get().(*bufio.Reader); ok {
		br.Reset(r)
		return br
	}
	return bufio.NewReaderSize(r, bufSize)
}

func getWriter(w net.Conn) *bufio.Writer {
	if bw, ok := writerPool.Get().(*bufio.Writer); ok {
		bw.Reset(w)
		return bw
	}
	return bufio.NewWriterSize(w, bufSize)
}
