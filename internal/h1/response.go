package h1

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// bufferBeforeChunking is how much of a body of undeclared length is held back to be
// sent with a Content-Length; a larger one is sent chunked (net/http's
// bufferBeforeChunkingSize).
const bufferBeforeChunking = 2048

// response is the ResponseWriter of one request. Like net/http's, it takes the header as
// it is when WriteHeader is called (later changes are ignored), sends a body the handler
// declared no Content-Length for with one when it is complete within bufferBeforeChunking
// bytes and chunked otherwise, adds Date (and Content-Type, sniffed, if the handler set
// none), and closes the connection after the response when the request or the handler
// asked for it, shutdown has begun, or the unread rest of the request body is too large
// to skip.
//
// Each request has its own, and its own header map: one a handler keeps past its return
// (a goroutine still writing, a header map held on to) can never reach the next response
// on the connection, which behind a pooling proxy is another user's. Once the handler has
// returned, its methods do nothing (Write, FlushError and the deadlines return
// ErrHandlerReturned), and mu orders a late call that raced with the return before the
// response is finished or after it, never within. The buffers it works in are the
// connection's, lent for the request (responseScratch).
type response struct {
	c *conn

	mu   sync.Mutex
	done bool // the handler has returned and the response is finished (or abandoned)

	header      http.Header // the handler's, this request's only
	status      int
	wroteHeader bool
	committed   bool // the head is in the write buffer
	isHead      bool
	cl          int64 // the declared Content-Length, or -1
	written     int64
	chunked     bool
	hasType     bool
	hasDate     bool
	closeAfter  bool
	err         error // the first write error

	writeDeadline bool // the handler set a write deadline
	readDeadline  bool // and a read deadline

	responseScratch
}

// responseScratch are the buffers a response works in, kept by the connection from one
// request to the next so that a response allocates none.
type responseScratch struct {
	pending  []byte // body held back before the head is sent
	snapshot []byte // the handler's header lines, taken at WriteHeader
	keys     []string
	num      [20]byte // a number being formatted
}

// headerHint is the size a response's header map is made for: the dozen headers
// Cerulean's responses carry (and the CORS ones for a browser) fit without the map
// growing, in the smallest table that holds them.
const headerHint = 14

// newResponse makes the response of req, lending it the connection's buffers.
func (c *conn) newResponse(req *http.Request) *response {
	w := &response{
		c: c, header: make(http.Header, headerHint), cl: -1, isHead: req.Method == http.MethodHead,
		closeAfter: req.Close, responseScratch: c.scratch,
	}
	w.pending, w.snapshot, w.keys = w.pending[:0], w.snapshot[:0], w.keys[:0]
	return w
}

// release ends the use of a response that will not be finished (its handler panicked):
// its methods do nothing from now on, and the connection has its buffers back.
func (w *response) release() {
	w.mu.Lock()
	w.releaseLocked()
	w.mu.Unlock()
}

func (w *response) releaseLocked() {
	w.done = true
	clear(w.keys)
	w.c.scratch = w.responseScratch
	w.responseScratch = responseScratch{}
}

func (w *response) Header() http.Header { return w.header }

// bodyAllowed reports whether the status allows a body (RFC 9110: not 1xx, 204, 304).
func (w *response) bodyAllowed() bool {
	return w.status >= 200 && w.status != http.StatusNoContent && w.status != http.StatusNotModified
}

func (w *response) WriteHeader(code int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	w.writeHeader(code)
}

func (w *response) writeHeader(code int) {
	if w.wroteHeader {
		w.c.s.logf("http: superfluous response.WriteHeader call (status %d after %d)", code, w.status)
		return
	}
	if code < 100 || code > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		// An informational answer goes out at once, with the header as it is.
		w.status = code
		w.takeHeader()
		w.writeStatusLine()
		_, _ = w.c.bw.Write(w.snapshot)
		_, _ = w.c.bw.WriteString("\r\n")
		if err := w.c.bw.Flush(); err != nil && w.err == nil {
			w.err = err
		}
		w.status = 0
		return
	}
	w.wroteHeader = true
	w.status = code
	w.takeHeader()
}

// takeHeader writes the handler's header lines into the snapshot, in key order, apart from
// those the response decides itself (Content-Length, Transfer-Encoding, Connection), and
// notes what they declare.
func (w *response) takeHeader() {
	w.snapshot = w.snapshot[:0]
	w.keys = w.keys[:0]
	for k := range w.header {
		w.keys = append(w.keys, k)
	}
	slices.Sort(w.keys)
	for _, k := range w.keys {
		vv := w.header[k]
		switch k {
		case "Content-Length":
			if len(vv) > 0 {
				if n, err := strconv.ParseInt(strings.TrimSpace(vv[0]), 10, 64); err == nil && n >= 0 {
					w.cl = n
				} else {
					w.c.s.logf("http: invalid Content-Length of %q", vv[0])
				}
			}
			continue
		case "Transfer-Encoding":
			continue
		case "Connection":
			for _, v := range vv {
				if strings.EqualFold(strings.TrimSpace(v), "close") {
					w.closeAfter = true
				}
			}
			continue
		case "Content-Type":
			w.hasType = len(vv) > 0
		case "Date":
			w.hasDate = len(vv) > 0
		}
		if !httpguts.ValidHeaderFieldName(k) {
			continue // as net/http: no response splitting through a header name
		}
		for _, v := range vv {
			if strings.IndexByte(v, '\r') >= 0 || strings.IndexByte(v, '\n') >= 0 {
				v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
			}
			v = strings.Trim(v, " \t")
			w.snapshot = append(w.snapshot, k...)
			w.snapshot = append(w.snapshot, ": "...)
			w.snapshot = append(w.snapshot, v...)
			w.snapshot = append(w.snapshot, "\r\n"...)
		}
	}
}

func (w *response) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return 0, ErrHandlerReturned
	}
	return w.write(p)
}

func (w *response) write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.writeHeader(http.StatusOK)
	}
	if !w.bodyAllowed() {
		return 0, http.ErrBodyNotAllowed
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.cl >= 0 && w.written+int64(len(p)) > w.cl {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if w.isHead {
		// Nothing is sent; the start is kept to sniff a Content-Type from.
		if !w.committed && len(w.pending) < bufferBeforeChunking {
			w.pending = append(w.pending, p[:min(len(p), bufferBeforeChunking-len(w.pending))]...)
		}
		return len(p), nil
	}
	switch {
	case w.committed:
	case w.cl >= 0:
		w.commit(p)
	case len(w.pending)+len(p) <= bufferBeforeChunking:
		w.pending = append(w.pending, p...)
		return len(p), nil
	default:
		w.chunked = true
		w.commit(p)
	}
	w.send(p)
	if w.err != nil {
		return 0, w.err
	}
	return len(p), nil
}

// send writes body bytes after the head, as a chunk if the body is chunked.
func (w *response) send(p []byte) {
	if len(p) == 0 || w.err != nil {
		return
	}
	bw := w.c.bw
	if w.chunked {
		_, _ = bw.Write(strconv.AppendInt(w.num[:0], int64(len(p)), 16))
		_, _ = bw.WriteString("\r\n")
	}
	if _, err := bw.Write(p); err != nil {
		w.err = err
		return
	}
	if w.chunked {
		if _, err := bw.WriteString("\r\n"); err != nil {
			w.err = err
		}
	}
}

// commit writes the head, then the body held back. first is the body's first bytes
// (for sniffing a Content-Type) when nothing is held back.
func (w *response) commit(first []byte) {
	w.committed = true
	c := w.c
	switch {
	case c.s.closing.Load() || c.body.remaining > maxDiscard:
		w.closeAfter = true
	case c.body.remaining > 0 && !w.closeAfter:
		// As net/http does: the rest of a small body the handler left unread is read
		// before the head, so that the head can say whether the connection stays open,
		// within the read deadline the handler set, if any.
		if !w.readDeadline {
			_ = c.nc.SetReadDeadline(time.Now().Add(discardTimeout))
		}
		if c.body.discard() != nil {
			w.closeAfter = true
		}
	}
	bw := c.bw
	w.writeStatusLine()
	_, _ = bw.Write(w.snapshot)
	if w.bodyAllowed() {
		if !w.hasType {
			sniff := w.pending
			if len(sniff) == 0 {
				sniff = first
			}
			if len(sniff) > 0 {
				_, _ = bw.WriteString("Content-Type: " + http.DetectContentType(sniff) + "\r\n")
			}
		}
		if w.chunked {
			_, _ = bw.WriteString("Transfer-Encoding: chunked\r\n")
		} else {
			_, _ = bw.WriteString("Content-Length: ")
			_, _ = bw.Write(strconv.AppendInt(w.num[:0], w.cl, 10))
			_, _ = bw.WriteString("\r\n")
		}
	}
	if !w.hasDate {
		_, _ = bw.Write(date())
	}
	if w.closeAfter {
		_, _ = bw.WriteString("Connection: close\r\n")
	}
	if _, err := bw.WriteString("\r\n"); err != nil {
		w.err = err
	}
	if len(w.pending) > 0 {
		p := w.pending
		w.pending = w.pending[:0]
		if !w.isHead {
			w.send(p)
		}
	}
}

func (w *response) writeStatusLine() {
	bw := w.c.bw
	if line := statusLines[w.status]; line != "" {
		_, _ = bw.WriteString(line)
		return
	}
	_, _ = bw.WriteString("HTTP/1.1 " + strconv.Itoa(w.status) + " status code " + strconv.Itoa(w.status) + "\r\n")
}

// statusLines are the status lines of the codes with a reason phrase.
var statusLines = func() (l [1000]string) {
	for code := 100; code < 1000; code++ {
		if text := http.StatusText(code); text != "" {
			l[code] = "HTTP/1.1 " + strconv.Itoa(code) + " " + text + "\r\n"
		}
	}
	return l
}()

// finish completes the response after the handler: the head if it has not gone yet
// (with the Content-Length of what was written), the last chunk, and a flush. It reports
// whether the connection is still usable. The response is done from then on (release).
func (w *response) finish() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.releaseLocked()
	if !w.wroteHeader {
		w.writeHeader(http.StatusOK)
	}
	if !w.committed {
		if w.cl < 0 {
			w.cl = w.written
		}
		w.commit(nil)
	}
	if w.chunked && w.err == nil {
		if _, err := w.c.bw.WriteString("0\r\n\r\n"); err != nil {
			w.err = err
		}
	}
	if w.cl >= 0 && w.written < w.cl && w.bodyAllowed() && !w.isHead {
		// The client waits for bytes that will not come: only closing ends the response.
		w.closeAfter = true
	}
	if err := w.c.bw.Flush(); err != nil || w.err != nil {
		return false
	}
	return true
}

// FlushError sends the head, if it has not gone, and everything written so far. A body
// of undeclared length is then sent chunked.
func (w *response) FlushError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return ErrHandlerReturned
	}
	if !w.wroteHeader {
		w.writeHeader(http.StatusOK)
	}
	if !w.committed {
		if w.cl < 0 && w.bodyAllowed() && !w.isHead {
			w.chunked = true
		}
		if w.cl < 0 && w.isHead {
			w.cl = w.written
		}
		w.commit(nil)
	}
	if w.err != nil {
		return w.err
	}
	return w.c.bw.Flush()
}

// Flush is FlushError for http.Flusher.
func (w *response) Flush() { _ = w.FlushError() }

// SetReadDeadline sets the connection's read deadline (http.ResponseController).
func (w *response) SetReadDeadline(t time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return ErrHandlerReturned
	}
	w.readDeadline = !t.IsZero()
	return w.c.nc.SetReadDeadline(t)
}

// SetWriteDeadline sets the connection's write deadline (http.ResponseController); it is
// cleared after the response.
func (w *response) SetWriteDeadline(t time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return ErrHandlerReturned
	}
	w.writeDeadline = true
	return w.c.nc.SetWriteDeadline(t)
}

// dateLine caches the Date header line, which changes once a second.
type dateLine struct {
	sec  int64
	line []byte
}

var lastDate atomic.Pointer[dateLine]

// date is the Date header line for now.
func date() []byte {
	now := time.Now()
	sec := now.Unix()
	if d := lastDate.Load(); d != nil && d.sec == sec {
		return d.line
	}
	d := &dateLine{sec: sec, line: now.UTC().AppendFormat([]byte("Date: "), http.TimeFormat)}
	d.line = append(d.line, "\r\n"...)
	lastDate.Store(d)
	return d.line
}
