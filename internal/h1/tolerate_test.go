package h1

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestTolerance: what net/http tolerates, h1 tolerates the same way: a head whose lines
// end in a bare LF, and up to four stray CR or LF bytes after a POST's body (RFC 9112
// §2.2, which net/http allows after a POST only). Each is answered as net/http answers
// it, and at once.
func TestTolerance(t *testing.T) {
	netAddr, h1Addr, _ := servers(t, testHandler())
	cases := []struct {
		name    string
		raw     string
		methods []string
	}{
		{"bare LF", "GET /small HTTP/1.1\nHost: h\n\n", []string{"GET"}},
		{"bare LF after CRLF lines", "GET /small HTTP/1.1\r\nHost: h\r\n\n", []string{"GET"}},
		{"bare LF, then a plain one", "GET /small HTTP/1.1\nHost: h\n\nGET /typed HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET", "GET"}},
		{"CRLF after a POST", "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc\r\nGET /small HTTP/1.1\r\nHost: h\r\n\r\n", []string{"POST", "GET"}},
		{"four after a POST", "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc\r\n\r\nGET /small HTTP/1.1\r\nHost: h\r\n\r\n", []string{"POST", "GET"}},
		{"LF LF after a POST", "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc\n\nGET /small HTTP/1.1\r\nHost: h\r\n\r\n", []string{"POST", "GET"}},
		{"five after a POST", "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc\r\n\r\n\nGET /small HTTP/1.1\r\nHost: h\r\n\r\n", []string{"POST", "GET"}},
		{"CRLF after a PUT", "PUT /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc\r\nGET /small HTTP/1.1\r\nHost: h\r\n\r\n", []string{"PUT", "GET"}},
		{"CRLF before the first", "\r\nGET /small HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want, wantOpen := exchange(t, netAddr, c.raw, c.methods...)
			start := time.Now()
			got, gotOpen := exchange(t, h1Addr, c.raw, c.methods...)
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("answered after %v", d)
			}
			for i := range want {
				if i >= len(got) || got[i] != want[i] {
					t.Errorf("response %d:\nnet/http: %s\nh1:       %s", i, want[i], at(got, i))
				}
			}
			if gotOpen != wantOpen {
				t.Errorf("connection open after: %v, net/http's %v", gotOpen, wantOpen)
			}
		})
	}
}

// TestHeaderDeadlineAcrossHandOver: a head that h1 hands to net/http part-way (it
// outgrows h1's buffer) keeps the deadline it began with: ReadHeaderTimeout from its
// first byte, not a fresh one from the hand-over.
func TestHeaderDeadlineAcrossHandOver(t *testing.T) {
	const timeout = time.Second
	_, addr, _ := servers(t, testHandler(), func(hs *http.Server) { hs.ReadHeaderTimeout = timeout })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	io.WriteString(c, "GET /small HTTP/1.1\r\nHost: h\r\nX-A: "+strings.Repeat("a", 2000)+"\r\n")
	time.Sleep(700 * time.Millisecond)
	// Past h1's buffer: the connection goes to net/http, and the head stalls there.
	io.WriteString(c, "X-B: "+strings.Repeat("b", 3000)+"\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	io.Copy(io.Discard, c)
	if d := time.Since(start); d < timeout-50*time.Millisecond || d > timeout+400*time.Millisecond {
		t.Errorf("stalled head closed after %v, want %v from its first byte", d, timeout)
	}
}
