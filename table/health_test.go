package table

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/ceruleandb/cerulean/azerr"
	"github.com/ceruleandb/cerulean/storage"
	"github.com/ceruleandb/cerulean/storage/pebble"
)

// flakyEngine fails every Get with ErrUnavailable while down is set, as an engine does
// when its database cannot be reached.
type flakyEngine struct {
	storage.Engine
	down atomic.Bool
}

func (f *flakyEngine) Get(ctx context.Context, account, table, pk, rk string) (storage.Record, error) {
	if f.down.Load() {
		return storage.Record{}, fmt.Errorf("get: dial tcp: connection refused: %w", storage.ErrUnavailable)
	}
	return f.Engine.Get(ctx, account, table, pk, rk)
}

func TestHealthFollowsEngine(t *testing.T) {
	eng, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	fe := &flakyEngine{Engine: eng}
	s := New(fe, nil)
	ctx := context.Background()
	if err := s.CreateTable(ctx, "acct", "health", nil); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.Health(); !ok {
		t.Fatal("unhealthy at start")
	}

	fe.down.Store(true)
	for i := 0; i < 3; i++ {
		_, err := s.GetEntity(ctx, "acct", "health", "p", "r", 0)
		if ae, _ := azerr.As(err); ae.Code != azerr.ServerBusy || ae.Status != 503 {
			t.Fatalf("GetEntity while down = %v, want 503 ServerBusy", err)
		}
	}
	ok, since := s.Health()
	if ok || since.IsZero() {
		t.Fatalf("Health while down = %v, %v", ok, since)
	}

	fe.down.Store(false)
	// A not-found answer is an answer: the engine is reachable again.
	if _, err := s.GetEntity(ctx, "acct", "health", "p", "r", 0); err == nil {
		t.Fatal("GetEntity of a missing entity succeeded")
	}
	if ok, _ := s.Health(); !ok {
		t.Fatal("still unhealthy after the engine answered")
	}
}
