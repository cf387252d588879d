package enginetest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/index"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// testIndexCount: CountIndex and CountRows count exactly what is there, up to their
// limit and never past it, for spans and key ranges of every shape, on the engine and
// on a view; an index the table does not declare is ErrIndexNotFound, a missing table
// ErrTableNotFound.
func testIndexCount(t *testing.T, x *env) {
	t.Parallel()
	tbl := x.createWith("Count", storage.TableSettings{Elastic: true, Indexes: []storage.IndexDef{
		{Name: "ByA", Properties: []string{"A"}}, {Name: "ByAB", Properties: []string{"A", "B"}}}})
	var rows []storage.Key
	values := map[storage.Key]entity.Value{}
	hasB := map[storage.Key]bool{}
	vals := []entity.Value{entity.StringValue("a"), entity.StringValue("b"), entity.Int32Value(1), entity.Int64Value(2),
		entity.DoubleValue(2), entity.BoolValue(true)}
	for p := range 3 {
		pk := fmt.Sprintf("p%d", p)
		var muts []storage.Mutation
		for r := range 40 {
			k := storage.Key{PartitionKey: pk, RowKey: fmt.Sprintf("r%02d", r)}
			rows = append(rows, k)
			var props []entity.Property
			if r%5 != 0 { // one row in five has no A: no entry
				v := vals[x.rnd.IntN(len(vals))]
				values[k] = v
				props = append(props, prop("A", v))
			}
			if r%2 == 0 {
				hasB[k] = true
				props = append(props, i32("B", int32(r)))
			}
			muts = append(muts, mut(storage.Insert, k.RowKey, props...))
		}
		x.apply(tbl, pk, muts...)
	}
	readers := map[string]storage.IndexReader{"engine": x.e}
	view, err := x.e.ReadView(x.ctx, storage.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	readers["view"] = view
	for _, name := range []string{"ByA", "ByAB"} {
		d := x.indexDef(tbl, name)
		for _, q := range []struct {
			what  string
			spans []index.Span
		}{
			{"everything", allSpans},
			{"A eq 'a'", index.Spans(index.Eq, entity.StringValue("a"), true)},
			{"A ge 2", index.Spans(index.Ge, entity.Int32Value(2), true)},
			{"A ne 'b'", index.Spans(index.Ne, entity.StringValue("b"), true)},
			{"A eq 'zzz'", index.Spans(index.Eq, entity.StringValue("zzz"), true)},
			{"A eq 'a' or A eq true", index.Union(index.Spans(index.Eq, entity.StringValue("a"), true),
				index.Spans(index.Eq, entity.BoolValue(true), true))},
		} {
			exact := 0
			for _, k := range rows {
				v, ok := values[k]
				if ok && (name == "ByA" || hasB[k]) && index.Contains(q.spans, index.AppendValue(nil, v)) {
					exact++
				}
			}
			for rname, rd := range readers {
				for _, limit := range []int{1, 2, exact - 1, exact, exact + 1, 1000} {
					if limit <= 0 {
						continue
					}
					n, err := rd.CountIndex(x.ctx, x.acct, tbl, d.ID, q.spans, limit)
					if err != nil {
						t.Fatalf("%s CountIndex(%s, %s, %d): %v", rname, name, q.what, limit, err)
					}
					if n != min(exact, limit) {
						t.Fatalf("%s CountIndex(%s, %s, limit %d) = %d; %d entries are there", rname, name, q.what, limit, n, exact)
					}
				}
			}
		}
	}
	for _, q := range []struct {
		start storage.Key
		end   *storage.Key
	}{
		{storage.Key{}, nil},
		{storage.Key{PartitionKey: "p1"}, nil},
		{storage.Key{PartitionKey: "p1", RowKey: "r10"}, &storage.Key{PartitionKey: "p2", RowKey: "r05"}},
		{storage.Key{PartitionKey: "p0"}, &storage.Key{PartitionKey: "p0", RowKey: "r00"}},
		{storage.Key{PartitionKey: "p2", RowKey: "r07"}, &storage.Key{PartitionKey: "p1"}},
		{storage.Key{PartitionKey: "q"}, nil},
	} {
		exact := len(inRange(rows, q.start, q.end))
		for rname, rd := range readers {
			for _, limit := range []int{1, exact - 1, exact, exact + 1, 1000} {
				if limit <= 0 {
					continue
				}
				n, err := rd.CountRows(x.ctx, x.acct, tbl, q.start, q.end, limit)
				if err != nil {
					t.Fatalf("%s CountRows(%v, %s, %d): %v", rname, q.start, fmtEnd(q.end), limit, err)
				}
				if n != min(exact, limit) {
					t.Fatalf("%s CountRows(%v, %s, limit %d) = %d; %d rows are there", rname, q.start, fmtEnd(q.end), limit, n, exact)
				}
			}
		}
	}
	if _, err := x.e.CountIndex(x.ctx, x.acct, tbl, 99, allSpans, 10); !errors.Is(err, storage.ErrIndexNotFound) {
		t.Fatalf("CountIndex of an undeclared index: %v, want ErrIndexNotFound", err)
	}
	if _, err := x.e.CountIndex(x.ctx, x.acct, "Missing", 1, allSpans, 10); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("CountIndex of a missing table: %v, want ErrTableNotFound", err)
	}
	if _, err := x.e.CountRows(x.ctx, x.acct, "Missing", storage.Key{}, nil, 10); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("CountRows of a missing table: %v, want ErrTableNotFound", err)
	}
}

// testIndexKeyFilter: an index read with a KeyFilter returns exactly the rows of the
// spans whose keys the filter accepts, in index order, across pages; refused entries
// count as examined, never against the limit; a missing index is ErrIndexNotFound.
func testIndexKeyFilter(t *testing.T, x *env) {
	t.Parallel()
	tbl := x.createWith("KeyFilter", storage.TableSettings{Elastic: true, Indexes: []storage.IndexDef{
		{Name: "ByA", Properties: []string{"A"}}}})
	for p := range 4 {
		var muts []storage.Mutation
		for r := range 30 {
			muts = append(muts, mut(storage.Insert, fmt.Sprintf("r%02d", r), i32("A", int32(x.rnd.IntN(10)))))
		}
		x.apply(tbl, fmt.Sprintf("p%d", p), muts...)
	}
	d := x.indexDef(tbl, "ByA")
	accept := func(pk, rk string) bool { return pk == "p1" || pk == "p3" && rk >= "r15" }
	spans := index.Spans(index.Lt, entity.Int32Value(5), true)
	var want []entry
	for _, e := range x.entriesCalledFor(tbl, d) {
		if accept(e.pk, e.rk) && index.Contains(spans, e.key) {
			want = append(want, e)
		}
	}
	calls := 0
	for _, page := range []int{1, 4, 1000} {
		req := storage.IndexScanRequest{Index: d.ID, Spans: spans, Limit: page,
			KeyFilter: func(pk, rk string) bool { calls++; return accept(pk, rk) }}
		var got []entry
		examined := 0
		for {
			res, err := x.e.ScanIndex(x.ctx, x.acct, tbl, req)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Records) > page {
				t.Fatalf("pages of %d: a page of %d rows", page, len(res.Records))
			}
			examined += res.Examined
			for _, r := range res.Records {
				k, _ := indexKeyOf(d, r.Entity.Props)
				got = append(got, entry{key: k, pk: r.Entity.PartitionKey, rk: r.Entity.RowKey, version: r.Version})
			}
			if res.Next == nil {
				break
			}
			req.After = res.Next
		}
		if len(got) != len(want) {
			t.Fatalf("pages of %d: %d rows, want %d\n got: %v\nwant: %v", page, len(got), len(want), got, want)
		}
		for i := range got {
			if compareEntries(got[i], want[i]) != 0 {
				t.Fatalf("pages of %d: row %d is %v, want %v", page, i, got[i], want[i])
			}
		}
		if examined < len(want) || page == 1000 && examined <= len(want) {
			t.Fatalf("pages of %d: %d entries examined for %d rows: the refused entries are not counted", page, examined, len(want))
		}
	}
	if calls == 0 {
		t.Fatal("the KeyFilter was never called")
	}
	_, err := x.e.ScanIndex(x.ctx, x.acct, tbl, storage.IndexScanRequest{Index: 77, Spans: allSpans, Limit: 1})
	if !errors.Is(err, storage.ErrIndexNotFound) {
		t.Fatalf("ScanIndex of an undeclared index: %v, want ErrIndexNotFound", err)
	}
}
