package enginetest

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// indexValue is a random value for an indexed property: every EDM type, few distinct
// values of each (so entries share keys and numbers of different types compare equal),
// and the edge cases of the index encoding (NaN, −0, the empty string, a NUL byte).
func (x *env) indexValue() entity.Value {
	n := x.rnd.IntN(4)
	switch x.rnd.IntN(10) {
	case 0:
		return entity.StringValue([]string{"", "a", "a\x00b", "b"}[n])
	case 1:
		return entity.Int32Value(int32(n - 1))
	case 2:
		return entity.Int64Value([]int64{-1, 2, 1 << 53, 1<<53 + 1}[n])
	case 3:
		return entity.DoubleValue([]float64{math.NaN(), math.Copysign(0, -1), 0.5, 2}[n])
	case 4:
		return entity.BoolValue(n%2 == 0)
	case 5:
		return entity.TimeValue(time.Date(2026, 1, 1+n, 0, 0, 0, 0, time.UTC))
	case 6:
		var g [16]byte
		g[15] = byte(n)
		return entity.GUIDValue(g)
	case 7:
		return entity.BinaryValue([]byte{0, byte(n)}[:1+n%2])
	default:
		return entity.StringValue(fmt.Sprint(n))
	}
}

// indexProps is a random property bag over the indexed names A, B and C (each present
// or not) and an unindexed one, plus extra (a TTL, say).
func (x *env) indexProps(extra ...entity.Property) []entity.Property {
	var ps []entity.Property
	for _, name := range []string{"A", "B", "C", "D"} {
		if x.rnd.IntN(3) > 0 {
			ps = append(ps, prop(name, x.indexValue()))
		}
	}
	return append(ps, extra...)
}

// randomIndexWrites runs n random writes on table (partitions p0–p2, rows r00 to
// rows−1):
// Apply batches of 1–4 mutations of every kind (which may fail as a whole: not found,
// already exists) and ApplyEach calls; each written row gets extra() as well.
func (x *env) randomIndexWrites(table string, n, rows int, extra func() []entity.Property) {
	x.t.Helper()
	ops := []storage.Op{storage.Insert, storage.Replace, storage.Merge, storage.InsertOrReplace, storage.InsertOrMerge, storage.Delete}
	for i := range n {
		pk := fmt.Sprintf("p%d", x.rnd.IntN(3))
		var muts []storage.Mutation
		seen := map[string]bool{}
		for range 1 + x.rnd.IntN(4) {
			rk := fmt.Sprintf("r%02d", x.rnd.IntN(rows))
			if seen[rk] && i%3 == 0 {
				continue // ApplyEach names each row once
			}
			seen[rk] = true
			m := storage.Mutation{Op: ops[x.rnd.IntN(len(ops))], RowKey: rk}
			if m.Op != storage.Delete {
				m.Props = x.indexProps(extra()...)
			}
			muts = append(muts, m)
		}
		if i%3 == 0 {
			if _, err := x.e.ApplyEach(x.ctx, x.acct, table, pk, muts); err != nil {
				x.t.Fatalf("ApplyEach(%v): %v", describe(muts), err)
			}
			continue
		}
		if _, err := x.e.Apply(x.ctx, x.acct, table, pk, muts); err != nil && !isApplyError(err) {
			x.t.Fatalf("Apply(%v): %v", describe(muts), err)
		}
	}
}

func isApplyError(err error) bool {
	var ae *storage.ApplyError
	return errors.As(err, &ae)
}

// testIndexMaintenance: after random writes of every kind — batches of inserts,
// replaces, merges, upserts and deletes, ApplyEach, values of every type, properties
// missing, rows that expire, writes over expired rows, the expiry purge, a restart —
// an index read of every index (single and compound) finds exactly the entries a scan
// of the rows calls for, and CountIndex counts exactly those once nothing expired
// awaits the purge.
func testIndexMaintenance(t *testing.T, x *env) {
	t.Parallel()
	tbl := x.createWith("Maintained", storage.TableSettings{Elastic: true, DefaultTTL: storage.TTLNever, Indexes: []storage.IndexDef{
		{Name: "ByA", Properties: []string{"A"}},
		{Name: "ByBA", Properties: []string{"B", "A"}},
		{Name: "ByABC", Properties: []string{"A", "B", "C"}},
	}})
	// Some rows live for a second, the rest for ever; rows r12–r23 are not written again,
	// so the expired ones among them are left to the purge.
	x.randomIndexWrites(tbl, 400, 24, func() []entity.Property {
		if x.rnd.IntN(3) == 0 {
			return []entity.Property{ttl(1)}
		}
		return nil
	})
	x.wantIndexMatches("after the first writes", tbl, false)
	x.waitPast(time.Now().Add(time.Second))
	// Every row with a TTL has expired: writes now land over expired rows (an insert
	// succeeds, a merge finds nothing) and leave rows that never expire.
	x.wantIndexMatches("once rows expired", tbl, false)
	never := func() []entity.Property { return []entity.Property{ttl(storage.TTLNever)} }
	x.randomIndexWrites(tbl, 300, 12, never)
	x.wantIndexMatches("after writes over expired rows", tbl, false)
	if x.h.PurgeExpired != nil {
		x.h.PurgeExpired(t, x.e)
		x.wantIndexMatches("after the expiry purge", tbl, true)
	}
	x.reopenIfAble()
	x.randomIndexWrites(tbl, 60, 24, never)
	x.wantIndexMatches("after a restart", tbl, x.h.PurgeExpired != nil)
	recs := x.snapshot(tbl)
	if len(recs) < 10 || !slices.ContainsFunc(recs, func(r storage.Record) bool { _, ok := indexKeyOf(x.indexDef(tbl, "ByABC"), r.Entity.Props); return ok }) {
		t.Fatalf("the random writes left %d rows, too few to test anything", len(recs))
	}
}
