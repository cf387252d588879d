package pebble

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// TestExpiryCost measures what removing expired rows costs on a large table: it loads
// CERULEAN_BENCH_EXPIRY_ROWS entities (default 1,000,000) into an elastic table, gives 1%
// of them, spread over the whole key range, a TTL of a few seconds, and once they have
// expired runs one expiry pass while foreground workers insert and read; it does so
// CERULEAN_BENCH_EXPIRY_ROUNDS times (default 5), each with another 1%. It reports the
// keys each pass read (each expired row's index key, listed and checked again: about 2
// per expired row, independent of the table's size; rows are deleted unread) and the
// foreground insert and read rates during the pass against the same workload just before
// and after it — and, as a control, the same for an idle spell as long as the pass, since
// on a shared machine the rates drift by more than a pass could move them. Opt-in, since it takes a minute or more:
//
//	CERULEAN_BENCH_EXPIRY=1 go test ./storage/pebble -count=1 -run TestExpiryCost -v -timeout 30m
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
	rounds := 5
	if s := os.Getenv("CERULEAN_BENCH_EXPIRY_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 99 {
			t.Fatalf("CERULEAN_BENCH_EXPIRY_ROUNDS=%q: want 1 to 99", s)
		}
		rounds = n
	}
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

	// Foreground workload: inserts of new entities (single-entity Applies) and point reads
	// of loaded entities that never expire, counted as they complete, until stop closes.
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
					i += expireEvery - 1 - i%expireEvery // i%100 == 99: never given a TTL
					pk, rk := key(min(i, total-1))
					if _, err := e.Get(ctx, "bench", "T", pk, rk); err != nil {
						t.Error(err)
						return
					}
					nReads.Add(1)
				}
			}
		})
	}
	defer func() {
		close(stop)
		fg.Wait()
	}()
	type rate struct{ ins, reads float64 }
	counts := func() (time.Time, int64, int64) { return time.Now(), nIns.Load(), nReads.Load() }
	since := func(from time.Time, ins0, reads0 int64) rate {
		d := time.Since(from).Seconds()
		return rate{float64(nIns.Load()-ins0) / d, float64(nReads.Load()-reads0) / d}
	}
	window := func(d time.Duration) rate {
		from, ins0, reads0 := counts()
		time.Sleep(d)
		return since(from, ins0, reads0)
	}

	// Each round gives a fresh 1% of the entities (i%100 == round, spread over the whole
	// key range) a TTL — a merge of the TTL property, which restarts their clock — waits
	// for them to expire, and runs one pass with the workload running, against windows
	// of the workload just before and just after it: on a shared machine the rate drifts
	// more from minute to minute than a pass could move it.
	expiring := total / expireEvery
	var insRatios, readRatios, ctlIns, ctlReads []float64
	for round := range rounds {
		var last atomic.Int64
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for {
					p := int(next.Add(perPartition)) - perPartition
					if p >= total {
						return
					}
					pk, _ := key(p)
					var muts []storage.Mutation
					for i := p + round; i < min(p+perPartition, total); i += expireEvery {
						_, rk := key(i)
						muts = append(muts, storage.Mutation{Op: storage.Merge, RowKey: rk, Props: []entity.Property{ttlProp(ttlSeconds)}})
					}
					applied, err := e.Apply(ctx, "bench", "T", pk, muts)
					if err != nil {
						t.Error(err)
						return
					}
					for v := applied.Versions[len(applied.Versions)-1]; ; {
						l := last.Load()
						if v <= l || last.CompareAndSwap(l, v) {
							break
						}
					}
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		// Flushed, so the pass reads from sstables as on a table that has lived, and
		// measured once the compactions that follow are done.
		if err := e.db.Flush(); err != nil {
			t.Fatal(err)
		}
		waitUntilExpired(last.Load(), ttlSeconds)
		settle := func() {
			for e.db.Metrics().Compact.NumInProgress > 0 {
				time.Sleep(50 * time.Millisecond)
			}
		}
		settle()
		before := window(time.Second)
		e.expiryVisited.Store(0)
		from, ins0, reads0 := counts()
		removed, err := e.PurgeExpired(ctx)
		pass := time.Since(from)
		during := since(from, ins0, reads0)
		after := window(time.Second)
		if err != nil {
			t.Fatal(err)
		}
		visited := e.expiryVisited.Load()
		// The control: the same windows around an idle spell as long as the pass.
		settle()
		cBefore := window(time.Second)
		cDuring := window(pass)
		cAfter := window(time.Second)

		ratio := func(before, during, after rate) rate {
			return rate{during.ins / ((before.ins + after.ins) / 2), during.reads / ((before.reads + after.reads) / 2)}
		}
		r, c := ratio(before, during, after), ratio(cBefore, cDuring, cAfter)
		insRatios = append(insRatios, r.ins)
		readRatios = append(readRatios, r.reads)
		ctlIns = append(ctlIns, c.ins)
		ctlReads = append(ctlReads, c.reads)
		t.Logf("round %d: pass removed %d of %d entities in %v reading %d index keys (listed, then checked under the row locks) and no row",
			round, removed, total-round*expiring, pass.Round(time.Millisecond), visited)
		t.Logf("  with the pass: inserts/s %.0f before, %.0f during (%.0f%%), %.0f after; reads/s %.0f before, %.0f during (%.0f%%), %.0f after",
			before.ins, during.ins, 100*r.ins, after.ins, before.reads, during.reads, 100*r.reads, after.reads)
		t.Logf("  control:       inserts/s %.0f before, %.0f during (%.0f%%), %.0f after; reads/s %.0f before, %.0f during (%.0f%%), %.0f after",
			cBefore.ins, cDuring.ins, 100*c.ins, cAfter.ins, cBefore.reads, cDuring.reads, 100*c.reads, cAfter.reads)
		if removed != expiring {
			t.Fatalf("removed %d, want %d", removed, expiring)
		}
		// Each expired entity's index key twice, plus the key each batch stops at (the
		// next batch's first) and the first live index key.
		if visited > int64(2*expiring+expiring/expiryBatch+2) {
			t.Fatalf("the pass read %d keys for %d expired entities", visited, expiring)
		}
	}
	median := func(xs []float64) string {
		slices.Sort(xs)
		return fmt.Sprintf("median %.0f%% (range %.0f–%.0f%%)", 100*xs[len(xs)/2], 100*xs[0], 100*xs[len(xs)-1])
	}
	t.Logf("foreground rate during a pass against the windows around it, over %d rounds: inserts %s, reads %s",
		rounds, median(insRatios), median(readRatios))
	t.Logf("the same for an idle spell as long (control):                         inserts %s, reads %s",
		median(ctlIns), median(ctlReads))
	if n := countKeys(t, e, expiryPrefix(1), expiryPrefix(1<<62)); n != 0 {
		t.Fatalf("%d index keys left", n)
	}
}
