package batch

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
)

// Result is the outcome of one operation, rendered as one sub-response.
type Result struct {
	// Status is the operation's HTTP status: 201/204 on success, the operation's natural
	// error status (400, 404, 409, 412, ...) on failure.
	Status int
	// Header carries the operation's own headers: ETag, Location, DataServiceId and
	// Preference-Applied for writes, Content-Type with a body, and DataServiceVersion to
	// override the default. Keys may be canonical or not. The writer always adds
	// X-Content-Type-Options and Cache-Control itself, and drops Content-ID (use
	// ContentID), Content-Length and Transfer-Encoding (the boundary delimits the body).
	Header http.Header
	// Known carries a write's usual headers as plain strings, written exactly as the
	// same values in Header would be: a 100-operation changeset then builds no header
	// maps. A name set in both is written with both values, Header's first.
	Known Known
	// Body is the sub-response body: none for return-no-content writes (JS treats any
	// "{...}" in a sub-response as an error), the one-line error JSON for a failure.
	Body []byte
	// ContentID is echoed as Content-ID when not empty.
	ContentID string
}

// Known is the usual headers of a successful write's sub-response; an empty field is
// not written.
type Known struct {
	PreferenceApplied, ContentType, Location, DataServiceID, ETag string
	// SessionToken is written as X-Ms-Session-Token, among the other headers in sorted
	// order.
	SessionToken string
}

// sessionTokenKey is how Known.SessionToken's header is named (and sorted).
const sessionTokenKey = "X-Ms-Session-Token"

// Boundary prefixes of the response. Clients depend on them literally (package doc).
const (
	batchResponsePrefix     = "batchresponse_"
	changesetResponsePrefix = "changesetresponse_"
)

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// putBuf returns a buffer to the pool unless it grew past 1 MiB (a large retrieve or
// error body), so the pool does not pin big allocations.
func putBuf(bp *[]byte) {
	if cap(*bp) <= 1<<20 {
		bufPool.Put(bp)
	}
}

// WriteResponse writes the 202 body of a successful changeset: one sub-response per
// operation, in request order, each with status < 400 (a failed batch is WriteFailure's
// job, because .NET counts the parts). It returns the Content-Type for the outer
// response, "multipart/mixed; boundary=batchresponse_<uuid>". Nothing is written when it
// returns an error; otherwise the body is written with a single Write.
func WriteResponse(w io.Writer, results []Result) (contentType string, err error) {
	if err := checkResults(results); err != nil {
		return "", err
	}
	return writeChangeset(w, results)
}

// AppendResponse is WriteResponse appending the body to dst instead of writing it, for a
// caller that gathers the response in a buffer of its own (it saves copying a 100-part
// body from one buffer to another). On error it returns dst unchanged.
func AppendResponse(dst []byte, results []Result) (body []byte, contentType string, err error) {
	if err := checkResults(results); err != nil {
		return dst, "", err
	}
	b, batchID := appendChangeset(dst, results)
	return b, "multipart/mixed; boundary=" + batchID, nil
}

// checkResults is WriteResponse's precondition: at least one result, none a failure.
func checkResults(results []Result) error {
	if len(results) == 0 {
		return errors.New("batch: WriteResponse needs at least one result")
	}
	for i := range results {
		if s := results[i].Status; s < 100 || s >= 400 {
			return errors.New("batch: WriteResponse result " + strconv.Itoa(i) +
				" has status " + strconv.Itoa(s) + "; failures go through WriteFailure")
		}
	}
	return nil
}

// WriteFailure writes the 202 body of a failed changeset: exactly one sub-response, the
// failing operation's, and none for the operations before it (they were rolled back).
//
// index is the zero-based index of the failing operation. res.Body must be the compact,
// single-line odata.error JSON whose message value starts with "<index>:" — .NET matches
// `"value":"(\d+):` on the raw JSON, Python does int(message.split(':', 1)[0]), and JS
// extracts the JSON with a single-line regex — so WriteFailure checks that the body
// contains `"value":"<index>:` and no line break, and refuses otherwise. An empty body is
// allowed (the status alone then tells the clients it failed).
//
// The Go SDK turns a failed transaction into an *azcore.ResponseError built from the outer
// 202, whose ErrorCode is empty unless the outer response carries x-ms-error-code. The
// server may set that header to the failing operation's code: no SDK reads it on a 202
// (the real service does not appear to send it).
func WriteFailure(w io.Writer, index int, res Result) (contentType string, err error) {
	if index < 0 || index >= MaxOperations {
		return "", errors.New("batch: WriteFailure index " + strconv.Itoa(index) + " out of range")
	}
	if res.Status < 400 || res.Status > 599 {
		return "", errors.New("batch: WriteFailure status " + strconv.Itoa(res.Status) + " is not an error")
	}
	if err := checkFailureBody("WriteFailure", index, res.Body); err != nil {
		return "", err
	}
	return writeChangeset(w, []Result{res})
}

// checkFailureBody enforces what the SDKs' batch parsers need of a failed operation's body
// (see WriteFailure): empty, or one line whose message value starts with "<index>:".
func checkFailureBody(fn string, index int, body []byte) error {
	if len(body) == 0 {
		return nil
	}
	if bytes.ContainsAny(body, "\r\n") {
		return errors.New("batch: " + fn + " body must be one line")
	}
	if !bytes.Contains(body, []byte(`"value":"`+strconv.Itoa(index)+":")) {
		return errors.New("batch: " + fn + ` body's message must start with "` + strconv.Itoa(index) + `:" in compact JSON`)
	}
	return nil
}

// WriteRetrieve writes the 202 body answering a retrieve request (Request.Retrieve): one
// application/http part directly in the batch, with no changeset, holding the query's
// result (200 with the entity, or its error). It returns the outer Content-Type.
//
// A failed retrieve (status >= 400) follows WriteFailure's rule for operation 0: its body
// is empty or one line of compact JSON whose message value starts with "0:", so that every
// batch failure carries its operation's index the same way.
func WriteRetrieve(w io.Writer, res Result) (contentType string, err error) {
	if res.Status < 100 || res.Status > 599 {
		return "", errors.New("batch: WriteRetrieve status " + strconv.Itoa(res.Status) + " is not valid")
	}
	if res.Status >= 400 {
		if err := checkFailureBody("WriteRetrieve", 0, res.Body); err != nil {
			return "", err
		}
	}
	batchID := newBoundary(batchResponsePrefix)
	bp := bufPool.Get().(*[]byte)
	defer putBuf(bp)
	b := (*bp)[:0]
	b = appendPart(b, batchID, &res)
	b = appendClose(b, batchID)
	*bp = b
	if _, err := w.Write(b); err != nil {
		return "", err
	}
	return "multipart/mixed; boundary=" + batchID, nil
}

func writeChangeset(w io.Writer, results []Result) (string, error) {
	bp := bufPool.Get().(*[]byte)
	defer putBuf(bp)
	b, batchID := appendChangeset((*bp)[:0], results)
	*bp = b
	if _, err := w.Write(b); err != nil {
		return "", err
	}
	return "multipart/mixed; boundary=" + batchID, nil
}

// appendChangeset appends a batch body holding one changeset of results to b and returns
// it with the batch boundary.
func appendChangeset(b []byte, results []Result) ([]byte, string) {
	batchID := newBoundary(batchResponsePrefix)
	csID := newBoundary(changesetResponsePrefix)
	// The body's first line is the batch delimiter (Go reads the boundary from it), and
	// the changeset part's body starts at once with its own delimiter (Go again).
	b = append(b, "--"...)
	b = append(b, batchID...)
	b = append(b, "\r\nContent-Type: multipart/mixed; boundary="...)
	b = append(b, csID...)
	b = append(b, "\r\n\r\n"...)
	for i := range results {
		b = appendPart(b, csID, &results[i])
	}
	b = appendClose(b, csID)
	return appendClose(b, batchID), batchID
}

// newBoundary returns prefix followed by a random (version 4) UUID in canonical form.
func newBoundary(prefix string) string {
	var u [16]byte
	_, _ = rand.Read(u[:]) // crypto/rand.Read never fails (it crashes the program instead)
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	const hexd = "0123456789abcdef"
	var buf [64]byte
	b := append(buf[:0], prefix...)
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hexd[c>>4], hexd[c&15])
	}
	return string(b)
}

// appendClose appends the closing delimiter "--<boundary>--" and CRLF. The CRLF is the
// one that belongs to an enclosing delimiter, or ends the body.
func appendClose(b []byte, boundary string) []byte {
	b = append(b, "--"...)
	b = append(b, boundary...)
	return append(b, "--\r\n"...)
}

// fixedOrder is the order of the well-known headers after the ones the writer owns,
// following the service's layout (docs/protocol.md §6.3), by their canonical Go names;
// fixedSpelling is how the service spells each (JS matches "ETag: " case-sensitively).
var (
	fixedOrder    = [...]string{"Preference-Applied", "Dataserviceversion", "Content-Type", "Location", "Dataserviceid", "Etag"}
	fixedSpelling = [len(fixedOrder)]string{"Preference-Applied", "DataServiceVersion", "Content-Type", "Location", "DataServiceId", "ETag"}
)

var (
	dataServiceVersion3 = []string{"3.0;"}
	dataServiceVersion1 = []string{"1.0;"}
)

// appendPart appends one application/http part: delimiter line, part headers, blank
// line, status line, headers, blank line, body, and the CRLF that belongs to the next
// delimiter. The blank line after the headers is written even without a body, because
// http.ReadResponse (Go SDK) fails on headers that end at the end of the part.
func appendPart(b []byte, boundary string, r *Result) []byte {
	b = append(b, "--"...)
	b = append(b, boundary...)
	b = append(b, "\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\nHTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(r.Status), 10)
	b = append(b, ' ')
	reason := http.StatusText(r.Status)
	if reason == "" {
		reason = "Unknown" // .NET needs three fields in the status line
	}
	b = append(b, reason...)
	b = append(b, "\r\n"...)
	if r.ContentID != "" {
		b = appendHeader(b, "Content-ID", r.ContentID)
	}
	b = append(b, "X-Content-Type-Options: nosniff\r\nCache-Control: no-cache\r\n"...)

	// Classify the caller's headers: well-known ones in a fixed order, the rest sorted.
	var known [len(fixedOrder)][]string
	var othersBuf [8]string
	others := othersBuf[:0]
	for k, vs := range r.Header {
		ck := responseKey(k)
		switch ck {
		case "Content-Id", "X-Content-Type-Options", "Cache-Control", "Content-Length", "Transfer-Encoding":
			continue
		}
		if i := slices.Index(fixedOrder[:], ck); i >= 0 {
			if known[i] == nil {
				known[i] = vs
			} else {
				known[i] = append(slices.Clip(known[i]), vs...)
			}
			continue
		}
		others = append(others, k)
	}
	// Known's values in fixedOrder (DataServiceVersion, index 1, is not among them).
	kv := [len(fixedOrder)]string{0: r.Known.PreferenceApplied, 2: r.Known.ContentType,
		3: r.Known.Location, 4: r.Known.DataServiceID, 5: r.Known.ETag}
	for i := range kv {
		switch {
		case kv[i] == "":
		case known[i] == nil:
			known[i] = kv[i : i+1 : i+1]
		default:
			known[i] = append(slices.Clip(known[i]), kv[i])
		}
	}
	token := r.Known.SessionToken != ""
	if token {
		others = append(others, sessionTokenKey)
	}
	if known[1] == nil { // DataServiceVersion: 3.0 for a body or a Prefer answer, else 1.0
		if len(r.Body) > 0 || len(known[0]) > 0 {
			known[1] = dataServiceVersion3
		} else {
			known[1] = dataServiceVersion1
		}
	}
	for i, vs := range known {
		name := fixedSpelling[i]
		for _, v := range vs {
			b = appendHeader(b, name, v)
		}
	}
	slices.Sort(others)
	for i, k := range others {
		if token && k == sessionTokenKey && (i+1 == len(others) || others[i+1] != k) {
			// Known's token: the last of the name's entries, after Header's own.
			b = appendHeader(b, k, r.Known.SessionToken)
			token = false
			continue
		}
		for _, v := range r.Header[k] {
			b = appendHeader(b, k, v)
		}
	}
	b = append(b, "\r\n"...)
	b = append(b, r.Body...)
	return append(b, "\r\n"...)
}

// appendHeader appends "name: value" and CRLF, turning control characters in the value
// (CR and LF above all) into spaces, so an echoed value can never end the header block,
// forge a boundary, or make a strict client parser (Go's textproto) reject the part.
//
// The value is copied whole and then scanned in place: appending it a byte at a time
// checked the slice's capacity at every byte, and was most of a sub-response's cost.
func appendHeader(b []byte, name, value string) []byte {
	b = append(b, name...)
	b = append(b, ": "...)
	start := len(b)
	b = append(b, value...)
	v := b[start:]
	i := 0
	for ; i+8 <= len(v); i += 8 {
		// A word with no byte below 0x20 and no 0x7f needs nothing (the tests are exact
		// as to whether some byte qualifies); the ETags and URLs never have one.
		x := binary.LittleEndian.Uint64(v[i:])
		d := x ^ 0x7f7f7f7f7f7f7f7f
		if ((x-0x2020202020202020)&^x|(d-0x0101010101010101)&^d)&0x8080808080808080 != 0 {
			break
		}
	}
	for ; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			v[i] = ' '
		}
	}
	return append(b, "\r\n"...)
}

// responseKey is canonicalKey for a sub-response's header name, with the spellings
// servers use for the well-known names (the service's, and Go's canonical form) matched
// first without hashing: WriteResponse meets four or five of them per operation.
func responseKey(k string) string {
	switch k {
	case "ETag", "Etag":
		return "Etag"
	case "Location":
		return "Location"
	case "DataServiceId", "Dataserviceid":
		return "Dataserviceid"
	case "Preference-Applied":
		return "Preference-Applied"
	case "Content-Type":
		return "Content-Type"
	case "DataServiceVersion", "Dataserviceversion":
		return "Dataserviceversion"
	case "X-Ms-Session-Token":
		return "X-Ms-Session-Token"
	}
	return canonicalKey(k)
}
