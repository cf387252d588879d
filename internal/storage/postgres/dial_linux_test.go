package postgres

import (
	"context"
	"net"
	"syscall"
	"testing"

	"github.com/ceruleandb/cerulean/internal/pgtest"
)

// TestDialKeepAlive: every connection the engine makes, to the primary and to a replica,
// probes an idle peer after 5 s (every second, 5 times) and gives up on unacknowledged
// data after 10 s, so a dead host is noticed in seconds rather than in TCP's ~15 minutes.
func TestDialKeepAlive(t *testing.T) {
	ctx := context.Background()
	prompt, _, _ := pgtest.ReplicaURLs(t)
	e, err := Open(ctx, internalURL(t), Options{ReplicaURLs: []string{prompt}, DisablePurger: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	check := func(name string, c net.Conn) {
		t.Helper()
		tc, ok := c.(*net.TCPConn)
		if !ok {
			t.Fatalf("%s: %T, want a TCP connection", name, c)
		}
		raw, err := tc.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		want := []struct {
			what       string
			level, opt int
			value      int
		}{
			{"SO_KEEPALIVE", syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1},
			{"TCP_KEEPIDLE", syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, 5},
			{"TCP_KEEPINTVL", syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, 1},
			{"TCP_KEEPCNT", syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT, 5},
			{"TCP_USER_TIMEOUT", syscall.IPPROTO_TCP, tcpUserTimeoutOpt, 10_000},
		}
		for _, w := range want {
			var got int
			var gerr error
			if err := raw.Control(func(fd uintptr) { got, gerr = syscall.GetsockoptInt(int(fd), w.level, w.opt) }); err != nil {
				t.Fatal(err)
			}
			if gerr != nil || got != w.value {
				t.Errorf("%s: %s = %d (%v), want %d", name, w.what, got, gerr, w.value)
			}
		}
	}
	c, err := e.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check("primary", c.Conn().PgConn().Conn())
	c.Release()
	c, err = e.replicas.list[0].pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check("replica", c.Conn().PgConn().Conn())
	c.Release()
}
