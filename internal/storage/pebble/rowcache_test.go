package pebble

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// cachedValue returns the value c holds for key, if any.
func cachedValue(c *rowCache, key []byte) ([]byte, bool) {
	var got []byte
	hit, _ := c.get(key, func(v []byte) { got = append([]byte(nil), v...) })
	return got, hit
}

func TestRowCacheFillAndInvalidate(t *testing.T) {
	c := newRowCache(rowCacheShards * 64 << 10)
	k, v := []byte("key"), []byte("value")
	hit, tok := c.get(k, func([]byte) { t.Fatal("empty cache hit") })
	if hit || tok.s == nil {
		t.Fatalf("miss: hit %v, token %v", hit, tok)
	}
	c.fill(tok, k, v)
	v[0] = 'X' // the cache holds its own copy
	if got, ok := cachedValue(c, k); !ok || string(got) != "value" {
		t.Fatalf("after fill: %q, %v", got, ok)
	}

	// A write pending: its entry is gone and a miss in its shard fills nothing.
	c.begin([]row{{key: k}})
	if _, ok := cachedValue(c, k); ok {
		t.Fatal("begin left the entry")
	}
	_, tok = c.get(k, func([]byte) {})
	if tok.s != nil {
		t.Fatal("a miss while a write is pending got a token that fills")
	}
	c.end([]row{{key: k}})

	// A write that begins and ends between a read's token and its fill wins.
	_, tok = c.get(k, func([]byte) {})
	c.begin([]row{{key: k}})
	c.end([]row{{key: k}})
	c.fill(tok, k, []byte("stale"))
	if got, ok := cachedValue(c, k); ok {
		t.Fatalf("a fill from before a write was kept: %q", got)
	}
	_, tok = c.get(k, func([]byte) {})
	c.fill(tok, k, []byte("fresh"))
	if got, ok := cachedValue(c, k); !ok || string(got) != "fresh" {
		t.Fatalf("a fill after the write: %q, %v", got, ok)
	}

	// Values over an eighth of a shard are not kept.
	big := make([]byte, c.maxValue)
	_, tok = c.get([]byte("big"), func([]byte) {})
	c.fill(tok, []byte("big"), big)
	if _, ok := cachedValue(c, []byte("big")); ok {
		t.Fatal("a value larger than maxValue was cached")
	}
	if newRowCache(1<<10) != nil {
		t.Fatal("a cache too small to hold anything was made")
	}
	var off *rowCache
	if hit, tok := off.get(k, nil); hit || tok.s != nil {
		t.Fatal("a nil cache hit or gave a token")
	}
	off.begin([]row{{key: k}})
	off.end([]row{{key: k}})
}

// TestRowCacheEviction fills one shard past its bound: the oldest entries not read again go,
// one that was read again stays, and the charged size stays within the bound.
func TestRowCacheEviction(t *testing.T) {
	c := newRowCache(rowCacheShards * 16 << 10) // 16 KiB a shard, entries of ~1.1 KiB
	first, keys := oneShard(c, 40)
	val := bytes.Repeat([]byte{'v'}, 1000)
	put := func(k []byte) { readFill(c, k, val) }
	for _, k := range keys[:10] {
		put(k)
	}
	if _, ok := cachedValue(c, keys[0]); !ok { // keys[0] is now the most recent
		t.Fatal("keys[0] not cached")
	}
	for _, k := range keys[10:] {
		put(k)
		if first.size > first.max {
			t.Fatalf("shard holds %d bytes, bound %d", first.size, first.max)
		}
		cachedValue(c, keys[0])
	}
	if _, ok := cachedValue(c, keys[0]); !ok {
		t.Fatal("the entry read after every fill was evicted")
	}
	if _, ok := cachedValue(c, keys[1]); ok {
		t.Fatal("the least recently used entry was kept")
	}
	if n := len(first.entries); n < 10 || n > 15 {
		t.Fatalf("shard holds %d entries of ~1.1 KiB in 16 KiB", n)
	}
	if _, _, size := c.stats(); size != int64(first.size) {
		t.Fatalf("stats size %d, shard %d", size, first.size)
	}
}

// getCounter reads row's N, with GetEncoded (the path of a point read answered as it is
// stored) and then with Get (decoded), and reports whether the cache answered the first.
func getCounter(t *testing.T, e *Engine, table, row string) (int64, bool) {
	t.Helper()
	hits := rowCacheHits(e)
	enc, err := e.GetEncoded(context.Background(), "a", table, "p", row)
	if err != nil {
		t.Fatalf("GetEncoded %s: %v", row, err)
	}
	hit := rowCacheHits(e) > hits
	props, err := entity.DecodeProps(enc.Encoded)
	if err != nil || len(props) != 1 {
		t.Fatalf("GetEncoded %s: %+v (%v)", row, props, err)
	}
	rec, err := e.Get(context.Background(), "a", table, "p", row)
	if err != nil {
		t.Fatalf("Get %s: %v", row, err)
	}
	if len(rec.Entity.Props) != 1 || rec.Version != enc.Version || props[0].Value.Int != rec.Entity.Props[0].Value.Int {
		t.Fatalf("Get and GetEncoded of %s differ: %+v, %+v", row, rec, props)
	}
	return props[0].Value.Int, hit
}

func counter(n int64) []entity.Property {
	return []entity.Property{{Name: "N", Value: entity.Int64Value(n)}}
}

// TestRowCacheSeesEveryWrite reads rows into the cache and writes them every way an Apply
// can: each read after a write sees the write, from the cache once it is filled again.
func TestRowCacheSeesEveryWrite(t *testing.T) {
	ctx := context.Background()
	e := openTest(t, t.TempDir(), Options{})
	if err := e.CreateTable(ctx, "a", "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	apply := func(muts ...storage.Mutation) {
		t.Helper()
		if _, err := e.Apply(ctx, "a", "T", "p", muts); err != nil {
			t.Fatal(err)
		}
	}
	apply(storage.Mutation{Op: storage.Insert, RowKey: "r", Props: counter(1)})
	getCounter(t, e, "T", "r")
	if n, hit := getCounter(t, e, "T", "r"); n != 1 || !hit {
		t.Fatalf("second read: N=%d, from the cache %v", n, hit)
	}
	steps := []struct {
		name string
		muts []storage.Mutation
		want int64
	}{
		{"replace", []storage.Mutation{{Op: storage.Replace, RowKey: "r", Props: counter(2)}}, 2},
		{"merge", []storage.Mutation{{Op: storage.Merge, RowKey: "r", Props: counter(3)}}, 3},
		{"insert-or-replace", []storage.Mutation{{Op: storage.InsertOrReplace, RowKey: "r", Props: counter(4)}}, 4},
		{"insert-or-merge", []storage.Mutation{{Op: storage.InsertOrMerge, RowKey: "r", Props: counter(5)}}, 5},
		{"batch", []storage.Mutation{
			{Op: storage.Replace, RowKey: "r", Props: counter(6)},
			{Op: storage.Insert, RowKey: "s", Props: counter(60)},
		}, 6},
		{"delete and insert in one batch", []storage.Mutation{
			{Op: storage.Delete, RowKey: "r"},
			{Op: storage.Insert, RowKey: "r", Props: counter(7)},
		}, 7},
	}
	for _, s := range steps {
		apply(s.muts...)
		if n, hit := getCounter(t, e, "T", "r"); n != s.want || hit {
			t.Fatalf("after %s: N=%d (want %d), from the cache %v", s.name, n, s.want, hit)
		}
		if n, hit := getCounter(t, e, "T", "r"); n != s.want || !hit {
			t.Fatalf("after %s, again: N=%d (want %d), from the cache %v", s.name, n, s.want, hit)
		}
	}
	apply(storage.Mutation{Op: storage.Delete, RowKey: "r"})
	if _, err := e.Get(ctx, "a", "T", "p", "r"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Get after delete: %v", err)
	}

	// A table deleted and created again under its name has none of the old rows.
	getCounter(t, e, "T", "s")
	if err := e.DeleteTable(ctx, "a", "T"); err != nil {
		t.Fatal(err)
	}
	if err := e.CreateTable(ctx, "a", "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Get(ctx, "a", "T", "p", "s"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Get in the table created again: %v", err)
	}

	// An entity read into the cache expires there as in Pebble.
	if err := e.CreateTable(ctx, "a", "E", storage.TableSettings{Elastic: true, DefaultTTL: 1}); err != nil {
		t.Fatal(err)
	}
	v, err := e.Apply(ctx, "a", "E", "p", []storage.Mutation{{Op: storage.Insert, RowKey: "x", Props: counter(1)}})
	if err != nil {
		t.Fatal(err)
	}
	getCounter(t, e, "E", "x")
	waitUntilExpired(v.Versions[0], 1)
	hits := rowCacheHits(e)
	if _, err := e.GetEncoded(ctx, "a", "E", "p", "x"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("GetEncoded of an expired entity: %v", err)
	}
	if rowCacheHits(e) == hits {
		t.Fatal("the expired entity was not read from the cache")
	}
}

// TestRowCacheRecordsShareEntries: a record read from the cache shares the entry's bytes
// (no copy per hit), so those bytes must stay as they were for as long as the record is
// held — through a write of its row, the entry filled again, and the shard's entries
// evicted many times over — and an append to the record's properties must not reach the
// cache.
func TestRowCacheRecordsShareEntries(t *testing.T) {
	ctx := context.Background()
	// 4 KiB per shard: a few entities of ~300 bytes each, so other rows evict quickly.
	e := openTest(t, t.TempDir(), Options{RowCacheSize: rowCacheShards * 4 << 10})
	if err := e.CreateTable(ctx, "a", "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	props := func(n int64) []entity.Property {
		return []entity.Property{{Name: "N", Value: entity.Int64Value(n)}, {Name: "Pad", Value: entity.StringValue(string(bytes.Repeat([]byte{'a' + byte(n%26)}, 256)))}}
	}
	put := func(op storage.Op, rk string, n int64) {
		t.Helper()
		if _, err := e.Apply(ctx, "a", "T", "p", []storage.Mutation{{Op: op, RowKey: rk, Props: props(n)}}); err != nil {
			t.Fatal(err)
		}
	}
	hit := func(rk string) storage.Record {
		t.Helper()
		for range 2 { // the first read may fill
			hits := rowCacheHits(e)
			rec, err := e.GetEncoded(ctx, "a", "T", "p", rk)
			if err != nil {
				t.Fatal(err)
			}
			if rowCacheHits(e) > hits {
				return rec
			}
		}
		t.Fatalf("%s: no read from the cache", rk)
		return storage.Record{}
	}
	put(storage.Insert, "r", 1)
	held := hit("r")
	want := bytes.Clone(held.Encoded)

	// An append to the record copies: the next hit reads what was cached.
	grown := append(held.Encoded, 0xff)
	grown[0] ^= 0xff
	if again := hit("r"); !bytes.Equal(again.Encoded, want) {
		t.Fatal("an append to a record's properties changed the cached entry")
	}

	put(storage.Replace, "r", 2)
	if rec := hit("r"); bytes.Equal(rec.Encoded, want) {
		t.Fatal("the replaced row was read as it was")
	}
	for i := range 2000 {
		rk := fmt.Sprintf("o%d", i)
		put(storage.Insert, rk, int64(i))
		hit(rk)
	}
	if !bytes.Equal(held.Encoded, want) {
		t.Fatal("a record read from the cache changed after its entry was replaced and evicted")
	}
	got, err := entity.DecodeProps(held.Encoded)
	if err != nil || len(got) != 2 || got[0].Value.Int != 1 {
		t.Fatalf("held record: %+v, %v", got, err)
	}
}

// TestRowCacheRaces sets up, with the test hooks, the interleavings the invalidation
// exists for: a read that read the old value from Pebble fills only if no write
// intervened, and while a write is pending nothing of its shard is filled.
func TestRowCacheRaces(t *testing.T) {
	ctx := context.Background()
	e := openTest(t, t.TempDir(), Options{})
	if err := e.CreateTable(ctx, "a", "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	tb, _ := e.lookup("a", "T")
	key := appendDataKey(nil, tb.id, "p", "r")
	replace := func(n int64) {
		t.Helper()
		if _, err := e.Apply(ctx, "a", "T", "p", []storage.Mutation{{Op: storage.InsertOrReplace, RowKey: "r", Props: counter(n)}}); err != nil {
			t.Fatal(err)
		}
	}
	replace(1)

	// A whole write between a read's Pebble read and its fill: the fill is refused.
	testHookBeforeFill = func() {
		testHookBeforeFill = nil
		replace(2)
	}
	if rec, err := e.GetEncoded(ctx, "a", "T", "p", "r"); err != nil || rec.Version == 0 {
		t.Fatalf("the read that raced the write: %v", err)
	} else if props, _ := entity.DecodeProps(rec.Encoded); props[0].Value.Int != 1 {
		t.Fatalf("the read that raced the write: N=%d", props[0].Value.Int)
	}
	testHookBeforeFill = nil
	if n, hit := getCounter(t, e, "T", "r"); n != 2 || hit {
		t.Fatalf("after the write: N=%d, from the cache %v (the racing read filled the old value)", n, hit)
	}

	// A write pending (its rows removed, its batch not yet visible): reads go to Pebble,
	// see the old value, and fill nothing; the entry cached before is gone.
	if _, hit := getCounter(t, e, "T", "r"); !hit {
		t.Fatal("not cached before the write")
	}
	testHookBeforeCommit = func() {
		testHookBeforeCommit = nil
		if _, ok := cachedValue(e.rows, key); ok {
			t.Error("the entry stayed cached while its write was pending")
		}
		if n, hit := getCounter(t, e, "T", "r"); n != 2 || hit {
			t.Errorf("read during the write: N=%d, from the cache %v", n, hit)
		}
		if _, ok := cachedValue(e.rows, key); ok {
			t.Error("a read filled the cache while a write of the row was pending")
		}
	}
	replace(3)
	testHookBeforeCommit = nil
	if n, _ := getCounter(t, e, "T", "r"); n != 3 {
		t.Fatalf("after the write: N=%d", n)
	}
}

// TestRowCacheConcurrent runs writers and readers of a few rows at once: a read that
// starts after a write was acknowledged sees it or a later one, never an older value,
// and each reader's reads of a row never go back.
func TestRowCacheConcurrent(t *testing.T) {
	ctx := context.Background()
	e := openTest(t, t.TempDir(), Options{RowCacheSize: 1 << 20})
	if err := e.CreateTable(ctx, "a", "T", storage.TableSettings{}); err != nil {
		t.Fatal(err)
	}
	const rows = 4
	var acked [rows]atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	for r := range rows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := int64(1); ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				_, err := e.Apply(ctx, "a", "T", "p", []storage.Mutation{{Op: storage.InsertOrReplace, RowKey: fmt.Sprint(r), Props: counter(n)}})
				if err != nil {
					errc <- err
					return
				}
				acked[r].Store(n)
			}
		}()
	}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var seen [rows]int64
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r := i % rows
				floor := acked[r].Load()
				rec, err := e.GetEncoded(ctx, "a", "T", "p", fmt.Sprint(r))
				if errors.Is(err, storage.ErrNotFound) && floor == 0 {
					continue
				}
				if err != nil {
					errc <- err
					return
				}
				props, err := entity.DecodeProps(rec.Encoded)
				if err != nil {
					errc <- err
					return
				}
				n := props[0].Value.Int
				if n < floor || n < seen[r] {
					errc <- fmt.Errorf("row %d: read N=%d after the write of %d was acknowledged and %d was read", r, n, floor, seen[r])
					return
				}
				seen[r] = n
			}
		}()
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if h, m, _ := e.rows.stats(); h == 0 || m == 0 {
		t.Fatalf("the readers never hit (%d) or never missed (%d): the test tried nothing", h, m)
	}
}

// rowCacheHits is the engine's row cache hits so far.
func rowCacheHits(e *Engine) uint64 {
	h, _, _ := e.rows.stats()
	return h
}

// TestRowCacheSecondChance fills a shard with entries that are all read again, then
// fills one more: the newcomer is cached (not evicted for being the only unread entry),
// the oldest entry makes room, and the others, spared once, stay.
func TestRowCacheSecondChance(t *testing.T) {
	c := newRowCache(rowCacheShards * 16 << 10) // 16 KiB a shard, entries of ~1.1 KiB
	first, keys := oneShard(c, 20)
	val := bytes.Repeat([]byte{'v'}, 1000)
	put := func(k []byte) { readFill(c, k, val) }
	n := first.max / (len(keys[0]) + len(val) + rowEntryOverhead) // what fits (keys of 2-3 bytes)
	for _, k := range keys[:n] {
		put(k)
	}
	if len(first.entries) != n {
		t.Fatalf("shard holds %d entries, want %d", len(first.entries), n)
	}
	for _, k := range keys[:n] { // every entry read again
		if _, ok := cachedValue(c, k); !ok {
			t.Fatalf("%s not cached", k)
		}
	}
	put(keys[n])
	if _, ok := cachedValue(c, keys[n]); !ok {
		t.Fatal("the new entry was evicted to make room for itself")
	}
	if first.size > first.max {
		t.Fatalf("shard holds %d bytes, bound %d", first.size, first.max)
	}
	if _, ok := cachedValue(c, keys[0]); ok {
		t.Fatal("the oldest entry was kept")
	}
	for _, k := range keys[1:n] {
		if _, ok := cachedValue(c, k); !ok {
			t.Fatalf("%s, read again, was evicted", k)
		}
	}
}

// BenchmarkRowCacheHit reads entries of 1 KiB at random from a cache of 64 MiB holding
// 40,000 of them (more than the processor's caches), from as many goroutines as Ps: what
// a hit costs when its entry, and whatever else a hit touches, is not already in cache.
func BenchmarkRowCacheHit(b *testing.B) {
	const n = 40000
	c := newRowCache(64 << 20)
	keys := make([][]byte, n)
	val := bytes.Repeat([]byte{'v'}, 1024)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("\x00\x00\x00\x01p\x00%08d", i))
		readFill(c, keys[i], val)
	}
	var seed atomic.Uint64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := rand.New(rand.NewPCG(seed.Add(1), 0))
		var sink int
		for pb.Next() {
			if ok, _ := c.get(keys[r.IntN(n)], func(v []byte) { sink += len(v) }); !ok {
				b.Error("miss")
				return
			}
		}
		_ = sink
	})
}

// oneShard returns n keys that c puts in one shard, and the shard.
func oneShard(c *rowCache, n int) (*rowShard, [][]byte) {
	first, _ := c.shard([]byte("k0"))
	var keys [][]byte
	for i := 0; len(keys) < n; i++ {
		k := []byte(fmt.Sprintf("k%d", i))
		if s, _ := c.shard(k); s == first {
			keys = append(keys, k)
		}
	}
	return first, keys
}

// readFill reads k from c and, on a miss, fills it with val, as a point read does.
func readFill(c *rowCache, k, val []byte) {
	if ok, tok := c.get(k, func([]byte) {}); !ok {
		c.fill(tok, k, val)
	}
}
