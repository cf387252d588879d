package enginetest

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// setIndexes replaces the table's settings with an elastic table's declaring defs.
func (x *env) setIndexes(table string, defs ...storage.IndexDef) {
	x.t.Helper()
	if err := x.e.SetTableSettings(x.ctx, x.acct, table, storage.TableSettings{Elastic: true, Indexes: defs}); err != nil {
		x.t.Fatalf("SetTableSettings(%s, %v): %v", table, defs, err)
	}
}

// buildAll calls BuildIndexes until no index of the table is building (the engine's
// own builder may run too), and returns the declarations then.
func (x *env) buildAll(table string) []storage.IndexDef {
	x.t.Helper()
	for calls := 0; ; calls++ {
		defs := x.indexes(table).Indexes
		building := false
		for _, d := range defs {
			building = building || d.State == storage.IndexBuilding
		}
		if !building {
			return defs
		}
		if calls > 1000 {
			x.t.Fatalf("the build of %s does not end: %+v", table, defs)
		}
		if _, err := x.e.BuildIndexes(x.ctx); err != nil {
			x.t.Fatalf("BuildIndexes: %v", err)
		}
	}
}

// fillIndexed inserts n rows over 4 partitions with random A and B (some missing) and a
// distinct Email (rk's), and returns the row keys.
func (x *env) fillIndexed(table string, n int) []storage.Key {
	x.t.Helper()
	var keys []storage.Key
	for p := 0; len(keys) < n; p++ {
		pk := fmt.Sprintf("p%d", p%4)
		var muts []storage.Mutation
		for len(muts) < 50 && len(keys) < n {
			rk := fmt.Sprintf("r%05d", len(keys))
			props := []entity.Property{str("Email", pk+rk)}
			if x.rnd.IntN(4) > 0 {
				props = append(props, prop("A", x.indexValue()))
			}
			if x.rnd.IntN(2) > 0 {
				props = append(props, prop("B", x.indexValue()))
			}
			muts = append(muts, mut(storage.Insert, rk, props...))
			keys = append(keys, storage.Key{PartitionKey: pk, RowKey: rk})
		}
		x.apply(table, pk, muts...)
	}
	return keys
}

// testIndexBuild: indexes added to a table with rows start building and are built
// while writers change the table — inserts, replaces, merges and deletes, over rows the
// build has passed and rows it has not — and once ready every index (single, compound,
// unique) holds exactly the entries a scan calls for.
func testIndexBuild(t *testing.T, x *env) {
	t.Parallel()
	tbl := x.createWith("Built", storage.TableSettings{Elastic: true})
	keys := x.fillIndexed(tbl, 700)
	x.setIndexes(tbl,
		storage.IndexDef{Name: "ByA", Properties: []string{"A"}},
		storage.IndexDef{Name: "ByBA", Properties: []string{"B", "A"}},
		storage.IndexDef{Name: "ByEmail", Properties: []string{"Email"}, Unique: true})
	for _, d := range x.indexes(tbl).Indexes {
		if d.State != storage.IndexBuilding && d.State != storage.IndexReady {
			t.Fatalf("index %s added to a table with rows is %q", d.Name, d.State)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var werr error
	var mu sync.Mutex
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 46))
			ops := []storage.Op{storage.Insert, storage.Replace, storage.Merge, storage.InsertOrReplace, storage.InsertOrMerge, storage.Delete}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := keys[r.IntN(len(keys))]
				if i%4 == 0 {
					k.RowKey = fmt.Sprintf("w%d-%05d", w, i) // a new row
				}
				m := storage.Mutation{Op: ops[r.IntN(len(ops))], RowKey: k.RowKey}
				if m.Op != storage.Delete {
					m.Props = []entity.Property{i32("A", int32(r.IntN(20)))}
					if r.IntN(2) == 0 {
						m.Props = append(m.Props, str("Email", fmt.Sprintf("w%d-%d", w, i)))
					}
					if r.IntN(2) == 0 {
						m.Props = append(m.Props, i64("B", int64(r.IntN(3))))
					}
				}
				_, err := x.e.Apply(x.ctx, x.acct, tbl, k.PartitionKey, []storage.Mutation{m})
				if err != nil && !isApplyError(err) {
					mu.Lock()
					werr = err
					mu.Unlock()
					return
				}
			}
		}()
	}
	defs := x.buildAll(tbl)
	close(stop)
	wg.Wait()
	if werr != nil {
		t.Fatalf("a writer during the build: %v", werr)
	}
	for _, d := range defs {
		if d.State != storage.IndexReady || d.Progress <= 0 {
			t.Fatalf("after the build index %s is %q with progress %d, want ready and rows passed", d.Name, d.State, d.Progress)
		}
	}
	x.wantUniqueHeld("after the build", tbl)
	x.wantIndexMatches("after the build", tbl, true)
	// Ready indexes are maintained as any.
	x.randomIndexWrites(tbl, 100, 24, func() []entity.Property { return nil })
	x.wantIndexMatches("after writes on the built indexes", tbl, true)
}

// testIndexBuildUnique: a unique index added to a table where two live entities hold one
// value fails, naming both, and does not become ready; dropped, the data fixed and
// added again, it builds.
func testIndexBuildUnique(t *testing.T, x *env) {
	t.Parallel()
	tbl := x.createWith("BuiltUnique", storage.TableSettings{Elastic: true})
	x.fillIndexed(tbl, 400)
	x.apply(tbl, "p2", mut(storage.Merge, "r00310", str("Email", "p2r00123")))
	byEmail := storage.IndexDef{Name: "ByEmail", Properties: []string{"Email"}, Unique: true}
	byA := storage.IndexDef{Name: "ByA", Properties: []string{"A"}}
	x.setIndexes(tbl, byEmail, byA)
	defs := x.buildAll(tbl)
	if defs[0].State != storage.IndexFailed {
		t.Fatalf("a unique index over a duplicate value is %q, want failed", defs[0].State)
	}
	for _, k := range []string{"r00310", "r00123"} {
		if !strings.Contains(defs[0].Failure, k) {
			t.Fatalf("the failure %q does not name %s", defs[0].Failure, k)
		}
	}
	if defs[1].State != storage.IndexReady {
		t.Fatalf("index ByA beside the failed one is %q", defs[1].State)
	}
	x.setIndexes(tbl, byA)
	x.apply(tbl, "p2", mut(storage.Merge, "r00310", str("Email", "fixed")))
	x.setIndexes(tbl, byA, byEmail)
	defs = x.buildAll(tbl)
	if defs[1].State != storage.IndexReady || defs[1].ID <= defs[0].ID {
		t.Fatalf("added again after the fix: %+v, want ready under a new id", defs[1])
	}
	x.wantIndexMatches("after the second build", tbl, true)
	x.applyViolation(tbl, "p9", 0, "ByEmail", "p2", "r00310", mut(storage.Insert, "x", str("Email", "fixed")))
}

// testIndexDropped: an index dropped stops constraining and is not maintained; added
// again under the same name it starts clean — a new id, built from the rows as they are
// then, with nothing of the old one (values held then, entries of rows changed or
// deleted since) showing.
func testIndexDropped(t *testing.T, x *env) {
	t.Parallel()
	tbl := x.uniqueTable("Dropped")
	x.apply(tbl, "p", mut(storage.Insert, "a", str("Email", "v"), i32("A", 1), i32("B", 1)),
		mut(storage.Insert, "b", str("Email", "w"), i32("A", 2)),
		mut(storage.Insert, "c", i32("A", 3)))
	old := x.indexes(tbl).Indexes
	x.setIndexes(tbl)
	// Unconstrained and unmaintained: a second holder of v, then the first one gone;
	// rows changed and deleted.
	x.apply(tbl, "q", mut(storage.Insert, "a", str("Email", "v"), i32("A", 1), i32("B", 1)))
	x.apply(tbl, "p", mut(storage.Delete, "a"), mut(storage.Merge, "b", i32("A", 5)), mut(storage.Delete, "c"))
	x.apply(tbl, "p", mut(storage.Insert, "d", str("Email", "w2"), i32("A", 2)))
	x.setIndexes(tbl, old[0], old[1], old[2])
	defs := x.buildAll(tbl)
	for i, d := range defs {
		if d.ID <= old[len(old)-1].ID || d.State != storage.IndexReady {
			t.Fatalf("index %d added again: %+v, want ready under an id above %d", i, d, old[len(old)-1].ID)
		}
	}
	x.wantIndexMatches("added again", tbl, true)
	x.wantUniqueHeld("added again", tbl)
	x.applyViolation(tbl, "r", 0, "ByEmail", "q", "a", mut(storage.Insert, "x", str("Email", "v")))
	x.apply(tbl, "r", mut(storage.Insert, "y", str("Email", "x"), i32("A", 1), i32("B", 2)))
	x.applyViolation(tbl, "r", 0, "ByAB", "q", "a", mut(storage.Insert, "z", i32("A", 1), i32("B", 1)))
	x.reopenIfAble()
	x.wantIndexMatches("after a restart", tbl, true)
}
