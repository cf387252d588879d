package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/auth"
	"github.com/ceruleandb/cerulean/entity"
	"github.com/ceruleandb/cerulean/storage/pebble"
)

// pebbleServer is a server over a real Pebble engine in a temporary directory, with the
// development account and an empty table named tbl; it returns the engine too.
func pebbleServer(tb testing.TB, tbl string) (*Server, *pebble.Engine) {
	tb.Helper()
	eng, err := pebble.Open(tb.TempDir(), pebble.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { eng.Close() })
	srv, err := New(Options{Engine: eng, Accounts: []auth.Account{auth.DevAccount()}})
	if err != nil {
		tb.Fatal(err)
	}
	if err := srv.tables.CreateTable(context.Background(), auth.DevAccount().Name, tbl, nil); err != nil {
		tb.Fatal(err)
	}
	return srv, eng
}

// benchServer is a server over a real Pebble engine holding one table "bench" with
// 1,000 entities in partition "p".
func benchServer(b *testing.B) *Server {
	srv, _ := pebbleServer(b, "bench")
	for i := 0; i < 1000; i++ {
		e := entity.Entity{PartitionKey: "p", RowKey: strconv.Itoa(i), Props: []entity.Property{
			{Name: "Name", Value: entity.StringValue("some text of moderate length")},
			{Name: "N", Value: entity.Int64Value(int64(i))},
		}}
		if _, err := srv.tables.InsertEntity(context.Background(), auth.DevAccount().Name, "bench", &e); err != nil {
			b.Fatal(err)
		}
	}
	return srv
}

// benchRequest builds a signed request for a path-style URL.
func benchRequest(b *testing.B, rawURL string) *http.Request {
	b.Helper()
	r := httptest.NewRequest(http.MethodGet, rawURL, nil)
	r.Host = "127.0.0.1:10002"
	r.Header.Set("Accept", "application/json;odata=minimalmetadata")
	r.Header.Set("x-ms-version", "2019-02-02")
	acct := auth.DevAccount()
	auth.SignRequest(r, auth.SchemeSharedKeyLite, acct.Name, acct.Keys[0], time.Now())
	return r
}

func benchServe(b *testing.B, srv *Server, r *http.Request) {
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

// BenchmarkGetEntity and BenchmarkPointQuery compare a Get with the equivalent
// "PartitionKey eq … and RowKey eq …" query, which the planner serves as a Get.
func BenchmarkGetEntity(b *testing.B) {
	srv := benchServer(b)
	benchServe(b, srv, benchRequest(b, "/devstoreaccount1/bench(PartitionKey='p',RowKey='500')"))
}

func BenchmarkPointQuery(b *testing.B) {
	srv := benchServer(b)
	f := url.QueryEscape("PartitionKey eq 'p' and RowKey eq '500'")
	benchServe(b, srv, benchRequest(b, "/devstoreaccount1/bench()?$filter="+f))
}

// BenchmarkPartitionQuery reads a whole 1,000-entity partition as one page.
func BenchmarkPartitionQuery(b *testing.B) {
	srv := benchServer(b)
	f := url.QueryEscape("PartitionKey eq 'p'")
	benchServe(b, srv, benchRequest(b, "/devstoreaccount1/bench()?$filter="+f))
}
