package client

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/auth"
)

// TestBulk: Bulk sends one signed POST ?comp=bulk with the operations as given and reads
// the per-item answer and the session token; a refusal is an error with its code.
func TestBulk(t *testing.T) {
	dev := auth.DevAccount()
	verifier := auth.NewVerifier([]auth.Account{dev}, nil)
	var got []byte
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := verifier.Authenticate(r, dev.Name); err != nil {
			t.Errorf("signature: %v", err)
		}
		if r.Method != http.MethodPost || r.URL.Path != "/"+dev.Name+"/mytable" || r.URL.RawQuery != "comp=bulk" ||
			r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("request %s %s %s", r.Method, r.URL, r.Header.Get("Content-Type"))
		}
		got, _ = io.ReadAll(r.Body)
		if strings.Contains(string(got), `"refuse"`) {
			w.Header().Set("x-ms-error-code", "InvalidInput")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"odata.error":{"code":"InvalidInput","message":{"lang":"en-US","value":"Operation 0: bad.\nRequestId:x\nTime:y"}}}`)
			return
		}
		w.Header().Set("x-ms-session-token", "1:pebble:42")
		io.WriteString(w, `{"succeeded":1,"failed":1,"results":[{"index":0,"status":201,"etag":"W/\"e\""},{"index":1,"status":409,"error":{"code":"EntityAlreadyExists","message":"exists"}}]}`)
	}))
	defer hs.Close()
	c, err := New(hs.URL+"/"+dev.Name, dev.Name, auth.DevAccountKey)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Bulk(t.Context(), "mytable", []BulkOp{
		{Op: BulkInsert, Entity: json.RawMessage(`{"PartitionKey":"p","RowKey":"1","N":1}`)},
		{Op: BulkUpdate, Entity: json.RawMessage(`{"PartitionKey":"p","RowKey":"2"}`), IfMatch: "*"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"operations":[{"op":"insert","entity":{"PartitionKey":"p","RowKey":"1","N":1}},{"op":"update","entity":{"PartitionKey":"p","RowKey":"2"},"ifMatch":"*"}]}`
	if string(got) != want {
		t.Errorf("body\n%s\nwant\n%s", got, want)
	}
	if res.Succeeded != 1 || res.Failed != 1 || len(res.Results) != 2 || res.Results[0].ETag != `W/"e"` ||
		res.Results[1].Error == nil || res.Results[1].Error.Code != "EntityAlreadyExists" || res.SessionToken != "1:pebble:42" {
		t.Errorf("answer %+v", res)
	}
	_, err = c.Bulk(t.Context(), "mytable", []BulkOp{{Op: "refuse", Entity: json.RawMessage(`{}`)}})
	if err == nil || err.Error() != "bulk: 400 InvalidInput: Operation 0: bad." {
		t.Errorf("refusal: %v", err)
	}
}
