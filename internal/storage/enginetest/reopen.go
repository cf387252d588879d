package enginetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/storage"
)

// testReopen checks that tables, entities and versions survive a restart, and that
// versions written after it still exceed those before.
func testReopen(t *testing.T, x *env) {
	if x.h.Reopen == nil {
		t.Skip("harness has no Reopen")
	}
	x.createTable("MixedCase")
	x.createTable("other")
	x.fillGrid("MixedCase", 3, 40)
	x.apply("MixedCase", "types", mut(storage.Insert, "all", allTypes()...))
	x.apply("other", "p", mut(storage.Insert, "r", str("S", "x")))
	before := x.snapshot("MixedCase")
	otherBefore := x.snapshot("other")
	lists, _, err := x.e.ListTables(x.ctx, x.acct, "", 10)
	if err != nil {
		t.Fatal(err)
	}

	x.reopen()

	x.sameRecords("MixedCase after reopen", x.snapshot("MixedCase"), before)
	x.sameRecords("other after reopen", x.snapshot("other"), otherBefore)
	listsAfter, _, err := x.e.ListTables(x.ctx, x.acct, "", 10)
	if err != nil || !slices.EqualFunc(listsAfter, lists, func(a, b storage.TableInfo) bool { return a.Name == b.Name && a.Settings.Equal(b.Settings) }) {
		t.Fatalf("ListTables after reopen = %v, %v; want %v", listsAfter, err, lists)
	}
	if info, err := x.e.GetTable(x.ctx, x.acct, "mixedcase"); err != nil || info.Name != "MixedCase" {
		t.Fatalf("GetTable after reopen = %+v, %v", info, err)
	}
	if err := x.e.CreateTable(x.ctx, x.acct, "MIXEDCASE", storage.TableSettings{}); !errors.Is(err, storage.ErrTableExists) {
		t.Fatalf("CreateTable of an existing table after reopen = %v, want ErrTableExists", err)
	}

	// Writes after the restart: versions above each entity's old one, near the clock.
	var maxBefore int64
	for _, r := range before {
		maxBefore = max(maxBefore, r.Version)
	}
	for i := range min(len(before), 20) {
		r := before[i*len(before)/20]
		start := time.Now()
		v := x.apply("MixedCase", r.Entity.PartitionKey, mutIf(storage.Merge, r.Entity.RowKey, r.Version, i64("After", 1)))[0]
		x.checkVersionNearNow(v, start, time.Now())
		if v <= r.Version {
			t.Fatalf("write after reopen: version %d not above the old %d", v, r.Version)
		}
	}
	v := x.apply("MixedCase", "new", mut(storage.Insert, "r"))[0]
	if v <= maxBefore {
		t.Fatalf("a new entity after reopen got version %d, not above the largest before, %d", v, maxBefore)
	}
	// And they survive a second restart too.
	after := x.snapshot("MixedCase")
	x.reopen()
	x.sameRecords("MixedCase after a second reopen", x.snapshot("MixedCase"), after)
}

// testReopenDeleted checks that a deleted table stays deleted across a restart (even if
// its purge had not run) and that table identities are not reused: a table created after
// the restart shows neither a deleted table's rows nor a live one's.
func testReopenDeleted(t *testing.T, x *env) {
	if x.h.Reopen == nil {
		t.Skip("harness has no Reopen")
	}
	// Gone is created last, so an engine that forgot its id counter would likely hand
	// Gone's id out again.
	for _, name := range []string{"Live", "Gone"} {
		x.createTable(name)
		var muts []storage.Mutation
		for i := range 20 {
			muts = append(muts, mut(storage.Insert, fmt.Sprintf("r%02d", i), str("T", name)))
		}
		x.apply(name, "p", muts...)
	}
	if err := x.e.DeleteTable(x.ctx, x.acct, "Gone"); err != nil {
		t.Fatal(err)
	}
	liveBefore := x.snapshot("Live")

	x.reopen()

	if _, err := x.e.GetTable(x.ctx, x.acct, "Gone"); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("GetTable of a deleted table after reopen = %v, want ErrTableNotFound", err)
	}
	x.sameRecords("live table after reopen", x.snapshot("Live"), liveBefore)
	for _, name := range []string{"Fresh1", "Gone", "Fresh2"} {
		x.createTable(name)
		if recs := x.snapshot(name); len(recs) != 0 {
			t.Fatalf("table %s created after reopen shows %d rows of another table", name, len(recs))
		}
		x.apply(name, "p", mut(storage.Insert, "r00", str("T", "new "+name)))
	}
	x.sameRecords("live table after creating others", x.snapshot("Live"), liveBefore)

	x.reopen()
	x.sameRecords("live table after a second reopen", x.snapshot("Live"), liveBefore)
	for _, name := range []string{"Fresh1", "Gone", "Fresh2"} {
		recs := x.snapshot(name)
		if len(recs) != 1 {
			t.Fatalf("table %s after a second reopen holds %d rows, want 1", name, len(recs))
		}
		if v, _ := recs[0].Entity.Get("T"); v.Str != "new "+name {
			t.Fatalf("table %s holds %v", name, v)
		}
	}
}
