package table

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
)

// fullEngine refuses every Apply as an engine on a full disk does.
type fullEngine struct{ storage.Engine }

func (fullEngine) Apply(context.Context, string, string, string, []storage.Mutation) (storage.Applied, error) {
	return storage.Applied{}, fmt.Errorf("apply: disk full: %w", storage.ErrNoSpace)
}

// TestDiskFullIsServerBusy: a write refused for a full disk is 503 ServerBusy (retried by
// the SDKs) saying the disk is full, and it does not mark the engine unreachable: reads
// are still served, so health stays good and nothing is logged per request.
func TestDiskFullIsServerBusy(t *testing.T) {
	eng, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	s := New(fullEngine{eng}, nil)
	ctx := context.Background()
	if err := s.CreateTable(ctx, "acct", "full", nil); err != nil {
		t.Fatal(err)
	}
	e := &entity.Entity{PartitionKey: "p", RowKey: "r"}
	_, err = s.InsertEntity(ctx, "acct", "full", e)
	ae, _ := azerr.As(err)
	if ae.Code != azerr.ServerBusy || ae.Status != 503 || !strings.Contains(ae.Detail, "disk is full") {
		t.Fatalf("insert on a full disk = %v, want 503 ServerBusy saying the disk is full", err)
	}
	_, err = s.Transact(ctx, "acct", "full", []BatchOp{{Op: storage.Insert, Entity: *e}})
	if be, ok := err.(*BatchError); !ok || be.Err.Code != azerr.ServerBusy || !strings.Contains(be.Err.Detail, "disk is full") {
		t.Fatalf("batch on a full disk = %v, want 503 ServerBusy saying the disk is full", err)
	}
	if ok, _ := s.Health(); !ok {
		t.Error("a full disk marked the engine unreachable")
	}
	if _, _, err := s.GetEntity(ctx, "acct", "full", "p", "r", Read{}); err == nil || !strings.Contains(err.Error(), "ResourceNotFound") {
		t.Errorf("read on a full disk = %v, want ResourceNotFound", err)
	}
}
