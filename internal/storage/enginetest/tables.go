package enginetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/storage"
)

func testTableCreateGet(t *testing.T, x *env) {
	x.createTable("MyTable")
	for _, name := range []string{"MyTable", "mytable", "MYTABLE", "myTABLE"} {
		info, err := x.e.GetTable(x.ctx, x.acct, name)
		if err != nil {
			t.Fatalf("GetTable(%q): %v", name, err)
		}
		if info.Name != "MyTable" {
			t.Fatalf("GetTable(%q).Name = %q, want the created case %q", name, info.Name, "MyTable")
		}
	}
	for _, name := range []string{"MyTabl", "MyTable2", "other"} {
		if _, err := x.e.GetTable(x.ctx, x.acct, name); !errors.Is(err, storage.ErrTableNotFound) {
			t.Fatalf("GetTable(%q) = %v, want ErrTableNotFound", name, err)
		}
	}
	// A table is usable at once, under any case of its name.
	v := x.apply("mytable", "p", mut(storage.Insert, "r", str("A", "x")))
	if got := x.get("MYTABLE", "p", "r"); got.Version != v[0] {
		t.Fatalf("Get through another case: version %d, want %d", got.Version, v[0])
	}
}

func testTableCreateExists(t *testing.T, x *env) {
	x.createTable("Dup")
	for _, name := range []string{"Dup", "dup", "DUP"} {
		if err := x.e.CreateTable(x.ctx, x.acct, name, storage.TableSettings{}); !errors.Is(err, storage.ErrTableExists) {
			t.Fatalf("CreateTable(%q) after Dup = %v, want ErrTableExists", name, err)
		}
	}
	info, err := x.e.GetTable(x.ctx, x.acct, "dUP")
	if err != nil || info.Name != "Dup" {
		t.Fatalf("GetTable after failed creates = %+v, %v; want the first name Dup", info, err)
	}
	list, _, err := x.e.ListTables(x.ctx, x.acct, "", 100)
	if err != nil || len(list) != 1 || list[0].Name != "Dup" {
		t.Fatalf("ListTables = %v, %v; want exactly [Dup]", list, err)
	}
}

func testTableList(t *testing.T, x *env) {
	if list, next, err := x.e.ListTables(x.ctx, x.acct, "", 10); err != nil || len(list) != 0 || next != "" {
		t.Fatalf("ListTables on an empty account = %v, %q, %v", list, next, err)
	}
	var names []string
	for i := range 23 {
		// Mixed case, so case-sensitive ordering would differ from TableKey ordering.
		name := fmt.Sprintf("%sTable%02d", []string{"a", "B", "c", "D"}[i%4], i)
		names = append(names, name)
	}
	for _, i := range x.rnd.Perm(len(names)) {
		x.createTable(names[i])
	}
	want := slices.Clone(names)
	slices.SortFunc(want, func(a, b string) int {
		switch ka, kb := storage.TableKey(a), storage.TableKey(b); {
		case ka < kb:
			return -1
		case ka > kb:
			return 1
		}
		return 0
	})

	// Whole list in one page.
	list, next, err := x.e.ListTables(x.ctx, x.acct, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if got := infoNames(list); !slices.Equal(got, want) || next != "" {
		t.Fatalf("ListTables = %v, next %q\nwant %v, next \"\"", got, next, want)
	}

	// Pages of random sizes, resumed with next.
	for round := range 5 {
		var got []string
		from := ""
		for pages := 0; ; pages++ {
			if pages > len(want)+2 {
				t.Fatalf("ListTables paging does not end: %v", got)
			}
			limit := 1 + x.rnd.IntN(6)
			list, next, err := x.e.ListTables(x.ctx, x.acct, from, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(list) > limit {
				t.Fatalf("ListTables(limit %d) returned %d tables", limit, len(list))
			}
			if next != "" && len(list) < limit {
				t.Fatalf("ListTables(limit %d) returned %d tables and a resume name %q", limit, len(list), next)
			}
			got = append(got, infoNames(list)...)
			if next == "" {
				break
			}
			from = next
		}
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: paged ListTables = %v\nwant %v", round, got, want)
		}
	}

	// from is matched case-insensitively and need not name a table.
	for _, from := range []string{"btable", "BTABLE05", "c", "CTable10", "zzz", "a"} {
		list, _, err := x.e.ListTables(x.ctx, x.acct, from, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var exp []string
		for _, n := range want {
			if storage.TableKey(n) >= storage.TableKey(from) {
				exp = append(exp, n)
			}
		}
		if got := infoNames(list); !slices.Equal(got, exp) {
			t.Fatalf("ListTables(from %q) = %v, want %v", from, got, exp)
		}
	}
}

func infoNames(list []storage.TableInfo) []string {
	var out []string
	for _, ti := range list {
		out = append(out, ti.Name)
	}
	return out
}

func testTableDelete(t *testing.T, x *env) {
	x.createTable("Keep")
	x.createTable("Gone")
	x.apply("Keep", "p", mut(storage.Insert, "r", str("A", "keep")))
	x.apply("Gone", "p", mut(storage.Insert, "r", str("A", "gone")))
	if err := x.e.DeleteTable(x.ctx, x.acct, "gONE"); err != nil {
		t.Fatalf("DeleteTable: %v", err)
	}
	notFound := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, storage.ErrTableNotFound) {
			t.Fatalf("%s on a deleted table = %v, want ErrTableNotFound", what, err)
		}
	}
	_, err := x.e.GetTable(x.ctx, x.acct, "Gone")
	notFound("GetTable", err)
	notFound("DeleteTable", x.e.DeleteTable(x.ctx, x.acct, "Gone"))
	_, err = x.e.Apply(x.ctx, x.acct, "Gone", "p", []storage.Mutation{mut(storage.InsertOrReplace, "r")})
	notFound("Apply", err)
	_, err = x.e.Get(x.ctx, x.acct, "Gone", "p", "r")
	notFound("Get", err)
	_, err = x.e.Scan(x.ctx, x.acct, "Gone", storage.ScanRequest{Limit: 10})
	notFound("Scan", err)
	notFound("DeleteTable of a table never created", x.e.DeleteTable(x.ctx, x.acct, "Never"))

	list, _, err := x.e.ListTables(x.ctx, x.acct, "", 100)
	if err != nil || !slices.Equal(infoNames(list), []string{"Keep"}) {
		t.Fatalf("ListTables after delete = %v, %v; want [Keep]", infoNames(list), err)
	}
	if got := x.get("Keep", "p", "r"); got.Entity.Props[0].Value.Str != "keep" {
		t.Fatalf("surviving table's row = %+v", got)
	}
}

func testAccountsIsolated(t *testing.T, x *env) {
	a := x.acct
	b := x.newAccount()
	// Accounts whose names are prefixes of each other must not bleed into each other.
	c := a + "x"
	for _, acct := range []string{a, b, c} {
		if err := x.e.CreateTable(x.ctx, acct, "Shared", storage.TableSettings{}); err != nil {
			t.Fatalf("CreateTable(Shared) in %s: %v", acct, err)
		}
	}
	if err := x.e.CreateTable(x.ctx, a, "OnlyA", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	if _, err := x.e.Apply(x.ctx, a, "Shared", "p", []storage.Mutation{mut(storage.Insert, "r", str("Who", "a"))}); err != nil {
		t.Fatal(err)
	}
	if _, err := x.e.Get(x.ctx, b, "Shared", "p", "r"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Get in account b of a row written in a = %v, want ErrNotFound", err)
	}
	if res, err := x.e.Scan(x.ctx, c, "Shared", storage.ScanRequest{Limit: 10}); err != nil || len(res.Records) != 0 {
		t.Fatalf("Scan in account c = %d records, %v; want none", len(res.Records), err)
	}
	if _, err := x.e.Apply(x.ctx, b, "Shared", "p", []storage.Mutation{mut(storage.Insert, "r", str("Who", "b"))}); err != nil {
		t.Fatalf("Insert of the same key in another account: %v", err)
	}
	if _, err := x.e.GetTable(x.ctx, b, "OnlyA"); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("GetTable(OnlyA) in account b = %v, want ErrTableNotFound", err)
	}
	for acct, want := range map[string][]string{a: {"OnlyA", "Shared"}, b: {"Shared"}, c: {"Shared"}} {
		list, next, err := x.e.ListTables(x.ctx, acct, "", 100)
		if err != nil || next != "" || !slices.Equal(infoNames(list), want) {
			t.Fatalf("ListTables(%s) = %v, %q, %v; want %v", acct, infoNames(list), next, err, want)
		}
	}
	if err := x.e.DeleteTable(x.ctx, a, "Shared"); err != nil {
		t.Fatal(err)
	}
	r, err := x.e.Get(x.ctx, b, "Shared", "p", "r")
	if err != nil {
		t.Fatalf("Get in b after deleting a's table of the same name: %v", err)
	}
	if v, _ := r.Entity.Get("Who"); v.Str != "b" {
		t.Fatalf("account b's row = %+v, want Who=b", r.Entity)
	}
}

func testTablesIsolated(t *testing.T, x *env) {
	// Names that are prefixes of each other.
	x.createTable("t")
	x.createTable("ta")
	x.createTable("tab")
	for _, tbl := range []string{"t", "ta", "tab"} {
		x.apply(tbl, "p", mut(storage.Insert, "r", str("T", tbl)), mut(storage.Insert, tbl, str("T", tbl)))
	}
	for _, tbl := range []string{"t", "ta", "tab"} {
		recs := x.snapshot(tbl)
		if len(recs) != 2 {
			t.Fatalf("table %s holds %d records (%s), want 2", tbl, len(recs), keysOf(recs))
		}
		for _, r := range recs {
			if v, _ := r.Entity.Get("T"); v.Str != tbl {
				t.Fatalf("table %s shows a row of table %s", tbl, v.Str)
			}
		}
	}
}

func testDeleteRecreate(t *testing.T, x *env) {
	for cycle := range 3 {
		name := []string{"Cycle", "cycle", "CYCLE"}[cycle]
		x.createTable(name)
		for _, pk := range []string{"p1", "p2"} {
			var muts []storage.Mutation
			for i := range 25 {
				muts = append(muts, mut(storage.Insert, fmt.Sprintf("r%02d", i), i64("Cycle", int64(cycle))))
			}
			x.apply(name, pk, muts...)
		}
		if n := len(x.snapshot(name)); n != 50 {
			t.Fatalf("cycle %d: %d rows after inserting 50", cycle, n)
		}
		if err := x.e.DeleteTable(x.ctx, x.acct, name); err != nil {
			t.Fatalf("cycle %d: DeleteTable: %v", cycle, err)
		}
		// Re-created at once: no trace of the old rows.
		x.createTable(name)
		for _, pk := range []string{"p1", "p2"} {
			for i := range 25 {
				x.getMissing(name, pk, fmt.Sprintf("r%02d", i))
			}
		}
		if recs := x.snapshot(name); len(recs) != 0 {
			t.Fatalf("cycle %d: re-created table shows %d old rows: %s", cycle, len(recs), keysOf(recs))
		}
		// Insert (must-not-exist) of an old key succeeds.
		x.apply(name, "p1", mut(storage.Insert, "r00", i64("Cycle", int64(cycle))))
		if recs := x.snapshot(name); len(recs) != 1 {
			t.Fatalf("cycle %d: re-created table holds %d rows, want 1", cycle, len(recs))
		}
		if err := x.e.DeleteTable(x.ctx, x.acct, name); err != nil {
			t.Fatal(err)
		}
	}
	// Some time later (background purge), a re-created table is still empty.
	time.Sleep(100 * time.Millisecond)
	x.createTable("Cycle")
	if recs := x.snapshot("Cycle"); len(recs) != 0 {
		t.Fatalf("re-created table shows %d old rows after purge", len(recs))
	}
}

// testDeleteRacingApply deletes a table while writers insert into it: once DeleteTable has
// returned and the writers have stopped, a table created under the name is empty, and
// stays empty.
func testDeleteRacingApply(t *testing.T, x *env) {
	x.createTable("Race")
	var wg sync.WaitGroup
	var stop atomic.Bool
	var writes atomic.Int64
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				_, err := x.e.Apply(x.ctx, x.acct, "Race", fmt.Sprintf("w%d", w), []storage.Mutation{
					mut(storage.Insert, fmt.Sprintf("r%06d", i), i64("N", int64(i))),
				})
				switch {
				case err == nil:
					writes.Add(1)
				case errors.Is(err, storage.ErrTableNotFound):
					return // the delete is visible to this writer: it stops
				default:
					errs <- err
					return
				}
			}
		})
	}
	deadline := time.Now().Add(5 * time.Second)
	for writes.Load() < 50 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if err := x.e.DeleteTable(x.ctx, x.acct, "Race"); err != nil {
		t.Fatalf("DeleteTable: %v", err)
	}
	// Every Apply that starts now must see the table gone.
	if _, err := x.e.Apply(x.ctx, x.acct, "Race", "late", []storage.Mutation{mut(storage.Insert, "r")}); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("Apply after DeleteTable returned = %v, want ErrTableNotFound", err)
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("writer: %v", err)
	}
	x.createTable("Race")
	for range 3 {
		if recs := x.snapshot("Race"); len(recs) != 0 {
			t.Fatalf("re-created table shows %d rows of the deleted one (%d writes before the delete)", len(recs), writes.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
