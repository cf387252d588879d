//go:build linux && cgo

package pebble

/*
#include <malloc.h>

static int trimMalloc(void) { return malloc_trim(0); }

static int fixMmapThreshold(int bytes) {
#ifdef M_MMAP_THRESHOLD
	return mallopt(M_MMAP_THRESHOLD, bytes);
#else
	return 0;
#endif
}
*/
import "C"

import (
	"os"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// mmapThreshold is the allocation size from which C malloc maps memory of its own, and
// returns it to the system on free: glibc's default, 128 KiB, made fixed.
const mmapThreshold = 128 << 10

var fixMallocOnce sync.Once

// cacheCapacity is the largest Pebble cache (blocks and memtables) an engine of the
// process was opened with: what C malloc may hold for Pebble (trimArenas).
var cacheCapacity atomic.Int64

// trimSlack is how far C malloc's memory may grow past cacheCapacity, and past what the
// last trim left, before trimArenas hands the arenas' free memory back; trimCheck is how
// often it looks.
const (
	trimSlack = 32 << 20
	trimCheck = time.Second
)

// fixMalloc pins glibc's mmap threshold. With cgo, Pebble allocates its block cache and
// memtables with C malloc; glibc raises the threshold to the size of every mapped block
// it frees (up to 32 MiB), so after the first large value leaves the cache, the next ones
// (a value separated into a blob file is one block, up to 1 MiB per entity) come from the
// malloc arenas, which keep freed memory. Paging through 1,000 entities of 1 MB then
// left the process some 70 MB above what the cache may hold (190 MB resident instead of
// 120 MB), and CacheSize no longer capped Pebble's memory as Options promises. Pinning
// the threshold disables that adjustment: large blocks are mapped and unmapped, small
// ones (ordinary sstable blocks) are unaffected. It is process-wide and harmless to
// other C allocations; where M_MMAP_THRESHOLD does not exist (non-glibc libc) it does
// nothing.
//
// It also records capacity, the cache's, and starts trimArenas, once per process.
func fixMalloc(capacity int64) {
	for c := cacheCapacity.Load(); capacity > c && !cacheCapacity.CompareAndSwap(c, capacity); c = cacheCapacity.Load() {
	}
	fixMallocOnce.Do(func() {
		C.fixMmapThreshold(C.int(mmapThreshold))
		go trimArenas()
	})
}

// trimArenas hands the free memory of glibc's malloc arenas back to the system
// (malloc_trim) once the process's anonymous memory outside the Go runtime has grown
// trimSlack past both the Pebble cache's capacity and what it was after the last trim.
// The block cache's blocks (up to 128 KiB; larger ones are mapped, see mmapThreshold)
// come from the arenas, one per thread that allocates, up to eight per core; an evicted
// block frees its chunk to its arena, which keeps it, since glibc returns only the free
// top of an arena by itself. A scan of a large store replaces the cache's blocks
// continually: after 10 million 1 KiB entities were loaded and scanned the process was
// 408 MiB resident, 140 MiB of it free chunks beside the 96 MiB the cache may hold, and
// one malloc_trim brought it to 272 MiB. malloc_trim also releases the free pages inside
// the arenas (madvise), but it locks each arena while it walks its chunks, about 55 ms of
// CPU in all under such a scan: called every second it took 6 % of the server's CPU, so
// it runs only when there is that much more to give back than the last trim left (what
// it cannot give back is pages shared with live chunks). The check (one read of
// /proc/self/statm and of the runtime's memory figures) costs microseconds. It runs for
// the life of the process: the arenas are the process's, whatever engines it opens and
// closes.
func trimArenas() {
	f, err := os.Open("/proc/self/statm")
	if err != nil {
		return
	}
	defer f.Close()
	page := int64(os.Getpagesize())
	samples := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	buf := make([]byte, 256)
	// outside is the process's anonymous memory the Go runtime does not hold: C malloc's.
	outside := func() (int64, bool) {
		n, err := f.ReadAt(buf, 0)
		if n == 0 && err != nil {
			return 0, false
		}
		resident, shared, ok := statm(buf[:n])
		metrics.Read(samples)
		return (resident-shared)*page - int64(samples[0].Value.Uint64()-samples[1].Value.Uint64()), ok
	}
	var after int64 // outside after the last trim
	for range time.Tick(trimCheck) {
		o, ok := outside()
		if !ok {
			return
		}
		if o > max(cacheCapacity.Load(), after)+trimSlack {
			C.trimMalloc()
			if after, ok = outside(); !ok {
				return
			}
		}
	}
}
