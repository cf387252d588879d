package e2e

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// ---------------------------------------------------------------------------------------
// Names

var nameCounter atomic.Int64

// tableName returns a valid, unique table name (lower case, alphanumeric) derived from the
// test's name, so a failing request in the server log can be traced to its test.
func tableName(t testing.TB) string {
	var b strings.Builder
	b.WriteByte('t')
	for _, r := range t.Name() {
		if b.Len() >= 40 {
			break
		}
		if r < 128 && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return fmt.Sprintf("%s%s%d", b.String(), runID, nameCounter.Add(1))
}

// randomKey returns a base64 account key of 64 random bytes.
func randomKey(t testing.TB) string {
	var b [64]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b[:])
}

// ---------------------------------------------------------------------------------------
// SDK clients

// clientOptions disables retries: every error must surface exactly as the server sent it.
func clientOptions(transport policy.Transporter) *aztables.ClientOptions {
	o := &aztables.ClientOptions{}
	o.Retry = policy.RetryOptions{MaxRetries: -1}
	if transport != nil {
		o.Transport = transport
	}
	return o
}

// newServiceClient is an SDK service client for the server's default account.
func newServiceClient(t testing.TB, srv *server) *aztables.ServiceClient {
	t.Helper()
	a := srv.Default()
	return newServiceClientFor(t, srv.Endpoint(a.Name), a.Name, a.Key, nil)
}

// newServiceClientFor builds a shared-key service client for any endpoint and credential.
func newServiceClientFor(t testing.TB, endpoint, accountName, key string, transport policy.Transporter) *aztables.ServiceClient {
	t.Helper()
	cred, err := aztables.NewSharedKeyCredential(accountName, key)
	if err != nil {
		t.Fatalf("NewSharedKeyCredential: %v", err)
	}
	c, err := aztables.NewServiceClientWithSharedKey(endpoint, cred, clientOptions(transport))
	if err != nil {
		t.Fatalf("NewServiceClientWithSharedKey: %v", err)
	}
	return c
}

// newTable creates a uniquely named table on the default account and returns its client.
func newTable(t testing.TB, svc *aztables.ServiceClient) (*aztables.Client, string) {
	t.Helper()
	name := tableName(t)
	if _, err := svc.CreateTable(ctx(t), name, nil); err != nil {
		t.Fatalf("CreateTable(%s): %v", name, err)
	}
	return svc.NewClient(name), name
}

// marshal encodes an entity given as a map. A plain map (not aztables.EDMEntity) is used
// wherever keys may contain quotes: EDMEntity.MarshalJSON doubles quotes in the body keys
// (an SDK bug the server must not "repair", docs/protocol.md §1.3).
func marshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return b
}

// decodeEDM decodes an SDK entity payload.
func decodeEDM(t testing.TB, b []byte) aztables.EDMEntity {
	t.Helper()
	var e aztables.EDMEntity
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("decode entity %s: %v", b, err)
	}
	return e
}

// getEDM reads one entity through the SDK.
func getEDM(t testing.TB, c *aztables.Client, pk, rk string) (aztables.EDMEntity, aztables.GetEntityResponse) {
	t.Helper()
	resp, err := c.GetEntity(ctx(t), pk, rk, nil)
	if err != nil {
		t.Fatalf("GetEntity(%q,%q): %v", pk, rk, err)
	}
	return decodeEDM(t, resp.Value), resp
}

// listAll drains a ListEntities pager and returns the raw entity payloads.
func listAll(t testing.TB, c *aztables.Client, opts *aztables.ListEntitiesOptions) [][]byte {
	t.Helper()
	var out [][]byte
	p := c.NewListEntitiesPager(opts)
	pages := 0
	for p.More() {
		page, err := p.NextPage(ctx(t))
		if err != nil {
			t.Fatalf("ListEntities page %d: %v", pages, err)
		}
		out = append(out, page.Entities...)
		pages++
		if pages > 100000 {
			t.Fatalf("ListEntities: runaway paging")
		}
	}
	return out
}

// listAllErr is listAll returning the first error instead of failing.
func listAllErr(t testing.TB, c *aztables.Client, opts *aztables.ListEntitiesOptions) ([][]byte, error) {
	t.Helper()
	var out [][]byte
	p := c.NewListEntitiesPager(opts)
	for pages := 0; p.More(); pages++ {
		page, err := p.NextPage(ctx(t))
		if err != nil {
			return out, err
		}
		out = append(out, page.Entities...)
		if pages > 100000 {
			t.Fatalf("ListEntities: runaway paging")
		}
	}
	return out, nil
}

// listTableNames drains NewListTablesPager.
func listTableNames(t testing.TB, svc *aztables.ServiceClient) []string {
	t.Helper()
	var names []string
	p := svc.NewListTablesPager(nil)
	for p.More() {
		page, err := p.NextPage(ctx(t))
		if err != nil {
			t.Fatalf("ListTables: %v", err)
		}
		for _, tb := range page.Tables {
			if tb.Name != nil {
				names = append(names, *tb.Name)
			}
		}
	}
	return names
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------------------------------
// Errors

// errorBody is the OData JSON error shape of docs/protocol.md §7.1.
type errorBody struct {
	OData *struct {
		Code    string `json:"code"`
		Message *struct {
			Lang  string `json:"lang"`
			Value string `json:"value"`
		} `json:"message"`
	} `json:"odata.error"`
}

// checkErrorBody asserts the JSON error body: `odata.error` is the only top-level key, its
// code equals want (if want != ""), a message value is present, and the JSON is one line.
// It returns the code found.
func checkErrorBody(t testing.TB, body []byte, want string) string {
	t.Helper()
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		t.Errorf("error body is not a JSON object: %v: %q", err, truncate(body))
		return ""
	}
	if _, ok := top["odata.error"]; !ok || len(top) != 1 {
		t.Errorf("error body must have exactly one top-level key odata.error: %s", truncate(body))
	}
	if strings.Contains(strings.TrimSpace(string(body)), "\n") {
		t.Errorf("error JSON must be on one line: %q", truncate(body))
	}
	var eb errorBody
	if err := json.Unmarshal(body, &eb); err != nil || eb.OData == nil {
		t.Errorf("error body has no odata.error object: %s", truncate(body))
		return ""
	}
	if want != "" && eb.OData.Code != want {
		t.Errorf("odata.error.code = %q, want %q (body %s)", eb.OData.Code, want, truncate(body))
	}
	if eb.OData.Message == nil || eb.OData.Message.Value == "" {
		t.Errorf("odata.error.message.value missing: %s", truncate(body))
	}
	return eb.OData.Code
}

// requireRespErr asserts that err is an *azcore.ResponseError with the given status and code,
// that x-ms-error-code carries the code, and that the body is a proper OData JSON error.
func requireRespErr(t testing.TB, err error, status int, code string) *azcore.ResponseError {
	t.Helper()
	if err == nil {
		t.Fatalf("expected %d %s, got success", status, code)
	}
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		t.Fatalf("expected *azcore.ResponseError (%d %s), got %T: %v", status, code, err, err)
	}
	if re.StatusCode != status || re.ErrorCode != code {
		t.Errorf("got %d %q, want %d %q", re.StatusCode, re.ErrorCode, status, code)
	}
	if re.RawResponse != nil {
		if h := re.RawResponse.Header.Get("x-ms-error-code"); h != code {
			t.Errorf("x-ms-error-code = %q, want %q", h, code)
		}
		body, perr := runtime.Payload(re.RawResponse)
		if perr != nil {
			t.Errorf("reading error body: %v", perr)
		} else if re.RawResponse.Request == nil || re.RawResponse.Request.Method != http.MethodHead {
			checkErrorBody(t, body, code)
		}
	}
	return re
}

// statusOf returns the HTTP status of an SDK error (0 for nil or non-response errors).
func statusOf(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

func truncate(b []byte) string {
	if len(b) > 600 {
		return string(b[:600]) + "...(truncated)"
	}
	return string(b)
}

// ---------------------------------------------------------------------------------------
// Raw requests

// rawReq is a hand-built request, signed with SharedKeyLite unless NoAuth.
type rawReq struct {
	Method string
	// Path is the raw (already percent-encoded) path as it goes on the request line,
	// e.g. "/devstoreaccount1/t1(PartitionKey='a',RowKey='b')".
	Path  string
	Query string // raw query without '?'
	// Header values; a key mapped to "" removes a default header.
	Header map[string]string
	Body   []byte

	Host     string // overrides the Host header
	Account  string // signing account (default: the server's default)
	Key      string // signing key (default: the account's key)
	SignPath string // canonicalized resource override (default "/" + Account + Path)
	NoAuth   bool
	Date     time.Time // x-ms-date (default now)
	NoDate   bool      // send neither x-ms-date nor Date (the signature covers an empty date)
}

// rawResp is a response with its body read.
type rawResp struct {
	Status int
	Header http.Header
	Body   []byte
}

var rawClient = &http.Client{Timeout: 30 * time.Second}

// do sends r to srv and returns the response.
func (srv *server) do(t testing.TB, r rawReq) rawResp {
	t.Helper()
	u := srv.BaseURL() + r.Path
	if r.Query != "" {
		u += "?" + r.Query
	}
	req, err := http.NewRequest(r.Method, u, bytes.NewReader(r.Body))
	if err != nil {
		t.Fatalf("building request %s %s: %v", r.Method, u, err)
	}
	if got := req.URL.EscapedPath(); got != r.Path {
		t.Fatalf("net/url would send path %q instead of %q", got, r.Path)
	}
	if r.Body == nil {
		req.Body = nil
		req.ContentLength = 0
	}
	h := map[string]string{
		"x-ms-version":       "2019-02-02",
		"DataServiceVersion": "3.0",
		"Accept":             "application/json;odata=minimalmetadata",
	}
	if r.Body != nil {
		h["Content-Type"] = "application/json"
	}
	for k, v := range r.Header {
		// replace case-insensitively
		for dk := range h {
			if strings.EqualFold(dk, k) {
				delete(h, dk)
			}
		}
		h[k] = v
	}
	for k, v := range h {
		if v != "" {
			req.Header[http.CanonicalHeaderKey(k)] = []string{v}
		}
	}
	if r.Host != "" {
		req.Host = r.Host
	}
	date := r.Date
	if date.IsZero() {
		date = time.Now()
	}
	dateStr := date.UTC().Format(http.TimeFormat)
	if r.NoDate {
		dateStr = ""
	} else {
		req.Header.Set("x-ms-date", dateStr)
	}
	if !r.NoAuth {
		acct := r.Account
		key := r.Key
		if acct == "" {
			acct = srv.Default().Name
		}
		if key == "" {
			key = srv.Default().Key
			for _, a := range srv.Accounts {
				if a.Name == acct {
					key = a.Key
				}
			}
		}
		resource := r.SignPath
		if resource == "" {
			resource = "/" + acct + req.URL.EscapedPath()
			if comp := req.URL.Query().Get("comp"); comp != "" {
				resource += "?comp=" + comp
			}
		}
		req.Header.Set("Authorization", "SharedKeyLite "+acct+":"+signLite(t, key, dateStr+"\n"+resource))
	}
	resp, err := rawClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", r.Method, u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading response of %s %s: %v", r.Method, u, err)
	}
	return rawResp{Status: resp.StatusCode, Header: resp.Header, Body: body}
}

func signLite(t testing.TB, key, stringToSign string) string {
	k, err := base64.StdEncoding.DecodeString(key)
	if err != nil {
		t.Fatalf("bad key: %v", err)
	}
	m := hmac.New(sha256.New, k)
	m.Write([]byte(stringToSign))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// requireStatus fails the test if the raw response does not have the status.
func requireStatus(t testing.TB, r rawResp, status int, what string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s: status %d, want %d; x-ms-error-code=%q body=%s", what, r.Status, status,
			r.Header.Get("x-ms-error-code"), truncate(r.Body))
	}
}

// requireRawErr asserts status, x-ms-error-code, and the OData JSON body code.
func requireRawErr(t testing.TB, r rawResp, status int, code string) {
	t.Helper()
	if r.Status != status {
		t.Errorf("status %d, want %d (x-ms-error-code=%q body=%s)", r.Status, status, r.Header.Get("x-ms-error-code"), truncate(r.Body))
	}
	if h := r.Header.Get("x-ms-error-code"); h != code {
		t.Errorf("x-ms-error-code = %q, want %q (body %s)", h, code, truncate(r.Body))
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("error Content-Type = %q, want application/json...", ct)
	}
	checkErrorBody(t, r.Body, code)
}

// requireRawErrStatus asserts a 4xx error whose code is consistent between header and body,
// for situations where docs/protocol.md fixes the status but not the code. Returns the code.
func requireRawErrStatus(t testing.TB, r rawResp, status int) string {
	t.Helper()
	if r.Status != status {
		t.Errorf("status %d, want %d (x-ms-error-code=%q body=%s)", r.Status, status, r.Header.Get("x-ms-error-code"), truncate(r.Body))
	}
	h := r.Header.Get("x-ms-error-code")
	if h == "" {
		t.Errorf("x-ms-error-code missing on error response (body %s)", truncate(r.Body))
	}
	checkErrorBody(t, r.Body, h)
	return h
}

// entityPath is the raw path of one entity, keys escaped like the Go SDK does it: quotes
// doubled, then url.PathEscape.
func entityPath(acct, table, pk, rk string) string {
	return "/" + acct + "/" + table + "(PartitionKey='" + url.PathEscape(strings.ReplaceAll(pk, "'", "''")) +
		"',RowKey='" + url.PathEscape(strings.ReplaceAll(rk, "'", "''")) + "')"
}

// ---------------------------------------------------------------------------------------
// JSON inspection

// rawObject decodes a JSON object keeping every value raw (exact number text).
func rawObject(t testing.TB, b []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("not a JSON object: %v: %s", err, truncate(b))
	}
	return m
}

// rawString decodes a raw JSON string value.
func rawString(t testing.TB, m map[string]json.RawMessage, key string) (string, bool) {
	t.Helper()
	v, ok := m[key]
	if !ok {
		return "", false
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		t.Errorf("%s: not a JSON string: %s", key, v)
		return "", false
	}
	return s, true
}

var (
	etagRe      = regexp.MustCompile(`^W/"datetime'(\d{4}-\d\d-\d\dT\d\d%3A\d\d%3A\d\d\.\d{7}Z)'"$`)
	timestampRe = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{7}Z$`)
)

// checkETag asserts the ETag format of docs/protocol.md §2.4 and returns its instant.
func checkETag(t testing.TB, etag string) time.Time {
	t.Helper()
	m := etagRe.FindStringSubmatch(etag)
	if m == nil {
		t.Errorf("ETag %q does not match W/\"datetime'YYYY-MM-DDTHH%%3AMM%%3ASS.fffffffZ'\"", etag)
		return time.Time{}
	}
	ts, err := time.Parse(time.RFC3339Nano, strings.ReplaceAll(m[1], "%3A", ":"))
	if err != nil {
		t.Errorf("ETag %q: bad datetime: %v", etag, err)
	}
	return ts
}

// checkTimestamp asserts the 7-digit UTC Timestamp format and returns the instant.
func checkTimestamp(t testing.TB, ts string) time.Time {
	t.Helper()
	if !timestampRe.MatchString(ts) {
		t.Errorf("Timestamp %q is not UTC with 7 fractional digits", ts)
	}
	v, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		t.Errorf("Timestamp %q: %v", ts, err)
	}
	return v
}

// checkStdHeaders asserts the headers every response carries (docs/protocol.md §2.2).
func checkStdHeaders(t testing.TB, r rawResp, version, clientRequestID string) {
	t.Helper()
	d := r.Header.Get("Date")
	if _, err := time.Parse(time.RFC1123, d); err != nil || !strings.HasSuffix(d, " GMT") {
		t.Errorf("Date header %q is not RFC 1123 GMT: %v", d, err)
	} else if len(d) != len("Mon, 02 Jan 2006 15:04:05 GMT") {
		t.Errorf("Date header %q must have a two-digit day", d)
	}
	if r.Header.Get("x-ms-request-id") == "" {
		t.Errorf("x-ms-request-id missing")
	}
	if got := r.Header.Get("x-ms-version"); got != version {
		t.Errorf("x-ms-version = %q, want echo %q", got, version)
	}
	if clientRequestID != "" {
		if got := r.Header.Get("x-ms-client-request-id"); got != clientRequestID {
			t.Errorf("x-ms-client-request-id = %q, want echo %q", got, clientRequestID)
		}
	}
}

// mediaLevel returns the odata= parameter of a JSON Content-Type.
func mediaLevel(t testing.TB, ct string) string {
	t.Helper()
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		t.Errorf("Content-Type %q is not application/json: %v", ct, err)
		return ""
	}
	return params["odata"]
}

// fixedDialer sends every connection to srv whatever the URL's host (host-style tests).
// Over HTTPS it verifies the certificate for "localhost", which it covers, since no
// certificate covers every ACCOUNT.table.localhost.
func fixedDialer(srv *server) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	tr := &http.Transport{
		DialContext: func(c context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(c, network, srv.Addr)
		},
	}
	if srv.HTTPS() {
		tr.TLSClientConfig = srv.clientTLS("localhost")
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}
