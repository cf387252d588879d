package pebble

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	pebbledb "github.com/cockroachdb/pebble/v2"
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
	if f := storedFormat(t, e); f != formatLean {
		t.Fatalf("store format %d with a feed, want %d", f, formatLean)
	}
	// A restart keeps the mark: a build without feeds must refuse the store.
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openTest(t, dir, Options{})
	if f := storedFormat(t, e); f != formatLean {
		t.Fatalf("store format %d after a restart, want %d", f, formatLean)
	}
}

// TestChangesFormatUpgrade: a store marked with format 3 (feeds whose records all hold
// their state) is marked 4 when this build opens it, before any of its writes can leave
// a row referring to a lean record, so that a format-3 build then refuses it.
func TestChangesFormatUpgrade(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e := openTest(t, dir, Options{})
	if err := e.CreateTable(ctx, "a", "F", storage.TableSettings{ChangeFeed: 60}); err != nil {
		t.Fatal(err)
	}
	if err := e.db.Set(metaFormat, binary.BigEndian.AppendUint64(nil, formatFeeds), pebbledb.Sync); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openTest(t, dir, Options{})
	if f := storedFormat(t, e); f != formatLean {
		t.Fatalf("a format-%d store reopened at format %d, want %d", formatFeeds, f, formatLean)
	}
	if formatLean <= formatFeeds {
		t.Fatalf("format %d: lean records need a format above %d's", formatLean, formatFeeds)
	}
}

// rowValue is the stored value of a row.
func rowValue(t *testing.T, e *Engine, table, pk, rk string) []byte {
	t.Helper()
	tb, err := e.lookup("a", table)
	if err != nil {
		t.Fatal(err)
	}
	v, closer, err := e.db.Get(dataKey(tb.id, pk, rk))
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	return bytes.Clone(v)
}

// TestChangesLean: a write recorded by the feed stores its state once — the record
// leaves it to the row, which refers to the record — and a later write fills the record
// from the row, also with the feed turned off meanwhile: read from the beginning, every
// record still has its own state.
func TestChangesLean(t *testing.T) {
	ctx := context.Background()
	e := openTest(t, t.TempDir(), Options{})
	if err := e.CreateTable(ctx, "a", "F", storage.TableSettings{ChangeFeed: 60}); err != nil {
		t.Fatal(err)
	}
	props := func(s string) []entity.Property {
		return []entity.Property{{Name: "S", Value: entity.StringValue(s)}}
	}
	// An insert then a merge of one row in one batch: the insert's record holds its own
	// (intermediate) state, the merge's is lean.
	if _, err := e.Apply(ctx, "a", "F", "p", []storage.Mutation{
		{Op: storage.Insert, RowKey: "r", Props: props("one")},
		{Op: storage.Merge, RowKey: "r", Props: []entity.Property{{Name: "T", Value: entity.Int32Value(2)}}},
	}); err != nil {
		t.Fatal(err)
	}
	if seq, _ := valueRef(rowValue(t, e, "F", "p", "r")); seq == 0 {
		t.Fatal("a row written with the feed on does not refer to its record")
	}
	set := func(feed int32) {
		t.Helper()
		if err := e.SetTableSettings(ctx, "a", "F", storage.TableSettings{ChangeFeed: feed}); err != nil {
			t.Fatal(err)
		}
	}
	set(0)
	if _, err := e.Apply(ctx, "a", "F", "p", []storage.Mutation{{Op: storage.Replace, RowKey: "r", Props: props("two")}}); err != nil {
		t.Fatal(err)
	}
	if seq, _ := valueRef(rowValue(t, e, "F", "p", "r")); seq != 0 {
		t.Fatal("a row written with the feed off refers to a record")
	}
	set(60)
	if _, err := e.Apply(ctx, "a", "F", "p", []storage.Mutation{{Op: storage.InsertOrReplace, RowKey: "r", Props: props("three")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Apply(ctx, "a", "F", "p", []storage.Mutation{{Op: storage.Delete, RowKey: "r"}}); err != nil {
		t.Fatal(err)
	}
	p, err := e.ReadChanges(ctx, "a", "F", storage.ChangesRequest{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range p.Changes {
		got = append(got, fmt.Sprintf("%v %v", c.Op, c.Props))
	}
	want := []string{
		fmt.Sprintf("%v %v", storage.ChangeOp(storage.Insert), props("one")),
		fmt.Sprintf("%v %v", storage.ChangeOp(storage.Merge), append(props("one"), entity.Property{Name: "T", Value: entity.Int32Value(2)})),
		fmt.Sprintf("%v []", storage.ChangeFeedOff),
		fmt.Sprintf("%v %v", storage.ChangeOp(storage.InsertOrReplace), props("three")),
		fmt.Sprintf("%v []", storage.ChangeOp(storage.Delete)),
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("records:\n%q\nwant\n%q", got, want)
	}
}

// TestChangesLeanTrimmed: a row whose lean record retention has removed is written
// again: the write must not fill the record back in below the retention mark.
func TestChangesLeanTrimmed(t *testing.T) {
	ctx := context.Background()
	var now atomic.Int64
	now.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := storage.NewClock(func() time.Time { return time.Unix(0, now.Load()) })
	e := openTest(t, t.TempDir(), Options{Clock: clock, ExpiryInterval: -1})
	if err := e.CreateTable(ctx, "a", "F", storage.TableSettings{ChangeFeed: 60}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Apply(ctx, "a", "F", "p", []storage.Mutation{{Op: storage.Insert, RowKey: "r"}}); err != nil {
		t.Fatal(err)
	}
	now.Add(int64(2 * time.Minute))
	if n, err := e.TrimChanges(ctx); err != nil || n != 1 {
		t.Fatalf("TrimChanges = %d, %v; want 1", n, err)
	}
	if _, err := e.Apply(ctx, "a", "F", "p", []storage.Mutation{{Op: storage.Replace, RowKey: "r"}}); err != nil {
		t.Fatal(err)
	}
	tb, _ := e.lookup("a", "F")
	if n := countKeys(t, e, feedKey(tb.id, 1), feedPrefix(tb.id+1)); n != 1 {
		t.Fatalf("the feed holds %d records, want the replace's only", n)
	}
	p, err := e.ReadChanges(ctx, "a", "F", storage.ChangesRequest{Limit: 10})
	if err != nil || len(p.Changes) != 1 || p.Changes[0].Op != storage.ChangeOp(storage.Replace) {
		t.Fatalf("ReadChanges = %+v, %v; want the replace", p, err)
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
// feed=on of one run; WAL-B/entity is the bytes each entity cost the write-ahead log.
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
				b.ReportMetric(float64(e.db.Metrics().WAL.BytesWritten)/float64(b.N*shape.batch), "WAL-B/entity")
			})
		}
	}
}

// BenchmarkChangeFeedReads compares the reads of a table of 50,000 entities (~50 MiB,
// more than the block cache) with its change feed off and on (its rows then refer to
// their records, leanRecord): point reads at random without the row cache, pages of
// 1,000 of a scan, and, with the feed on, pages of 1,000 records of the feed read from
// the beginning (changes/s).
func BenchmarkChangeFeedReads(b *testing.B) {
	const n = 50_000
	ctx := context.Background()
	for _, feed := range []int32{0, 3600} {
		name := map[bool]string{false: "off", true: "on"}[feed > 0]
		e := openTest(b, b.TempDir(), Options{RowCacheSize: -1})
		if err := e.CreateTable(ctx, "bench", "T", storage.TableSettings{ChangeFeed: feed}); err != nil {
			b.Fatal(err)
		}
		load2(b, e, n)
		b.Run("get/feed="+name, func(b *testing.B) {
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i = (i*7919 + 104729) % n
					if _, err := e.GetEncoded(ctx, "bench", "T", fmt.Sprintf("p%06d", i/100), fmt.Sprintf("r%03d", i%100)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "gets/s")
		})
		b.Run("scan/feed="+name, func(b *testing.B) {
			start := storage.Key{}
			for range b.N {
				res, err := e.Scan(ctx, "bench", "T", storage.ScanRequest{Start: start, Limit: 1000})
				if err != nil {
					b.Fatal(err)
				}
				if start = (storage.Key{}); res.Next != nil {
					start = *res.Next
				}
			}
			b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "entities/s")
		})
		if feed == 0 {
			continue
		}
		b.Run("changes", func(b *testing.B) {
			after := uint64(0)
			for range b.N {
				p, err := e.ReadChanges(ctx, "bench", "T", storage.ChangesRequest{After: after, Limit: 1000})
				if err != nil {
					b.Fatal(err)
				}
				if after = p.Next; len(p.Changes) < 1000 {
					after = 0
				}
			}
			b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "changes/s")
		})
	}
}
