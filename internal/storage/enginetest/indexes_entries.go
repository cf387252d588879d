package enginetest

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/index"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// Helpers of the index tests: what a table's rows call for in an index, and what an index
// read finds, compared entry by entry.

// allSpans is the whole of an index: every index key.
var allSpans = []index.Span{{}}

// entry is an index entry as the tests see it: its index key and row keys, and the
// row's version (0 when unknown).
type entry struct {
	key     []byte
	pk, rk  string
	version int64
}

func (e entry) String() string { return fmt.Sprintf("(%x, %q, %q)", e.key, e.pk, e.rk) }

func compareEntries(a, b entry) int {
	return cmp.Or(bytes.Compare(a.key, b.key), strings.Compare(a.pk, b.pk), strings.Compare(a.rk, b.rk))
}

// indexKeyOf is the index key of props in d (the values' internal/index keys,
// concatenated), or false when the entity has no entry: a property missing or of a type
// no index holds.
func indexKeyOf(d storage.IndexDef, props []entity.Property) ([]byte, bool) {
	return d.AppendKey(nil, props)
}

// indexDef returns the table's declaration of the index named name.
func (x *env) indexDef(table, name string) storage.IndexDef {
	x.t.Helper()
	for _, d := range x.indexes(table).Indexes {
		if d.Name == name {
			return d
		}
	}
	x.t.Fatalf("table %s declares no index %s", table, name)
	return storage.IndexDef{}
}

// entriesCalledFor is what a scan of the table's rows calls for in index d, in index
// order.
func (x *env) entriesCalledFor(table string, d storage.IndexDef) []entry {
	x.t.Helper()
	var out []entry
	for _, r := range x.snapshot(table) {
		if k, ok := indexKeyOf(d, r.Entity.Props); ok {
			out = append(out, entry{key: k, pk: r.Entity.PartitionKey, rk: r.Entity.RowKey, version: r.Version})
		}
	}
	slices.SortFunc(out, compareEntries)
	return out
}

// readIndex reads the whole of index d with ScanIndex, in pages of page rows, and
// returns its entries in the order read. With page 1 every entry's cursor (Next) is
// checked against the index key its row calls for, so an entry left with a stale value
// shows.
func (x *env) readIndex(table string, d storage.IndexDef, page int) []entry {
	x.t.Helper()
	req := storage.IndexScanRequest{Index: d.ID, Spans: allSpans, Limit: page}
	var out []entry
	for pages := 0; ; pages++ {
		if pages > 1_000_000 {
			x.t.Fatal("index read does not terminate")
		}
		res, err := x.e.ScanIndex(x.ctx, x.acct, table, req)
		if err != nil {
			x.t.Fatalf("ScanIndex(%s, %s): %v", table, d.Name, err)
		}
		if len(res.Records) > page {
			x.t.Fatalf("ScanIndex(%s) returned %d rows, limit %d", d.Name, len(res.Records), page)
		}
		if res.Examined < len(res.Records) {
			x.t.Fatalf("ScanIndex(%s) returned %d rows but examined %d entries", d.Name, len(res.Records), res.Examined)
		}
		for _, r := range res.Records {
			k, ok := indexKeyOf(d, r.Entity.Props)
			if !ok {
				x.t.Fatalf("ScanIndex(%s) returned (%q, %q), which has no entry in it: %v", d.Name,
					r.Entity.PartitionKey, r.Entity.RowKey, r.Entity.Props)
			}
			out = append(out, entry{key: k, pk: r.Entity.PartitionKey, rk: r.Entity.RowKey, version: r.Version})
		}
		if res.Next == nil {
			return out
		}
		if len(res.Records) == 0 {
			x.t.Fatalf("ScanIndex(%s) returned no row and a cursor", d.Name)
		}
		last := out[len(out)-1]
		if page == 1 && (!bytes.Equal(res.Next.Key, last.key) || res.Next.PartitionKey != last.pk || res.Next.RowKey != last.rk) {
			x.t.Fatalf("ScanIndex(%s): the entry of row (%q, %q) is (%x, %q, %q): its row calls for %v",
				d.Name, last.pk, last.rk, res.Next.Key, res.Next.PartitionKey, res.Next.RowKey, last)
		}
		req.After = res.Next
	}
}

// wantIndexMatches checks every index of the table against a scan of its rows: an index
// read returns exactly the rows the scan calls for, each once, in index order and at the
// scan's version; and, when exact is set (no expired row awaits the purge),
// CountIndex counts exactly as many entries.
func (x *env) wantIndexMatches(what, table string, exact bool) {
	x.t.Helper()
	for _, d := range x.indexes(table).Indexes {
		for _, page := range []int{1, 1000} {
			// Rows with a time-to-live may expire while the index is read, which changes
			// what the rows call for: the comparison counts only when that is the same
			// before and after the read.
			var got, want []entry
			for attempt := 0; ; attempt++ {
				want = x.entriesCalledFor(table, d)
				got = x.readIndex(table, d, page)
				after := x.entriesCalledFor(table, d)
				if slices.EqualFunc(want, after, func(a, b entry) bool { return compareEntries(a, b) == 0 && a.version == b.version }) || attempt == 20 {
					break
				}
			}
			if !slices.IsSortedFunc(got, compareEntries) {
				x.t.Fatalf("%s: index %s, pages of %d: entries out of index order: %v", what, d.Name, page, got)
			}
			if len(got) != len(want) {
				x.t.Fatalf("%s: index %s, pages of %d: %d entries read, the rows call for %d\n got: %v\nwant: %v",
					what, d.Name, page, len(got), len(want), got, want)
			}
			for i := range got {
				if compareEntries(got[i], want[i]) != 0 || got[i].version != want[i].version {
					x.t.Fatalf("%s: index %s, pages of %d: entry %d is %v v%d, the rows call for %v v%d",
						what, d.Name, page, i, got[i], got[i].version, want[i], want[i].version)
				}
			}
		}
		if exact {
			want := x.entriesCalledFor(table, d)
			n, err := x.e.CountIndex(x.ctx, x.acct, table, d.ID, allSpans, len(want)+10)
			if err != nil {
				x.t.Fatalf("%s: CountIndex(%s): %v", what, d.Name, err)
			}
			if n != len(want) {
				x.t.Fatalf("%s: CountIndex(%s) = %d, the rows call for %d entries", what, d.Name, n, len(want))
			}
		}
	}
}
