package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/postgres"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Tests of what the conformance suite does not reach: the one-round-trip batch path's
// failures, concurrent merges (read-modify-write), scans that span several statements,
// the purge, and several engines (front ends) on one database.

func newAccount() string { return fmt.Sprintf("pg%016x", rand.Uint64()) }

func i64(name string, v int64) entity.Property {
	return entity.Property{Name: name, Value: entity.Int64Value(v)}
}

func mut(op storage.Op, rk string, props ...entity.Property) storage.Mutation {
	return storage.Mutation{Op: op, RowKey: rk, Props: props}
}

func scanAll(t *testing.T, e storage.Engine, acct, tbl string) []storage.Record {
	t.Helper()
	var out []storage.Record
	start := storage.Key{}
	for {
		res, err := e.Scan(t.Context(), acct, tbl, storage.ScanRequest{Start: start, Limit: 1000})
		if err != nil {
			t.Fatalf("Scan: %v", err)
		}
		out = append(out, res.Records...)
		if res.Next == nil {
			return out
		}
		start = *res.Next
	}
}

// TestBatchFailures puts a failing mutation at every position of a batch without merges
// (the pipelined path, which runs statements in RowKey order, not the caller's): the
// reported index is the caller's, and nothing is written.
func TestBatchFailures(t *testing.T) {
	e := open(t, postgres.Options{})
	ctx, acct := t.Context(), newAccount()
	if err := e.CreateTable(ctx, acct, "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	var vs []int64
	for i := range 5 {
		applied, err := e.Apply(ctx, acct, "T", "p", []storage.Mutation{mut(storage.Insert, fmt.Sprintf("r%d", i), i64("N", int64(i)))})
		v := applied.Versions
		if err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v[0])
	}
	valid := []storage.Mutation{
		mut(storage.InsertOrReplace, "r0", i64("S", 1)),
		mut(storage.Delete, "r4"),
		mut(storage.Insert, "new1", i64("S", 2)),
		{Op: storage.Replace, RowKey: "r2", IfMatch: vs[2], Props: []entity.Property{i64("S", 3)}},
		mut(storage.Replace, "r3", i64("S", 4)),
	}
	failures := []struct {
		m    storage.Mutation
		want error
	}{
		{mut(storage.Insert, "r1"), storage.ErrExists},
		{mut(storage.Replace, "zz"), storage.ErrNotFound},
		{storage.Mutation{Op: storage.Replace, RowKey: "r1", IfMatch: vs[1] - 1}, storage.ErrVersionMismatch},
		{mut(storage.Delete, "a"), storage.ErrNotFound},
		{storage.Mutation{Op: storage.Delete, RowKey: "r1", IfMatch: vs[0]}, storage.ErrVersionMismatch},
	}
	before := scanAll(t, e, acct, "T")
	for _, f := range failures {
		for k := 0; k <= len(valid); k++ {
			muts := append(append(append([]storage.Mutation{}, valid[:k]...), f.m), valid[k:]...)
			_, err := e.Apply(ctx, acct, "T", "p", muts)
			var ae *storage.ApplyError
			if !errors.As(err, &ae) || ae.Index != k || !errors.Is(err, f.want) {
				t.Fatalf("%v %q at %d: err %v, want index %d %v", f.m.Op, f.m.RowKey, k, err, k, f.want)
			}
			if after := scanAll(t, e, acct, "T"); len(after) != len(before) {
				t.Fatalf("failed batch changed the table: %d rows, was %d", len(after), len(before))
			} else {
				for i := range after {
					if after[i].Version != before[i].Version {
						t.Fatalf("failed batch changed %q", after[i].Entity.RowKey)
					}
				}
			}
		}
	}
	applied, err := e.Apply(ctx, acct, "T", "p", valid)
	got := applied.Versions
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range valid {
		r, err := e.Get(ctx, acct, "T", "p", m.RowKey)
		if m.Op == storage.Delete {
			if !errors.Is(err, storage.ErrNotFound) {
				t.Fatalf("deleted %s: %v", m.RowKey, err)
			}
			continue
		}
		if err != nil || r.Version != got[i] {
			t.Fatalf("%s: Get version %d, %v; Apply returned %d", m.RowKey, r.Version, err, got[i])
		}
	}
	// A batch on a missing table.
	if _, err := e.Apply(ctx, acct, "Missing", "p", valid); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("batch on a missing table: %v", err)
	}

	// Batches of inserts only are one statement over arrays: an existing key at any
	// position fails the whole batch at that position.
	before = scanAll(t, e, acct, "T")
	for k := range 4 {
		var muts []storage.Mutation
		for i := range 4 {
			rk := fmt.Sprintf("n%d", 9-i) // not in RowKey order
			if i == k {
				rk = "r1"
			}
			muts = append(muts, mut(storage.Insert, rk, i64("I", int64(i))))
		}
		_, err := e.Apply(ctx, acct, "T", "p", muts)
		var ae *storage.ApplyError
		if !errors.As(err, &ae) || ae.Index != k || !errors.Is(err, storage.ErrExists) {
			t.Fatalf("insert batch with an existing key at %d: %v", k, err)
		}
		if after := scanAll(t, e, acct, "T"); len(after) != len(before) {
			t.Fatalf("failed insert batch wrote %d rows", len(after)-len(before))
		}
	}
	if _, err := e.Apply(ctx, acct, "Missing", "p", []storage.Mutation{mut(storage.Insert, "a"), mut(storage.Insert, "b")}); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("insert batch on a missing table: %v", err)
	}
	// Insert-or-replace batches: each row's version is the one stored, above the old one.
	old, err := e.Get(ctx, acct, "T", "p", "r1")
	if err != nil {
		t.Fatal(err)
	}
	applied, err = e.Apply(ctx, acct, "T", "p", []storage.Mutation{mut(storage.InsertOrReplace, "z1", i64("U", 1)), mut(storage.InsertOrReplace, "r1", i64("U", 2)), mut(storage.InsertOrReplace, "a0", i64("U", 3))})
	vs2 := applied.Versions
	if err != nil {
		t.Fatal(err)
	}
	for i, rk := range []string{"z1", "r1", "a0"} {
		r, err := e.Get(ctx, acct, "T", "p", rk)
		if u, _ := r.Entity.Get("U"); err != nil || r.Version != vs2[i] || u.Int != int64(i+1) {
			t.Fatalf("%s after insert-or-replace batch: %+v, %v; returned version %d", rk, r, err, vs2[i])
		}
	}
	if vs2[1] <= old.Version {
		t.Fatalf("insert-or-replace of an existing row: version %d not above %d", vs2[1], old.Version)
	}
}

// TestConcurrentMerges runs merges of distinct properties into the same rows from many
// goroutines: no merge may be lost (each is a compare-and-swap that retries).
func TestConcurrentMerges(t *testing.T) {
	e := open(t, postgres.Options{})
	ctx, acct := t.Context(), newAccount()
	if err := e.CreateTable(ctx, acct, "M", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	const writers, rounds = 16, 15
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := 1; i <= rounds; i++ {
				// InsertOrMerge on a row that may not exist yet (insert races merge),
				// and a two-row batch of merges.
				if _, err := e.Apply(ctx, acct, "M", "p", []storage.Mutation{mut(storage.InsertOrMerge, "a", i64(fmt.Sprintf("W%02d", w), int64(i)))}); err != nil {
					errs <- err
					return
				}
				if _, err := e.Apply(ctx, acct, "M", "p", []storage.Mutation{
					mut(storage.InsertOrMerge, "c", i64(fmt.Sprintf("W%02d", w), int64(i))),
					mut(storage.InsertOrMerge, "b", i64(fmt.Sprintf("W%02d", w), int64(i))),
				}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, rk := range []string{"a", "b", "c"} {
		r, err := e.Get(ctx, acct, "M", "p", rk)
		if err != nil {
			t.Fatal(err)
		}
		for w := range writers {
			if v, ok := r.Entity.Get(fmt.Sprintf("W%02d", w)); !ok || v.Int != rounds {
				t.Fatalf("row %s: writer %d's property = %v (present %v), want %d: a merge was lost", rk, w, v, ok, rounds)
			}
		}
	}
}

// TestScanSnapshot checks that a scan spanning several statements reads one snapshot:
// a writer keeps changing the first and the last row of a 3,000-row partition together,
// in one batch, and every scan must see both rows with the same value.
func TestScanSnapshot(t *testing.T) {
	e := open(t, postgres.Options{})
	ctx, acct := t.Context(), newAccount()
	if err := e.CreateTable(ctx, acct, "S", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	const rows = 3000
	for b := 0; b < rows; b += 100 {
		var muts []storage.Mutation
		for i := b; i < b+100; i++ {
			muts = append(muts, mut(storage.Insert, fmt.Sprintf("r%04d", i), i64("N", 0)))
		}
		if _, err := e.Apply(ctx, acct, "S", "p", muts); err != nil {
			t.Fatal(err)
		}
	}
	first, last := "r0000", fmt.Sprintf("r%04d", rows-1)
	stop := make(chan struct{})
	var writes atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for n := int64(1); ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := e.Apply(ctx, acct, "S", "p", []storage.Mutation{
				mut(storage.Replace, first, i64("N", n)), mut(storage.Replace, last, i64("N", n)),
			}); err != nil {
				if ctx.Err() == nil {
					t.Error(err)
				}
				return
			}
			writes.Add(1)
		}
	})
	ends := func(r *storage.Record) bool { return r.Entity.RowKey == first || r.Entity.RowKey == last }
	for i := range 40 {
		req := storage.ScanRequest{Limit: 10_000} // more than one statement reads
		if i%2 == 0 {
			req = storage.ScanRequest{Limit: 5, Filter: ends} // filtered past the first chunk
		}
		res, err := e.Scan(ctx, acct, "S", req)
		if err != nil {
			t.Fatal(err)
		}
		var got []storage.Record
		for _, r := range res.Records {
			if ends(&r) {
				got = append(got, r)
			}
		}
		if len(got) != 2 || res.Next != nil {
			t.Fatalf("scan %d: %d end rows, next %v", i, len(got), res.Next)
		}
		a, _ := got[0].Entity.Get("N")
		b, _ := got[1].Entity.Get("N")
		if a.Int != b.Int {
			t.Fatalf("scan %d saw N=%d in %s but N=%d in %s: not one snapshot", i, a.Int, first, b.Int, last)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d batches written during the scans", writes.Load())
	if writes.Load() == 0 {
		t.Fatal("the writer made no progress")
	}
}

// TestPurge deletes a table of more rows than one purge chunk: the rows are gone after a
// purge, and the queue entry too once the grace period has passed.
func TestPurge(t *testing.T) {
	e := open(t, postgres.Options{DisablePurger: true, PurgeGrace: time.Millisecond})
	ctx, acct := t.Context(), newAccount()
	db, err := pgxpool.New(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := e.CreateTable(ctx, acct, "Big", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := db.QueryRow(ctx, `SELECT id FROM cerulean_tables WHERE account = $1 AND key = 'big'::BYTEA`, []byte(acct)).Scan(&id); err != nil {
		t.Fatal(err)
	}
	n := postgres.PurgeChunk*2 + 500
	if _, err := db.Exec(ctx, `INSERT INTO cerulean_entities (table_id, pk, rk, version, props)
		SELECT $1, 'p'::BYTEA, convert_to(lpad(i::TEXT, 6, '0'), 'UTF8'), 1, '\x00'::BYTEA FROM generate_series(1, $2) i`, id, n); err != nil {
		t.Fatal(err)
	}
	if got := len(scanAll(t, e, acct, "Big")); got != n {
		t.Fatalf("table holds %d rows, want %d", got, n)
	}
	if err := e.DeleteTable(ctx, acct, "Big"); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateTable(ctx, acct, "Big", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	if got := len(scanAll(t, e, acct, "Big")); got != 0 {
		t.Fatalf("re-created table shows %d rows", got)
	}
	time.Sleep(5 * time.Millisecond) // past the grace period
	if err := e.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	var left, queued int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM cerulean_entities WHERE table_id = $1`, id).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(ctx, `SELECT count(*) FROM cerulean_purges WHERE table_id = $1`, id).Scan(&queued); err != nil {
		t.Fatal(err)
	}
	if left != 0 || queued != 0 {
		t.Fatalf("after purge: %d rows left, %d queue entries", left, queued)
	}
}

// TestFrontEnds runs 48 goroutines spread over three engines (three front ends on one
// database) incrementing one counter with If-Match: the counter ends at the number of
// successful writes, and versions form one chain.
func TestFrontEnds(t *testing.T) {
	engines := []*postgres.Engine{open(t, postgres.Options{}), open(t, postgres.Options{}), open(t, postgres.Options{})}
	ctx, acct := t.Context(), newAccount()
	if err := engines[0].CreateTable(ctx, acct, "Counter", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	// The table created through one front end is visible to the others at once.
	if _, err := engines[2].Apply(ctx, acct, "counter", "p", []storage.Mutation{mut(storage.Insert, "c", i64("N", 0))}); err != nil {
		t.Fatal(err)
	}
	var wins, conflicts atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(2 * time.Second)
	for g := range 48 {
		e := engines[g%3]
		wg.Go(func() {
			for time.Now().Before(deadline) {
				r, err := e.Get(ctx, acct, "Counter", "p", "c")
				if err != nil {
					t.Error(err)
					return
				}
				n, _ := r.Entity.Get("N")
				_, err = e.Apply(ctx, acct, "Counter", "p", []storage.Mutation{{Op: storage.Replace, RowKey: "c", IfMatch: r.Version, Props: []entity.Property{i64("N", n.Int+1)}}})
				switch {
				case err == nil:
					wins.Add(1)
				case errors.Is(err, storage.ErrVersionMismatch):
					conflicts.Add(1)
				default:
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	r, err := engines[1].Get(ctx, acct, "Counter", "p", "c")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := r.Entity.Get("N")
	t.Logf("%d increments, %d conflicts", wins.Load(), conflicts.Load())
	if n.Int != wins.Load() || wins.Load() == 0 {
		t.Fatalf("counter %d after %d successful increments", n.Int, wins.Load())
	}
	// A table deleted through one front end is gone for the others.
	if err := engines[1].DeleteTable(ctx, acct, "Counter"); err != nil {
		t.Fatal(err)
	}
	if _, err := engines[0].Get(ctx, acct, "Counter", "p", "c"); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("Get through another front end after DeleteTable: %v", err)
	}
}

// TestUnavailable checks that a database that cannot be reached shows as
// storage.ErrUnavailable, which the service answers with 503 ServerBusy.
func TestUnavailable(t *testing.T) {
	e := open(t, postgres.Options{})
	ctx, acct := t.Context(), newAccount()
	if err := e.CreateTable(ctx, acct, "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Get(ctx, acct, "T", "p", "r"); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("Get after Close = %v, want ErrUnavailable", err)
	}
	// Nothing listens on port 1.
	_, err := postgres.Open(context.Background(), "postgres://postgres@127.0.0.1:1/x?sslmode=disable&connect_timeout=2", postgres.Options{})
	if err == nil {
		t.Fatal("Open of an unreachable database succeeded")
	}
}

// TestACLFrontEnds checks that stored access policies and service properties set
// through one front end are what every other front end reads next: nothing is cached.
func TestACLFrontEnds(t *testing.T) {
	engines := []*postgres.Engine{open(t, postgres.Options{}), open(t, postgres.Options{}), open(t, postgres.Options{})}
	ctx, acct := t.Context(), newAccount()
	if err := engines[0].CreateTable(ctx, acct, "Shared", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		w, r := engines[i%3], engines[(i+1)%3]
		want := []byte(fmt.Sprintf("policy %d", i))
		if i%5 == 4 {
			want = nil // cleared
		}
		if err := w.SetTableACL(ctx, acct, "shared", want); err != nil {
			t.Fatal(err)
		}
		if got, err := r.GetTableACL(ctx, acct, "Shared"); err != nil || string(got) != string(want) || (want == nil) != (got == nil) {
			t.Fatalf("step %d: ACL through another front end = %q, %v; want %q", i, got, err, want)
		}
		if err := w.SetServiceProperties(ctx, acct, want); err != nil {
			t.Fatal(err)
		}
		if got, err := r.GetServiceProperties(ctx, acct); err != nil || string(got) != string(want) || (want == nil) != (got == nil) {
			t.Fatalf("step %d: service properties through another front end = %q, %v; want %q", i, got, err, want)
		}
	}
	// Deleted through one front end, created again through another: no ACL.
	if err := engines[0].SetTableACL(ctx, acct, "Shared", []byte("old")); err != nil {
		t.Fatal(err)
	}
	if err := engines[1].DeleteTable(ctx, acct, "Shared"); err != nil {
		t.Fatal(err)
	}
	if err := engines[0].SetTableACL(ctx, acct, "Shared", []byte("late")); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("SetTableACL through another front end after DeleteTable = %v, want ErrTableNotFound", err)
	}
	if err := engines[2].CreateTable(ctx, acct, "Shared", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	for _, e := range engines {
		if got, err := e.GetTableACL(ctx, acct, "Shared"); err != nil || got != nil {
			t.Fatalf("ACL of the table created again = %q, %v; want nil", got, err)
		}
	}
}
