package h1

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestLateWritesStayOut: a ResponseWriter (and its header map) that a handler keeps past
// its return cannot touch the next response on the connection, which behind a pooling
// proxy belongs to another user. The late calls fail (or do nothing) instead.
func TestLateWritesStayOut(t *testing.T) {
	kept := make(chan http.ResponseWriter, 1)
	keptHeader := make(chan http.Header, 1)
	secondRunning, proceed := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/first":
			hd := w.Header()
			hd.Set("X-First", "1")
			io.WriteString(w, "first")
			kept <- w
			keptHeader <- hd
		default:
			close(secondRunning)
			<-proceed
			io.WriteString(w, "second")
		}
	})
	_, addr, _ := servers(t, h)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	io.WriteString(c, "GET /first HTTP/1.1\r\nHost: h\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "first" {
		t.Fatalf("first response %q", b)
	}
	w, hd := <-kept, <-keptHeader

	// The late calls, while the next request's handler runs.
	io.WriteString(c, "GET /second HTTP/1.1\r\nHost: h\r\n\r\n")
	<-secondRunning
	hd.Set("X-Late-Map", "leaked")
	w.Header().Set("X-Late", "leaked")
	n, werr := io.WriteString(w, "LATE")
	w.WriteHeader(http.StatusTeapot)
	http.NewResponseController(w).Flush()
	close(proceed)

	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "second" || resp.StatusCode != http.StatusOK {
		t.Errorf("second response: %d %q, want 200 \"second\"", resp.StatusCode, b)
	}
	for _, k := range []string{"X-Late", "X-Late-Map", "X-First"} {
		if v := resp.Header.Get(k); v != "" {
			t.Errorf("second response carries %s: %q", k, v)
		}
	}
	if werr == nil || n != 0 {
		t.Errorf("late Write: %d, %v; want 0 and an error", n, werr)
	}
	if !errors.Is(werr, ErrHandlerReturned) {
		t.Errorf("late Write: %v, want ErrHandlerReturned", werr)
	}
	// Nothing more came on the connection.
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if extra, _ := io.ReadAll(br); len(extra) > 0 && !strings.Contains(string(extra), "timeout") {
		t.Errorf("bytes after the second response: %q", extra)
	}
}
