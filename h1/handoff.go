package h1

import (
	"crypto/tls"
	"net"
	"sync"
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

// replayConn is a connection handed over after some of its bytes were read: its reads
// return those bytes first. tls is the state of a TLS connection (see tlsRestorer).
type replayConn struct {
	net.Conn
	pending []byte
	tls     *tls.ConnectionState
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite closes the sending side of a TCP connection, which net/http does before
// closing a connection with unread input (see closeWriteAndWait).
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
