package batch_test

import (
	"bytes"
	"net/http"
	"testing"
	"unsafe"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/batch"
)

// FuzzParse checks that Parse never panics, fails only with 4xx catalogue errors, and
// that whatever it accepts is well-formed and answers cleanly: a success response built
// for it is read back by the Go and .NET parsers with one sub-response per operation.
// Seeds: every request fixture plus testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	for _, name := range fixtureFiles(f) {
		ct, body := readFixture(f, name)
		f.Add(ct, body)
	}
	ct, body := build(insert, "DELETE /a/t1(PartitionKey='p',RowKey='r') HTTP/1.1\nIf-Match: *\n")
	f.Add(ct, body)
	// Small seeds mutate better than the SDK-sized fixtures.
	f.Add("multipart/mixed; boundary=b", []byte("--b\nContent-Type: multipart/mixed; boundary=c\n\n--c\n\nPUT /t(PartitionKey='p',RowKey='r') HTTP/1.1\nX-HTTP-Method: MERGE\n\n{}\n--c--\n--b--"))
	f.Add(`multipart/mixed; boundary="b"`, []byte("--b\r\n\r\nGET t(PartitionKey='p',RowKey='r')?$select=a HTTP/1.1\r\n\r\n--b--\r\n"))
	f.Add("multipart/mixed;boundary=b", []byte("pre\n--b \nCONTENT-TYPE:multipart/mixed;boundary=c\n\n--c\ncontent-id: 1\n\nPOST http://h/a/t?%24format=x&sig=%2B HTTP/1.1\nContent-ID: 2\n\n\n{}\n--c--\n--b--\nepi"))
	f.Fuzz(func(t *testing.T, ct string, body []byte) {
		req, err := batch.Parse(ct, body)
		if err != nil {
			if req != nil {
				t.Fatal("request returned with an error")
			}
			e, ok := azerr.As(err)
			if !ok || e.Status < 400 || e.Status > 499 {
				t.Fatalf("error %v (%T) is not a 4xx *azerr.Error", err, err)
			}
			return
		}
		n := len(req.Operations)
		if n < 1 || n > batch.MaxOperations || req.Retrieve && n != 1 {
			t.Fatalf("%d operations, retrieve %v", n, req.Retrieve)
		}
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(body)))
		for i, o := range req.Operations {
			switch {
			case req.Retrieve && o.Method != http.MethodGet:
				t.Fatalf("retrieve with %s", o.Method)
			case !req.Retrieve && o.Method != "POST" && o.Method != "PUT" && o.Method != "MERGE" && o.Method != "DELETE":
				t.Fatalf("op %d: method %q in a changeset", i, o.Method)
			case o.URL == nil:
				t.Fatalf("op %d: nil URL", i)
			case len(o.Body) > 0 && (o.Body[0] == '\r' || o.Body[0] == '\n'):
				t.Fatalf("op %d: body starts with a line end", i)
			}
			if q := o.Query(); len(q) > 64 {
				t.Fatalf("op %d: %d query names, more than the pairs a part may have", i, len(q))
			}
			if len(o.Body) > 0 {
				p := uintptr(unsafe.Pointer(unsafe.SliceData(o.Body)))
				if p < lo || p+uintptr(len(o.Body)) > lo+uintptr(len(body)) {
					t.Fatalf("op %d: Body does not alias the input", i)
				}
			}
		}
		if req.Retrieve {
			return
		}
		var buf bytes.Buffer
		rct, err := batch.WriteResponse(&buf, successResults(req))
		if err != nil {
			t.Fatal(err)
		}
		if failed, err := goSDKParse(202, buf.Bytes()); failed || err != nil {
			t.Fatalf("Go SDK: failed %v err %v", failed, err)
		}
		rs, err := dotnetSubmit(202, rct, buf.Bytes())
		if err != nil || len(rs) != n {
			t.Fatalf(".NET: %v, %d responses for %d operations", err, len(rs), n)
		}
	})
}
