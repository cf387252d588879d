package batch

import (
	"bytes"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"

	"github.com/ceruleandb/cerulean/internal/azerr"
)

const (
	// MaxBodyBytes is the largest $batch request body the service accepts (4 MiB). The
	// caller enforces it while reading the body, before Parse, and answers a larger body
	// with 413 RequestBodyTooLarge.
	MaxBodyBytes = 4 << 20
	// MaxOperations is the most operations one changeset may hold.
	MaxOperations = 100
	// maxBoundary bounds the boundary parameter; RFC 2046 allows 70 characters, and we
	// are lenient but not unbounded.
	maxBoundary = 200
	// maxHeaders and maxQueryPairs bound one sub-request (the SDKs send about ten
	// headers and at most a dozen query parameters), so a 4 MiB body of tiny header lines
	// or '&'s cannot make Parse build maps of millions of entries.
	maxHeaders    = 100
	maxQueryPairs = 64
)

// Operation is one sub-request of a batch, as sent.
type Operation struct {
	// Method is the effective method, upper-cased: POST (insert), PUT (replace or
	// insert-or-replace), MERGE (merge or insert-or-merge), DELETE, or GET (only in a
	// retrieve request). PATCH is normalised to MERGE, since the service treats the two
	// identically and the caller then has one merge verb to handle. X-HTTP-Method
	// tunnelling is already applied: only with POST, exactly one value, one of MERGE, PUT,
	// DELETE or PATCH (else XMethodNotUsingPost, XMethodIncorrectCount,
	// XMethodIncorrectValue).
	Method string
	// URL is the request-line target as sent, absolute (every SDK) or a path. The caller
	// ignores its scheme and host and resolves Path against its own addressing rules.
	URL *url.URL
	// Path is URL's path percent-decoded exactly once; '+' stays '+'.
	Path string
	// Header holds the sub-request's headers in the order sent, under canonical names.
	// Empty values are kept (the Go SDK sends "x-ms-version: " and "DataServiceVersion: "
	// inside parts).
	Header Header
	// Body is the sub-request body: leading blank lines trimmed (JS writes an extra CRLF
	// before the JSON), and without the CRLF that belongs to the next boundary. It aliases
	// the body passed to Parse; nil when empty. Any Content-Length header is ignored: the
	// boundary delimits the body.
	Body []byte
	// ContentID is the Content-ID of the MIME part or, failing that, of the HTTP
	// sub-request; "" when neither has one. It is only echoed in the response.
	ContentID string
}

// Query returns the URL's query decoded as a form (so %24format is $format and '+' is a
// space). A pair with an invalid escape keeps its raw text rather than failing the batch.
// SAS parameters are left in; the caller authorises only the outer request. Nil when the
// URL has no query. It is decoded at each call, not by Parse: the server reads only a
// retrieve's, while every SDK sends "$format" on each sub-request of a changeset.
func (o *Operation) Query() url.Values {
	if o.URL == nil {
		return nil
	}
	return parseQuery(o.URL.RawQuery)
}

// Header is a sub-request's header fields in the order sent, their names in canonical
// form (textproto.CanonicalMIMEHeaderKey's). A slice rather than an http.Header: a
// changeset has up to a hundred parts, and a map for each was a tenth of parsing them.
type Header []Field

// Field is one header line.
type Field struct{ Name, Value string }

// Values returns the values of every field named name (in any case), in order; nil when
// there is none.
func (h Header) Values(name string) []string { return h.AppendValues(nil, name) }

// AppendValues appends the values of every field named name (in any case) to vs, in
// order, and returns the extended slice.
func (h Header) AppendValues(vs []string, name string) []string {
	for _, f := range h {
		if strings.EqualFold(f.Name, name) {
			vs = append(vs, f.Value)
		}
	}
	return vs
}

// Get returns the value of the first field named name (in any case), or "".
func (h Header) Get(name string) string {
	for _, f := range h {
		if strings.EqualFold(f.Name, name) {
			return f.Value
		}
	}
	return ""
}

// Request is a parsed $batch request.
type Request struct {
	// Operations are the changeset's operations in request order (1..MaxOperations), or
	// the single query when Retrieve is set.
	Operations []Operation
	// ChangesetBoundary is the changeset's boundary; "" for a retrieve.
	ChangesetBoundary string
	// Retrieve reports a batch whose only part is a GET outside any changeset (a
	// retrieve-entity operation, which the REST reference allows but no current SDK sends).
	Retrieve bool
}

// OpError is a Parse failure that belongs to one operation of the changeset. The service
// reports such failures inside a 202 batch response: the caller should answer with
// WriteFailure(Index, ...) using Err's status and code, the message "<Index>:" +
// Err.Message, and ContentID echoed. Err.Message carries no index prefix.
type OpError struct {
	Index     int
	ContentID string
	Err       *azerr.Error
}

func (e *OpError) Error() string { return strconv.Itoa(e.Index) + ":" + e.Err.Error() }

// Unwrap returns the *azerr.Error, so azerr.As and errors.As see it.
func (e *OpError) Unwrap() error { return e.Err }

// tooManyMessage is the service's wording, recorded with index 0 or 99; we use 0, as
// Azurite does (see Parse).
const tooManyMessage = "The batch request operation exceeds the maximum 100 changes per change set."

// malformed is the whole-request error for a body that is not a well-formed batch.
func malformed(detail string) *azerr.Error {
	e := azerr.New(azerr.InvalidInput)
	e.Detail = "$batch: " + detail
	return e
}

// Parse parses a $batch request body given the request's Content-Type.
//
// The body must be multipart/mixed with exactly one part: either a changeset
// (multipart/mixed) of 1..MaxOperations application/http parts, each a POST, PUT,
// MERGE/PATCH or DELETE, or a single application/http GET (Retrieve). Structural problems
// return a plain *azerr.Error 400 InvalidInput; problems in one operation return an
// *OpError (see the package documentation for the split and why).
//
// More than MaxOperations operations is an *OpError with Index 0 and code InvalidInput:
// the service was recorded answering with index 0 and with 99; 0 matches Azurite, so tests
// written against Azurite agree with Cerulean. It is checked before the operations are
// parsed.
//
// The returned operations' Body fields alias body.
func Parse(contentType string, body []byte) (*Request, error) {
	mt, boundary := mediaType(contentType)
	if !strings.EqualFold(mt, "multipart/mixed") {
		return nil, malformed("the request Content-Type must be multipart/mixed")
	}
	if err := checkBoundary(boundary); err != nil {
		return nil, err
	}
	parts, err := split(body, boundary, 2)
	if err != nil {
		return nil, err
	}
	switch {
	case len(parts) == 0:
		return nil, malformed("the batch contains no parts")
	case len(parts) > 1:
		// Exactly one changeset, or one query, per batch; a second changeset (or anything
		// next to the first) is refused before anything runs.
		return nil, malformed("a batch may contain only one changeset or one query operation")
	}
	ph, content, err := parsePartHeaders(parts[0])
	if err != nil {
		return nil, err
	}
	pmt, csBoundary := mediaType(string(ph.contentType))
	switch {
	case strings.EqualFold(pmt, "multipart/mixed"):
		if err := checkBoundary(csBoundary); err != nil {
			return nil, err
		}
		return parseChangeset(csBoundary, content)
	case pmt == "" || strings.EqualFold(pmt, "application/http"):
		if err := ph.checkEncoding(); err != nil {
			return nil, err
		}
		ops, err := parseOperations([]rawOperation{{ph: ph, c: content}})
		if err != nil {
			return nil, err
		}
		op := ops[0]
		if op.Method != http.MethodGet {
			return nil, malformed("an operation outside a changeset must be a query (GET)")
		}
		return &Request{Operations: []Operation{op}, Retrieve: true}, nil
	default:
		return nil, malformed("unexpected batch part Content-Type " + strconv.Quote(string(ph.contentType)))
	}
}

func parseChangeset(boundary string, content []byte) (*Request, error) {
	parts, err := split(content, boundary, MaxOperations+1)
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		return nil, malformed("the changeset contains no operations")
	}
	if len(parts) > MaxOperations {
		return nil, &OpError{Index: 0, Err: azerr.Newf(azerr.InvalidInput, tooManyMessage)}
	}
	raws := make([]rawOperation, len(parts))
	for i, p := range parts {
		ph, c, err := parsePartHeaders(p)
		if err != nil {
			return nil, err
		}
		if !ph.isHTTPPart() {
			return nil, malformed("changeset part " + strconv.Itoa(i) + " has Content-Type " +
				strconv.Quote(string(ph.contentType)) + "; want application/http")
		}
		if err := ph.checkEncoding(); err != nil {
			return nil, err
		}
		raws[i] = rawOperation{ph: ph, c: c}
	}
	ops, err := parseOperations(raws)
	if err != nil {
		return nil, err
	}
	for i := range ops {
		switch ops[i].Method {
		case http.MethodPost, http.MethodPut, "MERGE", http.MethodDelete:
		case http.MethodGet:
			return nil, &OpError{Index: i, ContentID: ops[i].ContentID, Err: azerr.Newf(azerr.InvalidInput,
				"A query (GET) operation cannot be part of a changeset.")}
		default:
			return nil, &OpError{Index: i, ContentID: ops[i].ContentID, Err: azerr.New(azerr.UnsupportedHTTPVerb)}
		}
	}
	return &Request{Operations: ops, ChangesetBoundary: boundary}, nil
}

// mediaType splits a Content-Type into its media type and boundary parameter. It is more
// forgiving than mime.ParseMediaType (odd spacing, trailing ';', unknown malformed
// parameters are skipped); a quoted boundary is unquoted.
func mediaType(ct string) (mt, boundary string) {
	mt, params, _ := strings.Cut(ct, ";")
	mt = strings.TrimSpace(mt)
	for params != "" {
		var p string
		p, params, _ = strings.Cut(params, ";")
		k, v, ok := strings.Cut(p, "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "boundary") {
			continue
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
			if strings.IndexByte(v, '\\') >= 0 {
				var b strings.Builder
				for i := 0; i < len(v); i++ {
					if v[i] == '\\' && i+1 < len(v) {
						i++
					}
					b.WriteByte(v[i])
				}
				v = b.String()
			}
		}
		boundary = v
	}
	return mt, boundary
}

func checkBoundary(b string) error {
	if b == "" {
		return malformed("the multipart Content-Type has no boundary")
	}
	if len(b) > maxBoundary || strings.ContainsAny(b, "\r\n") {
		return malformed("the multipart boundary is not valid")
	}
	return nil
}

// split returns the contents of the parts of a multipart body (each part's headers and
// body, without the delimiters), tolerating a preamble, CRLF or bare LF line endings (per
// delimiter, so mixed files work), whitespace after a boundary, and an epilogue. It stops
// after limit parts; a body without a closing delimiter is malformed.
//
// A delimiter is "--boundary" at the start of the body or of a line, followed by optional
// spaces or tabs and a line end ("--boundary--" closes). The line end before a delimiter
// belongs to it, so it is not part of the previous part's content.
func split(data []byte, boundary string, limit int) ([][]byte, error) {
	dash := []byte("--" + boundary)
	// The first delimiter: anything before it is preamble.
	pos := 0
	for {
		j := bytes.Index(data[pos:], dash)
		if j < 0 {
			return nil, malformed("the multipart body does not contain its boundary")
		}
		j += pos
		if j == 0 || data[j-1] == '\n' {
			if next, final, ok := delimiterEnd(data, j+len(dash)); ok {
				if final {
					return nil, nil
				}
				pos = next
				break
			}
		}
		pos = j + 1
	}
	nlDash := []byte("\n--" + boundary)
	parts := make([][]byte, 0, limit) // limit is small (2, or a changeset's 101)
	start := pos
	// Search from the newline that ended the previous delimiter line, so a delimiter on the
	// very next line (an empty part) is found too.
	from := pos - 1
	for {
		k := indexLineDelim(data[from:], nlDash)
		if k < 0 {
			return nil, malformed("the multipart body is not terminated by its closing boundary")
		}
		k += from
		next, final, ok := delimiterEnd(data, k+len(nlDash))
		if !ok {
			from = k + 1
			continue
		}
		end := k
		if end > start && data[end-1] == '\r' {
			end--
		}
		if end < start {
			end = start
		}
		parts = append(parts, data[start:end])
		if final || len(parts) >= limit {
			return parts, nil
		}
		start, from = next, next-1
	}
}

// indexLineDelim is bytes.Index(data, nlDash) for a pattern that starts with its only
// '\n': it jumps from line end to line end with IndexByte and compares there. A part's
// lines are few and long (a 1 KiB entity is one), where bytes.Index, failing on every
// '\n', soon fell back to comparing the whole pattern at each byte. Linear: a comparison
// stops at the next '\n' at the latest.
func indexLineDelim(data, nlDash []byte) int {
	for i := 0; i < len(data); i++ {
		j := bytes.IndexByte(data[i:], '\n')
		if j < 0 {
			return -1
		}
		i += j
		if bytes.HasPrefix(data[i:], nlDash) {
			return i
		}
	}
	return -1
}

// delimiterEnd inspects what follows "--boundary" at data[i:]. A closing delimiter
// ("--" then optional whitespace and a line end, or the end of the body) reports final;
// otherwise optional whitespace then CRLF or LF must follow, and next is the index after
// it. ok is false when this is not a delimiter (the boundary is only a prefix of the line).
func delimiterEnd(data []byte, i int) (next int, final, ok bool) {
	if i+1 < len(data) && data[i] == '-' && data[i+1] == '-' {
		i += 2
		final = true
	}
	for i < len(data) && (data[i] == ' ' || data[i] == '\t') {
		i++
	}
	switch {
	case i == len(data):
		return i, final, final
	case data[i] == '\n':
		return i + 1, final, true
	case data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n':
		return i + 2, final, true
	}
	return 0, false, false
}

// nextLine returns the line starting at data[i:] without its CRLF or LF, and the index
// after the line end.
func nextLine(data []byte, i int) (line []byte, next int) {
	j := bytes.IndexByte(data[i:], '\n')
	if j < 0 {
		line, next = data[i:], len(data)
	} else {
		line, next = data[i:i+j], i+j+1
	}
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, next
}

// headerLine splits "Name: value". The name must be a token (surrounding whitespace is
// tolerated), the value is trimmed, and may be empty. Folded continuation lines are not
// accepted: no SDK sends them and RFC 7230 obsoleted them.
func headerLine(line []byte) (name, value []byte, ok bool) {
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 {
		return nil, nil, false
	}
	name = bytes.TrimRight(line[:colon], " \t")
	if len(name) == 0 {
		return nil, nil, false
	}
	for _, c := range name {
		if !tokenChar[c] {
			return nil, nil, false
		}
	}
	return name, bytes.Trim(line[colon+1:], " \t"), true
}

// headerLineString is headerLine for a string.
func headerLineString(line string) (name, value string, ok bool) {
	colon := strings.IndexByte(line, ':')
	if colon <= 0 {
		return "", "", false
	}
	name = trimRightBlanks(line[:colon]) // a leading blank (a folded line) is refused below
	if len(name) == 0 {
		return "", "", false
	}
	for i := 0; i < len(name); i++ {
		if !tokenChar[name[i]] {
			return "", "", false
		}
	}
	return name, trimBlanks(line[colon+1:]), true
}

// trimBlanks is strings.Trim(s, " \t") without building a character set at each call:
// a changeset's parts have some eight header lines each, and the sets were a tenth of
// parsing them.
func trimBlanks(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	return trimRightBlanks(s)
}

// trimRightBlanks is strings.TrimRight(s, " \t"), likewise.
func trimRightBlanks(s string) string {
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// tokenChar reports the bytes allowed in an HTTP token (RFC 7230 tchar).
var tokenChar = alnumAnd("!#$%&'*+-.^_`|~")

// alnumAnd is the set of ASCII letters and digits and the bytes of extra.
func alnumAnd(extra string) (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for i := 0; i < len(extra); i++ {
		t[extra[i]] = true
	}
	return t
}

// partHeader holds the MIME part headers that matter (aliasing the body); others are
// ignored.
type partHeader struct {
	contentType, encoding, contentID []byte
}

// checkEncoding accepts the identity transfer encodings only; every SDK sends "binary".
func (ph *partHeader) checkEncoding() error {
	e := ph.encoding
	if len(e) == 0 || bytes.EqualFold(e, []byte("binary")) || bytes.EqualFold(e, []byte("8bit")) ||
		bytes.EqualFold(e, []byte("7bit")) {
		return nil
	}
	return malformed("unsupported Content-Transfer-Encoding " + strconv.Quote(string(e)))
}

// isHTTPPart reports whether a part's Content-Type is application/http or absent.
func (ph *partHeader) isHTTPPart() bool {
	mt, _, _ := bytes.Cut(ph.contentType, []byte(";"))
	mt = bytes.TrimSpace(mt)
	return len(mt) == 0 || bytes.EqualFold(mt, []byte("application/http"))
}

// parsePartHeaders reads a MIME part's header block (names in any case, values may be
// empty) and returns what follows the blank line that ends it.
func parsePartHeaders(p []byte) (partHeader, []byte, error) {
	var ph partHeader
	i := 0
	for i < len(p) {
		line, next := nextLine(p, i)
		i = next
		if len(line) == 0 {
			return ph, p[i:], nil
		}
		name, value, ok := headerLine(line)
		if !ok {
			return ph, nil, malformed("a multipart part has a malformed header line")
		}
		switch {
		case bytes.EqualFold(name, []byte("Content-Type")):
			ph.contentType = value
		case bytes.EqualFold(name, []byte("Content-Transfer-Encoding")):
			ph.encoding = value
		case bytes.EqualFold(name, []byte("Content-ID")):
			ph.contentID = value
		}
	}
	return ph, nil, nil
}

// rawOperation is one application/http part: its MIME headers, its content (request
// line, headers, blank line, body), and where the head and the body lie in the content.
type rawOperation struct {
	ph                        partHeader
	c                         []byte
	start, headEnd, bodyStart int
	lines                     int // lines in the head, request line included
}

// locate finds the head (request line and headers, after any blank lines) and the body.
func (r *rawOperation) locate(index int) error {
	c := r.c
	start := 0
	for start < len(c) {
		line, next := nextLine(c, start)
		if len(bytes.TrimSpace(line)) != 0 {
			break
		}
		start = next
	}
	if start >= len(c) {
		return malformed("batch part " + strconv.Itoa(index) + " has no request line")
	}
	r.start, r.headEnd, r.bodyStart, r.lines = start, len(c), len(c), 0
	for i := start; i < len(c); {
		line, next := nextLine(c, i)
		if len(line) == 0 {
			r.headEnd, r.bodyStart = i, next
			break
		}
		r.lines++
		if r.lines > maxHeaders+1 {
			return malformed("batch part " + strconv.Itoa(index) + " has more than " + strconv.Itoa(maxHeaders) + " headers")
		}
		i = next
	}
	return nil
}

// parseOperations parses the HTTP sub-requests of a changeset (or the one retrieve).
//
// All heads (request lines and headers) are copied into one string, and every method,
// target, header name and value is a substring of it; the header fields of all the
// operations share one slice, and their URLs another. At 100 operations per batch,
// allocations per operation dominate the cost of parsing, so this makes a fixed handful
// per batch; the query is decoded only when asked for (Operation.Query).
func parseOperations(raws []rawOperation) ([]Operation, error) {
	total, lines := 0, 0
	for i := range raws {
		if err := raws[i].locate(i); err != nil {
			return nil, err
		}
		total += raws[i].headEnd - raws[i].start
		lines += max(raws[i].lines-1, 0)
	}
	var sb strings.Builder
	sb.Grow(total)
	for i := range raws {
		sb.Write(raws[i].c[raws[i].start:raws[i].headEnd])
	}
	heads := sb.String()
	fields := make([]Field, lines)
	urls := make([]url.URL, len(raws))
	ops := make([]Operation, len(raws))
	off := 0
	for i := range raws {
		r := &raws[i]
		n := r.headEnd - r.start
		k := max(r.lines-1, 0)
		ops[i].URL = &urls[i]
		if err := parseOperation(i, r, heads[off:off+n], fields[:0:k], &ops[i]); err != nil {
			return nil, err
		}
		fields, off = fields[k:], off+n
	}
	return ops, nil
}

// parseOperation parses one sub-request whose head is given as a string.
// h has room for the head's header lines; op.URL is where the target is parsed to.
func parseOperation(index int, r *rawOperation, head string, h Header, op *Operation) error {
	if len(r.ph.contentID) > 0 {
		op.ContentID = string(r.ph.contentID)
	}
	rl, rest, _ := strings.Cut(head, "\n")
	method, target, ok := requestLine(strings.TrimSuffix(rl, "\r"))
	if !ok {
		return malformed("batch part " + strconv.Itoa(index) + " has a malformed request line")
	}
	for rest != "" {
		var line string
		line, rest, _ = strings.Cut(rest, "\n")
		name, value, ok := headerLineString(strings.TrimSuffix(line, "\r"))
		if !ok {
			return malformed("batch part " + strconv.Itoa(index) + " has a malformed header line")
		}
		h = append(h, Field{canonicalKey(name), value})
	}
	body := r.c[r.bodyStart:]
	for len(body) > 0 && (body[0] == '\r' || body[0] == '\n') {
		body = body[1:]
	}
	if len(body) == 0 {
		body = nil
	}
	op.Header, op.Body = h, body
	if op.ContentID == "" {
		op.ContentID = h.Get("Content-Id")
	}

	u := op.URL
	if !parseTargetFast(target, u) {
		p, err := parseTarget(target)
		if err != nil {
			op.URL = nil
			return &OpError{Index: index, ContentID: op.ContentID, Err: azerr.New(azerr.InvalidURI)}
		}
		*u = *p
	}
	op.Path = u.Path
	if strings.Count(u.RawQuery, "&") >= maxQueryPairs {
		return &OpError{Index: index, ContentID: op.ContentID, Err: azerr.New(azerr.InvalidQueryParameterValue)}
	}

	m, xerr := effectiveMethod(methodString(method), h)
	if xerr != nil {
		return &OpError{Index: index, ContentID: op.ContentID, Err: xerr}
	}
	op.Method = m
	return nil
}

// commonKeys maps lower-cased header names the SDKs send (and the writer handles) to their canonical form, so the
// usual names cost no allocation (textproto allocates for any non-canonical spelling, and
// Go and JS send "x-ms-version", "DataServiceVersion", "prefer"...).
var commonKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{
		"Accept", "Accept-Charset", "Authorization", "Connection", "Content-Id", "Content-Length",
		"Content-Type", "Dataserviceversion", "Host", "If-Match", "If-None-Match",
		"Maxdataserviceversion", "Prefer", "User-Agent", "X-Http-Method", "X-Ms-Client-Request-Id",
		"X-Ms-Date", "X-Ms-Version",
		// Response headers (write.go).
		"Cache-Control", "Dataserviceid", "Etag", "Location", "Preference-Applied",
		"Transfer-Encoding", "X-Content-Type-Options",
	} {
		m[strings.ToLower(k)] = k
	}
	return m
}()

// canonicalKey is textproto.CanonicalMIMEHeaderKey with a no-allocation path for the
// common names.
func canonicalKey(s string) string {
	// The spellings the SDKs send in every part, matched whole before any case folding.
	switch s {
	case "Content-Type", "Accept", "Content-Length", "Prefer", "If-Match", "Content-Id":
		return s
	case "DataServiceVersion":
		return "Dataserviceversion"
	case "MaxDataServiceVersion":
		return "Maxdataserviceversion"
	case "x-ms-version":
		return "X-Ms-Version"
	case "Content-ID":
		return "Content-Id"
	}
	if len(s) <= 32 {
		var buf [32]byte
		for i := 0; i < len(s); i++ {
			c := s[i]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			buf[i] = c
		}
		if k, ok := commonKeys[string(buf[:len(s)])]; ok {
			return k
		}
	}
	return textproto.CanonicalMIMEHeaderKey(s)
}

// requestLine splits "METHOD SP target SP HTTP/x.y", tolerating extra spaces or tabs.
// The protocol version is not checked beyond its "HTTP/" prefix.
func requestLine(l string) (method, target string, ok bool) {
	l = strings.Trim(l, " \t")
	i := strings.IndexAny(l, " \t")
	if i <= 0 {
		return "", "", false
	}
	method, rest := l[:i], strings.TrimLeft(l[i:], " \t")
	j := strings.LastIndexAny(rest, " \t")
	if j <= 0 {
		return "", "", false
	}
	target, proto := strings.TrimRight(rest[:j], " \t"), rest[j+1:]
	if strings.ContainsAny(target, " \t") || len(proto) < 5 || !strings.EqualFold(proto[:5], "HTTP/") {
		return "", "", false
	}
	for k := 0; k < len(method); k++ {
		if !tokenChar[method[k]] {
			return "", "", false
		}
	}
	return method, target, true
}

// methodString upper-cases a method without allocating for the common ones.
func methodString(m string) string {
	switch m {
	case http.MethodPost, http.MethodPut, http.MethodPatch, "MERGE", http.MethodDelete, http.MethodGet:
		return m
	}
	return strings.ToUpper(m)
}

// effectiveMethod applies X-HTTP-Method tunnelling exactly as the server does for
// single requests (only with POST, exactly once, to MERGE, PUT, DELETE or PATCH) and then
// normalises PATCH to MERGE.
func effectiveMethod(m string, h Header) (string, *azerr.Error) {
	if xs := h.Values("X-Http-Method"); len(xs) > 0 {
		if m != http.MethodPost {
			return "", azerr.New(azerr.XMethodNotUsingPost)
		}
		if len(xs) > 1 || strings.Contains(xs[0], ",") {
			return "", azerr.New(azerr.XMethodIncorrectCount)
		}
		switch x := strings.ToUpper(strings.TrimSpace(xs[0])); x {
		case "MERGE", http.MethodPut, http.MethodDelete, http.MethodPatch:
			m = x
		default:
			return "", azerr.New(azerr.XMethodIncorrectValue)
		}
	}
	if m == http.MethodPatch {
		m = "MERGE"
	}
	return m, nil
}

// parseTarget parses the request-line target: an absolute URL or a path. A relative
// reference whose first segment holds ':' (a key containing a colon, sent without a
// leading '/') is parsed as a path rather than rejected as a scheme.
func parseTarget(t string) (*url.URL, error) {
	u, err := url.Parse(t)
	if err == nil {
		return u, nil
	}
	if strings.HasPrefix(t, "/") || strings.Contains(t, "://") {
		return nil, err
	}
	u, err2 := url.Parse("/" + t)
	if err2 != nil {
		return nil, err
	}
	u.Path = strings.TrimPrefix(u.Path, "/")
	u.RawPath = strings.TrimPrefix(u.RawPath, "/")
	return u, nil
}

// parseTargetFast parses the targets every SDK sends, "http(s)://host[:port]/path?query"
// or "/path?query" with no escapes in the path, into u exactly as url.Parse would (see
// TestParseTargetFast and FuzzParseTargetFast), without url.Parse's allocation and general
// machinery: a changeset's hundred targets were a third of parsing it. It reports false,
// leaving u untouched, for anything else (escapes, user info, IP literals, fragments,
// relative paths, a bare '?'), which parseTarget then handles.
func parseTargetFast(t string, u *url.URL) bool {
	for i := 0; i < len(t); i++ {
		if c := t[i]; c <= ' ' || c >= 0x7f || c == '#' {
			return false
		}
	}
	rest, query, hasQuery := strings.Cut(t, "?")
	if hasQuery && query == "" || strings.IndexByte(rest, '%') >= 0 {
		return false
	}
	var scheme, host string
	switch {
	case strings.HasPrefix(rest, "http://"):
		scheme, rest = "http", rest[len("http://"):]
	case strings.HasPrefix(rest, "https://"):
		scheme, rest = "https", rest[len("https://"):]
	case strings.HasPrefix(rest, "/") && !strings.HasPrefix(rest, "//"):
	default:
		return false
	}
	if scheme != "" {
		host, rest = rest, ""
		if i := strings.IndexByte(host, '/'); i >= 0 {
			host, rest = host[:i], host[i:]
		}
		if !plainHost(host) {
			return false
		}
	}
	raw := ""
	for i := 0; i < len(rest); i++ {
		if !pathPlain[rest[i]] {
			raw = rest // url.Parse keeps the path as sent when its escaping is not the default
			break
		}
	}
	*u = url.URL{Scheme: scheme, Host: host, Path: rest, RawPath: raw, RawQuery: query}
	return true
}

// plainHost reports a non-empty host of letters, digits, '.', '-' and '_', with an
// optional ":port" of digits: what url.Parse takes as it is.
func plainHost(h string) bool {
	name, port, hasPort := strings.Cut(h, ":")
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	if hasPort {
		for i := 0; i < len(port); i++ {
			if port[i] < '0' || port[i] > '9' {
				return false
			}
		}
	}
	return true
}

// pathPlain marks the bytes url.URL's default path escaping leaves as they are.
var pathPlain = alnumAnd("-_.~$&+,/:;=@")

// parseQuery decodes a query as a form, keeping the raw text of a key or value with an
// invalid escape (url.ParseQuery would drop the pair, and also rejects ';'). The caller
// bounds the number of pairs.
func parseQuery(raw string) url.Values {
	if raw == "" {
		return nil
	}
	n := strings.Count(raw, "&") + 1
	q := make(url.Values, n)
	vals := make([]string, n)
	i := 0
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		k, v = queryUnescape(k), queryUnescape(v)
		if old, dup := q[k]; dup {
			q[k] = append(old, v)
			continue
		}
		vals[i] = v
		q[k] = vals[i : i+1 : i+1]
		i++
	}
	return q
}

// queryUnescape decodes one query component, returning the common SDK spellings of
// $format without allocating and s itself when it has no escape or is invalid.
func queryUnescape(s string) string {
	if !strings.ContainsAny(s, "%+") {
		return s
	}
	switch s {
	case "%24format":
		return "$format"
	case "application%2Fjson%3Bodata%3Dminimalmetadata":
		return "application/json;odata=minimalmetadata"
	case "application%2Fjson%3Bodata%3Dnometadata":
		return "application/json;odata=nometadata"
	case "application%2Fjson%3Bodata%3Dfullmetadata":
		return "application/json;odata=fullmetadata"
	}
	if d, err := url.QueryUnescape(s); err == nil {
		return d
	}
	return s
}
