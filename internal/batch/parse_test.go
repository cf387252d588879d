package batch_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/batch"
)

// op is the expected shape of one parsed operation; empty fields are not checked except
// body (always compared) and ifMatch ("-" means absent).
type op struct {
	method, path, contentID, ifMatch string
	query                            map[string]string
	body                             string
}

// parseErr is an expected Parse failure: index -1 for a plain whole-request error.
type parseErr struct {
	index int
	code  azerr.Code
}

const minimal = "application/json;odata=minimalmetadata"

var (
	jsOps = []op{
		{method: "POST", path: "/devstoreaccount1/t1", ifMatch: "-", query: map[string]string{"$format": minimal},
			body: `{"PartitionKey":"p","RowKey":"1","V":1,"L":"5","L@odata.type":"Edm.Int64"}`},
		// JS doubles quotes in keys and leaves them unescaped in the path.
		{method: "MERGE", path: "/devstoreaccount1/t1(PartitionKey='p',RowKey='it''s')", ifMatch: "*",
			body: `{"PartitionKey":"p","RowKey":"it's","V":2}`},
		{method: "PUT", path: "/devstoreaccount1/t1(PartitionKey='p',RowKey='a b+c')", ifMatch: "-",
			body: `{"PartitionKey":"p","RowKey":"a b+c","V":3}`},
		{method: "DELETE", path: "/devstoreaccount1/t1(PartitionKey='p',RowKey='4')", ifMatch: "*"},
	}
	pythonOps = []op{
		{method: "POST", path: "/devstoreaccount1/t1", contentID: "0", ifMatch: "-",
			body: `{"PartitionKey": "p", "RowKey": "1", "V": 1, "L": "5", "L@odata.type": "Edm.Int64"}`},
		// Python percent-encodes the doubled quotes: decoded once, they are quotes again.
		{method: "MERGE", path: "/devstoreaccount1/t1(PartitionKey='p',RowKey='it''s')", contentID: "1", ifMatch: testETag,
			body: `{"PartitionKey": "p", "RowKey": "it's", "V": 2}`},
		{method: "PUT", path: "/devstoreaccount1/t1(PartitionKey='p',RowKey='3')", contentID: "2", ifMatch: "-",
			body: `{"PartitionKey": "p", "RowKey": "3", "V": 3}`},
		{method: "DELETE", path: "/devstoreaccount1/t1(PartitionKey='p',RowKey='4')", contentID: "3", ifMatch: "*"},
	}
	dotnetOps = []op{
		{method: "POST", path: "/devstoreaccount1/t1", contentID: "1", ifMatch: "-", query: map[string]string{"$format": minimal},
			body: `{"PartitionKey":"p","RowKey":"1","V":1,"L":"5","L@odata.type":"Edm.Int64"}`},
		{method: "MERGE", path: "/devstoreaccount1/t1(PartitionKey='p',RowKey='it''s')", contentID: "2", ifMatch: "*",
			query: map[string]string{"$format": minimal}, body: `{"PartitionKey":"p","RowKey":"it's","V":2}`},
		{method: "PUT", path: "/devstoreaccount1/t1(PartitionKey='p',RowKey='3')", contentID: "3", ifMatch: "-",
			body: `{"PartitionKey":"p","RowKey":"3","V":3}`},
		{method: "DELETE", path: "/devstoreaccount1/t1(PartitionKey='p',RowKey='4')", contentID: "4", ifMatch: "*"},
	}
	twoOps = []op{
		{method: "POST", path: "/devstoreaccount1/t1", ifMatch: "-", body: `{"PartitionKey":"p","RowKey":"1"}`},
		{method: "DELETE", path: "/devstoreaccount1/t1(PartitionKey='p',RowKey='2')", ifMatch: "*"},
	}
)

// fixtureCases maps every testdata/*.http fixture to its expected outcome. A fixture
// without an entry fails TestFixtures, so none is forgotten.
var fixtureCases = map[string]struct {
	ops      []op
	retrieve bool
	err      *parseErr
}{
	"go-aztables-1.4.1.http":        {}, // checked in detail by TestGoSDKFixtures
	"go-aztables-1.4.1-cosmos.http": {},
	"js-data-tables.http":           {ops: jsOps},
	"python-azure-data-tables.http": {ops: pythonOps},
	"dotnet-azure-data-tables.http": {ops: dotnetOps},
	"adv-lf-only.http":              {ops: twoOps},
	"adv-preamble-epilogue.http":    {ops: twoOps},
	"adv-quoted-boundary.http":      {ops: twoOps},
	"adv-mixed-tolerance.http": {ops: []op{
		{method: "POST", path: "/devstoreaccount1/t1", contentID: "7", ifMatch: "-",
			query: map[string]string{"sv": "2019-02-02", "sig": "abc+def=", "$format": "application/json;odata=nometadata"},
			body:  `{"PartitionKey":"p","RowKey":"1"}`},
		// Relative target with a colon in a key; POST + X-HTTP-Method: MERGE; the MIME
		// part's Content-ID wins over the one inside the request.
		{method: "MERGE", path: "t1(PartitionKey='p',RowKey='a:b')", contentID: "part-2", ifMatch: "*",
			body: `{"PartitionKey":"p","RowKey":"a:b","X":1}`},
		// A bare-LF part inside a CRLF body; %2B decodes to '+', '+' stays '+'.
		{method: "MERGE", path: "/devstoreaccount1/t1(PartitionKey='p',RowKey='x+y+z')", ifMatch: "*",
			body: `{"PartitionKey":"p","RowKey":"x+y+z"}`},
	}},
	"adv-retrieve.http": {retrieve: true, ops: []op{
		{method: "GET", path: "/devstoreaccount1/t1(PartitionKey='p',RowKey='1')", ifMatch: "-", query: map[string]string{"$select": "V"}},
	}},
	"adv-missing-close.http":           {err: &parseErr{-1, azerr.InvalidInput}},
	"adv-missing-changeset-close.http": {err: &parseErr{-1, azerr.InvalidInput}},
	"adv-two-changesets.http":          {err: &parseErr{-1, azerr.InvalidInput}},
	"adv-empty-changeset.http":         {err: &parseErr{-1, azerr.InvalidInput}},
	"adv-empty-batch.http":             {err: &parseErr{-1, azerr.InvalidInput}},
	"adv-no-request-line.http":         {err: &parseErr{-1, azerr.InvalidInput}},
	"adv-bad-request-line.http":        {err: &parseErr{-1, azerr.InvalidInput}},
	"adv-nested-garbage.http":          {err: &parseErr{-1, azerr.InvalidInput}},
	"adv-get-in-changeset.http":        {err: &parseErr{1, azerr.InvalidInput}},
	"adv-xmethod-not-post.http":        {err: &parseErr{1, azerr.XMethodNotUsingPost}},
	"adv-bad-url.http":                 {err: &parseErr{1, azerr.InvalidURI}},
}

func TestFixtures(t *testing.T) {
	for _, name := range fixtureFiles(t) {
		t.Run(name, func(t *testing.T) {
			tc, ok := fixtureCases[name]
			if !ok {
				t.Fatal("fixture without an expectation in fixtureCases")
			}
			ct, body := readFixture(t, name)
			req, err := batch.Parse(ct, body)
			checkParse(t, req, err, tc.ops, tc.retrieve, tc.err)
			if err == nil && tc.err == nil {
				checkAliases(t, req, body)
			}
		})
	}
}

// Every fixture converted to bare LF line endings parses to the same result: Azurite
// accepts LF-only bodies and so must we.
func TestFixturesLFOnly(t *testing.T) {
	for _, name := range fixtureFiles(t) {
		t.Run(name, func(t *testing.T) {
			ct, body := readFixture(t, name)
			want, werr := batch.Parse(ct, body)
			lf := bytes.ReplaceAll(body, []byte("\r\n"), []byte("\n"))
			got, gerr := batch.Parse(ct, lf)
			if (werr == nil) != (gerr == nil) {
				t.Fatalf("CRLF err %v, LF err %v", werr, gerr)
			}
			if werr != nil {
				if errCode(werr) != errCode(gerr) {
					t.Fatalf("CRLF err %v, LF err %v", werr, gerr)
				}
				return
			}
			if len(got.Operations) != len(want.Operations) || got.Retrieve != want.Retrieve {
				t.Fatalf("LF: %d ops, CRLF: %d ops", len(got.Operations), len(want.Operations))
			}
			for i := range want.Operations {
				w, g := want.Operations[i], got.Operations[i]
				if w.Method != g.Method || w.Path != g.Path || w.ContentID != g.ContentID ||
					!bytes.Equal(w.Body, bytes.ReplaceAll(g.Body, []byte("\n"), []byte("\r\n"))) && !bytes.Equal(w.Body, g.Body) ||
					fmt.Sprint(w.Header) != fmt.Sprint(g.Header) || fmt.Sprint(w.Query()) != fmt.Sprint(g.Query()) {
					t.Errorf("op %d differs:\nCRLF %+v\nLF   %+v", i, w, g)
				}
			}
		})
	}
}

func errCode(err error) azerr.Code {
	e, _ := azerr.As(err)
	return e.Code
}

func checkParse(t *testing.T, req *batch.Request, err error, want []op, retrieve bool, werr *parseErr) {
	t.Helper()
	if werr != nil {
		if err == nil {
			t.Fatalf("Parse succeeded with %d operations, want error %v", len(req.Operations), *werr)
		}
		if req != nil {
			t.Errorf("Parse returned a request with its error")
		}
		checkErrShape(t, err)
		var oe *batch.OpError
		isOp := errors.As(err, &oe)
		switch {
		case werr.index < 0 && isOp:
			t.Errorf("err = %v, want a plain (whole-request) error", err)
		case werr.index >= 0 && (!isOp || oe.Index != werr.index):
			t.Errorf("err = %#v, want an OpError at index %d", err, werr.index)
		}
		if c := errCode(err); c != werr.code {
			t.Errorf("code %s, want %s (err %v)", c, werr.code, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if want == nil {
		return
	}
	if req.Retrieve != retrieve {
		t.Errorf("Retrieve = %v, want %v", req.Retrieve, retrieve)
	}
	if len(req.Operations) != len(want) {
		t.Fatalf("%d operations, want %d", len(req.Operations), len(want))
	}
	for i, w := range want {
		g := req.Operations[i]
		if g.Method != w.method || g.Path != w.path || g.ContentID != w.contentID {
			t.Errorf("op %d: %s %q cid %q, want %s %q cid %q", i, g.Method, g.Path, g.ContentID, w.method, w.path, w.contentID)
		}
		if w.ifMatch != "" {
			vs := g.Header.Values("If-Match")
			present := vs != nil
			if w.ifMatch == "-" && present || w.ifMatch != "-" && (len(vs) != 1 || vs[0] != w.ifMatch) {
				t.Errorf("op %d: If-Match %q, want %q", i, vs, w.ifMatch)
			}
		}
		for k, v := range w.query {
			if got := g.Query().Get(k); got != v {
				t.Errorf("op %d: query %s = %q, want %q (query %v)", i, k, got, v, g.Query())
			}
		}
		if string(g.Body) != w.body {
			t.Errorf("op %d: body %q, want %q", i, g.Body, w.body)
		}
		if g.URL == nil {
			t.Errorf("op %d: nil URL", i)
		}
	}
}

// checkErrShape: every Parse error is a catalogue error with a 4xx status.
func checkErrShape(t testing.TB, err error) {
	t.Helper()
	e, ok := azerr.As(err)
	if !ok || e.Status < 400 || e.Status > 499 {
		t.Fatalf("error %v (%T) is not a 4xx *azerr.Error", err, err)
	}
}

// checkAliases: bodies point into the request body (no copies).
func checkAliases(t *testing.T, req *batch.Request, body []byte) {
	t.Helper()
	for i, o := range req.Operations {
		if len(o.Body) == 0 {
			continue
		}
		off := bytes.Index(body, o.Body)
		if off < 0 || &body[off] != &o.Body[0] {
			t.Errorf("op %d: Body does not alias the request body", i)
		}
	}
}

// build assembles a CRLF batch around changeset parts given as raw sub-requests.
func build(parts ...string) (string, []byte) {
	var b strings.Builder
	b.WriteString("--batch_x\r\nContent-Type: multipart/mixed; boundary=changeset_y\r\n\r\n")
	for _, p := range parts {
		b.WriteString("--changeset_y\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n")
		b.WriteString(strings.ReplaceAll(p, "\n", "\r\n"))
		b.WriteString("\r\n")
	}
	b.WriteString("--changeset_y--\r\n--batch_x--\r\n")
	return "multipart/mixed; boundary=batch_x", []byte(b.String())
}

const insert = "POST http://h/a/t1 HTTP/1.1\nContent-Type: application/json\n\n{\"PartitionKey\":\"p\",\"RowKey\":\"r\"}"

func TestParseCases(t *testing.T) {
	del := func(extra string) string {
		return "DELETE http://h/a/t1(PartitionKey='p',RowKey='r') HTTP/1.1\nIf-Match: *\n" + extra
	}
	type tc struct {
		name string
		ct   string
		body []byte
		ops  []op
		err  *parseErr
	}
	var cases []tc
	add := func(name string, ops []op, err *parseErr, parts ...string) {
		ct, body := build(parts...)
		cases = append(cases, tc{name, ct, body, ops, err})
	}
	raw := func(name, ct, body string, ops []op, err *parseErr) {
		cases = append(cases, tc{name, ct, []byte(body), ops, err})
	}
	ins := op{method: "POST", path: "/a/t1", body: `{"PartitionKey":"p","RowKey":"r"}`}
	dl := op{method: "DELETE", path: "/a/t1(PartitionKey='p',RowKey='r')", ifMatch: "*"}

	add("insert and delete", []op{ins, dl}, nil, insert, del(""))
	add("patch becomes merge", []op{{method: "MERGE", path: "/a/t1(PartitionKey='p',RowKey='r')", body: "{}"}}, nil,
		"patch http://h/a/t1(PartitionKey='p',RowKey='r') HTTP/1.1\n\n{}")
	add("tunnelled put", []op{{method: "PUT", path: "/a/t1(PartitionKey='p',RowKey='r')", body: "{}"}}, nil,
		"POST http://h/a/t1(PartitionKey='p',RowKey='r') HTTP/1.1\nX-HTTP-Method: put\n\n{}")
	add("tunnelled delete", []op{{method: "DELETE", path: "/a/t1(PartitionKey='p',RowKey='r')"}}, nil,
		"POST /a/t1(PartitionKey='p',RowKey='r') HTTP/1.1\nx-http-method: DELETE\nIf-Match: *\n")
	add("tunnelled patch", []op{{method: "MERGE", path: "/a/t1(PartitionKey='p',RowKey='r')", body: "{}"}}, nil,
		"POST /a/t1(PartitionKey='p',RowKey='r') HTTP/1.1\nX-HTTP-Method: PATCH\n\n{}")
	add("x-method twice", nil, &parseErr{1, azerr.XMethodIncorrectCount}, insert,
		"POST /a/t1 HTTP/1.1\nX-HTTP-Method: MERGE\nX-HTTP-Method: MERGE\n\n{}")
	add("x-method list", nil, &parseErr{0, azerr.XMethodIncorrectCount},
		"POST /a/t1 HTTP/1.1\nX-HTTP-Method: MERGE, PUT\n\n{}")
	add("x-method get", nil, &parseErr{0, azerr.XMethodIncorrectValue},
		"POST /a/t1 HTTP/1.1\nX-HTTP-Method: GET\n\n{}")
	add("x-method on merge", nil, &parseErr{0, azerr.XMethodNotUsingPost},
		"MERGE /a/t1 HTTP/1.1\nX-HTTP-Method: PUT\n\n{}")
	add("unknown verb", nil, &parseErr{1, azerr.UnsupportedHTTPVerb}, insert, "OPTIONS /a/t1 HTTP/1.1\n")
	add("head verb", nil, &parseErr{0, azerr.UnsupportedHTTPVerb}, "HEAD /a/t1 HTTP/1.1\n")
	add("request line without version", nil, &parseErr{-1, azerr.InvalidInput}, "DELETE /a/t1")
	add("request line not http", nil, &parseErr{-1, azerr.InvalidInput}, "DELETE /a/t1 FTP/1.0\n")
	add("header without colon", nil, &parseErr{-1, azerr.InvalidInput}, del("Bogus header line\n"))
	add("header folded", nil, &parseErr{-1, azerr.InvalidInput}, del(" folded\n"))
	add("header name with space", nil, &parseErr{-1, azerr.InvalidInput}, del("Bad Name: x\n"))
	add("header folded with a colon", nil, &parseErr{-1, azerr.InvalidInput}, del(" Folded: x\n"))
	add("header blanks around the colon and value", []op{{method: "DELETE", path: "/a/t1(PartitionKey='p',RowKey='r')", ifMatch: "*"}}, nil,
		"DELETE /a/t1(PartitionKey='p',RowKey='r') HTTP/1.1\nIf-Match \t:\t *  \t\n\n")
	add("empty header values kept", []op{dl}, nil, del("x-ms-version:\nDataServiceVersion: \n"))
	add("body keeps inner blank lines", []op{{method: "POST", path: "/a/t1", body: "{\r\n\r\n}"}}, nil,
		"POST /a/t1 HTTP/1.1\n\n\n\n{\n\n}")
	add("blank lines before request line", []op{dl}, nil, "\n\n"+del(""))
	add("content-length ignored", []op{{method: "POST", path: "/a/t1", body: `{"a":1}`}}, nil,
		"POST /a/t1 HTTP/1.1\nContent-Length: 3\n\n{\"a\":1}")
	add("percent-decoded once", []op{{method: "DELETE", path: "/a/t1(PartitionKey='%41',RowKey='+ /')"}}, nil,
		"DELETE /a/t1(PartitionKey='%2541',RowKey='+%20%2F') HTTP/1.1\n")
	add("invalid query escape kept raw", []op{{method: "POST", path: "/a/t1", query: map[string]string{"x": "%zz", "$format": "a;b"}}}, nil,
		"POST /a/t1?x=%zz&$format=a;b HTTP/1.1\n")
	add("content-id inside request", []op{{method: "POST", path: "/a/t1", contentID: "42"}}, nil,
		"POST /a/t1 HTTP/1.1\ncontent-id: 42\n")
	add("boundary text inside body", []op{{method: "POST", path: "/a/t1", body: "--changeset_y-not-a-delimiter\r\n--changeset_yz"}}, nil,
		"POST /a/t1 HTTP/1.1\n\n--changeset_y-not-a-delimiter\n--changeset_yz")

	// Framing cases written out in full.
	cs := "--batch_x\r\nContent-Type: multipart/mixed; boundary=changeset_y\r\n\r\n"
	part := "--changeset_y\r\nContent-Type: application/http\r\n\r\n" + strings.ReplaceAll(insert, "\n", "\r\n") + "\r\n"
	end := "--changeset_y--\r\n--batch_x--\r\n"
	raw("not multipart", "application/json", cs+part+end, nil, &parseErr{-1, azerr.InvalidInput})
	raw("no boundary", "multipart/mixed", cs+part+end, nil, &parseErr{-1, azerr.InvalidInput})
	raw("wrong boundary", "multipart/mixed; boundary=other", cs+part+end, nil, &parseErr{-1, azerr.InvalidInput})
	raw("empty body", "multipart/mixed; boundary=batch_x", "", nil, &parseErr{-1, azerr.InvalidInput})
	raw("part content-type missing", "multipart/mixed; boundary=batch_x",
		cs+"--changeset_y\r\n\r\n"+strings.ReplaceAll(insert, "\n", "\r\n")+"\r\n"+end, []op{ins}, nil)
	raw("part not application/http", "multipart/mixed; boundary=batch_x",
		cs+"--changeset_y\r\nContent-Type: text/plain\r\n\r\n"+strings.ReplaceAll(insert, "\n", "\r\n")+"\r\n"+end,
		nil, &parseErr{-1, azerr.InvalidInput})
	raw("base64 transfer encoding", "multipart/mixed; boundary=batch_x",
		cs+"--changeset_y\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: base64\r\n\r\nUE9TVA==\r\n"+end,
		nil, &parseErr{-1, azerr.InvalidInput})
	raw("changeset plus query", "multipart/mixed; boundary=batch_x",
		cs+part+"--changeset_y--\r\n--batch_x\r\nContent-Type: application/http\r\n\r\nGET /a/t1 HTTP/1.1\r\n\r\n--batch_x--\r\n",
		nil, &parseErr{-1, azerr.InvalidInput})
	raw("direct insert", "multipart/mixed; boundary=batch_x",
		"--batch_x\r\nContent-Type: application/http\r\n\r\n"+strings.ReplaceAll(insert, "\n", "\r\n")+"\r\n--batch_x--\r\n",
		nil, &parseErr{-1, azerr.InvalidInput})
	raw("direct get without content-type", "multipart/mixed; boundary=batch_x",
		"--batch_x\r\n\r\nGET /a/t1(PartitionKey='p',RowKey='r') HTTP/1.1\r\n\r\n--batch_x--",
		[]op{{method: "GET", path: "/a/t1(PartitionKey='p',RowKey='r')"}}, nil)
	raw("changeset without boundary", "multipart/mixed; boundary=batch_x",
		"--batch_x\r\nContent-Type: multipart/mixed\r\n\r\n"+part+end, nil, &parseErr{-1, azerr.InvalidInput})
	raw("close delimiter at eof", "multipart/mixed; boundary=batch_x", cs+part+"--changeset_y--\r\n--batch_x--", []op{ins}, nil)
	raw("boundary as prefix only", "multipart/mixed; boundary=batch_x", "--batch_xy\r\n"+cs+part+end, []op{ins}, nil)

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, err := batch.Parse(c.ct, c.body)
			retrieve := req != nil && req.Retrieve
			checkParse(t, req, err, c.ops, retrieve, c.err)
		})
	}
}

func TestParseOperationLimit(t *testing.T) {
	parts := make([]string, batch.MaxOperations+1)
	for i := range parts {
		parts[i] = insert
	}
	ct, body := build(parts[:batch.MaxOperations]...)
	req, err := batch.Parse(ct, body)
	if err != nil || len(req.Operations) != batch.MaxOperations {
		t.Fatalf("100 operations: %v", err)
	}
	ct, body = build(parts...)
	_, err = batch.Parse(ct, body)
	var oe *batch.OpError
	if !errors.As(err, &oe) || oe.Index != 0 || oe.Err.Code != azerr.InvalidInput || oe.Err.Status != http.StatusBadRequest ||
		oe.Err.Message != "The batch request operation exceeds the maximum 100 changes per change set." {
		t.Fatalf("101 operations: %#v", err)
	}
	if got := oe.Error(); !strings.HasPrefix(got, "0:InvalidInput: The batch request operation exceeds") {
		t.Errorf("OpError.Error() = %q", got)
	}
	// The limit is checked before the operations are parsed: a bad 101st op does not
	// change the answer.
	parts[batch.MaxOperations] = "garbage"
	ct, body = build(parts...)
	if _, err = batch.Parse(ct, body); !errors.As(err, &oe) || oe.Index != 0 {
		t.Fatalf("101 operations with garbage: %v", err)
	}
}

// Bounds that keep a 4 MiB body from exploding into millions of map entries.
func TestParseSubRequestLimits(t *testing.T) {
	hdrs := strings.Repeat("X-A: 1\n", 100)
	ct, body := build("POST /a/t1 HTTP/1.1\n" + hdrs + "\n{}")
	if _, err := batch.Parse(ct, body); err != nil {
		t.Fatalf("100 headers: %v", err)
	}
	ct, body = build("POST /a/t1 HTTP/1.1\n" + hdrs + "X-B: 2\n\n{}")
	if _, err := batch.Parse(ct, body); errCode(err) != azerr.InvalidInput {
		t.Fatalf("101 headers: %v", err)
	}
	q := strings.Repeat("a=1&", 63) + "a=1"
	ct, body = build("POST /a/t1?" + q + " HTTP/1.1\n\n{}")
	req, err := batch.Parse(ct, body)
	if err != nil || len(req.Operations[0].Query()["a"]) != 64 {
		t.Fatalf("64 query pairs: %v", err)
	}
	ct, body = build(insert, "POST /a/t1?"+q+"& HTTP/1.1\n\n{}")
	var oe *batch.OpError
	if _, err := batch.Parse(ct, body); !errors.As(err, &oe) || oe.Index != 1 || oe.Err.Code != azerr.InvalidQueryParameterValue {
		t.Fatalf("65 query pairs: %v", err)
	}
}

func TestParseChangesetBoundary(t *testing.T) {
	ct, body := build(insert)
	req, err := batch.Parse(ct, body)
	if err != nil {
		t.Fatal(err)
	}
	if req.ChangesetBoundary != "changeset_y" || req.Retrieve {
		t.Errorf("ChangesetBoundary %q Retrieve %v", req.ChangesetBoundary, req.Retrieve)
	}
	o := req.Operations[0]
	if o.URL.Host != "h" || o.URL.Scheme != "http" || o.Query() != nil {
		t.Errorf("URL %v Query %v", o.URL, o.Query())
	}
	if got := o.Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type %q", got)
	}
}
