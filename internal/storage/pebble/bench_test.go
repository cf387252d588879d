package pebble

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/cputime"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/cockroachdb/pebble/v2/sstable"
)

// textPool is random text: entities cut from it compress about as badly as real text
// does, so the benchmarks do not flatter the engine with repetitive data.
var textPool = func() string {
	rnd := rand.New(rand.NewPCG(1, 2))
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789     ,."
	b := make([]byte, 1<<20)
	for i := range b {
		b[i] = letters[rnd.IntN(len(letters))]
	}
	return string(b)
}()

func text(i, n int) string {
	off := int(uint64(i)*0x9E3779B97F4A7C15>>40) % (len(textPool) - n)
	return textPool[off : off+n]
}

// benchProps is a typical ~1 KiB entity: a few strings, numbers, a date, a GUID.
func benchProps(i int) []entity.Property {
	return []entity.Property{
		{Name: "Name", Value: entity.StringValue(fmt.Sprintf("customer %d", i))},
		{Name: "Email", Value: entity.StringValue(fmt.Sprintf("customer%d@example.com", i))},
		{Name: "Address", Value: entity.StringValue(text(i, 200))},
		{Name: "Notes", Value: entity.StringValue(text(i+1, 650))},
		{Name: "Age", Value: entity.Int32Value(int32(i % 100))},
		{Name: "Balance", Value: entity.DoubleValue(float64(i) * 1.25)},
		{Name: "Orders", Value: entity.Int64Value(int64(i) * 7)},
		{Name: "Active", Value: entity.BoolValue(i%2 == 0)},
		{Name: "Since", Value: entity.Value{Type: entity.DateTime, Int: 638000000000000000 + int64(i)}},
		{Name: "Id", Value: entity.GUIDValue([16]byte{byte(i), byte(i >> 8), byte(i >> 16), 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})},
	}
}

func benchEngine(b *testing.B, opts ...Options) *Engine {
	b.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	e := openTest(b, b.TempDir(), o)
	if os.Getenv("CERULEAN_BENCH_METRICS") != "" {
		b.Cleanup(func() { fmt.Fprintln(os.Stderr, e.db.Metrics().String()) })
	}
	if err := e.CreateTable(context.Background(), "bench", "T", storage.TableSettings{}); err != nil {
		b.Fatal(err)
	}
	return e
}

// BenchmarkApplyInsert measures synced single-entity inserts of ~1 KiB entities from many
// concurrent writers (each in its own partitions), the shape of a loaded server. The
// inserts/s metric is the figure to compare with the 30,000/s target.
func BenchmarkApplyInsert(b *testing.B) {
	for _, conc := range []int{1, 32, 128} {
		b.Run(fmt.Sprintf("writers=%d", conc), func(b *testing.B) {
			e := benchEngine(b)
			ctx := context.Background()
			size := len(entity.AppendProps(nil, benchProps(123456)))
			b.SetBytes(int64(size))
			var writer atomic.Int64
			b.SetParallelism(max(1, conc/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				w := writer.Add(1)
				for i := 0; pb.Next(); i++ {
					pk := fmt.Sprintf("w%03d-%04d", w, i/1000)
					muts := []storage.Mutation{{Op: storage.Insert, RowKey: fmt.Sprintf("r%08d", i), Props: benchProps(i)}}
					if _, err := e.Apply(ctx, "bench", "T", pk, muts); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "inserts/s")
		})
	}
}

// BenchmarkApplyBatch measures 100-entity batches (an entity group transaction) from
// concurrent writers, each in partitions of its own. Their rows share lock stripes (each
// batch takes ~100 of the 4,096), which is what commitReleasing keeps from serializing
// them on WAL syncs: compare writers=32 with writers=1.
func BenchmarkApplyBatch(b *testing.B) {
	for _, conc := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("writers=%d", conc), func(b *testing.B) {
			applyBatches(b, benchEngine(b), conc)
			b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "entities/s")
		})
	}
}

// BenchmarkApplyUpsert measures upserts of existing ~1 KiB entities (InsertOrReplace and
// InsertOrMerge, which reads and decodes the stored properties) from 32 concurrent
// writers, among 10,000 loaded ones: rows=1 is a single upsert of a random row, rows=100
// a batch over a whole partition (a random one of the 100). op=get+replace is a point
// read then a Replace If-Match its version (a client's read-modify-write), timed
// together.
func BenchmarkApplyUpsert(b *testing.B) {
	const n = 10_000
	for _, c := range []struct {
		op   storage.Op
		get  bool
		rows []int
	}{{storage.InsertOrReplace, false, []int{1, 100}}, {storage.InsertOrMerge, false, []int{1, 100}}, {storage.Replace, true, []int{1}}} {
		name := c.op.String()
		if c.get {
			name = "get+" + name
		}
		for _, rows := range c.rows {
			b.Run(fmt.Sprintf("op=%s/rows=%d", name, rows), func(b *testing.B) {
				e := benchEngine(b)
				load(b, e, n)
				ctx := context.Background()
				b.SetParallelism(16)
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					rnd := rand.New(rand.NewPCG(rand.Uint64(), 0))
					for pb.Next() {
						i := rnd.IntN(n)
						pk := fmt.Sprintf("p%06d", i/100)
						muts := make([]storage.Mutation, rows)
						for j := range muts {
							r := i%100 + j
							if rows > 1 {
								r = j
							}
							muts[j] = storage.Mutation{Op: c.op, RowKey: fmt.Sprintf("r%03d", r), Props: benchProps(i + j)}
						}
						if c.get {
							rec, err := e.GetEncoded(ctx, "bench", "T", pk, muts[0].RowKey)
							if err != nil {
								b.Error(err)
								return
							}
							muts[0].IfMatch = rec.Version
						}
						_, err := e.Apply(ctx, "bench", "T", pk, muts)
						if c.get && errors.Is(err, storage.ErrVersionMismatch) {
							continue // another writer's update came between
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N*rows)/b.Elapsed().Seconds(), "entities/s")
			})
		}
	}
}

// BenchmarkApplyBatchCompression is BenchmarkApplyBatch with 32 writers under each
// block compression profile: flushes and compactions compress all that is written, so
// the profile shows in the CPU per entity (cpu-ns/entity) more than in the rate.
func BenchmarkApplyBatchCompression(b *testing.B) {
	defer func(c *sstable.CompressionProfile) { blockCompression = c }(blockCompression)
	for _, c := range []*sstable.CompressionProfile{sstable.SnappyCompression, sstable.FastestCompression} {
		b.Run(c.Name, func(b *testing.B) {
			blockCompression = c
			e := benchEngine(b)
			cpu0 := cputime.Process()
			applyBatches(b, e, 32)
			b.StopTimer()
			// Wait out the flushes and compactions the writes left, which are theirs.
			if err := e.db.Flush(); err != nil {
				b.Fatal(err)
			}
			for e.db.Metrics().Compact.NumInProgress > 0 {
				time.Sleep(10 * time.Millisecond)
			}
			b.ReportMetric(float64((cputime.Process()-cpu0).Nanoseconds())/float64(b.N*100), "cpu-ns/entity")
			b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "entities/s")
		})
	}
}

// applyBatches runs b.N Applies of 100 InsertOrReplace mutations from about writers
// concurrent writers, each batch in a new partition, timing from its start.
func applyBatches(b *testing.B, e *Engine, writers int) {
	ctx := context.Background()
	var writer atomic.Int64
	b.SetParallelism(max(1, writers/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		w := writer.Add(1)
		for i := 0; pb.Next(); i++ {
			muts := make([]storage.Mutation, 100)
			for j := range muts {
				muts[j] = storage.Mutation{Op: storage.InsertOrReplace, RowKey: fmt.Sprintf("r%03d", j), Props: benchProps(j)}
			}
			if _, err := e.Apply(ctx, "bench", "T", fmt.Sprintf("w%d-%d", w, i), muts); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// load inserts n entities in partitions of 100, in batches.
func load(b *testing.B, e *Engine, n int) { load2(b, e, n) }

func load2(b testing.TB, e *Engine, n int) {
	b.Helper()
	ctx := context.Background()
	for p := 0; p*100 < n; p++ {
		muts := make([]storage.Mutation, 0, 100)
		for r := 0; r < 100 && p*100+r < n; r++ {
			muts = append(muts, storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprintf("r%03d", r), Props: benchProps(p*100 + r)})
		}
		if _, err := e.Apply(ctx, "bench", "T", fmt.Sprintf("p%06d", p), muts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGet measures point reads of random entities among 100,000 (~100 MiB, more
// than the block cache and the row cache) from concurrent readers: Get decodes the
// properties, GetEncoded (a point read's response) copies the stored bag; encoded/hot
// reads among the first 10,000, which the row cache holds once it has read them. Each
// runs with the row cache and without it.
func BenchmarkGet(b *testing.B) {
	const n = 100_000
	for _, cache := range []struct {
		name string
		size int64
	}{{"rowcache=on", 0}, {"rowcache=off", -1}} {
		b.Run(cache.name, func(b *testing.B) {
			e := benchEngine(b, Options{RowCacheSize: cache.size})
			load(b, e, n)
			ctx := context.Background()
			for _, c := range []struct {
				name string
				get  func(ctx context.Context, account, table, pk, rk string) (storage.Record, error)
				keys int // read at random among the first keys entities
			}{
				{"decoded", e.Get, n}, {"encoded", e.GetEncoded, n},
				{"encoded/hot", e.GetEncoded, n / 10}, // fits in the default row cache
			} {
				b.Run(c.name, func(b *testing.B) {
					b.SetParallelism(8)
					b.ReportAllocs()
					b.RunParallel(func(pb *testing.PB) {
						rnd := rand.New(rand.NewPCG(rand.Uint64(), 0))
						for pb.Next() {
							i := rnd.IntN(c.keys)
							if _, err := c.get(ctx, "bench", "T", fmt.Sprintf("p%06d", i/100), fmt.Sprintf("r%03d", i%100)); err != nil {
								b.Error(err)
								return
							}
						}
					})
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "gets/s")
				})
			}
		})
	}
}

// BenchmarkScan measures pages of 1,000 entities (the service's page size) from a table
// of 50,000.
func BenchmarkScan(b *testing.B) {
	const n = 50_000
	e := benchEngine(b)
	load(b, e, n)
	ctx := context.Background()
	b.ResetTimer()
	start := storage.Key{}
	for range b.N {
		res, err := e.Scan(ctx, "bench", "T", storage.ScanRequest{Start: start, Limit: 1000})
		if err != nil {
			b.Fatal(err)
		}
		if res.Next == nil {
			start = storage.Key{}
		} else {
			start = *res.Next
		}
	}
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "entities/s")
}

// BenchmarkReopen measures Close plus Open of an engine holding 100,000 entities (~100 MiB):
// Open reads the catalogue and replays at most the unflushed WAL, never the entities.
func BenchmarkReopen(b *testing.B) {
	dir := b.TempDir()
	e, err := Open(dir, Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := e.CreateTable(context.Background(), "bench", "T", storage.TableSettings{}); err != nil {
		b.Fatal(err)
	}
	load(b, e, 100_000)
	b.ResetTimer()
	for range b.N {
		if err := e.Close(); err != nil {
			b.Fatal(err)
		}
		if e, err = Open(dir, Options{}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if _, err := e.Get(context.Background(), "bench", "T", "p000999", "r099"); err != nil {
		b.Fatal(err)
	}
	if err := e.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkApplyBatchSustained measures a load far longer than a bench round: 1.2 million
// ~1 KiB entities (1.2 GB) in 100-entity Applies from 32 writers, each into one of 100
// partitions at random, so that every flush spans the whole key space, as a server's
// batches from many clients do. It reports the process's CPU per entity including the
// flushes and compactions the load leaves (waited out), and the blob values compactions
// rewrote (Pebble's BlobBytesCompacted counts the blob files flushes write too, so those
// are taken off), and the time Pebble stalled all writes (stalls.go), for the blob reference
// depths around maxBlobReferenceDepth with four memtables of 16 MiB (the defaults until
// issue 17), and at 60 with two of 32 MiB (the defaults) and two of 64 MiB. One iteration
// takes about 15 seconds and 1.2 GB of disk per case:
//
//	go test -run '^$' -bench ApplyBatchSustained -benchtime 1x -count 3 ./storage/pebble
func BenchmarkApplyBatchSustained(b *testing.B) {
	const writers, partitions = 32, 100
	const perWriter = 375 // Applies of 100: 1.2 million entities in all
	defer func(d int) { maxBlobReferenceDepth = d }(maxBlobReferenceDepth)
	for _, c := range []struct {
		depth     int
		memTable  uint64
		memTables int // MemTableStopWritesThreshold
	}{{30, 16 << 20, 4}, {60, 16 << 20, 4}, {60, DefaultMemTableSize, DefaultMemTableStopWritesThreshold}, {60, 64 << 20, 2}} {
		b.Run(fmt.Sprintf("depth=%d/memtable=%dMiBx%d", c.depth, c.memTable>>20, c.memTables), func(b *testing.B) {
			maxBlobReferenceDepth = c.depth
			var cpu time.Duration
			var stalled [numStallReasons]time.Duration
			var rewritten uint64
			for range b.N {
				b.StopTimer()
				e := benchEngine(b, Options{MemTableSize: c.memTable, MemTableStopWritesThreshold: c.memTables})
				ctx := context.Background()
				cpu0 := cputime.Process()
				b.StartTimer()
				var wg sync.WaitGroup
				for w := range writers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						rnd := rand.New(rand.NewPCG(uint64(w), 1))
						for i := range perWriter {
							muts := make([]storage.Mutation, 100)
							for j := range muts {
								n := i*100 + j
								muts[j] = storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprintf("w%02d-%07d", w, n), Props: benchProps(n)}
							}
							if _, err := e.Apply(ctx, "bench", "T", fmt.Sprintf("p%03d", rnd.IntN(partitions)), muts); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				if err := e.db.Flush(); err != nil {
					b.Fatal(err)
				}
				for e.db.Metrics().Compact.NumInProgress > 0 {
					time.Sleep(10 * time.Millisecond)
				}
				b.StopTimer()
				cpu += cputime.Process() - cpu0
				m := e.db.Metrics().Total()
				rewritten += m.BlobBytesCompacted - m.BlobBytesFlushed
				for r, w := range e.stalls.read() {
					stalled[r] += w.Duration
				}
			}
			n := float64(b.N * writers * perWriter * 100)
			b.ReportMetric(float64(cpu.Microseconds())/n, "cpu-µs/entity")
			b.ReportMetric(n/b.Elapsed().Seconds(), "entities/s")
			b.ReportMetric(float64(rewritten)/float64(b.N)/(1<<20), "blob-rewritten-MiB")
			for r, d := range stalled {
				b.ReportMetric(d.Seconds()/float64(b.N), "stalled-"+StallReason(r).String()+"-s")
			}
		})
	}
}
