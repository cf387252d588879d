package pebble

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// rawSyncLimit is how long a WAL sync may take and the next one still be made without
// handing off the scheduler's P (see walSyncer): the longest time a garbage collection's
// stop-the-world may wait for it. Syncs take 0.3–1.2 ms on a local SSD or virtual disk;
// a disk slower than this limit has its syncs made as ordinary blocking system calls.
const rawSyncLimit = 2 * time.Millisecond

// walSyncer makes the WAL's data syncs, which every acknowledged write waits for, as
// raw system calls that keep the calling thread's P (Go's scheduler slot) for the
// sync's duration.
//
// Why: Go makes a system call holding its P, and sysmon takes the P away from a call
// that lasts longer than 20–40 µs, so that another thread can run goroutines on it. A
// WAL fdatasync lasts about a millisecond, so under a stream of synced writes every
// sync lost its P: sysmon, which naps only 20 µs while it keeps finding Ps to take,
// woke about 4,000 times a second (1,200 with raw syncs), handed the P to another
// thread, and the returning syncer found no P and parked, delaying the wake-up of all
// the writes the sync had made durable until a P came free. On two cores that was about a tenth of the server's CPU per
// insert and a longer turn of the group commit: with raw syncs, the server's synced
// inserts (--client raw, 32 connections) went from 7,655–8,989/s to 9,126–9,705/s
// and BenchmarkApplyInsert/writers=32 (-cpu 4) from 26,910–29,227 to 32,379–33,259
// inserts/s.
//
// The cost: while a raw sync runs, its P runs nothing else, and a stop-the-world
// (twice per garbage collection, about once a second under load) waits for the sync
// to end. The server runs with more Ps than cores (cmd/cerulean adds
// BackgroundProcs), and the syncer falls back to the blocking call when the previous
// sync took longer than rawSyncLimit, so a slow disk does not stretch the collector's
// pauses, or when the process has a single P, which a raw sync would stop entirely.
// What the limit cannot foresee is a sync that hangs (a stalled disk): a collection that
// starts meanwhile waits for it, and with it every request, where with blocking syncs
// only the writes would wait. Native AIO (IOCB_CMD_FDSYNC, its completion awaited in
// the network poller, so no P is held) avoids that, but was measured no faster than the
// blocking call. Files without a descriptor (in-memory file systems in tests) sync as
// they always do.
//
// Bypassing the file's own SyncData is safe because the engine's WAL files are
// vfs.Default's, whose SyncData is this same fdatasync, behind vfs.OnDiskFull, which
// passes syncs through (guardFS, under walFS).
type walSyncer struct {
	// limit is rawSyncLimit (a test shortens or lengthens it).
	limit time.Duration
	// blocking is set while the last sync took longer than limit.
	blocking atomic.Bool
	// raw is the raw fdatasync (rawFdatasync; nil where there is none); a test replaces
	// it.
	raw func(fd uintptr) error
	// rawSyncs counts the raw syncs; blockingSyncs those made as blocking calls while
	// raw ones were possible (the disk's syncs were slow).
	rawSyncs, blockingSyncs atomic.Uint64
}

func newWALSyncer() *walSyncer { return &walSyncer{raw: rawFdatasync, limit: rawSyncLimit} }

// syncData syncs f's data, as f.SyncData does.
func (w *walSyncer) syncData(f vfs.File) error {
	fd := f.Fd()
	if w == nil || w.raw == nil || fd == vfs.InvalidFd || runtime.GOMAXPROCS(0) < 2 {
		return f.SyncData()
	}
	start := time.Now()
	var err error
	if w.blocking.Load() {
		w.blockingSyncs.Add(1)
		err = f.SyncData()
	} else {
		w.rawSyncs.Add(1)
		err = w.raw(fd)
	}
	w.blocking.Store(time.Since(start) > w.limit)
	return err
}
