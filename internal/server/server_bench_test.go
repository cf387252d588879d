package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/cputime"
	"github.com/ceruleandb/cerulean/internal/edmjson"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
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
func benchRequest(b testing.TB, rawURL string) *http.Request {
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

// benchEntityJSON is the entity `cerulean bench` writes: a 1 KiB alphanumeric payload and
// one property of each common EDM type, in the JSON the Go SDK sends.
func benchEntityJSON(pk, rk string, worker int, payload string) string {
	return `{"PartitionKey":"` + pk + `","RowKey":"` + rk + `","Payload":"` + payload +
		`","Worker":` + strconv.Itoa(worker) + `,"Seq@odata.type":"Edm.Int64","Seq":"` +
		strconv.Itoa(1_000_000_000+worker) + `","Ratio":0.5,"Flag":true,` +
		`"Created@odata.type":"Edm.DateTime","Created":"2026-11-24T21:00:00.1234567Z"}`
}

// benchPayload is n pseudo-random alphanumerics, the same for every run.
func benchPayload(n int) string {
	const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = alnum[x%uint32(len(alnum))]
	}
	return string(b)
}

// BenchmarkPartitionQuery1KiB reads a whole partition of 200 bench-shaped entities
// (~1 KiB each) as one page at minimal metadata: the query `cerulean bench` measures.
func BenchmarkPartitionQuery1KiB(b *testing.B) {
	srv, _ := pebbleServer(b, "bench")
	payload := benchPayload(1024)
	for i := 0; i < 200; i++ {
		e, _, err := edmjson.DecodeEntity([]byte(benchEntityJSON("p", fmt.Sprintf("%06d", i), i, payload)))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := srv.tables.InsertEntity(context.Background(), auth.DevAccount().Name, "bench", &e); err != nil {
			b.Fatal(err)
		}
	}
	f := url.QueryEscape("PartitionKey eq 'p'")
	r := benchRequest(b, "/devstoreaccount1/bench()?$filter="+f)
	w := &discardWriter{}
	b.ReportAllocs()
	cpu := startCPU(b)
	for b.Loop() {
		w.reset()
		srv.ServeHTTP(w, r)
		if w.code != http.StatusOK || w.n < 200*1024 {
			b.Fatalf("status %d, %d bytes", w.code, w.n)
		}
	}
	b.ReportMetric(float64(b.N)*200/b.Elapsed().Seconds(), "entities/s")
	cpu.report(200)
}

// batchTemplate is a 100-insert changeset framed byte for byte as the Go SDK's
// SubmitTransaction frames it (see batch/testdata/go-aztables-1.4.1.http), and the offsets
// of each RowKey's ten digits, to be overwritten with unique keys.
func batchTemplate(n int, payload string) (contentType string, body []byte, rowKeyAt []int) {
	const bb, cs = "batch_b6c1d2b7-4471-4036-51c4-b29901383310", "changeset_4a306c2c-2c8e-4582-559a-6b2c43af3e0f"
	var buf bytes.Buffer
	buf.WriteString("--" + bb + "\r\nContent-Type: multipart/mixed; boundary=" + cs + "\r\n\r\n")
	for i := 0; i < n; i++ {
		ent := benchEntityJSON("p", "r0000000000", i, payload)
		buf.WriteString("--" + cs + "\r\nContent-Transfer-Encoding: binary\r\nContent-Type: application/http\r\n\r\n" +
			"POST http://127.0.0.1:10002/devstoreaccount1/bench?%24format=application%2Fjson%3Bodata%3Dminimalmetadata HTTP/1.1\r\n" +
			"Accept: application/json;odata=minimalmetadata\r\nContent-Length: " + strconv.Itoa(len(ent)) + "\r\n" +
			"Content-Type: application/json\r\nDataServiceVersion: \r\nPrefer: return-no-content\r\nx-ms-version: \r\n\r\n")
		rowKeyAt = append(rowKeyAt, buf.Len()+strings.Index(ent, "r0000000000")+1)
		buf.WriteString(ent + "\r\n")
	}
	buf.WriteString("--" + cs + "--\r\n\r\n--" + bb + "--\r\n")
	return "multipart/mixed; boundary=" + bb, buf.Bytes(), rowKeyAt
}

// BenchmarkBatch100 serves 100-insert transactions of bench-shaped entities (~1 KiB each)
// through the whole handler: auth, multipart parsing, JSON decoding, validation, one
// synced Pebble commit and the multipart response. Every iteration's keys are new.
func BenchmarkBatch100(b *testing.B) { benchBatch100(b, benchPebble(b), false) }

// BenchmarkBatch100Parallel is BenchmarkBatch100 from 32 concurrent clients, as `cerulean
// bench` drives it: concurrent transactions share Pebble's synced WAL writes.
func BenchmarkBatch100Parallel(b *testing.B) { benchBatch100(b, benchPebble(b), true) }

// BenchmarkBatch100Protocol is BenchmarkBatch100 over an engine whose Apply writes nothing
// (appliedOnly): the CPU the protocol layer spends per batch entity (auth, multipart,
// JSON, validation, the answer), without the storage engine's share or its fsync waits.
func BenchmarkBatch100Protocol(b *testing.B) {
	eng, err := pebble.Open(b.TempDir(), pebble.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { eng.Close() })
	srv, err := New(Options{Engine: appliedOnly{eng}, Accounts: []auth.Account{auth.DevAccount()}})
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.tables.CreateTable(context.Background(), auth.DevAccount().Name, "bench", nil); err != nil {
		b.Fatal(err)
	}
	benchBatch100(b, srv, false)
}

// appliedOnly is an engine whose Apply answers as if it had committed every mutation,
// writing nothing.
type appliedOnly struct{ storage.Engine }

func (appliedOnly) Apply(_ context.Context, _, _, _ string, muts []storage.Mutation) (storage.Applied, error) {
	v := make([]int64, len(muts))
	for i := range v {
		v[i] = 639_000_000_000_000_000 + int64(i) // a DateTime in 2025
	}
	return storage.Applied{Versions: v, Position: 1}, nil
}

func benchPebble(b *testing.B) *Server {
	srv, _ := pebbleServer(b, "bench")
	return srv
}

func benchBatch100(b *testing.B, srv *Server, parallel bool) {
	ct, tmpl, at := batchTemplate(100, benchPayload(1024))
	r := httptest.NewRequest(http.MethodPost, "/devstoreaccount1/$batch", nil)
	r.Host = "127.0.0.1:10002"
	r.Header.Set("Accept", "application/json;odata=minimalmetadata")
	r.Header.Set("Content-Type", ct)
	r.Header.Set("x-ms-version", "2019-02-02")
	r.Header.Set("DataServiceVersion", "3.0")
	acct := auth.DevAccount()
	auth.SignRequest(r, auth.SchemeSharedKeyLite, acct.Name, acct.Keys[0], time.Now())
	var seq atomic.Int64
	// client sends one transaction with fresh keys from its own body and writer.
	type client struct {
		body []byte
		w    discardWriter
	}
	send := func(c *client) {
		copy(c.body, tmpl)
		first := seq.Add(int64(len(at))) - int64(len(at))
		for i, off := range at {
			d := strconv.FormatInt(first+int64(i)+1, 10)
			copy(c.body[off+10-len(d):off+10], d)
		}
		rq := r.Clone(context.Background())
		rq.Body = io.NopCloser(bytes.NewReader(c.body))
		rq.ContentLength = int64(len(c.body))
		c.w.reset()
		srv.ServeHTTP(&c.w, rq)
		if c.w.code != http.StatusAccepted || c.w.h.Get("X-Ms-Error-Code") != "" {
			b.Errorf("status %d: %s", c.w.code, c.w.h.Get("X-Ms-Error-Code"))
		}
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(tmpl)))
	cpu := startCPU(b)
	if parallel {
		b.SetParallelism(16) // 32 clients on 2 cores
		b.RunParallel(func(pb *testing.PB) {
			c := &client{body: make([]byte, len(tmpl))}
			for pb.Next() {
				send(c)
			}
		})
	} else {
		c := &client{body: make([]byte, len(tmpl))}
		for b.Loop() {
			send(c)
		}
	}
	b.ReportMetric(float64(b.N)*100/b.Elapsed().Seconds(), "entities/s")
	cpu.report(100)
}

// cpuClock measures the process's CPU time over a benchmark loop. On a shared machine
// wall time per operation swings with other load, while CPU time per entity (all of the
// process's goroutines: handler, engine, garbage collector) is the cost the server pays.
type cpuClock struct {
	b     *testing.B
	start time.Duration
}

func startCPU(b *testing.B) cpuClock { return cpuClock{b, cputime.Process()} }

// report adds cpu-ns/entity, for entities per loop iteration.
func (c cpuClock) report(entities int) {
	if end := cputime.Process(); c.start >= 0 && end >= 0 && c.b.N > 0 {
		c.b.ReportMetric(float64(end-c.start)/float64(c.b.N*entities), "cpu-ns/entity")
	}
}

// discardWriter is the cheapest http.ResponseWriter: it counts the body, as a server
// connection would send it, instead of gathering it (httptest.ResponseRecorder's growing
// buffer would dominate a large response's profile).
type discardWriter struct {
	h    http.Header
	code int
	n    int
}

func (w *discardWriter) reset() { w.h, w.code, w.n = http.Header{}, 0, 0 }

func (w *discardWriter) Header() http.Header { return w.h }

func (w *discardWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *discardWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.n += len(p)
	return len(p), nil
}
