package pebble

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/index"
	"github.com/ceruleandb/cerulean/internal/odata"
	"github.com/ceruleandb/cerulean/internal/storage"
	pebbledb "github.com/cockroachdb/pebble/v2"
)

// storedIndexEntries lists the index entry keys the store holds for table id.
func storedIndexEntries(t *testing.T, e *Engine, id uint64) [][]byte {
	t.Helper()
	lo := appendIndexPrefix(nil, id, 0)[:9]
	hi := append([]byte{kindIndex}, binaryInc(lo[1:9])...)
	it, err := e.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out [][]byte
	for ok := it.SeekGE(lo); ok && bytes.Compare(it.Key(), hi) < 0; ok = it.Next() {
		out = append(out, slices.Clone(it.Key()))
	}
	return out
}

// binaryInc is the big-endian successor of b (same length; b not all 0xFF).
func binaryInc(b []byte) []byte {
	out := slices.Clone(b)
	for i := len(out) - 1; i >= 0; i-- {
		if out[i]++; out[i] != 0 {
			break
		}
	}
	return out
}

// TestIndexMaintenance: after random writes of every kind (single, batches with
// merges, ApplyEach, deletes, rows without the properties, values of every type), the
// index entries the store holds are exactly those its stored rows call for.
func TestIndexMaintenance(t *testing.T) {
	ctx := context.Background()
	e := openTest(t, t.TempDir(), Options{})
	const acct = "ix"
	defs := []storage.IndexDef{
		{Name: "ByA", Properties: []string{"A"}},
		{Name: "ByAB", Properties: []string{"A", "B"}},
	}
	if err := e.CreateTable(ctx, acct, "T", storage.TableSettings{Elastic: true, Indexes: defs}); err != nil {
		t.Fatal(err)
	}
	info, _ := e.GetTable(ctx, acct, "T")
	defs = info.Settings.Indexes
	tb, err := e.lookup(acct, "T")
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(46, 3))
	value := func() entity.Property {
		name := []string{"A", "B", "C"}[r.IntN(3)]
		vals := []entity.Value{entity.StringValue(fmt.Sprint(r.IntN(5))), entity.Int32Value(int32(r.IntN(5))),
			entity.Int64Value(int64(r.IntN(5))), entity.DoubleValue(float64(r.IntN(5)) / 2), entity.BoolValue(r.IntN(2) == 0)}
		return entity.Property{Name: name, Value: vals[r.IntN(len(vals))]}
	}
	props := func() []entity.Property {
		var ps []entity.Property
		for range r.IntN(4) {
			p := value()
			if !slices.ContainsFunc(ps, func(q entity.Property) bool { return q.Name == p.Name }) {
				ps = append(ps, p)
			}
		}
		return ps
	}
	ops := []storage.Op{storage.Insert, storage.Replace, storage.Merge, storage.InsertOrReplace, storage.InsertOrMerge, storage.Delete}
	for i := range 600 {
		pk := fmt.Sprintf("p%d", r.IntN(3))
		var muts []storage.Mutation
		seen := map[string]bool{}
		for range 1 + r.IntN(4) {
			rk := fmt.Sprintf("r%d", r.IntN(12))
			if seen[rk] {
				continue
			}
			seen[rk] = true
			muts = append(muts, storage.Mutation{Op: ops[r.IntN(len(ops))], RowKey: rk, Props: props()})
		}
		if i%3 == 0 {
			if _, err := e.ApplyEach(ctx, acct, "T", pk, muts); err != nil {
				t.Fatal(err)
			}
		} else {
			_, _ = e.Apply(ctx, acct, "T", pk, muts) // a batch may fail (not found, exists): nothing of it is written
		}
	}
	// What the rows call for.
	var want [][]byte
	res, err := e.Scan(ctx, acct, "T", storage.ScanRequest{Limit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range res.Records {
		ps := rec.Entity.Props
		if rec.Encoded != nil {
			if ps, err = entity.DecodeProps(rec.Encoded); err != nil {
				t.Fatal(err)
			}
		}
		want = appendIndexEntries(want, tb.id, defs, rec.Entity.PartitionKey, rec.Entity.RowKey, ps)
	}
	slices.SortFunc(want, bytes.Compare)
	got := storedIndexEntries(t, e, tb.id)
	if len(res.Records) == 0 || len(want) == 0 {
		t.Fatalf("the random writes left %d rows and %d entries: the test tests nothing", len(res.Records), len(want))
	}
	if !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("the store holds %d index entries, the rows call for %d", len(got), len(want))
	}
}

// TestIndexPurges: rows removed by the expiry purge take their entries with them, and a
// deleted table's purge removes all of its entries; the format mark says the store has
// index entries, also after a restart.
func TestIndexPurges(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e := openTest(t, dir, Options{})
	const acct = "ix"
	defs := []storage.IndexDef{{Name: "ByA", Properties: []string{"A"}}}
	if err := e.CreateTable(ctx, acct, "T", storage.TableSettings{Elastic: true, DefaultTTL: -1, Indexes: defs}); err != nil {
		t.Fatal(err)
	}
	tb, err := e.lookup(acct, "T")
	if err != nil {
		t.Fatal(err)
	}
	a := func(v string) []entity.Property { return []entity.Property{{Name: "A", Value: entity.StringValue(v)}} }
	ttl := entity.Property{Name: storage.DefaultTTLProperty, Value: entity.Int32Value(1)}
	for i := range 10 {
		props := a(fmt.Sprint(i))
		if i%2 == 0 {
			props = append(props, ttl)
		}
		if _, err := e.Apply(ctx, acct, "T", "p", []storage.Mutation{{Op: storage.Insert, RowKey: fmt.Sprint(i), Props: props}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(storedIndexEntries(t, e, tb.id)); got != 10 {
		t.Fatalf("%d entries after 10 inserts", got)
	}
	if e.format.Load() != formatIndexes {
		t.Fatalf("format mark %d with an index declared, want %d", e.format.Load(), formatIndexes)
	}
	time.Sleep(1100 * time.Millisecond)
	if n, err := e.PurgeExpired(ctx); err != nil || n != 5 {
		t.Fatalf("PurgeExpired = %d, %v; want the 5 rows that expired", n, err)
	}
	if got := len(storedIndexEntries(t, e, tb.id)); got != 5 {
		t.Fatalf("%d entries after the purge of 5 of 10 rows, want 5", got)
	}
	if err := e.DeleteTable(ctx, acct, "T"); err != nil {
		t.Fatal(err)
	}
	if err := e.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(storedIndexEntries(t, e, tb.id)); got != 0 {
		t.Fatalf("%d entries after the table's purge, want none", got)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openTest(t, dir, Options{})
	if e.format.Load() != formatIndexes {
		t.Fatalf("format mark %d after a restart, want %d", e.format.Load(), formatIndexes)
	}
}

// TestScanIndex: for random comparisons on an indexed property (values of every type,
// some entities without it), an index read of the comparison's spans, in pages of any
// size, returns each entity the $filter evaluator accepts exactly once, in index order,
// plus only entities that round alike (numbers) — which the evaluator then drops.
func TestScanIndex(t *testing.T) {
	ctx := context.Background()
	e := openTest(t, t.TempDir(), Options{})
	const acct = "ix"
	if err := e.CreateTable(ctx, acct, "T", storage.TableSettings{Elastic: true, Indexes: []storage.IndexDef{
		{Name: "ByA", Properties: []string{"A"}}, {Name: "ByAB", Properties: []string{"A", "B"}}}}); err != nil {
		t.Fatal(err)
	}
	info, _ := e.GetTable(ctx, acct, "T")
	r := rand.New(rand.NewPCG(46, 5))
	vals := []entity.Value{entity.StringValue("a"), entity.StringValue("b"), entity.StringValue(""), entity.Int32Value(3),
		entity.Int64Value(3), entity.Int64Value(1<<53 + 1), entity.DoubleValue(2.5), entity.DoubleValue(math.NaN()),
		entity.BoolValue(true), {Type: entity.DateTime, Int: 5}, entity.BinaryValue([]byte{0})}
	var all []entity.Entity
	for i := range 300 {
		var props []entity.Property
		if r.IntN(5) > 0 {
			props = append(props, entity.Property{Name: "A", Value: vals[r.IntN(len(vals))]})
		}
		if r.IntN(2) == 0 {
			props = append(props, entity.Property{Name: "B", Value: entity.Int32Value(int32(r.IntN(3)))})
		}
		ent := entity.Entity{PartitionKey: fmt.Sprintf("p%d", r.IntN(4)), RowKey: fmt.Sprintf("r%03d", i), Props: props}
		if _, err := e.Apply(ctx, acct, "T", ent.PartitionKey, []storage.Mutation{{Op: storage.Insert, RowKey: ent.RowKey, Props: props}}); err != nil {
			t.Fatal(err)
		}
		all = append(all, ent)
	}
	ops := []struct {
		op   index.Op
		name string
	}{{index.Eq, "eq"}, {index.Ne, "ne"}, {index.Lt, "lt"}, {index.Le, "le"}, {index.Gt, "gt"}, {index.Ge, "ge"}}
	literals := []entity.Value{entity.StringValue("a"), entity.Int32Value(3), entity.Int64Value(1 << 53), entity.DoubleValue(2.5),
		entity.BoolValue(false), {Type: entity.DateTime, Int: 5}, entity.BinaryValue([]byte{0})}
	for _, d := range info.Settings.Indexes {
		for _, o := range ops {
			for _, lit := range literals {
				f, err := odata.Parse("A " + o.name + " " + odata.Operand{Literal: lit}.String())
				if err != nil {
					t.Fatal(err)
				}
				want := map[string]bool{}
				for i := range all {
					if f.Match(&all[i], 1) && (len(d.Properties) == 1 || hasProp(&all[i], "B")) {
						want[all[i].PartitionKey+"/"+all[i].RowKey] = true
					}
				}
				for _, page := range []int{1, 7, 1000} {
					req := storage.IndexScanRequest{Index: d.ID, Spans: index.Spans(o.op, lit, true), Limit: page}
					seen := map[string]bool{}
					var last []byte
					for {
						res, err := e.ScanIndex(ctx, acct, "T", req)
						if err != nil {
							t.Fatal(err)
						}
						for _, rec := range res.Records {
							k := rec.Entity.PartitionKey + "/" + rec.Entity.RowKey
							if seen[k] {
								t.Fatalf("%s A %s %v, pages of %d: %s twice", d.Name, o.name, lit, page, k)
							}
							seen[k] = true
							ik := appendIndexEntries(nil, 0, []storage.IndexDef{d}, rec.Entity.PartitionKey, rec.Entity.RowKey, rec.Entity.Props)
							if len(ik) != 1 || bytes.Compare(ik[0], last) < 0 {
								t.Fatalf("%s A %s %v: %s out of index order", d.Name, o.name, lit, k)
							}
							last = ik[0]
							if !want[k] && f.Match(&rec.Entity, 1) {
								t.Fatalf("%s A %s %v: %s matches but was not expected", d.Name, o.name, lit, k)
							}
						}
						if res.Next == nil {
							break
						}
						req.After = res.Next
					}
					for k := range want {
						if !seen[k] {
							t.Fatalf("%s A %s %v, pages of %d: %s matches, not read", d.Name, o.name, lit, page, k)
						}
					}
				}
			}
		}
	}
}

func hasProp(e *entity.Entity, name string) bool {
	_, ok := e.Get(name)
	return ok
}

// keysUnder counts the keys of the store from lo up to hi.
func keysUnder(t *testing.T, e *Engine, lo, hi []byte) int {
	t.Helper()
	it, err := e.db.NewIter(&pebbledb.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	return n
}

// uniqueEntries counts the unique entries of table id's index idx.
func uniqueEntries(t *testing.T, e *Engine, id uint64, idx uint32) int {
	t.Helper()
	return keysUnder(t, e, appendUniquePrefix(nil, id, idx), appendUniquePrefix(nil, id, idx+1))
}

// TestUniquePurges: the unique entries of rows the expiry purge removes go with them
// (unless another row has taken the value over), a dropped index's entries of both
// kinds go with the settings change, and a deleted table's with its purge.
func TestUniquePurges(t *testing.T) {
	ctx := context.Background()
	e := openTest(t, t.TempDir(), Options{ExpiryInterval: -1})
	const acct = "ix"
	defs := []storage.IndexDef{{Name: "ByA", Properties: []string{"A"}, Unique: true}, {Name: "ByB", Properties: []string{"B"}}}
	if err := e.CreateTable(ctx, acct, "T", storage.TableSettings{Elastic: true, DefaultTTL: -1, Indexes: defs}); err != nil {
		t.Fatal(err)
	}
	tb, _ := e.lookup(acct, "T")
	ttl := entity.Property{Name: storage.DefaultTTLProperty, Value: entity.Int32Value(1)}
	for i := range 10 {
		props := []entity.Property{{Name: "A", Value: entity.Int32Value(int32(i))}, {Name: "B", Value: entity.Int32Value(1)}}
		if i%2 == 0 {
			props = append(props, ttl)
		}
		if _, err := e.Apply(ctx, acct, "T", "p", []storage.Mutation{{Op: storage.Insert, RowKey: fmt.Sprint(i), Props: props}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := uniqueEntries(t, e, tb.id, 1); n != 10 {
		t.Fatalf("%d unique entries for 10 rows", n)
	}
	time.Sleep(1100 * time.Millisecond)
	// Row 0's value taken over by another row once 0 has expired.
	if _, err := e.Apply(ctx, acct, "T", "q", []storage.Mutation{{Op: storage.Insert, RowKey: "x",
		Props: []entity.Property{{Name: "A", Value: entity.Int32Value(0)}}}}); err != nil {
		t.Fatal(err)
	}
	if n, err := e.PurgeExpired(ctx); err != nil || n != 5 {
		t.Fatalf("PurgeExpired = %d, %v; want 5", n, err)
	}
	if n := uniqueEntries(t, e, tb.id, 1); n != 6 {
		t.Fatalf("%d unique entries after the purge, want the 5 kept rows' and the one taken over", n)
	}
	if _, err := e.Apply(ctx, acct, "T", "r", []storage.Mutation{{Op: storage.Insert, RowKey: "y",
		Props: []entity.Property{{Name: "A", Value: entity.Int32Value(0)}}}}); err == nil {
		t.Fatal("the value taken over was lost to the purge of its expired holder")
	}
	// Dropping the unique index removes its entries of both kinds, and only its.
	if err := e.SetTableSettings(ctx, acct, "T", storage.TableSettings{Elastic: true, Indexes: defs[1:]}); err != nil {
		t.Fatal(err)
	}
	if n := uniqueEntries(t, e, tb.id, 1); n != 0 {
		t.Fatalf("%d unique entries of the dropped index", n)
	}
	if n := keysUnder(t, e, appendIndexPrefix(nil, tb.id, 1), appendIndexPrefix(nil, tb.id, 2)); n != 0 {
		t.Fatalf("%d entries of the dropped index", n)
	}
	if n := keysUnder(t, e, appendIndexPrefix(nil, tb.id, 2), appendIndexPrefix(nil, tb.id, 3)); n != 5 {
		t.Fatalf("%d entries of the index kept, want the 5 of the rows with B", n)
	}
	if err := e.SetTableSettings(ctx, acct, "T", storage.TableSettings{Elastic: true, Indexes: defs}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.BuildIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	if n := uniqueEntries(t, e, tb.id, 3); n != 6 {
		t.Fatalf("%d unique entries after the index is built again, want 6", n)
	}
	if err := e.DeleteTable(ctx, acct, "T"); err != nil {
		t.Fatal(err)
	}
	if err := e.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if n := keysUnder(t, e, uniqueTablePrefix(tb.id), uniqueTablePrefix(tb.id+1)); n != 0 {
		t.Fatalf("%d unique entries after the table's purge", n)
	}
}

// TestBuildReopen: a build stopped after a chunk resumes after a restart where it was —
// the progress and position committed with the chunk — and passes each row once; the
// index then holds exactly what the rows call for.
func TestBuildReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := Options{ExpiryInterval: -1, NoIndexBuilder: true}
	e := openTest(t, dir, opts)
	const acct = "ix"
	if err := e.CreateTable(ctx, acct, "T", storage.TableSettings{Elastic: true}); err != nil {
		t.Fatal(err)
	}
	const rows = 600 // over two chunks
	for p := range rows / 100 {
		var muts []storage.Mutation
		for r := range 100 {
			muts = append(muts, storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprintf("r%03d", r),
				Props: []entity.Property{{Name: "A", Value: entity.Int32Value(int32(p*100 + r))}}})
		}
		if _, err := e.Apply(ctx, acct, "T", fmt.Sprintf("p%d", p), muts); err != nil {
			t.Fatal(err)
		}
	}
	defs := []storage.IndexDef{{Name: "ByA", Properties: []string{"A"}, Unique: true}}
	if err := e.SetTableSettings(ctx, acct, "T", storage.TableSettings{Elastic: true, Indexes: defs}); err != nil {
		t.Fatal(err)
	}
	if n, err := e.BuildIndexes(ctx); err != nil || n != buildChunk {
		t.Fatalf("BuildIndexes = %d, %v; want a chunk of %d", n, err, buildChunk)
	}
	tb, _ := e.lookup(acct, "T")
	if got := len(storedIndexEntries(t, e, tb.id)); got != buildChunk {
		t.Fatalf("%d entries after a chunk, want %d", got, buildChunk)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openTest(t, dir, opts)
	info, _ := e.GetTable(ctx, acct, "T")
	if d := info.Settings.Indexes[0]; d.State != storage.IndexBuilding || d.Progress != buildChunk {
		t.Fatalf("after a restart: %+v, want building with progress %d", d, buildChunk)
	}
	passed := 0
	for {
		n, err := e.BuildIndexes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if passed += n; passed > rows {
			t.Fatalf("the resumed build has passed %d rows of %d and goes on", passed, rows)
		}
	}
	if passed != rows-buildChunk {
		t.Fatalf("the resumed build passed %d rows, want the %d left", passed, rows-buildChunk)
	}
	info, _ = e.GetTable(ctx, acct, "T")
	if d := info.Settings.Indexes[0]; d.State != storage.IndexReady || d.Progress != rows {
		t.Fatalf("after the build: %+v, want ready with progress %d", d, rows)
	}
	tb, _ = e.lookup(acct, "T")
	if got := len(storedIndexEntries(t, e, tb.id)); got != rows {
		t.Fatalf("%d entries, want %d", got, rows)
	}
	if n := uniqueEntries(t, e, tb.id, info.Settings.Indexes[0].ID); n != rows {
		t.Fatalf("%d unique entries, want %d", n, rows)
	}
	if n := keysUnder(t, e, buildTablePrefix(tb.id), buildTablePrefix(tb.id+1)); n != 0 {
		t.Fatalf("%d build positions left after the build", n)
	}
}

// TestBuildRacingWrites: writes to a chunk's rows while the chunk is between its reads
// and its commit wait for it (the chunk holds their locks), so the entries end as the
// rows call for: a row deleted, one whose value changes, one inserted. (The index is
// not unique: a unique one's value locks would hold the writes back too.)
func TestBuildRacingWrites(t *testing.T) {
	ctx := context.Background()
	e := openTest(t, t.TempDir(), Options{ExpiryInterval: -1, NoIndexBuilder: true})
	const acct = "ix"
	if err := e.CreateTable(ctx, acct, "T", storage.TableSettings{Elastic: true}); err != nil {
		t.Fatal(err)
	}
	a := func(v int32) []entity.Property { return []entity.Property{{Name: "A", Value: entity.Int32Value(v)}} }
	var muts []storage.Mutation
	for r := range 10 {
		muts = append(muts, storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprintf("r%d", r), Props: a(int32(r))})
	}
	if _, err := e.Apply(ctx, acct, "T", "p", muts); err != nil {
		t.Fatal(err)
	}
	if err := e.SetTableSettings(ctx, acct, "T", storage.TableSettings{Elastic: true, Indexes: []storage.IndexDef{
		{Name: "ByA", Properties: []string{"A"}}}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	testHookBuildBeforeCommit = func() {
		testHookBuildBeforeCommit = nil
		go func() {
			_, err := e.Apply(ctx, acct, "T", "p", []storage.Mutation{{Op: storage.Delete, RowKey: "r1"},
				{Op: storage.Replace, RowKey: "r2", Props: a(20)}, {Op: storage.Insert, RowKey: "r21", Props: a(21)}})
			done <- err
		}()
		select {
		case err := <-done:
			done <- err // not held back: the rows are not locked
		case <-time.After(100 * time.Millisecond):
		}
	}
	defer func() { testHookBuildBeforeCommit = nil }()
	if _, err := e.BuildIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	tb, _ := e.lookup(acct, "T")
	info, _ := e.GetTable(ctx, acct, "T")
	res, err := e.Scan(ctx, acct, "T", storage.ScanRequest{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var want [][]byte
	for _, rec := range res.Records {
		want = appendIndexEntries(want, tb.id, info.Settings.Indexes, rec.Entity.PartitionKey, rec.Entity.RowKey, rec.Entity.Props)
	}
	slices.SortFunc(want, bytes.Compare)
	if got := storedIndexEntries(t, e, tb.id); !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("after a build raced by writes the store holds %d entries, the rows call for %d", len(got), len(want))
	}
}
