package h1

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// handoffListener is the fallback server's listener: it "accepts" the connections this
// server hands over.
type handoffListener struct {
	addr   net.Addr
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newHandoffListener(addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, conns: make(chan net.Conn), closed: make(chan struct{})}
}

// put hands nc to the fallback server, or closes it if that server is closed.
func (l *handoffListener) put(nc net.Conn) {
	select {
	case l.conns <- nc:
	case <-l.closed:
		_ = nc.Close()
	}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case nc := <-l.conns:
		return nc, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }

// fallbackConn is a connection as the fallback server sees it: every connection handed
// over, except one that negotiated h2, which net/http needs as the *tls.Conn it is.
//
// Its reads return first the bytes this server read before the hand-over (pending). And
// it watches what net/http does with it, through the fallback's ConnState hook (state)
// and handler (inResponse), for three things net/http does not do itself:
//
//   - The head's deadline: a head begun before the hand-over keeps the deadline it began
//     with (headDeadline), where net/http would give it a fresh ReadHeaderTimeout.
//   - The head budget: while net/http waits for a head or reads one (its state is new or
//     idle), the bytes it reads beyond the first freeHead are taken from the server's
//     budget for unfinished heads (Server.MaxHeadMemory), and given back when the head
//     ends; when the budget is spent the request is refused (503, ServerBusy).
//   - net/http's own refusals: when net/http answers a request itself, before any
//     handler ran (a head it cannot parse, one over MaxHeaderBytes, an Expect it does not
//     know), the answer is Server.Refused's instead of net/http's plain text, built from
//     the head as read (kept). Such an answer is the only thing net/http writes while no
//     handler has begun since the connection went idle.
type fallbackConn struct {
	net.Conn
	s   *Server
	tls *tls.ConnectionState

	mu           sync.Mutex
	pending      []byte         // read before the hand-over, returned first
	state        http.ConnState // net/http's, from its ConnState hook
	inResponse   bool           // a handler has begun since the connection was last idle
	headDeadline time.Time      // the first head's deadline, set before the hand-over
	headRead     int64          // bytes read since net/http began waiting for a head
	held         int64          // of the head budget
	kept         []byte         // the head as read, up to maxKept, for a refusal
	refused      bool           // a refusal has been answered: nothing more is written
	// ahead is the byte net/http's background read took during the last response, if
	// any: the first of the next head, read before the connection went idle.
	ahead    byte
	hasAhead bool
}

// freeHead is how much of a head is read without the budget: this server reads that
// much of every head anyway (its buffer), for every connection.
const freeHead = bufSize

// maxKept is how much of a head is kept to describe a request that is refused.
const maxKept = 8 << 10

// errHeadBudget ends a head read when the budget for unfinished heads is spent.
var errHeadBudget = errors.New("h1: the memory for unfinished request heads is spent")

// newFallbackConn wraps nc for the fallback server, with the bytes read from it so far.
func (s *Server) newFallbackConn(nc net.Conn, pending []byte, tlsState *tls.ConnectionState, headDeadline time.Time) *fallbackConn {
	return &fallbackConn{Conn: nc, s: s, tls: tlsState, pending: pending, state: http.StateNew, headDeadline: headDeadline}
}

func (c *fallbackConn) Read(p []byte) (n int, err error) {
	c.mu.Lock()
	if len(c.pending) > 0 {
		n = copy(p, c.pending)
		c.pending = c.pending[n:]
		if len(c.pending) == 0 {
			c.pending = nil // not held for the connection's life
		}
		c.mu.Unlock()
	} else {
		c.mu.Unlock()
		n, err = c.Conn.Read(p)
	}
	if n > 0 {
		c.mu.Lock()
		if len(p) == 1 && c.inResponse {
			// net/http's one-byte background read, which watches for the client going
			// away while a handler runs: what it reads begins the next head.
			c.ahead, c.hasAhead = p[0], true
		}
		spent := c.readHead(p[:n])
		c.mu.Unlock()
		if spent {
			closeWriteAndWait(c.Conn)
			return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: errHeadBudget}
		}
	}
	return n, err
}

// readHead accounts for b, just read (c.mu held), if net/http is reading a head. It
// reports whether the budget for unfinished heads is spent; the refusal is answered then,
// and the read must fail (net/http closes the connection without a word of its own on a
// read error).
func (c *fallbackConn) readHead(b []byte) (spent bool) {
	if c.state != http.StateNew && c.state != http.StateIdle {
		return false
	}
	c.headRead += int64(len(b))
	if room := maxKept - len(c.kept); room > 0 {
		c.kept = append(c.kept, b[:min(len(b), room)]...)
	}
	need := c.headRead - freeHead - c.held
	if need <= 0 {
		return false
	}
	if !c.s.heads.acquire(need) {
		c.refuseLocked(&RequestError{Status: http.StatusServiceUnavailable, Kind: HeadBudget})
		return true
	}
	c.held += need
	return false
}

// setState records net/http's state for the connection (its ConnState hook).
func (c *fallbackConn) setState(st http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state = st
	switch st {
	case http.StateIdle:
		// A new head is awaited: what was kept of the last one goes.
		c.inResponse = false
		c.kept = c.kept[:0]
		c.headRead = 0
		if c.hasAhead {
			c.kept = append(c.kept, c.ahead)
			c.headRead, c.hasAhead = 1, false
		}
	case http.StateActive, http.StateClosed, http.StateHijacked:
		// The head has been read (or refused): its bytes are net/http's request now.
		c.headDeadline = time.Time{}
		c.headRead = 0
		if c.held > 0 {
			c.s.heads.release(c.held)
			c.held = 0
		}
	}
}

// beginResponse notes that a handler has begun on the connection: what is written from
// now on until it is idle again is the handler's response.
func (c *fallbackConn) beginResponse() {
	c.mu.Lock()
	c.inResponse, c.hasAhead = true, false
	// The head will not be refused now: what was kept of it goes, and so does a large
	// buffer, so that an idle connection holds none.
	c.kept = c.kept[:0]
	if cap(c.kept) > 1<<10 {
		c.kept = nil
	}
	c.mu.Unlock()
}

func (c *fallbackConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if !c.inResponse && c.state != http.StateHijacked {
		if c.refused {
			c.mu.Unlock()
			return len(p), nil
		}
		if st := statusOf(p); st >= 400 && c.s.Refused != nil {
			// net/http's own answer to a request it refuses: the server's instead.
			c.refuseLocked(&RequestError{Status: st, Kind: classify(st, c.kept)})
			c.mu.Unlock()
			return len(p), nil
		}
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// SetReadDeadline is the connection's, except that net/http's deadline for the head
// begun before the hand-over is that head's own deadline at the latest.
func (c *fallbackConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	if !c.headDeadline.IsZero() {
		if t.IsZero() {
			c.headDeadline = time.Time{} // the head is read: net/http clears its deadline
		} else if t.After(c.headDeadline) {
			t = c.headDeadline
		}
	}
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

// CloseWrite closes the sending side of a TCP connection, which net/http does before
// closing a connection with unread input (see closeWriteAndWait).
func (c *fallbackConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// statusOf is the status of an HTTP/1.x response beginning p, or 0.
func statusOf(p []byte) int {
	if len(p) < 12 || !bytes.HasPrefix(p, []byte("HTTP/1.")) || p[8] != ' ' {
		return 0
	}
	st := 0
	for _, b := range p[9:12] {
		if b < '0' || b > '9' {
			return 0
		}
		st = st*10 + int(b-'0')
	}
	return st
}

// refuseLocked answers a refused request on the connection (c.mu held): with the
// server's Refused, or as net/http would without one.
func (c *fallbackConn) refuseLocked(e *RequestError) {
	if c.refused {
		return
	}
	c.refused = true
	c.s.answerRefusal(c.Conn, c.kept, c.tls, e)
}
