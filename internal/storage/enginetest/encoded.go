package enginetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// testScanEncoded checks ScanRequest.Encoded: a scan that allows the stored form returns
// the same records, pages and resume keys as one that does not, whether the engine keeps
// bags encoded (each one well formed and decoding to the record's properties) or
// decodes them, with and without a size bound and a filter.
func testScanEncoded(t *testing.T, x *env) {
	tbl := x.createTable("Encoded")
	var muts []storage.Mutation
	for i := 0; i < 150; i++ {
		muts = append(muts, mut(storage.Insert, fmt.Sprintf("r%03d", i),
			str("S", fmt.Sprintf("text \"%d\" é\u2028 %s", i, string(make([]byte, i%7)))),
			prop("B", entity.BinaryValue([]byte{byte(i), 0, 0xff})),
			prop("T", entity.BoolValue(i%2 == 0)),
			prop("I", entity.Int32Value(int32(-i))),
			i64("N", int64(i)),
			prop("D", entity.DoubleValue(float64(i)/3)),
			prop("W", entity.TimeValue(time.Unix(int64(i), 100).UTC())),
			prop("G", entity.GUIDValue([16]byte{byte(i), 1, 2, 3})),
			str("", "")))
		if len(muts) == 100 {
			x.apply(tbl, "p", muts...)
			muts = nil
		}
	}
	x.apply(tbl, "p", muts...)
	odd := func(r *storage.Record) bool { n, _ := r.Entity.Get("N"); return n.Int%2 == 1 }
	oddEncoded := func(_, _ string, _ int64, props []byte) (bool, error) {
		v, _, err := entity.FindProperty(props, "N")
		return v.Int%2 == 1, err
	}
	for _, c := range []struct {
		name     string
		maxBytes int
		limit    int
		filter   bool
	}{
		{"whole", 0, 1000, false},
		{"limit", 0, 7, false},
		{"bytes", 5_000, 1000, false},
		{"filter", 0, 1000, true},
		{"filter bytes", 3_000, 11, true},
	} {
		var pages [2][]storage.ScanResult
		for k, encoded := range []bool{false, true} {
			start := storage.Key{}
			for {
				req := storage.ScanRequest{Start: start, Limit: c.limit, MaxBytes: c.maxBytes, Encoded: encoded}
				if c.filter {
					req.Filter, req.EncodedFilter = odd, oddEncoded
				}
				res, err := x.e.Scan(x.ctx, x.acct, tbl, req)
				if err != nil {
					t.Fatalf("%s: Scan (encoded %v): %v", c.name, encoded, err)
				}
				pages[k] = append(pages[k], res)
				if res.Next == nil {
					break
				}
				start = *res.Next
			}
		}
		if len(pages[0]) != len(pages[1]) {
			t.Fatalf("%s: %d pages decoded, %d encoded", c.name, len(pages[0]), len(pages[1]))
		}
		for i := range pages[0] {
			d, e := pages[0][i], pages[1][i]
			if (d.Next == nil) != (e.Next == nil) || d.Next != nil && *d.Next != *e.Next {
				t.Fatalf("%s: page %d resumes at %v decoded, %v encoded", c.name, i, d.Next, e.Next)
			}
			for j := range e.Records {
				r := &e.Records[j]
				if r.Encoded == nil {
					continue
				}
				if r.Entity.Props != nil {
					t.Fatalf("%s: record %q has both Props and Encoded", c.name, keyOf(r))
				}
				props, err := entity.DecodeProps(r.Encoded)
				if err != nil {
					t.Fatalf("%s: record %q: Encoded does not decode: %v", c.name, keyOf(r), err)
				}
				r.Entity.Props, r.Encoded = props, nil
			}
			x.sameRecords(fmt.Sprintf("%s page %d", c.name, i), e.Records, d.Records)
		}
	}
}

// testGetEncoded checks Reader.GetEncoded: it answers what Get does (the same entity and
// version, the same errors), the properties either decoded or as a well-formed stored bag
// that decodes to them, read twice (the second read may come from a cache), and a bag
// that stays as it was when the entity is written again.
func testGetEncoded(t *testing.T, x *env) {
	tbl := x.createTable("GetEncoded")
	x.apply(tbl, "p",
		mut(storage.Insert, "full",
			str("S", "text \"q\" é\u2028"),
			prop("B", entity.BinaryValue([]byte{0, 0xff})),
			prop("T", entity.BoolValue(true)),
			prop("I", entity.Int32Value(-7)),
			i64("N", 1<<40),
			prop("D", entity.DoubleValue(1.5)),
			prop("W", entity.TimeValue(time.Unix(1, 100).UTC())),
			prop("G", entity.GUIDValue([16]byte{1, 2, 3})),
			str("", "")),
		mut(storage.Insert, "empty"))
	// decoded is rec with an Encoded bag decoded into Props.
	decoded := func(what string, rec storage.Record) storage.Record {
		t.Helper()
		if rec.Encoded == nil {
			return rec
		}
		if rec.Entity.Props != nil {
			t.Fatalf("%s has both Props and Encoded", what)
		}
		props, err := entity.DecodeProps(rec.Encoded)
		if err != nil {
			t.Fatalf("%s: Encoded does not decode: %v", what, err)
		}
		rec.Entity.Props, rec.Encoded = props, nil
		return rec
	}
	for _, rk := range []string{"full", "empty"} {
		want, err := x.e.Get(x.ctx, x.acct, tbl, "p", rk)
		if err != nil {
			t.Fatalf("Get %q: %v", rk, err)
		}
		var held []storage.Record
		for i := range 2 {
			got, err := x.e.GetEncoded(x.ctx, x.acct, tbl, "p", rk)
			if err != nil {
				t.Fatalf("GetEncoded %q (read %d): %v", rk, i+1, err)
			}
			held = append(held, got)
			x.sameRecords(fmt.Sprintf("GetEncoded %s (read %d)", rk, i+1), []storage.Record{decoded("GetEncoded "+rk, got)}, []storage.Record{want})
		}
		// A later write of the entity leaves the bags already returned as they were.
		x.apply(tbl, "p", mut(storage.Replace, rk, str("S", "replaced")))
		if _, err := x.e.GetEncoded(x.ctx, x.acct, tbl, "p", rk); err != nil {
			t.Fatalf("GetEncoded %q after a replace: %v", rk, err)
		}
		for i, got := range held {
			x.sameRecords(fmt.Sprintf("GetEncoded %s (read %d) after a replace", rk, i+1), []storage.Record{decoded("GetEncoded "+rk, got)}, []storage.Record{want})
		}
	}
	if _, err := x.e.GetEncoded(x.ctx, x.acct, tbl, "p", "absent"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("GetEncoded of an absent entity = %v, want ErrNotFound", err)
	}
	if _, err := x.e.GetEncoded(x.ctx, x.acct, "NoSuchTable", "p", "full"); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("GetEncoded in a missing table = %v, want ErrTableNotFound", err)
	}
}
