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
	// afterPost: the last request was a POST (stray CR LF may follow its body); and
	// headDeadline is the deadline of the head being awaited, if it has one yet.
	afterPost    bool
	headDeadline time.Time
}

// rstAvoidanceDelay is how long a connection closing with unread input waits after
// closing its sending side (net/http's rstAvoidanceDelay).
const rstAvoidanceDelay = 500 * time.Millisecond

// closeWriteAndWait closes the sending side and waits a moment before the connection is
// closed, as net/http does: closing a socket with unread input sends a reset, which can
// destroy the response (a 413, a 500 for a stalled body) before the client has read it.
func (c *conn) closeWriteAndWait() { closeWriteAndWait(c.nc) }

func closeWriteAndWait(nc net.Conn) {
	if cw, ok := nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	time.Sleep(rstAvoidanceDelay)
}

// maxDiscard is the most of an unread request body read and thrown away before the
// response's head so that the connection can serve another request (net/http's
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
	c.reportState(st)
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
			// h2, say: net/http serves it (TLSNextProto), the handshake done, as the
			// *tls.Conn it needs.
			c.reportState(http.StateHijacked)
			c.s.handoff.put(c.nc)
			handedOver = true
			return
		}
	}
	if c.s.FallbackOnly {
		c.handOver()
		handedOver = true
		return
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
		c.afterPost = p.method == http.MethodPost
		if c.s.closing.Load() {
			return
		}
	}
}

// reportState reports a state of the connection to the fallback's ConnState hook.
func (c *conn) reportState(st http.ConnState) {
	if h := c.s.connState; h != nil {
		h(c.nc, st)
	}
}

// handOver gives the connection, with the bytes buffered so far, to the fallback server,
// wrapped (fallbackConn) to replay them, to keep the deadline of a head begun here, and to
// bound and answer the heads net/http reads.
func (c *conn) handOver() {
	var pending []byte
	var deadline time.Time
	if b, _ := c.br.Peek(c.br.Buffered()); len(b) > 0 {
		pending, deadline = bytes.Clone(b), c.headDeadline
	}
	// The fallback reports the connection as new again.
	c.reportState(http.StateHijacked)
	c.s.handoff.put(c.s.newFallbackConn(c.nc, pending, c.tls, deadline))
}

// await waits for the next request's head and returns it (still buffered, not consumed).
// A connection waits IdleTimeout for a request to begin (ReadHeaderTimeout for its first)
// and ReadHeaderTimeout for a head to complete once it has begun. After a POST, up to four
// CR or LF bytes before the head are skipped, as net/http skips them (RFC 9112 §2.2).
//
// A nil head with a nil error means the connection goes to net/http now: the head does not
// fit in the buffer, or what has arrived of it already shows that it is not of the plain
// shape (a line ending in a bare LF, a request line this server does not answer), or the
// client ended the connection part-way (net/http answers that 400). The head's deadline
// goes with it (c.headDeadline), so that net/http gives it no more time than it had.
func (c *conn) await(first bool) ([]byte, error) {
	hs := c.s.HTTP
	now := time.Now()
	c.headDeadline = time.Time{}
	if first {
		if d := hs.ReadHeaderTimeout; d > 0 {
			c.headDeadline = now.Add(d)
			_ = c.nc.SetReadDeadline(c.headDeadline)
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
	c.reportState(http.StateActive)
	skipped := 0 // stray CR LF
	if c.afterPost {
		for ; skipped < 4; skipped++ {
			b, err := c.br.Peek(1)
			if err != nil {
				return nil, err
			}
			if b[0] != '\r' && b[0] != '\n' {
				break
			}
			_, _ = c.br.Discard(1)
		}
	}
	var sc headScan
	for timed := first; ; {
		buf, _ := c.br.Peek(c.br.Buffered())
		// On a connection kept alive, net/http waits for four bytes (under the idle
		// timeout) before it looks at a head, and closes without a word if the
		// connection ends before; then it times the head.
		if started := first || skipped+len(buf) >= 4; started {
			if n := sc.end(buf); n > 0 {
				return buf[:n], nil
			}
			if !sc.plainSoFar(buf) || len(buf) == c.br.Size() {
				return nil, nil
			}
			if !timed {
				timed = true
				if d := hs.ReadHeaderTimeout; d > 0 {
					c.headDeadline = time.Now().Add(d)
					_ = c.nc.SetReadDeadline(c.headDeadline)
				}
			}
		}
		if _, err := c.br.Peek(len(buf) + 1); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || !timed {
				return nil, err // a stalled head: closed without a word, as net/http does
			}
			return nil, nil // cut short: net/http answers it (400) or closes
		}
	}
}

// headScan follows a head as its bytes arrive, looking at each byte once.
type headScan struct {
	scanned  int  // bytes looked at
	lineDone bool // the request line has been checked
}

// end is the length of the head in buf once its CRLF CRLF has arrived, else 0.
func (sc *headScan) end(buf []byte) int {
	from := max(sc.scanned-3, 0)
	if i := bytes.Index(buf[from:], crlfcrlf); i >= 0 {
		return from + i + 4
	}
	return 0
}

// plainSoFar reports whether the head buf begins can still be of the plain shape: every
// line ending is a CRLF, and the request line, once complete, is one parse accepts.
func (sc *headScan) plainSoFar(buf []byte) bool {
	for ; sc.scanned < len(buf); sc.scanned++ {
		switch buf[sc.scanned] {
		case '\n':
			if sc.scanned == 0 || buf[sc.scanned-1] != '\r' {
				return false
			}
			if !sc.lineDone {
				sc.lineDone = true
				if !plainRequestLine(buf[:sc.scanned-1]) {
					return false
				}
			}
		case '\r':
			if sc.scanned+1 == len(buf) {
				return true // its LF may be on its way
			}
			if buf[sc.scanned+1] != '\n' {
				return false
			}
		}
	}
	return true
}

// plainRequestLine reports whether line is a request line of the plain shape.
func plainRequestLine(line []byte) bool {
	method, target, proto, ok := requestLine(string(line))
	if !ok || proto != "HTTP/1.1" || !isToken(method) || !validTarget(target) {
		return false
	}
	u, err := url.ParseRequestURI(target)
	return err == nil && u.Host == "" && u.Scheme == ""
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
	mu       sync.Mutex
	closed   bool // the handler has returned
	cutShort bool // the connection ended before the body did
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
	if b.cutShort {
		return 0, io.ErrUnexpectedEOF
	}
	n, err := b.c.br.Read(p)
	b.remaining -= int64(n)
	if b.remaining == 0 {
		b.c.bodyDone.Store(true)
		return n, io.EOF
	}
	if err == io.EOF {
		b.cutShort = true
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *body) Close() error { return nil }

// discard reads what is left of the body and throws it away (the handler may have
// returned, or not).
func (b *body) discard() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cutShort {
		// The connection has ended: nothing is left to read, and the next read of a
		// request ends it (net/http's response says keep-alive then too).
		return nil
	}
	_, err := io.CopyN(io.Discard, bodyRest{b}, b.remaining)
	return err
}

// bodyRest reads what is left of a body, for discarding.
type bodyRest struct{ *body }

func (r bodyRest) Read(p []byte) (int, error) { return r.read(p) }
