package server

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/metrics"
	"github.com/ceruleandb/cerulean/internal/observe"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
)

// observedServer is a server on a fresh Pebble store whose requests a recorder observes.
func observedServer(t *testing.T) (*recorder, *httptest.Server) {
	t.Helper()
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
	return rec, hs
}

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
	rec, hs := observedServer(t)
	for _, c := range []struct {
		method, path, body string
		status             int
	}{
		{"POST", "/Tables", `{"TableName":"obs"}`, http.StatusCreated},
		{"POST", "/obs", `{"PartitionKey":"p1","RowKey":"r1","N":1}`, http.StatusCreated},
		{"GET", "/obs(PartitionKey='p1',RowKey='r1')", "", http.StatusOK},
		{"GET", "/obs()", "", http.StatusOK},
		{"GET", "/obs(PartitionKey='p1',RowKey='missing')", "", http.StatusNotFound},
		{"POST", "/obs", `{"PartitionKey":"p2","RowKey":"r1","N":1}`, http.StatusCreated},
		{"GET", "/obs()", "", http.StatusOK},
		{"GET", "/obs()?$filter=PartitionKey%20eq%20'p2'", "", http.StatusOK},
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
		queryPK       string
	}{
		{"CreateTable", "", 201, 0, 0, "", ""},
		{"InsertEntity", "p1", 201, 0, 1, "", ""},
		{"QueryEntity", "p1", 200, 1, 0, "", ""},
		{"QueryEntities", "", 200, 1, 0, "", "p1"}, // the page lies in one partition
		{"QueryEntity", "p1", 404, 0, 0, "ResourceNotFound", ""},
		{"InsertEntity", "p2", 201, 0, 1, "", ""},
		{"QueryEntities", "", 200, 2, 0, "", ""}, // two partitions
		{"QueryEntities", "", 200, 1, 0, "", "p2"},
	}
	if len(rec.reqs) != len(want) {
		t.Fatalf("observed %d requests, want %d: %+v", len(rec.reqs), len(want), rec.reqs)
	}
	for i, w := range want {
		got := rec.reqs[i]
		if got.Operation != w.op || got.PartitionKey != w.pk || got.Status != w.status ||
			got.EntitiesRead != w.read || got.EntitiesWritten != w.written || got.ErrorCode != w.code ||
			got.QueryPartition != w.queryPK {
			t.Errorf("request %d: %+v; want %+v", i, got, w)
		}
		if got.Account != auth.DevAccountName || got.ID == "" || got.Latency <= 0 || got.AuthScheme != auth.SchemeSharedKeyLite ||
			!strings.Contains(got.RemoteAddr, ":") || got.BytesOut == 0 {
			t.Errorf("request %d: %+v lacks account, id, latency, scheme, remote address or response bytes", i, got)
		}
	}
}

// TestObserverAuthFailure: a refused request carries why, from the fixed set metrics use
// as a label; a query carries the entities it examined.
func TestObserverAuthFailure(t *testing.T) {
	rec, hs := observedServer(t)
	acct := auth.DevAccount()
	cases := []struct {
		reason string
		req    func() *http.Request
	}{
		{"no_credentials", func() *http.Request {
			r, _ := http.NewRequest("GET", hs.URL+"/"+acct.Name+"/Tables", nil)
			return r
		}},
		{"signature", func() *http.Request {
			r, _ := http.NewRequest("GET", hs.URL+"/"+acct.Name+"/Tables", nil)
			auth.SignRequest(r, auth.SchemeSharedKeyLite, acct.Name, []byte("not the key"), time.Now())
			return r
		}},
		{"date", func() *http.Request {
			r, _ := http.NewRequest("GET", hs.URL+"/"+acct.Name+"/Tables", nil)
			auth.SignRequest(r, auth.SchemeSharedKeyLite, acct.Name, acct.Keys[0], time.Now().Add(-time.Hour))
			return r
		}},
		{"bearer", func() *http.Request {
			r, _ := http.NewRequest("GET", hs.URL+"/"+acct.Name+"/Tables", nil)
			r.Header.Set("Authorization", "Bearer abc")
			r.Header.Set("x-ms-version", "2019-02-02")
			return r
		}},
		{"malformed", func() *http.Request {
			r, _ := http.NewRequest("GET", hs.URL+"/"+acct.Name+"/Tables", nil)
			r.Header.Set("Authorization", "SharedKey nocolon")
			return r
		}},
		{"", func() *http.Request { return signed(t, hs, "GET", "/Tables", nil) }},
	}
	for _, c := range cases {
		do(t, c.req())
	}
	// A query whose filter is not on the keys examines every entity.
	do(t, signed(t, hs, "POST", "/Tables", []byte(`{"TableName":"scan"}`)))
	for i := range 5 {
		do(t, signed(t, hs, "POST", "/scan", []byte(fmt.Sprintf(`{"PartitionKey":"p","RowKey":"r%d","N":%d}`, i, i))))
	}
	if resp, b := do(t, signed(t, hs, "GET", "/scan()?$filter=N%20ge%204", nil)); resp.StatusCode != 200 {
		t.Fatalf("query: %d %s", resp.StatusCode, b)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i, c := range cases {
		if got := rec.reqs[i]; got.AuthFailure != c.reason {
			t.Errorf("request %d (%d %s): AuthFailure %q, want %q", i, got.Status, got.ErrorCode, got.AuthFailure, c.reason)
		}
	}
	q := rec.reqs[len(rec.reqs)-1]
	if q.Operation != "QueryEntities" || q.EntitiesRead != 1 || q.EntitiesScanned != 5 || q.PageCut {
		t.Errorf("query: %+v; want 1 read of 5 scanned, not cut", q)
	}
}

// TestOperationsKnownToMetrics: every operation name the server reports is one the
// metrics package has a label value for (else it would count as Unknown).
func TestOperationsKnownToMetrics(t *testing.T) {
	names := []string{"TablePreflightRequest", "QueryTable", "BulkWrite", "Unknown"}
	for _, n := range operationNames {
		names = append(names, n)
	}
	for _, n := range names {
		if !slices.Contains(metrics.Operations, n) {
			t.Errorf("operation %s is not in metrics.Operations", n)
		}
	}
}

// A request with a SAS that is refused still reports the scheme it tried (authentication
// strips the SAS parameters from the query before the observer runs) and what it
// addressed (it was never routed).
func TestObserverRefusedSAS(t *testing.T) {
	rec, hs := observedServer(t)
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
