package h1

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// testHandler answers by path, covering what a handler can do with a response.
func testHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/small", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Multi", "a")
		w.Header().Add("X-Multi", "b")
		io.WriteString(w, "hello, world")
	})
	mux.HandleFunc("/typed", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "7")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"a":1}`)
		w.Header().Set("X-Late", "ignored") // after WriteHeader: not sent
	})
	mux.HandleFunc("/large", func(w http.ResponseWriter, r *http.Request) {
		for i := range 300 {
			fmt.Fprintf(w, "line %04d of a body with no declared length\n", i)
		}
	})
	mux.HandleFunc("/empty", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/nocontent", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusNoContent)
		if _, err := w.Write([]byte("x")); !errors.Is(err, http.ErrBodyNotAllowed) {
			panic(fmt.Sprintf("write to a 204: %v", err))
		}
	})
	mux.HandleFunc("/short", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		io.WriteString(w, "12345") // the client waits for 5 more: the connection must close
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%s %s %d %q %q", r.Method, r.URL.RequestURI(), r.ContentLength, r.Header.Get("X-Ms-Version"), b)
	})
	mux.HandleFunc("/ignorebody", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "not read")
	})
	mux.HandleFunc("/close", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		io.WriteString(w, "bye")
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		for i := range 3 {
			fmt.Fprintf(w, "part %d\n", i)
			if err := rc.Flush(); err != nil {
				panic(err)
			}
		}
	})
	mux.HandleFunc("/header", func(w http.ResponseWriter, r *http.Request) {
		w.Header()["X-Split"] = []string{"a\r\nX-Injected: 1"}
		w.Header()["Bad Name"] = []string{"dropped"}
		io.WriteString(w, "ok")
	})
	mux.HandleFunc("/tls", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tls %v", r.TLS != nil)
	})
	return mux
}

// servers starts the handler on net/http and on h1; it returns their addresses.
// set, if given, adjusts h1's http.Server before it starts.
func servers(t *testing.T, h http.Handler, set ...func(*http.Server)) (netAddr, h1Addr string, s *Server) {
	t.Helper()
	ln1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	quiet := log.New(io.Discard, "", 0)
	plain := &http.Server{Handler: h, ErrorLog: quiet}
	s = &Server{HTTP: &http.Server{Handler: h, ErrorLog: quiet, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second}}
	for _, f := range set {
		f(s.HTTP)
	}
	go plain.Serve(ln1)
	go s.Serve(ln2)
	t.Cleanup(func() { plain.Close(); s.Close() })
	return ln1.Addr().String(), ln2.Addr().String(), s
}

// exchange sends raw on a new connection and reads the responses to the requests in it
// (methods gives each one's method), then whether the connection is still open.
func exchange(t *testing.T, addr, raw string, methods ...string) (out []string, open bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for _, m := range methods {
		resp, err := http.ReadResponse(br, &http.Request{Method: m})
		if err != nil {
			out = append(out, "error: "+err.Error())
			return out, false
		}
		out = append(out, describe(resp))
	}
	// Still open: a read waits (times out) rather than ending.
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	_, err = br.ReadByte()
	var ne net.Error
	return out, errors.As(err, &ne) && ne.Timeout()
}

// describe is a response as the comparison sees it: status, headers but Date, framing
// and body.
func describe(resp *http.Response) string {
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	var keys []string
	for k := range resp.Header {
		if k != "Date" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%s length %d chunked %v close %v\n", resp.Status, resp.ContentLength, len(resp.TransferEncoding) > 0, resp.Close)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %q\n", k, resp.Header[k])
	}
	if _, ok := resp.Header["Date"]; !ok {
		b.WriteString("no Date\n")
	}
	fmt.Fprintf(&b, "%q", body)
	if err != nil {
		fmt.Fprintf(&b, " (read error %v)", err)
	}
	return b.String()
}

// TestSameAsNetHTTP sends the same bytes to net/http and to h1 and compares what comes
// back, connection state included: the plain requests h1 answers itself and those it hands
// to net/http.
func TestSameAsNetHTTP(t *testing.T) {
	netAddr, h1Addr, _ := servers(t, testHandler())
	big := strings.Repeat("x", 300<<10)
	cases := []struct {
		name    string
		raw     string
		methods []string
	}{
		{"small", "GET /small HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET"}},
		{"typed", "GET /typed HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET"}},
		{"large chunked", "GET /large HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET"}},
		{"empty", "GET /empty HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET"}},
		{"no content", "DELETE /nocontent HTTP/1.1\r\nHost: h\r\n\r\n", []string{"DELETE"}},
		{"short body", "GET /short HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET"}},
		{"head", "HEAD /small HTTP/1.1\r\nHost: h\r\n\r\nGET /small HTTP/1.1\r\nHost: h\r\n\r\n", []string{"HEAD", "GET"}},
		{"head typed", "HEAD /typed HTTP/1.1\r\nHost: h\r\n\r\n", []string{"HEAD"}},
		{"echo", "POST /echo?a=b%20c HTTP/1.1\r\nHost: h\r\nx-ms-version: 2019-02-02\r\nContent-Length: 5\r\n\r\nhello", []string{"POST"}},
		{"pipelined", "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabcGET /small HTTP/1.1\r\nHost: h\r\n\r\nGET /typed HTTP/1.1\r\nHost: h\r\n\r\n", []string{"POST", "GET", "GET"}},
		{"unread small body", "POST /ignorebody HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\nabcdGET /small HTTP/1.1\r\nHost: h\r\n\r\n", []string{"POST", "GET"}},
		{"unread large body", "POST /ignorebody HTTP/1.1\r\nHost: h\r\nContent-Length: " + fmt.Sprint(len(big)) + "\r\n\r\n" + big, []string{"POST"}},
		{"client close", "GET /small HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", []string{"GET"}},
		{"handler close", "GET /close HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET"}},
		{"stream", "GET /stream HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET"}},
		{"header splitting", "GET /header HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET"}},
		{"not found", "GET /nowhere HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET"}},
		// Handed to net/http:
		{"chunked request", "POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", []string{"POST"}},
		{"expect", "POST /echo HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi", []string{"POST"}},
		{"http/1.0", "GET /small HTTP/1.0\r\n\r\n", []string{"GET"}},
		{"no host", "GET /small HTTP/1.1\r\n\r\n", []string{"GET"}},
		{"bad header", "GET /small HTTP/1.1\r\nHost: h\r\nX-A: a\x01b\r\n\r\n", []string{"GET"}},
		{"folded", "GET /echo HTTP/1.1\r\nHost: h\r\nX-Ms-Version: a\r\n b\r\n\r\n", []string{"GET"}},
		{"after a plain one", "GET /small HTTP/1.1\r\nHost: h\r\n\r\nPOST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\nGET /typed HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET", "POST", "GET"}},
		{"large head", "GET /echo HTTP/1.1\r\nHost: h\r\nX-Big: " + strings.Repeat("b", 6000) + "\r\n\r\n", []string{"GET"}},
		{"garbage", "NOT HTTP\r\n\r\n", []string{"GET"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want, wantOpen := exchange(t, netAddr, c.raw, c.methods...)
			got, gotOpen := exchange(t, h1Addr, c.raw, c.methods...)
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

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "(none)"
}

// TestKeepAlive: a Go client reuses one connection for many requests, bodies and all.
func TestKeepAlive(t *testing.T) {
	var mu sync.Mutex
	states := map[net.Conn][]http.ConnState{}
	_, addr, _ := servers(t, testHandler(), func(hs *http.Server) {
		hs.ConnState = func(c net.Conn, st http.ConnState) {
			mu.Lock()
			defer mu.Unlock()
			states[c] = append(states[c], st)
		}
	})
	tr := &http.Transport{MaxConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr}
	for i := range 50 {
		resp, err := cl.Post("http://"+addr+"/echo", "text/plain", strings.NewReader(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf("POST /echo %d \"\" %q", len(fmt.Sprint(i)), fmt.Sprint(i)); string(b) != want {
			t.Fatalf("request %d: %q, want %q", i, b, want)
		}
	}
	tr.CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(states)
		var seq []http.ConnState
		for _, v := range states {
			seq = slices.Clone(v)
		}
		mu.Unlock()
		if n != 1 {
			t.Fatalf("%d connections, want 1", n)
		}
		if len(seq) > 0 && seq[len(seq)-1] == http.StateClosed || time.Now().After(deadline) {
			if len(seq) != 2+2*50 || seq[0] != http.StateNew || seq[1] != http.StateActive || seq[2] != http.StateIdle || seq[len(seq)-1] != http.StateClosed {
				t.Fatalf("states %v, want new, then active and idle for each request, then closed", seq)
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPanic: a panicking handler's connection is closed without an answer, and the panic
// logged unless it is http.ErrAbortHandler.
func TestPanic(t *testing.T) {
	var logged bytes.Buffer
	var mu sync.Mutex
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "2")
		if r.URL.Path == "/abort" {
			panic(http.ErrAbortHandler)
		}
		panic("boom")
	})
	_, addr, _ := servers(t, h, func(hs *http.Server) {
		hs.ErrorLog = log.New(writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return logged.Write(p)
		}), "", 0)
	})
	for _, path := range []string{"/abort", "/boom"} {
		out, open := exchange(t, addr, "GET "+path+" HTTP/1.1\r\nHost: h\r\n\r\n", "GET")
		if open || len(out) != 1 || !strings.Contains(out[0], "EOF") {
			t.Errorf("%s: %q, open %v; want the connection closed without an answer", path, out, open)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logged.String(), "panic serving") || !strings.Contains(logged.String(), "boom") || strings.Count(logged.String(), "panic serving") != 1 {
		t.Errorf("log %q, want the one panic that is not ErrAbortHandler", logged.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestShutdown: shutdown lets a running request finish (its answer says Connection:
// close), closes idle connections at once, refuses new ones and ends Serve.
func TestShutdown(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			<-release
		}
		io.WriteString(w, "done")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{HTTP: &http.Server{Handler: h}}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	addr := ln.Addr().String()

	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	io.WriteString(idle, "GET /fast HTTP/1.1\r\nHost: h\r\n\r\n")
	ibr := bufio.NewReader(idle)
	if resp, err := http.ReadResponse(ibr, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("idle connection's request: %v", err)
	} else {
		io.Copy(io.Discard, resp.Body)
	}
	busy, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	io.WriteString(busy, "GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
	<-started

	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	// The idle connection is closed.
	idle.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := ibr.ReadByte(); err != io.EOF {
		t.Errorf("idle connection: %v, want EOF", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve: %v, want ErrServerClosed", err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Error("a new connection was accepted after shutdown began")
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with a request running", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	busy.SetReadDeadline(time.Now().Add(2 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(busy), nil)
	if err != nil {
		t.Fatalf("running request: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "done" || !resp.Close {
		t.Errorf("running request: %q close %v, want done, with Connection: close", b, resp.Close)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// TestShutdownDeadline: Shutdown gives up when its context ends with a request still
// running, and Close then cancels the request's context and closes its connection.
func TestShutdownDeadline(t *testing.T) {
	started := make(chan struct{})
	cancelled := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
		close(cancelled)
	})
	_, addr, s := servers(t, h)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want DeadlineExceeded", err)
	}
	s.Close()
	select {
	case <-cancelled:
	case <-time.After(2 * time.Second):
		t.Fatal("Close left the request's context alive")
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("connection after Close: %v, want EOF", err)
	}
}

// TestTimeouts: a head that stalls is cut off after ReadHeaderTimeout, an idle
// connection after IdleTimeout.
func TestTimeouts(t *testing.T) {
	_, addr, _ := servers(t, testHandler(), func(hs *http.Server) {
		hs.ReadHeaderTimeout = 200 * time.Millisecond
		hs.IdleTimeout = 300 * time.Millisecond
	})
	for _, c := range []struct {
		name, raw string
		after     time.Duration
	}{
		{"stalled head", "GET /small HTTP/1.1\r\nHo", 200 * time.Millisecond},
		{"idle", "GET /small HTTP/1.1\r\nHost: h\r\n\r\n", 300 * time.Millisecond},
		{"stalled second head", "GET /small HTTP/1.1\r\nHost: h\r\n\r\nGET /sm", 200 * time.Millisecond},
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		io.WriteString(conn, c.raw)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = io.Copy(io.Discard, conn)
		elapsed := time.Since(start)
		conn.Close()
		if err != nil || elapsed < c.after || elapsed > c.after+2*time.Second {
			t.Errorf("%s: closed after %v (%v), want after %v", c.name, elapsed, err, c.after)
		}
	}
}

// TestDeadlines: the handler's deadlines act on the connection, and a response's write
// deadline does not outlive it.
func TestDeadlines(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		switch r.URL.Path {
		case "/read":
			rc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			_, err := io.ReadAll(r.Body)
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				panic(fmt.Sprintf("body read: %v, want a timeout", err))
			}
			w.Header().Set("Connection", "close")
			io.WriteString(w, "timed out")
		case "/write":
			if err := rc.SetWriteDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
				panic(err)
			}
			io.WriteString(w, "first")
		default:
			io.WriteString(w, "second")
		}
	})
	_, addr, _ := servers(t, h)
	out, open := exchange(t, addr, "POST /read HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc", "POST")
	if len(out) != 1 || !strings.Contains(out[0], `"timed out"`) || open {
		t.Errorf("body past its read deadline: %q open %v", out, open)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i, path := range []string{"/write", "/after"} {
		if i == 1 {
			time.Sleep(150 * time.Millisecond) // past the first response's write deadline
		}
		io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: h\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
	}
}

// testTLS is a server config with httptest's certificate, and a client config trusting it.
func testTLS() (server, client *tls.Config) {
	ts := httptest.NewUnstartedServer(http.NotFoundHandler())
	ts.StartTLS()
	defer ts.Close()
	return ts.TLS.Clone(), ts.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
}

// tlsServer starts h on h1 behind tls.NewListener; it returns the address, a client
// config trusting the server, and the server's error log. next, if given, is the ALPN
// list the server offers.
func tlsServer(t *testing.T, h http.Handler, timeout time.Duration, next ...string) (addr string, client *tls.Config, errLog *syncBuffer) {
	t.Helper()
	cfg, client := testTLS()
	cfg.NextProtos = next
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	errLog = &syncBuffer{}
	s := &Server{HTTP: &http.Server{Handler: h, ErrorLog: log.New(errLog, "", 0), ReadHeaderTimeout: timeout, IdleTimeout: 5 * time.Second}}
	go s.Serve(tls.NewListener(ln, cfg))
	t.Cleanup(func() { s.Close() })
	return ln.Addr().String(), client, errLog
}

// syncBuffer is a bytes.Buffer safe for a logger and a test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestTLS: TLS connections are served here after a handshake of their own, with
// Request.TLS set; a request net/http must serve (a chunked body) takes the connection
// there with its Request.TLS kept; a connection that negotiates h2 goes to net/http as it
// is; a client speaking plain HTTP to the TLS port gets net/http's 400, and one that
// never begins its handshake is closed after the timeout; both are logged as net/http
// logs them.
func TestTLS(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		served := "net/http"
		if _, ok := w.(*response); ok {
			served = "h1"
		}
		fmt.Fprintf(w, "%s HTTP/%d tls=%v", served, r.ProtoMajor, r.TLS != nil && r.TLS.HandshakeComplete)
	})
	addr, client, errLog := tlsServer(t, h, 300*time.Millisecond)

	conn, err := tls.Dial("tcp", addr, client)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(conn)
	for i, c := range []struct{ raw, want string }{
		{"GET /a HTTP/1.1\r\nHost: h\r\n\r\n", "h1 HTTP/1 tls=true"},
		{"POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc", "h1 HTTP/1 tls=true"},
		{"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "net/http HTTP/1 tls=true"},
		{"GET /d HTTP/1.1\r\nHost: h\r\n\r\n", "net/http HTTP/1 tls=true"},
	} {
		io.WriteString(conn, c.raw)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if string(b) != c.want {
			t.Errorf("request %d: %q, want %q", i+1, b, c.want)
		}
	}

	// ALPN: h2 is net/http's.
	addr2, client2, _ := tlsServer(t, h, time.Second, "h2", "http/1.1")
	tr := &http.Transport{TLSClientConfig: client2, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("https://" + addr2 + "/h2")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "net/http HTTP/2 tls=true" {
		t.Errorf("h2: %q", b)
	}

	// Plain HTTP to the TLS port.
	out, _ := exchange(t, addr, "GET / HTTP/1.1\r\nHost: h\r\n\r\n", "GET")
	if len(out) != 1 || !strings.Contains(out[0], "400") || !strings.Contains(out[0], "Client sent an HTTP request to an HTTPS server") {
		t.Errorf("plain HTTP to the TLS port: %q", out)
	}
	// A client that never begins its handshake.
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetReadDeadline(time.Now().Add(3 * time.Second))
	start := time.Now()
	if _, err := raw.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("stalled handshake: read %v, want EOF", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 2*time.Second {
		t.Errorf("stalled handshake closed after %v, want the 300ms timeout", d)
	}
	time.Sleep(50 * time.Millisecond)
	logged := errLog.String()
	for _, want := range []string{"http: TLS handshake error from 127.0.0.1:", "client sent an HTTP request to an HTTPS server", "timeout"} {
		if !strings.Contains(logged, want) {
			t.Errorf("log lacks %q:\n%s", want, logged)
		}
	}
}

// TestAnswerBeforeClose: a connection closed with input unread (a body the handler
// refused, a head too large for net/http) still delivers its answer: the server closes
// its sending side and waits before closing, so the client reads the response rather
// than a reset. Both servers alike.
func TestAnswerBeforeClose(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		http.Error(w, "too large", http.StatusRequestEntityTooLarge)
	})
	netAddr, h1Addr, _ := servers(t, h)
	for _, addr := range []string{netAddr, h1Addr} {
		for _, c := range []struct {
			name, head string
			body       int
			want       int
		}{
			{"refused body", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 8388608\r\n\r\n", 8 << 20, http.StatusRequestEntityTooLarge},
			{"huge head", "GET /?q=" + strings.Repeat("A", 2<<20) + " HTTP/1.1\r\nHost: h\r\n\r\n", 0, http.StatusRequestHeaderFieldsTooLarge},
		} {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			go func() {
				// The server stops reading part-way: these writes may fail.
				if _, err := io.WriteString(conn, c.head); err == nil && c.body > 0 {
					conn.Write(make([]byte, c.body))
				}
			}()
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Errorf("%s (%s): %v, want a %d", c.name, addr, err, c.want)
				conn.Close()
				continue
			}
			if resp.StatusCode != c.want {
				t.Errorf("%s (%s): %d, want %d", c.name, addr, resp.StatusCode, c.want)
			}
			io.Copy(io.Discard, resp.Body)
			// Then the end of the stream (the server's CloseWrite), not a reset (a close
			// with the client's bytes unread).
			if _, err := br.ReadByte(); err != io.EOF {
				t.Errorf("%s (%s): after the response %v, want EOF", c.name, addr, err)
			}
			conn.Close()
		}
	}
}

// TestClientGone: a request's context is cancelled when its client closes the connection
// while the handler runs (once its body is read, as net/http does), and not when the
// client sends its next request early.
func TestClientGone(t *testing.T) {
	t.Run("plain", func(t *testing.T) { testClientGone(t, false) })
	t.Run("tls", func(t *testing.T) { testClientGone(t, true) })
}

func testClientGone(t *testing.T, useTLS bool) {
	cancelled := make(chan string, 4)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
			cancelled <- r.URL.Path
		case <-time.After(500 * time.Millisecond):
		}
		io.WriteString(w, r.Method+" done")
	})
	var addr string
	dial := func() (net.Conn, error) { return net.Dial("tcp", addr) }
	if useTLS {
		var client *tls.Config
		addr, client, _ = tlsServer(t, h, 5*time.Second)
		dial = func() (net.Conn, error) { return tls.Dial("tcp", addr, client) }
	} else {
		_, addr, _ = servers(t, h)
	}
	for _, c := range []struct{ name, raw string }{
		{"no body", "GET /nobody HTTP/1.1\r\nHost: h\r\n\r\n"},
		{"body", "POST /body HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc"},
	} {
		conn, err := dial()
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(conn, c.raw)
		time.Sleep(50 * time.Millisecond)
		start := time.Now()
		conn.Close()
		select {
		case <-cancelled:
			if d := time.Since(start); d > 200*time.Millisecond {
				t.Errorf("%s: cancelled %v after the client went", c.name, d)
			}
		case <-time.After(time.Second):
			t.Errorf("%s: the request's context outlived its client", c.name)
		}
	}
	if !useTLS {
		// Two requests at once: the first is not cancelled, and the second is answered.
		out, _ := exchange(t, addr, "GET /first HTTP/1.1\r\nHost: h\r\n\r\nGET /second HTTP/1.1\r\nHost: h\r\n\r\n", "GET", "GET")
		if len(out) != 2 || !strings.Contains(out[0], `"GET done"`) || !strings.Contains(out[1], `"GET done"`) {
			t.Errorf("pipelined: %q", out)
		}
	}
	// A request whose client waits, sending its next request while the first runs.
	conn, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET /early1 HTTP/1.1\r\nHost: h\r\n\r\n")
	time.Sleep(50 * time.Millisecond) // the watch has begun
	io.WriteString(conn, "GET /early2 HTTP/1.1\r\nHost: h\r\n\r\n")
	br := bufio.NewReader(conn)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	for i := range 2 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("early request %d: %v", i+1, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if string(b) != "GET done" {
			t.Errorf("early request %d: %q", i+1, b)
		}
	}
	// The second ran with its client silent: its watcher was cut short at its end, and
	// the connection serves a third.
	io.WriteString(conn, "GET /after HTTP/1.1\r\nHost: h\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("request after a watched one: %v", err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "GET done" {
		t.Errorf("request after a watched one: %q", b)
	}
	select {
	case p := <-cancelled:
		t.Errorf("%s cancelled with its client still there", p)
	default:
	}
}
