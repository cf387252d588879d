package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ceruleandb/cerulean/auth"
	"github.com/ceruleandb/cerulean/storage"
	"github.com/ceruleandb/cerulean/storage/pebble"
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
