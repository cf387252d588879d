package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ceruleandb/cerulean/client"
	"github.com/ceruleandb/cerulean/internal/edmjson"
)

// The raw client: the bench's own HTTP/1.1 client for --client raw.
//
// Each worker owns one rawConn: one keep-alive TCP (or TLS) connection, one request buffer
// and one response buffer, reused for every request, so a request costs the load
// generator a few appends, one HMAC and one write and read system call each. It sends what
// the Go SDK sends for the same operation — method, URL, Accept, DataServiceVersion,
// x-ms-version, x-ms-date, Content-Type, SharedKeyLite Authorization (or the SAS on the
// query string), the same JSON and the same $batch multipart layout — so the server does
// the same work, without the SDK's pipeline (no per-request policies, maps, goroutines or
// JSON re-marshalling on the client).
//
// It understands what Cerulean and Azure answer: Content-Length or chunked bodies,
// Connection: close, x-ms-error-code. It is not a general HTTP client: no redirects, no
// proxies, no 100-continue, no compression.

// rawVersion is the x-ms-version the raw client sends: the Go SDK's.
const rawVersion = "2019-02-02"

// rawEndpoint is what a run's raw connections share: where to connect and how to sign.
type rawEndpoint struct {
	addr     string // host:port to dial
	host     string // Host header
	tls      *tls.Config
	base     string // path of the account's endpoint: "/devstoreaccount1" path-style, "" host-style
	absBase  string // scheme://host + base: the URL prefix of a $batch's sub-requests
	account  string
	key      []byte // SharedKeyLite key; nil with a SAS
	sas      string // the SAS query, when there is no key
	table    string
	tablePth string // base + "/" + table, escaped
	rec      *recorder
	// consistency, when set, is sent as x-ms-consistency-level on every GET (--consistency),
	// as the SDK client's consistencyPolicy does.
	consistency string
}

// newRawEndpoint reads a connection string for the raw client. tlsConf, when not nil,
// replaces the default TLS settings (the floor's own certificate).
func newRawEndpoint(connStr, table string, tlsConf *tls.Config) (*rawEndpoint, error) {
	t, err := client.Open(connStr)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(t.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("endpoint: %w", err)
	}
	ep := &rawEndpoint{host: u.Host, base: strings.TrimSuffix(u.EscapedPath(), "/"), account: t.Account, table: table}
	ep.key, ep.sas = t.Credentials()
	ep.addr = u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		ep.addr = net.JoinHostPort(u.Hostname(), port)
	}
	if u.Scheme == "https" {
		ep.tls = tlsConf
		if ep.tls == nil {
			ep.tls = &tls.Config{ServerName: u.Hostname()}
		}
	}
	ep.absBase = u.Scheme + "://" + u.Host + ep.base
	ep.tablePth = ep.base + "/" + url.PathEscape(table)
	return ep, nil
}

// rawConn is one worker's connection. It is not safe for concurrent use.
type rawConn struct {
	ep  *rawEndpoint
	nc  net.Conn
	br  *bufio.Reader
	req []byte // the request being built
	buf []byte // scratch: paths, signatures, batch bodies
	mac hash.Hash

	dateSec int64
	date    string

	// The last response.
	status         int
	etag, errCode  string
	nextPK, nextRK string
	body           []byte // valid until the next request
	close          bool
	header         http.Header // only while recording
}

func newRawConn(ep *rawEndpoint) *rawConn {
	c := &rawConn{ep: ep}
	if ep.key != nil {
		c.mac = hmac.New(sha256.New, ep.key)
	}
	return c
}

func (c *rawConn) closeConn() {
	if c.nc != nil {
		c.nc.Close()
		c.nc, c.br = nil, nil
	}
}

func (c *rawConn) dial(ctx context.Context) error {
	d := net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", c.ep.addr)
	if err != nil {
		return err
	}
	if c.ep.tls != nil {
		tc := tls.Client(nc, c.ep.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return err
		}
		nc = tc
	}
	c.nc, c.br = nc, bufio.NewReaderSize(nc, 64<<10)
	return nil
}

// xmsDate returns the x-ms-date value for now, formatted once a second.
func (c *rawConn) xmsDate() string {
	now := time.Now()
	if s := now.Unix(); s != c.dateSec || c.date == "" {
		c.dateSec, c.date = s, now.UTC().Format(http.TimeFormat)
	}
	return c.date
}

// request describes one request: path is escaped and absolute ("/devstoreaccount1/t"),
// query is encoded without '?'.
type request struct {
	method, path, query string
	contentType         string
	ifMatch             string
	body                []byte
	// key identifies the answer to record for the floor; "" records nothing.
	key string
}

// do sends r and reads the answer into c's response fields. A transport error closes the
// connection (the next request dials a new one); a non-2xx answer is a *statusError.
func (c *rawConn) do(ctx context.Context, r *request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.nc == nil {
		if err := c.dial(ctx); err != nil {
			return err
		}
	}
	stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	c.nc.SetDeadline(time.Now().Add(httpTimeout))

	c.buildRequest(r)
	var err error
	if len(r.body) > 16<<10 { // a large body goes out as it is, in one writev
		bufs := net.Buffers{c.req, r.body}
		_, err = bufs.WriteTo(c.nc)
	} else {
		c.req = append(c.req, r.body...)
		_, err = c.nc.Write(c.req)
	}
	if err == nil {
		record := r.key != "" && !c.ep.rec.has(r.key) // recKey: a key only when recording
		err = c.readResponse(r.method == http.MethodHead, record)
		if err == nil && record {
			c.ep.rec.put(r.key, c.status, c.header, c.body)
		}
	}
	if err != nil {
		c.closeConn()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	if c.close {
		c.closeConn()
	}
	if c.status >= 300 {
		code := c.errCode
		if code == "" {
			code = jsonErrorCode(c.body)
		}
		return &statusError{status: c.status, code: code, method: r.method, path: r.path}
	}
	return nil
}

// buildRequest writes r's request line and headers into c.req, signed.
func (c *rawConn) buildRequest(r *request) {
	q := r.query
	if c.ep.sas != "" {
		if q != "" {
			q += "&"
		}
		q += c.ep.sas
	}
	b := append(c.req[:0], r.method...)
	b = append(b, ' ')
	b = append(b, r.path...)
	if q != "" {
		b = append(b, '?')
		b = append(b, q...)
	}
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, c.ep.host...)
	b = append(b, "\r\nUser-Agent: cerulean-bench\r\nAccept: application/json;odata=minimalmetadata\r\nDataServiceVersion: 3.0\r\nx-ms-version: "+rawVersion+"\r\nx-ms-date: "...)
	date := c.xmsDate()
	b = append(b, date...)
	if c.mac != nil {
		// SharedKeyLite for the Table service: HMAC-SHA256 of the date and the
		// canonicalized resource, "/account" + the escaped path (no comp here).
		c.mac.Reset()
		c.buf = append(c.buf[:0], date...)
		c.buf = append(c.buf, "\n/"...)
		c.buf = append(c.buf, c.ep.account...)
		c.buf = append(c.buf, r.path...)
		c.mac.Write(c.buf)
		sum := c.mac.Sum(c.buf[:0])
		b = append(b, "\r\nAuthorization: SharedKeyLite "...)
		b = append(b, c.ep.account...)
		b = append(b, ':')
		b = base64.StdEncoding.AppendEncode(b, sum)
	}
	if c.ep.consistency != "" && r.method == http.MethodGet {
		b = append(b, "\r\nx-ms-consistency-level: "...)
		b = append(b, c.ep.consistency...)
	}
	if r.ifMatch != "" {
		b = append(b, "\r\nIf-Match: "...)
		b = append(b, r.ifMatch...)
	}
	if r.body != nil {
		b = append(b, "\r\nContent-Type: "...)
		b = append(b, r.contentType...)
		b = append(b, "\r\nContent-Length: "...)
		b = strconv.AppendInt(b, int64(len(r.body)), 10)
	}
	c.req = append(b, "\r\n\r\n"...)
}

var errMalformed = errors.New("raw client: malformed HTTP response")

// readResponse reads one response: status line, headers, body. With record it also keeps
// every header in c.header.
func (c *rawConn) readResponse(head, record bool) error {
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return errMalformed
	}
	st, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return errMalformed
	}
	c.status, c.etag, c.errCode, c.nextPK, c.nextRK, c.close = st, "", "", "", "", false
	c.header = nil
	if record {
		c.header = http.Header{}
	}
	length, chunked := -1, false
	for {
		line, err = c.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		i := bytes.IndexByte(line, ':')
		if i <= 0 {
			return errMalformed
		}
		name, value := line[:i], bytes.TrimSpace(line[i+1:])
		if record {
			c.header.Add(string(name), string(value))
		}
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 {
				return errMalformed
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			c.close = bytes.EqualFold(value, []byte("close"))
		case bytes.EqualFold(name, []byte("ETag")):
			c.etag = string(value)
		case bytes.EqualFold(name, []byte("x-ms-error-code")):
			c.errCode = string(value)
		case bytes.EqualFold(name, []byte("x-ms-continuation-NextPartitionKey")):
			c.nextPK = string(value)
		case bytes.EqualFold(name, []byte("x-ms-continuation-NextRowKey")):
			c.nextRK = string(value)
		}
	}
	c.body = c.body[:0]
	switch {
	case head || st == http.StatusNoContent || st == http.StatusNotModified || st < 200:
		return nil
	case chunked:
		return c.readChunked()
	case length >= 0:
		if cap(c.body) < length {
			c.body = make([]byte, length, length+length/4)
		}
		c.body = c.body[:length]
		_, err = io.ReadFull(c.br, c.body)
		return err
	default: // the body runs to the end of the connection
		c.close = true
		var bb bytes.Buffer
		_, err = bb.ReadFrom(c.br)
		c.body = bb.Bytes()
		return err
	}
}

func (c *rawConn) readChunked() error {
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i]
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(line)), 16, 31)
		if err != nil {
			return errMalformed
		}
		if n == 0 {
			for { // trailers, up to the blank line
				line, err := c.br.ReadSlice('\n')
				if err != nil {
					return err
				}
				if len(bytes.TrimRight(line, "\r\n")) == 0 {
					return nil
				}
			}
		}
		off := len(c.body)
		c.body = append(c.body, make([]byte, n)...)
		if _, err := io.ReadFull(c.br, c.body[off:]); err != nil {
			return err
		}
		if _, err := c.br.Discard(2); err != nil { // the chunk's CRLF
			return err
		}
	}
}

// jsonErrorCode digs "code":"…" out of an OData JSON error body, for answers without
// x-ms-error-code.
func jsonErrorCode(body []byte) string {
	i := bytes.Index(body, []byte(`"code":"`))
	if i < 0 {
		return ""
	}
	rest := body[i+len(`"code":"`):]
	if j := bytes.IndexByte(rest, '"'); j >= 0 {
		return string(rest[:j])
	}
	return ""
}

// keyPredicate appends the escaped "(PartitionKey='pk',RowKey='rk')" of an entity's URL.
func keyPredicate(b []byte, pk, rk string) []byte {
	b = append(b, "(PartitionKey='"...)
	b = edmjson.AppendKeyEscaped(b, pk)
	b = append(b, "',RowKey='"...)
	b = edmjson.AppendKeyEscaped(b, rk)
	return append(b, "')"...)
}

// rawTarget is the raw client as a target: one connection, one worker.
type rawTarget struct {
	c  *rawConn
	bb []byte // the $batch body, rebuilt in place for every batch
	// batch boundaries, fixed per target (the SDK draws new ones per batch; the server
	// parses whatever it is given).
	batchB, changeB string
	// partHead is each changeset part up to its Content-Length value, built at the first
	// batch: only the entity and its length change from part to part.
	partHead string
}

func newRawTarget(ep *rawEndpoint) *rawTarget {
	id := randomID(12)
	return &rawTarget{c: newRawConn(ep), batchB: "batch_" + id, changeB: "changeset_" + id}
}

func (t *rawTarget) close() { t.c.closeConn() }

// recKey is the floor's recording key of a request (floor.go), or "" when the endpoint
// does not record.
func (t *rawTarget) recKey(method string, point bool, nextPK, nextRK string) string {
	if t.c.ep.rec == nil {
		return ""
	}
	return t.c.ep.rec.key(method, point, nextPK, nextRK)
}

func (t *rawTarget) insert(ctx context.Context, entity []byte) error {
	return t.c.do(ctx, &request{method: http.MethodPost, path: t.c.ep.tablePth,
		contentType: "application/json", body: entity, key: t.recKey(http.MethodPost, false, "", "")})
}

func (t *rawTarget) entityPath(pk, rk string) string {
	return string(keyPredicate([]byte(t.c.ep.tablePth), pk, rk))
}

func (t *rawTarget) get(ctx context.Context, pk, rk string) ([]byte, string, error) {
	err := t.c.do(ctx, &request{method: http.MethodGet, path: t.entityPath(pk, rk), key: t.recKey(http.MethodGet, true, "", "")})
	if err != nil {
		return nil, "", err
	}
	return t.c.body, t.c.etag, nil
}

func (t *rawTarget) upsert(ctx context.Context, pk, rk string, entity []byte) error {
	return t.c.do(ctx, &request{method: http.MethodPatch, path: t.entityPath(pk, rk),
		contentType: "application/json", body: entity, key: t.recKey(http.MethodPatch, true, "", "")})
}

func (t *rawTarget) replace(ctx context.Context, pk, rk string, entity []byte, etag string) error {
	return t.c.do(ctx, &request{method: http.MethodPut, path: t.entityPath(pk, rk), ifMatch: etag,
		contentType: "application/json", body: entity, key: t.recKey(http.MethodPut, true, "", "")})
}

// query counts the entities of each page by their "odata.etag" annotations: a
// minimalmetadata answer carries exactly one per entity, and the bench's own property
// values (alphanumerics, numbers) cannot contain the string.
func (t *rawTarget) query(ctx context.Context, filter string) (int, error) {
	n := 0
	base := "$filter=" + url.QueryEscape(filter)
	nextPK, nextRK := "", ""
	for {
		q := base
		if nextPK != "" || nextRK != "" {
			q += "&NextPartitionKey=" + url.QueryEscape(nextPK)
			if nextRK != "" {
				q += "&NextRowKey=" + url.QueryEscape(nextRK)
			}
		}
		err := t.c.do(ctx, &request{method: http.MethodGet, path: t.c.ep.tablePth + "()", query: q,
			key: t.recKey(http.MethodGet, false, nextPK, nextRK)})
		if err != nil {
			return n, err
		}
		n += bytes.Count(t.c.body, []byte(`"odata.etag":`))
		nextPK, nextRK = t.c.nextPK, t.c.nextRK
		if nextPK == "" && nextRK == "" {
			return n, nil
		}
	}
}

// batch sends one changeset of inserts laid out as the Go SDK's SubmitTransaction lays it
// out (absolute sub-request URLs, Prefer: return-no-content).
func (t *rawTarget) batch(ctx context.Context, _ string, entities [][]byte) error {
	ep := t.c.ep
	b := t.bb[:0]
	if t.partHead == "" {
		t.partHead = "--" + t.changeB + "\r\nContent-Transfer-Encoding: binary\r\nContent-Type: application/http\r\n\r\nPOST " +
			ep.absBase + "/" + url.PathEscape(ep.table) + " HTTP/1.1\r\nAccept: application/json;odata=minimalmetadata\r\nContent-Length: "
	}
	b = append(b, "--"...)
	b = append(b, t.batchB...)
	b = append(b, "\r\nContent-Type: multipart/mixed; boundary="...)
	b = append(b, t.changeB...)
	b = append(b, "\r\n\r\n"...)
	for _, e := range entities {
		b = append(b, t.partHead...)
		b = strconv.AppendInt(b, int64(len(e)), 10)
		b = append(b, "\r\nContent-Type: application/json\r\nDataServiceVersion: 3.0\r\nPrefer: return-no-content\r\n\r\n"...)
		b = append(b, e...)
		b = append(b, "\r\n"...)
	}
	b = append(b, "--"...)
	b = append(b, t.changeB...)
	b = append(b, "--\r\n--"...)
	b = append(b, t.batchB...)
	b = append(b, "--\r\n"...)
	t.bb = b
	err := t.c.do(ctx, &request{method: http.MethodPost, path: ep.base + "/$batch",
		contentType: "multipart/mixed; boundary=" + t.batchB, body: b, key: t.recKey(http.MethodPost, false, "", "")})
	if err != nil {
		return err
	}
	return batchOutcome(t.c.body)
}

// batchOutcome reads a $batch answer's first sub-response: a failed changeset is answered
// by the failing operation's response alone, so a non-2xx status there fails the batch.
func batchOutcome(body []byte) error {
	i := bytes.Index(body, []byte("HTTP/1.1 "))
	if i < 0 || len(body) < i+12 {
		return errors.New("batch: no sub-response in the answer")
	}
	st, err := strconv.Atoi(string(body[i+9 : i+12]))
	if err != nil {
		return errors.New("batch: malformed sub-response status")
	}
	if st >= 300 {
		return &statusError{status: st, code: jsonErrorCode(body[i:]), method: http.MethodPost, path: "$batch"}
	}
	return nil
}
