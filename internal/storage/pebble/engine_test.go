package pebble

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/enginetest"
	pebbledb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// openTest opens an engine in dir and closes it when the test ends (Close is idempotent,
// so a test may close it earlier).
func openTest(t testing.TB, dir string, opts Options) *Engine {
	t.Helper()
	e, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

// harness runs the conformance suite over engines opened with opts, each in its own
// directory.
func harness(opts Options) enginetest.Harness {
	var mu sync.Mutex
	dirs := map[storage.Engine]string{}
	return enginetest.Harness{
		Open: func(t *testing.T) storage.Engine {
			dir := t.TempDir()
			e := openTest(t, dir, opts)
			mu.Lock()
			dirs[e] = dir
			mu.Unlock()
			return e
		},
		Reopen: func(t *testing.T, old storage.Engine) storage.Engine {
			mu.Lock()
			dir := dirs[old]
			mu.Unlock()
			if err := old.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			e := openTest(t, dir, opts)
			mu.Lock()
			dirs[e] = dir
			mu.Unlock()
			return e
		},
		PurgeExpired: func(t *testing.T, e storage.Engine) {
			if _, err := e.(*Engine).PurgeExpired(t.Context()); err != nil {
				t.Fatalf("PurgeExpired: %v", err)
			}
		},
		StoredRows: func(t *testing.T, e storage.Engine, account, table string) int {
			return storedRows(t, e.(*Engine), account, table)
		},
	}
}

// storedRows counts the data keys of a table, expired rows included, and checks that
// its expiry index holds one key per stored row with an expiry. It reads one snapshot, so
// a purge running meanwhile (which removes a row and its index key together) cannot make
// a row seen before it look as if it had no index key.
func storedRows(t testing.TB, e *Engine, account, table string) int {
	t.Helper()
	tb, err := e.lookup(account, table)
	if err != nil {
		t.Fatalf("storedRows(%s): %v", table, err)
	}
	snap := e.db.NewSnapshot()
	defer snap.Close()
	it, err := snap.NewIter(&pebbledb.IterOptions{LowerBound: tablePrefix(tb.id), UpperBound: tablePrefix(tb.id + 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n, withExpiry := 0, 0
	for it.First(); it.Valid(); it.Next() {
		n++
		_, exp, _, err := parseValue(it.Value())
		if err != nil {
			t.Fatal(err)
		}
		if exp != 0 {
			withExpiry++
			_, pk, rk, err := decodeDataKey(it.Key())
			if err != nil {
				t.Fatal(err)
			}
			if _, closer, err := snap.Get(appendExpiryKey(nil, tb.id, exp, pk, rk)); err != nil {
				t.Fatalf("row (%q, %q) expiring at %d has no index key: %v", pk, rk, exp, err)
			} else {
				closer.Close()
			}
		}
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	idx, err := snap.NewIter(&pebbledb.IterOptions{LowerBound: expiryPrefix(tb.id), UpperBound: expiryPrefix(tb.id + 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	keys := 0
	for idx.First(); idx.Valid(); idx.Next() {
		keys++
	}
	if keys != withExpiry {
		t.Fatalf("table %s: %d rows with an expiry but %d expiry index keys", table, withExpiry, keys)
	}
	return n
}

func TestConformance(t *testing.T) {
	enginetest.Run(t, harness(Options{}))
}

// TestConformanceOnDisk runs the suite again with a tiny memtable, so that the data it
// reads has gone through flushes, sstables and blob files rather than only the memtable,
// and without the row cache, so that every point read reads them.
func TestConformanceOnDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	h := harness(Options{MemTableSize: 256 << 10, ValueSeparationMinSize: 64, RowCacheSize: -1})
	h.CASDuration = 200 * time.Millisecond
	enginetest.Run(t, h)
}

// TestCompactedData writes entities large enough for blob files, flushes and compacts
// everything, and checks reads, merges (which read the separated values), a purge and a
// restart on data that lives only in sstables and blob files.
func TestCompactedData(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e := openTest(t, dir, Options{})
	for _, name := range []string{"T", "Gone"} {
		if err := e.CreateTable(ctx, "a", name, storage.TableSettings{}); err != nil {
			t.Fatal(err)
		}
	}
	big := func(i int) []entity.Property {
		return []entity.Property{
			{Name: "S", Value: entity.StringValue(fmt.Sprintf("%04d-%s", i, strings.Repeat("v", 1000)))},
			{Name: "N", Value: entity.Int64Value(int64(i))},
		}
	}
	versions := map[string]int64{}
	for p := range 20 {
		for _, name := range []string{"T", "Gone"} {
			var muts []storage.Mutation
			for r := range 50 {
				muts = append(muts, storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprintf("r%02d", r), Props: big(p*50 + r)})
			}
			applied, err := e.Apply(ctx, "a", name, fmt.Sprintf("p%02d", p), muts)
			vs := applied.Versions
			if err != nil {
				t.Fatal(err)
			}
			if name == "T" {
				for r, v := range vs {
					versions[fmt.Sprintf("p%02d/r%02d", p, r)] = v
				}
			}
		}
	}
	gone, _ := e.lookup("a", "Gone")
	compact := func() {
		t.Helper()
		if err := e.db.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := e.db.Compact(ctx, []byte{0}, []byte{0xff}, false); err != nil {
			t.Fatal(err)
		}
	}
	compact()
	if m := e.db.Metrics(); m.BlobFiles.LiveCount == 0 {
		t.Fatalf("no blob files: value separation is not in effect\n%s", m)
	}
	check := func(what string) {
		t.Helper()
		var recs []storage.Record
		start := storage.Key{}
		for {
			res, err := e.Scan(ctx, "a", "T", storage.ScanRequest{Start: start, Limit: 77})
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, res.Records...)
			if res.Next == nil {
				break
			}
			start = *res.Next
		}
		if len(recs) != 1000 {
			t.Fatalf("%s: scan found %d records, want 1000", what, len(recs))
		}
		for i, r := range recs {
			k := r.Entity.PartitionKey + "/" + r.Entity.RowKey
			if r.Version != versions[k] {
				t.Fatalf("%s: %s version %d, want %d", what, k, r.Version, versions[k])
			}
			if s, _ := r.Entity.Get("S"); !strings.HasPrefix(s.Str, fmt.Sprintf("%04d-", i)) || len(s.Str) != 1005 {
				t.Fatalf("%s: %s has S=%.10q… (%d bytes)", what, k, s.Str, len(s.Str))
			}
		}
	}
	check("after compaction")

	// Merges read the separated values back.
	for p := range 20 {
		muts := []storage.Mutation{{Op: storage.Merge, RowKey: "r07", Props: []entity.Property{{Name: "M", Value: entity.BoolValue(true)}}}}
		applied, err := e.Apply(ctx, "a", "T", fmt.Sprintf("p%02d", p), muts)
		vs := applied.Versions
		if err != nil {
			t.Fatal(err)
		}
		versions[fmt.Sprintf("p%02d/r07", p)] = vs[0]
	}
	compact()
	r, err := e.Get(ctx, "a", "T", "p03", "r07")
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := r.Entity.Get("S"); !strings.HasPrefix(s.Str, "0157-") {
		t.Fatalf("merged entity lost its stored property: %.10q", s.Str)
	}
	if m, _ := r.Entity.Get("M"); !m.Bool() {
		t.Fatal("merged entity lacks the merged property")
	}
	check("after merges")

	if err := e.DeleteTable(ctx, "a", "Gone"); err != nil {
		t.Fatal(err)
	}
	if err := e.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	compact()
	if n := countSpan(t, e, gone.id); n != 0 {
		t.Fatalf("%d rows of the purged table after compaction", n)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openTest(t, dir, Options{})
	check("after reopen")
}

// TestCrashDurability simulates a machine crash (everything not synced is lost) after
// acknowledged writes: every acknowledged write must be there after recovery.
func TestCrashDurability(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	e, err := Open("db", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close() // after the crash clone: only stops the original's background work
	if err := e.CreateTable(ctx, "acct", "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateTable(ctx, "acct", "Dropped", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	if err := e.DeleteTable(ctx, "acct", "Dropped"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	acked := make([]map[string]int64, 8)
	for w := range 8 {
		acked[w] = map[string]int64{}
		wg.Go(func() {
			for i := range 50 {
				rk := fmt.Sprintf("r%03d", i)
				applied, err := e.Apply(ctx, "acct", "T", fmt.Sprintf("p%d", w), []storage.Mutation{{Op: storage.Insert, RowKey: rk,
					Props: []entity.Property{{Name: "N", Value: entity.Int64Value(int64(i))}}}})
				vs := applied.Versions
				if err != nil {
					t.Error(err)
					return
				}
				acked[w][rk] = vs[0]
			}
		})
	}
	wg.Wait()
	// Crash: keep only synced data (the engine is never closed).
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	e2 := openTest(t, "db", Options{FS: crashed})
	for w := range 8 {
		for rk, v := range acked[w] {
			r, err := e2.Get(ctx, "acct", "T", fmt.Sprintf("p%d", w), rk)
			if err != nil {
				t.Fatalf("acknowledged write p%d/%s lost in the crash: %v", w, rk, err)
			}
			if r.Version != v {
				t.Fatalf("p%d/%s: version %d after the crash, acknowledged %d", w, rk, r.Version, v)
			}
		}
	}
	if _, err := e2.GetTable(ctx, "acct", "Dropped"); !errors.Is(err, storage.ErrTableNotFound) {
		t.Fatalf("deleted table back after the crash: %v", err)
	}
	if err := e2.CreateTable(ctx, "acct", "New", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	if res, err := e2.Scan(ctx, "acct", "New", storage.ScanRequest{Limit: 10}); err != nil || len(res.Records) != 0 {
		t.Fatalf("table created after the crash = %d rows, %v", len(res.Records), err)
	}
}

// TestPurge checks that a deleted table's rows are physically removed (not merely
// unreachable), and that a purge left pending by a crash is done on the next Open.
func TestPurge(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e := openTest(t, dir, Options{})
	fill := func(e *Engine, name string) uint64 {
		t.Helper()
		if err := e.CreateTable(ctx, "a", name, storage.TableSettings{}); err != nil {
			t.Fatal(err)
		}
		var muts []storage.Mutation
		for i := range 100 {
			muts = append(muts, storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprint(i)})
		}
		if _, err := e.Apply(ctx, "a", name, "p", muts); err != nil {
			t.Fatal(err)
		}
		tb, err := e.lookup("a", name)
		if err != nil {
			t.Fatal(err)
		}
		return tb.id
	}
	id := fill(e, "T")
	keep := fill(e, "Keep")
	if n := countSpan(t, e, id); n != 100 {
		t.Fatalf("table span holds %d keys, want 100", n)
	}
	if err := e.DeleteTable(ctx, "a", "T"); err != nil {
		t.Fatal(err)
	}
	if err := e.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countSpan(t, e, id); n != 0 {
		t.Fatalf("after purge the deleted table's span holds %d keys", n)
	}
	if n := countSpan(t, e, keep); n != 100 {
		t.Fatalf("purge touched another table: %d keys left of 100", n)
	}
	if n := countPrefix(t, e, []byte{kindPurge}); n != 0 {
		t.Fatalf("%d purge markers left", n)
	}

	// A pending marker (as a crash between delete and purge leaves it) is purged on Open.
	id2 := fill(e, "T2")
	if err := e.db.Set(purgeKey(id2), nil, pebbledb.Sync); err != nil { // marker without the purge
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openTest(t, dir, Options{})
	if err := e.Purge(ctx); err != nil { // waits for the background pass, which runs first
		t.Fatal(err)
	}
	if n := countSpan(t, e, id2); n != 0 {
		t.Fatalf("pending purge not resumed on Open: %d keys left", n)
	}
}

func countSpan(t *testing.T, e *Engine, id uint64) int {
	t.Helper()
	return countKeys(t, e, tablePrefix(id), tablePrefix(id+1))
}

func countPrefix(t *testing.T, e *Engine, p []byte) int {
	t.Helper()
	end := append([]byte(nil), p...)
	end[len(end)-1]++
	return countKeys(t, e, p, end)
}

func TestClosed(t *testing.T) {
	ctx := context.Background()
	e := openTest(t, t.TempDir(), Options{})
	if err := e.CreateTable(ctx, "a", "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := e.Get(ctx, "a", "T", "p", "r"); !errors.Is(err, ErrClosed) || !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("Get after Close = %v, want ErrClosed (ErrUnavailable)", err)
	}
	if _, err := e.Apply(ctx, "a", "T", "p", []storage.Mutation{{Op: storage.Insert}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Apply after Close = %v, want ErrClosed", err)
	}
}

// TestClockMark checks that versions after a restart exceed the previous run's, even when
// that run's clock had run ahead of the wall clock.
func TestClockMark(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ahead := storage.NewClock(nil)
	future := entity.TimeToTicks(entity.TicksToTime(0).AddDate(3000, 0, 0))
	ahead.Observe(future)
	e := openTest(t, dir, Options{Clock: ahead})
	if err := e.CreateTable(ctx, "a", "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	applied, err := e.Apply(ctx, "a", "T", "p", []storage.Mutation{{Op: storage.Insert, RowKey: "r"}})
	vs := applied.Versions
	if err != nil || vs[0] <= future {
		t.Fatalf("Apply = %v, %v; want a version above %d", vs, err, future)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openTest(t, dir, Options{})
	applied, err = e.Apply(ctx, "a", "T", "p", []storage.Mutation{{Op: storage.Insert, RowKey: "other"}})
	vs2 := applied.Versions
	if err != nil || vs2[0] <= vs[0] {
		t.Fatalf("after restart: version %v, %v; want above the previous run's %d", vs2, err, vs[0])
	}
}

// TestTableIDsNeverReused checks that ids keep growing across deletes and restarts, even
// when the deleted table had the largest id.
func TestTableIDsNeverReused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e := openTest(t, dir, Options{})
	seen := map[uint64]bool{}
	var last uint64
	for round := range 4 {
		if err := e.CreateTable(ctx, "a", "T", storage.TableSettings{}); err != nil {
			t.Fatal(err)
		}
		tb, err := e.lookup("a", "T")
		if err != nil {
			t.Fatal(err)
		}
		if seen[tb.id] || tb.id <= last {
			t.Fatalf("round %d: table id %d after %d (seen before: %v)", round, tb.id, last, seen[tb.id])
		}
		seen[tb.id], last = true, tb.id
		if err := e.DeleteTable(ctx, "a", "T"); err != nil {
			t.Fatal(err)
		}
		if round%2 == 1 {
			if err := e.Purge(ctx); err != nil { // no purge marker left to hint at the id
				t.Fatal(err)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			e = openTest(t, dir, Options{})
		}
	}
}

// TestDeleteRacingApplyLeavesNoOrphans deletes tables under concurrent writers and checks
// that no row lands in a deleted table's span after its purge (such rows would be
// invisible but never reclaimed).
func TestDeleteRacingApplyLeavesNoOrphans(t *testing.T) {
	ctx := context.Background()
	e := openTest(t, t.TempDir(), Options{})
	for round := range 20 {
		name := fmt.Sprintf("T%d", round)
		if err := e.CreateTable(ctx, "a", name, storage.TableSettings{}); err != nil {
			t.Fatal(err)
		}
		tb, _ := e.lookup("a", name)
		var wg sync.WaitGroup
		started := make(chan struct{}, 16)
		for w := range 16 {
			wg.Go(func() {
				for i := 0; ; i++ {
					_, err := e.Apply(ctx, "a", name, fmt.Sprint(w), []storage.Mutation{{Op: storage.InsertOrReplace, RowKey: fmt.Sprint(i)}})
					if i == 0 {
						started <- struct{}{}
					}
					if errors.Is(err, storage.ErrTableNotFound) {
						return
					}
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		for range 16 {
			<-started
		}
		if err := e.DeleteTable(ctx, "a", name); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if err := e.Purge(ctx); err != nil { // after the background pass, if it ran first
			t.Fatal(err)
		}
		if n := countSpan(t, e, tb.id); n != 0 {
			t.Fatalf("round %d: %d orphan rows in the deleted table's span after its purge", round, n)
		}
	}
}

// TestDeleteWaitsForApply pauses an Apply between its checks and its commit and deletes
// (and purges) the table meanwhile: the delete must wait for the Apply, so that its row
// falls inside the purge instead of staying behind as an orphan.
func TestDeleteWaitsForApply(t *testing.T) {
	ctx := context.Background()
	e := openTest(t, t.TempDir(), Options{})
	if err := e.CreateTable(ctx, "a", "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	tb, _ := e.lookup("a", "T")
	paused, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	testHookBeforeCommit = func() {
		once.Do(func() {
			close(paused)
			<-release
		})
	}
	defer func() { testHookBeforeCommit = nil }()
	applied := make(chan error, 1)
	go func() {
		_, err := e.Apply(ctx, "a", "T", "p", []storage.Mutation{{Op: storage.Insert, RowKey: "r"}})
		applied <- err
	}()
	<-paused
	deleted := make(chan error, 1)
	go func() {
		err := e.DeleteTable(ctx, "a", "T")
		if err == nil {
			err = e.Purge(ctx)
		}
		deleted <- err
	}()
	select {
	case err := <-deleted:
		close(release)
		<-applied
		t.Fatalf("DeleteTable finished (%v) while an Apply on the table was in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-applied; err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	if n := countSpan(t, e, tb.id); n != 0 {
		t.Fatalf("%d orphan rows after delete and purge", n)
	}
}

// TestACLKeys checks where ACLs and service properties live: acknowledged sets survive a
// crash, a deleted table's ACL key is gone (by DeleteTable, or by the purge for a key an
// older build left), and SetTableACL racing DeleteTable leaves no ACL key behind.
func TestACLKeys(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	e, err := Open("db", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, name := range []string{"T", "Dropped"} {
		if err := e.CreateTable(ctx, "acct", name, storage.TableSettings{}); err != nil {
			t.Fatal(err)
		}
		if err := e.SetTableACL(ctx, "acct", name, []byte("acl of "+name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.SetServiceProperties(ctx, "acct", []byte("props")); err != nil {
		t.Fatal(err)
	}
	if err := e.SetServiceProperties(ctx, "acct\x00x", []byte("other")); err != nil { // NUL in an account
		t.Fatal(err)
	}
	if err := e.DeleteTable(ctx, "acct", "Dropped"); err != nil {
		t.Fatal(err)
	}
	if n := countPrefix(t, e, []byte{kindACL}); n != 1 {
		t.Fatalf("%d ACL keys after DeleteTable, want 1", n)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	e2 := openTest(t, "db", Options{FS: crashed})
	if acl, err := e2.GetTableACL(ctx, "acct", "t"); err != nil || string(acl) != "acl of T" {
		t.Fatalf("ACL after the crash = %q, %v", acl, err)
	}
	for acct, want := range map[string]string{"acct": "props", "acct\x00x": "other", "acct\x00": ""} {
		if p, err := e2.GetServiceProperties(ctx, acct); err != nil || string(p) != want {
			t.Fatalf("service properties of %q after the crash = %q, %v; want %q", acct, p, err, want)
		}
	}

	// A stale ACL key of a deleted table (as a build before ACLs leaves it) is purged.
	if err := e2.CreateTable(ctx, "acct", "Old", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	old, err := e2.lookup("acct", "Old")
	if err != nil {
		t.Fatal(err)
	}
	if err := e2.SetTableACL(ctx, "acct", "Old", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := e2.DeleteTable(ctx, "acct", "Old"); err != nil {
		t.Fatal(err)
	}
	if err := e2.db.Set(aclKey(old.id), []byte("stale"), pebbledb.Sync); err != nil {
		t.Fatal(err)
	}
	if err := e2.db.Set(purgeKey(old.id), nil, pebbledb.Sync); err != nil {
		t.Fatal(err)
	}
	if err := e2.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countPrefix(t, e2, []byte{kindACL}); n != 1 {
		t.Fatalf("%d ACL keys after the purge, want 1 (T's)", n)
	}

	// Setters racing the delete: no ACL key of the deleted table remains, before any purge.
	for round := range 20 {
		name := fmt.Sprintf("Race%d", round)
		if err := e2.CreateTable(ctx, "acct", name, storage.TableSettings{}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := 0; ; i++ {
					err := e2.SetTableACL(ctx, "acct", name, []byte(fmt.Sprint(w, i)))
					if errors.Is(err, storage.ErrTableNotFound) {
						return
					}
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		time.Sleep(time.Duration(round%4) * time.Millisecond)
		if err := e2.DeleteTable(ctx, "acct", name); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
	}
	if n := countPrefix(t, e2, []byte{kindACL}); n != 1 {
		t.Fatalf("%d ACL keys after deleting tables with setters racing, want 1 (T's)", n)
	}

	if err := e2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e2.GetTableACL(ctx, "acct", "T"); !errors.Is(err, ErrClosed) {
		t.Fatalf("GetTableACL after Close = %v, want ErrClosed", err)
	}
	if err := e2.SetServiceProperties(ctx, "acct", []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("SetServiceProperties after Close = %v, want ErrClosed", err)
	}
}

// TestApplyReleasesRowsBeforeSync checks commitReleasing's contract with the WAL's syncs
// held back: a write of a row whose previous write is visible but not yet synced goes
// ahead at once (it does not wait out that sync holding the row's lock), and no write
// is acknowledged before its sync.
func TestApplyReleasesRowsBeforeSync(t *testing.T) {
	ctx := context.Background()
	gate := &walGate{FS: vfs.NewMem(), opened: make(chan struct{}), blocked: make(chan struct{}, 1)}
	e := openTest(t, "db", Options{FS: gate})
	if err := e.CreateTable(ctx, "a", "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	gate.close()
	defer gate.open() // a failing test must not leave Close waiting on a sync
	first := make(chan error, 1)
	go func() {
		_, err := e.Apply(ctx, "a", "T", "p", []storage.Mutation{{Op: storage.Insert, RowKey: "r",
			Props: []entity.Property{{Name: "N", Value: entity.Int64Value(1)}}}})
		first <- err
	}()
	select {
	case <-gate.blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("the first write never reached its WAL sync")
	}
	// The first write is visible (Pebble publishes before the sync) but not acknowledged.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, err := e.Get(ctx, "a", "T", "p", "r"); err == nil {
			break
		} else if !errors.Is(err, storage.ErrNotFound) || time.Now().After(deadline) {
			t.Fatalf("Get of the unsynced write: %v", err)
		}
	}
	second := make(chan error, 1)
	go func() {
		_, err := e.Apply(ctx, "a", "T", "p", []storage.Mutation{{Op: storage.Insert, RowKey: "r"}})
		second <- err
	}()
	select {
	case err := <-second:
		if !errors.Is(err, storage.ErrExists) {
			t.Fatalf("second insert of the row = %v, want ErrExists", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a write of the same row waited for the first write's WAL sync")
	}
	select {
	case err := <-first:
		t.Fatalf("the first write was acknowledged (%v) before its WAL sync", err)
	case <-time.After(50 * time.Millisecond):
	}
	gate.open()
	if err := <-first; err != nil {
		t.Fatalf("first write: %v", err)
	}
}

// walGate is a vfs.FS whose WAL files' syncs block while the gate is closed, each
// blocked sync signalling on blocked.
type walGate struct {
	vfs.FS
	mu      sync.Mutex
	shut    bool
	opened  chan struct{}
	blocked chan struct{}
}

func (g *walGate) close() { g.mu.Lock(); g.shut = true; g.mu.Unlock() }

func (g *walGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut {
		g.shut = false
		close(g.opened)
	}
}

func (g *walGate) wait() {
	g.mu.Lock()
	shut := g.shut
	g.mu.Unlock()
	if shut {
		select {
		case g.blocked <- struct{}{}:
		default:
		}
		<-g.opened
	}
}

func (g *walGate) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := g.FS.Create(name, c)
	return g.wrap(name, f, err)
}

func (g *walGate) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := g.FS.ReuseForWrite(old, name, c)
	return g.wrap(name, f, err)
}

func (g *walGate) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return gatedFile{File: f, g: g}, nil
}

type gatedFile struct {
	vfs.File
	g *walGate
}

func (f gatedFile) Sync() error                  { f.g.wait(); return f.File.Sync() }
func (f gatedFile) SyncData() error              { f.g.wait(); return f.File.SyncData() }
func (f gatedFile) SyncTo(n int64) (bool, error) { f.g.wait(); return f.File.SyncTo(n) }

// TestCompressionChange checks that a store whose blocks were written with Snappy
// (Pebble's default, and this engine's before blockCompression) reads back whole under
// the current profile, before and after its data is compacted into new blocks.
func TestCompressionChange(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	defer func(c *sstable.CompressionProfile) { blockCompression = c }(blockCompression)
	blockCompression = sstable.SnappyCompression
	e := openTest(t, dir, Options{})
	if err := e.CreateTable(ctx, "bench", "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	load2(t, e, 2_000)
	if err := e.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	blockCompression = sstable.FastestCompression
	e = openTest(t, dir, Options{})
	check := func(when string) {
		t.Helper()
		res, err := e.Scan(ctx, "bench", "T", storage.ScanRequest{Limit: 5_000})
		if err != nil || len(res.Records) != 2_000 {
			t.Fatalf("%s: scan = %d records, %v", when, len(res.Records), err)
		}
		r, err := e.Get(ctx, "bench", "T", "p000007", "r042")
		if err != nil || !reflect.DeepEqual(r.Entity.Props, benchProps(742)) {
			t.Fatalf("%s: Get = %v, %v", when, r.Entity.Props, err)
		}
	}
	check("reopened")
	if err := e.db.Compact(ctx, []byte{0}, []byte{0xff}, true); err != nil {
		t.Fatal(err)
	}
	check("compacted")
}

// RaiseProcs raises GOMAXPROCS by BackgroundProcs once per process, however many engines
// the process opens, and keeps a GOMAXPROCS from the environment.
func TestRaiseProcsOnce(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(before)
	from, to, raised := RaiseProcs()
	switch {
	case os.Getenv("GOMAXPROCS") != "":
		if raised || runtime.GOMAXPROCS(0) != before {
			t.Errorf("with GOMAXPROCS set: raised %v, GOMAXPROCS %d, want %d kept", raised, runtime.GOMAXPROCS(0), before)
		}
	case !raised || from != before || to != before+BackgroundProcs || runtime.GOMAXPROCS(0) != to:
		t.Errorf("first call: %d → %d (raised %v), GOMAXPROCS %d; want %d → %d", from, to, raised, runtime.GOMAXPROCS(0), before, before+BackgroundProcs)
	}
	now := runtime.GOMAXPROCS(0)
	if _, _, again := RaiseProcs(); again || runtime.GOMAXPROCS(0) != now {
		t.Errorf("second call raised again: %v, GOMAXPROCS %d, want %d", again, runtime.GOMAXPROCS(0), now)
	}
}
