package server

import (
	"net/http"
	"strconv"
	"time"
)

// writeSlice is the most a response Write sends under one stall deadline, so that a large
// body to a slow reader is judged by its pace, not by its size.
const writeSlice = 64 << 10

// responseWriter is the ResponseWriter handlers see. It records what the access log needs
// (status, bytes), puts the write deadlines on the connection (a client that stops reading
// is cut off after Options.StallTimeout without progress, and any response after
// Options.WriteTimeout), and decides the Keep-Alive header at the last moment, when it is
// known whether the connection stays open.
type responseWriter struct {
	http.ResponseWriter
	s  *Server
	rq *request

	status   int
	bytesOut int64
	deadline time.Time // the whole response must be written by then
	armedAt  time.Time // when the write deadline was last moved
}

// Unwrap lets http.ResponseController reach the connection.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *responseWriter) WriteHeader(code int) {
	if w.status != 0 {
		w.ResponseWriter.WriteHeader(code) // net/http reports the superfluous call
		return
	}
	w.rq.afterOperation()
	w.status = code
	w.s.beforeHeader(w.rq)
	now := time.Now()
	w.deadline = now.Add(w.s.limits.WriteTimeout)
	w.armedAt = time.Time{}
	w.armWriteAt(now)
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	written := 0
	for len(p) > 0 {
		n := min(len(p), writeSlice)
		w.armWrite()
		m, err := w.ResponseWriter.Write(p[:n])
		written += m
		w.bytesOut += int64(m)
		if err != nil {
			return written, err
		}
		p = p[n:]
	}
	return written, nil
}

// Flush sends what is buffered (for handlers that stream).
func (w *responseWriter) Flush() {
	w.armWrite()
	_ = w.rq.rc.Flush()
}

// armWrite gives the next write the stall allowance, within the response's deadline. Many
// small writes in a row (a streamed page) move the deadline only every quarter of the
// allowance, so a client gets between ¾ and all of --stall-timeout to make progress.
func (w *responseWriter) armWrite() { w.armWriteAt(time.Now()) }

// armWriteAt is armWrite at now, the time the caller has just read.
func (w *responseWriter) armWriteAt(now time.Time) {
	stall := w.s.limits.StallTimeout
	if !w.armedAt.IsZero() && now.Sub(w.armedAt) < stall/4 {
		return
	}
	w.armedAt = now
	d := now.Add(stall)
	if d.After(w.deadline) {
		d = w.deadline
	}
	_ = w.rq.rc.SetWriteDeadline(d)
}

// beforeHeader runs once, just before the status line is sent. It adds Keep-Alive:
// timeout=N (what Node's servers and so Azurite send, read by pooling clients to retire a
// socket before the server closes it) only when the connection will stay open. A body the
// handler did not read is discarded by the HTTP server (h1 or net/http) after the handler
// returns, up to 256 KiB;
// that discard gets a stall deadline too, so a client that stops half-way cannot hold it,
// and none at all when the connection closes anyway.
func (s *Server) beforeHeader(rq *request) {
	r, h := rq.r, rq.w.Header()
	closing := !r.ProtoAtLeast(1, 1) || r.Close || s.closing.Load() || h.Get("Connection") == "close"
	consumed := rq.bodyDone || r.ContentLength == 0
	switch {
	case !consumed && closing:
		// net/http reads what is left of a short body even on a connection it closes
		// (h1 does not); nothing of it is wanted.
		_ = rq.rc.SetReadDeadline(time.Now())
	case !consumed:
		_ = rq.rc.SetReadDeadline(time.Now().Add(s.limits.StallTimeout))
	case !closing:
		h["Keep-Alive"] = s.keepAlive
	}
}

// keepAliveValue is the Keep-Alive header for an idle timeout.
func keepAliveValue(idle time.Duration) string {
	return "timeout=" + strconv.Itoa(int(idle/time.Second))
}
