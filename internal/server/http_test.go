package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
)

// Tests of the HTTP layer over real connections: body budget and timeouts, x-ms-version,
// media-type errors, Keep-Alive and the request log.

// syncBuf is a log destination shared by the server's goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// limitsServer serves a fresh Pebble engine over real HTTP with the given limits, logging
// JSON lines at level to the returned buffer. It has one table, "tbl".
func limitsServer(t *testing.T, limits Limits, level slog.Level) (*Server, *httptest.Server, *syncBuf) {
	t.Helper()
	eng, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	logs := &syncBuf{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: level}))
	srv, err := New(Options{Engine: eng, Accounts: []auth.Account{auth.DevAccount()}, Logger: log, Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	if err := srv.tables.CreateTable(t.Context(), auth.DevAccountName, "tbl", nil); err != nil {
		t.Fatal(err)
	}
	return srv, hs, logs
}

// signed builds a SharedKeyLite-signed request to path (after the account) on hs.
func signed(t *testing.T, hs *httptest.Server, method, path string, body []byte) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	r, err := http.NewRequest(method, hs.URL+"/"+auth.DevAccountName+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Accept", "application/json;odata=minimalmetadata")
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	acct := auth.DevAccount()
	auth.SignRequest(r, auth.SchemeSharedKeyLite, acct.Name, acct.Keys[0], time.Now())
	return r
}

func do(t *testing.T, r *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// rawUpload sends the headers of a signed Insert Entity declaring a body of declared bytes,
// then the first bytes of it, and leaves the connection open.
func rawUpload(t *testing.T, hs *httptest.Server, declared int, first []byte) (net.Conn, *bufio.Reader) {
	t.Helper()
	r := signed(t, hs, http.MethodPost, "/tbl", nil)
	conn, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var head strings.Builder
	fmt.Fprintf(&head, "POST %s HTTP/1.1\r\nHost: %s\r\n", r.URL.RequestURI(), r.Host)
	for k, vs := range r.Header {
		fmt.Fprintf(&head, "%s: %s\r\n", k, vs[0])
	}
	fmt.Fprintf(&head, "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", declared)
	if _, err := io.WriteString(conn, head.String()); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(first); err != nil {
		t.Fatal(err)
	}
	return conn, bufio.NewReader(conn)
}

func braces(n int) []byte { return bytes.Repeat([]byte("{"), n) }

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestBodyBudgetAccounting(t *testing.T) {
	b := newBodyBudget(1 << 20) // large bodies: 512 KiB; one client: 512 KiB, 256 KiB large
	c1, c2, c3 := clientSlot("10.0.0.1:1000"), clientSlot("10.0.0.2:1000"), clientSlot("10.0.0.3:1000")
	if c1 == c2 || c2 == c3 || c1 == c3 || clientSlot("10.0.0.1:2000") != c1 {
		t.Fatalf("client slots %d %d %d: want one per address, whatever the port", c1, c2, c3)
	}
	if !b.acquire(256<<10, true, c1) || b.acquire(1, true, c1) {
		t.Fatal("one client's large bodies must get exactly half of what large bodies may hold")
	}
	if !b.acquire(256<<10, true, c2) || b.acquire(1, true, c3) {
		t.Fatal("large bodies must get exactly half of the budget")
	}
	if !b.acquire(256<<10, false, c1) || b.acquire(1, false, c1) {
		t.Fatal("one client must get at most half of the budget")
	}
	if !b.acquire(256<<10, false, c3) || b.acquire(1, false, c3) {
		t.Fatal("small bodies must get the rest, and no more")
	}
	b.release(256<<10, true, c1)
	if b.inBig.Load() != 256<<10 || b.used.Load() != 768<<10 || b.clients[c1].all.Load() != 256<<10 || b.clients[c1].big.Load() != 0 {
		t.Fatalf("after release: used %d, large %d, client %+v", b.used.Load(), b.inBig.Load(), &b.clients[c1])
	}
	if !b.acquire(256<<10, true, c1) {
		t.Fatal("released bytes must be available again")
	}
	// IPv6 clients are told apart by their /64.
	if clientSlot("[2001:db8:1:2::1]:443") != clientSlot("[2001:db8:1:2:ffff::9]:80") {
		t.Error("two addresses of one /64 are two clients")
	}
}

// A body declared as 4 MiB holds memory only for the bytes that arrived.
func TestBodyMemoryFollowsArrivals(t *testing.T) {
	srv, hs, _ := limitsServer(t, Limits{StallTimeout: time.Minute}, slog.LevelError)
	conn, _ := rawUpload(t, hs, 4<<20, braces(10000))
	waitFor(t, "the body to be read", func() bool { return srv.budget.used.Load() > 0 })
	time.Sleep(50 * time.Millisecond)
	if used := srv.budget.used.Load(); used != bodyChunk {
		t.Fatalf("10,000 bytes of a declared 4 MiB hold %d bytes, want one %d-byte chunk", used, bodyChunk)
	}
	conn.Close()
	waitFor(t, "the budget to be returned", func() bool { return srv.budget.used.Load() == 0 })
}

// Past the budget a large body is refused with 503 ServerBusy, Retry-After and the
// connection closed; small bodies still pass.
func TestBodyBudgetServerBusy(t *testing.T) {
	srv, hs, _ := limitsServer(t, Limits{MaxBodyMemory: 256 << 10, StallTimeout: time.Minute}, slog.LevelError)
	rawUpload(t, hs, 1<<20, braces(40<<10)) // holds 64 KiB: what one client may hold of large bodies
	waitFor(t, "the first upload to hold its share", func() bool { return srv.budget.inBig.Load() >= 64<<10 })

	conn, br := rawUpload(t, hs, 1<<20, braces(64<<10))
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("X-Ms-Error-Code") != "ServerBusy" ||
		resp.Header.Get("Retry-After") == "" || !resp.Close || resp.Header.Get("Keep-Alive") != "" {
		t.Fatalf("over budget: %d %s Retry-After=%q close=%v Keep-Alive=%q", resp.StatusCode,
			resp.Header.Get("X-Ms-Error-Code"), resp.Header.Get("Retry-After"), resp.Close, resp.Header.Get("Keep-Alive"))
	}
	r := signed(t, hs, http.MethodPost, "/tbl", []byte(`{"PartitionKey":"p","RowKey":"small"}`))
	if resp, body := do(t, r); resp.StatusCode != http.StatusCreated {
		t.Fatalf("small insert: %d %s", resp.StatusCode, body)
	}
}

// A body that stops arriving is answered 500 OperationTimedOut after the stall timeout,
// and its budget returned.
func TestBodyStallTimeout(t *testing.T) {
	srv, hs, logs := limitsServer(t, Limits{StallTimeout: 200 * time.Millisecond}, slog.LevelInfo)
	start := time.Now()
	conn, br := rawUpload(t, hs, 100000, braces(5000))
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || resp.Header.Get("X-Ms-Error-Code") != "OperationTimedOut" || !resp.Close {
		t.Fatalf("stalled body: %d %s close=%v", resp.StatusCode, resp.Header.Get("X-Ms-Error-Code"), resp.Close)
	}
	if d := time.Since(start); d < 200*time.Millisecond || d > 3*time.Second {
		t.Errorf("cut after %v, want about 200ms", d)
	}
	waitFor(t, "the budget to be returned", func() bool { return srv.budget.used.Load() == 0 })
	// The 5xx is logged at info level (as a warning), with its operation and code.
	waitFor(t, "the log line", func() bool { return strings.Contains(logs.String(), "OperationTimedOut") })
	line := logLines(t, logs)[0]
	if line["level"] != "WARN" || line["op"] != "InsertEntity" || line["status"] != float64(500) {
		t.Errorf("log line of the timed-out request: %v", line)
	}
}

func TestVersionHeader(t *testing.T) {
	_, hs, _ := limitsServer(t, Limits{}, slog.LevelError)
	for _, c := range []struct {
		name, version string
		status        int
	}{
		{"absent", "", http.StatusOK},
		{"the SDKs' 2019-02-02", "2019-02-02", http.StatusOK},
		{"the CLI's 2017-04-17", "2017-04-17", http.StatusOK},
		{"the first JSON version", "2013-08-15", http.StatusOK},
		{"the newest", "2026-06-06", http.StatusOK},
		{"a word", "invalid", http.StatusBadRequest},
		{"not zero-padded", "2019-2-2", http.StatusBadRequest},
		{"Atom-only", "2012-02-12", http.StatusBadRequest},
		{"unknown date", "2019-02-03", http.StatusBadRequest},
		{"future", "2099-01-01", http.StatusBadRequest},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := signed(t, hs, http.MethodGet, "/Tables", nil)
			if c.version != "" {
				r.Header.Set("x-ms-version", c.version)
			}
			resp, body := do(t, r)
			if resp.StatusCode != c.status {
				t.Fatalf("x-ms-version %q: %d %s", c.version, resp.StatusCode, body)
			}
			want := c.version
			if c.status != http.StatusOK || want == "" {
				want = DefaultVersion
			}
			if got := resp.Header.Get("x-ms-version"); got != want {
				t.Errorf("echoed x-ms-version %q, want %q", got, want)
			}
			if c.status == http.StatusOK {
				return
			}
			var e struct {
				Err struct {
					Code        string `json:"code"`
					HeaderName  string
					HeaderValue string
				} `json:"odata.error"`
			}
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("error body %s: %v", body, err)
			}
			if resp.Header.Get("x-ms-error-code") != "InvalidHeaderValue" || e.Err.Code != "InvalidHeaderValue" ||
				e.Err.HeaderName != "x-ms-version" || e.Err.HeaderValue != c.version {
				t.Errorf("error %s (x-ms-error-code %q), want InvalidHeaderValue naming x-ms-version = %q",
					body, resp.Header.Get("x-ms-error-code"), c.version)
			}
		})
	}
	t.Run("XML endpoint", func(t *testing.T) {
		r := signed(t, hs, http.MethodGet, "/?restype=service&comp=properties", nil)
		r.Header.Set("x-ms-version", "bogus")
		resp, body := do(t, r)
		want := "<Code>InvalidHeaderValue</Code><Message>The value for one of the HTTP headers is not in the correct format."
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), want) ||
			!strings.HasSuffix(string(body), "</Message><HeaderName>x-ms-version</HeaderName><HeaderValue>bogus</HeaderValue></Error>") {
			t.Errorf("XML endpoint: %d %s", resp.StatusCode, body)
		}
	})
	t.Run("SAS", func(t *testing.T) {
		// x-ms-version is ignored on a SAS request: the signed version (sv) is used. (The
		// signature is made up, so authentication fails, after the version.)
		r, _ := http.NewRequest(http.MethodGet, hs.URL+"/"+auth.DevAccountName+"/tbl()?sv=2017-04-17&tn=tbl&sp=r&se=2099-01-01&sig=bm90IGEgc2ln", nil)
		r.Header.Set("x-ms-version", "bogus")
		resp, body := do(t, r)
		if resp.Header.Get("x-ms-error-code") == "InvalidHeaderValue" || resp.Header.Get("x-ms-version") != "2017-04-17" {
			t.Errorf("SAS request with a bad x-ms-version: %d %s, x-ms-version %q", resp.StatusCode, body, resp.Header.Get("x-ms-version"))
		}
	})
	t.Run("preflight", func(t *testing.T) {
		r, _ := http.NewRequest(http.MethodOptions, hs.URL+"/"+auth.DevAccountName+"/Tables", nil)
		r.Header.Set("Origin", "http://example.com")
		r.Header.Set("Access-Control-Request-Method", "GET")
		r.Header.Set("x-ms-version", "bogus")
		if resp, body := do(t, r); strings.Contains(string(body), "InvalidHeaderValue") {
			t.Errorf("preflight checked x-ms-version: %d %s", resp.StatusCode, body)
		}
	})
}

func TestUnsupportedAccept(t *testing.T) {
	_, hs, _ := limitsServer(t, Limits{}, slog.LevelError)
	for _, c := range []struct{ accept, format, code string }{
		{"text/html", "", "MediaTypeNotSupported"},
		{"text/html,application/xhtml+xml;q=0.9", "", "MediaTypeNotSupported"},
		{"text/html,application/xml;q=0.9", "", "AtomFormatNotSupported"},
		{"image/png", "", "MediaTypeNotSupported"},
		{"application/atom+xml", "", "AtomFormatNotSupported"},
		{"application/xml", "", "AtomFormatNotSupported"},
		{"application/json", "application/atom+xml", "AtomFormatNotSupported"},
		{"application/json", "text/html", "MediaTypeNotSupported"},
	} {
		q := ""
		if c.format != "" {
			q = "?$format=" + url.QueryEscape(c.format)
		}
		r := signed(t, hs, http.MethodGet, "/tbl()"+q, nil)
		r.Header.Set("Accept", c.accept)
		resp, body := do(t, r)
		if resp.StatusCode != http.StatusUnsupportedMediaType || resp.Header.Get("x-ms-error-code") != c.code {
			t.Errorf("Accept %q $format %q: %d %s, want 415 %s", c.accept, c.format, resp.StatusCode, body, c.code)
		}
		if c.code == "MediaTypeNotSupported" && strings.Contains(string(body), "Atom") {
			t.Errorf("Accept %q: the message mentions Atom: %s", c.accept, body)
		}
	}
}

func TestKeepAliveHeader(t *testing.T) {
	srv, hs, _ := limitsServer(t, Limits{IdleTimeout: 7 * time.Second}, slog.LevelError)
	r := signed(t, hs, http.MethodGet, "/Tables", nil)
	if resp, _ := do(t, r); resp.Header.Get("Keep-Alive") != "timeout=7" || resp.Close {
		t.Errorf("keep-alive response: Keep-Alive %q close=%v, want timeout=7", resp.Header.Get("Keep-Alive"), resp.Close)
	}
	r = signed(t, hs, http.MethodGet, "/Tables", nil)
	r.Close = true // Connection: close
	if resp, _ := do(t, r); resp.Header.Get("Keep-Alive") != "" {
		t.Errorf("response closing the connection has Keep-Alive %q", resp.Header.Get("Keep-Alive"))
	}
	// A body the handler did not read (here: refused before reading) keeps the header off,
	// since net/http may close the connection for it.
	r = signed(t, hs, http.MethodPost, "/tbl", bytes.Repeat([]byte("x"), 1000))
	r.Header.Set("Content-Type", "text/plain")
	if resp, _ := do(t, r); resp.StatusCode != http.StatusUnsupportedMediaType || resp.Header.Get("Keep-Alive") != "" {
		t.Errorf("unread body: %d Keep-Alive %q", resp.StatusCode, resp.Header.Get("Keep-Alive"))
	}
	srv.closing.Store(true)
	if resp, _ := do(t, signed(t, hs, http.MethodGet, "/Tables", nil)); resp.Header.Get("Keep-Alive") != "" {
		t.Errorf("response while shutting down has Keep-Alive %q", resp.Header.Get("Keep-Alive"))
	}
}

// A response arms a write deadline on its connection. The connection's next request, sent
// after that deadline has passed, is still answered, with or without Expect: 100-continue
// (net/http's own 100 Continue is the one write made before the handler arms the next
// deadline): the server relies on net/http clearing the deadline after each request.
func TestStaleWriteDeadline(t *testing.T) {
	const stall = 100 * time.Millisecond
	_, hs, _ := limitsServer(t, Limits{StallTimeout: stall}, slog.LevelError)
	conn, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	send := func(r *http.Request, expect bool) {
		t.Helper()
		var head strings.Builder
		fmt.Fprintf(&head, "%s %s HTTP/1.1\r\nHost: %s\r\n", r.Method, r.URL.RequestURI(), r.Host)
		for k, vs := range r.Header {
			fmt.Fprintf(&head, "%s: %s\r\n", k, vs[0])
		}
		if expect {
			head.WriteString("Expect: 100-continue\r\n")
		}
		fmt.Fprintf(&head, "Content-Length: %d\r\n\r\n", r.ContentLength)
		if _, err := io.WriteString(conn, head.String()); err != nil {
			t.Fatal(err)
		}
	}
	read := func(method string) *http.Response {
		t.Helper()
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("read response: %v", err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatalf("read response body: %v", err)
		}
		resp.Body.Close()
		return resp
	}
	for i, expect := range []bool{false, true, false, true} {
		// Each request follows the previous response by more than its stall deadline.
		if i > 0 {
			time.Sleep(3 * stall)
		}
		body := []byte(`{"PartitionKey":"p","RowKey":"` + strconv.Itoa(i) + `"}`)
		r := signed(t, hs, http.MethodPost, "/tbl", body)
		send(r, expect)
		if expect {
			if resp := read(http.MethodPost); resp.StatusCode != http.StatusContinue {
				t.Fatalf("request %d: %d before the body, want 100 Continue", i, resp.StatusCode)
			}
		}
		if _, err := conn.Write(body); err != nil {
			t.Fatal(err)
		}
		if resp := read(http.MethodPost); resp.StatusCode != http.StatusCreated {
			t.Fatalf("request %d (Expect: %v): %d, want 201", i, expect, resp.StatusCode)
		}
	}
}

// logLines parses the JSON log lines written so far.
func logLines(t *testing.T, logs *syncBuf) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func TestRequestLogDebug(t *testing.T) {
	_, hs, logs := limitsServer(t, Limits{}, slog.LevelDebug)
	var ids []string
	send := func(r *http.Request) *http.Response {
		resp, _ := do(t, r)
		ids = append(ids, resp.Header.Get("x-ms-request-id"))
		return resp
	}
	send(signed(t, hs, http.MethodPost, "/tbl", []byte(`{"PartitionKey":"p","RowKey":"r","V":1}`)))
	send(signed(t, hs, http.MethodGet, "/tbl(PartitionKey='p',RowKey='missing')", nil))
	merge := signed(t, hs, "MERGE", "/tbl(PartitionKey='p',RowKey='r')", []byte(`{"V":2}`))
	merge.Header.Set("If-Match", "*")
	send(merge)
	send(signed(t, hs, http.MethodGet, "/tbl()?$filter=V%20eq%202", nil))
	// Credentials must never reach the log: a SAS signature in the query, a shared key
	// signature in Authorization.
	sas, _ := http.NewRequest(http.MethodGet, hs.URL+"/"+auth.DevAccountName+"/tbl()?sv=2019-02-02&tn=tbl&sp=r&se=2099-01-01&sig=SECRETSASSIGNATURE", nil)
	send(sas)
	bad := signed(t, hs, http.MethodGet, "/Tables", nil)
	bad.Header.Set("Authorization", "SharedKeyLite devstoreaccount1:SECRETKEYSIGNATURE=")
	send(bad)

	lines := logLines(t, logs)
	want := []struct {
		op     string
		status float64
		code   string
	}{
		{"InsertEntity", 201, ""},
		{"QueryEntity", 404, "ResourceNotFound"},
		{"MergeEntity", 204, ""},
		{"QueryEntities", 200, ""},
		{"QueryEntities", 403, "AuthenticationFailed"},
		{"QueryTables", 403, "AuthenticationFailed"},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d log lines for %d requests:\n%s", len(lines), len(want), logs.String())
	}
	for i, w := range want {
		l := lines[i]
		code, _ := l["code"].(string)
		if l["level"] != "DEBUG" || l["op"] != w.op || l["status"] != w.status || code != w.code || l["request_id"] != ids[i] {
			t.Errorf("line %d: %v, want op %s status %v code %q request_id %s", i, l, w.op, w.status, w.code, ids[i])
		}
		if _, ok := l["latency"].(float64); !ok {
			t.Errorf("line %d has no latency: %v", i, l)
		}
	}
	if s := logs.String(); strings.Contains(s, "SECRET") || strings.Contains(s, "sig=") {
		t.Errorf("credentials in the log:\n%s", s)
	}
}

func TestRequestLogInfo(t *testing.T) {
	srv, hs, logs := limitsServer(t, Limits{}, slog.LevelInfo)
	do(t, signed(t, hs, http.MethodPost, "/tbl", []byte(`{"PartitionKey":"p","RowKey":"r"}`)))
	do(t, signed(t, hs, http.MethodGet, "/tbl(PartitionKey='p',RowKey='missing')", nil))
	if s := logs.String(); s != "" {
		t.Fatalf("info level logs ordinary requests:\n%s", s)
	}
	// Every request slower than the threshold is logged.
	srv.limits.SlowRequest = time.Nanosecond
	resp, _ := do(t, signed(t, hs, http.MethodGet, "/Tables", nil))
	lines := logLines(t, logs)
	if len(lines) != 1 || lines[0]["msg"] != "slow request" || lines[0]["level"] != "INFO" ||
		lines[0]["op"] != "QueryTables" || lines[0]["request_id"] != resp.Header.Get("x-ms-request-id") {
		t.Errorf("slow request lines: %v", lines)
	}
}

func TestOperationNames(t *testing.T) {
	srv := &Server{}
	for _, c := range []struct{ method, path, ifMatch, want string }{
		{"GET", "/a/Tables", "", "QueryTables"},
		{"POST", "/a/Tables", "", "CreateTable"},
		{"DELETE", "/a/Tables('t')", "", "DeleteTable"},
		{"GET", "/a/Tables('t')", "", "QueryTable"},
		{"GET", "/a/tbl()", "", "QueryEntities"},
		{"POST", "/a/t", "", "InsertEntity"},
		{"GET", "/a/tbl(PartitionKey='p',RowKey='r')", "", "QueryEntity"},
		{"PUT", "/a/tbl(PartitionKey='p',RowKey='r')", "*", "UpdateEntity"},
		{"PUT", "/a/tbl(PartitionKey='p',RowKey='r')", "", "InsertOrReplaceEntity"},
		{"MERGE", "/a/tbl(PartitionKey='p',RowKey='r')", "*", "MergeEntity"},
		{"PATCH", "/a/tbl(PartitionKey='p',RowKey='r')", "", "InsertOrMergeEntity"},
		{"DELETE", "/a/tbl(PartitionKey='p',RowKey='r')", "*", "DeleteEntity"},
		{"POST", "/a/$batch", "", "EntityGroupTransaction"},
		{"GET", "/a/t?comp=acl", "", "GetTableACL"},
		{"PUT", "/a/t?comp=acl", "", "SetTableACL"},
		{"GET", "/a/t?comp=properties", "", "GetTableSettings"},
		{"PUT", "/a/t?comp=properties", "", "SetTableSettings"},
		{"GET", "/a/?restype=service&comp=properties", "", "GetTableServiceProperties"},
		{"PUT", "/a/?restype=service&comp=properties", "", "SetTableServiceProperties"},
		{"GET", "/a-secondary/?restype=service&comp=stats", "", "GetTableServiceStats"},
		{"OPTIONS", "/a/t", "", "TablePreflightRequest"},
		{"GET", "/a/tbl(PartitionKey='p'", "", "Unknown"},
	} {
		r := httptest.NewRequest(c.method, "http://127.0.0.1:10002"+c.path, nil)
		if c.ifMatch != "" {
			r.Header.Set("If-Match", c.ifMatch)
		}
		rq := &request{r: r}
		rq.pathStyle = srv.address(rq)
		if got := srv.operation(rq); got != c.want {
			t.Errorf("%s %s: %s, want %s", c.method, c.path, got, c.want)
		}
	}
}

// Shutdown cuts a stalled upload at once and lets one that is moving finish.
func TestShutdownTightensBodies(t *testing.T) {
	srv, hs, _ := limitsServer(t, Limits{StallTimeout: time.Minute}, slog.LevelError)
	stalled, stalledBR := rawUpload(t, hs, 1000, braces(10))
	waitFor(t, "the upload to start", func() bool { return srv.budget.used.Load() > 0 })
	time.Sleep(1100 * time.Millisecond) // no progress for longer than shutdownStall
	rest := `{"PartitionKey":"p","RowKey":"m"}`
	moving, movingBR := rawUpload(t, hs, len(rest), []byte(rest[:2]))
	srv.tightenBodies(time.Now().Add(10 * time.Second))

	_ = stalled.SetReadDeadline(time.Now().Add(3 * time.Second))
	resp, err := http.ReadResponse(stalledBR, nil)
	if err != nil {
		t.Fatalf("stalled upload at shutdown: %v", err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || !resp.Close {
		t.Errorf("stalled upload at shutdown: %d close=%v, want 503 and the connection closed", resp.StatusCode, resp.Close)
	}
	for i := 2; i < len(rest); i += 8 {
		time.Sleep(200 * time.Millisecond)
		if _, err := io.WriteString(moving, rest[i:min(i+8, len(rest))]); err != nil {
			t.Fatal(err)
		}
	}
	_ = moving.SetReadDeadline(time.Now().Add(3 * time.Second))
	if resp, err := http.ReadResponse(movingBR, nil); err != nil || resp.StatusCode != http.StatusCreated {
		t.Errorf("moving upload at shutdown: %v %v", resp, err)
	}
}

func TestLimitsDefaults(t *testing.T) {
	l := Limits{SlowRequest: -1}.withDefaults()
	if l.SlowRequest != -1 || l.MaxBodyMemory != DefaultLimits.MaxBodyMemory || l.StallTimeout != DefaultLimits.StallTimeout {
		t.Errorf("withDefaults: %+v", l)
	}
	if got := keepAliveValue(DefaultLimits.IdleTimeout); got != "timeout="+strconv.Itoa(int(DefaultLimits.IdleTimeout/time.Second)) {
		t.Errorf("Keep-Alive value %q", got)
	}
}
