package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/ceruleandb/cerulean/auth"
	"github.com/ceruleandb/cerulean/observe"
	"github.com/ceruleandb/cerulean/storage/pebble"
)

// recorder keeps copies of what it observes.
type recorder struct {
	mu   sync.Mutex
	reqs []observe.Request
}

func (r *recorder) Observe(o *observe.Request) {
	r.mu.Lock()
	r.reqs = append(r.reqs, *o)
	r.mu.Unlock()
}

// TestObserver: every request reaches the observer once, answered, with its operation,
// partition and entity counts.
func TestObserver(t *testing.T) {
	rec := &recorder{}
	eng, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	srv, err := New(Options{Engine: eng, Accounts: []auth.Account{auth.DevAccount()}, Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	for _, c := range []struct {
		method, path, body string
		status             int
	}{
		{"POST", "/Tables", `{"TableName":"obs"}`, http.StatusCreated},
		{"POST", "/obs", `{"PartitionKey":"p1","RowKey":"r1","N":1}`, http.StatusCreated},
		{"GET", "/obs(PartitionKey='p1',RowKey='r1')", "", http.StatusOK},
		{"GET", "/obs()", "", http.StatusOK},
		{"GET", "/obs(PartitionKey='p1',RowKey='missing')", "", http.StatusNotFound},
	} {
		var body []byte
		if c.body != "" {
			body = []byte(c.body)
		}
		if resp, b := do(t, signed(t, hs, c.method, c.path, body)); resp.StatusCode != c.status {
			t.Fatalf("%s %s = %d %s", c.method, c.path, resp.StatusCode, b)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := []struct {
		op, pk        string
		status        int
		read, written int
		code          string
	}{
		{"CreateTable", "", 201, 0, 0, ""},
		{"InsertEntity", "p1", 201, 0, 1, ""},
		{"QueryEntity", "p1", 200, 1, 0, ""},
		{"QueryEntities", "", 200, 1, 0, ""},
		{"QueryEntity", "p1", 404, 0, 0, "ResourceNotFound"},
	}
	if len(rec.reqs) != len(want) {
		t.Fatalf("observed %d requests, want %d: %+v", len(rec.reqs), len(want), rec.reqs)
	}
	for i, w := range want {
		got := rec.reqs[i]
		if got.Operation != w.op || got.PartitionKey != w.pk || got.Status != w.status ||
			got.EntitiesRead != w.read || got.EntitiesWritten != w.written || got.ErrorCode != w.code {
			t.Errorf("request %d: %+v; want %+v", i, got, w)
		}
		if got.Account != auth.DevAccountName || got.ID == "" || got.Latency <= 0 || got.AuthScheme != auth.SchemeSharedKeyLite ||
			!strings.Contains(got.RemoteAddr, ":") || got.BytesOut == 0 {
			t.Errorf("request %d: %+v lacks account, id, latency, scheme, remote address or response bytes", i, got)
		}
	}
}

// A request with a SAS that is refused still reports the scheme it tried (authentication
// strips the SAS parameters from the query before the observer runs) and what it
// addressed (it was never routed).
func TestObserverRefusedSAS(t *testing.T) {
	rec := &recorder{}
	eng, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	srv, err := New(Options{Engine: eng, Accounts: []auth.Account{auth.DevAccount()}, Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	resp, b := do(t, mustRequest(t, "GET", hs.URL+"/"+auth.DevAccountName+"/t1(PartitionKey='p1',RowKey='r1')?sv=2019-02-02&ss=t&srt=sco&sp=r&se=2099-01-01T00:00:00Z&sig=bm90YXNpZw%3D%3D"))
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("bad SAS: %d %s", resp.StatusCode, b)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.reqs) != 1 || rec.reqs[0].AuthScheme != "SAS" || rec.reqs[0].Table != "t1" || rec.reqs[0].PartitionKey != "p1" {
		t.Fatalf("observed %+v, want one request with scheme SAS, table t1, partition p1", rec.reqs)
	}
}

func mustRequest(t *testing.T, method, url string) *http.Request {
	t.Helper()
	r, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
