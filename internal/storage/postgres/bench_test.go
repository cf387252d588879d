package postgres_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/postgres"
)

// Engine-level benchmarks (no HTTP) on the database of CERULEAN_TEST_POSTGRES_URL:
//
//	CERULEAN_TEST_POSTGRES_URL=... go test -run '^$' -bench . ./storage/postgres
//
// Each reports entities/s over 32 concurrent callers, the shape of a loaded front end.

// benchProps is a ~1 KiB entity.
func benchProps(i int) []entity.Property {
	return []entity.Property{
		{Name: "Name", Value: entity.StringValue(fmt.Sprintf("customer %d", i))},
		{Name: "Notes", Value: entity.StringValue(strings.Repeat(fmt.Sprintf("%x", i), 1000)[:900])},
		{Name: "Age", Value: entity.Int32Value(int32(i % 100))},
		{Name: "Balance", Value: entity.DoubleValue(float64(i) * 1.25)},
		{Name: "Active", Value: entity.BoolValue(i%2 == 0)},
		{Name: "Since", Value: entity.Value{Type: entity.DateTime, Int: 638000000000000000 + int64(i)}},
	}
}

func benchEngine(b *testing.B) (*postgres.Engine, string) {
	e := open(b, postgres.Options{})
	acct := newAccount()
	if err := e.CreateTable(context.Background(), acct, "T", storage.TableSettings{}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.DeleteTable(context.Background(), acct, "T") })
	return e, acct
}

func parallel32(b *testing.B, fn func(w int64, i int) int) {
	var worker, entities atomic.Int64
	b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
	start := time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		w := worker.Add(1)
		for i := 0; pb.Next(); i++ {
			entities.Add(int64(fn(w, i)))
		}
	})
	b.ReportMetric(float64(entities.Load())/time.Since(start).Seconds(), "entities/s")
}

func BenchmarkInsert(b *testing.B) {
	e, acct := benchEngine(b)
	ctx := context.Background()
	parallel32(b, func(w int64, i int) int {
		muts := []storage.Mutation{{Op: storage.Insert, RowKey: fmt.Sprintf("r%08d", i), Props: benchProps(i)}}
		if _, err := e.Apply(ctx, acct, "T", fmt.Sprintf("w%03d", w), muts); err != nil {
			b.Error(err)
		}
		return 1
	})
}

// BenchmarkInsertSerial is one caller inserting: what a lone write costs, which
// coalescing (coalesce.go) must leave as it was (the write goes out at once).
func BenchmarkInsertSerial(b *testing.B) {
	e, acct := benchEngine(b)
	ctx := context.Background()
	start := time.Now()
	for i := 0; b.Loop(); i++ {
		muts := []storage.Mutation{{Op: storage.Insert, RowKey: fmt.Sprintf("r%08d", i), Props: benchProps(i)}}
		if _, err := e.Apply(ctx, acct, "T", "serial", muts); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "entities/s")
}

// BenchmarkUpsertHot is 32 callers replacing 16 entities of one partition: groups of
// single writes (coalesce.go) that often hold one row twice.
func BenchmarkUpsertHot(b *testing.B) {
	e, acct := benchEngine(b)
	ctx := context.Background()
	parallel32(b, func(w int64, i int) int {
		muts := []storage.Mutation{{Op: storage.InsertOrReplace, RowKey: fmt.Sprintf("r%02d", (int(w)+i)%16), Props: benchProps(i)}}
		if _, err := e.Apply(ctx, acct, "T", "hot", muts); err != nil {
			b.Error(err)
		}
		return 1
	})
}

// preloadN is how many entities preload writes: partitions p000–p099 of rows r000–r099.
const preloadN = 10_000

// preload writes preloadN entities into T, 100 to a batch.
func preload(b *testing.B, e *postgres.Engine, acct string) {
	for p := 0; p < preloadN/100; p++ {
		var muts []storage.Mutation
		for r := range 100 {
			muts = append(muts, storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprintf("r%03d", r), Props: benchProps(p*100 + r)})
		}
		if _, err := e.Apply(context.Background(), acct, "T", fmt.Sprintf("p%03d", p), muts); err != nil {
			b.Fatal(err)
		}
	}
}

// preloaded is worker w's i-th random key of preload's entities.
func preloaded(w int64, i int) (pk, rk string) {
	k := int(uint64(i*32+int(w)) * 0x9E3779B97F4A7C15 >> 40 % preloadN)
	return fmt.Sprintf("p%03d", k/100), fmt.Sprintf("r%03d", k%100)
}

func BenchmarkGet(b *testing.B) {
	e, acct := benchEngine(b)
	ctx := context.Background()
	preload(b, e, acct)
	parallel32(b, func(w int64, i int) int {
		pk, rk := preloaded(w, i)
		if _, err := e.Get(ctx, acct, "T", pk, rk); err != nil {
			b.Error(err)
		}
		return 1
	})
}

func BenchmarkBatch100(b *testing.B) {
	e, acct := benchEngine(b)
	ctx := context.Background()
	parallel32(b, func(w int64, i int) int {
		muts := make([]storage.Mutation, 100)
		for r := range muts {
			muts[r] = storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprintf("r%03d", r), Props: benchProps(i*100 + r)}
		}
		if _, err := e.Apply(ctx, acct, "T", fmt.Sprintf("w%03d-%06d", w, i), muts); err != nil {
			b.Error(err)
		}
		return 100
	})
}

// BenchmarkUpsertNew is 32 callers each upserting (InsertOrMerge) entities that do not
// exist yet: an upsert that creates, as an ingestion by UpsertEntity makes.
func BenchmarkUpsertNew(b *testing.B) {
	e, acct := benchEngine(b)
	ctx := context.Background()
	parallel32(b, func(w int64, i int) int {
		muts := []storage.Mutation{{Op: storage.InsertOrMerge, RowKey: fmt.Sprintf("r%09d", i), Props: benchProps(i)}}
		if _, err := e.Apply(ctx, acct, "T", fmt.Sprintf("w%03d", w), muts); err != nil {
			b.Error(err)
		}
		return 1
	})
}

// BenchmarkMerge is 32 callers each merging (InsertOrMerge, the SDKs' default upsert)
// into 64 entities of their own, over and over: a read-modify-write per write.
func BenchmarkMerge(b *testing.B) {
	e, acct := benchEngine(b)
	ctx := context.Background()
	parallel32(b, func(w int64, i int) int {
		muts := []storage.Mutation{{Op: storage.InsertOrMerge, RowKey: fmt.Sprintf("r%02d", i%64), Props: benchProps(i)}}
		if _, err := e.Apply(ctx, acct, "T", fmt.Sprintf("w%03d", w), muts); err != nil {
			b.Error(err)
		}
		return 1
	})
}

// BenchmarkMergeHot is 32 callers merging into 16 entities of one partition (status
// entities many clients update in place): read-modify-writes of the same rows, which
// compare-and-swap against each other.
func BenchmarkMergeHot(b *testing.B) {
	e, acct := benchEngine(b)
	ctx := context.Background()
	parallel32(b, func(w int64, i int) int {
		muts := []storage.Mutation{{Op: storage.InsertOrMerge, RowKey: fmt.Sprintf("r%02d", (int(w)+i)%16), Props: benchProps(i)}}
		if _, err := e.Apply(ctx, acct, "T", "hot", muts); err != nil {
			b.Error(err)
		}
		return 1
	})
}

// BenchmarkReplace is 32 callers replacing random preloaded entities (Replace with
// If-Match *): single writes that find their rows.
func BenchmarkReplace(b *testing.B) {
	e, acct := benchEngine(b)
	preload(b, e, acct)
	ctx := context.Background()
	parallel32(b, func(w int64, i int) int {
		pk, rk := preloaded(w, i)
		muts := []storage.Mutation{{Op: storage.Replace, RowKey: rk, Props: benchProps(i)}}
		if _, err := e.Apply(ctx, acct, "T", pk, muts); err != nil {
			b.Error(err)
		}
		return 1
	})
}

// BenchmarkReplaceIf is 32 callers each replacing an entity of its own with the ETag
// its last write returned: conditional replaces that all succeed.
func BenchmarkReplaceIf(b *testing.B) {
	e, acct := benchEngine(b)
	ctx := context.Background()
	var last [64]int64
	parallel32(b, func(w int64, i int) int {
		op := storage.Replace
		if last[w] == 0 {
			op = storage.InsertOrReplace
		}
		muts := []storage.Mutation{{Op: op, RowKey: "r", Props: benchProps(i), IfMatch: last[w]}}
		res, err := e.Apply(ctx, acct, "T", fmt.Sprintf("w%03d", w), muts)
		if err != nil {
			b.Fatal(err)
		}
		last[w] = res.Versions[0]
		return 1
	})
}

// BenchmarkMergeBatch is 32 callers each merging into 10 entities of its own partition
// in one batch (a read of the ten rows, then ten compare-and-swaps in one transaction).
func BenchmarkMergeBatch(b *testing.B) {
	e, acct := benchEngine(b)
	ctx := context.Background()
	parallel32(b, func(w int64, i int) int {
		muts := make([]storage.Mutation, 10)
		for j := range muts {
			muts[j] = storage.Mutation{Op: storage.InsertOrMerge, RowKey: fmt.Sprintf("r%02d", (i*10+j)%64), Props: benchProps(i)}
		}
		if _, err := e.Apply(ctx, acct, "T", fmt.Sprintf("w%03d", w), muts); err != nil {
			b.Error(err)
		}
		return len(muts)
	})
}

// BenchmarkIndexedInsert is BenchmarkInsert on elastic tables with 0, 1 and 3 secondary
// indexes (on Age; on Name and on Active and Since too): what maintaining them costs a
// write (the goal: with one index, at least 0.8 of the throughput without).
func BenchmarkIndexedInsert(b *testing.B) {
	all := []storage.IndexDef{
		{Name: "ByAge", Properties: []string{"Age"}},
		{Name: "ByName", Properties: []string{"Name"}},
		{Name: "ByActiveSince", Properties: []string{"Active", "Since"}},
	}
	for _, n := range []int{0, 1, 3} {
		b.Run(fmt.Sprint("indexes=", n), func(b *testing.B) {
			e := open(b, postgres.Options{})
			acct := newAccount()
			ctx := context.Background()
			if err := e.CreateTable(ctx, acct, "T", storage.TableSettings{Elastic: true, Indexes: all[:n]}); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = e.DeleteTable(context.Background(), acct, "T") })
			parallel32(b, func(w int64, i int) int {
				muts := []storage.Mutation{{Op: storage.Insert, RowKey: fmt.Sprintf("r%08d", i), Props: benchProps(i)}}
				if _, err := e.Apply(ctx, acct, "T", fmt.Sprintf("w%03d", w), muts); err != nil {
					b.Error(err)
				}
				return 1
			})
		})
	}
}
