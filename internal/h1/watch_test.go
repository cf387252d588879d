package h1

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestWatchLooksAtRunningRequestsOnly: while a request runs, the watch for clients that
// go away looks at the running requests, not at every connection: idle keep-alive
// connections cost it nothing, however many there are.
func TestWatchLooksAtRunningRequestsOnly(t *testing.T) {
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		io.WriteString(w, "ok")
	})
	_, addr, s := servers(t, h)
	const idle = 200
	for range idle {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "GET /fast HTTP/1.1\r\nHost: h\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
	}
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	io.WriteString(slow, "GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
	time.Sleep(50 * time.Millisecond)
	looks0, ticks0 := s.watchLooks.Load(), s.watchTicks.Load()
	time.Sleep(300 * time.Millisecond)
	looks, ticks := s.watchLooks.Load()-looks0, s.watchTicks.Load()-ticks0
	close(release)
	if ticks < 5 {
		t.Fatalf("%d looks in 300ms with a request running: the watch is not running", ticks)
	}
	if perTick := float64(looks) / float64(ticks); perTick > 2 {
		t.Errorf("the watch looked at %.1f connections each time (%d idle, 1 running), want 1", perTick, idle)
	}
}
