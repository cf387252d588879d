package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
	"github.com/ceruleandb/cerulean/internal/table"
)

// bulkServer serves a fresh Pebble engine over HTTP with an elastic table "elastic" and a
// standard table "standard".
func bulkServer(t *testing.T, limits Limits) (*httptest.Server, *pebble.Engine) {
	t.Helper()
	eng, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	srv, err := New(Options{Engine: eng, Accounts: []auth.Account{auth.DevAccount()}, Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	ctx := t.Context()
	if err := eng.CreateTable(ctx, auth.DevAccountName, "elastic", storage.TableSettings{Elastic: true}); err != nil {
		t.Fatal(err)
	}
	if err := eng.CreateTable(ctx, auth.DevAccountName, "standard", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	return hs, eng
}

type bulkAnswer struct {
	Succeeded, Failed int
	Results           []struct {
		Index, Status int
		ETag          string
		Error         *struct{ Code, Message string }
	}
}

// postBulk sends a signed bulk request and decodes a 200 answer.
func postBulk(t *testing.T, hs *httptest.Server, tbl, body string) (*http.Response, []byte, bulkAnswer) {
	t.Helper()
	resp, b := do(t, signed(t, hs, http.MethodPost, "/"+tbl+"?comp=bulk", []byte(body)))
	var ans bulkAnswer
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &ans); err != nil {
			t.Fatalf("answer %s: %v", b, err)
		}
	}
	return resp, b, ans
}

func count(t *testing.T, eng *pebble.Engine, tbl string) int {
	t.Helper()
	res, err := eng.Scan(t.Context(), auth.DevAccountName, tbl, storage.ScanRequest{Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	return len(res.Records)
}

// TestBulkRequest: a bulk request with every op kind and per-item failures answers one
// result per operation, in order, with the ETag the entity now has, and a session token.
func TestBulkRequest(t *testing.T) {
	hs, eng := bulkServer(t, Limits{})
	ctx := t.Context()
	a, err := eng.Apply(ctx, auth.DevAccountName, "elastic", "p", []storage.Mutation{
		{Op: storage.Insert, RowKey: "old", Props: []entity.Property{{Name: "A", Value: entity.Int64Value(1)}}},
		{Op: storage.Insert, RowKey: "gone"},
		{Op: storage.Insert, RowKey: "m"},
	})
	if err != nil {
		t.Fatal(err)
	}
	etag := entity.ETag(a.Versions[2])
	ej, _ := json.Marshal(etag)
	body := `{"operations":[
		{"op":"insert","entity":{"PartitionKey":"p","RowKey":"new","N":5,"N@odata.type":"Edm.Int64","odata.etag":"ignored"}},
		{"op":"insert","entity":{"PartitionKey":"p","RowKey":"old"}},
		{"op":"merge","entity":{"PartitionKey":"p","RowKey":"m","B":"b"},"ifMatch":` + string(ej) + `},
		{"op":"update","entity":{"PartitionKey":"q","RowKey":"none"}},
		{"op":"upsert","entity":{"PartitionKey":"q","RowKey":"u1","X":1.5}},
		{"op":"upsertMerge","entity":{"PartitionKey":"q","RowKey":"u2"}},
		{"op":"delete","entity":{"PartitionKey":"p","RowKey":"gone"},"ifMatch":"*"},
		{"op":"delete","entity":{"PartitionKey":"p","RowKey":"never"}},
		{"op":"insert","entity":{"PartitionKey":"p"}},
		{"op":"insert","entity":{"PartitionKey":"p","RowKey":"bad","X@odata.type":"Edm.Int64","X":"x"}},
		{"op":"upsert","entity":{"PartitionKey":"p","RowKey":"new"}}
	]}`
	resp, raw, ans := postBulk(t, hs, "elastic", body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), raw)
	}
	if tok := resp.Header.Get("x-ms-session-token"); !strings.HasPrefix(tok, "1:pebble:") {
		t.Errorf("session token %q", tok)
	}
	want := []struct {
		status int
		code   string
	}{{201, ""}, {409, "EntityAlreadyExists"}, {204, ""}, {404, "ResourceNotFound"}, {204, ""}, {204, ""}, {204, ""},
		{404, "ResourceNotFound"}, {400, "PropertiesNeedValue"}, {400, "InvalidInput"}, {400, "InvalidDuplicateRow"}}
	if len(ans.Results) != len(want) || ans.Succeeded != 5 || ans.Failed != 6 {
		t.Fatalf("answer %s", raw)
	}
	for i, w := range want {
		r := ans.Results[i]
		code := ""
		if r.Error != nil {
			code = r.Error.Code
			if r.Error.Message == "" {
				t.Errorf("result %d: no message", i)
			}
		}
		if r.Index != i || r.Status != w.status || code != w.code {
			t.Errorf("result %d: %+v, want status %d code %q", i, r, w.status, w.code)
		}
		hasETag := r.ETag != ""
		if wantETag := r.Error == nil && w.status != 204 || i == 2 || i == 4 || i == 5; hasETag != wantETag {
			t.Errorf("result %d: etag %q", i, r.ETag)
		}
	}
	for i, key := range map[int][2]string{0: {"p", "new"}, 2: {"p", "m"}, 4: {"q", "u1"}} {
		rec, err := eng.Get(ctx, auth.DevAccountName, "elastic", key[0], key[1])
		if err != nil || entity.ETag(rec.Version) != ans.Results[i].ETag {
			t.Errorf("%v: %v, version %d vs reported %s", key, err, rec.Version, ans.Results[i].ETag)
		}
	}
	if _, err := eng.Get(ctx, auth.DevAccountName, "elastic", "p", "gone"); err == nil {
		t.Error("deleted entity still present")
	}
}

// errorWithoutVolatile strips the request id and time from an error body.
var volatileRE = regexp.MustCompile(`RequestId:[^\n<"]*|Time:[^\n<"]*`)

// TestBulkOnStandardTable: on a standard table ?comp=bulk gets exactly the answer of a
// comp value the service does not know, whatever the method and body.
func TestBulkOnStandardTable(t *testing.T) {
	hs, eng := bulkServer(t, Limits{})
	for _, method := range []string{http.MethodPost, http.MethodGet, http.MethodPut} {
		body := []byte(`{"operations":[{"op":"insert","entity":{"PartitionKey":"p","RowKey":"r"}}]}`)
		bulk, bb := do(t, signed(t, hs, method, "/standard?comp=bulk", body))
		other, ob := do(t, signed(t, hs, method, "/standard?comp=nosuch", body))
		if bulk.StatusCode != other.StatusCode || bulk.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: status %d, unknown comp %d", method, bulk.StatusCode, other.StatusCode)
		}
		for _, h := range []string{"Content-Type", "X-Ms-Error-Code", "Content-Length"} {
			if bulk.Header.Get(h) != other.Header.Get(h) {
				t.Errorf("%s: %s %q, unknown comp %q", method, h, bulk.Header.Get(h), other.Header.Get(h))
			}
		}
		if volatileRE.ReplaceAllString(string(bb), "") != volatileRE.ReplaceAllString(string(ob), "") {
			t.Errorf("%s: body\n%s\nunknown comp\n%s", method, bb, ob)
		}
		if bulk.Header.Get("X-Ms-Error-Code") != "InvalidQueryParameterValue" || !strings.HasPrefix(string(bb), "<?xml") {
			t.Errorf("%s: %s", method, bb)
		}
	}
	if n := count(t, eng, "standard"); n != 0 {
		t.Errorf("%d entities written to the standard table", n)
	}
	resp, b := do(t, signed(t, hs, http.MethodPost, "/nosuch?comp=bulk", []byte(`{"operations":[]}`)))
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("X-Ms-Error-Code") != "TableNotFound" {
		t.Errorf("missing table: %d %s", resp.StatusCode, b)
	}
	resp, b = do(t, signed(t, hs, http.MethodGet, "/elastic?comp=bulk", nil))
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET on an elastic table: %d %s", resp.StatusCode, b)
	}
}

// TestBulkMalformed: a body that is not a bulk request is refused whole with 400
// InvalidInput and nothing of it is written.
func TestBulkMalformed(t *testing.T) {
	hs, eng := bulkServer(t, Limits{})
	good := `{"op":"insert","entity":{"PartitionKey":"p","RowKey":"r"}}`
	many := strings.Repeat(`{"op":"upsert","entity":{"PartitionKey":"p","RowKey":"x"}},`, table.MaxBulkOperations)
	for name, body := range map[string]string{
		"empty":          ``,
		"not json":       `operations`,
		"truncated":      `{"operations":[` + good,
		"array":          `[` + good + `]`,
		"no operations":  `{}`,
		"null":           `{"operations":null}`,
		"not an array":   `{"operations":{}}`,
		"unknown member": `{"operations":[` + good + `],"atomic":true}`,
		"unknown op":     `{"operations":[` + good + `,{"op":"replace","entity":{"PartitionKey":"p","RowKey":"s"}}]}`,
		"op case":        `{"operations":[{"op":"Insert","entity":{"PartitionKey":"p","RowKey":"s"}}]}`,
		"no op":          `{"operations":[{"entity":{"PartitionKey":"p","RowKey":"s"}}]}`,
		"item member":    `{"operations":[{"op":"insert","entity":{"PartitionKey":"p","RowKey":"s"},"etag":"*"}]}`,
		"no entity":      `{"operations":[` + good + `,{"op":"insert"}]}`,
		"entity string":  `{"operations":[{"op":"insert","entity":"p,r"}]}`,
		"entity null":    `{"operations":[{"op":"insert","entity":null}]}`,
		"ifMatch insert": `{"operations":[{"op":"insert","entity":{"PartitionKey":"p","RowKey":"s"},"ifMatch":"*"}]}`,
		"ifMatch upsert": `{"operations":[{"op":"upsert","entity":{"PartitionKey":"p","RowKey":"s"},"ifMatch":"*"}]}`,
		"bad etag":       `{"operations":[{"op":"update","entity":{"PartitionKey":"p","RowKey":"s"},"ifMatch":"a, b"}]}`,
		"ifMatch number": `{"operations":[{"op":"update","entity":{"PartitionKey":"p","RowKey":"s"},"ifMatch":5}]}`,
		"trailing":       `{"operations":[` + good + `]} {}`,
		"too many":       `{"operations":[` + many + good + `]}`,
	} {
		resp, b, _ := postBulk(t, hs, "elastic", body)
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("X-Ms-Error-Code") != "InvalidInput" {
			t.Errorf("%s: %d %s", name, resp.StatusCode, b)
		}
	}
	if n := count(t, eng, "elastic"); n != 0 {
		t.Errorf("%d entities written by refused requests", n)
	}
	resp, b := do(t, func() *http.Request {
		r := signed(t, hs, http.MethodPost, "/elastic?comp=bulk", []byte(`<operations/>`))
		r.Header.Set("Content-Type", "application/xml")
		return r
	}())
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("XML body: %d %s", resp.StatusCode, b)
	}
}

// TestBulkBodyLimit: a body over the limit is 413 RequestBodyTooLarge, whether declared
// or discovered while reading, and the limit follows the body memory budget.
func TestBulkBodyLimit(t *testing.T) {
	hs, _ := bulkServer(t, Limits{MaxBodyMemory: 8 << 20})
	limit := 2 << 20 // a quarter of the budget
	item := `{"op":"upsert","entity":{"PartitionKey":"p","RowKey":"%d","S":"` + strings.Repeat("x", 900) + `"}},`
	var sb strings.Builder
	sb.WriteString(`{"operations":[`)
	for i := 0; sb.Len() < limit+100; i++ {
		fmt.Fprintf(&sb, item, i)
	}
	body := strings.TrimSuffix(sb.String(), ",") + "]}"
	resp, b, _ := postBulk(t, hs, "elastic", body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || resp.Header.Get("X-Ms-Error-Code") != "RequestBodyTooLarge" {
		t.Errorf("declared %d bytes: %d %.300s", len(body), resp.StatusCode, b)
	}
	// Chunked: the limit is found while reading.
	r := signed(t, hs, http.MethodPost, "/elastic?comp=bulk", nil)
	r.Body = io.NopCloser(strings.NewReader(body))
	r.ContentLength = -1
	resp, b = do(t, r)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked %d bytes: %d %.300s", len(body), resp.StatusCode, b)
	}
	// Just under the limit is accepted.
	var ok strings.Builder
	ok.WriteString(`{"operations":[`)
	for i := 0; ok.Len() < limit-2000; i++ {
		fmt.Fprintf(&ok, item, i)
	}
	resp, b, ans := postBulk(t, hs, "elastic", strings.TrimSuffix(ok.String(), ",")+"]}")
	if resp.StatusCode != http.StatusOK || ans.Failed != 0 {
		t.Errorf("%d bytes: %d %.300s", ok.Len(), resp.StatusCode, b)
	}
}

// TestOverLimitBodySentWhole: a client that sends its whole body before it reads the
// answer (as Python's http.client and curl do) reads 413 RequestBodyTooLarge for a body
// over the limit, declared or chunked, rather than a broken pipe or a reset: the server
// reads the rest of the body (up to drainMax) before it answers and closes. Without that
// the server closed the connection with the body unread, which resets it: the client,
// still writing its last 64 KiB a second later, failed with a broken pipe (as
// TestBulkBodyLimit's Go client once did on a loaded machine).
func TestOverLimitBodySentWhole(t *testing.T) {
	hs, _ := bulkServer(t, Limits{MaxBodyMemory: 8 << 20})
	limit := 2 << 20
	item := `{"op":"upsert","entity":{"PartitionKey":"p","RowKey":"%d","S":"` + strings.Repeat("x", 900) + `"}},`
	var sb strings.Builder
	sb.WriteString(`{"operations":[`)
	for i := 0; sb.Len() < limit+(1<<20); i++ {
		fmt.Fprintf(&sb, item, i)
	}
	body := strings.TrimSuffix(sb.String(), ",") + "]}"
	for _, chunked := range []bool{false, true} {
		r := signed(t, hs, http.MethodPost, "/elastic?comp=bulk", nil)
		r.Header.Set("Content-Type", "application/json")
		// The last 64 KiB go a second later, past the half second net/http lingers
		// before it closes a connection whose body was left unread.
		head, tail := body[:len(body)-64<<10], body[len(body)-64<<10:]
		r.Body = io.NopCloser(io.MultiReader(strings.NewReader(head), pause{time.Second}, strings.NewReader(tail)))
		r.ContentLength = int64(len(body))
		if chunked {
			r.ContentLength = -1
		}
		conn, err := net.Dial("tcp", hs.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		if err := r.Write(conn); err != nil {
			t.Errorf("chunked=%v: sending %d bytes: %v", chunked, len(body), err)
			conn.Close()
			continue
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), r)
		if err != nil {
			t.Errorf("chunked=%v: %v", chunked, err)
		} else if resp.StatusCode != http.StatusRequestEntityTooLarge || resp.Header.Get("X-Ms-Error-Code") != "RequestBodyTooLarge" {
			t.Errorf("chunked=%v: %d %s", chunked, resp.StatusCode, resp.Header.Get("X-Ms-Error-Code"))
		}
		conn.Close()
	}

	// A client that waits for 100 Continue before it sends a declared body is refused at
	// once: it sends nothing, and the answer comes without the body.
	r := signed(t, hs, http.MethodPost, "/elastic?comp=bulk", nil)
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Expect", "100-continue")
	r.ContentLength = int64(len(body))
	conn, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", r.URL.RequestURI(), r.Host, len(body))
	if err := r.Header.Write(conn); err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(conn, "\r\n")
	start := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(conn), r)
	if err != nil {
		t.Fatalf("100-continue: %v", err)
	}
	if resp.StatusCode != http.StatusRequestEntityTooLarge || time.Since(start) > 5*time.Second {
		t.Errorf("100-continue: %d after %v", resp.StatusCode, time.Since(start))
	}
}

// pause is an empty reader that takes its time.
type pause struct{ d time.Duration }

func (p pause) Read([]byte) (int, error) {
	time.Sleep(p.d)
	return 0, io.EOF
}

// TestBulkSAS: a SAS allows in bulk what it allows one entity at a time, item by item;
// on a standard table a SAS request is refused as an unknown comp's is.
func TestBulkSAS(t *testing.T) {
	hs, _ := bulkServer(t, Limits{})
	acct := auth.DevAccount()
	sasFor := func(tn, tbl, perms string) string {
		sas := &auth.SAS{Version: "2019-02-02", Permissions: perms, Expiry: time.Now().Add(time.Hour).UTC().Format("2006-01-02T15:04:05Z"),
			TableName: tn, StartPK: "a", EndPK: "m"}
		q := url.Values{"sv": {sas.Version}, "sp": {sas.Permissions}, "se": {sas.Expiry}, "tn": {sas.TableName},
			"spk": {"a"}, "epk": {"m"}, "sig": {auth.Sign(acct.Keys[0], sas.StringToSign(acct.Name))}, "comp": {"bulk"}}
		return hs.URL + "/" + acct.Name + "/" + tbl + "?" + q.Encode()
	}
	sasURL := func(tbl, perms string) string { return sasFor(tbl, tbl, perms) }
	post := func(u, body string) (*http.Response, []byte) {
		r, err := http.NewRequest(http.MethodPost, u, bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("x-ms-version", "2019-02-02")
		return do(t, r)
	}
	resp, b := post(sasURL("elastic", "a"), `{"operations":[
		{"op":"insert","entity":{"PartitionKey":"b","RowKey":"1"}},
		{"op":"insert","entity":{"PartitionKey":"z","RowKey":"1"}},
		{"op":"upsert","entity":{"PartitionKey":"b","RowKey":"2"}},
		{"op":"delete","entity":{"PartitionKey":"b","RowKey":"1"}}]}`)
	var ans bulkAnswer
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &ans) != nil {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	codes := []string{}
	for _, r := range ans.Results {
		c := ""
		if r.Error != nil {
			c = r.Error.Code
		}
		codes = append(codes, c)
	}
	if strings.Join(codes, ",") != ",AuthorizationFailure,AuthorizationPermissionMismatch,AuthorizationPermissionMismatch" {
		t.Errorf("codes %v: %s", codes, b)
	}
	resp, b = post(sasFor("other", "elastic", "a"), `{"operations":[]}`)
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("SAS for another table: %d %s", resp.StatusCode, b)
	}
	bulk, bb := post(sasURL("standard", "raud"), `{"operations":[]}`)
	other, ob := post(strings.Replace(sasURL("standard", "raud"), "comp=bulk", "comp=nosuch", 1), `{"operations":[]}`)
	if bulk.StatusCode != other.StatusCode || volatileRE.ReplaceAllString(string(bb), "") != volatileRE.ReplaceAllString(string(ob), "") {
		t.Errorf("standard table with a SAS: %d %s\nunknown comp: %d %s", bulk.StatusCode, bb, other.StatusCode, ob)
	}
}

// BenchmarkBulkRequest measures one bulk request of 10,000 inserts of about 1 KiB over
// 100 partitions (12 MB) through ServeHTTP (no network), and reports entities/s and the
// process's CPU time per entity: onto Pebble (pebble), and with the engine's writes
// answered without being made (noengine), which leaves the server's own work (reading,
// decoding, grouping, answering):
//
//	go test ./server -run '^$' -bench BulkRequest -benchtime 10x -count 5
func BenchmarkBulkRequest(b *testing.B) {
	for _, name := range []string{"pebble", "noengine"} {
		b.Run(name, func(b *testing.B) {
			eng, err := pebble.Open(b.TempDir(), pebble.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer eng.Close()
			var e storage.Engine = eng
			if name == "noengine" {
				e = nowhere{eng}
			}
			srv, err := New(Options{Engine: e, Accounts: []auth.Account{auth.DevAccount()}})
			if err != nil {
				b.Fatal(err)
			}
			if err := eng.CreateTable(b.Context(), auth.DevAccountName, "elastic", storage.TableSettings{Elastic: true}); err != nil {
				b.Fatal(err)
			}
			// One body, whose row keys start with the iteration's number (marks) so that
			// every iteration inserts new entities.
			payload := strings.Repeat("abcdefghij", 100)
			const n = 10_000
			var sb strings.Builder
			var marks []int
			sb.WriteString(`{"operations":[`)
			for j := range n {
				if j > 0 {
					sb.WriteByte(',')
				}
				fmt.Fprintf(&sb, `{"op":"insert","entity":{"PartitionKey":"p%03d","RowKey":"`, j/100)
				marks = append(marks, sb.Len())
				fmt.Fprintf(&sb, `000000-%05d","Payload":"%s","N@odata.type":"Edm.Int64","N":"%d","F":1.5}}`, j, payload, j)
			}
			sb.WriteString(`]}`)
			body := []byte(sb.String())
			var w discardWriter
			b.SetBytes(int64(len(body)))
			b.ResetTimer()
			cpu := startCPU(b)
			for i := range b.N {
				num := fmt.Sprintf("%06d", i)
				for _, m := range marks {
					copy(body[m:], num)
				}
				r := httptest.NewRequest(http.MethodPost, "/devstoreaccount1/elastic?comp=bulk", bytes.NewReader(body))
				r.Host = "127.0.0.1:10002"
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set("x-ms-version", "2019-02-02")
				auth.SignRequest(r, auth.SchemeSharedKeyLite, auth.DevAccountName, auth.DevAccount().Keys[0], time.Now())
				w.reset()
				srv.ServeHTTP(&w, r)
				if w.code != http.StatusOK {
					b.Fatalf("answered %d", w.code)
				}
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "entities/s")
			cpu.report(n)
		})
	}
}

// nowhere answers every write as made, without making it.
type nowhere struct{ storage.Engine }

func (nowhere) ApplyEach(_ context.Context, _, _, _ string, muts []storage.Mutation) (storage.Each, error) {
	return storage.Each{Versions: make([]int64, len(muts)), Errs: make([]error, len(muts)), Position: 1}, nil
}

// TestBulkAnswerEncoding: the answer, written piece by piece, is byte for byte what
// encoding/json makes of it, whatever the messages hold (quotes, HTML characters,
// control characters, invalid UTF-8, U+2028), and its announced length is its length.
func TestBulkAnswerEncoding(t *testing.T) {
	type errJSON struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	type resultJSON struct {
		Index  int      `json:"index"`
		Status int      `json:"status"`
		ETag   string   `json:"etag,omitempty"`
		Error  *errJSON `json:"error,omitempty"`
	}
	msgs := []string{"plain", `"quoted" \ back`, "<b>&amp;</b>", "tab\there\nnew\rline\b\f\x01\x1f", "bad \xff\xfe utf-8", "line\u2028sep\u2029", "été 日本 😀", ""}
	for i, m := range msgs {
		items := []table.BulkItem{
			{Version: 638_700_000_000_000_000},
			{Err: azerr.Newf(azerr.InvalidInput, "%s", m).WithDetail(m)},
			{Err: azerr.Newf(azerr.ResourceNotFound, "%s", m)},
			{Version: 1},
		}
		ops := []storage.Op{storage.Insert, storage.Merge, storage.Delete, storage.Delete}
		var got []byte
		var want []resultJSON
		for j := range items {
			got = appendBulkResult(got, j, &items[j], ops[j])
			r := resultJSON{Index: j}
			switch it := &items[j]; {
			case it.Err != nil:
				msg := it.Err.Message
				if it.Err.Detail != "" {
					msg += " " + it.Err.Detail
				}
				r.Status, r.Error = it.Err.Status, &errJSON{string(it.Err.Code), msg}
			case ops[j] == storage.Insert:
				r.Status, r.ETag = 201, entity.ETag(it.Version)
			case ops[j] == storage.Delete:
				r.Status = 204
			default:
				r.Status, r.ETag = 204, entity.ETag(it.Version)
			}
			want = append(want, r)
		}
		w, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if "["+string(got)+"]" != string(w) {
			t.Errorf("message %d:\n got [%s]\nwant %s", i, got, w)
		}
	}
}

// TestBulkBodyAtLimit: a body of exactly the limit (a quarter of the budget, all that one
// client may hold of large bodies, and a whole number of chunks) is applied, declared or
// chunked; a byte more is 413.
func TestBulkBodyAtLimit(t *testing.T) {
	hs, _ := bulkServer(t, Limits{MaxBodyMemory: 8 << 20})
	limit := 2 << 20
	item := `{"op":"upsert","entity":{"PartitionKey":"p","RowKey":"%d","S":"` + strings.Repeat("x", 900) + `"}}`
	var sb strings.Builder
	sb.WriteString(`{"operations":[`)
	for i := 0; sb.Len() < limit-2000; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, item, i)
	}
	sb.WriteString("]}")
	body := sb.String() + strings.Repeat(" ", limit-sb.Len())
	for _, chunked := range []bool{false, true} {
		for _, b := range []string{body, body + " "} {
			r := signed(t, hs, http.MethodPost, "/elastic?comp=bulk", []byte(b))
			if chunked {
				r.Body = io.NopCloser(strings.NewReader(b))
				r.ContentLength = -1
			}
			resp, out := do(t, r)
			want := http.StatusOK
			if len(b) > limit {
				want = http.StatusRequestEntityTooLarge
			}
			if resp.StatusCode != want || want == http.StatusOK && !strings.Contains(string(out[:min(len(out), 100)]), `"failed":0`) {
				t.Errorf("%d bytes, chunked %v: %d %.300s", len(b), chunked, resp.StatusCode, out)
			}
		}
	}
}
