package postgres

import (
	"context"
	"fmt"
	"testing"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// TestApplyEachRoundTrips counts the round trips (connections taken from the pool) of an
// ApplyEach of 100 mutations of each kind, where none fails and where every other one
// fails its precondition: a fixed number either way — the write, one read to explain the
// failures, and a merge's read of its rows — never one per failure (an Apply retried
// without each failing mutation took about two per failure, each re-running the rest).
func TestApplyEachRoundTrips(t *testing.T) {
	ctx := context.Background()
	e, acct := tableEngine(t, "ea")
	str := func(v string) []entity.Property {
		return []entity.Property{{Name: "S", Value: entity.StringValue(v)}}
	}
	round := 0
	// run makes 100 rows, the odd ones stored first when failing is set up so that their
	// mutation fails, and counts the round trips of one ApplyEach over them.
	run := func(t *testing.T, op storage.Op, failing bool) int64 {
		t.Helper()
		round++
		pk := fmt.Sprintf("%v-%d", op, round)
		var pre, muts []storage.Mutation
		for i := range 100 {
			rk := fmt.Sprintf("r%03d", i)
			m := storage.Mutation{Op: op, RowKey: rk, Props: str("new")}
			stored := op != storage.Insert // what succeeds: an insert of a missing row, the others of a stored one
			if failing && i%2 == 1 {
				stored = !stored
			}
			if stored {
				pre = append(pre, storage.Mutation{Op: storage.Insert, RowKey: rk, Props: str("old")})
			}
			muts = append(muts, m)
		}
		if len(pre) > 0 {
			if _, err := e.Apply(ctx, acct, "T", pk, pre); err != nil {
				t.Fatal(err)
			}
		}
		before := e.Stats().Pool.Acquires
		res, err := e.ApplyEach(ctx, acct, "T", pk, muts)
		n := e.Stats().Pool.Acquires - before
		if err != nil {
			t.Fatal(err)
		}
		for i, err := range res.Errs {
			if (err != nil) != (failing && i%2 == 1) {
				t.Fatalf("%v %s: %v (failing %v)", op, muts[i].RowKey, err, failing)
			}
		}
		return n
	}
	for _, op := range []storage.Op{storage.Insert, storage.Replace, storage.Merge, storage.Delete} {
		t.Run(op.String(), func(t *testing.T) {
			ok, failing := run(t, op, false), run(t, op, true)
			t.Logf("%v: %d round trips when all succeed, %d when half fail", op, ok, failing)
			limit := int64(2) // the write; and one read to explain failures
			if op == storage.Merge {
				limit++ // the rows' read
			}
			if ok > limit || failing > limit {
				t.Fatalf("%v: %d and %d round trips for 100 mutations, want at most %d whatever fails", op, ok, failing, limit)
			}
		})
	}
}
