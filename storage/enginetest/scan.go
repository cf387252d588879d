package enginetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/entity"
	"github.com/ceruleandb/cerulean/storage"
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
