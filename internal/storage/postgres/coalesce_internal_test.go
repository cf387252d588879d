package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestCoalescedSingles runs many single writes at once through one group slot, so that
// they share commits, with duplicates among them (exactly one of each pair may win)
// and statements that the database refuses in the middle of the groups: every write
// gets its own answer, the refused statements fail alone, and every write that
// succeeded is stored, at a position its Apply reported. The last two phases have no
// duplicates and nothing refused, so their groups run as one statement each
// (mergeSingles): inserts, then insert-or-replaces of the same rows.
func TestCoalescedSingles(t *testing.T) {
	ctx := context.Background()
	e, acct := tableEngine(t, "co")
	e.singles.slots = 1

	// Phase 0: writes only (they must share commits); phase 1: with statements the
	// database refuses among them.
	phaseMsg := []string{"writes:", "writes and refused statements:", "distinct inserts:", "distinct upserts:"}
	for phase, bad := range []int{0, 8, 0, 0} {
		const writers = 96
		distinct, op := phase >= 2, storage.Insert
		if phase == 3 {
			op = storage.InsertOrReplace
		}
		mergedBefore := e.singles.merged.Load()
		type outcome struct {
			rk  string
			res storage.Applied
			err error
		}
		out := make([]outcome, writers)
		badErrs := make([]error, bad)
		var wg sync.WaitGroup
		for i := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rk := fmt.Sprintf("r%d-%03d", min(phase, 2), i)
				if i%4 == 0 && !distinct {
					rk = fmt.Sprintf("dup%d-%03d", phase, i/8) // i and i+4 write the same row
				}
				props := []entity.Property{{Name: "N", Value: entity.Int32Value(int32(i))}}
				res, err := e.Apply(ctx, acct, "T", "p", []storage.Mutation{{Op: op, RowKey: rk, Props: props}})
				out[i] = outcome{rk, res, err}
			}()
		}
		for i := range bad {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Fails when it runs, not when it is prepared.
				st := stmt{sql: `SELECT 1 / ($1::BIGINT - $1::BIGINT)`, args: []any{int64(i)}}
				_, badErrs[i] = e.singles.do(ctx, &st, 0, nil, nil)
			}()
		}
		wg.Wait()

		for i, err := range badErrs {
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "22012" {
				t.Errorf(phaseMsg[phase]+" refused statement %d: %v, want division_by_zero", i, err)
			}
		}
		won := map[string]int{}
		var highest storage.Position
		for i, o := range out {
			var ae *storage.ApplyError
			switch {
			case o.err == nil:
				won[o.rk]++
				if len(o.res.Versions) != 1 || o.res.Versions[0] <= 0 || o.res.Position == 0 {
					t.Errorf(phaseMsg[phase]+" write %d: %+v", i, o.res)
				}
				highest = max(highest, o.res.Position)
				rec, err := e.Get(ctx, acct, "T", "p", o.rk)
				if err != nil {
					t.Errorf(phaseMsg[phase]+" write %d (%s) succeeded but reads %v", i, o.rk, err)
				} else if rec.Version != o.res.Versions[0] && won[o.rk] == 1 && o.rk[0] == 'r' {
					t.Errorf(phaseMsg[phase]+" write %d: version %d, stored %d", i, o.res.Versions[0], rec.Version)
				} else if o.rk[0] == 'r' && (len(rec.Entity.Props) != 1 || rec.Entity.Props[0].Value.Int != int64(i)) {
					t.Errorf(phaseMsg[phase]+" write %d (%s): stored %+v", i, o.rk, rec.Entity.Props)
				}
			case errors.As(o.err, &ae) && errors.Is(ae.Err, storage.ErrExists) && o.rk[0] == 'd':
				won[o.rk] += 0
			default:
				t.Errorf(phaseMsg[phase]+" write %d (%s): %v", i, o.rk, o.err)
			}
		}
		for rk, n := range won {
			if n != 1 {
				t.Errorf(phaseMsg[phase]+" %s: %d writes succeeded, want 1", rk, n)
			}
		}
		if want := writers - writers/8; distinct && len(won) != writers || !distinct && len(won) != want {
			t.Errorf(phaseMsg[phase]+" %d rows written", len(won))
		}
		if distinct && e.singles.merged.Load() == mergedBefore {
			t.Error(phaseMsg[phase] + " no group ran as one statement")
		}
		if now, err := e.Position(ctx); err != nil || now < highest {
			t.Errorf(phaseMsg[phase]+" position %d (%v), below a write's %d", now, err, highest)
		}
		if phase == 0 && e.singles.shared.Load() == 0 {
			t.Error("no write shared a commit")
		}
	}
}

// TestCoalescedGets reads many entities at once through one group slot, so that the
// reads share round trips, among them reads of missing entities and of a missing table:
// each gets its own answer. Groups of reads alone run as one statement (mergeGets); in
// the first rounds a statement the database refuses joins them, and its group runs
// statement by statement.
func TestCoalescedGets(t *testing.T) {
	ctx := context.Background()
	e, acct := tableEngine(t, "cg")
	const rows = 50
	versions := make([]int64, rows)
	positions := make([]storage.Position, rows)
	for i := range rows {
		props := []entity.Property{{Name: "N", Value: entity.Int32Value(int32(i))}}
		res, err := e.Apply(ctx, acct, "T", "p", []storage.Mutation{{Op: storage.Insert, RowKey: fmt.Sprintf("r%03d", i), Props: props}})
		if err != nil {
			t.Fatal(err)
		}
		versions[i], positions[i] = res.Versions[0], res.Position
	}
	e.gets.slots = 1
	before, mergedBefore := e.gets.shared.Load(), e.gets.merged.Load()
	var wg sync.WaitGroup
	for round := range 6 {
		for i := range rows + 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch {
				case i == rows+19 && round < 4: // a statement the database refuses, in the group
					st := stmt{sql: `SELECT 1 / ($1::BIGINT - $1::BIGINT)`, args: []any{int64(round)}}
					var pe *pgconn.PgError
					if _, err := e.gets.do(ctx, &st, 0, nil, nil); !errors.As(err, &pe) || pe.Code != "22012" {
						t.Errorf("round %d: refused read: %v, want division_by_zero", round, err)
					}
				case i >= rows+10: // a missing table
					if _, err := e.Get(ctx, acct, "Missing", "p", "r000"); !errors.Is(err, storage.ErrTableNotFound) {
						t.Errorf("round %d: get from a missing table: %v", round, err)
					}
				case i >= rows: // a missing entity
					if _, err := e.Get(ctx, acct, "T", "p", fmt.Sprintf("x%03d", i)); !errors.Is(err, storage.ErrNotFound) {
						t.Errorf("round %d: get of a missing entity: %v", round, err)
					}
				default:
					// Odd rounds read through a view of the primary, as requests do:
					// its position must cover the write it read.
					var rec storage.Record
					var err error
					if round%2 == 1 {
						v, verr := e.ReadView(ctx, storage.ReadOptions{Consistency: storage.Strong})
						if verr != nil {
							t.Error(verr)
							return
						}
						rec, err = v.Get(ctx, acct, "T", "p", fmt.Sprintf("r%03d", i))
						if err == nil && v.Position() < positions[i] {
							t.Errorf("round %d: get %d: view at %d, below the write's %d", round, i, v.Position(), positions[i])
						}
					} else {
						rec, err = e.Get(ctx, acct, "T", "p", fmt.Sprintf("r%03d", i))
					}
					if err != nil {
						t.Errorf("round %d: get %d: %v", round, i, err)
						return
					}
					if rec.Version != versions[i] || rec.Entity.RowKey != fmt.Sprintf("r%03d", i) || len(rec.Entity.Props) != 1 ||
						rec.Entity.Props[0].Value.Int != int64(i) {
						t.Errorf("round %d: get %d: %+v, version %d", round, i, rec.Entity, rec.Version)
					}
				}
			}()
		}
	}
	wg.Wait()
	if e.gets.shared.Load() == before {
		t.Error("no read shared a round trip")
	}
	if e.gets.merged.Load() == mergedBefore {
		t.Error("no group of reads ran as one statement")
	}
}

// TestStaleTableID deletes and re-creates a table through one front end while another
// holds the old table's id in its cache: every single write through the other lands in
// the new table or fails as it would there, none under the old id, and a write to a
// deleted table fails with ErrTableNotFound.
func TestStaleTableID(t *testing.T) {
	ctx := context.Background()
	a, b := internalEngine(t), internalEngine(t)
	acct := fmt.Sprintf("st%016x", rand.Uint64())
	props := []entity.Property{{Name: "N", Value: entity.Int32Value(1)}}
	apply := func(e *Engine, op storage.Op, rk string) error {
		_, err := e.Apply(ctx, acct, "T", "p", []storage.Mutation{{Op: op, RowKey: rk, Props: props}})
		return err
	}
	if err := a.CreateTable(ctx, acct, "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	for _, rk := range []string{"old1", "old2", "old3"} {
		if err := apply(a, storage.Insert, rk); err != nil {
			t.Fatal(err)
		}
	}
	old, ok := a.cache.get(tableRef{acct, storage.TableKey("T")})
	if !ok || old.id == 0 {
		t.Fatalf("no cached id after writes: %+v", old)
	}

	// Deleted through b: a's writes find no table.
	if err := b.DeleteTable(ctx, acct, "T"); err != nil {
		t.Fatal(err)
	}
	for _, op := range []storage.Op{storage.Insert, storage.InsertOrReplace, storage.Replace, storage.Delete} {
		a.cache.put(tableRef{acct, storage.TableKey("T")}, old) // stale again
		if err := apply(a, op, "old1"); !errors.Is(err, storage.ErrTableNotFound) {
			t.Errorf("%v on a deleted table: %v, want ErrTableNotFound", op, err)
		}
	}

	// Created again through b: a's writes go to the new table.
	if err := b.CreateTable(ctx, acct, "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	want := map[storage.Op]error{storage.Replace: storage.ErrNotFound, storage.Delete: storage.ErrNotFound}
	for i, op := range []storage.Op{storage.Insert, storage.InsertOrReplace, storage.Replace, storage.Delete} {
		a.cache.put(tableRef{acct, storage.TableKey("T")}, old)
		rk := fmt.Sprintf("old%d", i%3+1)
		if op == storage.Insert || op == storage.InsertOrReplace {
			rk = fmt.Sprintf("new%d", i)
		}
		err := apply(a, op, rk)
		if w := want[op]; w != nil {
			if !errors.Is(err, w) {
				t.Errorf("%v of %s, only in the deleted table: %v, want %v", op, rk, err, w)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v of %s in the new table: %v", op, rk, err)
			continue
		}
		if _, err := b.Get(ctx, acct, "T", "p", rk); err != nil {
			t.Errorf("%v of %s through a: %v through b", op, rk, err)
		}
	}
	var n int64
	if err := a.pool.QueryRow(ctx, `SELECT count(*) FROM cerulean_entities WHERE table_id = $1 AND rk NOT IN ('old1', 'old2', 'old3')`, old.id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d rows written under the deleted table's id", n)
	}
	if err := b.DeleteTable(ctx, acct, "T"); err != nil {
		t.Fatal(err)
	}
	_ = b.Purge(ctx)
}

// internalURL is the test database's URL; without one the test is skipped.
func internalURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv("CERULEAN_TEST_POSTGRES_URL")
	if url == "" {
		t.Skip("CERULEAN_TEST_POSTGRES_URL is not set")
	}
	return url
}

// withParam adds a query parameter ("name=value") to a database URL.
func withParam(url, param string) string {
	if strings.Contains(url, "?") {
		return url + "&" + param
	}
	return url + "?" + param
}

// internalEngine opens an engine on CERULEAN_TEST_POSTGRES_URL without the purger (the
// test drives what it needs), closed when the test ends; without the URL the test skips.
func internalEngine(t testing.TB) *Engine {
	t.Helper()
	e, err := Open(context.Background(), internalURL(t), Options{DisablePurger: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// TestSharedTableLoads: a front end's first writes to a table, all at once, share one
// load of its catalogue row, so they open no more connections than their groups use (a
// load each used to take a connection each, and the pool opened one for each); and a
// write whose shared load failed only because the request that ran it gave up loads
// again rather than failing too.
func TestSharedTableLoads(t *testing.T) {
	ctx := context.Background()
	a, b := internalEngine(t), internalEngine(t)
	acct := fmt.Sprintf("sl%016x", rand.Uint64())
	if err := a.CreateTable(ctx, acct, "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.DeleteTable(ctx, acct, "T"); _ = a.Purge(ctx) })
	props := []entity.Property{{Name: "N", Value: entity.Int32Value(1)}}

	const writers = 32
	before := b.pool.Stat().NewConnsCount()
	atOnce(t, writers, func(i int) error {
		_, err := b.Apply(ctx, acct, "T", "p", []storage.Mutation{{Op: storage.Insert, RowKey: fmt.Sprint(i), Props: props}})
		return err
	})
	opened := b.pool.Stat().NewConnsCount() - before
	if limit := int64(b.singles.slots + 1); opened > limit {
		t.Errorf("%d concurrent first writes opened %d connections; want at most %d (the write groups' %d and one load)", writers, opened, limit, b.singles.slots)
	}
	t.Logf("%d concurrent first writes opened %d connections", writers, opened)

	// A load that fails with its request's cancellation, joined by another request.
	c := internalEngine(t)
	key := acct + "/" + storage.TableKey("T")
	release := make(chan struct{})
	go c.loads.Do(key, func() (any, error) {
		<-release
		return nil, context.Canceled
	})
	time.Sleep(10 * time.Millisecond) // the flight above has begun
	got := make(chan error, 1)
	go func() {
		_, err := c.entry(ctx, []byte(acct), []byte(storage.TableKey("T")))
		got <- err
	}()
	time.Sleep(100 * time.Millisecond) // entry has joined it
	close(release)
	if err := <-got; err != nil {
		t.Errorf("entry after a shared load gave up with its request: %v", err)
	}
}

// TestCoalescedMerges: concurrent single merges share round trips, their reads with
// the point reads and their compare-and-swaps with the single writes, and lose nothing:
// 32 merges of 32 entities each keep both properties, and 16 merges of one entity at
// once (whose swaps fail and start again) leave all 16 properties on it.
func TestCoalescedMerges(t *testing.T) {
	ctx := context.Background()
	e, acct := tableEngine(t, "cm")
	prop := func(name string, v int32) []entity.Property {
		return []entity.Property{{Name: name, Value: entity.Int32Value(v)}}
	}
	apply := func(op storage.Op, rk string, props []entity.Property) error {
		_, err := e.Apply(ctx, acct, "T", "p", []storage.Mutation{{Op: op, RowKey: rk, Props: props}})
		return err
	}
	const rows, hot = 32, 16
	for i := range rows {
		if err := apply(storage.Insert, fmt.Sprint(i), prop("A", int32(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := apply(storage.Insert, "hot", prop("A", 0)); err != nil {
		t.Fatal(err)
	}
	reads, writes := e.gets.shared.Load(), e.singles.shared.Load()
	atOnce(t, rows+hot, func(i int) error {
		if i < rows {
			return apply(storage.Merge, fmt.Sprint(i), prop("B", int32(i)))
		}
		j := i - rows
		return apply(storage.Merge, "hot", prop(fmt.Sprintf("P%d", j), int32(j)))
	})
	for i := range rows {
		rec, err := e.Get(ctx, acct, "T", "p", fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int32{}
		for _, p := range rec.Entity.Props {
			got[p.Name] = int32(p.Value.Int)
		}
		if got["A"] != int32(i) || got["B"] != int32(i) || len(got) != 2 {
			t.Errorf("entity %d after its merge: %v", i, got)
		}
	}
	rec, err := e.Get(ctx, acct, "T", "p", "hot")
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Entity.Props) != hot+1 {
		t.Errorf("the hot entity has %d properties after %d concurrent merges; want %d: %v", len(rec.Entity.Props), hot, hot+1, rec.Entity.Props)
	}
	sharedReads, sharedWrites := e.gets.shared.Load()-reads, e.singles.shared.Load()-writes
	t.Logf("%d concurrent merges: %d reads and %d writes ran in groups of more than one", rows+hot, sharedReads, sharedWrites)
	if sharedReads == 0 || sharedWrites == 0 {
		t.Errorf("%d concurrent merges: %d reads and %d writes ran in groups of more than one; want both above 0", rows+hot, sharedReads, sharedWrites)
	}
}

// atOnce runs fn(0) … fn(n-1) in n goroutines released together, and fails the test
// with the first error any returned.
func atOnce(t *testing.T, n int, fn func(i int) error) {
	t.Helper()
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			errs <- fn(i)
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestUpsertModes: InsertOrMerge inserts first while upserts create their entities and
// reads first while they find them (applyUpsert); each way it creates and merges exactly,
// alone and racing.
func TestUpsertModes(t *testing.T) {
	ctx := context.Background()
	e, acct := tableEngine(t, "um")
	upsert := func(rk, name string, v int) error {
		_, err := e.Apply(ctx, acct, "T", "p", []storage.Mutation{{Op: storage.InsertOrMerge, RowKey: rk,
			Props: []entity.Property{{Name: name, Value: entity.Int32Value(int32(v))}}}})
		return err
	}
	// statements runs one upsert alone and returns the reads and writes it made.
	statements := func(rk, name string, v int) (reads, writes int64) {
		t.Helper()
		r, w := e.gets.calls.Load(), e.singles.calls.Load()
		if err := upsert(rk, name, v); err != nil {
			t.Fatal(err)
		}
		return e.gets.calls.Load() - r, e.singles.calls.Load() - w
	}
	props := func(rk string) map[string]int32 {
		t.Helper()
		rec, err := e.Get(ctx, acct, "T", "p", rk)
		if err != nil {
			t.Fatalf("get %s: %v", rk, err)
		}
		got := map[string]int32{}
		for _, p := range rec.Entity.Props {
			got[p.Name] = int32(p.Value.Int)
		}
		return got
	}
	const n = upsertLean + 8
	// Creating upserts turn it to inserting first, as far as it goes: one write each.
	for i := range n {
		if err := upsert(fmt.Sprint(i), "A", i); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.upserts.Load(); got != -upsertLean {
		t.Fatalf("after %d creating upserts the lean is %d, want %d", n, got, -upsertLean)
	}
	if r, w := statements("created", "A", 0); r != 0 || w != 1 {
		t.Errorf("a creating upsert, inserting first: %d reads and %d writes, want 0 and 1", r, w)
	}
	// Upserts of existing entities merge, and turn it to reading first: the insert that
	// finds the entity, the read and the swap, then only the read and the swap.
	if r, w := statements("0", "B", 0); r != 1 || w != 2 {
		t.Errorf("a merging upsert, inserting first: %d reads and %d writes, want 1 and 2", r, w)
	}
	for i := 1; i < n; i++ {
		if err := upsert(fmt.Sprint(i), "B", i); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := e.upserts.Load(), int64(n-upsertLean); got != want {
		t.Fatalf("after %d merging upserts the lean is %d, want %d", n, got, want)
	}
	if r, w := statements("0", "B", 0); r != 1 || w != 1 {
		t.Errorf("a merging upsert, reading first: %d reads and %d writes, want 1 and 1", r, w)
	}
	for i := range n {
		if got := props(fmt.Sprint(i)); got["A"] != int32(i) || got["B"] != int32(i) || len(got) != 2 {
			t.Errorf("entity %d after its two upserts: %v", i, got)
		}
	}
	// Reading first, an upsert of an absent entity creates it.
	before := e.upserts.Load()
	if r, w := statements("fresh", "C", 7); r != 1 || w != 1 {
		t.Errorf("a creating upsert, reading first: %d reads and %d writes, want 1 and 1", r, w)
	}
	if got := props("fresh"); got["C"] != 7 || len(got) != 1 {
		t.Errorf("created by an upsert that read first: %v", got)
	}
	if got := e.upserts.Load(); got != before-1 {
		t.Errorf("the lean went from %d to %d after a creating upsert, want one less", before, got)
	}
	// Racing upserts, reading first: into one entity that exists, and into one that does
	// not (all but one find it created meanwhile, and their swaps start again).
	const racers = 16
	atOnce(t, 2*racers, func(i int) error {
		if i < racers {
			return upsert("0", fmt.Sprintf("P%d", i), i)
		}
		return upsert("new", fmt.Sprintf("P%d", i-racers), i-racers)
	})
	if got := props("0"); len(got) != racers+2 {
		t.Errorf("the existing entity has %d properties after %d racing upserts; want %d: %v", len(got), racers, racers+2, got)
	}
	if got := props("new"); len(got) != racers {
		t.Errorf("the new entity has %d properties after %d racing upserts; want %d: %v", len(got), racers, racers, got)
	}
}

// tableEngine opens an engine (internalEngine) with table "T" created in a new account
// whose name starts with prefix; the table is deleted and purged when the test ends.
func tableEngine(t testing.TB, prefix string) (*Engine, string) {
	t.Helper()
	ctx := context.Background()
	e := internalEngine(t)
	acct := fmt.Sprintf("%s%016x", prefix, rand.Uint64())
	if err := e.CreateTable(ctx, acct, "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.DeleteTable(ctx, acct, "T"); _ = e.Purge(ctx) })
	return e, acct
}

// TestGroupRowOrder runs groups of single writes as one statement each (mergeSingles),
// as the coalescer makes them, and checks that the database writes their rows in the
// group's (table id, PartitionKey, RowKey) order: the order every group and batch takes
// its row locks in, so that none deadlocks another. It reads the order off the rows the
// statement answers, which the database returns as it writes them. Before ORDER BY, the
// planner's hash join wrote them backwards, and a merged group deadlocked with a group
// written statement by statement (BenchmarkUpsertHot).
func TestGroupRowOrder(t *testing.T) {
	ctx := context.Background()
	e, acct := tableEngine(t, "go")
	// A second table, so that a group spans tables as the coalescer's do.
	if err := e.CreateTable(ctx, acct, "U", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.DeleteTable(ctx, acct, "U") })
	for _, op := range []storage.Op{storage.Insert, storage.InsertOrReplace} {
		var group []*single
		for _, table := range []string{"T", "U"} {
			key := []byte(storage.TableKey(table))
			ent, err := e.entry(ctx, []byte(acct), key)
			if err != nil {
				t.Fatal(err)
			}
			for p := range 3 {
				for r := range 12 {
					a := applyArgs{acct: []byte(acct), key: key, pk: fmt.Sprintf("p%d", p), ent: ent}
					m := storage.Mutation{Op: op, RowKey: fmt.Sprintf("r%02d", r), Props: []entity.Property{{Name: "N", Value: entity.Int32Value(int32(r))}}}
					var ver int64
					st := e.singleStmt(&a, &m, []byte(a.pk), []byte(m.RowKey), 0, &ver)
					group = append(group, &single{st: &st, tid: ent.id, pk: []byte(a.pk), rk: []byte(m.RowKey)})
				}
			}
		}
		st, ok := e.mergeSingles(group)
		if !ok {
			t.Fatalf("%v: the group did not merge", op)
		}
		var order []string
		each := st.each
		st.each = func(m valueScanner, fds []pgconn.FieldDescription, vals [][]byte) error {
			var id int64
			var pk, rk []byte
			for j, d := range []any{&id, &pk, &rk} {
				if err := m.Scan(fds[j].DataTypeOID, fds[j].Format, vals[j], d); err != nil {
					return err
				}
			}
			order = append(order, fmt.Sprintf("%020d/%s/%s", id, pk, rk))
			return each(m, fds, vals)
		}
		if _, err := e.exec(ctx, []stmt{st}); err != nil {
			t.Fatalf("%v: %v", op, err)
		}
		if len(order) != len(group) {
			t.Fatalf("%v: %d rows written of %d", op, len(order), len(group))
		}
		if !slices.IsSorted(order) {
			t.Errorf("%v: rows written out of order: %v … %v", op, order[:3], order[len(order)-3:])
		}
		for i, s := range group {
			if s.st.rows != 1 {
				t.Errorf("%v: write %d answered %d rows", op, i, s.st.rows)
			}
		}

		// A batch of one partition's rows (applyMany's statement) answers them as it
		// wrote them too.
		tab, err := e.entry(ctx, []byte(acct), []byte(storage.TableKey("T")))
		if err != nil {
			t.Fatal(err)
		}
		q := map[storage.Op]string{storage.Insert: e.q.insertMany, storage.InsertOrReplace: e.q.upsertMany}[op]
		var rks, props [][]byte
		for r := range 40 {
			rks, props = append(rks, []byte(fmt.Sprintf("r%02d", r))), append(props, []byte{})
		}
		var (
			got [][]byte
			vs  []int64
			one int64
		)
		batch := []stmt{{sql: q, args: []any{[]byte(acct), []byte(storage.TableKey("T")), []byte("batch"), rks, props, int64(len(rks)), make([]int64, len(rks)), tab.gen},
			dest: []any{&got, &vs, &one}}}
		if _, err := e.exec(ctx, batch); err != nil {
			t.Fatalf("%v batch: %v", op, err)
		}
		if len(got) != len(rks) || !slices.IsSortedFunc(got, bytes.Compare) {
			t.Errorf("%v batch: rows written in the order %q", op, got)
		}
	}
}
