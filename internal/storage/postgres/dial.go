package postgres

import (
	"context"
	"net"
	"syscall"
	"time"
)

// Dead hosts, noticed in seconds.
//
// A database host that dies or is cut off without resetting its connections leaves them
// open on this side: a statement waiting for its answer would wait until TCP gives up on
// the unacknowledged request (about 15 minutes of retransmissions on Linux), and an idle
// connection would be handed out as if alive. PostgreSQL's statement_timeout cannot help:
// it runs on the server that is gone. So every connection the engine makes (to the
// primary and to each replica) is a TCP connection that
//
//   - sends keepalive probes after tcpKeepAliveIdle without traffic, every
//     tcpKeepAliveInterval, and is dropped after tcpKeepAliveCount unanswered ones: an
//     idle connection to a dead host is found in about 10 s;
//   - is dropped when data it sent stays unacknowledged for tcpUserTimeout (Linux's
//     TCP_USER_TIMEOUT, which also bounds the keepalive probes): a statement sent to a
//     dead host fails within it instead of minutes later.
//
// A live server acknowledges at once, however long its statement runs, so neither bound
// ends a slow statement; a replica that is alive but does not answer (hung) is bounded by
// Options.ReplicaReadTimeout instead (views.go). A Unix-socket connection is left as it
// is: it has no host to lose.
const (
	tcpKeepAliveIdle     = 5 * time.Second
	tcpKeepAliveInterval = time.Second
	tcpKeepAliveCount    = 5
	tcpUserTimeout       = 10 * time.Second
)

// dialer returns the connections' dial function (pgconn.Config.DialFunc). timeout bounds
// the TCP connect (0: none beyond the context's, which pgconn bounds by connect_timeout).
func dialer(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{
		Timeout: timeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable:   true,
			Idle:     tcpKeepAliveIdle,
			Interval: tcpKeepAliveInterval,
			Count:    tcpKeepAliveCount,
		},
		Control: func(network, _ string, c syscall.RawConn) error {
			if network != "tcp" && network != "tcp4" && network != "tcp6" {
				return nil
			}
			var serr error
			if err := c.Control(func(fd uintptr) { serr = setUserTimeout(fd, tcpUserTimeout) }); err != nil {
				return err
			}
			return serr
		},
	}
	return d.DialContext
}
