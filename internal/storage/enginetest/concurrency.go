package enginetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// testCompareAndSet runs 64 goroutines incrementing one counter by Get then Replace with
// IfMatch. Each version must have exactly one successor (the wins form one chain from the
// first version to the last), and the counter must equal the number of wins: no lost
// update, no double win.
func testCompareAndSet(t *testing.T, x *env) {
	tbl := x.createTable("CAS")
	v0 := x.apply(tbl, "p", mut(storage.Insert, "counter", i64("N", 0)))[0]
	type win struct{ from, to, n int64 }
	var (
		mu     sync.Mutex
		wins   []win
		losses int
		wg     sync.WaitGroup
	)
	errs := make(chan error, 64)
	deadline := time.Now().Add(x.h.CASDuration)
	for range 64 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				r, err := x.e.Get(x.ctx, x.acct, tbl, "p", "counter")
				if err != nil {
					errs <- fmt.Errorf("get: %w", err)
					return
				}
				n, _ := r.Entity.Get("N")
				applied, err := x.e.Apply(x.ctx, x.acct, tbl, "p", []storage.Mutation{mutIf(storage.Replace, "counter", r.Version, i64("N", n.Int+1))})
				vs := applied.Versions
				mu.Lock()
				switch {
				case err == nil:
					wins = append(wins, win{r.Version, vs[0], n.Int + 1})
				case errors.Is(err, storage.ErrVersionMismatch):
					losses++
				default:
					mu.Unlock()
					errs <- fmt.Errorf("replace: %w", err)
					return
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d successful compare-and-sets, %d conflicts", len(wins), losses)
	if len(wins) == 0 {
		t.Fatal("no compare-and-set succeeded")
	}
	next := make(map[int64]win, len(wins))
	for _, w := range wins {
		if o, dup := next[w.from]; dup {
			t.Fatalf("version %d replaced twice: by %d and by %d", w.from, o.to, w.to)
		}
		next[w.from] = w
	}
	v, n := v0, int64(0)
	for range wins {
		w, ok := next[v]
		if !ok {
			t.Fatalf("the chain of versions breaks at %d after %d of %d wins", v, n, len(wins))
		}
		if w.to <= v {
			t.Fatalf("version %d followed by %d: not increasing", v, w.to)
		}
		if w.n != n+1 {
			t.Fatalf("win on version %d wrote N=%d, want %d (lost update)", v, w.n, n+1)
		}
		v, n = w.to, w.n
	}
	final := x.get(tbl, "p", "counter")
	got, _ := final.Entity.Get("N")
	if final.Version != v || got.Int != int64(len(wins)) {
		t.Fatalf("final counter N=%d version %d; want N=%d (the number of wins) version %d", got.Int, final.Version, len(wins), v)
	}
}

// testConcurrentPartitions runs writers on separate partitions at once, and writers whose
// multi-row batches overlap in opposite orders (a lock-ordering deadlock would hang).
func testConcurrentPartitions(t *testing.T, x *env) {
	tbl := x.createTable("Parts")
	const writers, batches, perBatch = 16, 10, 5
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 2*writers)
	for w := range writers {
		wg.Go(func() {
			pk := fmt.Sprintf("w%02d", w)
			for b := range batches {
				var muts []storage.Mutation
				for i := range perBatch {
					muts = append(muts, mut(storage.Insert, fmt.Sprintf("r%03d", b*perBatch+i), i64("W", int64(w))))
				}
				if _, err := x.e.Apply(x.ctx, x.acct, tbl, pk, muts); err != nil {
					errs <- fmt.Errorf("writer %d: %w", w, err)
					return
				}
			}
		})
	}
	// Overlapping batches in one partition: each writer sets its own property on a
	// random ordering of rows; the last batch a writer commits must be what it reads.
	const rows = 8
	last := make([][rows]int64, writers)
	for w := range writers {
		rnd := x.rnd.Uint64()
		wg.Go(func() {
			for it := int64(1); it <= 20; it++ {
				perm := permute(rows, rnd+uint64(it))[:4]
				var muts []storage.Mutation
				for _, r := range perm {
					muts = append(muts, mut(storage.InsertOrMerge, fmt.Sprintf("r%d", r), i64(fmt.Sprintf("W%02d", w), it)))
				}
				if _, err := x.e.Apply(x.ctx, x.acct, tbl, "shared", muts); err != nil {
					errs <- fmt.Errorf("overlapping writer %d: %w", w, err)
					return
				}
				for _, r := range perm {
					last[w][r] = it
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("concurrent Applies did not finish in 60 s: deadlock?")
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for w := range writers {
		recs := x.scanAll(tbl, storage.Key{PartitionKey: fmt.Sprintf("w%02d", w)}, &storage.Key{PartitionKey: fmt.Sprintf("w%02d\x00", w)}, 1000)
		if len(recs) != batches*perBatch {
			t.Fatalf("partition of writer %d holds %d rows, want %d", w, len(recs), batches*perBatch)
		}
	}
	for r := range rows {
		rec, err := x.e.Get(x.ctx, x.acct, tbl, "shared", fmt.Sprintf("r%d", r))
		if errors.Is(err, storage.ErrNotFound) {
			rec = storage.Record{}
		} else if err != nil {
			t.Fatal(err)
		}
		for w := range writers {
			v, ok := rec.Entity.Get(fmt.Sprintf("W%02d", w))
			if want := last[w][r]; (want == 0 && ok) || (want != 0 && (!ok || v.Type != entity.Int64 || v.Int != want)) {
				t.Fatalf("row r%d: writer %d's property = %v (present %v), want its last write %d", r, w, v, ok, want)
			}
		}
	}
}

// permute returns a permutation of [0, n) derived from seed.
func permute(n int, seed uint64) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	for i := n - 1; i > 0; i-- {
		seed = seed*6364136223846793005 + 1442695040888963407
		j := int((seed >> 33) % uint64(i+1))
		p[i], p[j] = p[j], p[i]
	}
	return p
}
