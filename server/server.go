// Package server is Cerulean's HTTP protocol layer: addressing (path-style and host-style,
// the -secondary suffix), authentication, media-type negotiation, JSON (de)serialisation
// and error rendering. It turns requests into table-layer calls and their results into
// the exact responses the Azure SDKs expect; nothing below it knows about HTTP.
package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ceruleandb/cerulean/auth"
	"github.com/ceruleandb/cerulean/azerr"
	"github.com/ceruleandb/cerulean/edmjson"
	"github.com/ceruleandb/cerulean/entity"
	"github.com/ceruleandb/cerulean/storage"
	"github.com/ceruleandb/cerulean/table"
)

// DefaultVersion is the x-ms-version answered when a request names none.
const DefaultVersion = "2019-02-02"

// Body size limits. An entity is at most 1 MiB under the service's formula, but its JSON
// (base64 binaries, escaped strings) is larger; 4 MiB is the batch limit and bounds both.
const (
	maxEntityBody = 4 << 20
	maxSmallBody  = 64 << 10
)

// Options configures a Server.
type Options struct {
	Engine   storage.Engine
	Accounts []auth.Account
	Logger   *slog.Logger
	// Now is the clock for request-date checks; nil means time.Now.
	Now func() time.Time
}

// Server serves the Azure Table REST API over one engine.
type Server struct {
	tables   *table.Service
	verifier *auth.Verifier
	log      *slog.Logger

	idPrefix string
	idSeq    atomic.Uint64
}

// New returns a server; it owns nothing it must close (the engine is the caller's).
func New(opts Options) (*Server, error) {
	if opts.Engine == nil {
		return nil, errors.New("server: no engine")
	}
	if len(opts.Accounts) == 0 {
		return nil, errors.New("server: no accounts")
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	h := hex.EncodeToString(rnd[:])
	s := &Server{
		tables:   table.New(opts.Engine, log),
		verifier: auth.NewVerifier(opts.Accounts, opts.Now),
		log:      log,
		idPrefix: h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-",
	}
	return s, nil
}

// Health reports whether the storage engine is answering, and if not, since when.
func (s *Server) Health() (ok bool, since time.Time) { return s.tables.Health() }

// request carries what every handler needs about one request.
type request struct {
	r         *http.Request
	w         http.ResponseWriter
	id        string
	account   string
	secondary bool
	// root is the service root URL as the client addressed it, for odata.* links.
	root  string
	level edmjson.Level
	res   Resource
	query url.Values
	// pathStyle is whether the account is the first path segment.
	pathStyle bool
	// xml marks the XML endpoints (ACL, service properties, stats, preflight), whose
	// errors are storage XML rather than OData JSON.
	xml bool
	// grant is what a shared access signature allows (nil for shared key: everything).
	grant *auth.Grant
}

// nowFunc is the clock for the times in error messages.
var nowFunc = time.Now

// bufPool recycles response buffers; see putBuf.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// putBuf returns a buffer to the pool unless it grew past 1 MiB (a large query page), so
// the pool never pins big allocations.
func putBuf(bp *[]byte) {
	if cap(*bp) <= 1<<20 {
		bufPool.Put(bp)
	}
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rq := &request{r: r, w: w, id: s.nextRequestID(), level: edmjson.MinimalMetadata, query: url.Values{}}
	if r.URL.RawQuery != "" {
		rq.query = r.URL.Query()
	}
	h := w.Header()
	h["X-Ms-Request-Id"] = []string{rq.id}
	if v := r.Header.Get("x-ms-version"); v != "" {
		h["X-Ms-Version"] = []string{v}
	} else {
		h["X-Ms-Version"] = []string{DefaultVersion}
	}
	if v := r.Header.Get("x-ms-client-request-id"); v != "" && len(v) <= 1024 {
		h["X-Ms-Client-Request-Id"] = []string{v}
	}
	h["Cache-Control"] = []string{"no-cache"}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	h["Server"] = []string{"Cerulean"}
	rq.pathStyle = s.address(rq)
	if r.Method == http.MethodOptions {
		// CORS preflight is unauthenticated by design: browsers send no credentials.
		if err := s.preflight(rq); err != nil {
			s.writeError(rq, err)
		}
		return
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		// CORS headers go on every response to a browser, errors included, as the
		// service does; the rules are public to any origin that asks by preflight.
		s.addCORS(rq, origin)
	}
	if err := s.serve(rq); err != nil {
		s.writeError(rq, err)
	}
}

func (s *Server) serve(rq *request) error {
	r := rq.r
	pathStyle := rq.pathStyle
	// Authenticate before looking at the resource, so an unauthenticated caller learns
	// nothing about what exists; an unknown account fails like a bad signature.
	// The XML endpoints (ACL, service properties, stats) answer errors in XML, including
	// authentication failures; the query alone tells them apart.
	rq.xml = rq.query.Has("comp") || rq.query.Get("restype") == "service"
	sas, err := s.authenticate(rq)
	if err != nil {
		return err
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	rq.root = scheme + "://" + r.Host
	if pathStyle {
		rq.root += "/" + firstSegment(r.URL.Path)
	}
	res, err := ParseResource(s.resourcePath(rq, pathStyle))
	if err != nil {
		return err
	}
	rq.res = res
	method, err := effectiveMethod(r)
	if err != nil {
		return err
	}
	if sas != nil {
		cond, _ := ifMatch(r) // a bad If-Match is reported by the handler
		if err := s.authorizeSAS(rq, sas, sasOperation(res, method, rq.query, cond)); err != nil {
			return err
		}
	}
	acl := res.Kind == KindEntities && rq.query.Has("comp")
	if res.Kind != KindService && !acl {
		lvl, err := negotiate(r, rq.query)
		if err != nil {
			return err
		}
		rq.level = lvl
	}
	switch res.Kind {
	case KindTables:
		switch method {
		case http.MethodGet:
			return s.listTables(rq)
		case http.MethodPost:
			return s.createTable(rq)
		}
	case KindTable:
		switch method {
		case http.MethodGet:
			return s.getTable(rq)
		case http.MethodDelete:
			return s.deleteTable(rq)
		}
	case KindEntities:
		if acl {
			return s.aclRequest(rq, method)
		}
		switch method {
		case http.MethodGet:
			return s.queryEntities(rq)
		case http.MethodPost:
			return s.insertEntity(rq)
		}
	case KindEntity:
		switch method {
		case http.MethodGet:
			return s.getEntity(rq)
		case http.MethodPut:
			return s.writeEntity(rq, table.ReplaceMode)
		case "MERGE", http.MethodPatch:
			return s.writeEntity(rq, table.MergeMode)
		case http.MethodDelete:
			return s.deleteEntity(rq)
		}
	case KindBatch:
		if method == http.MethodPost {
			return s.postBatch(rq)
		}
	case KindService:
		return s.serviceRequest(rq, method)
	}
	return azerr.New(azerr.MethodNotAllowed)
}

// address finds the account: the first path segment for path-style requests (an IP
// literal, a single-label host such as localhost, or host.docker.internal), else the
// first DNS label of the host. A "-secondary" suffix marks the secondary endpoint.
// It reports whether the request is path-style.
func (s *Server) address(rq *request) bool {
	host := rq.r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	pathStyle := net.ParseIP(host) != nil || !strings.Contains(host, ".") || host == "host.docker.internal"
	var acct string
	if pathStyle {
		acct = firstSegment(rq.r.URL.Path)
	} else {
		acct, _, _ = strings.Cut(host, ".")
		acct = strings.ToLower(acct) // DNS names are case-insensitive
	}
	if a, ok := strings.CutSuffix(acct, "-secondary"); ok {
		acct, rq.secondary = a, true
	}
	rq.account = acct
	return pathStyle
}

// resourcePath is the decoded path after the account.
func (s *Server) resourcePath(rq *request, pathStyle bool) string {
	p := strings.TrimPrefix(rq.r.URL.Path, "/")
	if pathStyle {
		_, p, _ = strings.Cut(p, "/")
	}
	return p
}

func firstSegment(p string) string {
	p = strings.TrimPrefix(p, "/")
	seg, _, _ := strings.Cut(p, "/")
	return seg
}

// effectiveMethod applies X-HTTP-Method tunnelling: only with POST, exactly once, and
// only to MERGE, PUT or DELETE.
func effectiveMethod(r *http.Request) (string, error) {
	xs := r.Header.Values("X-HTTP-Method")
	if len(xs) == 0 {
		return r.Method, nil
	}
	if r.Method != http.MethodPost {
		return "", azerr.New(azerr.XMethodNotUsingPost)
	}
	if len(xs) > 1 || strings.Contains(xs[0], ",") {
		return "", azerr.New(azerr.XMethodIncorrectCount)
	}
	switch m := strings.ToUpper(strings.TrimSpace(xs[0])); m {
	case "MERGE", http.MethodPut, http.MethodDelete, http.MethodPatch:
		return m, nil
	}
	return "", azerr.New(azerr.XMethodIncorrectValue)
}

// negotiate picks the JSON metadata level: $format wins over Accept.
func negotiate(r *http.Request, q url.Values) (edmjson.Level, error) {
	format := q.Get("$format")
	lvl, ok := edmjson.NegotiateLevel(format, r.Header.Get("Accept"))
	if !ok {
		return 0, azerr.New(azerr.AtomFormatNotSupported)
	}
	return lvl, nil
}

func (s *Server) nextRequestID() string {
	n := s.idSeq.Add(1)
	var b [48]byte
	out := append(b[:0], s.idPrefix...)
	const hexd = "0123456789abcdef"
	var tail [16]byte
	for i := 15; i >= 0; i-- {
		tail[i] = hexd[n&15]
		n >>= 4
	}
	out = append(out, tail[:4]...)
	out = append(out, '-')
	out = append(out, tail[4:]...)
	return string(out)
}

// readBody reads the request body up to limit bytes; a larger body is 413.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, azerr.New(azerr.RequestBodyTooLarge)
	}
	buf := make([]byte, 0, max(r.ContentLength, 0)+1)
	lr := &io.LimitedReader{R: r.Body, N: limit + 1}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, azerr.Newf(azerr.InvalidInput, "The request body could not be read.")
		}
	}
	if int64(len(buf)) > limit {
		return nil, azerr.New(azerr.RequestBodyTooLarge)
	}
	return buf, nil
}

// checkContentType refuses XML/Atom entity payloads with a clear 415.
func checkContentType(r *http.Request) error {
	ct := strings.ToLower(r.Header.Get("Content-Type"))
	if strings.Contains(ct, "xml") {
		return azerr.New(azerr.AtomFormatNotSupported)
	}
	if ct != "" && !strings.HasPrefix(ct, "application/json") {
		return azerr.New(azerr.MediaTypeNotSupported)
	}
	return nil
}

// preference reads Prefer: "return-no-content", "return-content", or "" when absent.
func preference(r *http.Request) string {
	for _, v := range r.Header.Values("Prefer") {
		for _, p := range strings.Split(v, ",") {
			switch strings.ToLower(strings.TrimSpace(p)) {
			case "return-no-content":
				return "return-no-content"
			case "return-content":
				return "return-content"
			}
		}
	}
	return ""
}

// send writes a complete response with a body.
func (rq *request) send(status int, contentType string, body []byte) {
	h := rq.w.Header()
	h["Content-Type"] = []string{contentType}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	rq.w.WriteHeader(status)
	if rq.r.Method != http.MethodHead {
		_, _ = rq.w.Write(body)
	}
}

// noContent writes a 204.
func (rq *request) noContent() {
	rq.w.WriteHeader(http.StatusNoContent)
}

// odataHeaders adds the headers of an OData JSON response.
func (rq *request) odataHeaders() {
	rq.w.Header()["Dataserviceversion"] = []string{"3.0;"}
}

// writeError renders err as the service does: x-ms-error-code, and a one-line JSON
// odata.error body (XML for the XML endpoints).
func (s *Server) writeError(rq *request, err error) {
	e, known := azerr.As(err)
	if !known {
		s.log.Error("internal error", "request_id", rq.id, "method", rq.r.Method, "url", rq.r.URL.String(), "err", err)
	}
	switch {
	case e.Code == azerr.ServerBusy:
		// A state of the engine (unreachable, disk full), logged when it begins and ends;
		// a line per refused request would flood the log while clients retry.
		s.log.Debug("request failed", "request_id", rq.id, "code", e.Code, "err", err)
	case e.Status >= 500 && known:
		s.log.Warn("request failed", "request_id", rq.id, "code", e.Code, "err", err)
	}
	msg := errorMessage(rq, e)
	h := rq.w.Header()
	h["X-Ms-Error-Code"] = []string{string(e.Code)}
	if e.Code == azerr.ServerBusy {
		h["Retry-After"] = []string{"1"}
	}
	bp := bufPool.Get().(*[]byte)
	defer putBuf(bp)
	if rq.xml {
		*bp = appendXMLError((*bp)[:0], string(e.Code), msg)
		rq.sendXML(e.Status, *bp)
		return
	}
	body := edmjson.AppendError((*bp)[:0], string(e.Code), msg)
	*bp = body
	rq.send(e.Status, edmjson.ContentType(rq.level), body)
}

// errorMessage is the service's error text: the message, any detail, and the request id
// and time the client quotes when reporting a problem.
func errorMessage(rq *request, e *azerr.Error) string {
	msg := e.Message
	if e.Detail != "" {
		msg += "\n" + e.Detail
	}
	return msg + "\nRequestId:" + rq.id + "\nTime:" + entity.FormatTicks(entity.TimeToTicks(nowFunc()))
}

// Shutdown helper for callers running the server with net/http.
func Serve(ctx context.Context, srv *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
