package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
	"github.com/ceruleandb/cerulean/internal/svcprops"
)

// Read consistency over HTTP (docs/compatibility.md "Read consistency and replicas"), on the real Pebble engine.

// viewsEngine records the options of the views it opens.
type viewsEngine struct {
	storage.Engine
	mu   sync.Mutex
	opts []storage.ReadOptions
}

func (e *viewsEngine) ReadView(ctx context.Context, o storage.ReadOptions) (storage.View, error) {
	e.mu.Lock()
	e.opts = append(e.opts, o)
	e.mu.Unlock()
	return e.Engine.ReadView(ctx, o)
}

// take returns the options recorded since the last call.
func (e *viewsEngine) take() []storage.ReadOptions {
	e.mu.Lock()
	defer e.mu.Unlock()
	o := e.opts
	e.opts = nil
	return o
}

// consistencyServer serves a fresh Pebble engine (recording its views) with one table,
// "tbl", holding one entity, with reads defaulting to def.
func consistencyServer(t *testing.T, def storage.Consistency) (*httptest.Server, *viewsEngine) {
	t.Helper()
	eng, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	ve := &viewsEngine{Engine: eng}
	srv, err := New(Options{Engine: ve, Accounts: []auth.Account{auth.DevAccount()}, ReadConsistency: def})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	if err := srv.tables.CreateTable(t.Context(), auth.DevAccountName, "tbl", nil); err != nil {
		t.Fatal(err)
	}
	if resp, body := do(t, signed(t, hs, "POST", "/tbl", []byte(`{"PartitionKey":"p","RowKey":"r"}`))); resp.StatusCode != 201 {
		t.Fatalf("insert: %d %s", resp.StatusCode, body)
	}
	ve.take()
	return hs, ve
}

// readPaths are a request of every read kind, after the account.
var readPaths = map[string]string{
	"get entity":         "/tbl(PartitionKey='p',RowKey='r')",
	"query entities":     "/tbl()",
	"point query":        "/tbl()?$filter=PartitionKey%20eq%20'p'%20and%20RowKey%20eq%20'r'",
	"query $top=0":       "/tbl()?$top=0",
	"query tables":       "/Tables",
	"get table":          "/Tables('tbl')",
	"get table acl":      "/tbl?comp=acl",
	"service properties": "/?restype=service&comp=properties",
	"table settings":     "/tbl?comp=properties",
}

// errorCodeAny is the error code of a response and the header it names, JSON or XML.
func errorCodeAny(t *testing.T, resp *http.Response, body []byte) (code, headerName string) {
	t.Helper()
	if strings.HasPrefix(string(body), "<?xml") {
		_, rest, _ := strings.Cut(string(body), "<HeaderName>")
		name, _, _ := strings.Cut(rest, "</HeaderName>")
		return resp.Header.Get("X-Ms-Error-Code"), name
	}
	return errorCode(t, resp, body)
}

// TestConsistencyHeader: x-ms-consistency-level takes the five names exactly, on every
// read kind; anything else is 400 InvalidHeaderValue naming the header; without it the
// server's default applies.
func TestConsistencyHeader(t *testing.T) {
	hs, ve := consistencyServer(t, storage.Eventual)
	for name, path := range readPaths {
		read := func(values ...string) (*http.Response, []byte) {
			r := signed(t, hs, "GET", path, nil)
			for _, v := range values {
				r.Header.Add("x-ms-consistency-level", v)
			}
			return do(t, r)
		}
		// Absent: the default.
		if resp, body := read(); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", name, resp.StatusCode, body)
		}
		if o := ve.take(); len(o) != 1 || o[0] != (storage.ReadOptions{Consistency: storage.Eventual}) {
			t.Errorf("%s without the header: views %+v, want one at the default Eventual", name, o)
		}
		for _, level := range []storage.Consistency{storage.Strong, storage.BoundedStaleness, storage.Session, storage.ConsistentPrefix, storage.Eventual} {
			resp, body := read(level.String())
			if resp.StatusCode != 200 {
				t.Errorf("%s at %v: %d %s", name, level, resp.StatusCode, body)
				continue
			}
			want := level
			if level == storage.Session {
				want = storage.Strong // no token
			}
			if o := ve.take(); len(o) != 1 || o[0].Consistency != want {
				t.Errorf("%s at %v: views %+v, want one at %v", name, level, o, want)
			}
		}
		for _, bad := range [][]string{{"strong"}, {"STRONG"}, {"Bounded"}, {""}, {" "}, {"Strong,Eventual"}, {"Strong", "Strong"}, {"Consistency(5)"}, {"5"}} {
			resp, body := read(bad...)
			code, named := errorCodeAny(t, resp, body)
			if resp.StatusCode != 400 || code != "InvalidHeaderValue" || named != "x-ms-consistency-level" {
				t.Errorf("%s with x-ms-consistency-level %q: %d %s, want 400 InvalidHeaderValue naming the header", name, bad, resp.StatusCode, body)
			}
			if o := ve.take(); len(o) != 0 {
				t.Errorf("%s with a bad level opened views %+v", name, o)
			}
		}
	}
	// Session with a token keeps its level; writes ignore the header.
	resp, _ := do(t, signed(t, hs, "PUT", "/tbl(PartitionKey='p',RowKey='r')", []byte(`{}`)))
	tok := resp.Header.Get("x-ms-session-token")
	r := signed(t, hs, "GET", readPaths["get entity"], nil)
	r.Header.Set("x-ms-consistency-level", "Session")
	r.Header.Set("x-ms-session-token", tok)
	if resp, body := do(t, r); resp.StatusCode != 200 {
		t.Fatalf("session read: %d %s", resp.StatusCode, body)
	}
	if o := ve.take(); len(o) != 1 || o[0].Consistency != storage.Session || o[0].At == 0 {
		t.Errorf("session read with a token: views %+v", o)
	}
	r = signed(t, hs, "PUT", "/tbl(PartitionKey='p',RowKey='r')", []byte(`{}`))
	r.Header.Set("x-ms-consistency-level", "nonsense")
	if resp, body := do(t, r); resp.StatusCode != 204 {
		t.Errorf("write with a bad level: %d %s", resp.StatusCode, body)
	}
}

// TestServerDefaultConsistency: the default is Strong; an unknown level is refused.
func TestServerDefaultConsistency(t *testing.T) {
	hs, ve := consistencyServer(t, storage.Strong)
	do(t, signed(t, hs, "GET", readPaths["get entity"], nil))
	if o := ve.take(); len(o) != 1 || o[0] != (storage.ReadOptions{}) {
		t.Errorf("views %+v, want one at Strong", o)
	}
	if _, err := New(Options{Engine: ve, Accounts: []auth.Account{auth.DevAccount()}, ReadConsistency: storage.Eventual + 1}); err == nil {
		t.Error("an unknown default level was accepted")
	}
}

// readHeaders checks a successful read's three headers and returns its position.
func readHeaders(t *testing.T, what string, h http.Header) storage.Position {
	t.Helper()
	p := tokenOf(t, what, h)
	if src := h.Values("x-cerulean-read-source"); len(src) != 1 || src[0] != "primary" {
		t.Errorf("%s: x-cerulean-read-source %q, want primary", what, src)
	}
	if pos := h.Values("x-cerulean-read-position"); len(pos) != 1 || pos[0] != strconv.FormatUint(uint64(p), 10) {
		t.Errorf("%s: x-cerulean-read-position %q, want %d (the token's)", what, pos, p)
	}
	return p
}

// TestReadResponseHeaders: every successful read answers its token, source and position
// (on Pebble: the primary, at or past the last write), and so does a 404 (a missing entity
// or table); other failures, Get Table Service Stats (no engine read) and writes answer no
// read source; CORS exposes the three headers.
func TestReadResponseHeaders(t *testing.T) {
	hs, _ := consistencyServer(t, storage.Strong)
	resp, _ := do(t, signed(t, hs, "PUT", "/tbl(PartitionKey='p',RowKey='r')", []byte(`{}`)))
	if resp.Header.Get("x-cerulean-read-source") != "" {
		t.Errorf("a write answered a read source")
	}
	written := tokenOf(t, "write", resp.Header)
	for name, path := range readPaths {
		for _, level := range []string{"", "Strong", "Session", "Eventual", "BoundedStaleness", "ConsistentPrefix"} {
			r := signed(t, hs, "GET", path, nil)
			if level != "" {
				r.Header.Set("x-ms-consistency-level", level)
			}
			resp, body := do(t, r)
			if resp.StatusCode != 200 {
				t.Fatalf("%s: %d %s", name, resp.StatusCode, body)
			}
			if p := readHeaders(t, name+" "+level, resp.Header); p < written {
				t.Errorf("%s: read position %d before the write's %d", name, p, written)
			}
		}
	}
	// A 404 is a read's answer too: it says where and at what position it was read
	// (issue 44), so that a stale one can be traced.
	for name, path := range map[string]string{
		"missing entity": "/tbl(PartitionKey='p',RowKey='nope')",
		"missing table":  "/Tables('nope')",
	} {
		resp, body := do(t, signed(t, hs, "GET", path, nil))
		if resp.StatusCode != 404 {
			t.Errorf("%s: %d %s", name, resp.StatusCode, body)
		}
		if p := readHeaders(t, name, resp.Header); p < written {
			t.Errorf("%s: read position %d before the write's %d", name, p, written)
		}
	}
	// Other failures, and what reads nothing from the engine, answer no read source.
	bad := signed(t, hs, "GET", readPaths["get entity"], nil)
	bad.Header.Set("x-ms-consistency-level", "nonsense")
	for name, r := range map[string]*http.Request{
		"stats":     signed(t, hs, "GET", "/?restype=service&comp=stats", nil),
		"bad level": bad,
	} {
		resp, body := do(t, r)
		if (name == "stats") != (resp.StatusCode == 200) {
			t.Errorf("%s: %d %s", name, resp.StatusCode, body)
		}
		for _, h := range []string{"x-ms-session-token", "x-cerulean-read-source", "x-cerulean-read-position"} {
			if v := resp.Header.Values(h); len(v) != 0 {
				t.Errorf("%s: %s %q, want none", name, h, v)
			}
		}
	}
	// Paging: NextRowKey carries the page's position; the next page reads at least there.
	if resp, body := do(t, signed(t, hs, "POST", "/tbl", []byte(`{"PartitionKey":"p","RowKey":"s"}`))); resp.StatusCode != 201 {
		t.Fatalf("insert: %d %s", resp.StatusCode, body)
	}
	resp, body := do(t, signed(t, hs, "GET", "/tbl()?$top=1", nil))
	p := readHeaders(t, "first page", resp.Header)
	nrk := resp.Header.Get("x-ms-continuation-NextRowKey")
	if resp.StatusCode != 200 || !strings.HasSuffix(nrk, "!"+strconv.FormatUint(uint64(p), 10)) || resp.Header.Get("x-ms-continuation-NextPartitionKey") == "" {
		t.Fatalf("first page: %d NextRowKey %q at %d: %s", resp.StatusCode, nrk, p, body)
	}
	resp, body = do(t, signed(t, hs, "GET", "/tbl()?$top=1&NextPartitionKey="+resp.Header.Get("x-ms-continuation-NextPartitionKey")+"&NextRowKey="+nrk, nil))
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"RowKey":"s"`) || readHeaders(t, "second page", resp.Header) < p {
		t.Fatalf("second page: %d %s", resp.StatusCode, body)
	}
	resp, body = do(t, signed(t, hs, "GET", "/tbl()?$top=1&NextPartitionKey=1!2!cA&NextRowKey=1!2!cg!x", nil))
	if code, _ := errorCode(t, resp, body); resp.StatusCode != 400 || code != "InvalidInput" {
		t.Errorf("bad position in NextRowKey: %d %s", resp.StatusCode, body)
	}
}

// TestReadHeadersCORS: a read whose CORS rule matched exposes the three read headers,
// each once, beside what the rule exposes.
func TestReadHeadersCORS(t *testing.T) {
	hs, ve := consistencyServer(t, storage.Strong)
	p := svcprops.DefaultProperties()
	p.Cors = []svcprops.CorsRule{{AllowedOrigins: []string{"http://app.example"}, AllowedMethods: []string{"GET"},
		AllowedHeaders: []string{"*"}, ExposedHeaders: []string{"x-ms-request-id", "X-Cerulean-Read-Source"}}}
	if err := ve.SetServiceProperties(t.Context(), auth.DevAccountName, svcprops.MarshalProperties(p)); err != nil {
		t.Fatal(err)
	}
	for name, path := range readPaths {
		r := signed(t, hs, "GET", path, nil)
		r.Header.Set("Origin", "http://app.example")
		resp, body := do(t, r)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", name, resp.StatusCode, body)
		}
		want := "x-ms-request-id,X-Cerulean-Read-Source,x-ms-session-token,x-cerulean-read-position"
		if strings.Contains(name, "query") && name != "query tables" {
			want += ",x-cerulean-plan" // Query Entities names its plan
		}
		if got := resp.Header.Get("Access-Control-Expose-Headers"); got != want {
			t.Errorf("%s: Access-Control-Expose-Headers %q, want %q", name, got, want)
		}
		r = signed(t, hs, "GET", path, nil)
		resp, _ = do(t, r)
		if got := resp.Header.Get("Access-Control-Expose-Headers"); got != "" {
			t.Errorf("%s without Origin: Access-Control-Expose-Headers %q", name, got)
		}
	}
}

// TestTableWriteTokens: table-level changes answer a session token covering them (and
// every earlier write), which a read accepts; a failed change answers none.
func TestTableWriteTokens(t *testing.T) {
	hs, _ := consistencyServer(t, storage.Strong)
	resp, _ := do(t, signed(t, hs, "PUT", "/tbl(PartitionKey='p',RowKey='r')", []byte(`{}`)))
	last := tokenOf(t, "entity write", resp.Header)
	xml := func(r *http.Request) *http.Request { r.Header.Set("Content-Type", "application/xml"); return r }
	acl := `<?xml version="1.0" encoding="utf-8"?><SignedIdentifiers><SignedIdentifier><Id>p1</Id><AccessPolicy><Permission>r</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>`
	props := `<?xml version="1.0" encoding="utf-8"?><StorageServiceProperties><Cors/></StorageServiceProperties>`
	steps := []struct {
		what   string
		req    *http.Request
		status int
	}{
		{"create table", signed(t, hs, "POST", "/Tables", []byte(`{"TableName":"other"}`)), 201},
		{"create table no-content", func() *http.Request {
			r := signed(t, hs, "POST", "/Tables", []byte(`{"TableName":"third"}`))
			r.Header.Set("Prefer", "return-no-content")
			return r
		}(), 204},
		{"set table acl", xml(signed(t, hs, "PUT", "/other?comp=acl", []byte(acl))), 204},
		{"set service properties", xml(signed(t, hs, "PUT", "/?restype=service&comp=properties", []byte(props))), 202},
		{"set table settings", signed(t, hs, "PUT", "/other?comp=properties", []byte(`{"Elastic":true}`)), 204},
		{"delete table", signed(t, hs, "DELETE", "/Tables('other')", nil), 204},
	}
	for _, st := range steps {
		resp, body := do(t, st.req)
		if resp.StatusCode != st.status {
			t.Fatalf("%s: %d %s", st.what, resp.StatusCode, body)
		}
		p := tokenOf(t, st.what, resp.Header)
		if p < last {
			t.Errorf("%s: token %d before the previous write's %d", st.what, p, last)
		}
		last = p
		if resp.Header.Get("x-cerulean-read-source") != "" {
			t.Errorf("%s answered a read source", st.what)
		}
		r := signed(t, hs, "GET", "/Tables", nil)
		r.Header.Set("x-ms-session-token", resp.Header.Get("x-ms-session-token"))
		if resp, body := do(t, r); resp.StatusCode != 200 {
			t.Errorf("read with the token of %s: %d %s", st.what, resp.StatusCode, body)
		}
	}
	for name, r := range map[string]*http.Request{
		"create existing": signed(t, hs, "POST", "/Tables", []byte(`{"TableName":"tbl"}`)),
		"delete missing":  signed(t, hs, "DELETE", "/Tables('nope')", nil),
		"acl missing":     xml(signed(t, hs, "PUT", "/nope?comp=acl", []byte(acl))),
	} {
		resp, body := do(t, r)
		if resp.StatusCode < 400 || resp.Header.Get("x-ms-session-token") != "" {
			t.Errorf("%s: %d token %q %s", name, resp.StatusCode, resp.Header.Get("x-ms-session-token"), body)
		}
	}
}
