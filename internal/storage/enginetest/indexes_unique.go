package enginetest

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// uniqueTable creates an elastic table with time-to-live on (no default) and the unique
// indexes ByEmail (Email) and ByAB (A, B), and the ordinary index ByA (A).
func (x *env) uniqueTable(name string) string {
	x.t.Helper()
	return x.createWith(name, storage.TableSettings{Elastic: true, DefaultTTL: storage.TTLNever, Indexes: []storage.IndexDef{
		{Name: "ByEmail", Properties: []string{"Email"}, Unique: true},
		{Name: "ByAB", Properties: []string{"A", "B"}, Unique: true},
		{Name: "ByA", Properties: []string{"A"}},
	}})
}

// wantViolation checks that err is a unique violation of index name, naming the holder
// (pk, rk) when the engine names one.
func (x *env) wantViolation(what string, err error, name, pk, rk string) {
	x.t.Helper()
	var uv *storage.UniqueViolation
	if !errors.As(err, &uv) {
		x.t.Fatalf("%s: %v (%T), want a *storage.UniqueViolation of %s", what, err, err, name)
	}
	if uv.Index != name {
		x.t.Fatalf("%s: violation of index %q, want %q", what, uv.Index, name)
	}
	if (uv.PartitionKey != "" || uv.RowKey != "") && (uv.PartitionKey != pk || uv.RowKey != rk) {
		x.t.Fatalf("%s: the violation names the holder (%q, %q), want (%q, %q)", what, uv.PartitionKey, uv.RowKey, pk, rk)
	}
}

// applyViolation runs an Apply that must fail at mutation index with a violation of
// index name held by (hpk, hrk), and checks that it wrote nothing.
func (x *env) applyViolation(table, pk string, index int, name, hpk, hrk string, muts ...storage.Mutation) {
	x.t.Helper()
	before := x.snapshot(table)
	ae := x.applyErr(table, pk, index, nil, muts...)
	x.wantViolation(fmt.Sprintf("Apply(%v)", describe(muts)), ae.Err, name, hpk, hrk)
	x.sameRecords(fmt.Sprintf("after the failed Apply(%v)", describe(muts)), x.snapshot(table), before)
}

// wantUniqueHeld checks that no two live rows hold one value of a unique index.
func (x *env) wantUniqueHeld(what, table string) {
	x.t.Helper()
	for _, d := range x.indexes(table).Indexes {
		if !d.Unique {
			continue
		}
		seen := map[string]storage.Key{}
		for _, r := range x.snapshot(table) {
			if k, ok := d.AppendUniqueKey(nil, r.Entity.Props); ok {
				if o, dup := seen[string(k)]; dup {
					x.t.Fatalf("%s: rows %v and %v both hold %x in unique index %s", what, o, keyOf(&r), k, d.Name)
				}
				seen[string(k)] = keyOf(&r)
			}
		}
	}
}

// testIndexUnique: a unique index refuses a second entity with a value another holds —
// by insert, replace, merge and both upserts, in one Apply or across two, as the failing
// mutation's UniqueViolation with nothing written — while an entity may rewrite its own
// value or keep it through a merge, entities without the property are not constrained,
// values of different types never collide (numbers are one domain), a delete frees a
// value, a merge that completes a compound value from stored properties is checked, and
// an Apply is judged on the state it leaves (a swap passes; two rows ending with one
// value fail) while ApplyEach judges each mutation after the ones before it.
func testIndexUnique(t *testing.T, x *env) {
	t.Parallel()
	tbl := x.uniqueTable("Unique")
	ins := func(rk string, props ...entity.Property) storage.Mutation { return mut(storage.Insert, rk, props...) }
	x.apply(tbl, "p", ins("a", str("Email", "x@")), ins("n1"), ins("n2", str("Other", "x@")))
	x.applyViolation(tbl, "p", 0, "ByEmail", "p", "a", ins("b", str("Email", "x@")))
	x.applyViolation(tbl, "q", 1, "ByEmail", "p", "a", ins("b", str("Email", "y@")), ins("c", str("Email", "x@")))
	// Other partitions, types and properties.
	x.apply(tbl, "q", ins("b", str("Email", "y@"), i32("N", 1)), ins("c", i32("Email", 5)), ins("d"))
	x.applyViolation(tbl, "r", 0, "ByEmail", "q", "c", ins("e", i64("Email", 5)))
	x.applyViolation(tbl, "r", 0, "ByEmail", "q", "c", ins("e", prop("Email", entity.DoubleValue(5))))
	x.apply(tbl, "r", ins("e", str("Email", "5")), ins("f", prop("Email", entity.BinaryValue([]byte("x@")))))
	// Int64s beyond 2^53 that round to one float64 (one index key) are distinct values;
	// one a Double holds exactly collides with that Double, alone and in a compound value.
	x.apply(tbl, "big", ins("a", i64("Email", 1<<53)), ins("b", i64("Email", 1<<53+1)), ins("c", i64("Email", math.MaxInt64)),
		ins("d", i64("Email", math.MaxInt64-1)), ins("e", i64("Email", math.MinInt64)), ins("f", i64("Email", math.MinInt64+1)))
	x.applyViolation(tbl, "big", 0, "ByEmail", "big", "a", ins("g", prop("Email", entity.DoubleValue(1<<53))))
	x.applyViolation(tbl, "big", 0, "ByEmail", "big", "b", ins("g", i64("Email", 1<<53+1)))
	x.applyViolation(tbl, "big", 0, "ByEmail", "big", "c", mut(storage.Merge, "a", i64("Email", math.MaxInt64)))
	x.apply(tbl, "big", ins("h", i64("A", 1<<60), i64("B", 1<<60+1)), ins("i", i64("A", 1<<60+1), i64("B", 1<<60)),
		ins("j", i32("A", 7), i64("B", 1<<60)), ins("k", prop("A", entity.DoubleValue(7)), i64("B", 1<<60+1)))
	x.applyViolation(tbl, "big", 0, "ByAB", "big", "i", ins("l", i64("A", 1<<60+1), prop("B", entity.DoubleValue(1<<60))))
	x.applyViolation(tbl, "big", 0, "ByAB", "big", "k", ins("l", i64("A", 7), i64("B", 1<<60+1)))
	// Every kind of write that would take a held value.
	x.applyViolation(tbl, "q", 0, "ByEmail", "p", "a", mut(storage.Replace, "b", str("Email", "x@")))
	x.applyViolation(tbl, "q", 0, "ByEmail", "p", "a", mut(storage.Merge, "b", str("Email", "x@")))
	x.applyViolation(tbl, "q", 0, "ByEmail", "p", "a", mut(storage.InsertOrReplace, "b", str("Email", "x@")))
	x.applyViolation(tbl, "q", 0, "ByEmail", "p", "a", mut(storage.InsertOrMerge, "b", str("Email", "x@")))
	x.applyViolation(tbl, "q", 0, "ByEmail", "p", "a", mut(storage.InsertOrMerge, "new", str("Email", "x@")))
	// Its own value: rewritten, kept by a merge, kept by an upsert.
	x.apply(tbl, "p", mut(storage.Replace, "a", str("Email", "x@"), i32("N", 1)))
	x.apply(tbl, "p", mut(storage.Merge, "a", i32("N", 2)))
	x.apply(tbl, "q", mut(storage.InsertOrMerge, "b", i32("N", 3)), mut(storage.InsertOrReplace, "c", i32("Email", 5)))
	// A compound value completed by a merge from the stored properties.
	x.apply(tbl, "c", ins("h", i32("A", 1), i32("B", 2)), ins("i", i32("A", 1)), ins("j", i32("B", 2)))
	x.applyViolation(tbl, "c", 0, "ByAB", "c", "h", mut(storage.Merge, "i", i32("B", 2)))
	x.applyViolation(tbl, "c", 0, "ByAB", "c", "h", mut(storage.InsertOrMerge, "j", i32("A", 1)))
	x.apply(tbl, "c", mut(storage.Merge, "i", i32("B", 3)))
	// A delete frees the value, in a later Apply or in the same one.
	x.apply(tbl, "p", mut(storage.Delete, "a"))
	x.apply(tbl, "q", mut(storage.Merge, "b", str("Email", "x@")))
	x.apply(tbl, "s", ins("a", str("Email", "y@")), mut(storage.Delete, "a"), ins("b", str("Email", "y@")))
	x.applyViolation(tbl, "s", 1, "ByEmail", "q", "b", mut(storage.Delete, "b"), ins("c", str("Email", "x@")))
	// One Apply is judged on the state it leaves: a swap, a value given up and taken.
	x.apply(tbl, "w", ins("s1", str("Email", "1")), ins("s2", str("Email", "2")))
	x.apply(tbl, "w", mut(storage.Merge, "s1", str("Email", "2")), mut(storage.Merge, "s2", str("Email", "1")))
	x.apply(tbl, "w", mut(storage.Replace, "s1", str("Email", "3")), ins("s3", str("Email", "2")))
	x.applyViolation(tbl, "w", 1, "ByEmail", "w", "s4", ins("s4", str("Email", "9")), ins("s5", str("Email", "9")))
	x.applyViolation(tbl, "w", 2, "ByEmail", "w", "s4", ins("s4", str("Email", "9")), ins("s5", str("Email", "8")),
		mut(storage.Merge, "s5", str("Email", "9")))
	x.applyViolation(tbl, "w", 1, "ByEmail", "w", "s4", ins("s4", str("Email", "7")),
		mut(storage.Merge, "s1", str("Email", "7")))
	// ApplyEach: each mutation after the ones before it.
	each := x.applyEach(tbl, "e",
		ins("a", str("Email", "e1")), ins("b", str("Email", "e1")), ins("c", str("Email", "x@")), ins("d", str("Email", "e2")))
	if each.Errs[0] != nil || each.Errs[3] != nil {
		t.Fatalf("ApplyEach: %v", each.Errs)
	}
	x.wantViolation("ApplyEach, a value taken by the mutation before", each.Errs[1], "ByEmail", "e", "a")
	x.wantViolation("ApplyEach, a value held before", each.Errs[2], "ByEmail", "q", "b")
	x.getMissing(tbl, "e", "b")
	x.get(tbl, "e", "d")
	each = x.applyEach(tbl, "e", mut(storage.Merge, "a", str("Email", "e2")), mut(storage.Merge, "d", str("Email", "e1")))
	x.wantViolation("ApplyEach, a swap's first half", each.Errs[0], "ByEmail", "e", "d")
	x.wantViolation("ApplyEach, a swap's second half", each.Errs[1], "ByEmail", "e", "a")
	each = x.applyEach(tbl, "e", mut(storage.Delete, "a"), ins("b", str("Email", "e1")))
	if each.Errs[0] != nil || each.Errs[1] != nil {
		t.Fatalf("ApplyEach of a delete and an insert of the value it frees: %v", each.Errs)
	}
	x.wantUniqueHeld("after the unique writes", tbl)
	x.wantIndexMatches("after the unique writes", tbl, true)
	x.reopenIfAble()
	x.applyViolation(tbl, "z", 0, "ByEmail", "e", "b", ins("z", str("Email", "e1")))
	x.applyViolation(tbl, "z", 0, "ByAB", "c", "h", ins("z", i64("A", 1), i64("B", 2)))
}

// testIndexUniqueExpiry: an expired entity holds no value, as it holds no key: a write of
// the value succeeds (and holds it from then on), as does the expired entity's own key
// written again with it; the expiry purge and a table's deletion leave the values as
// they should be.
func testIndexUniqueExpiry(t *testing.T, x *env) {
	t.Parallel()
	tbl := x.uniqueTable("UniqueExpiry")
	vs := x.apply(tbl, "p", mut(storage.Insert, "old", str("Email", "v"), ttl(1)),
		mut(storage.Insert, "old2", str("Email", "w"), ttl(1)),
		mut(storage.Insert, "old3", str("Email", "u"), ttl(1)),
		mut(storage.Insert, "keep", str("Email", "k")))
	x.applyViolation(tbl, "q", 0, "ByEmail", "p", "old", mut(storage.Insert, "new", str("Email", "v")))
	x.waitPast(expiryAt(vs[0], 1))
	x.apply(tbl, "q", mut(storage.Insert, "new", str("Email", "v")))
	x.applyViolation(tbl, "q", 0, "ByEmail", "q", "new", mut(storage.Insert, "new2", str("Email", "v")))
	// The expired entity's key written again: it takes its old value back.
	x.apply(tbl, "p", mut(storage.Insert, "old2", str("Email", "w")))
	x.applyViolation(tbl, "q", 0, "ByEmail", "p", "old2", mut(storage.Insert, "new2", str("Email", "w")))
	// old3's value stays free; the expired old must not take v back from new.
	x.applyViolation(tbl, "p", 0, "ByEmail", "q", "new", mut(storage.Insert, "old", str("Email", "v")))
	if x.h.PurgeExpired != nil {
		x.h.PurgeExpired(t, x.e)
	}
	x.applyViolation(tbl, "r", 0, "ByEmail", "q", "new", mut(storage.Insert, "a", str("Email", "v")))
	x.applyViolation(tbl, "r", 0, "ByEmail", "p", "old2", mut(storage.Insert, "a", str("Email", "w")))
	x.apply(tbl, "r", mut(storage.Insert, "a", str("Email", "u")))
	x.applyViolation(tbl, "r", 0, "ByEmail", "r", "a", mut(storage.Insert, "b", str("Email", "u")))
	x.wantUniqueHeld("after expiry", tbl)
	x.wantIndexMatches("after expiry", tbl, x.h.PurgeExpired != nil)
	// A deleted table takes its values with it.
	if err := x.e.DeleteTable(x.ctx, x.acct, tbl); err != nil {
		t.Fatal(err)
	}
	tbl = x.uniqueTable("UniqueExpiry")
	x.apply(tbl, "q", mut(storage.Insert, "a", str("Email", "v")), mut(storage.Insert, "b", str("Email", "k")))
	x.wantIndexMatches("after the table was created again", tbl, true)
}

// testIndexUniqueConcurrent: writers racing for one value on distinct keys (distinct
// partitions, so nothing but the value orders them): in each round exactly one wins,
// and every other gets the violation naming the winner.
func testIndexUniqueConcurrent(t *testing.T, x *env) {
	t.Parallel()
	tbl := x.uniqueTable("UniqueRace")
	const writers, rounds = 8, 20
	for round := range rounds {
		var wg sync.WaitGroup
		errs := make([]error, writers)
		start := make(chan struct{})
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				pk := fmt.Sprintf("p%d", w)
				m := mut(storage.Insert, fmt.Sprintf("r%d", round), str("Email", fmt.Sprintf("v%d", round)), i32("A", int32(round)), i32("B", 0))
				if w%2 == 1 {
					m.Op = storage.InsertOrMerge
				}
				var err error
				if w%3 == 2 {
					var each storage.Each
					if each, err = x.e.ApplyEach(x.ctx, x.acct, tbl, pk, []storage.Mutation{m}); err == nil {
						err = each.Errs[0]
					}
				} else {
					_, err = x.e.Apply(x.ctx, x.acct, tbl, pk, []storage.Mutation{m})
				}
				errs[w] = err
			}()
		}
		time.Sleep(time.Millisecond)
		close(start)
		wg.Wait()
		winner := -1
		for w, err := range errs {
			if err == nil {
				if winner >= 0 {
					t.Fatalf("round %d: writers %d and %d both took the value", round, winner, w)
				}
				winner = w
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no writer took the value: %v", round, errs)
		}
		for w, err := range errs {
			if w != winner {
				var uv *storage.UniqueViolation
				if !errors.As(err, &uv) {
					t.Fatalf("round %d: writer %d: %v, want a unique violation", round, w, err)
				}
				if uv.PartitionKey != "" && uv.PartitionKey != fmt.Sprintf("p%d", winner) {
					t.Fatalf("round %d: writer %d's violation names %q, the winner is p%d", round, w, uv.PartitionKey, winner)
				}
			}
		}
	}
	x.wantUniqueHeld("after the races", tbl)
	x.wantIndexMatches("after the races", tbl, true)
}
