package enginetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

var allOps = []storage.Op{storage.Insert, storage.Replace, storage.Merge, storage.Delete, storage.InsertOrReplace, storage.InsertOrMerge}

// testPreconditions runs every op against a missing and an existing entity, with no
// IfMatch, the right one and a wrong one, and checks the outcome and the stored state.
func testPreconditions(t *testing.T, x *env) {
	tbl := x.createTable("Pre")
	base := []entity.Property{str("A", "base"), i64("B", 1)}
	patch := []entity.Property{str("B", "new"), prop("C", entity.Int32Value(7))}
	merged := []entity.Property{str("A", "base"), str("B", "new"), prop("C", entity.Int32Value(7))}
	type ifm int
	const (
		none ifm = iota
		right
		wrong
	)
	// Some other entity's version, so that "right" on a missing entity is a real version.
	otherV := x.apply(tbl, "other", mut(storage.Insert, "x"))[0]
	for _, op := range allOps {
		for _, exists := range []bool{false, true} {
			for _, im := range []ifm{none, right, wrong} {
				conditional := op == storage.Replace || op == storage.Merge || op == storage.Delete
				if im != none && !conditional {
					continue
				}
				rk := fmt.Sprintf("%v-exists=%v-ifmatch=%d", op, exists, im)
				t.Run(rk, func(t *testing.T) {
					x := *x
					x.t = t
					var old int64
					if exists {
						old = x.apply(tbl, "p", mut(storage.Insert, rk, base...))[0]
					}
					m := mut(op, rk, patch...)
					switch im {
					case right:
						m.IfMatch = old
						if !exists {
							m.IfMatch = otherV
						}
					case wrong:
						m.IfMatch = old - 1
						if !exists {
							m.IfMatch = otherV - 1
						}
					}
					var want error
					switch {
					case op == storage.Insert && exists:
						want = storage.ErrExists
					case conditional && !exists:
						want = storage.ErrNotFound
					case conditional && im == wrong:
						want = storage.ErrVersionMismatch
					}
					if want != nil {
						x.applyErr(tbl, "p", 0, want, m)
						if exists {
							got := x.get(tbl, "p", rk)
							if got.Version != old {
								t.Fatalf("failed %v changed the version %d → %d", op, old, got.Version)
							}
							x.sameProps("after failed "+op.String(), got.Entity.Props, base)
						} else {
							x.getMissing(tbl, "p", rk)
						}
						return
					}
					before := time.Now()
					v := x.apply(tbl, "p", m)[0]
					after := time.Now()
					if op == storage.Delete {
						x.getMissing(tbl, "p", rk)
						return
					}
					x.checkVersionNearNow(v, before, after)
					if exists && v <= old {
						t.Fatalf("%v: new version %d not above the old %d", op, v, old)
					}
					got := x.get(tbl, "p", rk)
					if got.Version != v {
						t.Fatalf("%v returned version %d, Get reads %d", op, v, got.Version)
					}
					wantProps := patch
					if exists && (op == storage.Merge || op == storage.InsertOrMerge) {
						wantProps = merged
					}
					x.sameProps(op.String(), got.Entity.Props, wantProps)
				})
			}
		}
	}
	x.getMissing(tbl, "other", "p") // nothing strayed into another partition
	if n := len(x.scanAll(tbl, storage.Key{PartitionKey: "other"}, &storage.Key{PartitionKey: "other\x00"}, 100)); n != 1 {
		t.Fatalf("partition other holds %d rows, want 1", n)
	}
}

func testMerge(t *testing.T, x *env) {
	tbl := x.createTable("Merge")
	x.apply(tbl, "p", mut(storage.Insert, "r",
		str("A", "a"), prop("B", entity.Int32Value(1)), prop("C", entity.DoubleValue(1.5)), prop("D", entity.BinaryValue([]byte{1, 2}))))
	// Type change (Int32 → String), overwrite, addition; others kept.
	x.apply(tbl, "p", mut(storage.Merge, "r", str("B", "b"), prop("D", entity.BinaryValue(nil)), prop("E", entity.BoolValue(true))))
	x.sameProps("after merge", x.get(tbl, "p", "r").Entity.Props, []entity.Property{
		str("A", "a"), str("B", "b"), prop("C", entity.DoubleValue(1.5)), prop("D", entity.BinaryValue(nil)), prop("E", entity.BoolValue(true)),
	})
	// Merging nothing keeps everything and still makes a new version.
	old := x.get(tbl, "p", "r")
	v := x.apply(tbl, "p", mut(storage.Merge, "r"))[0]
	got := x.get(tbl, "p", "r")
	if v <= old.Version || got.Version != v {
		t.Fatalf("empty merge: version %d → %d (Get %d)", old.Version, v, got.Version)
	}
	x.sameProps("after empty merge", got.Entity.Props, old.Entity.Props)
	// InsertOrMerge overlays on an existing entity and inserts a missing one.
	x.apply(tbl, "p", mut(storage.InsertOrMerge, "r", i64("A", 9)))
	x.sameProps("after insert-or-merge", x.get(tbl, "p", "r").Entity.Props, []entity.Property{
		i64("A", 9), str("B", "b"), prop("C", entity.DoubleValue(1.5)), prop("D", entity.BinaryValue(nil)), prop("E", entity.BoolValue(true)),
	})
	x.apply(tbl, "p", mut(storage.InsertOrMerge, "fresh", i64("Z", 1)))
	x.sameProps("insert-or-merge of a missing entity", x.get(tbl, "p", "fresh").Entity.Props, []entity.Property{i64("Z", 1)})
}

func testReplace(t *testing.T, x *env) {
	tbl := x.createTable("Replace")
	x.apply(tbl, "p", mut(storage.Insert, "r", str("A", "a"), str("B", "b")))
	x.apply(tbl, "p", mut(storage.Replace, "r", str("C", "c")))
	x.sameProps("after replace", x.get(tbl, "p", "r").Entity.Props, []entity.Property{str("C", "c")})
	x.apply(tbl, "p", mut(storage.InsertOrReplace, "r", i64("D", 4)))
	x.sameProps("after insert-or-replace", x.get(tbl, "p", "r").Entity.Props, []entity.Property{i64("D", 4)})
	x.apply(tbl, "p", mut(storage.Replace, "r"))
	x.sameProps("after replace with nothing", x.get(tbl, "p", "r").Entity.Props, nil)
	x.apply(tbl, "p", mut(storage.InsertOrReplace, "new", i64("E", 5)))
	x.sameProps("insert-or-replace of a missing entity", x.get(tbl, "p", "new").Entity.Props, []entity.Property{i64("E", 5)})
}

func testVersions(t *testing.T, x *env) {
	tbl := x.createTable("Versions")
	var prev int64
	for i := range 30 {
		op := []storage.Op{storage.InsertOrReplace, storage.Merge, storage.Replace, storage.InsertOrMerge}[i%4]
		before := time.Now()
		v := x.apply(tbl, "p", mut(op, "r", i64("I", int64(i))))[0]
		after := time.Now()
		x.checkVersionNearNow(v, before, after)
		if v <= prev {
			t.Fatalf("write %d (%v): version %d not above the previous %d", i, op, v, prev)
		}
		if got := x.get(tbl, "p", "r").Version; got != v {
			t.Fatalf("write %d returned version %d, Get reads %d", i, v, got)
		}
		prev = v
	}
	// Deleting and inserting again still moves forward.
	if v := x.apply(tbl, "p", mutIf(storage.Delete, "r", prev))[0]; v != 0 {
		t.Fatalf("Delete returned version %d, want 0", v)
	}
	v := x.apply(tbl, "p", mut(storage.Insert, "r"))[0]
	if v <= prev {
		t.Fatalf("re-insert version %d not above the deleted entity's %d", v, prev)
	}
	// Several rows in one Apply: every returned version is the one Get reads.
	before := time.Now()
	vs := x.apply(tbl, "q", mut(storage.Insert, "a"), mut(storage.Insert, "b"), mut(storage.InsertOrReplace, "c"), mut(storage.InsertOrMerge, "d"))
	after := time.Now()
	for i, rk := range []string{"a", "b", "c", "d"} {
		x.checkVersionNearNow(vs[i], before, after)
		if got := x.get(tbl, "q", rk).Version; got != vs[i] {
			t.Fatalf("row %s: Apply returned version %d, Get reads %d", rk, vs[i], got)
		}
	}
}

func testApplyMissingTable(t *testing.T, x *env) {
	for _, op := range allOps {
		_, err := x.e.Apply(x.ctx, x.acct, "NoSuchTable", "p", []storage.Mutation{mut(op, "r")})
		if !errors.Is(err, storage.ErrTableNotFound) {
			t.Fatalf("%v on a missing table = %v, want ErrTableNotFound", op, err)
		}
	}
	if _, err := x.e.Get(x.ctx, x.acct, "NoSuchTable", "p", "r"); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("Get on a missing table = %v, want ErrTableNotFound", err)
	}
	if _, err := x.e.Scan(x.ctx, x.acct, "NoSuchTable", storage.ScanRequest{Limit: 1}); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("Scan on a missing table = %v, want ErrTableNotFound", err)
	}
	x.createTable("Exists")
	x.getMissing("Exists", "p", "r")
}

// testAtomicity puts a failing mutation at every position of a batch of otherwise valid
// ones, for every kind of failure: each must report its index and write nothing.
func testAtomicity(t *testing.T, x *env) {
	tbl := x.createTable("Atomic")
	var vs []int64
	for i := range 5 {
		vs = append(vs, x.apply(tbl, "p", mut(storage.Insert, fmt.Sprintf("r%d", i), i64("N", int64(i))))[0])
	}
	x.apply(tbl, "q", mut(storage.Insert, "r0"))
	valid := []storage.Mutation{
		mut(storage.InsertOrReplace, "r0", str("S", "ior")),
		mut(storage.Merge, "r3", str("S", "merge")),
		mut(storage.Delete, "r4"),
		mut(storage.Insert, "new1", str("S", "insert")),
		mut(storage.InsertOrMerge, "new2", str("S", "iom")),
		mutIf(storage.Replace, "r2", vs[2], str("S", "replace")),
	}
	failures := []struct {
		m    storage.Mutation
		want error
	}{
		{mut(storage.Insert, "r1"), storage.ErrExists},
		{mut(storage.Replace, "zz"), storage.ErrNotFound},
		{mutIf(storage.Merge, "r1", vs[1]-1, str("S", "x")), storage.ErrVersionMismatch},
		{mut(storage.Delete, "zz"), storage.ErrNotFound},
		{mutIf(storage.Delete, "r1", vs[0]), storage.ErrVersionMismatch},
	}
	before := x.snapshot(tbl)
	for _, f := range failures {
		for k := 0; k <= len(valid); k++ {
			muts := append(append(append([]storage.Mutation{}, valid[:k]...), f.m), valid[k:]...)
			x.applyErr(tbl, "p", k, f.want, muts...)
			x.sameRecords(fmt.Sprintf("after %v failing at %d", describe(muts), k), x.snapshot(tbl), before)
		}
	}
	// A mutation of no known kind is refused, and nothing is written either.
	for _, op := range []storage.Op{0, storage.InsertOrMerge + 1, 255} {
		muts := append(append([]storage.Mutation{}, valid...), storage.Mutation{Op: op, RowKey: "r1"})
		if _, err := x.e.Apply(x.ctx, x.acct, tbl, "p", muts); err == nil {
			t.Fatalf("Apply with an unknown op %d succeeded", op)
		}
		x.sameRecords(fmt.Sprintf("after an unknown op %d", op), x.snapshot(tbl), before)
	}
	// Without the failure the batch commits, and every version returned is the stored one.
	got := x.apply(tbl, "p", valid...)
	for i, m := range valid {
		if m.Op == storage.Delete {
			x.getMissing(tbl, "p", m.RowKey)
			continue
		}
		if r := x.get(tbl, "p", m.RowKey); r.Version != got[i] {
			t.Fatalf("%v %s: Apply returned version %d, Get reads %d", m.Op, m.RowKey, got[i], r.Version)
		}
	}
	x.sameProps("r3 merged", x.get(tbl, "p", "r3").Entity.Props, []entity.Property{i64("N", 3), str("S", "merge")})
	x.sameProps("r2 replaced", x.get(tbl, "p", "r2").Entity.Props, []entity.Property{str("S", "replace")})
}

// testInOrder checks that a mutation sees the effects of earlier ones on the same row.
func testInOrder(t *testing.T, x *env) {
	tbl := x.createTable("Order")
	base := x.apply(tbl, "p", mut(storage.Insert, "r0", i64("A", 0)), mut(storage.Insert, "r1", i64("A", 1)), mut(storage.Insert, "r2", i64("A", 2)))

	vs := x.apply(tbl, "p", mut(storage.Insert, "n1", i64("A", 1)), mut(storage.Merge, "n1", i64("B", 2)))
	if vs[1] <= vs[0] {
		t.Fatalf("second write of a row in one Apply got version %d, not above %d", vs[1], vs[0])
	}
	r := x.get(tbl, "p", "n1")
	x.sameProps("insert then merge", r.Entity.Props, []entity.Property{i64("A", 1), i64("B", 2)})
	if r.Version != vs[1] {
		t.Fatalf("insert then merge: stored version %d, want the last one %d", r.Version, vs[1])
	}

	x.apply(tbl, "p", mut(storage.Insert, "n2"), mut(storage.Delete, "n2"))
	x.getMissing(tbl, "p", "n2")

	vs = x.apply(tbl, "p", mut(storage.Delete, "r0"), mut(storage.Insert, "r0", str("X", "x")))
	r = x.get(tbl, "p", "r0")
	x.sameProps("delete then insert", r.Entity.Props, []entity.Property{str("X", "x")})
	if r.Version != vs[1] || vs[1] <= base[0] {
		t.Fatalf("delete then insert: version %d (returned %d), old %d", r.Version, vs[1], base[0])
	}

	x.apply(tbl, "p", mut(storage.InsertOrMerge, "n4", i64("A", 1)), mut(storage.InsertOrMerge, "n4", i64("B", 2)))
	x.sameProps("insert-or-merge twice", x.get(tbl, "p", "n4").Entity.Props, []entity.Property{i64("A", 1), i64("B", 2)})
	x.apply(tbl, "p", mut(storage.InsertOrMerge, "n4", i64("C", 3)), mut(storage.InsertOrReplace, "n4", i64("D", 4)))
	x.sameProps("insert-or-merge then insert-or-replace", x.get(tbl, "p", "n4").Entity.Props, []entity.Property{i64("D", 4)})

	snap := x.snapshot(tbl)
	x.applyErr(tbl, "p", 1, storage.ErrExists, mut(storage.Insert, "n3"), mut(storage.Insert, "n3"))
	x.applyErr(tbl, "p", 1, storage.ErrNotFound, mut(storage.Delete, "r1"), mut(storage.Merge, "r1"))
	x.applyErr(tbl, "p", 1, storage.ErrVersionMismatch, mutIf(storage.Replace, "r2", base[2]), mutIf(storage.Replace, "r2", base[2]))
	x.sameRecords("after in-order failures", x.snapshot(tbl), snap)
}

// testMergeLimits checks that a merge whose result breaks the entity limits fails with the
// validation error and writes nothing, while the largest allowed result succeeds.
func testMergeLimits(t *testing.T, x *env) {
	tbl := x.createTable("Limits")
	var many []entity.Property
	for i := range entity.MaxProperties - 2 {
		many = append(many, prop(fmt.Sprintf("P%03d", i), entity.Int32Value(int32(i))))
	}
	x.apply(tbl, "p", mut(storage.Insert, "many", many...))
	three := []entity.Property{i64("X1", 1), i64("X2", 2), i64("X3", 3)}

	wantCode := func(ae *storage.ApplyError, code azerr.Code) {
		t.Helper()
		var e *azerr.Error
		if !errors.As(ae, &e) || e.Code != code {
			t.Fatalf("merge error = %v, want an *azerr.Error %s", ae, code)
		}
	}
	snap := x.snapshot(tbl)
	wantCode(x.applyErr(tbl, "p", 0, nil, mut(storage.Merge, "many", three...)), azerr.TooManyProperties)
	wantCode(x.applyErr(tbl, "p", 0, nil, mut(storage.InsertOrMerge, "many", three...)), azerr.TooManyProperties)
	wantCode(x.applyErr(tbl, "p", 1, nil, mut(storage.Insert, "other"), mut(storage.Merge, "many", three...)), azerr.TooManyProperties)
	// The limit applies to the result of the mutations before it in the same Apply.
	wantCode(x.applyErr(tbl, "p", 1, nil, mut(storage.Merge, "many", three[:2]...), mut(storage.Merge, "many", three[2:]...)), azerr.TooManyProperties)
	x.sameRecords("after rejected merges", x.snapshot(tbl), snap)

	// Overwriting existing names does not add properties; reaching exactly the limit is fine.
	x.apply(tbl, "p", mut(storage.Merge, "many", many[:10]...))
	x.apply(tbl, "p", mut(storage.Merge, "many", three[:2]...))
	if n := len(x.get(tbl, "p", "many").Entity.Props); n != entity.MaxProperties {
		t.Fatalf("after merging up to the limit: %d properties, want %d", n, entity.MaxProperties)
	}

	// Size: fifteen 64 KiB binaries fit in 1 MiB; a sixteenth does not.
	blob := make([]byte, entity.MaxBinaryBytes)
	for i := range blob {
		blob[i] = byte(i)
	}
	var big []entity.Property
	for i := range 15 {
		big = append(big, prop(fmt.Sprintf("B%02d", i), entity.BinaryValue(blob)))
	}
	x.apply(tbl, "p", mut(storage.Insert, "big", big...))
	snap = x.snapshot(tbl)
	wantCode(x.applyErr(tbl, "p", 0, nil, mut(storage.Merge, "big", prop("B15", entity.BinaryValue(blob)))), azerr.EntityTooLarge)
	x.sameRecords("after a too-large merge", x.snapshot(tbl), snap)
	x.apply(tbl, "p", mut(storage.Merge, "big", prop("B00", entity.BinaryValue(blob[:10]))))
}
