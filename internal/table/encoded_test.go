package table_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/odata"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/table"
)

// TestQueryEncodedRelease checks Encoded pages against decoded ones, and that a released
// page's buffers, reused by the next queries, never show through another page: pages of
// partitions with different contents are read, released and read again in turn, each
// compared with what was stored.
func TestQueryEncodedRelease(t *testing.T) {
	eng := openPebble(t)
	ctx := context.Background()
	svc := table.New(eng, nil)
	const account, tbl = "acct", "encoded"
	if err := svc.CreateTable(ctx, account, tbl, nil); err != nil {
		t.Fatal(err)
	}
	want := map[string][]entity.Property{}
	for _, pk := range []string{"a", "b", "c"} {
		var muts []storage.Mutation
		for i := range 80 { // ~2.5 blocks of 1 KiB bags per page
			props := []entity.Property{
				{Name: "Payload", Value: entity.StringValue(strings.Repeat(pk, 1000) + fmt.Sprint(i))},
				{Name: "Quoted", Value: entity.StringValue(`"` + pk + `"`)},
				{Name: "N", Value: entity.Int64Value(int64(i))},
			}
			rk := fmt.Sprintf("r%03d", i)
			want[pk+"/"+rk] = props
			muts = append(muts, storage.Mutation{Op: storage.Insert, RowKey: rk, Props: props})
		}
		if _, err := eng.Apply(ctx, account, tbl, pk, muts); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 3 {
		for _, pk := range []string{"a", "b", "c"} {
			page, err := svc.QueryEntities(ctx, account, tbl, table.Query{Filter: odata.MustParse("PartitionKey eq '" + pk + "'"), Encoded: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Records) != 80 {
				t.Fatalf("round %d, partition %s: %d records, want 80", round, pk, len(page.Records))
			}
			for i := range page.Records {
				r := &page.Records[i]
				if r.Encoded == nil {
					t.Fatalf("record %q has no stored form", keyOf(*r))
				}
				got, err := entity.DecodeProps(r.Encoded)
				if err != nil {
					t.Fatalf("record %q: %v", keyOf(*r), err)
				}
				w := want[r.Entity.PartitionKey+"/"+r.Entity.RowKey]
				if len(got) != len(w) || got[0].Value.Str != w[0].Value.Str || got[1].Value.Str != w[1].Value.Str || got[2].Value.Int != w[2].Value.Int {
					t.Fatalf("round %d: record %q holds %v, want %v", round, keyOf(*r), got, w)
				}
			}
			page.Release()
			if page.Records != nil {
				t.Fatalf("a released page still holds %d records", len(page.Records))
			}
		}
	}
}
