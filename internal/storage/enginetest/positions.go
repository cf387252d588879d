package enginetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/storage"
)

// Commit positions (session tokens): every Apply's Position exceeds every earlier one's,
// across restarts, and ReadView(p) reads every write up to p or fails with
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

// levels are the consistency levels, strongest first.
var levels = []storage.Consistency{storage.Strong, storage.BoundedStaleness, storage.Session, storage.ConsistentPrefix, storage.Eventual}

// readAt checks, at every consistency level, that ReadView(p) returns promptly, that its
// view sees (pk, rk) in table with the given version, and that the view's Position
// covers p and reads again at once. Without a position (p = 0) only Strong and Session
// promise the latest state; the weaker levels may read a replica's older one.
func (x *env) readAt(p storage.Position, table, pk, rk string, version int64) {
	x.t.Helper()
	lv := levels
	if p == 0 {
		lv = []storage.Consistency{storage.Strong, storage.Session}
	}
	for _, level := range lv {
		start := time.Now()
		v, err := x.e.ReadView(x.ctx, storage.ReadOptions{Consistency: level, At: p})
		if err != nil {
			x.t.Fatalf("ReadView(%v, %d): %v", level, p, err)
		}
		if d := time.Since(start); d > 500*time.Millisecond {
			x.t.Fatalf("ReadView(%v, %d) of a committed position took %v", level, p, d)
		}
		rec, err := v.Get(x.ctx, x.acct, table, pk, rk)
		if err != nil || rec.Version != version {
			x.t.Fatalf("ReadView(%v, %d).Get(%q, %q) = v%d, %v; want v%d", level, p, pk, rk, rec.Version, err, version)
		}
		res, err := v.Scan(x.ctx, x.acct, table, storage.ScanRequest{Start: storage.Key{PartitionKey: pk, RowKey: rk}, Limit: 1})
		if err != nil || len(res.Records) != 1 || res.Records[0].Version != version {
			x.t.Fatalf("ReadView(%v, %d).Scan from (%q, %q) = %s, %v; want v%d", level, p, pk, rk, keysOf(res.Records), err, version)
		}
		if v.Source() == "" {
			x.t.Fatalf("ReadView(%v, %d).Source() is empty", level, p)
		}
		vp := v.Position()
		if vp < p {
			x.t.Fatalf("ReadView(%v, %d).Position() = %d, below the position asked for", level, p, vp)
		}
		start = time.Now()
		again, err := x.e.ReadView(x.ctx, storage.ReadOptions{Consistency: level, At: vp})
		if err != nil {
			x.t.Fatalf("ReadView(%v, %d) at a view's Position %d: %v", level, p, vp, err)
		}
		if d := time.Since(start); d > 500*time.Millisecond {
			x.t.Fatalf("ReadView(%v) at a view's Position took %v", level, d)
		}
		if rec, err := again.Get(x.ctx, x.acct, table, pk, rk); err != nil || rec.Version != version {
			x.t.Fatalf("ReadView(%v, %d).Get(%q, %q) = v%d, %v; want v%d", level, vp, pk, rk, rec.Version, err, version)
		}
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

	// ReadView(0) and ReadView(any returned position) read the latest writes.
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
// ReadView(its position), and each writer's positions increase.
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
				r, err := x.e.ReadView(x.ctx, storage.ReadOptions{At: last})
				if err != nil {
					errs <- fmt.Errorf("ReadView(%d): %w", last, err)
					return
				}
				rec, err := r.Get(x.ctx, x.acct, "Conc", pk, rk)
				if err != nil || rec.Version != applied.Versions[0] {
					errs <- fmt.Errorf("ReadView(%d).Get(%s, %s) = v%d, %v; want v%d", last, pk, rk, rec.Version, err, applied.Versions[0])
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
	r, err := x.e.ReadView(x.ctx, storage.ReadOptions{At: future})
	if !errors.Is(err, storage.ErrFuturePosition) {
		t.Fatalf("ReadView(a future position) = %T, %v; want ErrFuturePosition", r, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("ReadView(a future position) waited %v", d)
	}

	// Cancelled while waiting: it returns soon after, with an error.
	ctx, cancel := context.WithTimeout(x.ctx, 50*time.Millisecond)
	defer cancel()
	start = time.Now()
	if r, err := x.e.ReadView(ctx, storage.ReadOptions{At: future}); err == nil {
		t.Fatalf("ReadView(a future position) with a cancelled context = %T, nil", r)
	}
	if d := time.Since(start); d > 750*time.Millisecond {
		t.Fatalf("ReadView(a future position) returned %v after its context ended", d-50*time.Millisecond)
	}
	// Already done: an error without the wait.
	ctx, cancel = context.WithCancel(x.ctx)
	cancel()
	if r, err := x.e.ReadView(ctx, storage.ReadOptions{At: future}); err == nil {
		t.Fatalf("ReadView(a future position) with a done context = %T, nil", r)
	}
	// The engine still works, and the position it reached still reads.
	x.readAt(applied.Position, "F", "p", "r", applied.Versions[0])
}

// testPositionsViews: a view serves every read at every level, and Engine.Position
// covers table-level changes, so a view opened at it sees them.
func testPositionsViews(t *testing.T, x *env) {
	t.Parallel()
	applied, err := x.e.Apply(x.ctx, x.acct, "missing", "p", []storage.Mutation{mut(storage.Insert, "r")})
	if !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("Apply on a missing table = %+v, %v", applied, err)
	}
	x.createTable("V1")
	acl := []byte("<acl/>")
	if err := x.e.SetTableACL(x.ctx, x.acct, "V1", acl); err != nil {
		t.Fatal(err)
	}
	props := []byte("<props/>")
	if err := x.e.SetServiceProperties(x.ctx, x.acct, props); err != nil {
		t.Fatal(err)
	}
	p, err := x.e.Position(x.ctx)
	if err != nil {
		t.Fatalf("Position: %v", err)
	}
	for _, level := range levels {
		v, err := x.e.ReadView(x.ctx, storage.ReadOptions{Consistency: level, At: p})
		if err != nil {
			t.Fatalf("ReadView(%v, Position()): %v", level, err)
		}
		if info, err := v.GetTable(x.ctx, x.acct, "v1"); err != nil || info.Name != "V1" {
			t.Fatalf("%v view: GetTable = %+v, %v", level, info, err)
		}
		if _, err := v.GetTable(x.ctx, x.acct, "nope"); !errors.Is(err, storage.ErrTableNotFound) {
			t.Fatalf("%v view: GetTable(missing) = %v; want ErrTableNotFound", level, err)
		}
		tables, next, err := v.ListTables(x.ctx, x.acct, "", 1000)
		if err != nil || next != "" || !hasTable(tables, "V1") {
			t.Fatalf("%v view: ListTables = %+v, %q, %v", level, tables, next, err)
		}
		if got, err := v.GetTableACL(x.ctx, x.acct, "V1"); err != nil || string(got) != string(acl) {
			t.Fatalf("%v view: GetTableACL = %q, %v", level, got, err)
		}
		if got, err := v.GetServiceProperties(x.ctx, x.acct); err != nil || string(got) != string(props) {
			t.Fatalf("%v view: GetServiceProperties = %q, %v", level, got, err)
		}
		if _, err := v.Get(x.ctx, x.acct, "V1", "p", "r"); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("%v view: Get(missing entity) = %v; want ErrNotFound", level, err)
		}
		if res, err := v.Scan(x.ctx, x.acct, "V1", storage.ScanRequest{Limit: 10}); err != nil || len(res.Records) != 0 {
			t.Fatalf("%v view: Scan(empty table) = %+v, %v", level, res, err)
		}
		if _, err := v.Scan(x.ctx, x.acct, "nope", storage.ScanRequest{Limit: 10}); !errors.Is(err, storage.ErrTableNotFound) {
			t.Fatalf("%v view: Scan(missing table) = %v; want ErrTableNotFound", level, err)
		}
		if vp := v.Position(); vp < p {
			t.Fatalf("%v view: Position() = %d, below %d", level, vp, p)
		}
	}
	// Position covers every Apply that returned.
	last := x.applyAt(0, "V1", "p", mut(storage.Insert, "r"))
	if p, err := x.e.Position(x.ctx); err != nil || p < last {
		t.Fatalf("Position after an Apply at %d = %d, %v", last, p, err)
	}
}

func hasTable(tables []storage.TableInfo, name string) bool {
	for _, ti := range tables {
		if ti.Name == name {
			return true
		}
	}
	return false
}
