package server

import (
	"context"
	"errors"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/edmjson"
	"github.com/ceruleandb/cerulean/internal/h1"
)

// readHeaderTimeout bounds the time to send a request's headers.
const readHeaderTimeout = 30 * time.Second

// Request heads (the request line and the headers) are bounded twice, since a client
// decides how much of one the server holds, and for how long, before it has shown any
// credential:
//
//   - each to maxHeadBytes, past which it is refused (400 OutOfRangeInput). Azure answers a
//     head of more than about 16 KB (Azurite's limit, Node's) that the Orleans directory's
//     queries send (Azure/Azurite#1745); 64 KiB leaves room for the longest a client is
//     known to send, a $filter over a hundred keys or a SAS with a Bearer token beside it.
//   - all together, for the part past the first 4 KiB of each, to maxHeadMemory (see
//     h1.Server.MaxHeadMemory), past which a head is refused with 503 ServerBusy until
//     heads end: the memory 300 connections trickling 64 KiB heads could take, while
//     ordinary heads, under 4 KiB, never wait for it.
const (
	maxHeadBytes  = 64 << 10
	maxHeadMemory = 16 << 20
)

// keepAliveSlack is how much longer than the Keep-Alive timeout it advertises the server
// keeps an idle connection open, so that a client retiring sockets by the advertised value
// never reuses one the server is closing at that moment (Node's keepAliveTimeoutBuffer does
// the same).
const keepAliveSlack = time.Second

// newConnGrace is how long, once shutdown has begun, a connection may stay open without
// having begun a request. The HTTP server's Shutdown (h1's, as net/http's) waits up to 5
// seconds for such a connection (http.StateNew), in case its first request is on its way.
// But connections nobody will use are common: when Go's http.Transport dials for a
// request and another connection frees up first, the request goes there and the new
// connection waits unused in the client's pool. A client that has just connected sends
// its request at once, so a second is plenty.
const newConnGrace = time.Second

// newConns records when each connection that has not begun a request was accepted, for
// shutdown to close those that never do.
type newConns struct{ m sync.Map } // net.Conn → time.Time

// track is the http.Server's ConnState hook: a connection leaves the record when its first
// request begins (or it is closed or hijacked). A keep-alive connection's later requests
// find nothing to delete.
func (n *newConns) track(c net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		n.m.Store(c, time.Now())
	case http.StateActive, http.StateHijacked, http.StateClosed:
		n.m.Delete(c)
	}
}

// closeUnused closes, until done, every connection that has gone newConnGrace since it
// was accepted without beginning a request.
func (n *newConns) closeUnused(done <-chan struct{}) {
	tick := time.NewTicker(newConnGrace / 10)
	defer tick.Stop()
	for {
		now := time.Now()
		n.m.Range(func(c, at any) bool {
			if now.Sub(at.(time.Time)) >= newConnGrace {
				_ = c.(net.Conn).Close()
				n.m.Delete(c)
			}
			return true
		})
		select {
		case <-done:
			return
		case <-tick.C:
		}
	}
}

// handshakeDemoter writes net/http's error log to the structured log at warn level, except
// failed TLS handshakes (a TCP health probe, a client that does not trust the certificate),
// which come in numbers an operator cannot act on and go to debug.
type handshakeDemoter struct{ log *slog.Logger }

func (h handshakeDemoter) Write(p []byte) (int, error) {
	msg := strings.TrimSuffix(string(p), "\n")
	level := slog.LevelWarn
	if strings.HasPrefix(msg, "http: TLS handshake error") {
		level = slog.LevelDebug
	}
	h.log.Log(context.Background(), level, msg)
	return len(p), nil
}

// ErrRequestsRunning is returned by Serve when requests were still running after their
// connections had been closed at the end of the grace period; the engine must then not be
// closed under them.
var ErrRequestsRunning = errors.New("requests still running after shutdown")

// Serve serves HTTP on ln until ctx is done, then shuts down: it stops accepting, lets the
// requests being processed finish within Options.ShutdownGrace, cuts the connections that
// are only stalled sending a body (a body that stops arriving for a second is answered 503
// and its connection closed), closes the connections that have not begun a request a
// second after they were accepted (newConnGrace), and closes every connection still open
// when the grace period ends. It returns nil after a clean shutdown; then no request is
// running and the engine may be closed.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return s.ServeHandler(ctx, ln, s)
}

// ServeHandler is Serve with h answering the requests: the Server itself wrapped by what
// shares its listener (the web console), with the same limits and graceful shutdown.
//
// HTTP is served by package h1 in front of a net/http server: h1 answers the plain
// requests table clients send, over TLS too (a point read then costs the server about a
// third less CPU, a fifth less over TLS, and two cores serve a fifth more point reads and
// synced inserts a second), and hands any other connection to net/http. With
// Options.NetHTTP, net/http serves every request (h1 only accepts the connections and does
// their TLS handshakes). Either way the request heads are bounded (maxHeadBytes,
// maxHeadMemory), and a request net/http's parser refuses is answered by refuse.
func (s *Server) ServeHandler(ctx context.Context, ln net.Listener, h http.Handler) error {
	var fresh newConns
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       s.limits.IdleTimeout + keepAliveSlack,
		ErrorLog:          log.New(handshakeDemoter{s.log}, "", 0),
		ConnState:         fresh.track,
		// net/http reads up to 4 KiB more than MaxHeaderBytes.
		MaxHeaderBytes: maxHeadBytes - 4<<10,
	}
	srv := &h1.Server{HTTP: hs, Refused: s.refuse, MaxHeadMemory: maxHeadMemory, FallbackOnly: s.netHTTP}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	stopAt := time.Now()
	s.log.Info("shutting down", "grace", s.limits.ShutdownGrace)
	s.pollStopOnce.Do(func() { close(s.pollStop) })
	graceEnd := stopAt.Add(s.limits.ShutdownGrace)
	s.tightenBodies(graceEnd)
	sctx, cancel := context.WithDeadline(context.Background(), graceEnd)
	defer cancel()
	shutDown := make(chan struct{})
	defer close(shutDown)
	go fresh.closeUnused(shutDown)
	if err := srv.Shutdown(sctx); err != nil {
		s.log.Warn("shutdown grace period over; closing the connections still open", "requests", s.active.Load())
		_ = srv.Close()
		// Closing a connection cancels its request's context, which stops engine work.
		if !s.waitIdle(5 * time.Second) {
			return ErrRequestsRunning
		}
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	s.log.Info("stopped serving", "after", time.Since(stopAt).Round(time.Millisecond))
	return nil
}

// waitIdle waits up to d for the running requests to end.
func (s *Server) waitIdle(d time.Duration) bool {
	end := time.Now().Add(d)
	for s.active.Load() > 0 {
		if time.Now().After(end) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// refuse answers a request refused before any handler could see it (h1.RequestError: a
// head net/http will not parse, one too large, one that found the memory for heads spent)
// as the service answers a bad request: an Azure error with its code, in the request log,
// the access log and the metrics like any other answer. r is the request as far as its
// head could be read; the connection closes after the answer.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, e *h1.RequestError) {
	start := time.Now()
	s.active.Add(1)
	defer s.active.Add(-1)
	if e.Kind == h1.BadTarget {
		// Only the account of a path that is not a URL is kept: the rest was never
		// decoded, and may hold anything (a SAS signature percent-encoded, say).
		r.URL = &url.URL{Path: "/"}
		if seg := firstSegment(r.RequestURI); strings.HasPrefix(r.RequestURI, "/") && !strings.ContainsAny(seg, "%?") {
			r.URL.Path += seg
		}
	}
	// As ServeHTTP begins a request.
	rq := &request{r: r, id: s.nextRequestID(), level: edmjson.MinimalMetadata}
	rq.rcv = *http.NewResponseController(w)
	rq.rc = &rq.rcv
	rq.rw = responseWriter{ResponseWriter: w, s: s, rq: rq}
	rq.w = &rq.rw
	defer s.logRequest(rq, start)
	if s.observer != nil {
		defer s.observeRequest(rq, start)
	}
	hd := w.Header()
	hd["X-Ms-Request-Id"] = rq.hdr(rq.id)
	hd["X-Ms-Version"] = rq.hdr(DefaultVersion)
	if v := first(r.Header["X-Ms-Client-Request-Id"]); v != "" && len(v) <= 1024 {
		hd["X-Ms-Client-Request-Id"] = rq.hdr(v)
	}
	hd["Cache-Control"] = rq.hdr("no-cache")
	hd["X-Content-Type-Options"] = rq.hdr("nosniff")
	hd["Server"] = rq.hdr("Cerulean")
	rq.pathStyle = s.address(rq)
	s.writeError(rq, refusal(e))
}

// refusal is the service's error for a refused request: the code Azure's documentation
// gives each case (docs/compatibility.md "Request heads and requests HTTP itself refuses").
func refusal(e *h1.RequestError) *azerr.Error {
	switch e.Kind {
	case h1.BadTarget:
		return azerr.New(azerr.RequestURLFailedToParse)
	case h1.BadMethod:
		return azerr.New(azerr.InvalidHTTPVerb)
	case h1.BadHeader:
		return azerr.New(azerr.InvalidHeaderValue)
	case h1.BadHost:
		e := azerr.New(azerr.InvalidHeaderValue)
		e.Fields = []azerr.Field{{Name: "HeaderName", Value: "Host"}}
		return e
	case h1.MissingHost:
		return azerr.New(azerr.HostInformationNotPresent)
	case h1.UnknownExpectation:
		e := azerr.New(azerr.InvalidHeaderValue)
		e.Fields = []azerr.Field{{Name: "HeaderName", Value: "Expect"}}
		return e
	case h1.UnsupportedTransferEncoding:
		return azerr.New(azerr.NotImplemented)
	case h1.HeadTooLarge:
		return azerr.New(azerr.OutOfRangeInput).WithDetail("The request line and headers are larger than the " + strconv.Itoa(maxHeadBytes>>10) + " KiB permitted.")
	case h1.HeadBudget:
		return azerr.New(azerr.ServerBusy).WithDetail("Too many request heads are arriving at once.")
	case h1.UnsupportedVersion:
		return azerr.New(azerr.InvalidInput).WithDetail("The HTTP version is not supported.")
	}
	return azerr.New(azerr.InvalidInput) // the head cannot be read as HTTP
}
