package enginetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/storage"
)

// Commit positions (session tokens): every Apply's Position exceeds every earlier one's,
// across restarts, and ReaderAt(p) reads every write up to p or fails with
// ErrFuturePosition after a short wait.

// applyAt runs an Apply that must succeed and returns its position, checking that it is
// above prev.
func (x *env) applyAt(prev storage.Position, table, pk string, muts ...storage.Mutation) storage.Position {
	x.t.Helper()
	applied, err := x.e.Apply(x.ctx, x.acct, table, pk, muts)
	if err != nil {
		x.t.Fatalf("Apply(%q, %q, %v): %v", table, pk, describe(muts), err)
	}
	if applied.Position == 0 {
		x.t.Fatalf("Apply(%v) returned position 0", describe(muts))
	}
	if applied.Position <= prev {
		x.t.Fatalf("Apply(%v) returned position %d, not above the earlier %d", describe(muts), applied.Position, prev)
	}
	return applied.Position
}

// readAt checks that ReaderAt(p) returns promptly and that its reader sees (pk, rk) in
// table with the given version.
func (x *env) readAt(p storage.Position, table, pk, rk string, version int64) {
	x.t.Helper()
	start := time.Now()
	r, err := x.e.ReaderAt(x.ctx, p)
	if err != nil {
		x.t.Fatalf("ReaderAt(%d): %v", p, err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		x.t.Fatalf("ReaderAt(%d) of a committed position took %v", p, d)
	}
	rec, err := r.Get(x.ctx, x.acct, table, pk, rk)
	if err != nil || rec.Version != version {
		x.t.Fatalf("ReaderAt(%d).Get(%q, %q) = v%d, %v; want v%d", p, pk, rk, rec.Version, err, version)
	}
	res, err := r.Scan(x.ctx, x.acct, table, storage.ScanRequest{Start: storage.Key{PartitionKey: pk, RowKey: rk}, Limit: 1})
	if err != nil || len(res.Records) != 1 || res.Records[0].Version != version {
		x.t.Fatalf("ReaderAt(%d).Scan from (%q, %q) = %s, %v; want v%d", p, pk, rk, keysOf(res.Records), err, version)
	}
}

func testPositions(t *testing.T, x *env) {
	x.createTable("A")
	x.createWith("B", elastic(3600))
	var last storage.Position
	type write struct {
		p       storage.Position
		table   string
		pk, rk  string
		version int64
	}
	var writes []write
	for i := range 30 {
		tbl := []string{"A", "B"}[i%2]
		pk := fmt.Sprintf("p%d", i%3)
		rk := fmt.Sprintf("r%d", i%5)
		muts := []storage.Mutation{mut(storage.InsertOrReplace, rk, i64("N", int64(i)))}
		if i%4 == 3 {
			muts = append(muts, mut(storage.InsertOrMerge, "other", i64("N", int64(i))))
		}
		last = x.applyAt(last, tbl, pk, muts...)
		writes = append(writes, write{last, tbl, pk, rk, x.get(tbl, pk, rk).Version})
		if i%7 == 6 {
			last = x.applyAt(last, tbl, pk, mut(storage.InsertOrReplace, "tmp"))
			last = x.applyAt(last, tbl, pk, mut(storage.Delete, "tmp"))
			// Inserted and deleted in one Apply: nothing stays, and it still commits.
			last = x.applyAt(last, tbl, pk, mut(storage.Insert, "tmp2"), mut(storage.Delete, "tmp2"))
		}
		// A failed Apply does not disturb the order.
		if _, err := x.e.Apply(x.ctx, x.acct, tbl, pk, []storage.Mutation{mut(storage.Insert, rk)}); err == nil {
			t.Fatal("Insert of an existing row succeeded")
		}
	}
	// Catalogue changes in between do not disturb it either.
	x.createTable("C")
	if err := x.e.SetTableSettings(x.ctx, x.acct, "B", elastic(storage.TTLNever)); err != nil {
		t.Fatal(err)
	}
	last = x.applyAt(last, "C", "p", mut(storage.Insert, "r"))
	lastWrite := write{last, "C", "p", "r", x.get("C", "p", "r").Version}

	// ReaderAt(0) and ReaderAt(any returned position) read the latest writes.
	x.readAt(0, lastWrite.table, lastWrite.pk, lastWrite.rk, lastWrite.version)
	x.readAt(lastWrite.p, lastWrite.table, lastWrite.pk, lastWrite.rk, lastWrite.version)
	latest := map[string]write{}
	for _, w := range writes {
		latest[w.table+"/"+w.pk+"/"+w.rk] = w
	}
	for _, w := range latest {
		x.readAt(w.p, w.table, w.pk, w.rk, w.version)
	}

	if x.h.Reopen == nil {
		return
	}
	x.reopen()
	// Positions from before the restart are reached at once; later writes go above them.
	x.readAt(lastWrite.p, lastWrite.table, lastWrite.pk, lastWrite.rk, lastWrite.version)
	last = x.applyAt(last, "A", "p0", mut(storage.InsertOrReplace, "after"))
	x.readAt(last, "A", "p0", "after", x.get("A", "p0", "after").Version)
	for range 5 {
		last = x.applyAt(last, "B", "p1", mut(storage.InsertOrMerge, "after"))
	}
	x.reopen()
	x.applyAt(last, "C", "q", mut(storage.InsertOrReplace, "after"))
}

// testPositionsConcurrent: concurrent writers each see their own write through
// ReaderAt(its position), and each writer's positions increase.
func testPositionsConcurrent(t *testing.T, x *env) {
	x.createTable("Conc")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last storage.Position
			pk := fmt.Sprintf("p%d", g)
			for i := range 15 {
				rk := fmt.Sprintf("r%02d", i)
				applied, err := x.e.Apply(x.ctx, x.acct, "Conc", pk, []storage.Mutation{mut(storage.Insert, rk)})
				if err != nil {
					errs <- err
					return
				}
				if applied.Position <= last {
					errs <- fmt.Errorf("writer %d: position %d after %d", g, applied.Position, last)
					return
				}
				last = applied.Position
				r, err := x.e.ReaderAt(x.ctx, last)
				if err != nil {
					errs <- fmt.Errorf("ReaderAt(%d): %w", last, err)
					return
				}
				rec, err := r.Get(x.ctx, x.acct, "Conc", pk, rk)
				if err != nil || rec.Version != applied.Versions[0] {
					errs <- fmt.Errorf("ReaderAt(%d).Get(%s, %s) = v%d, %v; want v%d", last, pk, rk, rec.Version, err, applied.Versions[0])
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// testPositionsFuture: a position the engine has not reached fails with
// ErrFuturePosition after a bounded wait, and the wait ends when the context does.
func testPositionsFuture(t *testing.T, x *env) {
	t.Parallel()
	x.createTable("F")
	applied, err := x.e.Apply(x.ctx, x.acct, "F", "p", []storage.Mutation{mut(storage.Insert, "r")})
	if err != nil {
		t.Fatal(err)
	}
	future := applied.Position + 1<<40
	start := time.Now()
	r, err := x.e.ReaderAt(x.ctx, future)
	if !errors.Is(err, storage.ErrFuturePosition) {
		t.Fatalf("ReaderAt(a future position) = %T, %v; want ErrFuturePosition", r, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("ReaderAt(a future position) waited %v", d)
	}

	// Cancelled while waiting: it returns soon after, with an error.
	ctx, cancel := context.WithTimeout(x.ctx, 50*time.Millisecond)
	defer cancel()
	start = time.Now()
	if r, err := x.e.ReaderAt(ctx, future); err == nil {
		t.Fatalf("ReaderAt(a future position) with a cancelled context = %T, nil", r)
	}
	if d := time.Since(start); d > 750*time.Millisecond {
		t.Fatalf("ReaderAt(a future position) returned %v after its context ended", d-50*time.Millisecond)
	}
	// Already done: an error without the wait.
	ctx, cancel = context.WithCancel(x.ctx)
	cancel()
	if r, err := x.e.ReaderAt(ctx, future); err == nil {
		t.Fatalf("ReaderAt(a future position) with a done context = %T, nil", r)
	}
	// The engine still works, and the position it reached still reads.
	x.readAt(applied.Position, "F", "p", "r", applied.Versions[0])
}
