package h1

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// conn is one connection served here.
type conn struct {
	s      *Server
	nc     net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	state  atomic.Int32 // http.ConnState
	remote string
	tls    *tls.ConnectionState // of a TLS connection, once its handshake is done

	// cancel ends the current request's context; Close calls it for a request
	// still running.
	mu     sync.Mutex
	cancel context.CancelFunc

	body    *body // the current request's
	noBody  body  // the body of requests without one
	scratch responseScratch

	// The watch for a client going away (watch.go).
	cr       connReader
	wmu      sync.Mutex
	ws       watchState
	bodyDone atomic.Bool   // the request's body has been read to its end
	seq      uint64        // the requests begun
	running  atomic.Uint64 // seq of the request running, 0 between requests
	lastSeen uint64        // running at the watch loop's last look (its own)
	watched  atomic.Bool   // on the watch loop's list (or about to be)

	// linger: the connection closes with the client perhaps still sending a body the
	// server did not read; see closeWriteAndWait.
	linger bool
}

// rstAvoidanceDelay is how long a connection closing with unread input waits after
// closing its sending side (net/http's rstAvoidanceDelay).
const rstAvoidanceDelay = 500 * time.Millisecond

// closeWriteAndWait closes the sending side and waits a moment before the connection is
// closed, as net/http does: closing a socket with unread input sends a reset, which can
// destroy the response (a 413, a 500 for a stalled body) before the client has read it.
func (c *conn) closeWriteAndWait() {
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	time.Sleep(rstAvoidanceDelay)
}

// maxDiscard is the most of an unread request body read and thrown away after the
// handler so that the connection can serve another request (net/http's
// maxPostHandlerReadBytes); past it the connection is closed instead.
const maxDiscard = 256 << 10

// discardTimeout bounds the discarding of an unread body when the handler set no read
// deadline of its own.
const discardTimeout = 10 * time.Second

func (c *conn) close() {
	_ = c.nc.Close()
	c.cancelRequest()
}

func (c *conn) setState(st http.ConnState) {
	c.state.Store(int32(st))
	if h := c.s.HTTP.ConnState; h != nil {
		h(c.nc, st)
	}
}

// serve serves the connection's requests until it closes or is handed over.
func (c *conn) serve() {
	c.cr.c = c
	c.br = getReader(&c.cr)
	c.bw = getWriter(c.nc)
	c.remote = c.nc.RemoteAddr().String()
	handedOver := false
	defer func() {
		if !handedOver {
			if c.linger {
				c.closeWriteAndWait()
			}
			c.close()
			c.setState(http.StateClosed)
		}
		c.br.Reset(nil)
		readerPool.Put(c.br)
		c.bw.Reset(nil)
		writerPool.Put(c.bw)
		c.s.forget(c)
	}()
	if tc, ok := c.nc.(*tls.Conn); ok {
		if !c.handshake(tc) {
			return
		}
		if p := c.tls.NegotiatedProtocol; p != "" && p != "http/1.1" {
			// h2, say: net/http serves it (TLSNextProto), the handshake done.
			c.handOver()
			handedOver = true
			return
		}
	}
	for first := true; ; first = false {
		head, err := c.await(first)
		if err != nil {
			return
		}
		p, ok := parse(head)
		if !ok {
			// Not of the plain shape: net/http serves the connection from this request on.
			c.handOver()
			handedOver = true
			return
		}
		_, _ = c.br.Discard(len(head))
		if !c.serveRequest(&p) {
			return
		}
		if c.s.closing.Load() {
			return
		}
	}
}

// handOver gives the connection, with the bytes buffered so far, to the fallback server:
// as it is if none were read (a TLS connection stays a *tls.Conn), else wrapped to replay
// them.
func (c *conn) handOver() {
	nc := c.nc
	if pending, _ := c.br.Peek(c.br.Buffered()); len(pending) > 0 {
		nc = &replayConn{Conn: c.nc, pending: bytes.Clone(pending), tls: c.tls}
	}
	_ = c.nc.SetReadDeadline(time.Time{})
	if h := c.s.HTTP.ConnState; h != nil {
		// The fallback reports the connection as new again.
		h(c.nc, http.StateHijacked)
	}
	c.s.handoff.put(nc)
}

// await waits for the next request's head and returns it (still buffered, not consumed).
// A connection waits IdleTimeout for a request to begin (ReadHeaderTimeout for its first)
// and ReadHeaderTimeout for a head to complete once it has begun. A nil head with a nil
// error means the head does not fit in the buffer.
func (c *conn) await(first bool) ([]byte, error) {
	hs := c.s.HTTP
	now := time.Now()
	if first {
		if d := hs.ReadHeaderTimeout; d > 0 {
			_ = c.nc.SetReadDeadline(now.Add(d))
		}
	} else {
		c.setState(http.StateIdle)
		if c.s.closing.Load() {
			return nil, http.ErrServerClosed
		}
		d := hs.IdleTimeout
		if d == 0 {
			d = hs.ReadTimeout
		}
		if d > 0 {
			_ = c.nc.SetReadDeadline(now.Add(d))
		} else {
			_ = c.nc.SetReadDeadline(time.Time{})
		}
	}
	if _, err := c.br.Peek(1); err != nil {
		return nil, err
	}
	if !c.state.CompareAndSwap(int32(http.StateIdle), int32(http.StateActive)) && !c.state.CompareAndSwap(int32(http.StateNew), int32(http.StateActive)) {
		return nil, http.ErrServerClosed // shutdown closed it as idle
	}
	if h := hs.ConnState; h != nil {
		h(c.nc, http.StateActive)
	}
	for timed := first; ; {
		buf, _ := c.br.Peek(c.br.Buffered())
		if i := bytes.Index(buf, crlfcrlf); i >= 0 {
			return buf[:i+4], nil
		}
		if len(buf) == c.br.Size() {
			return nil, nil
		}
		if !timed {
			timed = true
			if d := hs.ReadHeaderTimeout; d > 0 {
				_ = c.nc.SetReadDeadline(time.Now().Add(d))
			}
		}
		if _, err := c.br.Peek(len(buf) + 1); err != nil {
			return nil, err // a stalled or truncated head: closed, as net/http does
		}
	}
}

var crlfcrlf = []byte("\r\n\r\n")

// serveRequest runs the handler for the request p and finishes its response. It reports whether the
// connection may serve another request.
func (c *conn) serveRequest(p *parsed) (keep bool) {
	ctx, cancel := context.WithCancel(context.Background())
	c.mu.Lock()
	c.cancel = cancel
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.cancel = nil
		c.mu.Unlock()
		cancel()
	}()
	req := c.request(p, ctx)
	w := c.newResponse(req)
	// A body of its own for each request, so that one a handler kept cannot read the
	// next request's.
	if req.ContentLength > 0 {
		c.body = &body{c: c, remaining: req.ContentLength}
		req.Body = c.body
		c.bodyDone.Store(false)
	} else {
		c.body = &c.noBody
		req.Body = http.NoBody
		c.bodyDone.Store(true)
	}
	// The body of this request may be read without a deadline unless the handler sets
	// one, as net/http does without a ReadTimeout.
	_ = c.nc.SetReadDeadline(time.Time{})
	c.beginRequest()
	ok := c.runHandler(w, req)
	c.endRequest()
	c.body.close()
	if !ok {
		w.release()
		return false
	}
	if !w.finish() {
		return false
	}
	if w.closeAfter {
		if c.body.remaining > 0 {
			c.linger = true
		}
		return false
	}
	if c.body.remaining > 0 {
		// commit judged it small enough to discard, within the deadline the handler
		// set, if any.
		if !w.readDeadline {
			_ = c.nc.SetReadDeadline(time.Now().Add(discardTimeout))
		}
		if _, err := io.CopyN(io.Discard, bodyRest{c.body}, c.body.remaining); err != nil {
			return false
		}
	}
	if w.writeDeadline {
		// Each response's deadline is its own (net/http clears it after each request).
		_ = c.nc.SetWriteDeadline(time.Time{})
	}
	return true
}

// runHandler calls the handler, recovering a panic as net/http does: the connection is
// closed without a response, and the panic logged unless it is http.ErrAbortHandler.
func (c *conn) runHandler(w *response, req *http.Request) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				const size = 64 << 10
				buf := make([]byte, size)
				buf = buf[:runtime.Stack(buf, false)]
				c.s.logf("http: panic serving %v: %v\n%s", c.remote, v, buf)
			}
			ok = false
		}
	}()
	c.s.handler.ServeHTTP(w, req)
	return true
}

// parse builds the request from its head, or reports false if the request is not of the
// plain shape this server answers (see the package comment).
func parse(head []byte) (parsed, bool) {
	if head == nil {
		return parsed{}, false
	}
	p, ok := parseHead(head)
	if !ok {
		return parsed{}, false
	}
	u, err := url.ParseRequestURI(p.target)
	if err != nil || u.Host != "" || u.Scheme != "" {
		return parsed{}, false
	}
	return parsed{head: p, url: u}, true
}

// parsed is a request head of the plain shape, with its target parsed.
type parsed struct {
	head
	url *url.URL
}

// request builds the handler's request, with ctx as its context.
func (c *conn) request(p *parsed, ctx context.Context) *http.Request {
	req := http.Request{
		Method:        p.method,
		URL:           p.url,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        p.header,
		ContentLength: p.contentLength,
		Host:          p.host,
		Close:         p.close,
		RemoteAddr:    c.remote,
		RequestURI:    p.target,
		TLS:           c.tls,
	}
	return req.WithContext(ctx)
}

// body is a request body of known length, read from the connection's buffer.
type body struct {
	c         *conn
	remaining int64

	// mu orders a Read by a goroutine the handler left behind with the end of the
	// handler: once closed, the connection's bytes are the server's again.
	mu     sync.Mutex
	closed bool // the handler has returned
}

var errBodyAfterHandler = errors.New("http: invalid Read on closed Body")

// ErrHandlerReturned is what a ResponseWriter's methods return once its handler has
// returned.
var ErrHandlerReturned = errors.New("h1: ResponseWriter used after its handler returned")

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, errBodyAfterHandler
	}
	return b.read(p)
}

// close ends the handler's reading of the body.
func (b *body) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
}

// read reads the body's next bytes, for the handler (Read) or to discard what it left.
func (b *body) read(p []byte) (int, error) {
	if b.remaining <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.remaining {
		p = p[:b.remaining]
	}
	n, err := b.c.br.Read(p)
	b.remaining -= int64(n)
	if b.remaining == 0 {
		b.c.bodyDone.Store(true)
		return n, io.EOF
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *body) Close() error { return nil }

// bodyRest reads what is left of a body after the handler, for discarding.
type bodyRest struct{ *body }

func (r bodyRest) Read(p []byte) (int, error) { return r.read(p) }
