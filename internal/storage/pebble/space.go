package pebble

// The disk space guard keeps the engine away from Pebble's fatal paths on a full volume.
//
// What Pebble v2.1.7 does when the disk fills (read in its sources, observed on a tmpfs):
//
//   - A commit whose WAL write or sync fails cannot be undone (the batch is already in the
//     memtable), so DB.Apply calls Logger.Fatalf("pebble: fatal commit error") (db.go,
//     applyInternal); a failed MANIFEST write is fatal too (version_set.go), and a failed
//     WAL rotation panics (db.go, rotateWAL). The process ends and every client, readers
//     included, is refused.
//   - A failed flush or compaction is reported to EventListener.BackgroundError and retried
//     at once, with no backoff (compaction.go, flush: "TODO(peter): count consecutive flush
//     errors and backoff"), each attempt leaving an empty blob file behind (on a 64 MiB
//     tmpfs: an attempt every ~10 ms, 4,000 files in 40 s); Open waits for the flush of the
//     WALs it replays, so a restart on a full disk never returns and logs a line per attempt.
//   - Each new WAL file is preallocated at 110% of MemTableSize (db.go,
//     walPreallocateSize; 35.2 MiB by default) even while the memtables of its ramp-up are
//     a few hundred KiB, and the space stays held until the WAL is deleted after a flush:
//     a near-full volume lost tens of MiB with no data behind them.
//
// So the guard (1) refuses writes before the volume is full: each write is admitted only
// if the free space, as of a recent statfs less what was admitted since, stays above a
// floor that leaves Pebble room to flush its memtables and compact; (2) keeps a ballast
// file in the data directory, released at once through vfs.OnDiskFull if the volume fills
// anyway (another process writing to it), so that the write that met ENOSPC is retried and
// Pebble can finish what it started; (3) leaves that state by itself once space returns;
// (4) slows Pebble's retries of flushes and compactions that ran out of space and logs
// only the state's changes; (5) caps WAL preallocation, so that the WAL's use of the disk
// follows the data written; and (6) refuses to open a volume too full to replay its WALs,
// with a message, rather than spin.

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ceruleandb/cerulean/internal/storage"
	pebbledb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// BallastName is the file in the data directory that holds part of the disk reserve (see
// Options.DiskReserve). It is only ever removed by the engine when the volume is full; an
// operator may delete it to free space while the server is stopped.
const BallastName = "EMERGENCY_BALLAST"

const (
	// spaceRefreshEvery is the longest time between two free-space readings while writes
	// arrive; in between, the bytes admitted are subtracted from the last reading.
	spaceRefreshEvery = 250 * time.Millisecond
	// spacePollEvery is how often a full engine looks for space to come back.
	spacePollEvery = 250 * time.Millisecond
	// spaceReportEvery is how often a full engine repeats that it is still full.
	spaceReportEvery = 10 * time.Minute
	// walPreallocateMax caps each preallocation of a WAL file (see walFile).
	walPreallocateMax = 1 << 20
	// backgroundRetryMin and backgroundRetryMax bound the pause before Pebble's next
	// attempt at a flush or compaction that failed for lack of space.
	backgroundRetryMin = time.Second
	backgroundRetryMax = 10 * time.Second
)

// errDiskFull is what a refused write returns.
var errDiskFull = fmt.Errorf("disk full: %w", storage.ErrNoSpace)

// spaceGuard tracks the free space of the data directory's volume and decides whether a
// write may go to Pebble. Its methods are safe for concurrent use; a nil guard admits
// everything (the guard is off).
type spaceGuard struct {
	dir         string
	ballastPath string
	ballastSize uint64
	// floor is the free space (not counting the ballast) below which writes are refused;
	// resume is the free space at or above which a full engine accepts them again, once
	// its ballast is back in place. resume - floor is the hysteresis that keeps the state
	// from flapping at the boundary.
	floor  uint64
	resume uint64

	statfs func() (uint64, error) // free bytes of the volume
	now    func() time.Time
	log    *slog.Logger

	mu sync.Mutex
	// onRecover runs (without locks held) after the engine leaves the full state.
	onRecover func()
	avail     uint64    // free bytes at the last reading
	checked   time.Time // when avail was read (zero: read before the next admission)
	pending   uint64    // bytes admitted since that reading
	inflight  uint64    // bytes admitted and not yet committed
	ballast   bool      // the ballast file is in place

	full        bool
	fullSince   time.Time
	lastReport  time.Time
	refused     uint64 // writes refused in this full period
	bgFailures  uint64 // flushes and compactions that failed for lack of space, this period
	bgRetryAt   time.Time
	bgFailedRun int           // consecutive background failures, for the backoff
	wake        chan struct{} // closed (and replaced) when the engine leaves the full state
	statfsErr   bool          // a failed reading was logged

	started bool // start was called (before any concurrent use)
	stop    chan struct{}
	stopped chan struct{}
}

// spaceConfig is the guard's sizing, derived from Options.DiskReserve.
type spaceConfig struct {
	reserve uint64
	ballast uint64
	floor   uint64
	resume  uint64
}

// newSpaceConfig splits a reserve: a quarter in the ballast file, the rest kept free; the
// writes refused below the floor are accepted again an eighth of the reserve above it.
func newSpaceConfig(reserve uint64) spaceConfig {
	c := spaceConfig{reserve: reserve, ballast: reserve / 4}
	c.floor = reserve - c.ballast
	c.resume = c.floor + reserve/8
	return c
}

// newSpaceGuard prepares the guard of dir: it reads the free space, refuses (with an error
// wrapping storage.ErrNoSpace) if the volume cannot hold the reserve and what Pebble needs
// to replay its WALs, and puts the ballast in place. Call start once the database is open.
//
// Opening flushes the data of the WALs it replays, and waits for that flush however often
// it fails, so that space must be there. The WAL files on disk bound it, but they include
// recycled and obsolete ones and often overstate it several times; when that bound does not
// fit, replayed(), which asks Pebble, gives the live data instead.
func newSpaceGuard(dir string, c spaceConfig, statfs func() (uint64, error), log *slog.Logger, replayed func() (uint64, error)) (*spaceGuard, error) {
	g := &spaceGuard{
		dir:         dir,
		ballastPath: filepath.Join(dir, BallastName),
		ballastSize: c.ballast,
		floor:       c.floor,
		resume:      c.resume,
		statfs:      statfs,
		now:         time.Now,
		log:         log,
		wake:        make(chan struct{}),
		stop:        make(chan struct{}),
		stopped:     make(chan struct{}),
	}
	avail, err := statfs()
	if err != nil {
		return nil, fmt.Errorf("free space of %s: %w", dir, err)
	}
	have, err := ballastHeld(g.ballastPath)
	if err != nil {
		return nil, err
	}
	missing := g.ballastSize - min(have, g.ballastSize)
	wal, err := walBytes(dir)
	if err != nil {
		return nil, err
	}
	need := g.resume + missing + wal
	if avail < need && avail >= g.resume+missing && wal > 0 {
		if wal, err = replayed(); err != nil {
			return nil, fmt.Errorf("measure the write-ahead log: %w", err)
		}
		need = g.resume + missing + wal
	}
	if avail < need {
		parts := []string{
			fmt.Sprintf("%s kept free by its disk reserve of %s", formatBytes(g.floor), formatBytes(c.reserve)),
			fmt.Sprintf("%s above that to accept writes", formatBytes(g.resume-g.floor)),
		}
		if missing > 0 {
			parts = append(parts, fmt.Sprintf("%s for the reserve's ballast file", formatBytes(missing)))
		}
		if wal > 0 {
			parts = append(parts, fmt.Sprintf("%s to replay the write-ahead log", formatBytes(wal)))
		}
		return nil, fmt.Errorf("%w: data directory %s has %s free; the engine needs %s free to start (%s): free space on that volume or grow it",
			storage.ErrNoSpace, dir, formatBytes(avail), formatBytes(need), strings.Join(parts, ", "))
	}
	// Allocate even a ballast of full size: a copy or a restore may have left it sparse.
	if err := makeBallast(g.ballastPath, int64(g.ballastSize)); err != nil {
		return nil, fmt.Errorf("ballast: %w", err)
	}
	g.ballast = true
	g.avail = avail - missing // read again before the first write (checked is zero)
	return g, nil
}

// setOnRecover sets the function run after the engine leaves the full state.
func (g *spaceGuard) setOnRecover(f func()) {
	g.mu.Lock()
	g.onRecover = f
	g.mu.Unlock()
}

// start begins watching for space to come back after the engine fills its disk. It runs
// before Pebble opens: a volume filled by another program while Open flushes the WALs it
// replayed must be able to recover too.
func (g *spaceGuard) start() {
	if g == nil {
		return
	}
	g.started = true
	go g.watch()
}

// close stops the watcher and wakes any paused background work, so the database can close.
func (g *spaceGuard) close() {
	if g == nil {
		return
	}
	close(g.stop)
	if g.started {
		<-g.stopped
	}
}

func (g *spaceGuard) watch() {
	defer close(g.stopped)
	t := time.NewTicker(spacePollEvery)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
			g.poll()
		}
	}
}

// admit reserves n bytes for a write about to be committed, or refuses it with
// errDiskFull. An admitted write must be followed by done(n).
func (g *spaceGuard) admit(n uint64) error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.full {
		g.refused++
		return errDiskFull
	}
	now := g.now()
	if g.checked.IsZero() || now.Sub(g.checked) >= spaceRefreshEvery || g.pending+n > g.marginLocked()/4 {
		g.readLocked(now)
	}
	if g.avail < g.floor || g.avail-g.floor < g.pending+n {
		g.enterFullLocked(now, "free space fell below the reserve")
		g.refused++
		return errDiskFull
	}
	g.pending += n
	g.inflight += n
	return nil
}

// done releases what admit(n) reserved, once the write is committed (or failed).
func (g *spaceGuard) done(n uint64) {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.inflight -= min(n, g.inflight)
	g.mu.Unlock()
}

// marginLocked is how many bytes may still be admitted before the floor, by the last reading.
func (g *spaceGuard) marginLocked() uint64 {
	if g.avail < g.floor+g.pending {
		return 0
	}
	return g.avail - g.floor - g.pending
}

// readLocked reads the free space. Writes already admitted but not yet committed may not
// show in the reading yet, so they stay counted. A failed reading keeps the last value: a
// statfs error is no reason to refuse writes.
func (g *spaceGuard) readLocked(now time.Time) {
	avail, err := g.statfs()
	if err != nil {
		if !g.statfsErr {
			g.statfsErr = true
			g.log.Error("cannot read the free space of the data directory's volume", "dir", g.dir, "err", err)
		}
		g.checked = now
		return
	}
	g.avail, g.checked, g.pending = avail, now, g.inflight
}

func (g *spaceGuard) enterFullLocked(now time.Time, cause string) {
	if g.full {
		return
	}
	g.full, g.fullSince, g.lastReport = true, now, now
	g.log.Warn("disk full: refusing writes (503 ServerBusy) until space is freed; reads are served",
		"dir", g.dir, "cause", cause, "free", formatBytes(g.avail), "resume_at", formatBytes(g.resumeAtLocked()))
}

// resumeAtLocked is the free space at which a full engine accepts writes again, counting
// the ballast it must first put back.
func (g *spaceGuard) resumeAtLocked() uint64 {
	if g.ballast {
		return g.resume
	}
	return g.resume + g.ballastSize
}

// poll is the watcher's step: while full, it reads the free space, puts the ballast back
// when there is room for it, and leaves the full state once there is room for the reserve.
func (g *spaceGuard) poll() {
	g.mu.Lock()
	if !g.full {
		g.mu.Unlock()
		return
	}
	now := g.now()
	g.readLocked(now)
	if !g.ballast && g.avail >= g.resume+g.ballastSize {
		// Allocating and syncing the file may take a while: admissions (refused anyway)
		// and onDiskFull must not wait for it. Only the watcher puts the ballast back.
		g.mu.Unlock()
		err := makeBallast(g.ballastPath, int64(g.ballastSize))
		g.mu.Lock()
		if err == nil {
			g.ballast = true
		}
		now = g.now()
		g.readLocked(now)
	}
	if !g.ballast || g.avail < g.resume {
		if now.Sub(g.lastReport) >= spaceReportEvery {
			g.lastReport = now
			g.log.Warn("disk still full: refusing writes", "dir", g.dir, "free", formatBytes(g.avail),
				"resume_at", formatBytes(g.resumeAtLocked()), "full_for", now.Sub(g.fullSince).Round(time.Second),
				"refused_writes", g.refused, "failed_background_jobs", g.bgFailures)
		}
		g.mu.Unlock()
		return
	}
	g.log.Info("disk space available again: accepting writes", "dir", g.dir, "free", formatBytes(g.avail),
		"full_for", now.Sub(g.fullSince).Round(time.Millisecond), "refused_writes", g.refused,
		"failed_background_jobs", g.bgFailures)
	g.full, g.refused, g.bgFailures, g.bgFailedRun, g.bgRetryAt = false, 0, 0, 0, time.Time{}
	close(g.wake)
	g.wake = make(chan struct{})
	onRecover := g.onRecover
	g.mu.Unlock()
	if onRecover != nil {
		onRecover()
	}
}

// onDiskFull is the vfs.OnDiskFull callback: Pebble met ENOSPC. It releases the ballast so
// that the operation, which vfs.OnDiskFull retries once, and the flushes that follow find
// room, and stops admitting writes. It runs while Pebble's other writes wait, so it does
// nothing slow.
func (g *spaceGuard) onDiskFull() {
	g.mu.Lock()
	defer g.mu.Unlock()
	released := false
	if g.ballast {
		if err := os.Remove(g.ballastPath); err == nil || errors.Is(err, fs.ErrNotExist) {
			g.ballast, released = false, true
		}
	}
	now := g.now()
	g.readLocked(now)
	cause := "the volume filled up"
	if released {
		cause += fmt.Sprintf("; released the %s ballast", formatBytes(g.ballastSize))
	}
	if !g.full {
		g.enterFullLocked(now, cause)
	} else if released {
		g.log.Warn("disk full: released the ballast so the engine can finish its work", "dir", g.dir,
			"ballast", formatBytes(g.ballastSize), "free", formatBytes(g.avail))
	}
}

// backgroundFailed notes that a flush or compaction failed; it reports whether the error
// was a lack of space (which the guard then accounts for, instead of a log line each time
// Pebble retries).
func (g *spaceGuard) backgroundFailed(err error) bool {
	if g == nil || !isNoSpace(err) {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	g.bgFailures++
	g.bgFailedRun++
	g.bgRetryAt = now.Add(min(backgroundRetryMin<<min(g.bgFailedRun-1, 8), backgroundRetryMax))
	if !g.full {
		g.readLocked(now)
		g.enterFullLocked(now, "a flush or compaction ran out of space")
	}
	return true
}

// backgroundSucceeded resets the backoff after a flush or compaction completes.
func (g *spaceGuard) backgroundSucceeded() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.bgFailedRun, g.bgRetryAt = 0, time.Time{}
	g.mu.Unlock()
}

// pauseBackground holds back the output of a flush or compaction (it is called as each
// output file is created):
//
//   - after one failed for lack of space, until its backoff ends: Pebble retries at once,
//     and without a pause a volume that stays full keeps a core busy creating files;
//   - while the volume is exhausted (full, with the ballast released): a job that is under
//     way finishes in the room the ballast left, but none starts, because a job that
//     writes its files and then cannot append to the MANIFEST ends the process. The data
//     waiting in memtables is safe in the WAL meanwhile.
//
// It returns early when the engine recovers; when the engine closes while the volume is
// still full it returns an error, which fails the job (Pebble does not retry after Close).
func (g *spaceGuard) pauseBackground() error {
	if g == nil {
		return nil
	}
	for {
		g.mu.Lock()
		wait := g.bgRetryAt.Sub(g.now())
		exhausted := g.full && !g.ballast
		wake := g.wake
		g.mu.Unlock()
		if wait <= 0 && !exhausted {
			return nil
		}
		var timeout <-chan time.Time
		var t *time.Timer
		if wait > 0 {
			t = time.NewTimer(wait)
			timeout = t.C
		}
		select {
		case <-timeout: // look again: the volume may still be exhausted
			continue
		case <-wake:
		case <-g.stop:
		}
		if t != nil {
			t.Stop()
		}
		select {
		case <-g.stop:
			if g.isFull() {
				return errDiskFull
			}
		default:
		}
		return nil
	}
}

// isFull reports whether writes are being refused.
func (g *spaceGuard) isFull() bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.full
}

func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, storage.ErrNoSpace)
}

// ballastHeld reports the size of the ballast file, 0 if there is none.
func ballastHeld(path string) (uint64, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("ballast: %w", err)
	}
	return uint64(fi.Size()), nil
}

// makeBallast creates (or completes) the ballast file with its blocks allocated, and syncs it.
func makeBallast(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err == nil && fi.Size() > size {
		err = f.Truncate(size) // the reserve was lowered
	}
	if err == nil {
		err = allocate(f, size)
	}
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}

// walBytes is the size of the WAL files in dir: a bound on what Open replays and flushes
// (recycled and obsolete WALs are counted too, so it errs on the safe side).
func walBytes(dir string) (uint64, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("list data directory: %w", err)
	}
	var n uint64
	for _, ent := range ents {
		if !ent.Type().IsRegular() || !strings.HasSuffix(ent.Name(), ".log") {
			continue
		}
		fi, err := ent.Info()
		if err != nil {
			continue // removed meanwhile
		}
		n += uint64(fi.Size())
	}
	return n, nil
}

// formatBytes renders a size for people: "512 B", "3.2 MiB".
func formatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// guardFS is the file system Pebble writes through when the guard is on: it pauses flush
// and compaction outputs after one failed for lack of space (see pauseBackground).
// Everything else passes through.
type guardFS struct {
	vfs.FS
	g *spaceGuard
}

func (fs guardFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	switch category {
	case "pebble-memtable-flush", "pebble-compaction", "pebble-blob-file-rewrite":
		if err := fs.g.pauseBackground(); err != nil {
			return nil, err
		}
	}
	return fs.FS.Create(name, category)
}

func (fs guardFS) Unwrap() vfs.FS { return fs.FS }

// eventListener counts Pebble's write stalls in stalls and, when the guard g is on (not
// nil), reports Pebble's background errors: failures for lack of space go to the guard,
// which counts them and slows their retries, instead of one log line per attempt. Without
// the guard, background errors go to the logger (Pebble's default).
func eventListener(g *spaceGuard, stalls *stallTracker, logger pebbledb.Logger) *pebbledb.EventListener {
	l := &pebbledb.EventListener{
		WriteStallBegin: stalls.begin,
		WriteStallEnd:   stalls.end,
	}
	if g == nil {
		return l
	}
	l.BackgroundError = func(err error) {
		if !g.backgroundFailed(err) {
			logger.Errorf("background error: %s", err)
		}
	}
	l.FlushEnd = func(info pebbledb.FlushInfo) {
		if info.Err == nil {
			g.backgroundSucceeded()
		}
	}
	l.CompactionEnd = func(info pebbledb.CompactionInfo) {
		if info.Err == nil {
			g.backgroundSucceeded()
		}
	}
	return l
}

// writeZeros fills f with zeros up to size bytes.
func writeZeros(f *os.File, size int64) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for off := fi.Size(); off < size; {
		n := min(int64(len(buf)), size-off)
		if _, err := f.WriteAt(buf[:n], off); err != nil {
			return err
		}
		off += n
	}
	return nil
}
