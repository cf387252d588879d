package postgres_test

import (
	"context"
	"testing"

	"github.com/ceruleandb/cerulean/internal/storage"
)

// BenchmarkGetMerge is 32 callers on preload's 10,000 entities, a quarter of them merging a
// property into random entities and the rest reading random ones: merges' reads share
// groups with the point reads (coalesce.go), where they keep the group from being one
// statement. Before merges went through the coalescers, 11,784–12,582 operations/s; with
// them, 18,190–18,544 (three alternating pairs on 2 cores).
func BenchmarkGetMerge(b *testing.B) {
	e, acct := benchEngine(b)
	ctx := context.Background()
	preload(b, e, acct)
	parallel32(b, func(w int64, i int) int {
		pk, rk := preloaded(w, i)
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
