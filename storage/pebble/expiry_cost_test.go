package pebble

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/entity"
	"github.com/ceruleandb/cerulean/storage"
)

// TestExpiryCost measures what removing expired rows costs on a large table: it loads
// CERULEAN_BENCH_EXPIRY_ROWS entities (default 1,000,000) into an elastic table, gives 1%
// of them, spread over the whole key range, a TTL of a few seconds, and once they have
// expired runs one expiry pass while foreground workers insert and read. It reports the
// keys the pass read (each expired row's index key, listed and checked again: about 2
// per expired row, independent of the table's size; rows are deleted unread) and the
// foreground insert and read rates during the pass against the same workload before and
// after it. Opt-in, since it takes minutes:
//
//	CERULEAN_BENCH_EXPIRY=1 go test ./storage/pebble -run TestExpiryCost -v -timeout 30m
func TestExpiryCost(t *testing.T) {
	if os.Getenv("CERULEAN_BENCH_EXPIRY") == "" {
		t.Skip("set CERULEAN_BENCH_EXPIRY=1 to run")
	}
	total := 1_000_000
	if s := os.Getenv("CERULEAN_BENCH_EXPIRY_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 10_000 {
			t.Fatalf("CERULEAN_BENCH_EXPIRY_ROWS=%q: want a number ≥ 10000", s)
		}
		total = n
	}
	const (
		perPartition = 1000
		perApply     = 100
		expireEvery  = 100 // 1%
		ttlSeconds   = 5
		workers      = 8 // 4 inserting, 4 reading
	)
	ctx := context.Background()
	e := openTest(t, t.TempDir(), Options{ExpiryInterval: -1})
	if err := e.CreateTable(ctx, "bench", "T", storage.TableSettings{Elastic: true, DefaultTTL: storage.TTLNever}); err != nil {
		t.Fatal(err)
	}
	props := func(i int) []entity.Property {
		return []entity.Property{
			{Name: "Name", Value: entity.StringValue(fmt.Sprintf("customer %d", i))},
			{Name: "Email", Value: entity.StringValue(fmt.Sprintf("customer%d@example.com", i))},
			{Name: "Notes", Value: entity.StringValue(text(i, 120))},
			{Name: "Age", Value: entity.Int32Value(int32(i % 100))},
		}
	}
	key := func(i int) (string, string) {
		return fmt.Sprintf("p%05d", i/perPartition), fmt.Sprintf("r%05d", i%perPartition)
	}

	// Load, 100 entities per Apply, on 4 goroutines.
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				first := int(next.Add(perApply)) - perApply
				if first >= total {
					return
				}
				pk, _ := key(first)
				muts := make([]storage.Mutation, 0, perApply)
				for i := first; i < min(first+perApply, total); i++ {
					_, rk := key(i)
					muts = append(muts, storage.Mutation{Op: storage.Insert, RowKey: rk, Props: props(i)})
				}
				if _, err := e.Apply(ctx, "bench", "T", pk, muts); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	load := time.Since(start)
	t.Logf("loaded %d entities in %v (%.0f entities/s)", total, load.Round(time.Millisecond), float64(total)/load.Seconds())

	// 1% get a TTL: a merge of the TTL property, which restarts their clock.
	expiring := total / expireEvery
	var last int64
	for p := 0; p < total; p += perPartition {
		pk, _ := key(p)
		var muts []storage.Mutation
		for i := p; i < min(p+perPartition, total); i += expireEvery {
			_, rk := key(i)
			muts = append(muts, storage.Mutation{Op: storage.Merge, RowKey: rk, Props: []entity.Property{ttlProp(ttlSeconds)}})
		}
		applied, err := e.Apply(ctx, "bench", "T", pk, muts)
		if err != nil {
			t.Fatal(err)
		}
		last = max(last, applied.Versions[len(applied.Versions)-1])
	}
	// Flush, so the pass reads from sstables as it would on a table that has lived.
	if err := e.db.Flush(); err != nil {
		t.Fatal(err)
	}

	// Foreground workload: inserts of new entities (single-entity Applies) and point reads
	// of random loaded ones, counted as they complete, until stop is closed.
	var fresh, nIns, nReads atomic.Int64
	stop := make(chan struct{})
	var fg sync.WaitGroup
	for w := range workers {
		fg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for {
				select {
				case <-stop:
					return
				default:
				}
				if w%2 == 0 {
					i := fresh.Add(1)
					_, err := e.Apply(ctx, "bench", "T", "fresh", []storage.Mutation{{Op: storage.Insert, RowKey: fmt.Sprintf("f%09d", i), Props: props(int(i))}})
					if err != nil {
						t.Error(err)
						return
					}
					nIns.Add(1)
				} else {
					i := rnd.IntN(total)
					if i%expireEvery == 0 {
						i++ // not an expiring one
					}
					pk, rk := key(i)
					if _, err := e.Get(ctx, "bench", "T", pk, rk); err != nil {
						t.Error(err)
						return
					}
					nReads.Add(1)
				}
			}
		})
	}
	// rates returns the insert and read rates over [from, now] given the counts at from.
	rates := func(from time.Time, ins0, reads0 int64) (float64, float64) {
		d := time.Since(from).Seconds()
		return float64(nIns.Load()-ins0) / d, float64(nReads.Load()-reads0) / d
	}
	window := func(d time.Duration) (float64, float64) {
		from, ins0, reads0 := time.Now(), nIns.Load(), nReads.Load()
		time.Sleep(d)
		return rates(from, ins0, reads0)
	}

	waitUntilExpired(last, ttlSeconds)
	window(time.Second) // warm-up
	var baseIns, baseReads float64
	const windows = 3
	for range windows {
		ins, reads := window(2 * time.Second)
		baseIns += ins / windows
		baseReads += reads / windows
	}
	// The pass, the workload's rates measured over exactly its duration.
	e.expiryVisited.Store(0)
	passStart, ins0, reads0 := time.Now(), nIns.Load(), nReads.Load()
	removed, err := e.PurgeExpired(ctx)
	pass := time.Since(passStart)
	duringIns, duringReads := rates(passStart, ins0, reads0)
	afterIns, afterReads := window(2 * time.Second)
	close(stop)
	fg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	visited := e.expiryVisited.Load()
	t.Logf("expiry pass: removed %d of %d entities (%d expired) in %v, reading %d index keys (listed, then checked under the row locks) and no row",
		removed, total, expiring, pass.Round(time.Millisecond), visited)
	t.Logf("foreground baseline: %.0f inserts/s, %.0f reads/s (mean of %d × 2 s)", baseIns, baseReads, windows)
	t.Logf("foreground during the pass: %.0f inserts/s (%.0f%%), %.0f reads/s (%.0f%%)",
		duringIns, 100*duringIns/baseIns, duringReads, 100*duringReads/baseReads)
	t.Logf("foreground after the pass (2 s): %.0f inserts/s (%.0f%%), %.0f reads/s (%.0f%%)",
		afterIns, 100*afterIns/baseIns, afterReads, 100*afterReads/baseReads)
	if removed != expiring {
		t.Fatalf("removed %d, want %d", removed, expiring)
	}
	// Each expired entity's index key twice, plus the key each batch stops at (the next
	// batch's first) and the first live index key.
	if visited > int64(2*expiring+expiring/expiryBatch+2) {
		t.Fatalf("the pass read %d keys for %d expired entities", visited, expiring)
	}
	if n := countKeys(t, e, expiryPrefix(1), expiryPrefix(1<<62)); n != 0 {
		t.Fatalf("%d index keys left", n)
	}
}
