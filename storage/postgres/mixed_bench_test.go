package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ceruleandb/cerulean/storage"
)

// BenchmarkGetMerge is 32 callers on 10,000 entities, a quarter of them merging a
// property into random entities and the rest reading random ones: merges' reads share
// groups with the point reads (coalesce.go), where they keep the group from being one
// statement. Before merges went through the coalescers, 11,784–12,582 operations/s; with
// them, 18,190–18,544 (three alternating pairs on 2 cores).
func BenchmarkGetMerge(b *testing.B) {
	e, acct := benchEngine(b)
	ctx := context.Background()
	const n = 10_000
	for p := 0; p < n/100; p++ {
		var muts []storage.Mutation
		for r := range 100 {
			muts = append(muts, storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprintf("r%03d", r), Props: benchProps(p*100 + r)})
		}
		if _, err := e.Apply(ctx, acct, "T", fmt.Sprintf("p%03d", p), muts); err != nil {
			b.Fatal(err)
		}
	}
	parallel32(b, func(w int64, i int) int {
		k := int(uint64(i*32+int(w)) * 0x9E3779B97F4A7C15 >> 40 % n)
		pk, rk := fmt.Sprintf("p%03d", k/100), fmt.Sprintf("r%03d", k%100)
		var err error
		if w%4 == 0 {
			_, err = e.Apply(ctx, acct, "T", pk, []storage.Mutation{{Op: storage.Merge, RowKey: rk, Props: benchProps(i)[:2]}})
		} else {
			_, err = e.Get(ctx, acct, "T", pk, rk)
		}
		if err != nil {
			b.Error(err)
		}
		return 1
	})
}
