package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
)

// Query is a Query Entities request: the filter and select as OData text, and where to
// start (a continuation the previous page gave, or empty for the beginning).
type Query struct {
	Filter string
	Select string
	// Top bounds one page (0: the service's 1,000).
	Top int
	// Continuation is where the page starts.
	Continuation Continuation
	// Expiry asks a Cerulean service for each entity's stored expiry: the
	// ExpiryAnnotation on every entity that expires (Prefer:
	// odata.include-annotations="cerulean.expiry"). Page.Expiry tells whether the
	// service answered it; other services ignore the preference.
	Expiry bool
}

// An entity's expiry on the wire (a Cerulean extension, docs/compatibility.md "An entity's exact expiry").
const (
	// ExpiryAnnotation is the instance annotation on a queried entity that holds its
	// expiry (an Edm.DateTime text), when Query.Expiry asked for it and it has one.
	ExpiryAnnotation = "cerulean.expiry"
	// HeaderExpiry is the write header that gives an entity of an elastic table its exact
	// expiry: an RFC 3339 instant in UTC, or "never" (BatchEntity.Expiry).
	HeaderExpiry = "x-cerulean-expiry"
	// ExpiryNever as BatchEntity.Expiry writes "never": the entity gets no expiry.
	ExpiryNever int64 = -1
)

// preferExpiry is the preference that asks for ExpiryAnnotation.
const preferExpiry = `odata.include-annotations="` + ExpiryAnnotation + `"`

// Continuation is the position after a page: the service's NextPartitionKey and
// NextRowKey, opaque to the client. The zero value means the start (in a Query) or the
// end (after a page).
type Continuation struct {
	NextPartitionKey string `json:"NextPartitionKey,omitempty"`
	NextRowKey       string `json:"NextRowKey,omitempty"`
}

// Done reports whether c is the zero value.
func (c Continuation) Done() bool { return c.NextPartitionKey == "" && c.NextRowKey == "" }

// Page is one page of a query: its entities as raw OData JSON objects at full metadata
// (each with every type annotation the service writes) and where the next page starts.
type Page struct {
	Entities []json.RawMessage
	Next     Continuation
	// Expiry reports that the service answered Query.Expiry (Preference-Applied): an
	// entity without the ExpiryAnnotation then never expires. False when it was not
	// asked, or the service does not know the extension (not Cerulean, or older).
	Expiry bool
}

// QueryEntities fetches one page of table's entities at full metadata, so that every
// property's EDM type is in the answer (Int64 beyond 2^53, integral Doubles, DateTime,
// Guid, Binary): what a program needs to read every value back exactly.
func (c *Client) QueryEntities(ctx context.Context, table string, q Query) (*Page, error) {
	v := url.Values{}
	if q.Filter != "" {
		v.Set("$filter", q.Filter)
	}
	if q.Select != "" {
		v.Set("$select", q.Select)
	}
	if q.Top > 0 {
		v.Set("$top", strconv.Itoa(q.Top))
	}
	if q.Continuation.NextPartitionKey != "" {
		v.Set("NextPartitionKey", q.Continuation.NextPartitionKey)
	}
	if q.Continuation.NextRowKey != "" {
		v.Set("NextRowKey", q.Continuation.NextRowKey)
	}
	h := http.Header{"Accept": {"application/json;odata=fullmetadata"}}
	if q.Expiry {
		h["Prefer"] = []string{preferExpiry}
	}
	resp, err := c.Do(ctx, http.MethodGet, url.PathEscape(table)+"()", v, h, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if err := ResponseError(resp); err != nil {
		return nil, err
	}
	var body struct {
		Value []json.RawMessage `json:"value"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("query %s: decode answer: %w", table, err)
	}
	return &Page{Entities: body.Value, Next: Continuation{
		NextPartitionKey: resp.Header.Get("x-ms-continuation-NextPartitionKey"),
		NextRowKey:       resp.Header.Get("x-ms-continuation-NextRowKey"),
	}, Expiry: q.Expiry && expiryApplied(resp.Header)}, nil
}

// expiryApplied reports whether an answer's Preference-Applied says the expiry
// annotation was included.
func expiryApplied(h http.Header) bool {
	for _, v := range h.Values("Preference-Applied") {
		if strings.Contains(strings.ToLower(v), "include-annotations") {
			return true
		}
	}
	return false
}

// AppendExpiry appends an x-cerulean-expiry value: "never" for ExpiryNever, else the
// instant ticks (100 ns since the Unix epoch) in RFC 3339 with seven fraction digits.
func AppendExpiry(dst []byte, ticks int64) []byte {
	if ticks == ExpiryNever {
		return append(dst, "never"...)
	}
	return entity.AppendTicks(dst, ticks)
}

// WriteMode is how a batch writes each entity.
type WriteMode string

// Write modes: Insert fails on an entity that exists (EntityAlreadyExists); Replace and
// Merge are the upserts (Insert Or Replace, Insert Or Merge).
const (
	Insert  WriteMode = "insert"
	Replace WriteMode = "replace"
	Merge   WriteMode = "merge"
)

// BatchEntity is one entity to write: its keys and its request body (OData JSON with
// PartitionKey and RowKey).
type BatchEntity struct {
	PartitionKey, RowKey string
	Body                 []byte
	// Expiry, when not 0, is sent as the entity's exact expiry (HeaderExpiry): ExpiryNever,
	// or an instant in 100 ns ticks since the Unix epoch. A Cerulean elastic table takes
	// it in place of the expiry it computes; a standard table refuses it.
	Expiry int64
}

// BatchError is a refused batch: the service's error and the index of the operation it
// names (-1 when it names none). Nothing of the batch was written.
type BatchError struct {
	Index int
	Err   *Error
}

func (e *BatchError) Error() string {
	if e.Index < 0 {
		return e.Err.Error()
	}
	return fmt.Sprintf("operation %d: %v", e.Index, e.Err)
}

func (e *BatchError) Unwrap() error { return e.Err }

// Batch writes entities of one partition (at most 100) in one $batch changeset: all are
// written or none is. A *BatchError means the service refused the changeset; any other
// error means no answer arrived, and the batch may or may not have been written.
func (c *Client) Batch(ctx context.Context, table string, mode WriteMode, ents []BatchEntity) error {
	body, ctype := c.batchBody(table, mode, ents)
	h := http.Header{"Content-Type": {ctype}, "Accept": {"application/json;odata=minimalmetadata"}}
	resp, err := c.Do(ctx, http.MethodPost, "$batch", nil, h, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := ResponseError(resp); err != nil {
		e := err.(*Error)
		return &BatchError{Index: opIndex(e), Err: e}
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("batch: read answer: %w", err)
	}
	return parseBatchResponse(resp.Header.Get("Content-Type"), raw)
}

// batchBody is the multipart/mixed request of one changeset.
func (c *Client) batchBody(table string, mode WriteMode, ents []BatchEntity) ([]byte, string) {
	bb := fmt.Sprintf("batch_%016x", rand.Uint64())
	cs := fmt.Sprintf("changeset_%016x", rand.Uint64())
	var b bytes.Buffer
	b.Grow(256 + len(ents)*400)
	fmt.Fprintf(&b, "--%s\r\nContent-Type: multipart/mixed; boundary=%s\r\n\r\n", bb, cs)
	for i, e := range ents {
		method := "POST"
		target := c.Endpoint + "/" + url.PathEscape(table)
		if mode != Insert {
			method = "PUT"
			if mode == Merge {
				method = "MERGE"
			}
			target += "(PartitionKey='" + keyEscape(e.PartitionKey) + "',RowKey='" + keyEscape(e.RowKey) + "')"
		}
		fmt.Fprintf(&b, "--%s\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\nContent-ID: %d\r\n\r\n", cs, i+1)
		fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nAccept: application/json;odata=minimalmetadata\r\nContent-Type: application/json\r\nPrefer: return-no-content\r\nDataServiceVersion: 3.0\r\n", method, target)
		if e.Expiry != 0 {
			b.WriteString(HeaderExpiry + ": ")
			b.Write(AppendExpiry(nil, e.Expiry))
			b.WriteString("\r\n")
		}
		b.WriteString("\r\n")
		b.Write(e.Body)
		b.WriteString("\r\n")
	}
	fmt.Fprintf(&b, "--%s--\r\n--%s--\r\n", cs, bb)
	return b.Bytes(), "multipart/mixed; boundary=" + bb
}

// keyEscape writes a key for the (PartitionKey='…',RowKey='…') address: quotes doubled,
// then percent-encoded as a path segment (so '%', '/', '#', '?' and non-ASCII survive).
func keyEscape(k string) string {
	return url.PathEscape(strings.ReplaceAll(k, "'", "''"))
}

// parseBatchResponse reads a $batch answer: nil when every sub-response is 2xx, else a
// *BatchError from the first that is not.
func parseBatchResponse(ctype string, raw []byte) error {
	_, params, err := mime.ParseMediaType(ctype)
	if err != nil || params["boundary"] == "" {
		return fmt.Errorf("batch: answer is not multipart (%q)", ctype)
	}
	parts, err := httpParts(raw, params["boundary"])
	if err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	if len(parts) == 0 {
		return fmt.Errorf("batch: the answer holds no sub-response")
	}
	for _, p := range parts {
		if p.StatusCode >= 200 && p.StatusCode < 300 {
			continue
		}
		e := errorOf(p.StatusCode, http.Header(p.Header), p.body)
		return &BatchError{Index: opIndex(e), Err: e}
	}
	return nil
}

type subResponse struct {
	StatusCode int
	Header     textproto.MIMEHeader
	body       []byte
}

// httpParts reads the application/http parts of a multipart body, descending into a
// nested changeset.
func httpParts(raw []byte, boundary string) ([]subResponse, error) {
	var out []subResponse
	mr := multipart.NewReader(bytes.NewReader(raw), boundary)
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read answer part: %w", err)
		}
		data, err := io.ReadAll(p)
		if err != nil {
			return nil, fmt.Errorf("read answer part: %w", err)
		}
		mt, params, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		if strings.HasPrefix(mt, "multipart/") {
			sub, err := httpParts(data, params["boundary"])
			if err != nil {
				return nil, err
			}
			out = append(out, sub...)
			continue
		}
		tp := textproto.NewReader(bufioReader(data))
		line, err := tp.ReadLine()
		if err != nil {
			return nil, fmt.Errorf("read sub-response status: %w", err)
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			return nil, fmt.Errorf("sub-response status line %q", line)
		}
		code, err := strconv.Atoi(f[1])
		if err != nil {
			return nil, fmt.Errorf("sub-response status line %q", line)
		}
		h, err := tp.ReadMIMEHeader()
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("sub-response headers: %w", err)
		}
		rest, _ := io.ReadAll(tp.R)
		out = append(out, subResponse{StatusCode: code, Header: h, body: rest})
	}
}

// opIndex is the operation a changeset error names: the service starts its message
// with "<index>:".
func opIndex(e *Error) int {
	i, _, ok := strings.Cut(e.Message, ":")
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(i))
	if err != nil || n < 0 {
		return -1
	}
	return n
}

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }

// GetEntity reads one entity at full metadata, the form QueryEntities answers; found is
// false when the table holds no entity with these keys (404 ResourceNotFound).
func (c *Client) GetEntity(ctx context.Context, table, partitionKey, rowKey string) (raw json.RawMessage, found bool, err error) {
	path := url.PathEscape(table) + "(PartitionKey='" + keyEscape(partitionKey) + "',RowKey='" + keyEscape(rowKey) + "')"
	h := http.Header{"Accept": {"application/json;odata=fullmetadata"}}
	resp, err := c.Do(ctx, http.MethodGet, path, nil, h, nil)
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	if err := ResponseError(resp); err != nil {
		if e := err.(*Error); e.Status == http.StatusNotFound && e.Code == "ResourceNotFound" {
			return nil, false, nil
		}
		return nil, false, err
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, false, fmt.Errorf("get entity: read answer: %w", err)
	}
	return b, true, nil
}

// DeleteEntity deletes one entity whatever its version (If-Match: *); found is false when
// the table held no entity with these keys (404 ResourceNotFound), which is no error.
func (c *Client) DeleteEntity(ctx context.Context, table, partitionKey, rowKey string) (found bool, err error) {
	path := url.PathEscape(table) + "(PartitionKey='" + keyEscape(partitionKey) + "',RowKey='" + keyEscape(rowKey) + "')"
	resp, err := c.Do(ctx, http.MethodDelete, path, nil, http.Header{"If-Match": {"*"}}, nil)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if err := ResponseError(resp); err != nil {
		if e := err.(*Error); e.Status == http.StatusNotFound && e.Code == "ResourceNotFound" {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// Probe asks the service for its clock and its name: the Date and Server headers of its
// answer to a cheap request (the first table of the account's list), whatever that answer
// is — a refusal (a table SAS may not list tables) carries them too. date is zero when
// the answer has no valid Date header.
func (c *Client) Probe(ctx context.Context) (date time.Time, server string, err error) {
	resp, err := c.Do(ctx, http.MethodGet, "Tables", url.Values{"$top": {"1"}}, nil, nil)
	if err != nil {
		return time.Time{}, "", err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if d, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
		date = d
	}
	return date, resp.Header.Get("Server"), nil
}
