package h1

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// A RequestError is why a request was refused before any handler could see it: net/http
// would not take its head (fallbackConn), or the memory for unfinished heads was spent.
// Server.Refused gets it with the request as far as it could be read.
type RequestError struct {
	// Status is the status net/http answers (400, 417, 431, 501 or 505), or 503 for
	// HeadBudget.
	Status int
	// Kind is what was wrong with the request.
	Kind RefusalKind
}

func (e *RequestError) Error() string {
	return "h1: request refused (" + strconv.Itoa(e.Status) + "): " + e.Kind.String()
}

// RefusalKind is what was wrong with a refused request.
type RefusalKind int

// The kinds of refusal.
const (
	// Malformed is a request whose head could not be read as HTTP at all (a bad request
	// line, a head cut short by the end of the connection).
	Malformed RefusalKind = iota
	// BadMethod is a method that is not a token.
	BadMethod
	// BadTarget is a request target that is not a URL (a bad percent-escape).
	BadTarget
	// BadHeader is a header line net/http cannot read or will not take (a control byte in
	// a value, no colon, conflicting Content-Length or Transfer-Encoding).
	BadHeader
	// MissingHost is an HTTP/1.1 request without a Host header.
	MissingHost
	// BadHost is a Host header that is not a host.
	BadHost
	// HeadTooLarge is a head over the fallback's MaxHeaderBytes.
	HeadTooLarge
	// HeadBudget is a head that did not fit in the memory for unfinished heads
	// (Server.MaxHeadMemory) at the time: the server is busy, not the request wrong.
	HeadBudget
	// UnsupportedVersion is an HTTP version other than 1.x.
	UnsupportedVersion
	// UnsupportedTransferEncoding is a transfer coding other than chunked.
	UnsupportedTransferEncoding
	// UnknownExpectation is an Expect header other than 100-continue.
	UnknownExpectation
)

var kindNames = [...]string{
	Malformed: "malformed request", BadMethod: "invalid method", BadTarget: "invalid request target",
	BadHeader: "invalid header", MissingHost: "missing Host header", BadHost: "invalid Host header",
	HeadTooLarge: "request head too large", HeadBudget: "no memory for the request head",
	UnsupportedVersion: "unsupported HTTP version", UnsupportedTransferEncoding: "unsupported transfer encoding",
	UnknownExpectation: "unknown expectation",
}

func (k RefusalKind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "refusal " + strconv.Itoa(int(k))
}

// classify tells what net/http found wrong with head (as far as it was kept) from the
// status it answered.
func classify(status int, head []byte) RefusalKind {
	switch status {
	case http.StatusRequestHeaderFieldsTooLarge:
		return HeadTooLarge
	case http.StatusNotImplemented:
		return UnsupportedTransferEncoding
	case http.StatusHTTPVersionNotSupported:
		return UnsupportedVersion
	case http.StatusExpectationFailed:
		return UnknownExpectation
	}
	line, _, ok := bytes.Cut(head, []byte("\n"))
	if !ok {
		return Malformed
	}
	method, target, proto, ok := requestLine(string(bytes.TrimSuffix(line, []byte("\r"))))
	if !ok {
		return Malformed
	}
	if !isToken(method) {
		return BadMethod
	}
	if _, _, ok := http.ParseHTTPVersion(proto); !ok {
		return Malformed
	}
	if _, err := url.ParseRequestURI(target); err != nil {
		return BadTarget
	}
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		return BadHeader // the request line was fine
	}
	// The checks of net/http's server after ReadRequest (which has moved Host to
	// req.Host).
	switch {
	case req.ProtoAtLeast(1, 1) && req.Host == "" && req.Method != http.MethodConnect:
		return MissingHost
	case !httpguts.ValidHostHeader(req.Host):
		return BadHost
	}
	return BadHeader
}

// requestLine splits a request line as net/http does.
func requestLine(line string) (method, target, proto string, ok bool) {
	method, rest, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	return method, target, proto, ok1 && ok2
}

// refusalWriteTimeout bounds the writing of a refusal.
const refusalWriteTimeout = 10 * time.Second

// answerRefusal answers a refused request on nc: with Server.Refused, given the request
// as far as head shows it, or as net/http does without one. The connection closes after.
func (s *Server) answerRefusal(nc net.Conn, head []byte, tlsState *tls.ConnectionState, e *RequestError) {
	_ = nc.SetWriteDeadline(time.Now().Add(refusalWriteTimeout))
	if s.Refused == nil {
		text := strconv.Itoa(e.Status) + " " + http.StatusText(e.Status)
		_, _ = nc.Write([]byte("HTTP/1.1 " + text + "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n" + text))
		return
	}
	r := lenientRequest(head, nc.RemoteAddr().String(), tlsState)
	w := &refusalWriter{nc: nc, header: make(http.Header)}
	if s.callRefused(w, r, e) {
		w.send(r.Method == http.MethodHead)
	}
}

// callRefused runs Server.Refused, recovering a panic as a handler's is (logged unless it
// is http.ErrAbortHandler); false if it panicked.
func (s *Server) callRefused(w *refusalWriter, r *http.Request, e *RequestError) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				s.logf("http: panic serving %v: %v\n%s", r.RemoteAddr, v, buf)
			}
			ok = false
		}
	}()
	s.Refused(w, r, e)
	return true
}

// lenientRequest is the request head shows, read as far as it can be: the method if it is
// a token, the target (its path as sent if it is not a URL), the valid header lines and
// Host. It describes a refused request to Server.Refused; nothing in it has been checked
// the way a request's head is.
func lenientRequest(head []byte, remote string, tlsState *tls.ConnectionState) *http.Request {
	r := &http.Request{
		Method: "", URL: &url.URL{Path: "/"}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Body: http.NoBody, Close: true, RemoteAddr: remote, TLS: tlsState,
	}
	text := string(head)
	line, rest, _ := strings.Cut(text, "\n")
	method, target, proto, ok := requestLine(strings.TrimSuffix(line, "\r"))
	if !ok {
		return r
	}
	if isToken(method) {
		r.Method = method
	}
	if validTarget(target) {
		r.RequestURI = target
		if u, err := url.ParseRequestURI(target); err == nil {
			r.URL = u
		} else {
			path, _, _ := strings.Cut(target, "?")
			r.URL = &url.URL{Path: path}
		}
	}
	if major, minor, ok := http.ParseHTTPVersion(proto); ok && major == 1 {
		r.Proto, r.ProtoMinor = proto, minor
	}
	for rest != "" {
		line, rest, _ = strings.Cut(rest, "\n")
		line = strings.TrimSuffix(line, "\r")
		if line == "" {
			break
		}
		name, value, ok := strings.Cut(line, ":")
		value = trimOWS(value)
		if !ok || !isToken(name) || !httpguts.ValidHeaderFieldValue(value) {
			continue
		}
		key := canonicalKey(name)
		if key == "Host" {
			if r.Host == "" && httpguts.ValidHostHeader(value) {
				r.Host = value
			}
			continue
		}
		r.Header[key] = append(r.Header[key], value)
	}
	return r
}

// refusalWriter is the ResponseWriter of a refusal: it gathers the response and sends it
// whole, with its Content-Length and Connection: close.
type refusalWriter struct {
	nc     net.Conn
	header http.Header
	status int
	body   []byte
}

// maxRefusalBody bounds the body of a refusal (an error message).
const maxRefusalBody = 64 << 10

func (w *refusalWriter) Header() http.Header { return w.header }

func (w *refusalWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
}

func (w *refusalWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if len(w.body)+len(p) > maxRefusalBody {
		return 0, http.ErrContentLength
	}
	w.body = append(w.body, p...)
	return len(p), nil
}

func (w *refusalWriter) Flush() {}

// SetWriteDeadline sets the connection's (http.ResponseController).
func (w *refusalWriter) SetWriteDeadline(t time.Time) error { return w.nc.SetWriteDeadline(t) }

// send writes the response; without its body if head.
func (w *refusalWriter) send(head bool) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	b := []byte(statusLines[w.status])
	if len(b) == 0 {
		b = []byte("HTTP/1.1 " + strconv.Itoa(w.status) + " status code " + strconv.Itoa(w.status) + "\r\n")
	}
	keys := make([]string, 0, len(w.header))
	for k := range w.header {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	hasDate := false
	for _, k := range keys {
		switch k {
		case "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive":
			continue
		case "Date":
			hasDate = true
		}
		if !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range w.header[k] {
			v = strings.Map(func(r rune) rune {
				if r == '\r' || r == '\n' {
					return ' '
				}
				return r
			}, v)
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, strings.Trim(v, " \t")...)
			b = append(b, "\r\n"...)
		}
	}
	if !hasDate {
		b = append(b, date()...)
	}
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(len(w.body)), 10)
	b = append(b, "\r\nConnection: close\r\n\r\n"...)
	if !head {
		b = append(b, w.body...)
	}
	_, _ = w.nc.Write(b)
}

// headBudget counts the bytes of unfinished request heads held beyond freeHead each, by
// all connections together (Server.MaxHeadMemory).
type headBudget struct {
	limit int64 // <= 0: none
	used  atomic.Int64
}

// DefaultMaxHeadMemory is the budget for unfinished heads when Server.MaxHeadMemory is 0.
const DefaultMaxHeadMemory = 16 << 20

func (b *headBudget) acquire(n int64) bool {
	if b.limit <= 0 {
		return true
	}
	for {
		u := b.used.Load()
		if u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

func (b *headBudget) release(n int64) {
	if b.limit > 0 {
		b.used.Add(-n)
	}
}
