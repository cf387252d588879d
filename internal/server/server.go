// Package server is Cerulean's HTTP protocol layer: addressing (path-style and host-style,
// the -secondary suffix), authentication, media-type negotiation, JSON (de)serialisation
// and error rendering. It turns requests into table-layer calls and their results into
// the exact responses the Azure SDKs expect; nothing below it knows about HTTP.
package server

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/edmjson"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/faults"
	"github.com/ceruleandb/cerulean/internal/identity"
	"github.com/ceruleandb/cerulean/internal/observe"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/table"
	"github.com/ceruleandb/cerulean/internal/throttle"
)

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
	// Bearer, if set, accepts OAuth bearer tokens (Authorization: Bearer …) over HTTPS,
	// and Roles decides what each token's principal may do (bearer.go); without Roles
	// every operation of a verified token is refused. Without Bearer a token is refused
	// as an unsupported scheme.
	Bearer BearerVerifier
	Roles  RoleAuthorizer
	// Now is the clock for request-date checks; nil means time.Now.
	Now func() time.Time
	// Limits bound what clients can make the server hold; zero fields take the defaults
	// of DefaultLimits.
	Limits Limits
	// ElasticTables make tables elastic at creation by name when the Create Table request
	// does not give settings (table.WithElasticTables; from table.ParseElasticRules).
	ElasticTables []table.ElasticRule
	// ChangeFeedTables turn change feeds on at creation by name, likewise
	// (table.WithChangeFeedTables; from table.ParseFeedRules).
	ChangeFeedTables []table.ElasticRule
	// ReadConsistency is the level of reads that do not ask for one in
	// x-ms-consistency-level (docs/compatibility.md "Read consistency and replicas"). The zero value is Strong, Azure's.
	ReadConsistency storage.Consistency
	// Observer, if set, gets every request once it is answered (metrics, the
	// hot-partition sketch, the access log).
	Observer observe.Observer
	// StrictProtocol refuses a SAS signed spr=https on a request that arrived over plain
	// HTTP (403 AuthorizationProtocolMismatch, as the service does); auth.Operation has
	// why it is off by default. cerulean serve sets it when it serves HTTPS.
	StrictProtocol bool
	// Throttle, if set, enforces scale targets on entity operations (--scale-targets):
	// requests over a partition's or the account's target are answered 503 ServerBusy.
	Throttle *throttle.Limiter
	// Faults, if set, injects failures and latency (--faults).
	Faults *faults.Injector
	// Deletions, if set, keeps deleted tables' names taken for a while
	// (--table-delete-delay): creating one meanwhile is 409 TableBeingDeleted.
	Deletions *faults.Deletions
	// NetHTTP serves every request with Go's net/http instead of package h1
	// (--http-server net/http; see ServeHandler).
	NetHTTP bool
}

// Server serves the Azure Table REST API over one engine.
type Server struct {
	tables   *table.Service
	verifier *auth.Verifier
	// bearer and roles are Options.Bearer and Options.Roles (nil: no bearer tokens).
	bearer BearerVerifier
	roles  RoleAuthorizer
	log    *slog.Logger
	limits Limits
	// consistency is Options.ReadConsistency.
	consistency storage.Consistency
	// observer is Options.Observer (nil: none).
	observer observe.Observer
	// strictProtocol is Options.StrictProtocol.
	strictProtocol bool
	// throttle, faults and deletions are Options' (nil: off); see gate.
	throttle  *throttle.Limiter
	faults    *faults.Injector
	deletions *faults.Deletions
	// netHTTP is Options.NetHTTP.
	netHTTP bool
	// busyLog summarises the log lines of 5xx answers that come in floods (see logRequest).
	busyLog failureLog
	// redact removes credentials from what the logs and the observers get (redacted).
	redact *auth.Redactor
	budget *bodyBudget
	// keepAlive is the Keep-Alive header of responses on connections kept open. Every such
	// response shares this one slice (net/http only reads it), so it must never be modified.
	keepAlive []string

	idPrefix string
	idSeq    atomic.Uint64

	// active counts the requests being served.
	active atomic.Int64
	// closing is set when shutdown begins; bodies holds the bodies being received, whose
	// read deadlines shutdown tightens up to graceEnd.
	closing atomic.Bool
	// pollStop is closed when shutdown begins, ending the waits of long-polling feed
	// reads (changes.go) so that they answer at once.
	pollStop     chan struct{}
	pollStopOnce sync.Once
	bodiesMu     sync.Mutex
	bodies       map[*bodyRead]struct{}
	graceEnd     time.Time
}

// New returns a server; it owns nothing it must close (the engine is the caller's).
func New(opts Options) (*Server, error) {
	if opts.Engine == nil {
		return nil, errors.New("server: no engine")
	}
	if len(opts.Accounts) == 0 {
		return nil, errors.New("server: no accounts")
	}
	if opts.ReadConsistency > storage.Eventual {
		return nil, fmt.Errorf("server: unknown read consistency %v", opts.ReadConsistency)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	h := hex.EncodeToString(rnd[:])
	limits := opts.Limits.withDefaults()
	s := &Server{
		tables:         table.New(opts.Engine, log, table.WithElasticTables(opts.ElasticTables), table.WithChangeFeedTables(opts.ChangeFeedTables)),
		verifier:       auth.NewVerifier(opts.Accounts, opts.Now),
		bearer:         opts.Bearer,
		roles:          opts.Roles,
		redact:         auth.NewRedactor(opts.Accounts),
		log:            log,
		limits:         limits,
		consistency:    opts.ReadConsistency,
		observer:       opts.Observer,
		strictProtocol: opts.StrictProtocol,
		throttle:       opts.Throttle,
		faults:         opts.Faults,
		deletions:      opts.Deletions,
		netHTTP:        opts.NetHTTP,
		budget:         newBodyBudget(limits.MaxBodyMemory),
		keepAlive:      []string{keepAliveValue(limits.IdleTimeout)},
		idPrefix:       h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-",
		bodies:         map[*bodyRead]struct{}{},
		pollStop:       make(chan struct{}),
	}
	return s, nil
}

// Health reports whether the storage engine is answering, and if not, since when.
func (s *Server) Health() (ok bool, since time.Time) { return s.tables.Health() }

// request carries what every handler needs about one request.
type request struct {
	r *http.Request
	// w is the response writer handlers use (rw); rc controls the connection's deadlines.
	w         http.ResponseWriter
	rw        responseWriter
	rc        *http.ResponseController
	rcv       http.ResponseController // what rc points to (no allocation of its own)
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
	// sas is the shared access signature that authorized the request (nil for shared key).
	sas *auth.SAS
	// keyRefused is why the request's Authorization header did not verify when its SAS
	// is used instead (see authenticate), for the SAS's error detail.
	keyRefused error
	// principal is who a verified bearer token names (nil for other credentials), whose
	// roles decide each operation (authorizeBearer).
	principal *identity.Principal
	// keyVerified is set when the Authorization header verified (shared key), so that the
	// access log and metrics can name its scheme without parsing it again.
	keyVerified bool
	// ownSig is the signature of the SAS in the request's query ("" if none), once
	// ownSigKnown: what redacted removes besides the accounts' keys.
	ownSig      string
	ownSigKnown bool

	// The body: whether it was read to its end, whether it counts as large, how much of
	// the body budget the request holds, and its size.
	bodyDone  bool
	bodyLarge bool
	bodyHeld  int64
	// client is the request's slot in the body budget (clientSlot) plus one, 0 until the
	// request holds any.
	client int32
	// pooledBody is readBatchBody's buffer, back to its pool when the request ends.
	pooledBody *[]byte
	// chunks is the body readBulkBody keeps, back to their pool by dropBody or when the
	// request ends; bodyKept is what they hold of bodyHeld until then, and keptHeld what
	// the request holds through holdKept.
	chunks   []*[]byte
	bodyKept int64
	keptHeld int64
	bytesIn  int64
	// err is the error the request was answered with, for the log line.
	err *azerr.Error
	// obs is what the observers get; handlers fill its PartitionKey and entity counts,
	// and observeRequest the rest.
	obs observe.Request
	// gate's state (faults.go): what the throttle took at admission and for which
	// partition, and the faults drawn for after the operation.
	gated      bool
	charged    int
	gatePK     string
	resetAfter bool
	cutPage    bool
	reset      bool

	// hv backs the value slices of the response headers the request sets (see hdr), so
	// that setting one costs no allocation.
	hv  [16]string
	nhv int
}

// hdr is a response header value for rq: a one-element slice backed by rq.hv while it
// lasts. Its capacity is one, so an append to it (Header.Add) copies instead of writing
// into the next header's value.
func (rq *request) hdr(v string) []string {
	if rq.nhv == len(rq.hv) {
		return []string{v}
	}
	i := rq.nhv
	rq.nhv++
	rq.hv[i] = v
	return rq.hv[i : i+1 : i+1]
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
	start := time.Now()
	s.active.Add(1)
	defer s.active.Add(-1)
	rq := &request{r: r, id: s.nextRequestID(), level: edmjson.MinimalMetadata}
	rq.rcv = *http.NewResponseController(w)
	rq.rc = &rq.rcv
	rq.rw = responseWriter{ResponseWriter: w, s: s, rq: rq}
	rq.w = &rq.rw
	// The write deadline responseWriter arms for a response is cleared by the HTTP server
	// after each request (h1's serveRequest; net/http's conn.serve, in the Go 1.26 go.mod
	// requires, for the connections h1 hands over), so a request starts with none, and its 100 Continue cannot be cut off by the previous response's
	// (TestStaleWriteDeadline): nothing is reset here.
	defer s.logRequest(rq, start)
	if s.observer != nil {
		defer s.observeRequest(rq, start)
	}
	defer s.releaseBody(rq)
	// rq.query stays nil (an empty url.Values to read) without a query string.
	if r.URL.RawQuery != "" {
		rq.query = r.URL.Query()
	}
	h := w.Header()
	h["X-Ms-Request-Id"] = rq.hdr(rq.id)
	h["X-Ms-Version"] = rq.hdr(DefaultVersion)
	if v := first(r.Header["X-Ms-Client-Request-Id"]); v != "" && len(v) <= 1024 {
		h["X-Ms-Client-Request-Id"] = rq.hdr(v)
	}
	h["Cache-Control"] = rq.hdr("no-cache")
	h["X-Content-Type-Options"] = rq.hdr("nosniff")
	h["Server"] = rq.hdr("Cerulean")
	rq.pathStyle = s.address(rq)
	if r.Method == http.MethodOptions {
		// CORS preflight is unauthenticated by design: browsers send no credentials, and
		// no x-ms-version either (it is listed in Access-Control-Request-Headers).
		if err := s.preflight(rq); err != nil {
			s.writeError(rq, err)
		}
		return
	}
	if origin := first(r.Header["Origin"]); origin != "" {
		// CORS headers go on every response to a browser, errors included, as the
		// service does; the rules are public to any origin that asks by preflight.
		s.addCORS(rq, origin)
	}
	if err := s.serve(rq); err != nil {
		s.writeError(rq, err)
	}
	if rq.gated && s.throttle != nil {
		s.chargeRest(rq)
	}
}

func (s *Server) serve(rq *request) error {
	r := rq.r
	pathStyle := rq.pathStyle
	// Authenticate before looking at the resource, so an unauthenticated caller learns
	// nothing about what exists; an unknown account fails like a bad signature.
	// The XML endpoints (ACL, service properties, stats) answer errors in XML, including
	// authentication failures; the query alone tells them apart.
	rq.xml = rq.query.Has("comp") && !jsonComp(rq.query) || rq.query.Get("restype") == "service"
	version, err := requestVersion(r, rq.query)
	if err != nil {
		return err
	}
	if version != DefaultVersion {
		rq.w.Header()["X-Ms-Version"] = rq.hdr(version)
	}
	sas, err := s.authenticate(rq)
	if err != nil {
		return err
	}
	rq.root = serviceRoot(r, pathStyle)
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
		rq.sas = sas
		// A bad If-Match is reported by the handler.
		if err := s.authorizeSAS(rq, sas, sasOperation(res, method, rq.query, opCondition(r))); err != nil {
			return err
		}
	}
	if rq.principal != nil {
		if err := s.authorizeBearer(rq, sasOperation(res, method, rq.query, opCondition(r)), res.Table); err != nil {
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
			switch rq.query.Get("comp") {
			case compSettings:
				return s.tableSettingsRequest(rq, method)
			case compBulk:
				return s.bulkRequest(rq, method)
			case compChanges:
				return s.changesRequest(rq, method)
			}
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
	pathStyle := !strings.Contains(host, ".") || host == "host.docker.internal" || isIP(host)
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

// isIP reports whether host is an IP address, as net.ParseIP != nil would, without
// allocating the address.
func isIP(host string) bool {
	a, err := netip.ParseAddr(host)
	return err == nil && a.Zone() == "" // net.ParseIP takes no zone
}

// resourcePath is the decoded path after the account. On the path-style secondary
// endpoint, a second segment naming the account again and followed by '/' is skipped:
// the Python SDK (and so the Azure CLI) builds its secondary URL by putting
// "host/<account>-secondary" in place of the primary's host, keeping the primary's own
// "/<account>" path, e.g. /devstoreaccount1-secondary/devstoreaccount1/?comp=stats. No
// table resource is followed by '/', so a table named like its account ("acct()",
// "acct(PartitionKey=...)") is never mistaken for it.
func (s *Server) resourcePath(rq *request, pathStyle bool) string {
	p := strings.TrimPrefix(rq.r.URL.Path, "/")
	if pathStyle {
		_, p, _ = strings.Cut(p, "/")
		if rq.secondary {
			if rest, ok := strings.CutPrefix(p, rq.account+"/"); ok {
				p = rest
			}
		}
	}
	return p
}

// serviceRoot is the service root URL as the client addressed it: scheme, host, and for a
// path-style request the account segment (built in one allocation).
func serviceRoot(r *http.Request, pathStyle bool) string {
	var b [128]byte
	root := b[:0]
	if r.TLS != nil {
		root = append(root, "https://"...)
	} else {
		root = append(root, "http://"...)
	}
	root = append(root, r.Host...)
	if pathStyle {
		root = append(root, '/')
		root = append(root, firstSegment(r.URL.Path)...)
	}
	return string(root)
}

// first is the first of a header's values, "" without one. Request header maps from
// net/http have canonical keys, which callers index directly (no canonicalisation per
// lookup, which allocates for a key not already canonical).
func first(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

func firstSegment(p string) string {
	p = strings.TrimPrefix(p, "/")
	seg, _, _ := strings.Cut(p, "/")
	return seg
}

// effectiveMethod applies X-HTTP-Method tunnelling: only with POST, exactly once, and
// only to MERGE, PUT or DELETE.
func effectiveMethod(r *http.Request) (string, error) {
	xs := r.Header["X-Http-Method"] // X-HTTP-Method
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

// negotiate picks the JSON metadata level: $format wins over Accept. Asking only for
// Atom or XML is 415 AtomFormatNotSupported, as the service answers since 2015-12-11; asking
// only for anything else (text/html...) is 415 MediaTypeNotSupported, the service's answer
// when no acceptable media type is offered (azure-sdk-for-python#13514).
func negotiate(r *http.Request, q url.Values) (edmjson.Level, error) {
	format, accept := q.Get("$format"), first(r.Header["Accept"])
	lvl, ok := edmjson.NegotiateLevel(format, accept)
	if !ok {
		asked := accept
		if strings.TrimSpace(format) != "" {
			asked = format
		}
		if asksForAtom(asked) {
			return 0, azerr.New(azerr.AtomFormatNotSupported)
		}
		return 0, azerr.New(azerr.MediaTypeNotSupported)
	}
	return lvl, nil
}

// asksForAtom reports whether a media-range list (Accept, or a $format value) names one of
// the Atom/XML formats the Table service served before JSON.
func asksForAtom(list string) bool {
	for _, rng := range strings.Split(list, ",") {
		typ, _, _ := strings.Cut(rng, ";")
		switch strings.ToLower(strings.TrimSpace(typ)) {
		case "application/atom+xml", "application/xml", "text/xml", "atom", "xml":
			return true
		}
	}
	return false
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

// checkContentType refuses XML/Atom entity payloads with a clear 415.
func checkContentType(r *http.Request) error {
	ct := first(r.Header["Content-Type"])
	if ct == "application/json" {
		return nil // what the SDKs send
	}
	ct = strings.ToLower(ct)
	if strings.Contains(ct, "xml") {
		return azerr.New(azerr.AtomFormatNotSupported)
	}
	if ct != "" && !strings.HasPrefix(ct, "application/json") {
		return azerr.New(azerr.MediaTypeNotSupported)
	}
	return nil
}

// preference reads Prefer: "return-no-content", "return-content", or "" when absent.
func preference(r *http.Request) string { return preferenceOf(r.Header["Prefer"]) }

// preferenceOf is preference from the request's Prefer values.
func preferenceOf(prefer []string) string {
	for _, v := range prefer {
		for v != "" {
			var p string
			p, v, _ = strings.Cut(v, ",")
			switch p = strings.TrimSpace(p); {
			case strings.EqualFold(p, "return-no-content"):
				return "return-no-content"
			case strings.EqualFold(p, "return-content"):
				return "return-content"
			}
		}
	}
	return ""
}

// send writes a complete response with a body.
func (rq *request) send(status int, contentType string, body []byte) {
	h := rq.w.Header()
	h["Content-Type"] = rq.hdr(contentType)
	h["Content-Length"] = rq.hdr(strconv.Itoa(len(body)))
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
	rq.w.Header()["Dataserviceversion"] = rq.hdr("3.0;")
}

// writeError renders err as the service does: x-ms-error-code, and a one-line JSON
// odata.error body (XML for the XML endpoints).
func (s *Server) writeError(rq *request, err error) {
	e, known := azerr.As(err)
	if !known {
		// The path only (the query string carries a SAS signature), and redacted: a
		// percent-encoded '?' can have put one in the path.
		s.log.Error("internal error", "request_id", rq.id, "method", rq.r.Method, "path", s.redacted(rq, rq.r.URL.Path), "err", err)
	}
	rq.noteError(e)
	msg := errorMessage(rq, e)
	h := rq.w.Header()
	h["X-Ms-Error-Code"] = []string{string(e.Code)}
	if e.Code == azerr.ServerBusy && rq.obs.Throttled == "" && (rq.obs.Fault == "" || rq.obs.Fault == "latency") {
		// The server's own busy states say when to come back; the service's throttling
		// answers (and their emulation) carry no Retry-After, so the SDKs back off.
		h["Retry-After"] = []string{"1"}
	}
	bp := bufPool.Get().(*[]byte)
	defer putBuf(bp)
	if rq.xml {
		*bp = appendXMLError((*bp)[:0], string(e.Code), msg, e.Fields)
		rq.sendXML(e.Status, *bp)
		return
	}
	body := appendJSONFields(edmjson.AppendError((*bp)[:0], string(e.Code), msg), e.Fields)
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
