package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ceruleandb/cerulean/internal/auth"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
)

// heldAtApply wraps an engine to note what the server's body budget holds when a write
// reaches the engine.
type heldAtApply struct {
	storage.Engine
	srv  *Server
	held atomic.Int64
}

func (e *heldAtApply) Apply(ctx context.Context, account, table, pk string, muts []storage.Mutation) (storage.Applied, error) {
	e.held.Store(e.srv.budget.used.Load())
	return e.Engine.Apply(ctx, account, table, pk, muts)
}

// TestBatchMemoryCounted (issue 42, item 27): a $batch of 100 inserts of 38 KB entities
// (3.8 MB) holds, while its transaction runs, its decoded entities and the answer that will
// echo them (about twice its body), and the budget says so; before, it counted the body
// alone. Once answered, it holds nothing.
func TestBatchMemoryCounted(t *testing.T) {
	eng, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	he := &heldAtApply{Engine: eng}
	srv, err := New(Options{Engine: he, Accounts: []auth.Account{auth.DevAccount()}, Limits: Limits{MaxBodyMemory: 256 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	he.srv = srv
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	if err := srv.tables.CreateTable(t.Context(), auth.DevAccountName, "tbl", nil); err != nil {
		t.Fatal(err)
	}
	s := strings.Repeat("x", 19000)
	var ops [][3]string
	for i := range 100 {
		ops = append(ops, [3]string{"POST", "/tbl", fmt.Sprintf(`{"PartitionKey":"p","RowKey":"%03d","A":"%s","B":"%s"}`, i, s, s)})
	}
	ct, body := batchBody(ops)
	r := signed(t, hs, http.MethodPost, "/$batch", body)
	r.Header.Set("Content-Type", ct)
	resp, out := do(t, r)
	if resp.StatusCode != http.StatusAccepted || strings.Count(string(out), "201 Created") != 100 {
		t.Fatalf("batch: %d, %d inserts answered 201", resp.StatusCode, strings.Count(string(out), "201 Created"))
	}
	held := he.held.Load()
	t.Logf("a %d-byte $batch held %d bytes of the body budget during its transaction; its answer is %d bytes", len(body), held, len(out))
	if held < int64(len(body))+int64(len(out))*9/10 {
		t.Errorf("the budget held %d bytes during the transaction, want at least the entities (%d bytes of JSON) and the answer (%d bytes)", held, len(body), len(out))
	}
	waitFor(t, "the budget to be returned", func() bool { return srv.budget.used.Load() == 0 })
}

// bulkHeld wraps an engine to note, when the first group of a bulk request reaches it,
// what the body budget holds and how much the Go heap holds live.
type bulkHeld struct {
	storage.Engine
	srv        *Server
	once       sync.Once
	held, live atomic.Int64
}

func (e *bulkHeld) ApplyEach(ctx context.Context, account, table, pk string, muts []storage.Mutation) (storage.Each, error) {
	e.once.Do(func() {
		e.live.Store(heapLive())
		e.held.Store(e.srv.budget.used.Load())
	})
	return e.Engine.ApplyEach(ctx, account, table, pk, muts)
}

// heapLive collects garbage and returns what the Go heap holds live (twice: what a
// sync.Pool holds goes at the second collection).
func heapLive() int64 {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// TestBulkMemoryNearBody (issue 42, item 27): while a bulk request is applied it holds
// its body, an index of its operations and room for the groups in flight, all counted
// against the body budget, and little more than its body in all: at most 1.4 times the
// body for 10,000 entities of 1 KiB (12 MB), and 3 times for 10,000 entities of ten small
// properties (2 MB), whose decoded form alone takes 5.4 times their JSON (measured: 1.36
// and 2.35). Decoded at once, the operations held 1.67 and 8.53 times their body. And the
// budget bounds what is really held: the heap holds no more live for the request than
// the budget counts (13.8 and 3.6 MB, the body included; 14.5 and 11.1 MB besides the
// body, decoded at once).
func TestBulkMemoryNearBody(t *testing.T) {
	for _, shape := range []struct {
		name   string
		entity func(i int) string
		most   float64
	}{
		{"1 KiB entities", func(i int) string {
			return fmt.Sprintf(`{"PartitionKey":"part%03d","RowKey":"%05d","Payload":"%s","N":%d}`, i%100, i, strings.Repeat("abcdefghij", 110), i)
		}, 1.4},
		{"ten small properties", func(i int) string {
			var b strings.Builder
			fmt.Fprintf(&b, `{"PartitionKey":"p%02d","RowKey":"%05d"`, i%100, i)
			for j := range 10 {
				fmt.Fprintf(&b, `,"Prop%02d":%d`, j, i*j)
			}
			b.WriteString("}")
			return b.String()
		}, 3},
	} {
		t.Run(shape.name, func(t *testing.T) {
			eng, err := pebble.Open(t.TempDir(), pebble.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { eng.Close() })
			he := &bulkHeld{Engine: eng}
			// A budget large enough for the body limit to pass 12 MB whatever it is.
			srv, err := New(Options{Engine: he, Accounts: []auth.Account{auth.DevAccount()}, Limits: Limits{MaxBodyMemory: 256 << 20}})
			if err != nil {
				t.Fatal(err)
			}
			he.srv = srv
			hs := httptest.NewServer(srv)
			t.Cleanup(hs.Close)
			if err := eng.CreateTable(t.Context(), auth.DevAccountName, "elastic", storage.TableSettings{Elastic: true}); err != nil {
				t.Fatal(err)
			}
			var sb strings.Builder
			sb.WriteString(`{"operations":[`)
			for i := range 10_000 {
				if i > 0 {
					sb.WriteByte(',')
				}
				fmt.Fprintf(&sb, `{"op":"upsert","entity":%s}`, shape.entity(i))
			}
			sb.WriteString(`]}`)
			body := []byte(sb.String())
			sb.Reset()
			base := heapLive()
			r := signed(t, hs, http.MethodPost, "/elastic?comp=bulk", body)
			resp, out := do(t, r)
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(out[:min(len(out), 100)]), `"failed":0`) {
				t.Fatalf("bulk: %d %.300s", resp.StatusCode, out)
			}
			held, live := he.held.Load(), he.live.Load()-base
			t.Logf("a %d-byte bulk request held %d bytes of the budget (%.2f times its body) while applied; the heap held %d bytes more than before", len(body), held, float64(held)/float64(len(body)), live)
			if float64(held) > shape.most*float64(len(body)) {
				t.Errorf("held %d bytes, %.2f times the body; want at most %.1f times", held, float64(held)/float64(len(body)), shape.most)
			}
			if live > held {
				t.Errorf("the heap held %d bytes more than before, more than the %d bytes the budget counts", live, held)
			}
			waitFor(t, "the budget to be returned", func() bool { return srv.budget.used.Load() == 0 })
		})
	}
}
