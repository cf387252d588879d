package enginetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// ApplyEach: each mutation on its own (the engine write of bulk requests).

// applyEach runs an ApplyEach that must not fail as a whole, checking the shape of its
// answer: one version and one error slot per mutation, a version exactly for the
// committed mutations other than deletes, and a position exactly when one committed.
func (x *env) applyEach(table, pk string, muts ...storage.Mutation) storage.Each {
	x.t.Helper()
	res, err := x.e.ApplyEach(x.ctx, x.acct, table, pk, muts)
	if err != nil {
		x.t.Fatalf("ApplyEach(%q, %q, %v): %v", table, pk, describe(muts), err)
	}
	if len(res.Versions) != len(muts) || len(res.Errs) != len(muts) {
		x.t.Fatalf("ApplyEach returned %d versions and %d errors for %d mutations", len(res.Versions), len(res.Errs), len(muts))
	}
	committed := false
	for i, m := range muts {
		ok := res.Errs[i] == nil
		committed = committed || ok
		if want := ok && m.Op != storage.Delete; want != (res.Versions[i] != 0) {
			x.t.Fatalf("ApplyEach: mutation %d (%v %q, err %v) returned version %d", i, m.Op, m.RowKey, res.Errs[i], res.Versions[i])
		}
	}
	if committed != (res.Position != 0) {
		x.t.Fatalf("ApplyEach: position %d with committed=%v", res.Position, committed)
	}
	return res
}

// testEachOutcomes runs every op against a missing and an existing entity, with no
// IfMatch, the right one and a wrong one — every case in one ApplyEach — and checks that
// each outcome and stored state is exactly what an Apply of that mutation alone gives
// (testPreconditions), whatever the others did.
func testEachOutcomes(t *testing.T, x *env) {
	tbl := x.createTable("Each")
	base := []entity.Property{str("A", "base"), i64("B", 1)}
	patch := []entity.Property{str("B", "new"), prop("C", entity.Int32Value(7))}
	merged := []entity.Property{str("A", "base"), str("B", "new"), prop("C", entity.Int32Value(7))}
	otherV := x.apply(tbl, "other", mut(storage.Insert, "x"))[0]
	type ifm int
	const (
		none ifm = iota
		right
		wrong
	)
	type want struct {
		err    error
		exists bool  // stored before
		old    int64 // its version then
	}
	var (
		muts  []storage.Mutation
		wants []want
	)
	for _, op := range allOps {
		for _, exists := range []bool{false, true} {
			for _, im := range []ifm{none, right, wrong} {
				conditional := op == storage.Replace || op == storage.Merge || op == storage.Delete
				if im != none && !conditional {
					continue
				}
				rk := fmt.Sprintf("%v-exists=%v-ifmatch=%d", op, exists, im)
				var old int64
				if exists {
					old = x.apply(tbl, "p", mut(storage.Insert, rk, base...))[0]
				}
				m := mut(op, rk, patch...)
				switch {
				case im == right && exists:
					m.IfMatch = old
				case im == right:
					m.IfMatch = otherV
				case im == wrong && exists:
					m.IfMatch = old - 1
				case im == wrong:
					m.IfMatch = otherV - 1
				}
				w := want{exists: exists, old: old}
				switch {
				case op == storage.Insert && exists:
					w.err = storage.ErrExists
				case conditional && !exists:
					w.err = storage.ErrNotFound
				case conditional && im == wrong:
					w.err = storage.ErrVersionMismatch
				}
				muts, wants = append(muts, m), append(wants, w)
			}
		}
	}
	// Interleave successes and failures, not in RowKey order.
	order := permute(len(muts), x.rnd.Uint64())
	shuffled := make([]storage.Mutation, len(muts))
	sw := make([]want, len(muts))
	for i, j := range order {
		shuffled[i], sw[i] = muts[j], wants[j]
	}
	muts, wants = shuffled, sw

	before := time.Now()
	res := x.applyEach(tbl, "p", muts...)
	after := time.Now()
	for i, m := range muts {
		w := wants[i]
		if w.err != nil {
			if !errors.Is(res.Errs[i], w.err) {
				t.Fatalf("%v %q: %v, want %v", m.Op, m.RowKey, res.Errs[i], w.err)
			}
			if !w.exists {
				x.getMissing(tbl, "p", m.RowKey)
				continue
			}
			got := x.get(tbl, "p", m.RowKey)
			if got.Version != w.old {
				t.Fatalf("failed %v %q changed the version %d → %d", m.Op, m.RowKey, w.old, got.Version)
			}
			x.sameProps("after failed "+m.RowKey, got.Entity.Props, base)
			continue
		}
		if res.Errs[i] != nil {
			t.Fatalf("%v %q: %v, want success", m.Op, m.RowKey, res.Errs[i])
		}
		if m.Op == storage.Delete {
			x.getMissing(tbl, "p", m.RowKey)
			continue
		}
		got := x.get(tbl, "p", m.RowKey)
		if got.Version != res.Versions[i] || got.Version <= w.old {
			t.Fatalf("%v %q: stored version %d, reported %d, old %d", m.Op, m.RowKey, got.Version, res.Versions[i], w.old)
		}
		x.checkVersionNearNow(got.Version, before, after)
		wantProps := patch
		if w.exists && (m.Op == storage.Merge || m.Op == storage.InsertOrMerge) {
			wantProps = merged
		}
		x.sameProps(m.RowKey, got.Entity.Props, wantProps)
	}
	// A later write still gets a greater version and a later position.
	p := x.applyAt(res.Position, tbl, "p", mut(storage.InsertOrReplace, "last"))
	x.readAt(p, tbl, "p", "last", x.get(tbl, "p", "last").Version)
}

// testEachFailuresAlone: failures of every kind, at every place among valid mutations,
// fail alone; an unknown op fails alone too; a call where everything fails commits
// nothing and reports no position.
func testEachFailuresAlone(t *testing.T, x *env) {
	tbl := x.createTable("EachAlone")
	var vs []int64
	for i := range 5 {
		vs = append(vs, x.apply(tbl, "p", mut(storage.Insert, fmt.Sprintf("r%d", i), i64("N", int64(i))))[0])
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
		{mut(storage.Merge, "zz", str("S", "x")), storage.ErrNotFound},
		{storage.Mutation{Op: storage.InsertOrMerge + 1, RowKey: "r1"}, nil},
	}
	for k, f := range failures {
		valid := []storage.Mutation{
			mut(storage.InsertOrReplace, fmt.Sprintf("a%d", k), str("S", "ior")),
			mut(storage.Merge, "r3", str("S", fmt.Sprint("merge", k))),
			mut(storage.Insert, fmt.Sprintf("b%d", k), str("S", "insert")),
			mut(storage.InsertOrMerge, fmt.Sprintf("c%d", k), str("S", "iom")),
		}
		pos := k % (len(valid) + 1)
		muts := append(append(append([]storage.Mutation{}, valid[:pos]...), f.m), valid[pos:]...)
		r1 := x.get(tbl, "p", "r1")
		res := x.applyEach(tbl, "p", muts...)
		for i, m := range muts {
			switch {
			case i == pos && res.Errs[i] == nil:
				t.Fatalf("%v: the failing mutation succeeded", describe(muts))
			case i == pos && f.want != nil && !errors.Is(res.Errs[i], f.want):
				t.Fatalf("%v: %v, want %v", describe(muts), res.Errs[i], f.want)
			case i != pos && res.Errs[i] != nil:
				t.Fatalf("%v: mutation %d failed with %v beside the failing one", describe(muts), i, res.Errs[i])
			case i != pos:
				if got := x.get(tbl, "p", m.RowKey); got.Version != res.Versions[i] {
					t.Fatalf("%v %q: stored version %d, reported %d", m.Op, m.RowKey, got.Version, res.Versions[i])
				}
			}
		}
		x.sameRecords("r1 after a failure", []storage.Record{x.get(tbl, "p", "r1")}, []storage.Record{r1})
		x.getMissing(tbl, "p", "zz")
	}
	x.sameProps("r3 merged", x.get(tbl, "p", "r3").Entity.Props, []entity.Property{i64("N", 3), str("S", fmt.Sprint("merge", len(failures)-1))})

	// Everything fails: nothing is written and there is no position.
	snap := x.snapshot(tbl)
	res := x.applyEach(tbl, "p", mut(storage.Insert, "r0"), mut(storage.Replace, "zz"), mutIf(storage.Delete, "r2", vs[2]-1),
		mut(storage.Merge, "zy", str("S", "x")))
	for i, err := range res.Errs {
		if err == nil {
			t.Fatalf("mutation %d succeeded", i)
		}
	}
	x.sameRecords("after an ApplyEach that failed throughout", x.snapshot(tbl), snap)
}

// testEachLimits: a merge result over the entity limits and a refused TTL property fail
// their mutation alone, with the validation error an Apply reports; an expired row is
// absent for the preconditions.
func testEachLimits(t *testing.T, x *env) {
	tbl := x.createWith("EachLimits", elastic(storage.TTLNever))
	var many []entity.Property
	for i := range entity.MaxProperties - 2 {
		many = append(many, prop(fmt.Sprintf("P%03d", i), entity.Int32Value(int32(i))))
	}
	x.apply(tbl, "p", mut(storage.Insert, "many", many...), mut(storage.Insert, "existing", str("A", "a")),
		mut(storage.Insert, "short", ttl(1)))
	three := []entity.Property{i64("X1", 1), i64("X2", 2), i64("X3", 3)}
	code := func(err error) azerr.Code {
		var e *azerr.Error
		if errors.As(err, &e) {
			return e.Code
		}
		return ""
	}
	snapMany := x.get(tbl, "p", "many")
	res := x.applyEach(tbl, "p",
		mut(storage.Insert, "a", str("S", "a")),
		mut(storage.Merge, "many", three...),
		mut(storage.Insert, "badttl", ttl(0)),
		mut(storage.Replace, "existing", prop(storage.DefaultTTLProperty, entity.StringValue("60"))),
		mut(storage.InsertOrReplace, "b", ttl(60)),
		mut(storage.InsertOrMerge, "c", ttl(-2)))
	wantCodes := []azerr.Code{"", azerr.TooManyProperties, "x", "x", "", "x"}
	for i, w := range wantCodes {
		got := code(res.Errs[i])
		switch {
		case w == "" && res.Errs[i] != nil:
			t.Fatalf("mutation %d: %v, want success", i, res.Errs[i])
		case w == "x" && got == "":
			t.Fatalf("mutation %d: %v, want the *azerr.Error of a refused TTL", i, res.Errs[i])
		case w != "" && w != "x" && got != w:
			t.Fatalf("mutation %d: %v, want %s", i, res.Errs[i], w)
		}
	}
	x.sameRecords("many after a refused merge", []storage.Record{x.get(tbl, "p", "many")}, []storage.Record{snapMany})
	x.getMissing(tbl, "p", "badttl")
	x.getMissing(tbl, "p", "c")
	x.sameProps("existing after a refused replace", x.get(tbl, "p", "existing").Entity.Props, []entity.Property{str("A", "a")})

	// Expired: absent for the preconditions.
	x.waitPast(expiryAt(x.get(tbl, "p", "short").Version, 1))
	res = x.applyEach(tbl, "p", mut(storage.Replace, "short"), mut(storage.Merge, "b", str("M", "m")))
	if !errors.Is(res.Errs[0], storage.ErrNotFound) || res.Errs[1] != nil {
		t.Fatalf("replace of an expired row, merge of a live one: %v", res.Errs)
	}
	res = x.applyEach(tbl, "p", mut(storage.Insert, "short", ttl(-1)))
	if res.Errs[0] != nil {
		t.Fatalf("insert over an expired row: %v", res.Errs[0])
	}
}

// testEachMisuse: a missing table fails the call, as do two mutations of one row (and
// then nothing is written); no mutations do nothing.
func testEachMisuse(t *testing.T, x *env) {
	for _, op := range allOps {
		_, err := x.e.ApplyEach(x.ctx, x.acct, "NoSuchTable", "p", []storage.Mutation{mut(op, "r")})
		if !errors.Is(err, storage.ErrTableNotFound) {
			t.Fatalf("%v on a missing table = %v, want ErrTableNotFound", op, err)
		}
	}
	tbl := x.createTable("EachMisuse")
	if _, err := x.e.ApplyEach(x.ctx, x.acct, tbl, "p", []storage.Mutation{mut(storage.Insert, "a"), mut(storage.Insert, "b"), mut(storage.Merge, "a")}); err == nil {
		t.Fatal("ApplyEach naming a row twice succeeded")
	}
	if n := len(x.snapshot(tbl)); n != 0 {
		t.Fatalf("ApplyEach naming a row twice wrote %d rows", n)
	}
	res := x.applyEach(tbl, "p")
	if res.Position != 0 {
		t.Fatalf("an empty ApplyEach returned position %d", res.Position)
	}
}

// testEachConcurrent runs ApplyEach calls racing for the same rows, with Applies on them
// too: conditional writes never both succeed (each row's inserts have one winner, and a
// counter incremented by replace or merge with IfMatch loses no update), and nothing
// deadlocks.
func testEachConcurrent(t *testing.T, x *env) {
	tbl := x.createTable("EachRace")
	const rows, writers, rounds = 40, 8, 15
	rk := func(i int) string { return fmt.Sprintf("r%02d", i) }
	var mu sync.Mutex
	winners := map[string]int64{}
	wins := map[string]int64{}
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			// Everyone inserts every row; one insert of each wins.
			var muts []storage.Mutation
			for _, i := range permute(rows, uint64(w)+1) {
				muts = append(muts, mut(storage.Insert, rk(i), i64("N", 0)))
			}
			res, err := x.e.ApplyEach(x.ctx, x.acct, tbl, "p", muts)
			if err != nil {
				errc <- fmt.Errorf("insert: %w", err)
				return
			}
			mu.Lock()
			for i, m := range muts {
				switch {
				case res.Errs[i] == nil:
					if _, dup := winners[m.RowKey]; dup {
						mu.Unlock()
						errc <- fmt.Errorf("row %s inserted twice", m.RowKey)
						return
					}
					winners[m.RowKey] = res.Versions[i]
				case !errors.Is(res.Errs[i], storage.ErrExists):
					mu.Unlock()
					errc <- fmt.Errorf("insert %s: %w", m.RowKey, res.Errs[i])
					return
				}
			}
			mu.Unlock()
			// Then increment every row's counter, conditionally on the version read.
			for range rounds {
				muts = muts[:0]
				for _, i := range permute(rows, x.rnd.Uint64()) {
					r, err := x.e.Get(x.ctx, x.acct, tbl, "p", rk(i))
					if err != nil {
						continue // not inserted yet
					}
					n, _ := r.Entity.Get("N")
					op := storage.Replace
					if i%2 == 1 {
						op = storage.Merge
					}
					muts = append(muts, mutIf(op, rk(i), r.Version, i64("N", n.Int+1)))
				}
				if w == 0 && len(muts) > 3 {
					// An atomic Apply of some of the rows, beside the others' ApplyEach.
					_, err := x.e.Apply(x.ctx, x.acct, tbl, "p", muts[:3])
					var ae *storage.ApplyError
					switch {
					case err == nil:
						mu.Lock()
						for _, m := range muts[:3] {
							wins[m.RowKey]++
						}
						mu.Unlock()
					case !errors.As(err, &ae) || !errors.Is(err, storage.ErrVersionMismatch):
						errc <- fmt.Errorf("apply: %w", err)
						return
					}
					muts = muts[3:]
				}
				res, err := x.e.ApplyEach(x.ctx, x.acct, tbl, "p", muts)
				if err != nil {
					errc <- fmt.Errorf("increment: %w", err)
					return
				}
				mu.Lock()
				for i, m := range muts {
					switch {
					case res.Errs[i] == nil:
						wins[m.RowKey]++
					case !errors.Is(res.Errs[i], storage.ErrVersionMismatch):
						mu.Unlock()
						errc <- fmt.Errorf("increment %s: %w", m.RowKey, res.Errs[i])
						return
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if len(winners) != rows {
		t.Fatalf("%d rows have an insert that won, want %d", len(winners), rows)
	}
	total := int64(0)
	for i := range rows {
		r := x.get(tbl, "p", rk(i))
		n, _ := r.Entity.Get("N")
		if n.Int != wins[rk(i)] {
			t.Fatalf("%s: counter %d after %d winning increments (a lost update or a double win)", rk(i), n.Int, wins[rk(i)])
		}
		if wins[rk(i)] == 0 && r.Version != winners[rk(i)] {
			t.Fatalf("%s: version %d, the winning insert reported %d", rk(i), r.Version, winners[rk(i)])
		}
		total += n.Int
	}
	t.Logf("%d winning increments of %d rows", total, rows)
	if total == 0 {
		t.Fatal("no increment won")
	}
}
