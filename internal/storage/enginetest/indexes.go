package enginetest

import (
	"testing"

	"github.com/ceruleandb/cerulean/internal/storage"
)

// indexes returns a table's index declarations as the engine holds them.
func (x *env) indexes(table string) storage.TableSettings {
	x.t.Helper()
	info, err := x.e.GetTable(x.ctx, x.acct, table)
	if err != nil {
		x.t.Fatalf("GetTable(%q): %v", table, err)
	}
	return info.Settings
}

func (x *env) wantIndexes(what, table string, ids []uint32, states []storage.IndexState, mark uint32) {
	x.t.Helper()
	s := x.indexes(table)
	if len(s.Indexes) != len(ids) || s.IndexIDs != mark {
		x.t.Fatalf("%s: %+v, want %d indexes and mark %d", what, s, len(ids), mark)
	}
	for i, d := range s.Indexes {
		// A building index on a table the builder has passed over (these are empty)
		// may be ready already.
		built := states[i] == storage.IndexBuilding && d.State == storage.IndexReady
		if d.ID != ids[i] || d.State != states[i] && !built {
			x.t.Fatalf("%s: index %d (%s) has id %d, state %q; want %d, %q", what, i, d.Name, d.ID, d.State, ids[i], states[i])
		}
	}
}

// testIndexDeclarations: the engine assigns index ids and states with the settings —
// ready at once on a new table, building when added to an existing one — keeps them for
// indexes declared again unchanged, never hands an id out twice (dropped, redefined or
// lost to a later settings change), and keeps them across a restart.
func testIndexDeclarations(t *testing.T, x *env) {
	t.Parallel()
	a := storage.IndexDef{Name: "ByA", Properties: []string{"A"}}
	b := storage.IndexDef{Name: "ByBC", Properties: []string{"B", "C"}, Unique: true}
	c := storage.IndexDef{Name: "ByC", Properties: []string{"C"}}
	tbl := x.createWith("Indexed", storage.TableSettings{Elastic: true, Indexes: []storage.IndexDef{a, b}})
	ready, building := storage.IndexReady, storage.IndexBuilding
	x.wantIndexes("created", tbl, []uint32{1, 2}, []storage.IndexState{ready, ready}, 2)

	set := func(defs ...storage.IndexDef) {
		t.Helper()
		if err := x.e.SetTableSettings(x.ctx, x.acct, tbl, storage.TableSettings{Elastic: true, Indexes: defs}); err != nil {
			t.Fatal(err)
		}
	}
	// Ids and states a caller gives are not taken.
	sneaky := c
	sneaky.ID, sneaky.State = 1, ready
	set(b, sneaky)
	x.wantIndexes("one dropped, one added", tbl, []uint32{2, 3}, []storage.IndexState{ready, building}, 3)
	set(b, c, a)
	x.wantIndexes("a dropped one declared again", tbl, []uint32{2, 3, 4}, []storage.IndexState{ready, building, building}, 4)
	b2 := b
	b2.Unique = false
	set(b2)
	x.wantIndexes("one redefined", tbl, []uint32{5}, []storage.IndexState{building}, 5)
	set()
	x.wantIndexes("all dropped", tbl, nil, nil, 5)
	set(a)
	x.wantIndexes("after all were dropped", tbl, []uint32{6}, []storage.IndexState{building}, 6)
	x.reopenIfAble()
	x.wantIndexes("after a restart", tbl, []uint32{6}, []storage.IndexState{building}, 6)
	if s := x.indexes(tbl); !s.Indexes[0].SameDefinition(a) {
		t.Fatalf("after a restart the index is %+v, want %+v", s.Indexes[0], a)
	}
}
