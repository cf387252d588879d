package h1

import (
	"bufio"
	"bytes"
	"net/http"
	"net/textproto"
	"os"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// heads reads testdata/heads.txt: each case's verdict and head.
func heads(t testing.TB) (cases []struct {
	plain bool
	head  []byte
}) {
	data, err := os.ReadFile("testdata/heads.txt")
	if err != nil {
		t.Fatal(err)
	}
	unescape := strings.NewReplacer(`\r`, "\r", `\n`, "\n", `\t`, "\t", `\x01`, "\x01", `\xc3\xa9`, "\xc3\xa9")
	for _, line := range strings.Split(string(data), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		verdict, head, ok := strings.Cut(line, "\t")
		if !ok || verdict != "plain" && verdict != "fallback" {
			t.Fatalf("bad case %q", line)
		}
		cases = append(cases, struct {
			plain bool
			head  []byte
		}{verdict == "plain", []byte(unescape.Replace(head))})
	}
	return cases
}

// TestHeads checks each case's verdict, and that each plain head parses as net/http
// parses it.
func TestHeads(t *testing.T) {
	for _, c := range heads(t) {
		p, ok := parse(c.head)
		if ok != c.plain {
			t.Errorf("%q: plain %v, want %v", c.head, ok, c.plain)
			continue
		}
		if ok {
			sameAsNetHTTP(t, c.head, p)
		}
	}
}

// sameAsNetHTTP fails t unless net/http reads head as a valid request with what p holds.
func sameAsNetHTTP(t testing.TB, head []byte, p parsed) {
	t.Helper()
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		t.Fatalf("%q: h1 answers it, net/http refuses it: %v", head, err)
	}
	// The server's own checks after ReadRequest (net/http's conn.readRequest), which
	// has moved the one Host header to req.Host.
	if req.Host == "" || !httpguts.ValidHostHeader(req.Host) {
		t.Fatalf("%q: h1 answers it, net/http's server refuses its Host %q", head, req.Host)
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			t.Fatalf("%q: h1 answers it, net/http's server refuses header name %q", head, k)
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				t.Fatalf("%q: h1 answers it, net/http's server refuses header value %q", head, v)
			}
		}
	}
	if req.Method != p.method || req.RequestURI != p.target || req.Host != p.host ||
		req.Close != p.close || req.ContentLength != p.contentLength || req.ProtoMinor != 1 {
		t.Fatalf("%q: net/http reads %s %s host %q close %v length %d, h1 %s %s host %q close %v length %d", head,
			req.Method, req.RequestURI, req.Host, req.Close, req.ContentLength,
			p.method, p.target, p.host, p.close, p.contentLength)
	}
	if !reflect.DeepEqual(req.URL, p.url) {
		t.Fatalf("%q: net/http's URL %#v, h1's %#v", head, req.URL, p.url)
	}
	if len(req.Header) != len(p.header) || len(req.Header) > 0 && !reflect.DeepEqual(req.Header, p.header) {
		t.Fatalf("%q: net/http's header %q, h1's %q", head, req.Header, p.header)
	}
}

// FuzzParse checks that every head h1 answers itself is a valid request that net/http reads
// the same way, so that handing the others to net/http leaves HTTP's rules as net/http
// enforces them.
func FuzzParse(f *testing.F) {
	for _, c := range heads(f) {
		f.Add(c.head)
	}
	f.Fuzz(func(t *testing.T, head []byte) {
		p, ok := parse(head)
		if ok {
			sameAsNetHTTP(t, head, p)
		}
	})
}

// FuzzCanonicalKey checks canonicalKey against textproto's for header names.
func FuzzCanonicalKey(f *testing.F) {
	for _, k := range []string{"x-ms-version", "X-MS-DATE", "content-type", "Host", "a-b-c", "x_y", "DataServiceVersion", "1a-2b"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if !isToken(name) {
			return
		}
		if got, want := canonicalKey(name), textproto.CanonicalMIMEHeaderKey(name); got != want {
			t.Fatalf("canonicalKey(%q) = %q, want %q", name, got, want)
		}
	})
}

// TestParseAllocs: the request line and the header block cost a handful of allocations
// (the head's string, the map, the values, the URL), none per lower-case common header.
func TestParseAllocs(t *testing.T) {
	head := []byte("GET /devstoreaccount1/t(PartitionKey='p',RowKey='r') HTTP/1.1\r\nhost: h\r\nx-ms-version: 2019-02-02\r\nx-ms-date: Sun, 29 Nov 2026 08:00:00 GMT\r\nauthorization: SharedKeyLite a:b\r\naccept: application/json;odata=nometadata\r\ndataserviceversion: 3.0\r\n\r\n")
	allocs := testing.AllocsPerRun(100, func() {
		if _, ok := parse(head); !ok {
			t.Fatal("not plain")
		}
	})
	if allocs > 6 {
		t.Errorf("parse: %v allocations, want at most 6", allocs)
	}
}
