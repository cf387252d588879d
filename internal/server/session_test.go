package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
	"github.com/ceruleandb/cerulean/internal/svcprops"
	"github.com/ceruleandb/cerulean/internal/table"
)

// Session tokens over HTTP (docs/compatibility.md "Session tokens"), on the real Pebble engine.

// sessionServer serves a fresh Pebble engine over HTTP with one table, "tbl". Its wait
// for a future position is short: the tests send many.
func sessionServer(t *testing.T) (*httptest.Server, *pebble.Engine) {
	t.Helper()
	eng, err := pebble.Open(t.TempDir(), pebble.Options{PositionWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	srv, err := New(Options{Engine: eng, Accounts: []auth.Account{auth.DevAccount()}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	if err := srv.tables.CreateTable(t.Context(), auth.DevAccountName, "tbl", nil); err != nil {
		t.Fatal(err)
	}
	return hs, eng
}

// tokenOf parses a response's x-ms-session-token; it fails the test if there is none.
func tokenOf(t *testing.T, what string, h http.Header) storage.Position {
	t.Helper()
	vs := h.Values("x-ms-session-token")
	if len(vs) != 1 {
		t.Fatalf("%s: x-ms-session-token %q, want one token", what, vs)
	}
	p, err := table.ParseToken("pebble", "x-ms-session-token", vs[0])
	if err != nil || vs[0] != table.FormatToken("pebble", p) {
		t.Fatalf("%s: token %q: %v", what, vs[0], err)
	}
	return p
}

// errorCode is the x-ms-error-code of a response and the HeaderName its body reports.
func errorCode(t *testing.T, resp *http.Response, body []byte) (code, headerName string) {
	t.Helper()
	var e map[string]json.RawMessage
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("error body %s: %v", body, err)
	}
	var o struct {
		HeaderName string
	}
	_ = json.Unmarshal(e["odata.error"], &o)
	return resp.Header.Get("X-Ms-Error-Code"), o.HeaderName
}

// TestSessionTokenOnEveryWrite: each kind of successful entity write answers a token,
// later writes answer larger ones, and a failed write answers none.
func TestSessionTokenOnEveryWrite(t *testing.T) {
	hs, _ := sessionServer(t)
	const path = "/tbl(PartitionKey='p',RowKey='r')"
	body := []byte(`{"PartitionKey":"p","RowKey":"r","N":1}`)
	steps := []struct {
		what, method, path string
		header             map[string]string
		status             int
	}{
		{"insert", "POST", "/tbl", nil, 201},
		{"upsert replace", "PUT", path, nil, 204},
		{"upsert merge", "MERGE", path, nil, 204},
		{"update", "PUT", path, map[string]string{"If-Match": "*"}, 204},
		{"merge", "MERGE", path, map[string]string{"If-Match": "*"}, 204},
		{"patch merge", "PATCH", path, map[string]string{"If-Match": "*"}, 204},
		{"patch upsert", "PATCH", path, nil, 204},
		{"tunnelled merge", "POST", path, map[string]string{"X-HTTP-Method": "MERGE", "If-Match": "*"}, 204},
		{"delete", "DELETE", path, map[string]string{"If-Match": "*"}, 204},
		{"insert no-content", "POST", "/tbl", map[string]string{"Prefer": "return-no-content"}, 204},
		{"tunnelled delete", "POST", path, map[string]string{"X-HTTP-Method": "DELETE", "If-Match": "*"}, 204},
	}
	var last storage.Position
	for _, st := range steps {
		var b []byte
		if !strings.Contains(st.what, "delete") {
			b = body
		}
		r := signed(t, hs, st.method, st.path, b)
		for k, v := range st.header {
			r.Header.Set(k, v)
		}
		resp, rb := do(t, r)
		if resp.StatusCode != st.status {
			t.Fatalf("%s: %d %s", st.what, resp.StatusCode, rb)
		}
		p := tokenOf(t, st.what, resp.Header)
		if p <= last {
			t.Fatalf("%s: position %d after %d", st.what, p, last)
		}
		last = p
	}
	// Failures answer no token: the conflict, the failed precondition, the missing entity.
	resp, _ := do(t, signed(t, hs, "POST", "/tbl", body))
	resp2, _ := do(t, signed(t, hs, "POST", "/tbl", body))
	r := signed(t, hs, "PUT", path, body)
	r.Header.Set("If-Match", `W/"datetime'2000-01-01T00%3A00%3A00Z'"`)
	resp3, _ := do(t, r)
	r = signed(t, hs, "DELETE", "/tbl(PartitionKey='p',RowKey='none')", nil)
	r.Header.Set("If-Match", "*")
	resp4, _ := do(t, r)
	if resp.StatusCode != 201 || resp2.StatusCode != 409 || resp3.StatusCode != 412 || resp4.StatusCode != 404 {
		t.Fatalf("setup of failures: %d %d %d %d", resp.StatusCode, resp2.StatusCode, resp3.StatusCode, resp4.StatusCode)
	}
	for _, rs := range []*http.Response{resp2, resp3, resp4} {
		if v := rs.Header.Values("x-ms-session-token"); v != nil {
			t.Errorf("a %d answers x-ms-session-token %q", rs.StatusCode, v)
		}
	}
}

// batchBody is a $batch with one changeset of the given operations (method, path after
// the account, JSON body or ""); deletes carry If-Match: *, the others no condition.
func batchBody(ops [][3]string) (contentType string, body []byte) {
	var b bytes.Buffer
	b.WriteString("--batch_b\r\nContent-Type: multipart/mixed; boundary=changeset_c\r\n\r\n")
	for _, op := range ops {
		b.WriteString("--changeset_c\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n")
		fmt.Fprintf(&b, "%s http://127.0.0.1/%s%s HTTP/1.1\r\nAccept: application/json;odata=minimalmetadata\r\n", op[0], auth.DevAccountName, op[1])
		if op[0] == "DELETE" {
			b.WriteString("If-Match: *\r\n")
		}
		if op[2] != "" {
			b.WriteString("Content-Type: application/json\r\n\r\n" + op[2] + "\r\n")
		} else {
			b.WriteString("\r\n")
		}
	}
	b.WriteString("--changeset_c--\r\n--batch_b--\r\n")
	return "multipart/mixed; boundary=batch_b", b.Bytes()
}

// batchParts reads a $batch response's changeset parts as HTTP responses.
func batchParts(t *testing.T, resp *http.Response, body []byte) []*http.Response {
	t.Helper()
	_, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil {
		t.Fatal(err)
	}
	outer := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	cs, err := outer.NextPart()
	if err != nil {
		t.Fatal(err)
	}
	_, params, err = mime.ParseMediaType(cs.Header.Get("Content-Type"))
	if err != nil {
		t.Fatal(err)
	}
	inner := multipart.NewReader(cs, params["boundary"])
	var out []*http.Response
	for {
		p, err := inner.NextPart()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		r, err := http.ReadResponse(bufio.NewReader(p), nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
}

// TestSessionTokenOnBatch: a committed $batch answers its one commit's token on the
// response and on every changeset part; a failed one answers none.
func TestSessionTokenOnBatch(t *testing.T) {
	hs, _ := sessionServer(t)
	ins := signed(t, hs, "POST", "/tbl", []byte(`{"PartitionKey":"b","RowKey":"0"}`))
	resp, _ := do(t, ins)
	before := tokenOf(t, "insert", resp.Header)

	ct, body := batchBody([][3]string{
		{"POST", "/tbl", `{"PartitionKey":"b","RowKey":"1"}`},
		{"PUT", "/tbl(PartitionKey='b',RowKey='2')", `{"N":2}`},
		{"MERGE", "/tbl(PartitionKey='b',RowKey='3')", `{"N":3}`},
		{"DELETE", "/tbl(PartitionKey='b',RowKey='0')", ""},
	})
	r := signed(t, hs, "POST", "/$batch", body)
	r.Header.Set("Content-Type", ct)
	resp, rb := do(t, r)
	if resp.StatusCode != 202 {
		t.Fatalf("batch: %d %s", resp.StatusCode, rb)
	}
	p := tokenOf(t, "batch", resp.Header)
	if p <= before {
		t.Fatalf("batch position %d after %d", p, before)
	}
	parts := batchParts(t, resp, rb)
	if len(parts) != 4 {
		t.Fatalf("%d parts", len(parts))
	}
	for i, part := range parts {
		if part.StatusCode >= 300 || tokenOf(t, fmt.Sprintf("part %d", i), part.Header) != p {
			t.Errorf("part %d: %d, token %q; want the batch's %d", i, part.StatusCode, part.Header.Get("x-ms-session-token"), p)
		}
	}

	// A batch that fails (the insert conflicts) commits nothing and answers no token.
	ct, body = batchBody([][3]string{{"POST", "/tbl", `{"PartitionKey":"b","RowKey":"1"}`}})
	r = signed(t, hs, "POST", "/$batch", body)
	r.Header.Set("Content-Type", ct)
	resp, rb = do(t, r)
	if resp.StatusCode != 202 || !strings.Contains(string(rb), "EntityAlreadyExists") {
		t.Fatalf("failing batch: %d %s", resp.StatusCode, rb)
	}
	if v := resp.Header.Values("x-ms-session-token"); v != nil || strings.Contains(strings.ToLower(string(rb)), "x-ms-session-token") {
		t.Errorf("a failed batch answers a token: %q", v)
	}
}

// TestSessionTokenOnReads: reads accept a token in either header (lists and both headers:
// the newest counts), refuse a malformed one with 400 naming the header, and answer one
// from the future with 503 ServerBusy and Retry-After; without a token nothing changes.
func TestSessionTokenOnReads(t *testing.T) {
	hs, _ := sessionServer(t)
	resp, rb := do(t, signed(t, hs, "POST", "/tbl", []byte(`{"PartitionKey":"p","RowKey":"r"}`)))
	if resp.StatusCode != 201 {
		t.Fatalf("insert: %d %s", resp.StatusCode, rb)
	}
	p := tokenOf(t, "insert", resp.Header)
	tok := table.FormatToken("pebble", p)
	future := table.FormatToken("pebble", p+1_000_000)
	reads := map[string]string{
		"get":   "/tbl(PartitionKey='p',RowKey='r')",
		"query": "/tbl()",
		"point": "/tbl()?$filter=" + url.QueryEscape("PartitionKey eq 'p' and RowKey eq 'r'"),
	}
	for name, path := range reads {
		read := func(h map[string][]string) (*http.Response, []byte) {
			r := signed(t, hs, "GET", path, nil)
			for k, vs := range h {
				for _, v := range vs {
					r.Header.Add(k, v)
				}
			}
			return do(t, r)
		}
		plain, plainBody := read(nil)
		if plain.StatusCode != 200 || !strings.Contains(string(plainBody), `"RowKey":"r"`) {
			t.Fatalf("%s without a token: %d %s", name, plain.StatusCode, plainBody)
		}
		for _, h := range []map[string][]string{
			{"x-ms-session-token": {tok}},
			{"MSCRM.SessionToken": {tok}},
			{"x-ms-session-token": {"1:pebble:0, " + tok}},
			{"x-ms-session-token": {"1:pebble:1", tok}},
			{"x-ms-session-token": {tok}, "MSCRM.SessionToken": {"1:pebble:0"}},
			{"x-ms-session-token": {""}},
		} {
			resp, body := read(h)
			if resp.StatusCode != 200 || !bytes.Equal(body, plainBody) {
				t.Errorf("%s with %v: %d %s", name, h, resp.StatusCode, body)
			}
		}
		for _, h := range []map[string][]string{
			{"x-ms-session-token": {"nonsense"}},
			{"x-ms-session-token": {tok + ",1:pebble:x"}},
			{"x-ms-session-token": {"1:postgres:1"}},
			{"MSCRM.SessionToken": {"0:-2#17"}},
			{"x-ms-session-token": {tok}, "MSCRM.SessionToken": {"bad"}},
		} {
			resp, body := read(h)
			var want string
			for k := range h {
				if _, err := table.ParseToken("pebble", k, h[k][0]); err != nil {
					want = k
				}
			}
			code, named := errorCode(t, resp, body)
			if resp.StatusCode != 400 || code != "InvalidHeaderValue" || named != want || !strings.Contains(string(body), want+" header is not valid") {
				t.Errorf("%s with %v: %d %s, want 400 InvalidHeaderValue naming %s", name, h, resp.StatusCode, body, want)
			}
		}
		for _, h := range []map[string][]string{
			{"x-ms-session-token": {future}},
			{"MSCRM.SessionToken": {future}},
			{"x-ms-session-token": {tok}, "MSCRM.SessionToken": {future}},
			{"x-ms-session-token": {tok + "," + future}},
		} {
			start := time.Now()
			resp, body := read(h)
			code, _ := errorCode(t, resp, body)
			if resp.StatusCode != 503 || code != "ServerBusy" || resp.Header.Get("Retry-After") == "" ||
				!strings.Contains(string(body), "session token is ahead") {
				t.Errorf("%s with %v: %d Retry-After=%q %s, want 503 ServerBusy with Retry-After", name, h, resp.StatusCode, resp.Header.Get("Retry-After"), body)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("%s with a future token took %v", name, d)
			}
		}
	}
}

// TestSessionTokenBatchRetrieve: a $batch holding one GET honours a token on its part or
// on the $batch request.
func TestSessionTokenBatchRetrieve(t *testing.T) {
	hs, _ := sessionServer(t)
	resp, _ := do(t, signed(t, hs, "POST", "/tbl", []byte(`{"PartitionKey":"p","RowKey":"r"}`)))
	p := tokenOf(t, "insert", resp.Header)
	retrieve := func(partToken, outerToken string) (*http.Response, []byte) {
		var b bytes.Buffer
		b.WriteString("--batch_b\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n")
		fmt.Fprintf(&b, "GET http://127.0.0.1/%s/tbl(PartitionKey='p',RowKey='r') HTTP/1.1\r\nAccept: application/json;odata=minimalmetadata\r\n", auth.DevAccountName)
		if partToken != "" {
			b.WriteString("x-ms-session-token: " + partToken + "\r\n")
		}
		b.WriteString("\r\n--batch_b--\r\n")
		r := signed(t, hs, "POST", "/$batch", b.Bytes())
		r.Header.Set("Content-Type", "multipart/mixed; boundary=batch_b")
		if outerToken != "" {
			r.Header.Set("x-ms-session-token", outerToken)
		}
		return do(t, r)
	}
	future := table.FormatToken("pebble", p+1_000_000)
	for _, tc := range []struct {
		part, outer string
		want        string
	}{
		{"", "", "200 OK"},
		{table.FormatToken("pebble", p), "", "200 OK"},
		{"", table.FormatToken("pebble", p), "200 OK"},
		{future, "", "503"},
		{"", future, "503"},
		{"bad", "", "400"},
	} {
		resp, body := retrieve(tc.part, tc.outer)
		if resp.StatusCode != 202 || !strings.Contains(string(body), "HTTP/1.1 "+tc.want) {
			t.Errorf("retrieve with part token %q, batch token %q: %d %s; want a %s part", tc.part, tc.outer, resp.StatusCode, body, tc.want)
		}
	}
}

// TestSessionTokenCORS: a browser can read the token: a response to a request whose CORS
// rule matched exposes x-ms-session-token beside what the rule exposes, once.
func TestSessionTokenCORS(t *testing.T) {
	hs, eng := sessionServer(t)
	setRule := func(exposed ...string) {
		p := svcprops.DefaultProperties()
		p.Cors = []svcprops.CorsRule{{AllowedOrigins: []string{"http://app.example"}, AllowedMethods: []string{"GET", "POST", "PUT", "MERGE", "DELETE"},
			AllowedHeaders: []string{"*"}, ExposedHeaders: exposed}}
		if err := eng.SetServiceProperties(t.Context(), auth.DevAccountName, svcprops.MarshalProperties(p)); err != nil {
			t.Fatal(err)
		}
	}
	write := func(origin string) http.Header {
		r := signed(t, hs, "PUT", "/tbl(PartitionKey='p',RowKey='r')", []byte(`{}`))
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		resp, body := do(t, r)
		if resp.StatusCode != 204 {
			t.Fatalf("write: %d %s", resp.StatusCode, body)
		}
		return resp.Header
	}
	for _, tc := range []struct {
		exposed []string
		want    string
	}{
		{nil, "x-ms-session-token"},
		{[]string{"x-ms-request-id"}, "x-ms-request-id,x-ms-session-token"},
		{[]string{"X-MS-Session-Token", "etag"}, "X-MS-Session-Token,etag"},
		{[]string{"*"}, "*,x-ms-session-token"}, // "*" is no wildcard on credentialed requests
	} {
		setRule(tc.exposed...)
		if got := write("http://app.example").Get("Access-Control-Expose-Headers"); got != tc.want {
			t.Errorf("rule exposing %q: Access-Control-Expose-Headers %q, want %q", tc.exposed, got, tc.want)
		}
	}
	for _, origin := range []string{"", "http://other.example"} {
		if h := write(origin); h.Get("Access-Control-Expose-Headers") != "" {
			t.Errorf("origin %q: Access-Control-Expose-Headers %q, want none", origin, h.Get("Access-Control-Expose-Headers"))
		}
	}
}

// TestSessionTokenAuthorization: a token changes nothing about who may do what: a caller
// that does not authenticate is refused as without one (not with a 400 for a bad token),
// and a SAS that may not read cannot read with a token its writes earned.
func TestSessionTokenAuthorization(t *testing.T) {
	hs, _ := sessionServer(t)
	r, _ := http.NewRequest("GET", hs.URL+"/"+auth.DevAccountName+"/tbl()", nil)
	r.Header.Set("x-ms-session-token", "nonsense")
	resp, body := do(t, r)
	if code, _ := errorCode(t, resp, body); resp.StatusCode != 401 || code != "NoAuthenticationInformation" {
		t.Errorf("unauthenticated read with a bad token: %d %s, want 401 NoAuthenticationInformation", resp.StatusCode, body)
	}

	sas := func(perm string) string {
		s := &auth.SAS{Version: "2019-02-02", Permissions: perm, Expiry: time.Now().Add(time.Hour).UTC().Format("2006-01-02T15:04:05Z"), TableName: "tbl"}
		acct := auth.DevAccount()
		return url.Values{"sv": {s.Version}, "sp": {s.Permissions}, "se": {s.Expiry}, "tn": {s.TableName},
			"sig": {auth.Sign(acct.Keys[0], s.StringToSign(acct.Name))}}.Encode()
	}
	addOnly, readOnly := sas("a"), sas("r")
	r, _ = http.NewRequest("POST", hs.URL+"/"+auth.DevAccountName+"/tbl?"+addOnly, strings.NewReader(`{"PartitionKey":"p","RowKey":"s"}`))
	r.Header.Set("Content-Type", "application/json")
	resp, body = do(t, r)
	if resp.StatusCode != 201 {
		t.Fatalf("insert with an add SAS: %d %s", resp.StatusCode, body)
	}
	tok := resp.Header.Get("x-ms-session-token")
	tokenOf(t, "insert with a SAS", resp.Header)
	for _, tc := range []struct {
		sas    string
		status int
	}{{addOnly, 403}, {readOnly, 200}} {
		r, _ = http.NewRequest("GET", hs.URL+"/"+auth.DevAccountName+"/tbl(PartitionKey='p',RowKey='s')?"+tc.sas, nil)
		r.Header.Set("Accept", "application/json;odata=nometadata")
		r.Header.Set("x-ms-session-token", tok)
		resp, body = do(t, r)
		if resp.StatusCode != tc.status {
			t.Errorf("read with a token and SAS %s: %d %s, want %d", tc.sas, resp.StatusCode, body, tc.status)
		}
	}
}
