package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/edmjson"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// testServer is a server over a real Pebble engine with one table "limits" holding n
// entities in partition "p", each with a String property of the given size.
func testServer(t testing.TB, n, size int) *Server {
	t.Helper()
	srv, eng := pebbleServer(t, "limits")
	ctx := context.Background()
	acct := auth.DevAccount()
	text := strings.Repeat("x", size)
	for i := 0; i < n; i += 100 {
		var muts []storage.Mutation
		for j := i; j < min(n, i+100); j++ {
			muts = append(muts, storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprintf("%04d", j), Props: []entity.Property{
				{Name: "Name", Value: entity.StringValue(text)},
				{Name: "N", Value: entity.Int64Value(int64(j))},
			}})
		}
		if _, err := eng.Apply(ctx, acct.Name, "limits", "p", muts); err != nil {
			t.Fatal(err)
		}
	}
	return srv
}

// signedGet builds a signed GET of a path-style URL (path and raw query).
func signedGet(t testing.TB, path, query string) *http.Request {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/devstoreaccount1/"+path, nil)
	r.URL.RawQuery = query
	r.Host = "127.0.0.1:10002"
	r.Header.Set("Accept", "application/json;odata=minimalmetadata")
	r.Header.Set("x-ms-version", "2019-02-02")
	acct := auth.DevAccount()
	auth.SignRequest(r, auth.SchemeSharedKeyLite, acct.Name, acct.Keys[0], time.Now())
	return r
}

func selectOf(n int) string {
	names := make([]string, n)
	for i := range names {
		names[i] = "N" + strconv.Itoa(i)
	}
	return "$select=" + url.QueryEscape(strings.Join(names, ","))
}

// A $select longer than any entity can be (255 properties) is refused before anything is
// read: 100,000 names used to make every entity of the page carry 100,000 nulls.
func TestSelectTooLong(t *testing.T) {
	srv := testServer(t, 10, 10)
	for _, path := range []string{"limits()", "limits(PartitionKey='p',RowKey='0001')"} {
		for _, n := range []int{256, 100_000} {
			w := httptest.NewRecorder()
			start := time.Now()
			srv.ServeHTTP(w, signedGet(t, path, selectOf(n)))
			el := time.Since(start)
			if w.Code != http.StatusBadRequest || w.Header().Get("x-ms-error-code") != "InvalidQueryParameterValue" {
				t.Fatalf("%s with %d names: %d %s %s", path, n, w.Code, w.Header().Get("x-ms-error-code"), w.Body)
			}
			if !strings.Contains(w.Body.String(), "at most 255") {
				t.Errorf("%s with %d names: message does not give the limit: %s", path, n, w.Body)
			}
			if el > 500*time.Millisecond {
				t.Errorf("%s with %d names: refused after %v", path, n, el)
			}
		}
		// 255 names are allowed: each absent one is null.
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, signedGet(t, path, selectOf(255)))
		if w.Code != http.StatusOK || strings.Count(w.Body.String(), ":null") < 254 {
			t.Fatalf("%s with 255 names: %d %.300s", path, w.Code, w.Body)
		}
	}
}

// A page larger than streamChunk goes out in chunks as it is encoded: same JSON, no
// Content-Length, the continuation headers on the response.
func TestQueryPageStreamed(t *testing.T) {
	srv := testServer(t, 1000, 1000) // about 1 MB of JSON
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, signedGet(t, "limits()", "$top=999"))
	if w.Code != http.StatusOK || w.Header().Get("Content-Length") != "" || w.Header().Get("X-Ms-Continuation-Nextpartitionkey") == "" {
		t.Fatalf("status %d, Content-Length %q, continuation %q", w.Code, w.Header().Get("Content-Length"), w.Header().Get("X-Ms-Continuation-Nextpartitionkey"))
	}
	if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json;odata=minimalmetadata") {
		t.Fatalf("Content-Type %q", ct)
	}
	var doc struct {
		Value []struct {
			RowKey string
			Name   string
		} `json:"value"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil || len(doc.Value) != 999 {
		t.Fatalf("body: %d entities, %v", len(doc.Value), err)
	}
	for i, e := range doc.Value {
		if e.RowKey != fmt.Sprintf("%04d", i) || len(e.Name) != 1000 {
			t.Fatalf("entity %d: RowKey %q, Name of %d bytes", i, e.RowKey, len(e.Name))
		}
	}
	// A small page still goes out whole, with its length.
	w = httptest.NewRecorder()
	srv.ServeHTTP(w, signedGet(t, "limits()", "$top=5"))
	if w.Code != http.StatusOK || w.Header().Get("Content-Length") != strconv.Itoa(w.Body.Len()) {
		t.Fatalf("small page: status %d, Content-Length %q for %d bytes", w.Code, w.Header().Get("Content-Length"), w.Body.Len())
	}
}

// cancellingWriter is a ResponseWriter whose client goes away at the first body write.
type cancellingWriter struct {
	*httptest.ResponseRecorder
	cancel context.CancelFunc
	writes int
}

func (w *cancellingWriter) Write(b []byte) (int, error) {
	w.writes++
	w.cancel()
	return w.ResponseRecorder.Write(b)
}

// When the client goes away, encoding the page stops at the next chunk: a disconnected
// client does not keep a core busy encoding a page nobody reads.
func TestQueryPageStopsWhenClientGoes(t *testing.T) {
	srv := testServer(t, 0, 0)
	recs := make([]storage.Record, 1000)
	for i := range recs {
		recs[i] = storage.Record{Entity: entity.Entity{PartitionKey: "p", RowKey: strconv.Itoa(i), Props: []entity.Property{
			{Name: "S", Value: entity.StringValue(strings.Repeat("s", 10_000))},
		}}, Version: entity.MinDateTime}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &cancellingWriter{ResponseRecorder: httptest.NewRecorder(), cancel: cancel}
	rq := &request{r: signedGet(t, "limits()", "").WithContext(ctx), w: w, level: edmjson.MinimalMetadata}
	srv.sendPage(rq, recs, edmjson.EntityOptions{Level: edmjson.MinimalMetadata, ServiceRoot: "http://h/a", Table: "limits"})
	if w.writes != 1 || w.Body.Len() > 2*streamChunk {
		t.Fatalf("after the client went away: %d writes, %d bytes of a 10 MB page", w.writes, w.Body.Len())
	}
	// Encoded records are released as the page goes out.
	if recs[0].Entity.Props != nil {
		t.Fatal("an encoded record was not released")
	}
}

// BenchmarkQuerySelect255 encodes a 1,000-entity page with a 255-name $select (the most
// allowed): each entity gets its own properties and 253 nulls, in time linear in that.
func BenchmarkQuerySelect255(b *testing.B) {
	srv := testServer(b, 1000, 20)
	r := signedGet(b, "limits()", selectOf(253)+url.QueryEscape(",Name,N"))
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d", w.Code)
		}
		b.SetBytes(int64(w.Body.Len()))
	}
}
