package batch_test

import (
	"bytes"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/batch"
)

var uuidRe = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}`)

// normalize replaces the random UUIDs by U1, U2... in order of first appearance.
func normalize(b []byte) string {
	seen := map[string]string{}
	return uuidRe.ReplaceAllStringFunc(string(b), func(u string) string {
		if _, ok := seen[u]; !ok {
			seen[u] = "U" + strconv.Itoa(len(seen)+1)
		}
		return seen[u]
	})
}

func insertResult(rk string, cid string) batch.Result {
	loc := "http://127.0.0.1:10002/devstoreaccount1/t1(PartitionKey='p',RowKey='" + rk + "')"
	return batch.Result{Status: 204, ContentID: cid, Header: http.Header{
		"Preference-Applied": {"return-no-content"},
		"Location":           {loc},
		"DataServiceId":      {loc}, // non-canonical key on purpose
		"Etag":               {testETag},
	}}
}

// The exact bytes of a success response (UUIDs aside): docs/protocol.md §6.3, plus the blank
// line after each sub-response's headers that http.ReadResponse needs.
func TestWriteResponseGolden(t *testing.T) {
	var buf bytes.Buffer
	ct, err := batch.WriteResponse(&buf, []batch.Result{
		insertResult("1", "1"),
		{Status: 204, ContentID: "2"},                          // a delete
		{Status: 204, Header: http.Header{"ETag": {testETag}}}, // a merge, no Content-ID
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "--batchresponse_U1\r\n" +
		"Content-Type: multipart/mixed; boundary=changesetresponse_U2\r\n" +
		"\r\n" +
		"--changesetresponse_U2\r\n" +
		"Content-Type: application/http\r\n" +
		"Content-Transfer-Encoding: binary\r\n" +
		"\r\n" +
		"HTTP/1.1 204 No Content\r\n" +
		"Content-ID: 1\r\n" +
		"X-Content-Type-Options: nosniff\r\n" +
		"Cache-Control: no-cache\r\n" +
		"Preference-Applied: return-no-content\r\n" +
		"DataServiceVersion: 3.0;\r\n" +
		"Location: http://127.0.0.1:10002/devstoreaccount1/t1(PartitionKey='p',RowKey='1')\r\n" +
		"DataServiceId: http://127.0.0.1:10002/devstoreaccount1/t1(PartitionKey='p',RowKey='1')\r\n" +
		"ETag: " + testETag + "\r\n" +
		"\r\n" +
		"\r\n" +
		"--changesetresponse_U2\r\n" +
		"Content-Type: application/http\r\n" +
		"Content-Transfer-Encoding: binary\r\n" +
		"\r\n" +
		"HTTP/1.1 204 No Content\r\n" +
		"Content-ID: 2\r\n" +
		"X-Content-Type-Options: nosniff\r\n" +
		"Cache-Control: no-cache\r\n" +
		"DataServiceVersion: 1.0;\r\n" +
		"\r\n" +
		"\r\n" +
		"--changesetresponse_U2\r\n" +
		"Content-Type: application/http\r\n" +
		"Content-Transfer-Encoding: binary\r\n" +
		"\r\n" +
		"HTTP/1.1 204 No Content\r\n" +
		"X-Content-Type-Options: nosniff\r\n" +
		"Cache-Control: no-cache\r\n" +
		"DataServiceVersion: 1.0;\r\n" +
		"ETag: " + testETag + "\r\n" +
		"\r\n" +
		"\r\n" +
		"--changesetresponse_U2--\r\n" +
		"--batchresponse_U1--\r\n"
	if got := normalize(buf.Bytes()); got != want {
		t.Errorf("body:\n%s\nwant:\n%s", got, want)
	}
	if got := normalize([]byte(ct)); got != "multipart/mixed; boundary=batchresponse_U1" {
		t.Errorf("content type %q", ct)
	}
	if !strings.HasSuffix(ct, string(bytes.TrimPrefix(firstLine(buf.Bytes()), []byte("--")))) {
		t.Errorf("content type %q does not name the body's boundary %q", ct, firstLine(buf.Bytes()))
	}
}

func firstLine(b []byte) []byte {
	l, _, _ := bytes.Cut(b, []byte("\r\n"))
	return l
}

func TestWriteFailureGolden(t *testing.T) {
	res := failureResult(2, azerr.New(azerr.EntityAlreadyExists), "3")
	res.Header.Set("Preference-Applied", "return-no-content")
	var buf bytes.Buffer
	if _, err := batch.WriteFailure(&buf, 2, res); err != nil {
		t.Fatal(err)
	}
	want := "--batchresponse_U1\r\n" +
		"Content-Type: multipart/mixed; boundary=changesetresponse_U2\r\n" +
		"\r\n" +
		"--changesetresponse_U2\r\n" +
		"Content-Type: application/http\r\n" +
		"Content-Transfer-Encoding: binary\r\n" +
		"\r\n" +
		"HTTP/1.1 409 Conflict\r\n" +
		"Content-ID: 3\r\n" +
		"X-Content-Type-Options: nosniff\r\n" +
		"Cache-Control: no-cache\r\n" +
		"Preference-Applied: return-no-content\r\n" +
		"DataServiceVersion: 3.0;\r\n" +
		"Content-Type: application/json;odata=minimalmetadata;streaming=true;charset=utf-8\r\n" +
		"\r\n" +
		`{"odata.error":{"code":"EntityAlreadyExists","message":{"lang":"en-US","value":"2:The specified entity already exists.\nRequestId:00000000-0000-0000-0000-000000000000\nTime:2024-05-01T10:00:01.1234567Z"}}}` + "\r\n" +
		"--changesetresponse_U2--\r\n" +
		"--batchresponse_U1--\r\n"
	if got := normalize(buf.Bytes()); got != want {
		t.Errorf("body:\n%s\nwant:\n%s", got, want)
	}
}

func TestWriteRetrieveGolden(t *testing.T) {
	var buf bytes.Buffer
	ct, err := batch.WriteRetrieve(&buf, batch.Result{Status: 200, Header: http.Header{
		"Content-Type": {"application/json;odata=minimalmetadata;streaming=true;charset=utf-8"},
		"ETag":         {testETag},
	}, Body: []byte(`{"PartitionKey":"p","RowKey":"1"}`)})
	if err != nil {
		t.Fatal(err)
	}
	want := "--batchresponse_U1\r\n" +
		"Content-Type: application/http\r\n" +
		"Content-Transfer-Encoding: binary\r\n" +
		"\r\n" +
		"HTTP/1.1 200 OK\r\n" +
		"X-Content-Type-Options: nosniff\r\n" +
		"Cache-Control: no-cache\r\n" +
		"DataServiceVersion: 3.0;\r\n" +
		"Content-Type: application/json;odata=minimalmetadata;streaming=true;charset=utf-8\r\n" +
		"ETag: " + testETag + "\r\n" +
		"\r\n" +
		`{"PartitionKey":"p","RowKey":"1"}` + "\r\n" +
		"--batchresponse_U1--\r\n"
	if got := normalize(buf.Bytes()); got != want {
		t.Errorf("body:\n%s\nwant:\n%s", got, want)
	}
	// .NET and Python read a query part placed directly in the batch.
	rs, err := dotnetSubmit(202, ct, buf.Bytes())
	if err != nil || len(rs) != 1 || rs[0].status != 200 || string(rs[0].body) != `{"PartitionKey":"p","RowKey":"1"}` {
		t.Errorf(".NET: %v %+v", err, rs)
	}
	if st, err := pythonSubmit(202, ct, buf.Bytes()); err != nil || len(st) != 1 || st[0] != 200 {
		t.Errorf("Python: %v %v", err, st)
	}
}

// A failed retrieve carries the "0:" prefix of every batch failure: .NET (both index
// extractions) and Python read index 0 from it, and WriteRetrieve refuses an error body
// without it, as WriteFailure does.
func TestWriteRetrieveFailure(t *testing.T) {
	var buf bytes.Buffer
	ct, err := batch.WriteRetrieve(&buf, failureResult(0, azerr.New(azerr.ResourceNotFound), ""))
	if err != nil {
		t.Fatal(err)
	}
	checkCRLF(t, buf.Bytes())
	_, err = dotnetSubmit(202, ct, buf.Bytes())
	var dn *dotnetTransactionFailed
	if !errors.As(err, &dn) || dn.errorCode != "ResourceNotFound" || dn.index == nil || *dn.index != 0 || dn.regexIdx == nil || *dn.regexIdx != 0 {
		t.Errorf(".NET: %v %+v", err, dn)
	}
	_, err = pythonSubmit(202, ct, buf.Bytes())
	var py *pythonTransactionError
	if !errors.As(err, &py) || py.index != 0 || py.code != "ResourceNotFound" || py.status != 404 {
		t.Errorf("Python: %v", err)
	}

	for name, res := range map[string]batch.Result{
		"no prefix":    {Status: 404, Body: []byte(`{"odata.error":{"code":"ResourceNotFound","message":{"lang":"en-US","value":"The specified resource does not exist."}}}`)},
		"other index":  failureResult(1, azerr.New(azerr.ResourceNotFound), ""),
		"multi-line":   {Status: 404, Body: []byte("{\"odata.error\":{\"message\":{\"value\":\"0:x\"}}}\n")},
		"pretty json":  {Status: 404, Body: []byte(`{"odata.error":{"message":{"value": "0:x"}}}`)},
		"bad status":   {Status: 99},
		"too large st": {Status: 600},
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if _, err := batch.WriteRetrieve(&buf, res); err == nil {
				t.Fatal("accepted")
			}
			if buf.Len() != 0 {
				t.Errorf("wrote %d bytes on error", buf.Len())
			}
		})
	}
	// An empty error body is allowed, and a success body needs no prefix.
	if _, err := batch.WriteRetrieve(&bytes.Buffer{}, batch.Result{Status: 404}); err != nil {
		t.Errorf("empty 404: %v", err)
	}
}

// Success responses of 1, 2 and 100 operations read correctly by every SDK's parser.
func TestWriteResponseSDKs(t *testing.T) {
	for _, n := range []int{1, 2, 7, batch.MaxOperations} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			results := make([]batch.Result, n)
			for i := range results {
				switch i % 3 {
				case 0:
					results[i] = insertResult(strconv.Itoa(i), strconv.Itoa(i+1))
				case 1:
					results[i] = batch.Result{Status: 204, ContentID: strconv.Itoa(i + 1), Header: http.Header{"ETag": {testETag}}}
				default:
					results[i] = batch.Result{Status: 204}
				}
			}
			var buf bytes.Buffer
			ct, err := batch.WriteResponse(&buf, results)
			if err != nil {
				t.Fatal(err)
			}
			body := buf.Bytes()
			checkCRLF(t, body)

			if failed, err := goSDKParse(202, body); failed || err != nil {
				t.Errorf("Go: failed %v err %v", failed, err)
			}
			subs, err := jsParse(202, string(body))
			if err != nil || len(subs) != n {
				t.Fatalf("JS: %v, %d sub-responses", err, len(subs))
			}
			for i, s := range subs {
				if s.status != 204 {
					t.Errorf("JS sub %d status %d", i, s.status)
				}
				if i%3 != 2 && (!s.hasET || s.etag != testETag) {
					t.Errorf("JS sub %d etag %q", i, s.etag)
				}
				if i%3 == 0 && (!s.hasRK || s.rowKey != strconv.Itoa(i)) {
					t.Errorf("JS sub %d rowKey %q", i, s.rowKey)
				}
			}
			rs, err := dotnetSubmit(202, ct, body)
			if err != nil || len(rs) != n {
				t.Fatalf(".NET: %v, %d responses", err, len(rs))
			}
			for i, r := range rs {
				if r.status != 204 || r.reason != "No Content" {
					t.Errorf(".NET response %d: %d %q", i, r.status, r.reason)
				}
				if cid := results[i].ContentID; r.header["Content-ID"] != cid {
					t.Errorf(".NET response %d Content-ID %q, want %q", i, r.header["Content-ID"], cid)
				}
				if i%3 != 2 && r.header["ETag"] != testETag {
					t.Errorf(".NET response %d ETag %q", i, r.header["ETag"])
				}
			}
			st, err := pythonSubmit(202, ct, body)
			if err != nil || len(st) != n {
				t.Fatalf("Python: %v, %v", err, st)
			}
		})
	}
}

// A failure at any index, with any status, is reported by every SDK as a failed
// transaction with the right index and code.
func TestWriteFailureSDKs(t *testing.T) {
	for _, tc := range []struct {
		index int
		err   *azerr.Error
	}{
		{0, azerr.New(azerr.EntityAlreadyExists)},
		{1, azerr.New(azerr.ResourceNotFound)},
		{42, azerr.New(azerr.UpdateConditionNotSatisfied)},
		{99, azerr.New(azerr.InvalidDuplicateRow)},
		{0, azerr.Newf(azerr.InvalidInput, "The batch request operation exceeds the maximum 100 changes per change set.")},
		{5, azerr.New(azerr.TableNotFound)},
		{3, azerr.OutOfRange("PartitionKey", "a'b\"c\\d")},
	} {
		t.Run(string(tc.err.Code)+"-"+strconv.Itoa(tc.index), func(t *testing.T) {
			var buf bytes.Buffer
			res := failureResult(tc.index, tc.err, strconv.Itoa(tc.index+1))
			ct, err := batch.WriteFailure(&buf, tc.index, res)
			if err != nil {
				t.Fatal(err)
			}
			body := buf.Bytes()
			checkCRLF(t, body)
			wantMsgPrefix := strconv.Itoa(tc.index) + ":" + tc.err.Message

			if failed, err := goSDKParse(202, body); !failed || err != nil {
				t.Errorf("Go: failed %v err %v", failed, err)
			}
			_, err = jsParse(202, string(body))
			var je *jsRestError
			if !errors.As(err, &je) || je.code != string(tc.err.Code) || je.statusCode != tc.err.Status ||
				!strings.HasPrefix(je.message, wantMsgPrefix) {
				t.Errorf("JS: %v", err)
			}
			_, err = dotnetSubmit(202, ct, body)
			var de *dotnetTransactionFailed
			if !errors.As(err, &de) || de.errorCode != string(tc.err.Code) ||
				de.index == nil || *de.index != tc.index || de.regexIdx == nil || *de.regexIdx != tc.index {
				t.Errorf(".NET: %v %+v", err, de)
			}
			_, err = pythonSubmit(202, ct, body)
			var pe *pythonTransactionError
			if !errors.As(err, &pe) || pe.index != tc.index || pe.code != string(tc.err.Code) || pe.status != tc.err.Status {
				t.Errorf("Python: %v", err)
			}
		})
	}
}

// The .NET rule in reverse: several parts with one error read as success, which is why
// WriteResponse refuses error results.
func TestWriteResponseRefusesErrors(t *testing.T) {
	var buf bytes.Buffer
	res := []batch.Result{insertResult("1", "1"), failureResult(1, azerr.New(azerr.EntityAlreadyExists), "2")}
	if _, err := batch.WriteResponse(&buf, res); err == nil {
		t.Fatal("WriteResponse accepted an error result")
	}
	if buf.Len() != 0 {
		t.Errorf("wrote %d bytes on error", buf.Len())
	}
	if _, err := batch.WriteResponse(&buf, nil); err == nil {
		t.Error("WriteResponse accepted no results")
	}
}

func TestWriteFailureValidation(t *testing.T) {
	good := failureResult(1, azerr.New(azerr.EntityAlreadyExists), "")
	for name, tc := range map[string]struct {
		index int
		res   batch.Result
	}{
		"negative index":    {-1, good},
		"index 100":         {100, good},
		"success status":    {1, batch.Result{Status: 204}},
		"no prefix":         {2, good},
		"pretty json":       {1, batch.Result{Status: 409, Body: []byte(`{"odata.error":{"message":{"value": "1:x"}}}`)}},
		"multi-line":        {1, batch.Result{Status: 409, Body: []byte("{\"odata.error\":{\"message\":{\"value\":\"1:x\"}}}\n")}},
		"status out of set": {1, batch.Result{Status: 600}},
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if _, err := batch.WriteFailure(&buf, tc.index, tc.res); err == nil {
				t.Fatal("accepted")
			}
			if buf.Len() != 0 {
				t.Errorf("wrote %d bytes on error", buf.Len())
			}
		})
	}
	// An empty body is allowed.
	var buf bytes.Buffer
	if _, err := batch.WriteFailure(&buf, 0, batch.Result{Status: 404}); err != nil {
		t.Fatal(err)
	}
	if failed, err := goSDKParse(202, buf.Bytes()); !failed || err != nil {
		t.Errorf("Go: failed %v err %v", failed, err)
	}
}

func TestWriteHeaders(t *testing.T) {
	var buf bytes.Buffer
	_, err := batch.WriteResponse(&buf, []batch.Result{{
		Status:    201,
		ContentID: "a\r\nInjected: 1",
		Header: http.Header{
			"Content-Length":         {"999"},
			"Transfer-Encoding":      {"chunked"},
			"Content-Id":             {"dropped"},
			"Cache-Control":          {"max-age=9"},
			"X-Content-Type-Options": {"other"},
			"dataserviceversion":     {"3.0;"},
			"X-Ms-Zeta":              {"z"},
			"x-ms-alpha":             {"a\nb\tc\x7fd\x00"},
			"Content-Type":           {"application/json"},
		},
		Body: []byte(`{"PartitionKey":"p"}`),
	}})
	if err != nil {
		t.Fatal(err)
	}
	got := normalize(buf.Bytes())
	want := "HTTP/1.1 201 Created\r\n" +
		"Content-ID: a  Injected: 1\r\n" +
		"X-Content-Type-Options: nosniff\r\n" +
		"Cache-Control: no-cache\r\n" +
		"DataServiceVersion: 3.0;\r\n" +
		"Content-Type: application/json\r\n" +
		"X-Ms-Zeta: z\r\n" +
		"x-ms-alpha: a b\tc d \r\n" +
		"\r\n" +
		`{"PartitionKey":"p"}` + "\r\n--changesetresponse_U2--"
	if !strings.Contains(got, want) {
		t.Errorf("got:\n%s\nwant it to contain:\n%s", got, want)
	}
	// A status without a standard reason still has three fields (.NET).
	buf.Reset()
	ct, err := batch.WriteResponse(&buf, []batch.Result{{Status: 299}})
	if err != nil {
		t.Fatal(err)
	}
	if rs, err := dotnetSubmit(202, ct, buf.Bytes()); err != nil || rs[0].status != 299 || rs[0].reason == "" {
		t.Errorf(".NET: %v %+v", err, rs)
	}
}

func TestWriteBoundariesAreFresh(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		var buf bytes.Buffer
		ct, err := batch.WriteResponse(&buf, []batch.Result{{Status: 204}})
		if err != nil {
			t.Fatal(err)
		}
		if seen[ct] {
			t.Fatalf("boundary reused: %s", ct)
		}
		seen[ct] = true
		if !regexp.MustCompile(`^multipart/mixed; boundary=batchresponse_` + uuidRe.String() + `$`).MatchString(ct) {
			t.Fatalf("content type %q", ct)
		}
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

func TestWriteError(t *testing.T) {
	if _, err := batch.WriteResponse(failWriter{}, []batch.Result{{Status: 204}}); err == nil {
		t.Error("WriteResponse hid the writer's error")
	}
	if _, err := batch.WriteRetrieve(failWriter{}, batch.Result{Status: 404}); err == nil {
		t.Error("WriteRetrieve hid the writer's error")
	}
}

// checkCRLF: no bare LF, no bare CR anywhere in the body.
func checkCRLF(t *testing.T, b []byte) {
	t.Helper()
	for i, c := range b {
		if c == '\n' && (i == 0 || b[i-1] != '\r') || c == '\r' && (i+1 == len(b) || b[i+1] != '\n') {
			t.Fatalf("bare line end at byte %d", i)
		}
	}
}

// Parse and the writers agree: a response rendered for a parsed request echoes the
// Content-IDs of the request, in order, for every SDK fixture.
func TestRoundTripContentIDs(t *testing.T) {
	for _, name := range []string{"python-azure-data-tables.http", "dotnet-azure-data-tables.http", "adv-mixed-tolerance.http"} {
		ct, body := readFixture(t, name)
		req, err := batch.Parse(ct, body)
		if err != nil {
			t.Fatal(err)
		}
		results := successResults(req)
		var buf bytes.Buffer
		rct, err := batch.WriteResponse(&buf, results)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := dotnetSubmit(202, rct, buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range rs {
			if r.header["Content-ID"] != req.Operations[i].ContentID {
				t.Errorf("%s: response %d Content-ID %q, want %q", name, i, r.header["Content-ID"], req.Operations[i].ContentID)
			}
		}
	}
}

// Known's fields are written byte for byte as the same headers in Header would be, the
// session token sorted among Header's other names, and a name set in both gets both values.
func TestWriteKnownHeaders(t *testing.T) {
	write := func(rs ...batch.Result) string {
		t.Helper()
		var buf bytes.Buffer
		if _, err := batch.WriteResponse(&buf, rs); err != nil {
			t.Fatal(err)
		}
		return normalize(buf.Bytes())
	}
	insert := http.Header{
		"Preference-Applied": {"return-content"},
		"Content-Type":       {"application/json;odata=minimalmetadata"},
		"Location":           {"http://h/a/t(PartitionKey='p',RowKey='r')"},
		"DataServiceId":      {"http://h/a/t(PartitionKey='p',RowKey='r')"},
		"ETag":               {`W/"datetime'2026-11-28T00%3A00%3A00Z'"`},
		"X-Ms-Session-Token": {"0:42"},
		"X-Ms-Alpha":         {"a"},
		"X-Ms-Zeta":          {"z"},
	}
	known := batch.Known{
		PreferenceApplied: "return-content",
		ContentType:       "application/json;odata=minimalmetadata",
		Location:          "http://h/a/t(PartitionKey='p',RowKey='r')",
		DataServiceID:     "http://h/a/t(PartitionKey='p',RowKey='r')",
		ETag:              `W/"datetime'2026-11-28T00%3A00%3A00Z'"`,
		SessionToken:      "0:42",
	}
	body := []byte(`{"PartitionKey":"p"}`)
	viaHeader := write(batch.Result{Status: 201, Header: insert, Body: body},
		batch.Result{Status: 204, Header: http.Header{"ETag": {`W/"x"`}, "X-Ms-Session-Token": {"0:42"}}})
	viaKnown := write(batch.Result{Status: 201, Header: http.Header{"X-Ms-Alpha": {"a"}, "X-Ms-Zeta": {"z"}}, Known: known, Body: body},
		batch.Result{Status: 204, Known: batch.Known{ETag: `W/"x"`, SessionToken: "0:42"}})
	if viaKnown != viaHeader {
		t.Errorf("Known:\n%s\nHeader:\n%s", viaKnown, viaHeader)
	}
	both := write(batch.Result{Status: 204,
		Header: http.Header{"Etag": {"one"}, "X-Ms-Session-Token": {"s1"}},
		Known:  batch.Known{ETag: "two", SessionToken: "s2"}})
	want := "ETag: one\r\nETag: two\r\nX-Ms-Session-Token: s1\r\nX-Ms-Session-Token: s2\r\n\r\n"
	if !strings.Contains(both, want) {
		t.Errorf("got:\n%s\nwant it to contain:\n%s", both, want)
	}
}

// AppendResponse appends exactly what WriteResponse writes, after what dst holds, and
// leaves dst alone on error.
func TestAppendResponse(t *testing.T) {
	res := []batch.Result{insertResult("1", "1"), {Status: 204, ContentID: "2"}, {Status: 201, Body: []byte(`{"a":1}`)}}
	var buf bytes.Buffer
	wct, err := batch.WriteResponse(&buf, res)
	if err != nil {
		t.Fatal(err)
	}
	b, act, err := batch.AppendResponse([]byte("held"), res)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("held")) || normalize(b[4:]) != normalize(buf.Bytes()) {
		t.Errorf("appended:\n%s\nwritten:\n%s", b, buf.Bytes())
	}
	if normalize([]byte(act)) != normalize([]byte(wct)) || !strings.HasSuffix(act, string(bytes.TrimPrefix(firstLine(b[4:]), []byte("--")))) {
		t.Errorf("content type %q, body's first line %q", act, firstLine(b[4:]))
	}
	bad := append(res, failureResult(3, azerr.New(azerr.EntityAlreadyExists), "4"))
	if b, _, err := batch.AppendResponse([]byte("held"), bad); err == nil || string(b) != "held" {
		t.Errorf("with a failure: %q, %v", b, err)
	}
}
