// Package membudget derives the server's memory budgets from one limit (--memory-limit):
// the Pebble block cache, the memtables, the row cache, the request bodies in flight,
// the garbage collector's headroom and the Go runtime's soft memory limit, so that the
// process's resident memory stays under the limit whatever the data size.
//
// What a server holds, and what bounds each part:
//
//   - Base: the binary's code and data mapped in (about 30 MiB of an idle server's 34 MiB), the Go runtime's own structures, goroutine and thread stacks, C malloc's
//     arenas, Pebble's table cache of open sstable and blob readers (at most 1,000 files,
//     their index and filter blocks in the block cache), the hot-partition sketch and the
//     metrics (fixed size). A constant, Base.
//   - Pebble's block cache and memtables: Pebble charges the memtables to its cache, and
//     with cgo allocates both with C malloc, outside the Go heap (pebble.Options).
//   - The row cache: the values point reads read, in the Go heap, bounded by its size.
//   - Request bodies held while they are received and decoded, all requests together
//     (server.Limits.MaxBodyMemory), in the Go heap; a request past it gets 503.
//   - Everything else in the Go heap: each request's working memory, response buffers
//     (written in slices, never a whole page), sync.Pool buffers, and garbage between
//     collections. The Go runtime's soft limit (debug.SetMemoryLimit, GoLimit) bounds the
//     Go heap with them, collecting more often as it nears it.
//
// The formula (Derive): with L the limit,
//
//	Bodies       = max(L/8, MinBodies)
//	R            = L − Base − Bodies
//	BlockCache   = MemTableSize = RowCache = R/12 (MemTableSize at most MaxMemTableSize,
//	               the rest to the block cache)
//	Pebble       = BlockCache + MemTables × MemTableSize
//	GoLimit      = L − Base − Pebble (L − Base without cgo, where Pebble's memory is Go heap)
//	GCHeadroom   = min(DefaultGCHeadroom, R/4)
//
// so Base + Pebble + RowCache + Bodies ≤ L − R/2: half of R, at least, is left to the
// rest of the Go heap. The default, 512 MiB, gives what the fixed defaults gave before
// there was a limit (32 MiB each of block cache, memtable and row cache, 64 MiB of
// bodies, 64 MiB of GC headroom), and a Go limit of 352 MiB.
package membudget

import "fmt"

const (
	// DefaultLimit is the limit of a server not given one: right for a laptop or a small
	// container, and about the budgets the server had before there was a limit.
	DefaultLimit = 512 << 20
	// MinLimit is the smallest limit accepted: Base and MinBodies leave 48 MiB for
	// Pebble, the row cache and the rest of the heap (memtables of 4 MiB).
	MinLimit = 160 << 20
	// Base is what the process holds beside the budgets (see the package comment), with
	// room to spare: an idle server was 34 MiB resident, 30 MiB of it the binary's mapped
	// code.
	Base = 64 << 20
	// MinBodies is the least body memory a server takes: one client may hold a quarter of
	// it in large bodies, and a 4 MiB batch holds up to 12 MiB while it is received,
	// decoded and answered (internal/server).
	MinBodies = 48 << 20
	// MemTables is how many memtables Pebble may hold (one filling, one flushing; pebble.
	// DefaultMemTableStopWritesThreshold).
	MemTables = 2
	// MinMemTableSize and MaxMemTableSize bound a derived memtable's size: smaller ones
	// flush too often to keep up with writes, larger ones take long to flush and replay.
	MinMemTableSize = 1 << 20
	MaxMemTableSize = 256 << 20
	// DefaultGCHeadroom is the largest garbage collector headroom (internal/gcfloor) given.
	DefaultGCHeadroom = 64 << 20
	// minWorking is the least Go heap left beside the row cache and the bodies when
	// overrides are given: the requests' working memory and the garbage between cycles.
	minWorking = 16 << 20
)

// Budget is what each memory holder may take, in bytes.
type Budget struct {
	Limit        int64 // the whole process
	BlockCache   int64 // Pebble's block cache, beside the memtables
	MemTableSize int64 // one Pebble memtable; MemTables of them at most
	RowCache     int64 // the Pebble engine's row cache; 0 is off
	Bodies       int64 // request bodies in flight, all requests (server.Limits.MaxBodyMemory)
	GCHeadroom   int64 // heap growth between collections (gcfloor)
	GoLimit      int64 // the Go runtime's soft memory limit (debug.SetMemoryLimit)
}

// Pebble is what Pebble's cache holds at most: the block cache and the memtables.
func (b Budget) Pebble() int64 { return b.BlockCache + MemTables*b.MemTableSize }

// Overrides are finer settings given beside the limit; a zero field is derived. RowCache
// may be Off, to turn the row cache off.
type Overrides struct {
	MemTableSize int64
	RowCache     int64
	Bodies       int64
}

// Off in Overrides.RowCache turns the row cache off.
const Off = -1

// Engine is which storage engine the budget is for.
type Engine int

const (
	// Pebble: the embedded engine, with block cache, memtables and row cache.
	Pebble Engine = iota
	// External: an engine in another process (PostgreSQL); the server holds no cache of
	// rows, and R goes to the Go heap.
	External
)

// Derive computes the budgets of a server limited to limit bytes (see the package
// comment), with o's settings in place of the derived ones. It fails if the limit is
// under MinLimit or if the overrides leave less than minWorking of Go heap under it.
func Derive(limit int64, e Engine, o Overrides) (Budget, error) {
	if limit < MinLimit {
		return Budget{}, fmt.Errorf("memory limit %s: want at least %s", Size(limit), Size(MinLimit))
	}
	b := Budget{Limit: limit, Bodies: max(limit/8, MinBodies)}
	if o.Bodies > 0 {
		b.Bodies = o.Bodies
	}
	r := limit - Base - b.Bodies
	share := roundMiB(r / 12)
	if e == Pebble {
		b.MemTableSize = min(max(share, MinMemTableSize), MaxMemTableSize)
		b.BlockCache = max(share+MemTables*(share-b.MemTableSize), 0)
		b.RowCache = share
		if o.MemTableSize > 0 {
			b.MemTableSize = o.MemTableSize
		}
		switch {
		case o.RowCache == Off:
			b.RowCache = 0
		case o.RowCache > 0:
			b.RowCache = o.RowCache
		}
	}
	b.GCHeadroom = min(DefaultGCHeadroom, roundMiB(max(r, 0)/4))
	b.GoLimit = limit - Base
	if pebbleOffHeap {
		b.GoLimit -= b.Pebble()
	}
	if spare := limit - Base - b.Pebble() - b.RowCache - b.Bodies; spare < minWorking {
		return Budget{}, fmt.Errorf("memory limit %s is too small for %s: the process takes %s beside them, and the Go heap needs %s more",
			Size(limit), b.held(), Size(Base), Size(minWorking))
	}
	return b, nil
}

// held names the holders' sizes, for an error.
func (b Budget) held() string {
	return fmt.Sprintf("a block cache of %s, %d memtables of %s, a row cache of %s and %s of request bodies",
		Size(b.BlockCache), MemTables, Size(b.MemTableSize), Size(b.RowCache), Size(b.Bodies))
}

// roundMiB rounds n down to a whole MiB when it is at least one, so budgets read well.
func roundMiB(n int64) int64 {
	if n < 1<<20 {
		return max(n, 0)
	}
	return n &^ (1<<20 - 1)
}

// Size formats n bytes as the flags take them: 512MiB, 1GiB, 4KiB or 100.
func Size(n int64) string {
	for _, u := range []struct {
		s string
		v int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.v == 0 {
			return fmt.Sprintf("%d%s", n/u.v, u.s)
		}
	}
	if n >= 1<<20 {
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	}
	return fmt.Sprint(n)
}
