//go:build linux && cgo

package pebble

/*
#include <malloc.h>

static int fixMmapThreshold(int bytes) {
#ifdef M_MMAP_THRESHOLD
	return mallopt(M_MMAP_THRESHOLD, bytes);
#else
	return 0;
#endif
}
*/
import "C"

import "sync"

// mmapThreshold is the allocation size from which C malloc maps memory of its own, and
// returns it to the system on free: glibc's default, 128 KiB, made fixed.
const mmapThreshold = 128 << 10

var fixMallocOnce sync.Once

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
func fixMalloc() {
	fixMallocOnce.Do(func() { C.fixMmapThreshold(C.int(mmapThreshold)) })
}
