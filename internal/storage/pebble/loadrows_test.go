package pebble

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	pebbledb "github.com/cockroachdb/pebble/v2"
)

// TestLoadRows checks that loadRows reads the same state of many rows whether its scan
// of their range reads them all, stops early for a range crowded with other keys, or
// (fewer rows than scanRowsMin) looks each one up: stored or not, version, properties
// when asked for, in any order of the rows, with rows before, among and after the
// stored keys, and across a flush (keys in the memtable and in sstables).
func TestLoadRows(t *testing.T) {
	ctx := context.Background()
	e := openTest(t, t.TempDir(), Options{})
	if err := e.CreateTable(ctx, "acct", "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	tb, err := e.lookup("acct", "T")
	if err != nil {
		t.Fatal(err)
	}
	// Stored: every third of k000…k299, and o0000…o2999 (other keys, crowding the
	// range of the "crowded" rows), half of them flushed to sstables.
	versions := map[string]int64{}
	store := func(rks []string) {
		var muts []storage.Mutation
		for _, rk := range rks {
			muts = append(muts, storage.Mutation{Op: storage.Insert, RowKey: rk, Props: []entity.Property{{Name: "RK", Value: entity.StringValue(rk)}}})
		}
		res, err := e.Apply(ctx, "acct", "T", "p", muts)
		if err != nil {
			t.Fatal(err)
		}
		for i, rk := range rks {
			versions[rk] = res.Versions[i]
		}
	}
	var some []string
	for i := 0; i < 300; i += 3 {
		some = append(some, fmt.Sprintf("k%03d", i))
	}
	store(some[:50])
	for i := 0; i < 3000; i += 100 {
		var others []string
		for j := i; j < i+100; j++ {
			others = append(others, fmt.Sprintf("o%04d", j))
		}
		store(others)
	}
	if err := e.db.Flush(); err != nil {
		t.Fatal(err)
	}
	store(some[50:])

	check := func(name string, rks []string, needProps bool) {
		t.Helper()
		rows := make([]row, len(rks))
		for i, rk := range rks {
			rows[i] = row{key: dataKey(tb.id, "p", rk), rk: rk}
		}
		if err := e.loadRows(rows, needProps, e.clock.Now()); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i, rk := range rks {
			r := &rows[i]
			want, stored := versions[rk]
			if r.stored != stored || r.Exists != stored || r.Version != want {
				t.Errorf("%s: %s: stored %v exists %v version %d, want stored %v version %d", name, rk, r.stored, r.Exists, r.Version, stored, want)
			}
			if stored && needProps {
				props, err := entity.DecodeProps(r.Encoded)
				if err != nil || len(props) != 1 || props[0].Value.Str != rk {
					t.Errorf("%s: %s: properties %v (%v)", name, rk, props, err)
				}
			} else if r.Encoded != nil {
				t.Errorf("%s: %s: properties read without being asked for", name, rk)
			}
		}
	}
	var dense []string // k000…k299 and beyond, a third of them stored
	for i := 0; i < 320; i++ {
		dense = append(dense, fmt.Sprintf("k%03d", i))
	}
	rand.Shuffle(len(dense), func(i, j int) { dense[i], dense[j] = dense[j], dense[i] })
	check("dense", dense, false)
	check("dense with properties", dense[:100], true)
	var edges []string // before, among and after the stored keys, by the hundred
	for i := 0; i < 4000; i += 100 {
		edges = append(edges, fmt.Sprintf("k%03d", i/20), fmt.Sprintf("o%04d", i+50), fmt.Sprintf("p%04d", i))
	}
	check("edges", edges, true)
	crowded := []string{"o0007", "o0500", "o0500x", "o1000", "o1999", "o2999", "o3000", "o", "o2", "o25000"}
	check("crowded", crowded, false) // ~3000 other keys in range: the scan stops early
	check("crowded with properties", crowded, true)
	check("few", []string{"k003", "k004", "o0001"}, true) // fewer than scanRowsMin
}

// TestApplyReadsRowCache checks that an Apply of a row the row cache holds reads the
// row's state from it (the row is deleted from Pebble behind the cache's back, and an
// Insert is still refused), and that the state is used in full: a merge extends the
// cached properties with a later version, and a cached row whose expiry has passed
// since it was cached counts as absent, as a read of Pebble would have it.
func TestApplyReadsRowCache(t *testing.T) {
	ctx := context.Background()
	var now atomic.Int64
	now.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := storage.NewClock(func() time.Time { return time.Unix(0, now.Load()) })
	e := openTest(t, t.TempDir(), Options{Clock: clock})
	if err := e.CreateTable(ctx, "acct", "T", storage.TableSettings{Elastic: true}); err != nil {
		t.Fatal(err)
	}
	tb, err := e.lookup("acct", "T")
	if err != nil {
		t.Fatal(err)
	}
	key := appendDataKey(nil, tb.id, "p", "a")
	prop := func(name string, v int32) []entity.Property {
		return []entity.Property{{Name: name, Value: entity.Int32Value(v)}}
	}
	apply := func(op storage.Op, props []entity.Property, expiry int64) (int64, error) {
		res, err := e.Apply(ctx, "acct", "T", "p", []storage.Mutation{{Op: op, RowKey: "a", Props: props, Expiry: expiry}})
		if err != nil {
			return 0, err
		}
		return res.Versions[0], nil
	}
	names := func() []string {
		rec, err := e.Get(ctx, "acct", "T", "p", "a")
		if err != nil {
			t.Fatal(err)
		}
		var ns []string
		for _, p := range rec.Entity.Props {
			ns = append(ns, p.Name)
		}
		return ns
	}
	v1, err := apply(storage.Insert, prop("X", 1), entity.TimeToTicks(time.Unix(0, now.Load()).Add(10*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	names() // fills the cache
	if _, ok := cachedValue(e.rows, key); !ok {
		t.Fatal("a point read did not fill the row cache")
	}
	if err := e.db.Delete(key, pebbledb.Sync); err != nil {
		t.Fatal(err)
	}
	if _, err := apply(storage.Insert, prop("Y", 2), 0); !errors.Is(err, storage.ErrExists) {
		t.Fatalf("Insert of a cached row: %v, want ErrExists", err)
	}
	v2, err := apply(storage.InsertOrMerge, prop("Y", 2), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(); v2 <= v1 || len(got) != 2 || got[0] != "X" || got[1] != "Y" {
		t.Fatalf("merge into the cached row: version %d after %d, properties %v", v2, v1, got)
	}

	// Cached while live, expired by the time it is written.
	if _, err := apply(storage.Replace, prop("X", 1), entity.TimeToTicks(time.Unix(0, now.Load()).Add(10*time.Second))); err != nil {
		t.Fatal(err)
	}
	names()
	if _, ok := cachedValue(e.rows, key); !ok {
		t.Fatal("a point read did not fill the row cache")
	}
	now.Add(int64(20 * time.Second))
	v3, err := apply(storage.Insert, prop("Z", 3), 0)
	if err != nil {
		t.Fatalf("Insert over an expired cached row: %v", err)
	}
	if got := names(); v3 <= v2 || len(got) != 1 || got[0] != "Z" {
		t.Fatalf("insert over an expired cached row: version %d after %d, properties %v", v3, v2, got)
	}
}
