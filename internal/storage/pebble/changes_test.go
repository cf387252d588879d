package pebble

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// TestChangesHorizon is the classic gap: an Apply takes its record's number and stalls
// before its commit while a later Apply (another row) commits with the next number. A
// reader must not be shown the later record yet — it would resume after it and never see
// the first — and once the first commits, it reads both, in number order.
func TestChangesHorizon(t *testing.T) {
	ctx := context.Background()
	e := openTest(t, t.TempDir(), Options{})
	if err := e.CreateTable(ctx, "a", "T", storage.TableSettings{ChangeFeed: 60}); err != nil {
		t.Fatal(err)
	}
	paused, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	testHookBeforeCommit = func() {
		if calls.Add(1) == 1 { // the first Apply only (a sync.Once would hold the second too)
			close(paused)
			<-release
		}
	}
	defer func() { testHookBeforeCommit = nil }()
	first := make(chan error, 1)
	go func() {
		_, err := e.Apply(ctx, "a", "T", "p1", []storage.Mutation{{Op: storage.Insert, RowKey: "first"}})
		first <- err
	}()
	<-paused
	if _, err := e.Apply(ctx, "a", "T", "p2", []storage.Mutation{{Op: storage.Insert, RowKey: "second"}}); err != nil {
		t.Fatal(err)
	}
	p, err := e.ReadChanges(ctx, "a", "T", storage.ChangesRequest{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Changes) != 0 || p.Next != 1 {
		close(release)
		t.Fatalf("with the first record in flight a read returned %d records and Next %d; want none and 1", len(p.Changes), p.Next)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	p, err = e.ReadChanges(ctx, "a", "T", storage.ChangesRequest{After: p.Next, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Changes) != 2 || p.Changes[0].RowKey != "first" || p.Changes[1].RowKey != "second" || p.Next != p.Changes[1].Seq {
		t.Fatalf("after the commit: %+v", p)
	}
}

// TestChangesFailedCommitHole: a batch that fails after taking its numbers leaves a hole
// the horizon passes, and the numbers are not handed out again.
func TestChangesFailedCommitHole(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := openTest(t, t.TempDir(), Options{})
	if err := e.CreateTable(ctx, "a", "T", storage.TableSettings{ChangeFeed: 60}); err != nil {
		t.Fatal(err)
	}
	tb, _ := e.lookup("a", "T")
	f := tb.feed
	n := f.take(2)
	f.finish(n) // as a failed commit does
	if _, err := e.Apply(ctx, "a", "T", "p", []storage.Mutation{{Op: storage.Insert, RowKey: "r"}}); err != nil {
		t.Fatal(err)
	}
	p, err := e.ReadChanges(ctx, "a", "T", storage.ChangesRequest{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Changes) != 1 || p.Changes[0].Seq != n+2 || p.Next != n+2 {
		t.Fatalf("after a hole of 2: %+v", p)
	}
}

// TestChangesNoExtraWrites: a table without the feed writes no feed key and leaves the
// store at the format a build without feeds opens; turning a feed on marks the store.
func TestChangesNoExtraWrites(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e := openTest(t, dir, Options{})
	if err := e.CreateTable(ctx, "a", "Plain", storage.TableSettings{Elastic: true, DefaultTTL: 1}); err != nil {
		t.Fatal(err)
	}
	for _, op := range []storage.Op{storage.Insert, storage.Merge, storage.InsertOrReplace, storage.Delete} {
		if _, err := e.Apply(ctx, "a", "Plain", "p", []storage.Mutation{{Op: op, RowKey: "r", Props: []entity.Property{{Name: "S", Value: entity.StringValue("x")}}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.ApplyEach(ctx, "a", "Plain", "p", []storage.Mutation{{Op: storage.Insert, RowKey: "s"}}); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, e, []byte{kindFeed}, []byte{kindFeed + 1}); n != 0 {
		t.Fatalf("a table without the feed left %d feed keys", n)
	}
	if f := storedFormat(t, e); f != formatBase {
		t.Fatalf("store format %d without feeds, want %d", f, formatBase)
	}
	if err := e.DeleteTable(ctx, "a", "Plain"); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, e, []byte{kindFeed}, []byte{kindFeed + 1}); n != 0 {
		t.Fatalf("deleting a table without the feed left %d feed keys", n)
	}
	if err := e.CreateTable(ctx, "a", "Feed", storage.TableSettings{ChangeFeed: 1}); err != nil {
		t.Fatal(err)
	}
	if f := storedFormat(t, e); f != formatVersion {
		t.Fatalf("store format %d with a feed, want %d", f, formatVersion)
	}
	// A restart keeps the mark: a build without feeds must refuse the store.
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openTest(t, dir, Options{})
	if f := storedFormat(t, e); f != formatVersion {
		t.Fatalf("store format %d after a restart, want %d", f, formatVersion)
	}
}

func storedFormat(t *testing.T, e *Engine) uint64 {
	t.Helper()
	v, closer, err := e.db.Get(metaFormat)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	return binary.BigEndian.Uint64(v)
}

// BenchmarkApplyChangeFeed compares synced single inserts (32 writers, one table) and
// 100-entity batches (8 writers) with the table's change feed off and on: the issue's
// goal is a ratio of at least 0.85. Compare the inserts/s (entities/s) of feed=off and
// feed=on of one run.
func BenchmarkApplyChangeFeed(b *testing.B) {
	for _, shape := range []struct {
		name    string
		writers int
		batch   int
	}{{"single/writers=32", 32, 1}, {"batch100/writers=8", 8, 100}} {
		for _, feed := range []int32{0, 3600} {
			b.Run(fmt.Sprintf("%s/feed=%v", shape.name, map[bool]string{false: "off", true: "on"}[feed > 0]), func(b *testing.B) {
				e := openTest(b, b.TempDir(), Options{})
				ctx := context.Background()
				if err := e.CreateTable(ctx, "bench", "F", storage.TableSettings{ChangeFeed: feed}); err != nil {
					b.Fatal(err)
				}
				var writer atomic.Int64
				b.SetParallelism(max(1, shape.writers/runtime.GOMAXPROCS(0)))
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					w := writer.Add(1)
					for i := 0; pb.Next(); i++ {
						pk := fmt.Sprintf("w%03d-%04d", w, i/100)
						muts := make([]storage.Mutation, shape.batch)
						for j := range muts {
							n := i*shape.batch + j
							muts[j] = storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprintf("r%08d", n), Props: benchProps(n)}
						}
						if _, err := e.Apply(ctx, "bench", "F", pk, muts); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N*shape.batch)/b.Elapsed().Seconds(), "entities/s")
			})
		}
	}
}
