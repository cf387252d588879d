package h1

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// refusingServer starts h1 with a Refused hook that answers "<kind> <method> <path>
// <host>" with the refusal's status; set adjusts it before it starts.
func refusingServer(t *testing.T, set ...func(*Server)) (addr string, s *Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s = &Server{
		HTTP: &http.Server{Handler: testHandler(), ErrorLog: log.New(io.Discard, "", 0),
			ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second, MaxHeaderBytes: 16 << 10},
		Refused: func(w http.ResponseWriter, r *http.Request, e *RequestError) {
			w.Header().Set("X-Kind", e.Kind.String())
			w.WriteHeader(e.Status)
			fmt.Fprintf(w, "%s|%s|%s|%s", e.Kind, r.Method, r.URL.Path, r.Host)
		},
	}
	for _, f := range set {
		f(s)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	return ln.Addr().String(), s
}

// TestRefused: a request net/http refuses before any handler (it will not parse its
// head) is answered by Server.Refused, with the status net/http would answer and what was
// wrong, and the request as far as it could be read; on a connection of its own, after a
// request h1 answered, and after one net/http answered (the connection is net/http's
// then), and with FallbackOnly.
func TestRefused(t *testing.T) {
	ok := "GET /small HTTP/1.1\r\nHost: h\r\n\r\n"
	chunked := "POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"
	cases := []struct {
		name, raw string
		status    int
		want      string // the hook's body
	}{
		{"bad escape", "GET /devstoreaccount1/Tables%zz HTTP/1.1\r\nHost: h\r\n\r\n", 400, "invalid request target|GET|/devstoreaccount1/Tables%zz|h"},
		{"DEL in a header", "GET /t HTTP/1.1\r\nHost: h\r\nX-Ms-Version: 2019\x7f02-02\r\n\r\n", 400, "invalid header|GET|/t|h"},
		{"no colon", "GET /t HTTP/1.1\r\nHost: h\r\nNoColon\r\n\r\n", 400, "invalid header|GET|/t|h"},
		{"two lengths", "POST /t HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400, "invalid header|POST|/t|h"},
		{"no Host", "GET /t HTTP/1.1\r\nX-A: b\r\n\r\n", 400, "missing Host header|GET|/t|"},
		{"bad Host", "GET /t HTTP/1.1\r\nHost: a b\r\n\r\n", 400, "invalid Host header|GET|/t|"},
		{"bad method", "G(T /t HTTP/1.1\r\nHost: h\r\n\r\n", 400, "invalid method||/t|h"},
		{"garbage", "NOT HTTP\r\n\r\n", 400, "malformed request||/|"},
		{"HTTP/2.0", "GET /t HTTP/2.0\r\nHost: h\r\n\r\n", 505, "unsupported HTTP version|GET|/t|h"},
		{"gzip coding", "POST /t HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "unsupported transfer encoding|POST|/t|h"},
		{"unknown expectation", "POST /t HTTP/1.1\r\nHost: h\r\nExpect: coffee\r\nContent-Length: 1\r\n\r\nx", 417, "unknown expectation|POST|/t|h"},
		{"too large", "GET /t HTTP/1.1\r\nHost: h\r\nX-Big: " + strings.Repeat("b", 40<<10) + "\r\n\r\n", 431, "request head too large|GET|/t|h"},
	}
	for _, mode := range []struct {
		name   string
		before string
		only   bool
	}{{"first", "", false}, {"after h1", ok, false}, {"after net/http", chunked, false}, {"fallback only", "", true}} {
		addr, _ := refusingServer(t, func(s *Server) { s.FallbackOnly = mode.only })
		for _, c := range cases {
			t.Run(mode.name+"/"+c.name, func(t *testing.T) {
				// The request after the one before, once that one is answered.
				out, open := exchange(t, addr, c.raw, "GET")
				if mode.before != "" {
					out, open = exchangeSeq(t, addr, []string{mode.before, c.raw})
				}
				got := at(out, len(out)-1)
				want := fmt.Sprintf("%d %s", c.status, http.StatusText(c.status))
				if !strings.HasPrefix(got, want) || !strings.Contains(got, fmt.Sprintf("%q", c.want)) || !strings.Contains(got, "close true") {
					t.Errorf("got %s\nwant %s, Connection: close and %q", got, want, c.want)
				}
				if open {
					t.Error("connection left open")
				}
			})
		}
	}
}

// exchangeSeq is exchange with each request sent once the one before is answered (all
// GET but for their method).
func exchangeSeq(t *testing.T, addr string, raws []string) (out []string, open bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	for _, raw := range raws {
		if _, err := io.WriteString(c, raw); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, &http.Request{Method: strings.Fields(raw + " x")[0]})
		if err != nil {
			out = append(out, "error: "+err.Error())
			return out, false
		}
		out = append(out, describe(resp))
	}
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	_, err = br.ReadByte()
	var ne net.Error
	return out, errors.As(err, &ne) && ne.Timeout()
}

// TestRefusedPipelined: a refused request pipelined behind one net/http answers is
// answered by Refused too, with net/http's status (what net/http read ahead of it while
// serving the one before is not seen, so what was wrong with it may not be told).
func TestRefusedPipelined(t *testing.T) {
	addr, _ := refusingServer(t)
	raw := "POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n" +
		"GET /devstoreaccount1/Tables%zz HTTP/1.1\r\nHost: h\r\n\r\n"
	out, open := exchange(t, addr, raw, "POST", "GET")
	if !strings.HasPrefix(at(out, 0), "200 ") || !strings.HasPrefix(at(out, 1), "400 ") || !strings.Contains(at(out, 1), "X-Kind") || open {
		t.Errorf("%q open %v", out, open)
	}
}

// TestHeadBudget: the heads net/http reads past the first 4 KiB share the server's budget
// (MaxHeadMemory): a head that would go past it is refused with 503 while small heads are
// still served, and the budget comes back when the heads holding it end.
func TestHeadBudget(t *testing.T) {
	addr, s := refusingServer(t, func(s *Server) {
		s.MaxHeadMemory = 100 << 10
		s.HTTP.MaxHeaderBytes = 60 << 10
	})
	// Unfinished heads of 36 KiB each: 32 KiB past the free 4 KiB.
	var holders []net.Conn
	defer func() {
		for _, c := range holders {
			c.Close()
		}
	}()
	part := "GET /small HTTP/1.1\r\nHost: h\r\nX-Big: " + strings.Repeat("b", 36<<10)
	hold := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, part)
		return c
	}
	for range 3 {
		holders = append(holders, hold())
	}
	waitFor(t, func() bool { return s.heads.used.Load() >= 3*(32<<10) })
	// A fourth does not fit.
	out, _ := exchange(t, addr, part+"\r\n\r\n", "GET")
	if got := at(out, 0); !strings.HasPrefix(got, "503 ") || !strings.Contains(got, "no memory for the request head") {
		t.Errorf("head past the budget: %s", got)
	}
	// Small heads are served all the while.
	if out, _ := exchange(t, addr, "GET /small HTTP/1.1\r\nHost: h\r\n\r\n", "GET"); !strings.HasPrefix(at(out, 0), "200 ") {
		t.Errorf("small head meanwhile: %s", at(out, 0))
	}
	// The holders go: their budget comes back, and a large head is served.
	for _, c := range holders {
		c.Close()
	}
	holders = nil
	waitFor(t, func() bool { return s.heads.used.Load() == 0 })
	if out, _ := exchange(t, addr, part+"\r\n\r\n", "GET"); !strings.HasPrefix(at(out, 0), "200 ") {
		t.Errorf("large head after: %s", at(out, 0))
	}
	if u := s.heads.used.Load(); u != 0 {
		t.Errorf("%d bytes of the budget still taken after every head ended", u)
	}
}

// waitFor waits up to 5 seconds for cond.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFallbackOnly: with FallbackOnly, net/http serves every request, TLS ones with their
// Request.TLS.
func TestFallbackOnly(t *testing.T) {
	var mu sync.Mutex
	var served []string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, mine := w.(*response)
		mu.Lock()
		served = append(served, fmt.Sprintf("h1=%v tls=%v", mine, r.TLS != nil))
		mu.Unlock()
		io.WriteString(w, "ok")
	})
	addr, _ := refusingServer(t, func(s *Server) { s.FallbackOnly = true; s.HTTP.Handler = h })
	out, open := exchange(t, addr, "GET /a HTTP/1.1\r\nHost: h\r\n\r\nGET /b HTTP/1.1\r\nHost: h\r\n\r\n", "GET", "GET")
	if !strings.HasPrefix(at(out, 1), "200 ") || !open {
		t.Errorf("%q open %v", out, open)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(served) != 2 || served[0] != "h1=false tls=false" || served[1] != served[0] {
		t.Errorf("served %q, want both by net/http", served)
	}
}
