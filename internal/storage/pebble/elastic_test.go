package pebble

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	pebbledb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Tests of the Pebble engine's time-to-live and positions beyond the conformance suite:
// the background pass, the cost of a pass, the purge's race with writes, a full disk,
// deleted tables, crashes and the format upgrade.

func ttlProp(v int64) entity.Property {
	return entity.Property{Name: storage.DefaultTTLProperty, Value: entity.Int64Value(v)}
}

func insertRows(t testing.TB, e *Engine, table, pk string, n int, props ...entity.Property) int64 {
	t.Helper()
	var muts []storage.Mutation
	for i := range n {
		muts = append(muts, storage.Mutation{Op: storage.Insert, RowKey: fmt.Sprintf("r%05d", i), Props: props})
	}
	applied, err := e.Apply(context.Background(), "acct", table, pk, muts)
	if err != nil {
		t.Fatal(err)
	}
	return slices.Max(applied.Versions)
}

// waitUntilExpired sleeps until rows written at version with a TTL of seconds are expired
// by the engine's clock (the process's).
func waitUntilExpired(version int64, seconds int) {
	time.Sleep(time.Until(entity.TicksToTime(version).Add(time.Duration(seconds)*time.Second + 10*time.Millisecond)))
}

// countKeys counts the keys in [lower, upper).
func countKeys(t testing.TB, e *Engine, lower, upper []byte) int {
	t.Helper()
	it, err := e.db.NewIter(&pebbledb.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestExpiryBackground: without any call, the background pass removes expired rows
// within about an ExpiryInterval.
func TestExpiryBackground(t *testing.T) {
	e := openTest(t, t.TempDir(), Options{ExpiryInterval: 100 * time.Millisecond})
	ctx := context.Background()
	if err := e.CreateTable(ctx, "acct", "T", storage.TableSettings{Elastic: true, DefaultTTL: 1}); err != nil {
		t.Fatal(err)
	}
	v := insertRows(t, e, "T", "p", 300)
	insertRows(t, e, "T", "q", 10, ttlProp(-1))
	waitUntilExpired(v, 1)
	deadline := time.Now().Add(5 * time.Second)
	for storedRows(t, e, "acct", "T") != 10 {
		if time.Now().After(deadline) {
			t.Fatalf("%d rows stored 5 s after expiry, want 10", storedRows(t, e, "acct", "T"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestExpiryPassCost: a pass reads the expired rows' index keys (twice: listed, then
// checked under the row locks) and one key more per table with an index, however many
// rows do not expire.
func TestExpiryPassCost(t *testing.T) {
	e := openTest(t, t.TempDir(), Options{ExpiryInterval: -1})
	ctx := context.Background()
	for _, name := range []string{"A", "B", "Std"} {
		s := storage.TableSettings{Elastic: true, DefaultTTL: 3600}
		if name == "Std" {
			s = storage.TableSettings{}
		}
		if err := e.CreateTable(ctx, "acct", name, s); err != nil {
			t.Fatal(err)
		}
	}
	for p := range 10 {
		insertRows(t, e, "A", fmt.Sprintf("p%d", p), 200)
		insertRows(t, e, "B", fmt.Sprintf("p%d", p), 200)
		insertRows(t, e, "Std", fmt.Sprintf("p%d", p), 200)
	}
	var last int64
	for p := range 4 {
		last = max(last, insertRows(t, e, "A", fmt.Sprintf("x%d", p), 5, ttlProp(1)))
	}
	waitUntilExpired(last, 1)
	e.expiryVisited.Store(0)
	n, err := e.PurgeExpired(ctx)
	if err != nil || n != 20 {
		t.Fatalf("PurgeExpired = %d, %v; want 20", n, err)
	}
	// 20 index keys twice, plus the first unexpired key of A and of B.
	if got := e.expiryVisited.Load(); got > 2*20+2 {
		t.Fatalf("the pass read %d keys to remove 20 rows", got)
	}
	if got := storedRows(t, e, "acct", "A"); got != 2000 {
		t.Fatalf("A stores %d rows, want 2000", got)
	}
	// Nothing expired: a pass reads one key per table with an index.
	e.expiryVisited.Store(0)
	if n, err := e.PurgeExpired(ctx); err != nil || n != 0 {
		t.Fatalf("second PurgeExpired = %d, %v", n, err)
	}
	if got := e.expiryVisited.Load(); got > 2 {
		t.Fatalf("an empty pass read %d keys", got)
	}
}

// TestExpiryPurgeRacingWrite: a row written again between the pass's reading of its
// index key and its deletion stays, with its new index key.
func TestExpiryPurgeRacingWrite(t *testing.T) {
	e := openTest(t, t.TempDir(), Options{ExpiryInterval: -1})
	ctx := context.Background()
	if err := e.CreateTable(ctx, "acct", "T", storage.TableSettings{Elastic: true, DefaultTTL: 1}); err != nil {
		t.Fatal(err)
	}
	v := insertRows(t, e, "T", "p", 5)
	waitUntilExpired(v, 1)
	now := e.clock.Now()
	entries, rows, _, err := e.expiredEntries(ctx, []byte{kindExpiry}, now)
	if err != nil || len(entries) != 5 {
		t.Fatalf("expiredEntries = %d, %v", len(entries), err)
	}
	// Written again (over an expired row: an insert) and moved (a later expiry).
	if _, err := e.Apply(ctx, "acct", "T", "p", []storage.Mutation{
		{Op: storage.Insert, RowKey: "r00001", Props: []entity.Property{ttlProp(-1)}},
		{Op: storage.Insert, RowKey: "r00003", Props: []entity.Property{ttlProp(3600)}},
	}); err != nil {
		t.Fatal(err)
	}
	n, err := e.deleteExpired(entries, rows)
	if err != nil || n != 3 {
		t.Fatalf("deleteExpired = %d, %v; want 3", n, err)
	}
	if got := storedRows(t, e, "acct", "T"); got != 2 {
		t.Fatalf("%d rows stored, want the 2 written again", got)
	}
	for _, rk := range []string{"r00001", "r00003"} {
		if _, err := e.Get(ctx, "acct", "T", "p", rk); err != nil {
			t.Fatalf("Get(%s): %v", rk, err)
		}
	}
}

// TestExpiryDeletedTable: the purge of a deleted table removes its expiry index and
// settings too, and the expiry pass ignores what is left of it.
func TestExpiryDeletedTable(t *testing.T) {
	e := openTest(t, t.TempDir(), Options{ExpiryInterval: -1})
	ctx := context.Background()
	if err := e.CreateTable(ctx, "acct", "T", storage.TableSettings{Elastic: true, DefaultTTL: 3600}); err != nil {
		t.Fatal(err)
	}
	insertRows(t, e, "T", "p", 50)
	tb, _ := e.lookup("acct", "T")
	if n := countKeys(t, e, expiryPrefix(tb.id), expiryPrefix(tb.id+1)); n != 50 {
		t.Fatalf("%d index keys, want 50", n)
	}
	if err := e.DeleteTable(ctx, "acct", "T"); err != nil {
		t.Fatal(err)
	}
	if err := e.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, e, expiryPrefix(tb.id), expiryPrefix(tb.id+1)); n != 0 {
		t.Fatalf("%d index keys after the purge, want 0", n)
	}
	if n := countKeys(t, e, settingsKey(tb.id), settingsKey(tb.id+1)); n != 0 {
		t.Fatal("settings key left after the purge")
	}
	if n, err := e.PurgeExpired(ctx); err != nil || n != 0 {
		t.Fatalf("PurgeExpired = %d, %v", n, err)
	}
}

// TestExpiryFullDisk: on a full disk expired rows stay invisible, the pass refuses to
// write and leaves them stored, and removes them once space returns.
func TestExpiryFullDisk(t *testing.T) {
	v := newFakeVolume(1 << 40)
	e := openTest(t, t.TempDir(), Options{DiskReserve: 32 * mib, Log: slog.New(&logRecorder{}), statfs: v.statfs, ExpiryInterval: -1})
	ctx := context.Background()
	if err := e.CreateTable(ctx, "acct", "T", storage.TableSettings{Elastic: true, DefaultTTL: 1}); err != nil {
		t.Fatal(err)
	}
	ver := insertRows(t, e, "T", "p", 20)
	waitUntilExpired(ver, 1)
	v.avail.Store(10 * mib)
	time.Sleep(spaceRefreshEvery)
	if _, err := e.PurgeExpired(ctx); !errors.Is(err, storage.ErrNoSpace) {
		t.Fatalf("PurgeExpired on a full disk = %v, want ErrNoSpace", err)
	}
	if n := storedRows(t, e, "acct", "T"); n != 20 {
		t.Fatalf("%d rows stored after a refused pass, want 20", n)
	}
	if _, err := e.Get(ctx, "acct", "T", "p", "r00000"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Get of an expired row on a full disk = %v", err)
	}
	// Space returns: the guard's recovery wakes the background pass (the interval is
	// off here), which removes them.
	v.avail.Store(1 << 40)
	deadline := time.Now().Add(10 * time.Second)
	for storedRows(t, e, "acct", "T") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d rows stored 10 s after space returned, want 0", storedRows(t, e, "acct", "T"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPositionsAfterCrash: positions acknowledged before a crash are reached at once
// after it, and later ones go above them.
func TestPositionsAfterCrash(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	e, err := Open("db", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.CreateTable(ctx, "acct", "T", storage.TableSettings{Elastic: true, DefaultTTL: 3600}); err != nil {
		t.Fatal(err)
	}
	var last storage.Position
	for i := range 20 {
		applied, err := e.Apply(ctx, "acct", "T", "p", []storage.Mutation{{Op: storage.InsertOrReplace, RowKey: fmt.Sprint(i % 3)}})
		if err != nil || applied.Position <= last {
			t.Fatalf("Apply = %+v, %v; want a position above %d", applied, err, last)
		}
		last = applied.Position
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	e2 := openTest(t, "db", Options{FS: crashed})
	if _, err := e2.ReadView(ctx, storage.ReadOptions{At: last}); err != nil {
		t.Fatalf("ReadView(the last acknowledged position) after the crash: %v", err)
	}
	applied, err := e2.Apply(ctx, "acct", "T", "p", []storage.Mutation{{Op: storage.Insert, RowKey: "after"}})
	if err != nil || applied.Position <= last {
		t.Fatalf("Apply after the crash = %+v, %v; want a position above %d", applied, err, last)
	}
	if info, err := e2.GetTable(ctx, "acct", "T"); err != nil || info.Settings.DefaultTTL != 3600 {
		t.Fatalf("settings after the crash = %+v, %v", info, err)
	}
	n := storedRows(t, e2, "acct", "T")
	if n != 4 {
		t.Fatalf("%d rows after the crash, want 4", n)
	}
}

// TestFormatUpgrade: a format-1 store (tag-1 rows, no settings) opens, reads as before
// and is marked format 2 (formatBase: it has no change feed); a store of a newer format
// is refused.
func TestFormatUpgrade(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e := openTest(t, dir, Options{})
	if err := e.CreateTable(ctx, "acct", "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	tb, _ := e.lookup("acct", "T")
	// A row as format 1 wrote it, and the format-1 mark.
	old := append([]byte{valueTag, 0, 0, 0, 0, 0, 0, 0, 42}, entity.AppendProps(nil, []entity.Property{ttlProp(1)})...)
	if err := e.db.Set(dataKey(tb.id, "p", "old"), old, pebbledb.Sync); err != nil {
		t.Fatal(err)
	}
	if err := e.db.Set(metaFormat, binary.BigEndian.AppendUint64(nil, 1), pebbledb.Sync); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openTest(t, dir, Options{})
	if f, _, err := e.getUint64(metaFormat); err != nil || f != formatBase {
		t.Fatalf("format after reopen = %d, %v; want %d (a store without change feeds)", f, err, formatBase)
	}
	r, err := e.Get(ctx, "acct", "T", "p", "old")
	if err != nil || r.Version != 42 {
		t.Fatalf("format-1 row = %+v, %v", r, err)
	}
	// Made elastic: the old row keeps its (absent) expiry; a merge gives it one.
	if err := e.SetTableSettings(ctx, "acct", "T", storage.TableSettings{Elastic: true, DefaultTTL: storage.TTLNever}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	if _, err := e.Get(ctx, "acct", "T", "p", "old"); err != nil {
		t.Fatalf("format-1 row after the table became elastic: %v", err)
	}
	applied, err := e.Apply(ctx, "acct", "T", "p", []storage.Mutation{{Op: storage.Merge, RowKey: "old", IfMatch: 42}})
	if err != nil || applied.Versions[0] <= 42 {
		t.Fatalf("merge of a format-1 row = %+v, %v", applied, err)
	}
	if n := storedRows(t, e, "acct", "T"); n != 1 {
		t.Fatalf("%d rows", n)
	}
	if err := e.db.Set(metaFormat, binary.BigEndian.AppendUint64(nil, formatVersion+1), pebbledb.Sync); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if e2, err := Open(dir, Options{}); err == nil {
		e2.Close()
		t.Fatal("Open of a store of a newer format succeeded")
	}
}
