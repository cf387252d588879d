package table

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
)

// flakyEngine fails every Get (of its views, which serve reads) with ErrUnavailable
// while down is set, as an engine does when its database cannot be reached.
type flakyEngine struct {
	storage.Engine
	down atomic.Bool
}

func (f *flakyEngine) ReadView(ctx context.Context, opts storage.ReadOptions) (storage.View, error) {
	v, err := f.Engine.ReadView(ctx, opts)
	if err != nil {
		return nil, err
	}
	return flakyView{v, f}, nil
}

type flakyView struct {
	storage.View
	f *flakyEngine
}

func (v flakyView) Get(ctx context.Context, account, table, pk, rk string) (storage.Record, error) {
	if v.f.down.Load() {
		return storage.Record{}, fmt.Errorf("get: dial tcp: connection refused: %w", storage.ErrUnavailable)
	}
	return v.View.Get(ctx, account, table, pk, rk)
}

func (v flakyView) GetEncoded(ctx context.Context, account, table, pk, rk string) (storage.Record, error) {
	if v.f.down.Load() {
		return storage.Record{}, fmt.Errorf("get: dial tcp: connection refused: %w", storage.ErrUnavailable)
	}
	return v.View.GetEncoded(ctx, account, table, pk, rk)
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
		_, _, err := s.GetEntity(ctx, "acct", "health", "p", "r", Read{})
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
	if _, _, err := s.GetEntity(ctx, "acct", "health", "p", "r", Read{}); err == nil {
		t.Fatal("GetEntity of a missing entity succeeded")
	}
	if ok, _ := s.Health(); !ok {
		t.Fatal("still unhealthy after the engine answered")
	}
}
