package pebble

import (
	"bytes"
	"hash/maphash"
	"sync"
)

// rowCache keeps the stored values of recently read entities by data key, so that a point
// read of a hot entity costs a hash and a copy instead of Pebble's search of every
// memtable (a skiplist walk of a cache miss per level) and of the levels below. Only
// point reads fill it; scans, queries and writes never do, so a load or a table scan
// does not flush it.
//
// It is exact: a read answered from the cache returns what a read of Pebble would at
// that moment (the latest visible state), never an older one. A write invalidates the
// keys it writes twice, under their row locks: begin, before its batch becomes visible,
// removes them, and end, once it is visible (or has failed), marks the write done. Each
// invalidation changes its shard's sequence, and begin..end counts as pending in the
// shard. A read that misses takes a token (the shard's sequence, or none while a write is
// pending there) before it reads Pebble, and may put what it read in the cache only if no
// write began or ended in the shard meanwhile. So a read that saw the old value cannot publish it
// after the write began (the sequence moved), nor while the write is pending; and a read
// that saw the new value from Pebble cannot be followed by a read that finds the old one
// in the cache, which begin removed before Pebble showed the new one. Expiry needs no
// invalidation: a cached value keeps its expiry, checked at every hit as Pebble reads
// are. Keys are table-id scoped, and ids are never reused, so a dropped table's entries
// are unreachable and age out.
//
// Its memory is bounded by its size in bytes (keys, values and a fixed overhead per
// entry), split evenly between shards, each evicting by CLOCK (second chance): a hit only
// marks its entry, and eviction, taking the oldest entries first, spares a marked one
// once, clearing its mark and making it the newest. That keeps what is read again as LRU
// would, but a hit writes nothing outside its own entry: moving it to the front of a
// recency list at every hit wrote two other entries' links, two cache misses on a random
// read: about a fifth of a random hit's time in BenchmarkRowCacheHit (median of 8 pairs).
// It is in the Go heap, where its entries are few pointers each (the bytes are one
// pointer-free block), so it adds little to the garbage collector's marking.
type rowCache struct {
	seed   maphash.Seed
	shards []rowShard
	// maxValue is the largest key and value an entry may hold: an eighth of a shard, so
	// one large entity cannot empty a shard of everything else.
	maxValue int
}

// rowCacheShards is how many independently locked parts the cache has.
const rowCacheShards = 64

// rowEntryOverhead is what an entry costs beyond its key and value bytes: the entry,
// the map slot and the allocation's rounding, roughly.
const rowEntryOverhead = 128

type rowShard struct {
	mu sync.Mutex
	// seq changes at every invalidation in the shard; pending counts the writes between
	// their begin and end.
	seq     uint64
	pending int
	entries map[uint64]*rowEntry // by the key's hash
	clock   rowEntry             // sentinel of the entries, newest (filled or spared) first
	size    int                  // bytes charged for the entries
	max     int
	// hits and misses count the shard's lookups; under mu, so that counting them does not
	// bounce one shared counter's cache line between the cores at every read.
	hits, misses uint64
	_            [64]byte // keeps neighbouring shards' locks off one cache line
}

// rowEntry is a cached value: buf holds the key, then the stored value. buf is written
// once, before the entry is published, and never again: readers keep slices of it.
type rowEntry struct {
	hash       uint64
	buf        []byte
	klen       int
	prev, next *rowEntry
	ref        bool // read since it was filled or last spared by eviction
}

// fillToken is what a read that missed may fill the cache with: the key's shard and hash,
// and the shard's sequence when the read began; a nil shard fills nothing.
type fillToken struct {
	s    *rowShard
	hash uint64
	seq  uint64
}

// newRowCache makes a cache of size bytes, or returns nil (no cache) for a size too
// small to hold anything useful.
func newRowCache(size int64) *rowCache {
	per := int(size / rowCacheShards)
	if per < 4<<10 {
		return nil
	}
	c := &rowCache{seed: maphash.MakeSeed(), shards: make([]rowShard, rowCacheShards), maxValue: per / 8}
	for i := range c.shards {
		s := &c.shards[i]
		s.entries = make(map[uint64]*rowEntry)
		s.clock.next, s.clock.prev = &s.clock, &s.clock
		s.max = per
	}
	return c
}

func (c *rowCache) shard(key []byte) (*rowShard, uint64) {
	h := maphash.Bytes(c.seed, key)
	return &c.shards[h%rowCacheShards], h
}

// get calls found with the cached value of key, under the shard's lock, and reports
// whether it was there. found may keep v: an entry's bytes are never changed or reused
// (an invalidation or eviction only drops the entry), so v stays what it was as long as
// it is referred to. On a miss it returns the token with which the caller may fill the
// cache from what it reads next. A nil cache misses, with a token that fills nothing.
func (c *rowCache) get(key []byte, found func(v []byte)) (bool, fillToken) {
	if c == nil {
		return false, fillToken{}
	}
	s, h := c.shard(key)
	s.mu.Lock()
	if e := s.entries[h]; e != nil && bytes.Equal(e.buf[:e.klen], key) {
		e.ref = true
		s.hits++
		found(e.buf[e.klen:])
		s.mu.Unlock()
		return true, fillToken{}
	}
	t := fillToken{s: s, hash: h, seq: s.seq}
	if s.pending > 0 {
		t.s = nil
	}
	s.misses++
	s.mu.Unlock()
	return false, t
}

// peek is get for a reader that holds key's row lock (Apply): no write of key can begin
// or end meanwhile, so a hit is the row's latest state and a miss needs no token. It
// counts neither (the hits and misses are point reads'), nor marks the entry read,
// since the write that follows removes it.
func (c *rowCache) peek(key []byte, found func(v []byte)) bool {
	s, h := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.entries[h]; e != nil && bytes.Equal(e.buf[:e.klen], key) {
		found(e.buf[e.klen:])
		return true
	}
	return false
}

// fill caches key's value v (copied), read from Pebble after get returned t, unless a
// write in the shard began or ended since.
func (c *rowCache) fill(t fillToken, key, v []byte) {
	if t.s == nil || len(key)+len(v) > c.maxValue {
		return
	}
	s, h := t.s, t.hash
	buf := make([]byte, len(key)+len(v))
	copy(buf, key)
	copy(buf[len(key):], v)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seq != t.seq { // a write began or ended since the token (a pending one gave none)
		return
	}
	if old := s.entries[h]; old != nil {
		s.remove(old) // another key of the same hash, or a concurrent fill of this one
	}
	// Room first, so that the new entry is not a candidate itself: in a shard whose
	// entries were all read again it would otherwise be the one left unmarked. Each
	// entry is spared at most once here, so this ends.
	need := len(buf) + rowEntryOverhead
	for s.size+need > s.max && s.clock.prev != &s.clock {
		old := s.clock.prev
		if old.ref { // a second chance: it stays, as the newest
			old.ref = false
			s.unlink(old)
			s.pushFront(old)
			continue
		}
		s.remove(old)
	}
	e := &rowEntry{hash: h, buf: buf, klen: len(key)}
	s.entries[h] = e
	s.pushFront(e)
	s.size += need
}

// begin invalidates the rows' keys before a write of them becomes visible; end, which
// must follow it with the same rows once the write is visible or has failed, completes
// that. The caller holds the rows' locks throughout.
func (c *rowCache) begin(rows []row) { c.invalidate(rows, 1) }
func (c *rowCache) end(rows []row)   { c.invalidate(rows, -1) }

func (c *rowCache) invalidate(rows []row, pending int) {
	if c == nil {
		return
	}
	for i := range rows {
		k := rows[i].key
		s, h := c.shard(k)
		s.mu.Lock()
		s.seq++
		s.pending += pending
		if e := s.entries[h]; e != nil && bytes.Equal(e.buf[:e.klen], k) {
			s.remove(e)
		}
		s.mu.Unlock()
	}
}

// stats returns the hits, misses and bytes held.
func (c *rowCache) stats() (hits, misses uint64, size int64) {
	if c == nil {
		return 0, 0, 0
	}
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		hits += s.hits
		misses += s.misses
		size += int64(s.size)
		s.mu.Unlock()
	}
	return hits, misses, size
}

func (s *rowShard) remove(e *rowEntry) {
	s.unlink(e)
	delete(s.entries, e.hash)
	s.size -= len(e.buf) + rowEntryOverhead
}

func (s *rowShard) unlink(e *rowEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
}

func (s *rowShard) pushFront(e *rowEntry) {
	e.prev, e.next = &s.clock, s.clock.next
	s.clock.next.prev = e
	s.clock.next = e
}
