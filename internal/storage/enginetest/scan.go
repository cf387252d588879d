package enginetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// Keys chosen to break naive encodings: quotes, '%', spaces, multi-byte UTF-8, empty
// strings, NUL and 0x01 bytes, a 0xFF byte, and strings that are prefixes of each other.
var (
	orderPKs = []string{
		"", " ", "\"", "%", "%25", "'", "''", "a", "a\x00", "a\x00\x00", "a\x00b", "a\x01", "a b", "a%20b",
		"ab", "b", "e\u0301", "é", "\u4e16\u754c", "\U0001F600", "\x7f", "\uffff", "\xff", "\xff\x00", "z",
	}
	orderRKs = []string{"", "\x00", "\x01", " ", "'q'", "%", "a", "a\x00", "a\x01", "ab", "ü", "\xff"}
)

func testKeyOrdering(t *testing.T, x *env) {
	tbl := x.createTable("Order")
	var keys []storage.Key
	for _, i := range x.rnd.Perm(len(orderPKs)) {
		pk := orderPKs[i]
		var muts []storage.Mutation
		for _, j := range x.rnd.Perm(len(orderRKs)) {
			rk := orderRKs[j]
			muts = append(muts, mut(storage.Insert, rk,
				prop("PK", entity.BinaryValue([]byte(pk))), prop("RK", entity.BinaryValue([]byte(rk)))))
			keys = append(keys, storage.Key{PartitionKey: pk, RowKey: rk})
		}
		x.apply(tbl, pk, muts...)
	}
	want := sortedKeys(keys)
	for _, page := range []int{1000, 7, 1} {
		recs := x.scanAll(tbl, storage.Key{}, nil, page)
		got := make([]storage.Key, len(recs))
		for i := range recs {
			got[i] = keyOf(&recs[i])
			pk, _ := recs[i].Entity.Get("PK")
			rk, _ := recs[i].Entity.Get("RK")
			if string(pk.Bytes) != got[i].PartitionKey || string(rk.Bytes) != got[i].RowKey {
				t.Fatalf("record %q carries the properties of (%q, %q)", got[i], pk.Bytes, rk.Bytes)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("Scan (page %d) order:\n got %q\nwant %q", page, got, want)
		}
	}
	for _, k := range keys {
		r := x.get(tbl, k.PartitionKey, k.RowKey)
		if pk, _ := r.Entity.Get("PK"); string(pk.Bytes) != k.PartitionKey {
			t.Fatalf("Get(%q) returned the row of partition %q", k, pk.Bytes)
		}
	}
	// One partition is the range [(pk, ""), (pk+"\x00", "")): nothing of "a\x00" or "ab"
	// may show in partition "a".
	for _, pk := range orderPKs {
		recs := x.scanAll(tbl, storage.Key{PartitionKey: pk}, &storage.Key{PartitionKey: pk + "\x00"}, 5)
		if len(recs) != len(orderRKs) {
			t.Fatalf("partition %q: %d records, want %d: %s", pk, len(recs), len(orderRKs), keysOf(recs))
		}
		for i := range recs {
			if recs[i].Entity.PartitionKey != pk {
				t.Fatalf("partition %q scan returned a row of partition %q", pk, recs[i].Entity.PartitionKey)
			}
		}
	}
	// Absent keys that are prefixes or extensions of present ones.
	for _, k := range []storage.Key{{PartitionKey: "a\x00\x00\x00"}, {PartitionKey: "a", RowKey: "a\x00\x00"}, {PartitionKey: "\x00"}, {PartitionKey: "a", RowKey: "\x00\x00"}} {
		x.getMissing(tbl, k.PartitionKey, k.RowKey)
	}
}

// fillGrid inserts partitions × rows entities with keys p%02d / r%03d and an Int64 "N"
// numbering them in key order, and returns their keys (sorted) and versions.
func (x *env) fillGrid(tbl string, partitions, rows int) ([]storage.Key, map[storage.Key]int64) {
	x.t.Helper()
	var keys []storage.Key
	versions := make(map[storage.Key]int64)
	for _, p := range x.rnd.Perm(partitions) {
		pk := fmt.Sprintf("p%02d", p)
		perm := x.rnd.Perm(rows)
		for len(perm) > 0 {
			n := min(len(perm), 100)
			var muts []storage.Mutation
			for _, r := range perm[:n] {
				muts = append(muts, mut(storage.Insert, fmt.Sprintf("r%03d", r), i64("N", int64(p*rows+r))))
			}
			vs := x.apply(tbl, pk, muts...)
			for i, m := range muts {
				k := storage.Key{PartitionKey: pk, RowKey: m.RowKey}
				keys = append(keys, k)
				versions[k] = vs[i]
			}
			perm = perm[n:]
		}
	}
	return sortedKeys(keys), versions
}

// inRange returns the keys in [start, end).
func inRange(keys []storage.Key, start storage.Key, end *storage.Key) []storage.Key {
	var out []storage.Key
	for _, k := range keys {
		if !k.Less(start) && (end == nil || k.Less(*end)) {
			out = append(out, k)
		}
	}
	return out
}

func recordKeys(recs []storage.Record) []storage.Key {
	out := make([]storage.Key, len(recs))
	for i := range recs {
		out[i] = keyOf(&recs[i])
	}
	return out
}

func testScanBounds(t *testing.T, x *env) {
	tbl := x.createTable("Bounds")
	keys, _ := x.fillGrid(tbl, 5, 20)
	k := func(pk, rk string) storage.Key { return storage.Key{PartitionKey: pk, RowKey: rk} }
	kp := func(pk, rk string) *storage.Key { return &storage.Key{PartitionKey: pk, RowKey: rk} }
	cases := []struct {
		start storage.Key
		end   *storage.Key
	}{
		{k("", ""), nil},
		{k("p01", "r005"), nil},               // start on a key: included
		{k("p01", "r005x"), kp("p03", "")},    // start between keys
		{k("p01", ""), kp("p01\x00", "")},     // one partition
		{k("p02", "r000"), kp("p02", "r010")}, // end on a key: excluded
		{k("p02", "r000"), kp("p02", "r009x")},
		{k("p00", ""), kp("p02", "")},         // end at a partition's first possible key
		{k("p02", "r003"), kp("p02", "r003")}, // empty: start == end
		{k("p03", ""), kp("p01", "")},         // empty: start after end
		{k("p99", ""), nil},                   // after everything
		{k("p04", "r019"), nil},               // the very last key
		{k("p04", "r019\x00"), nil},           // just after it
		{k("", ""), kp("p00", "r000")},        // before everything
	}
	for i := range 40 {
		a, b := keys[x.rnd.IntN(len(keys))], keys[x.rnd.IntN(len(keys))]
		if i%2 == 0 {
			b.RowKey += "\x00"
		}
		if b.Less(a) {
			a, b = b, a
		}
		cases = append(cases, struct {
			start storage.Key
			end   *storage.Key
		}{a, &b})
	}
	for _, c := range cases {
		want := inRange(keys, c.start, c.end)
		for _, page := range []int{1, 3, 1000} {
			got := recordKeys(x.scanAll(tbl, c.start, c.end, page))
			if !slices.Equal(got, want) {
				t.Fatalf("Scan [%q, %v) page %d:\n got %q\nwant %q", c.start, fmtEnd(c.end), page, got, want)
			}
		}
		if len(want) == 0 {
			res, err := x.e.Scan(x.ctx, x.acct, tbl, storage.ScanRequest{Start: c.start, End: c.end, Limit: 10})
			if err != nil || len(res.Records) != 0 || res.Next != nil {
				t.Fatalf("Scan of the empty range [%q, %v) = %d records, next %v, %v", c.start, fmtEnd(c.end), len(res.Records), res.Next, err)
			}
		}
	}
	// A range of exactly the limit ends within one page or with an empty one.
	res, err := x.e.Scan(x.ctx, x.acct, tbl, storage.ScanRequest{Start: k("p01", ""), End: kp("p02", ""), Limit: 20})
	if err != nil || len(res.Records) != 20 {
		t.Fatalf("Scan of 20 records with limit 20 = %d, %v", len(res.Records), err)
	}
	if res.Next != nil {
		res, err = x.e.Scan(x.ctx, x.acct, tbl, storage.ScanRequest{Start: *res.Next, End: kp("p02", ""), Limit: 20})
		if err != nil || len(res.Records) != 0 || res.Next != nil {
			t.Fatalf("resuming an exhausted range = %d records, next %v, %v", len(res.Records), res.Next, err)
		}
	}
}

func fmtEnd(end *storage.Key) string {
	if end == nil {
		return "∞"
	}
	return fmt.Sprintf("%q", *end)
}

func testScanPaging(t *testing.T, x *env) {
	tbl := x.createTable("Paging")
	keys, versions := x.fillGrid(tbl, 7, 73)
	for round := range 10 {
		var got []storage.Record
		start := storage.Key{}
		for pages := 0; ; pages++ {
			if pages > len(keys)+1 {
				t.Fatal("paging does not end")
			}
			limit := 1 + x.rnd.IntN(60)
			if round == 0 {
				limit = len(keys) // exactly everything
			} else if round == 1 {
				limit = len(keys) + 1
			}
			res, err := x.e.Scan(x.ctx, x.acct, tbl, storage.ScanRequest{Start: start, Limit: limit})
			if err != nil {
				t.Fatal(err)
			}
			x.checkPage(start, nil, limit, res)
			if res.Next != nil && len(res.Records) != limit {
				t.Fatalf("page of limit %d has %d records and a resume key", limit, len(res.Records))
			}
			got = append(got, res.Records...)
			if res.Next == nil {
				break
			}
			start = *res.Next
		}
		if gk := recordKeys(got); !slices.Equal(gk, keys) {
			t.Fatalf("round %d: pages yield %d keys, want %d (each once, in order)", round, len(gk), len(keys))
		}
		for i := range got {
			if got[i].Version != versions[keyOf(&got[i])] {
				t.Fatalf("Scan version of %q = %d, Apply returned %d", keyOf(&got[i]), got[i].Version, versions[keyOf(&got[i])])
			}
			if n, _ := got[i].Entity.Get("N"); n.Int != int64(i) {
				t.Fatalf("record %q carries N=%d, want %d", keyOf(&got[i]), n.Int, i)
			}
		}
	}
}

func testScanFilter(t *testing.T, x *env) {
	tbl := x.createTable("Filter")
	keys, _ := x.fillGrid(tbl, 3, 100)
	end := &storage.Key{PartitionKey: "p02", RowKey: "r050"}
	inR := inRange(keys, storage.Key{PartitionKey: "p00", RowKey: "r010"}, end)
	pass := func(r *storage.Record) bool { n, _ := r.Entity.Get("N"); return n.Int%3 == 0 }
	var want []storage.Key
	for _, k := range inR {
		var p, r int
		if _, err := fmt.Sscanf(k.PartitionKey+" "+k.RowKey, "p%d r%d", &p, &r); err != nil {
			t.Fatal(err)
		}
		if (p*100+r)%3 == 0 { // N as fillGrid numbers it
			want = append(want, k)
		}
	}
	for _, limit := range []int{1, 5, 1000} {
		var got []storage.Key
		start := storage.Key{PartitionKey: "p00", RowKey: "r010"}
		for {
			res, err := x.e.Scan(x.ctx, x.acct, tbl, storage.ScanRequest{Start: start, End: end, Limit: limit, Filter: func(r *storage.Record) bool {
				if k := keyOf(r); k.Less(start) || !k.Less(*end) {
					t.Errorf("Filter called with %q outside [%q, %q)", k, start, *end)
				}
				return pass(r)
			}})
			if err != nil {
				t.Fatal(err)
			}
			x.checkPage(start, end, limit, res)
			for i := range res.Records {
				if !pass(&res.Records[i]) {
					t.Fatalf("Scan returned %q, which the filter rejects", keyOf(&res.Records[i]))
				}
			}
			if res.Next != nil && len(res.Records) != limit {
				t.Fatalf("filtered page of limit %d has %d records and a resume key: rejected records must not count", limit, len(res.Records))
			}
			got = append(got, recordKeys(res.Records)...)
			if res.Next == nil {
				break
			}
			start = *res.Next
		}
		if !slices.Equal(got, want) {
			t.Fatalf("filtered scan (limit %d):\n got %q\nwant %q", limit, got, want)
		}
	}
	// A filter that rejects everything examines the whole range in one call.
	calls := 0
	res, err := x.e.Scan(x.ctx, x.acct, tbl, storage.ScanRequest{Limit: 1, Filter: func(*storage.Record) bool { calls++; return false }})
	if err != nil || len(res.Records) != 0 || res.Next != nil {
		t.Fatalf("Scan rejecting everything = %d records, next %v, %v; want none and no resume key", len(res.Records), res.Next, err)
	}
	if calls != len(keys) {
		t.Fatalf("filter called %d times over %d records", calls, len(keys))
	}
}

func testScanDeadline(t *testing.T, x *env) {
	tbl := x.createTable("Deadline")
	keys, _ := x.fillGrid(tbl, 3, 500)
	past := time.Now().Add(-time.Hour)

	// A deadline already passed ends the scan promptly, with a resume key.
	for _, filter := range []func(*storage.Record) bool{nil, func(*storage.Record) bool { return false }} {
		began := time.Now()
		res, err := x.e.Scan(x.ctx, x.acct, tbl, storage.ScanRequest{Limit: 10_000, Deadline: past, Filter: filter})
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(began); d > 2*time.Second {
			t.Fatalf("Scan with a past deadline took %v", d)
		}
		if res.Next == nil {
			t.Fatalf("Scan with a past deadline over %d records returned %d records and no resume key", len(keys), len(res.Records))
		}
		x.checkPage(storage.Key{}, nil, 10_000, res)
	}

	// A deadline passing mid-scan ends it too, not only one passed at the start.
	began := time.Now()
	res, err := x.e.Scan(x.ctx, x.acct, tbl, storage.ScanRequest{Limit: 10_000, Deadline: began.Add(50 * time.Millisecond),
		Filter: func(*storage.Record) bool { time.Sleep(time.Millisecond); return false }})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > time.Second || res.Next == nil {
		t.Fatalf("Scan of a slow filter with a 50 ms deadline took %v, next %v; want it stopped early with a resume key", d, res.Next)
	}

	// Resuming, with past deadlines and without, yields every record exactly once.
	var got []storage.Key
	start := storage.Key{}
	for pages := 0; ; pages++ {
		if pages > 4*len(keys) {
			t.Fatal("resumed scan does not end")
		}
		req := storage.ScanRequest{Start: start, Limit: 1 + x.rnd.IntN(200)}
		if pages%2 == 0 {
			req.Deadline = past
		}
		res, err := x.e.Scan(x.ctx, x.acct, tbl, req)
		if err != nil {
			t.Fatal(err)
		}
		x.checkPage(start, nil, req.Limit, res)
		got = append(got, recordKeys(res.Records)...)
		if res.Next == nil {
			break
		}
		start = *res.Next
	}
	if !slices.Equal(got, keys) {
		t.Fatalf("resumed scans yield %d keys, want %d, each once and in order", len(got), len(keys))
	}
}

// fillSized inserts n entities into one partition, with keys r%03d and a Binary "B" of a
// random size up to max bytes (every tenth at least max/2), and returns them as stored,
// in key order.
func (x *env) fillSized(tbl, pk string, n, max int) []storage.Record {
	x.t.Helper()
	for i := 0; i < n; i += 10 {
		var muts []storage.Mutation
		for j := i; j < min(n, i+10); j++ {
			size := x.rnd.IntN(max + 1)
			if j%10 == 0 {
				size = max/2 + x.rnd.IntN(max/2+1)
			}
			b := make([]byte, size)
			for k := range b {
				b[k] = byte(x.rnd.Uint32())
			}
			muts = append(muts, mut(storage.Insert, fmt.Sprintf("r%03d", j), prop("B", entity.BinaryValue(b)), i64("N", int64(j))))
		}
		x.apply(tbl, pk, muts...)
	}
	return x.snapshot(tbl)
}

// testScanMaxBytes checks ScanRequest.MaxBytes: a page's records total at most MaxBytes
// (storage.RecordSize) unless it holds only one, it ends only where the next record would
// not fit, it is never empty while records remain, and resuming yields every record once,
// in order — with and without a filter (rejected records do not count) and an end key.
func testScanMaxBytes(t *testing.T, x *env) {
	tbl := x.createTable("MaxBytes")
	all := x.fillSized(tbl, "p", 120, 40_000)
	sizes := make(map[storage.Key]int, len(all))
	for i := range all {
		sizes[keyOf(&all[i])] = storage.RecordSize(&all[i])
	}
	even := func(r *storage.Record) bool { n, _ := r.Entity.Get("N"); return n.Int%2 == 0 }
	end := &storage.Key{PartitionKey: "p", RowKey: "r100"}
	for _, c := range []struct {
		maxBytes, limit int
		filter          func(*storage.Record) bool
		end             *storage.Key
	}{
		{1, 1000, nil, nil}, // every record alone
		{30_000, 1000, nil, nil},
		{100_000, 1000, nil, end},
		{250_000, 7, nil, nil},
		{250_000, 10_000, nil, nil}, // a limit some engines read in several statements
		{100_000, 1000, even, nil},
		{60_000, 3, even, end},
		{1 << 30, 1000, nil, nil}, // no effect
	} {
		var want []storage.Key
		for i := range all {
			k := keyOf(&all[i])
			if (c.end == nil || k.Less(*c.end)) && (c.filter == nil || c.filter(&all[i])) {
				want = append(want, k)
			}
		}
		var got []storage.Key
		start := storage.Key{}
		for pages := 0; ; pages++ {
			if pages > len(all)+1 {
				t.Fatalf("MaxBytes %d: paging does not end", c.maxBytes)
			}
			res, err := x.e.Scan(x.ctx, x.acct, tbl, storage.ScanRequest{Start: start, End: c.end, Limit: c.limit, MaxBytes: c.maxBytes, Filter: c.filter})
			if err != nil {
				t.Fatal(err)
			}
			x.checkPage(start, c.end, c.limit, res)
			total := 0
			for i := range res.Records {
				total += storage.RecordSize(&res.Records[i])
				if c.filter != nil && !c.filter(&res.Records[i]) {
					t.Fatalf("Scan returned %q, which the filter rejects", keyOf(&res.Records[i]))
				}
			}
			if total > c.maxBytes && len(res.Records) > 1 {
				t.Fatalf("MaxBytes %d: page of %d records totals %d bytes", c.maxBytes, len(res.Records), total)
			}
			if len(res.Records) == 0 && res.Next != nil {
				t.Fatalf("MaxBytes %d: empty page with a resume key %q while records remain", c.maxBytes, *res.Next)
			}
			if res.Next != nil && len(res.Records) < c.limit {
				// The page may end only where the next matching record does not fit.
				var next storage.Key
				found := false
				for _, k := range want {
					if !k.Less(*res.Next) {
						next, found = k, true
						break
					}
				}
				if !found || total+sizes[next] <= c.maxBytes {
					t.Fatalf("MaxBytes %d: page of %d records (%d bytes) ended at %q, where the next record (%d bytes) fits",
						c.maxBytes, len(res.Records), total, *res.Next, sizes[next])
				}
			}
			got = append(got, recordKeys(res.Records)...)
			if res.Next == nil {
				break
			}
			start = *res.Next
		}
		if !slices.Equal(got, want) {
			t.Fatalf("MaxBytes %d, limit %d: pages yield %d keys, want %d, each once and in order", c.maxBytes, c.limit, len(got), len(want))
		}
	}
	// A first record larger than the budget still comes back, alone.
	big := entity.BinaryValue(make([]byte, 60_000))
	x.apply(tbl, "q", mut(storage.Insert, "a", prop("B", big)), mut(storage.Insert, "b", prop("B", big)))
	res, err := x.e.Scan(x.ctx, x.acct, tbl, storage.ScanRequest{Start: storage.Key{PartitionKey: "q"}, Limit: 10, MaxBytes: 1000})
	if err != nil || len(res.Records) != 1 || res.Next == nil || *res.Next != (storage.Key{PartitionKey: "q", RowKey: "b"}) {
		t.Fatalf("record over the budget: %d records, next %v, %v; want 1 and a resume key at (q, b)", len(res.Records), res.Next, err)
	}
}

// testScanCancel checks that a Scan whose context is cancelled fails with the context's
// error instead of returning a page, and stops reading soon after the cancellation.
func testScanCancel(t *testing.T, x *env) {
	tbl := x.createTable("Cancel")
	keys, _ := x.fillGrid(tbl, 3, 700)

	ctx, cancel := context.WithCancel(x.ctx)
	calls := 0
	_, err := x.e.Scan(ctx, x.acct, tbl, storage.ScanRequest{Limit: 10_000, Filter: func(*storage.Record) bool {
		calls++
		if calls == 10 {
			cancel() // the client goes away mid-scan
		}
		return false
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Scan cancelled mid-way = %v, want context.Canceled", err)
	}
	if calls > 300 {
		t.Fatalf("Scan examined %d of %d records after its context was cancelled at the 10th; want it to stop within a few hundred", calls, len(keys))
	}

	// Already cancelled: an error, not a page.
	res, err := x.e.Scan(ctx, x.acct, tbl, storage.ScanRequest{Limit: 10})
	if !errors.Is(err, context.Canceled) || len(res.Records) != 0 {
		t.Fatalf("Scan with a cancelled context = %d records, %v; want context.Canceled", len(res.Records), err)
	}
}
