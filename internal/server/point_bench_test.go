package server

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/cputime"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
)

// The point benchmarks measure the server's own work per Get Entity and per synced Insert
// Entity of the entity `cerulean bench` writes (about 1 KiB: a 1,024-character payload and
// five typed properties), on real Pebble with synced commits, with the headers the Go SDK
// sends. They call ServeHTTP directly with a reusable ResponseWriter, so what they count
// is the handler path (authentication to encoding), not net/http's.

// measureCPU resets the benchmark's timer and starts counting the process's CPU time;
// the function it returns stops the timer and reports that time per operation as
// cpu-ns/op: what an operation costs the machine (Pebble's background work included),
// which for a synced write is far less than its latency (ns/op), mostly the fsync's wait.
func measureCPU(b *testing.B) (stop func()) {
	b.ReportAllocs()
	b.ResetTimer()
	start := cputime.Process()
	return func() {
		b.StopTimer()
		b.ReportMetric(float64(cputime.Process()-start)/float64(b.N), "cpu-ns/op")
	}
}

// benchWriter is a ResponseWriter that keeps only the status and the body size; reset
// empties its header map for the next request, as a fresh net/http response has.
type benchWriter struct {
	h    http.Header
	code int
	n    int
}

func newBenchWriter() *benchWriter { return &benchWriter{h: make(http.Header, 16)} }

func (w *benchWriter) Header() http.Header { return w.h }
func (w *benchWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *benchWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	w.n += len(p)
	return len(p), nil
}

// SetReadDeadline and SetWriteDeadline accept the deadlines the server puts on the
// connection, as net/http's own ResponseWriter does (http.ResponseController).
func (w *benchWriter) SetReadDeadline(time.Time) error  { return nil }
func (w *benchWriter) SetWriteDeadline(time.Time) error { return nil }

func (w *benchWriter) reset() {
	clear(w.h)
	w.code, w.n = 0, 0
}

// payload1KiB is the bench's 1,024 alphanumerics.
var payload1KiB = benchPayload(1024)

// appendBenchEntity appends the JSON body the Go SDK sends for the bench's entity.
func appendBenchEntity(b []byte, pk, rk string, worker int, seq int64) []byte {
	b = append(b, `{"PartitionKey":"`...)
	b = append(b, pk...)
	b = append(b, `","RowKey":"`...)
	b = append(b, rk...)
	b = append(b, `","Payload":"`...)
	b = append(b, payload1KiB...)
	b = append(b, `","Worker":`...)
	b = strconv.AppendInt(b, int64(worker), 10)
	b = append(b, `,"Seq":"`...)
	b = strconv.AppendInt(b, seq, 10)
	b = append(b, `","Seq@odata.type":"Edm.Int64","Ratio":`...)
	b = strconv.AppendFloat(b, float64(seq)/7+0.5, 'g', -1, 64)
	b = append(b, `,"Flag":`...)
	b = strconv.AppendBool(b, seq%2 == 0)
	b = append(b, `,"Created":"2026-11-24T21:38:08.1234567Z","Created@odata.type":"Edm.DateTime"}`...)
	return b
}

// sdkRequest is a request as the Go SDK (aztables) sends it, signed SharedKeyLite.
func sdkRequest(tb testing.TB, method, rawURL string, body []byte) *http.Request {
	tb.Helper()
	r := httptest.NewRequest(method, rawURL, bytes.NewReader(body))
	r.Host = "127.0.0.1:10002"
	h := r.Header
	h["Accept"] = []string{"application/json;odata=minimalmetadata"}
	h["Dataserviceversion"] = []string{"3.0"}
	h["X-Ms-Version"] = []string{"2019-02-02"}
	h["Accept-Encoding"] = []string{"gzip"}
	h["User-Agent"] = []string{"azsdk-go-aztables/v1.4.1 (go1.26.8; linux)"}
	if body != nil {
		h["Content-Type"] = []string{"application/json"}
	}
	acct := auth.DevAccount()
	auth.SignRequest(r, auth.SchemeSharedKeyLite, acct.Name, acct.Keys[0], time.Now())
	return r
}

// bodyReader is a reusable request body.
type bodyReader struct{ bytes.Reader }

func (*bodyReader) Close() error { return nil }

// inserter posts bench entities with keys unique across inserters.
type inserter struct {
	srv  *Server
	tmpl *http.Request
	w    *benchWriter
	body []byte
	rd   bodyReader
	pk   string
	n    int
}

func newInserter(srv *Server, tmpl *http.Request, worker int64) *inserter {
	return &inserter{srv: srv, tmpl: tmpl, w: newBenchWriter(), pk: "w" + strconv.FormatInt(worker, 10)}
}

func (in *inserter) insert(tb testing.TB) {
	in.n++
	rk := strconv.Itoa(in.n)
	in.body = appendBenchEntity(in.body[:0], in.pk, rk, 7, int64(in.n))
	in.rd.Reset(in.body)
	r := *in.tmpl
	r.Body = &in.rd
	r.ContentLength = int64(len(in.body))
	in.w.reset()
	in.srv.ServeHTTP(in.w, &r)
	if in.w.code != http.StatusCreated {
		tb.Fatalf("insert: status %d", in.w.code)
	}
}

func insertTemplate(tb testing.TB) *http.Request {
	return sdkRequest(tb, http.MethodPost, "/devstoreaccount1/bench", []byte("{}"))
}

// BenchmarkInsertEntity is one synced Insert Entity (201 with the entity, as the SDK does
// not send Prefer) at a time.
func BenchmarkInsertEntity(b *testing.B) {
	srv, _ := pebbleServer(b, "bench")
	in := newInserter(srv, insertTemplate(b), 0)
	stop := measureCPU(b)
	for b.Loop() {
		in.insert(b)
	}
	stop()
}

// BenchmarkInsertEntityParallel is synced inserts from 32 concurrent requests, the
// server's load under the bench; commits group into shared fsyncs.
func BenchmarkInsertEntityParallel(b *testing.B) {
	srv, _ := pebbleServer(b, "bench")
	tmpl := insertTemplate(b)
	var worker atomic.Int64
	b.SetParallelism(16) // 32 goroutines on 2 cores
	stop := measureCPU(b)
	b.RunParallel(func(pb *testing.PB) {
		in := newInserter(srv, tmpl, worker.Add(1))
		for pb.Next() {
			in.insert(b)
		}
	})
	stop()
}

// loadBench inserts n bench entities (partition "p", row keys 0..n-1) through the server
// and, when flushed, reopens the engine so that they are read from sstables (Pebble
// flushes the replayed log on open) rather than the memtable.
func loadBench(b *testing.B, n int, flushed bool, opts pebble.Options) *Server {
	b.Helper()
	dir := b.TempDir()
	eng, err := pebble.Open(dir, opts)
	if err != nil {
		b.Fatal(err)
	}
	srv, err := New(Options{Engine: eng, Accounts: []auth.Account{auth.DevAccount()}})
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.tables.CreateTable(context.Background(), auth.DevAccount().Name, "bench", nil); err != nil {
		b.Fatal(err)
	}
	// Many writers at once, so the synced commits group.
	tmpl := insertTemplate(b)
	const writers = 32
	done := make(chan struct{})
	for w := range writers {
		go func() {
			defer func() { done <- struct{}{} }()
			in := newInserter(srv, tmpl, 0)
			in.pk = "p"
			in.n = w * (n / writers)
			for range n / writers {
				in.insert(b)
			}
		}()
	}
	for range writers {
		<-done
	}
	if flushed {
		if err := eng.Close(); err != nil {
			b.Fatal(err)
		}
		if eng, err = pebble.Open(dir, opts); err != nil {
			b.Fatal(err)
		}
		if srv, err = New(Options{Engine: eng, Accounts: []auth.Account{auth.DevAccount()}}); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() { eng.Close() })
	return srv
}

// getBench reads random bench entities among the n loaded; each goroutine has its own
// signed requests (one per key it reads), built before the timer starts.
func getBench(b *testing.B, srv *Server, n int, parallel bool) {
	const keys = 256
	reqs := make([]*http.Request, keys)
	for i := range reqs {
		rk := strconv.Itoa(1 + int(uint64(i)*0x9E3779B97F4A7C15>>33)%n)
		reqs[i] = sdkRequest(b, http.MethodGet, "/devstoreaccount1/bench(PartitionKey='p',RowKey='"+rk+"')", nil)
	}
	get := func(w *benchWriter, i int) {
		w.reset()
		srv.ServeHTTP(w, reqs[i%keys])
		if w.code != http.StatusOK {
			b.Fatalf("get: status %d", w.code)
		}
	}
	b.SetParallelism(16)
	stop := measureCPU(b)
	defer stop()
	if !parallel {
		w := newBenchWriter()
		for i := 0; b.Loop(); i++ {
			get(w, i)
		}
		return
	}
	var seed atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		w := newBenchWriter()
		for i := int(seed.Add(97)); pb.Next(); i++ {
			get(w, i)
		}
	})
}

// BenchmarkGetEntityBench reads the bench's 1 KiB entities: from the memtable (5,000
// entities, within the 16 MiB memtable), and from sstables (20,000 entities, about 20
// MiB: Bloom filters, the block cache and blob files are on the path), one at a time and
// from 32 concurrent requests. The "inline" cases keep values in the sstables (value
// separation off), to weigh what separation (pebble.DefaultValueSeparationMinSize) costs
// a read against what it saves sustained writes.
func BenchmarkGetEntityBench(b *testing.B) {
	inline := pebble.Options{ValueSeparationMinSize: -1}
	for _, c := range []struct {
		name     string
		n        int
		flushed  bool
		parallel bool
		opts     pebble.Options
	}{
		{"memtable", 5000, false, false, pebble.Options{}},
		{"memtable/parallel", 5000, false, true, pebble.Options{}},
		{"sst", 20000, true, false, pebble.Options{}},
		{"sst/parallel", 20000, true, true, pebble.Options{}},
		{"sst-inline", 20000, true, false, inline},
		{"sst-inline/parallel", 20000, true, true, inline},
	} {
		b.Run(c.name, func(b *testing.B) {
			getBench(b, loadBench(b, c.n, c.flushed, c.opts), c.n, c.parallel)
		})
	}
}
