package pebble

import (
	"context"
	"errors"
	"testing"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	pebbledb "github.com/cockroachdb/pebble/v2"
)

// TestScanEncodedKeepsStoredForm checks that an Encoded scan returns the stored bags
// themselves (not decoded), that records of one page do not share bytes they could
// overwrite, and that a corrupt stored bag fails the scan instead of reaching a response.
func TestScanEncodedKeepsStoredForm(t *testing.T) {
	ctx := context.Background()
	e := openTest(t, t.TempDir(), Options{})
	if err := e.CreateTable(ctx, "acct", "t", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	props := func(s string) []entity.Property {
		return []entity.Property{{Name: "S", Value: entity.StringValue(s)}, {Name: "N", Value: entity.Int64Value(7)}}
	}
	var muts []storage.Mutation
	for _, rk := range []string{"a", "b", "c"} {
		muts = append(muts, storage.Mutation{Op: storage.Insert, RowKey: rk, Props: props("value of " + rk)})
	}
	if _, err := e.Apply(ctx, "acct", "t", "p", muts); err != nil {
		t.Fatal(err)
	}
	res, err := e.Scan(ctx, "acct", "t", storage.ScanRequest{Limit: 10, Encoded: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 3 {
		t.Fatalf("%d records, want 3", len(res.Records))
	}
	for i, rk := range []string{"a", "b", "c"} {
		r := &res.Records[i]
		if r.Entity.Props != nil || r.Encoded == nil {
			t.Fatalf("record %q: Props %v, Encoded %v: want only the stored form", rk, r.Entity.Props, r.Encoded)
		}
		if got, want := string(r.Encoded), string(entity.AppendProps(nil, props("value of "+rk))); got != want {
			t.Fatalf("record %q: Encoded %q, want %q", rk, got, want)
		}
		if cap(r.Encoded) != len(r.Encoded) {
			t.Fatalf("record %q: Encoded has spare capacity %d: an append would overwrite the next record", rk, cap(r.Encoded)-len(r.Encoded))
		}
	}

	// Corrupt b's bag: a count of two properties followed by one.
	tbl, err := e.lookup("acct", "t")
	if err != nil {
		t.Fatal(err)
	}
	bad := appendValue(nil, 1, 0, nil)
	bad = append(bad[:len(bad)-1], entity.AppendProps(nil, props("x"))[1:]...)
	bad = append(bad[:valueHeader], append([]byte{3}, bad[valueHeader+1:]...)...)
	if err := e.db.Set(dataKey(tbl.id, "p", "b"), bad, pebbledb.Sync); err != nil {
		t.Fatal(err)
	}
	if _, err := entity.DecodeProps(bad[valueHeader:]); err == nil {
		t.Fatal("the corrupt bag decodes")
	}
	for _, encoded := range []bool{false, true} {
		_, err := e.Scan(ctx, "acct", "t", storage.ScanRequest{Limit: 10, Encoded: encoded})
		if !errors.Is(err, entity.ErrCorrupt) {
			t.Fatalf("Scan (encoded %v) over a corrupt bag: %v, want ErrCorrupt", encoded, err)
		}
	}
}
