// Package pebble is Cerulean's default storage engine: an embedded Pebble LSM in one data
// directory, owned by one process (Pebble locks the directory).
//
// Layout, concurrency and durability in brief (keys.go has the byte layout):
//
//   - Every entity is one key (table id, PartitionKey, RowKey) in an order-preserving
//     encoding, whose value is a version, an expiry when the row has one, and the
//     entity.AppendProps encoding.
//   - The table catalogue lives in Pebble and, being small, in memory, each table's
//     settings (storage.TableSettings) beside its id; table ids come from a persisted
//     counter and are never reused, so DeleteTable is one small synced batch (catalogue
//     entry out, purge marker in) and the rows are range-deleted later.
//   - Time-to-live: Apply computes each written row's expiry (storage.Expiry, with the
//     table's settings at the time of the write) and stores it in the row's value and in
//     an expiry index key (table id, expiry, PartitionKey, RowKey) in the same batch. Every
//     read (Get, Scan, Apply's preconditions) treats a row whose expiry is at or before
//     the engine clock's Now as absent, so an expired row is invisible at once; a
//     background pass every Options.ExpiryInterval walks the index up to now and deletes
//     the expired rows, at a cost proportional to what expired (see PurgeExpired).
//   - Commit positions are Pebble sequence numbers: an Apply's position is the last
//     sequence number of its batch. Pebble publishes batches in sequence order and its
//     sequence survives restarts, so a later commit always has a larger position, and
//     every write at or below the highest position the engine has committed is visible.
//   - Apply locks the rows it touches (striped mutexes hashed by key, taken in ascending
//     stripe order), reads their current values, checks preconditions, builds one batch,
//     commits it with Sync, and unlocks once the batch is visible, before waiting for its
//     WAL sync (commitReleasing says why that keeps every guarantee). The write path
//     takes no exclusive lock beyond its own rows' (a table is held shared, against a
//     concurrent DeleteTable), so concurrent Applies reach Pebble's commit pipeline
//     together and share WAL syncs (group commit), even when their rows share stripes.
//   - Change feeds (changes.go): a table with the feed on gets one record per committed
//     change in the change's own batch, numbered under the row locks and read only up to
//     the horizon below the numbers still in flight; a row's last write leaves its
//     state to the row, which refers to its record, so an entity's bytes are written
//     once (changes.go, leanRecord). A table without it writes nothing more.
//   - Point reads go through a row cache of the values they read (rowcache.go), which
//     every Apply and expiry purge invalidates under the row locks, so it is exact.
//   - Values of 256 bytes or more live in blob files beside the LSM (Pebble's value
//     separation), so compactions do not rewrite them level after level; on a small
//     machine that disk traffic, not the CPU, is what limits sustained inserts.
//   - A table's stored access policies live under a key of its id (never reused), removed
//     with the table; an account's service properties under a meta key of the account.
//     Neither is cached: each Get is one point read, each Set one synced write.
//   - Open reads only the catalogue, the settings keys and a few meta keys, and writes one
//     small synced batch (the format mark, whose sequence number starts the committed
//     position), so restart time does not grow with the data; memory is bounded by the
//     block cache, memtable and row cache options.
//   - A disk space guard (space.go) keeps part of the volume in reserve and refuses writes
//     with storage.ErrNoSpace before Pebble could meet a full disk on its fatal paths; the
//     engine recovers by itself when space returns.
package pebble

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"log"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
	pebbledb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Defaults for Options. Together they bound the engine's resident memory at roughly
// cache + memtable size × stop-writes threshold + row cache (32 + 32×2 + 32 = 128 MiB),
// whatever the data size.
//
// Two memtables of 32 MiB (one filling, one flushing) rather than four of 16 hold as
// much, with half the flushes. Each flush writes an L0 sstable that spans every
// partition written since the last one, and an L0 compaction rewrites every Lbase
// sstable it overlaps, which under writes spread over the key space is all of them: the
// fewer the flushes, the less rewriting per entity. With four of 16 MiB, sustained
// 100-entity batches over 100 partitions flushed several times a second, L0 reached
// Pebble's default stop-writes threshold of 12 sublevels faster than the one compaction
// could drain it, and all writes stopped: 12–14 times in 40 s, for up to 2.3 s, 5.6–7.1
// s in all. With two of 32 MiB and L0StopWritesThreshold, in a 15-second window 20 s into
// such runs (`cerulean bench --client raw --workloads batch`), writes waited 0.08–0.19 s in
// all, each time for a flush, and the server took 82,000–97,000 entities/s at 17–22 µs of
// CPU each, against 55,000–75,000 at 21–27 µs (three pairs). Memtables of 64 MiB did a
// little better still, but a million loaded entities then left 247 MiB resident (182 MiB
// with 32), over the 200 MB the server keeps to: a loaded engine holds the memtable being
// filled and the last one flushed, which Pebble keeps for reuse. Pebble starts with a 256
// KiB memtable and doubles it at each flush, so a lightly used engine holds little.
const (
	DefaultCacheSize                   = 32 << 20
	DefaultMemTableSize                = 32 << 20
	DefaultMemTableStopWritesThreshold = 2
	DefaultValueSeparationMinSize      = 256
	DefaultRowCacheSize                = 32 << 20
	// DefaultDiskReserve is the disk reserve with the default memtables (Options.DiskReserve).
	DefaultDiskReserve = 2 * DefaultMemTableSize * DefaultMemTableStopWritesThreshold
	// DefaultExpiryInterval is how often expired rows are removed: with it, an expired
	// row takes space for at most about that long plus one pass.
	DefaultExpiryInterval = 15 * time.Second
	// DefaultPositionWait is how long ReadView waits for a position not reached yet.
	DefaultPositionWait = time.Second
)

const (
	// lockStripes is the number of row-lock stripes. Two rows share a stripe with
	// probability 1/lockStripes, which only costs a little concurrency, never correctness.
	lockStripes = 4096
	// scanCheckEvery is how many examined records a Scan goes between deadline checks.
	// The first check comes after that many, so every Scan makes progress.
	scanCheckEvery = 64
	// expiryBatch is how many expired rows the expiry purge deletes per synced batch, so
	// it holds few row locks at a time and a pass can stop between batches.
	expiryBatch = 256
	// expiryPace is how many times as long as a batch took the expiry pass rests before
	// the next one: with 3 it works at most a quarter of the time. 10,000 expired rows
	// (40 batches) take about a second or two; a million, a few minutes.
	expiryPace = 3
	// positionPoll is how often ReadView looks again for a position not reached yet.
	positionPoll = 5 * time.Millisecond
)

// BackgroundProcs is how many of Pebble's goroutines can be busy on the CPU at once
// in the background: one memtable flush and one compaction (the default
// CompactionConcurrencyRange, which this engine keeps). Each runs for up to Go's 10 ms
// preemption interval at a time, so on a machine with two or four cores they can hold
// most of the scheduler's Ps while requests wait in the run queue. A server gives the Go
// scheduler that many Ps more than it has cores (cmd/cerulean does), so that the
// kernel's scheduler interleaves the background work with the requests instead: on two
// cores, synced inserts paced at half their maximum rate had p99s of 4.5–6.5 ms in seven
// runs, against 5.7–29 ms (two runs of five over 10 ms) with the default.
const BackgroundProcs = 2

var raiseProcsOnce sync.Once

// RaiseProcs gives the Go scheduler BackgroundProcs more Ps than it has (see
// BackgroundProcs), once per process: later calls change nothing and report raised false,
// so a process that opens several engines raises it once. A GOMAXPROCS in the environment
// is the operator's choice and is kept. Setting it stops Go from following a changed CPU
// limit of the container; a restart picks the new limit up.
func RaiseProcs() (from, to int, raised bool) {
	raiseProcsOnce.Do(func() {
		if os.Getenv("GOMAXPROCS") != "" {
			return
		}
		from = runtime.GOMAXPROCS(0)
		to = from + BackgroundProcs
		runtime.GOMAXPROCS(to)
		raised = true
	})
	return from, to, raised
}

// L0StopWritesThreshold is how many L0 sublevels stop all writes until a compaction drains
// L0 (Pebble's L0StopWritesThreshold; its default is 12). A point read consults each
// sublevel's bloom filter and a scan merges them, so a deep L0 costs reads; a stop costs
// every write its whole length, seconds under sustained writes spread over the key space
// (see DefaultMemTableSize). With 36, L0 absorbs such a burst while the compaction catches
// up. Under sustained raw 100-entity batches L0 held 3 to 16 sublevels, and the one seek
// with which a batch reads its rows' range (scanRows) took about 9 % of the server's CPU,
// most of it in the L0 sstables' blocks. The server exports the depth
// (cerulean_pebble_l0_sublevels).
const L0StopWritesThreshold = 36

// blockCompression compresses every level's sstable and blob file blocks: Pebble's
// "fastest" profile, MinLZ (Snappy on arm64, where MinLZ has no assembly). Flushes and
// compactions compress everything written, so on a small machine under sustained writes
// their CPU is much of the server's; MinLZ compresses faster than Snappy (Pebble's
// default) and at least as well. Under `cerulean bench --client raw` 100-entity batches
// took 8 % less server CPU per entity (19.9–20.6 µs against 17.4–19.4 µs, three runs
// each); BenchmarkApplyBatchCompression, whose random-letter values compress less,
// shows about 2 %. Blocks written with Snappy stay readable: each block names its
// algorithm.
var blockCompression = sstable.FastestCompression

// maxBlobReferenceDepth is how many blob files overlapping in the key space one sstable
// may reference before a compaction rewrites the values it carries into new blob files
// (Pebble's ValueSeparationPolicy.MaxBlobReferenceDepth). Sustained 100-entity batches
// write a blob file per flush, each spanning the key space, and a compaction's depth is
// the sum of its inputs', so the depth is reached after about that many flushes; then the
// compaction into the lowest levels rewrites every value it carries, ever more of them as
// the store grows.
//
// At 10 (the value in Pebble's own tools), 15-second runs of `cerulean bench --client raw
// --workloads batch` on 2 cores gave 82,000–89,000 entities/s with p99s of 136–360 ms; at
// 30, 91,000–97,000 with p99s of 93–106 ms. Loads longer than a bench round still
// rewrote values at 30: BenchmarkApplyBatchSustained (1.2 million entities, 1.2 GB, about
// 72 flushes) had compactions rewrite 0.6–0.8 GB of the 1.16 GB of blob values flushes
// wrote at 30, and 0–41 MiB at 60, and the process's CPU per entity, flushes and
// compactions included, fell from a median of 21.0 µs to 17.4 µs in one run of three
// each, and from 19.5 µs to 14.6 µs in another on a quieter machine (18.3–19.8 against
// 14.6–14.7). The price is on scans: a
// range may read its values from up to this many blob files, each block through the block
// cache; a full scan of the table after that load took 7.0 µs of CPU per entity at both
// depths warm, and 8.7 µs at 30 against 7.8 at 60 cold, measured once each.
var maxBlobReferenceDepth = 60

// MinDiskReserve is the smallest disk reserve a server may be given (Options.DiskReserve
// takes any; the guard's sizing is newSpaceConfig). Its ballast, a quarter, is one
// write-ahead-log preallocation (walPreallocateMax): what a commit that meets a full
// volume needs once the ballast is released, so that it is refused with ErrNoSpace rather
// than failing in Pebble's commit path. Without the guard (no reserve) a full volume
// failed writes with 500 InternalError and a "fatal commit error", and flushes retried
// in a loop, each logging a line (issue 42, item 26); with a reserve of 1 MiB or 4 MiB
// on a 96 MiB tmpfs every write past the floor was refused with 503 and the log held two
// to four lines.
const MinDiskReserve = 4 * walPreallocateMax

// DiskReserveFor is the default disk reserve (Options.DiskReserve 0) of an engine with
// memtables of memTableSize bytes and the default stop-writes threshold.
func DiskReserveFor(memTableSize uint64) int64 {
	return int64(diskReserveFor(memTableSize, DefaultMemTableStopWritesThreshold))
}

// diskReserveFor is the default disk reserve for memTables memtables of memTableSize bytes:
// twice what they can hold, room to flush them all and compact.
func diskReserveFor(memTableSize uint64, memTables int) uint64 {
	return 2 * memTableSize * uint64(memTables)
}

// ErrClosed is returned by every method called after Close.
var ErrClosed = fmt.Errorf("engine closed: %w", storage.ErrUnavailable)

// Options tunes an Engine. The zero value is usable.
type Options struct {
	// CacheSize is the block cache size in bytes (default DefaultCacheSize). The cache is
	// created with room for the memtables on top (Pebble charges them to it), so
	// CacheSize + MemTableSize × MemTableStopWritesThreshold bounds Pebble's memory.
	CacheSize int64
	// MemTableSize is the size of one memtable in bytes (default DefaultMemTableSize).
	// Larger memtables absorb write bursts with fewer flushes but cost memory.
	MemTableSize uint64
	// MemTableStopWritesThreshold is how many memtables (being filled or waiting to be
	// flushed) may exist before writes stall (default DefaultMemTableStopWritesThreshold).
	MemTableStopWritesThreshold int
	// ValueSeparationMinSize is the smallest entity value (in bytes) kept in a blob file
	// apart from the LSM's keys (default DefaultValueSeparationMinSize; negative turns
	// separation off). Compactions then move only keys and small handles instead of
	// rewriting every value at every level, which for ~1 KiB entities cuts the disk
	// traffic of sustained writes several times over; the price is one more block read
	// for a value that is not cached, and space held by overwritten values until Pebble
	// rewrites a blob file that has become mostly garbage.
	ValueSeparationMinSize int
	// Logger receives Pebble's messages (default: errors to the standard logger,
	// informational messages dropped).
	Logger pebbledb.Logger
	// Clock hands out versions (default storage.NewClock(nil), the wall clock).
	Clock *storage.Clock
	// FS is the file system holding the directory (default the operating system's).
	// Tests pass vfs.NewCrashableMem() to simulate a crash. The disk space guard works
	// only on the default file system.
	FS vfs.FS
	// DiskReserve is how much of the data directory's volume the engine keeps for its own
	// work, so that a full volume refuses writes instead of ending the process (space.go).
	// A quarter is held in the file BallastName, released if the volume fills anyway; the
	// rest must stay free: writes fail with storage.ErrNoSpace while less than that is free,
	// and are accepted again, without a restart, once an eighth of the reserve more is
	// free (and the ballast is back). Open fails with storage.ErrNoSpace on a volume with
	// less free space than that, plus what it needs to replay the write-ahead log. The
	// default, DiskReserve 0, is twice what the memtables can hold
	// (2 × MemTableSize × MemTableStopWritesThreshold, 128 MiB with the defaults): room to
	// flush them all and compact. Negative turns the guard off.
	DiskReserve int64
	// Log receives the engine's own reports, such as the disk filling up and space coming
	// back (default slog.Default()).
	Log *slog.Logger
	// ExpiryInterval is how often the background pass removes expired rows (default
	// DefaultExpiryInterval; negative turns the pass off, leaving PurgeExpired). Expired
	// rows are invisible at once whatever it is; it bounds how long they take space.
	ExpiryInterval time.Duration
	// PositionWait is how long ReadView waits for a position the engine has not reached
	// before it fails with storage.ErrFuturePosition (default DefaultPositionWait).
	PositionWait time.Duration
	// RowCacheSize bounds the memory of the row cache, which keeps the values point reads
	// read (default DefaultRowCacheSize; negative turns it off). A point read of an
	// entity in it skips Pebble's search of the memtables and levels; it is always exact
	// (see rowCache).
	RowCacheSize int64
	// NoIndexBuilder leaves index builds to BuildIndexes calls: no background builder
	// runs, so a declared index stays building until calls have passed the table's rows.
	// It is for tests that drive builds a chunk at a time, as postgres.Options.IndexInterval
	// < 0 is (the metrics tests among them, outside this package); a server always runs
	// the builder.
	NoIndexBuilder bool

	// statfs, when set by a test, replaces the reading of the volume's free space.
	statfs func() (uint64, error)
}

// quietLogger passes Pebble's errors to the standard logger and drops its informational
// chatter (such as a line per Open about recovered WAL files).
type quietLogger struct{}

func (quietLogger) Infof(string, ...any) {}

func (quietLogger) Errorf(format string, args ...any) { log.Printf("pebble: "+format, args...) }

// Fatalf is called on corruption or a failed invariant; like Pebble's own it exits.
func (quietLogger) Fatalf(format string, args ...any) { log.Fatalf("pebble: "+format, args...) }

// Engine is a storage.Engine over a Pebble database. It is safe for concurrent use.
type Engine struct {
	db     *pebbledb.DB
	clock  *storage.Clock
	seed   maphash.Seed
	logger pebbledb.Logger
	space  *spaceGuard // nil when the guard is off
	wal    *walSyncer  // syncs the WAL files of an on-disk store (nil: Pebble's own)
	stalls *stallTracker

	// stripes are the row locks (see Apply).
	stripes [lockStripes]sync.Mutex
	// rows caches the values point reads read (nil: off); see rowCache.
	rows *rowCache

	// closeMu is taken shared by every operation and exclusively only by Close, so Close
	// waits for operations in flight and later ones fail with ErrClosed instead of
	// touching a closed database.
	closeMu sync.RWMutex
	closed  bool

	// ddlMu serialises catalogue changes (create, delete) and guards nextID.
	ddlMu  sync.Mutex
	nextID uint64

	// catMu guards tables, the in-memory copy of the catalogue, and byID, the same
	// tables by id.
	catMu  sync.RWMutex
	tables map[tableRef]*table
	byID   map[uint64]*table
	// format is the store's format mark as committed (keys.go); ddlMu guards raising it.
	format atomic.Uint64

	buildMu   sync.Mutex // serialises BuildIndexes calls
	buildWake chan struct{}
	buildDone chan struct{}
	// buildRows counts the rows index builds have passed since Open (Stats.IndexBuildRows).
	buildRows atomic.Uint64
	purgeMu   sync.Mutex // serialises purge passes
	expiryMu  sync.Mutex // serialises expiry passes
	purgeWake chan struct{}
	purgeStop chan struct{}
	purgeDone chan struct{}

	expiryInterval time.Duration
	positionWait   time.Duration
	// committed is the highest position (sequence number) of a batch whose commit has
	// returned; every write at or below it is visible to reads.
	committed atomic.Uint64
	// latest is the view of a read that asks for no position (ReadView), shared by all
	// of them: it holds nothing but the engine.
	latest *view
	// feeds are the change feeds by table id: of the tables with the feed on, and of
	// tables (deleted or with the feed off) whose feeds still hold records.
	feedsMu sync.Mutex
	feeds   map[uint64]*feedState
	trimMu  sync.Mutex // serialises TrimChanges passes

	// expiryVisited counts the keys expiry passes have read (index keys, listed and
	// checked again under the row locks; a pass reads no row), so a test can check that
	// a pass costs what expired, not the table.
	expiryVisited atomic.Int64
}

var _ storage.Engine = (*Engine)(nil)

type tableRef struct {
	account string
	key     string // storage.TableKey(name)
}

type table struct {
	id   uint64
	name string
	// mu is held shared by each Apply on the table from its liveness check to the end of
	// its commit, and exclusively by DeleteTable, so no Apply commits rows into a table
	// after its deletion (and purge) has been committed.
	mu      sync.RWMutex
	dropped bool // guarded by mu
	// settings are the table's settings as last committed; Apply reads them once, after
	// taking mu, so a SetTableSettings that returned applies to it.
	settings atomic.Pointer[storage.TableSettings]
	// feed is the table's change feed, nil if it never had one (guarded by mu, as is
	// feed.on: SetTableSettings and DeleteTable change them holding mu exclusively).
	feed *feedState
}

func newTable(id uint64, name string, s storage.TableSettings) *table {
	t := &table{id: id, name: name}
	t.settings.Store(&s)
	return t
}

// Open opens (creating if needed) the engine stored in dir. It reads only the catalogue
// and meta keys, resumes pending purges in the background, and never loads entities.
func Open(dir string, opts Options) (*Engine, error) {
	if opts.CacheSize <= 0 {
		opts.CacheSize = DefaultCacheSize
	}
	if opts.MemTableSize == 0 {
		opts.MemTableSize = DefaultMemTableSize
	}
	if opts.MemTableStopWritesThreshold <= 0 {
		opts.MemTableStopWritesThreshold = DefaultMemTableStopWritesThreshold
	}
	if opts.Clock == nil {
		opts.Clock = storage.NewClock(nil)
	}
	if opts.Logger == nil {
		opts.Logger = quietLogger{}
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.ExpiryInterval == 0 {
		opts.ExpiryInterval = DefaultExpiryInterval
	}
	if opts.PositionWait <= 0 {
		opts.PositionWait = DefaultPositionWait
	}
	space, err := openSpaceGuard(dir, &opts)
	if err != nil {
		return nil, err
	}
	// Pebble charges memtables to the block cache, so the cache holds CacheSize for blocks
	// on top of the most memory the memtables can take. The sum caps resident memory
	// (with glibc, once fixMalloc has pinned its mmap threshold).
	capacity := opts.CacheSize + int64(opts.MemTableSize)*int64(opts.MemTableStopWritesThreshold)
	fixMalloc(capacity)
	cache := pebbledb.NewCache(capacity)
	defer cache.Unref() // the DB holds its own reference
	po := &pebbledb.Options{
		Cache:                       cache,
		MemTableSize:                opts.MemTableSize,
		MemTableStopWritesThreshold: opts.MemTableStopWritesThreshold,
		L0StopWritesThreshold:       L0StopWritesThreshold,
		FormatMajorVersion:          pebbledb.FormatNewest,
		Logger:                      opts.Logger,
		FS:                          opts.FS,
	}
	stalls := newStallTracker()
	po.EventListener = eventListener(space, stalls, opts.Logger)
	// Every store's WAL files are walFiles; an on-disk store's (the guard's) have their
	// syncs made by wal.
	var wal *walSyncer
	fs := opts.FS
	if space != nil {
		wal = newWALSyncer()
		fs = guardFS{FS: vfs.OnDiskFull(vfs.Default, space.onDiskFull), g: space}
	} else if fs == nil {
		fs = vfs.Default
	}
	po.FS = walFS{FS: fs, sync: wal}
	// Bloom filters let a point read of an absent key (every Insert checks one) skip
	// the sstables that cannot hold it.
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		po.Levels[i].Compression = func() *sstable.CompressionProfile { return blockCompression }
	}
	if opts.ValueSeparationMinSize == 0 {
		opts.ValueSeparationMinSize = DefaultValueSeparationMinSize
	}
	if opts.ValueSeparationMinSize > 0 {
		policy := pebbledb.ValueSeparationPolicy{
			Enabled:               true,
			MinimumSize:           opts.ValueSeparationMinSize,
			MaxBlobReferenceDepth: maxBlobReferenceDepth,
			RewriteMinimumAge:     5 * time.Minute,
			TargetGarbageRatio:    0.2,
		}
		po.Experimental.ValueSeparationPolicy = func() pebbledb.ValueSeparationPolicy { return policy }
	}
	space.start()
	db, err := pebbledb.Open(dir, po)
	if err != nil {
		space.close()
		return nil, fmt.Errorf("open pebble: %w", err)
	}
	e := &Engine{
		db:        db,
		clock:     opts.Clock,
		logger:    opts.Logger,
		space:     space,
		wal:       wal,
		stalls:    stalls,
		seed:      maphash.MakeSeed(),
		tables:    make(map[tableRef]*table),
		byID:      make(map[uint64]*table),
		feeds:     make(map[uint64]*feedState),
		purgeWake: make(chan struct{}, 1),
		purgeStop: make(chan struct{}),
		purgeDone: make(chan struct{}),
		buildWake: make(chan struct{}, 1),
		buildDone: make(chan struct{}),

		expiryInterval: opts.ExpiryInterval,
		positionWait:   opts.PositionWait,
	}
	if opts.RowCacheSize >= 0 {
		e.rows = newRowCache(cmp.Or(opts.RowCacheSize, DefaultRowCacheSize))
	}
	e.latest = &view{Engine: e}
	if err := e.load(); err != nil {
		space.close()
		db.Close()
		return nil, err
	}
	if space != nil {
		space.setOnRecover(e.wakePurger) // purges refused while full can proceed
	}
	go e.purgeLoop()
	e.wakePurger() // resume purges a previous run left pending
	if opts.NoIndexBuilder {
		close(e.buildDone)
	} else {
		go e.buildLoop()
		e.wakeBuilder() // resume builds a previous run left unfinished
	}
	return e, nil
}

// openSpaceGuard prepares the disk space guard of dir, or returns nil when it is off
// (a negative DiskReserve, or a file system other than the operating system's).
func openSpaceGuard(dir string, opts *Options) (*spaceGuard, error) {
	if opts.DiskReserve < 0 || opts.FS != nil {
		return nil, nil
	}
	reserve := uint64(opts.DiskReserve)
	if reserve == 0 {
		reserve = diskReserveFor(opts.MemTableSize, opts.MemTableStopWritesThreshold)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	statfs := opts.statfs
	if statfs == nil {
		statfs = func() (uint64, error) {
			u, err := vfs.Default.GetDiskUsage(dir)
			return u.AvailBytes, err
		}
	}
	if _, err := statfs(); errors.Is(err, vfs.ErrUnsupported) {
		return nil, nil
	}
	return newSpaceGuard(dir, newSpaceConfig(reserve), statfs, opts.Log, func() (uint64, error) { return replayBytes(dir) })
}

// replayBytes is how much Open will write to flush the data it replays from the WALs of
// dir: it opens the database read-only, which replays the WALs into memtables and writes
// nothing, and reads the memtables' size, with a margin. (Measured: the flush wrote 3.0 MiB
// for memtables of 3.8 MiB, 6.5 MiB for 7.8 MiB; Metrics().WAL.Size is no guide in
// read-only mode, where it reads 0 for WALs that hold data.)
func replayBytes(dir string) (uint64, error) {
	db, err := pebbledb.Open(dir, &pebbledb.Options{ReadOnly: true, Logger: quietLogger{}})
	if err != nil {
		return 0, err
	}
	n := db.Metrics().MemTable.Size
	if err := db.Close(); err != nil {
		return 0, err
	}
	return n + n/8 + 1<<20, nil
}

// commit commits b with Sync once the space guard admits its size; a refused batch is not
// applied at all.
// On success the batch's position counts as committed (see ReadView).
func (e *Engine) commit(b *pebbledb.Batch) error {
	return e.commitWith(b, pebbledb.Sync)
}

// commitWith is commit with the given write options: the expiry purge's batches are not
// synced (see deleteExpired).
func (e *Engine) commitWith(b *pebbledb.Batch, o *pebbledb.WriteOptions) error {
	return e.admitCommit(b, func() error { return b.Commit(o) })
}

// admitCommit runs write, which commits b, inside the disk-space guard, and notes b's
// position once write has returned without error.
func (e *Engine) admitCommit(b *pebbledb.Batch, write func() error) error {
	n := uint64(b.Len())
	if err := e.space.admit(n); err != nil {
		return err
	}
	defer e.space.done(n)
	if err := write(); err != nil {
		return err
	}
	e.noteCommitted(batchPosition(b))
	return nil
}

// commitReleasing commits b with Sync, as commit does, but calls release (which must be
// safe to call twice) as soon as b is applied and visible, before it waits for b's WAL
// sync: Apply releases its row locks there, so that a write queued behind them reads
// b's rows and joins the same WAL sync instead of waiting a whole sync for b's. Without
// it, Applies of many rows (a 100-operation batch takes ~100 of the 4,096 stripes)
// nearly always share a stripe with another in flight, and each waited out the
// other's sync: batches went one sync each.
//
// Releasing before the sync is safe because the WAL is one ordered log and Pebble
// publishes a batch before its sync either way (a plain Get already sees it; Pebble
// documents ApplyNoSyncWait as not weakening durability): a write that read b's rows
// comes after b in the log, so its own sync covers b too (a rotated log is synced and
// closed before the next one is written), and it can be acknowledged only once b is
// durable. If b's sync fails, b stays in the memtable and is not acknowledged, exactly
// as when the sync error reaches Batch.Commit. The position is noted only after the
// sync, so ReadView still never waits for a write that is not durable.
func (e *Engine) commitReleasing(b *pebbledb.Batch, release func()) error {
	defer release()
	return e.admitCommit(b, func() error {
		if err := e.db.ApplyNoSyncWait(b, pebbledb.Sync); err != nil {
			return err
		}
		release()
		return b.SyncWait()
	})
}

// load reads the meta keys and the catalogue.
func (e *Engine) load() error {
	format, ok, err := e.getUint64(metaFormat)
	if err != nil {
		return fmt.Errorf("read format: %w", err)
	}
	if ok && format > formatVersion {
		return fmt.Errorf("store format %d is newer than this build's %d", format, formatVersion)
	}
	// Writing the format (a new store's, or an upgrade of a format-1 store) in a synced
	// batch also gives the committed position its start: the batch's sequence number is
	// above that of every write before the restart. A store with feeds (format 3 or
	// later) is marked with this build's format, which its feed tables' writes may now
	// use (keys.go).
	b := e.db.NewBatch()
	mark := uint64(formatBase)
	if ok && format > mark {
		mark = format
	}
	if mark >= formatFeeds {
		mark = max(mark, formatLean)
	}
	_ = b.Set(metaFormat, binary.BigEndian.AppendUint64(nil, mark), nil)
	err = b.Commit(pebbledb.Sync)
	e.format.Store(mark)
	if err == nil {
		e.noteCommitted(batchPosition(b))
	}
	b.Close()
	if err != nil {
		return fmt.Errorf("write format: %w", err)
	}
	e.nextID = 1
	if id, ok, err := e.getUint64(metaNextID); err != nil {
		return fmt.Errorf("read table counter: %w", err)
	} else if ok {
		e.nextID = id
	}
	// The clock mark is the last Close's promise that no version at or below it was
	// handed out; a crash skips it, and then the wall clock (and each row's own
	// version, see Apply) keeps versions increasing.
	if mark, ok, err := e.getUint64(metaClock); err != nil {
		return fmt.Errorf("read clock mark: %w", err)
	} else if ok {
		e.clock.Observe(int64(mark))
	}

	settings, err := e.loadSettings()
	if err != nil {
		return err
	}
	it, err := e.db.NewIter(&pebbledb.IterOptions{
		LowerBound: []byte{kindCatalog},
		UpperBound: []byte{kindCatalog + 1},
	})
	if err != nil {
		return fmt.Errorf("read catalogue: %w", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		account, _, rest, err := decodeEscaped(it.Key()[1:])
		if err != nil {
			return fmt.Errorf("read catalogue: %w", err)
		}
		key, _, _, err := decodeEscaped(rest)
		if err != nil {
			return fmt.Errorf("read catalogue: %w", err)
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("read catalogue: %w", err)
		}
		id, name, err := decodeCatalogValue(v)
		if err != nil {
			return fmt.Errorf("read catalogue: %w", err)
		}
		t := newTable(id, name, settings[id])
		e.tables[tableRef{account, key}] = t
		e.byID[id] = t
		e.nextID = max(e.nextID, id+1) // never reuse an id, even if the counter were stale
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("read catalogue: %w", err)
	}
	if err := e.loadFeeds(settings); err != nil {
		return err
	}
	ids, err := e.pendingPurges(context.Background())
	if err != nil {
		return err
	}
	for _, id := range ids {
		e.nextID = max(e.nextID, id+1)
	}
	return nil
}

// loadSettings reads every settings key: the settings of every table that is not
// standard, by table id.
func (e *Engine) loadSettings() (map[uint64]storage.TableSettings, error) {
	it, err := e.db.NewIter(&pebbledb.IterOptions{
		LowerBound: []byte{kindSettings},
		UpperBound: []byte{kindSettings + 1},
	})
	if err != nil {
		return nil, fmt.Errorf("read table settings: %w", err)
	}
	defer it.Close()
	out := map[uint64]storage.TableSettings{}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != 9 {
			return nil, fmt.Errorf("read table settings: %w", errCorruptKey)
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, fmt.Errorf("read table settings: %w", err)
		}
		s, err := storage.UnmarshalSettings(v)
		if err != nil {
			return nil, err
		}
		out[binary.BigEndian.Uint64(k[1:])] = s
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("read table settings: %w", err)
	}
	return out, nil
}

// readSettings reads table id's settings key (absent: a standard table).
func (e *Engine) readSettings(id uint64) (storage.TableSettings, error) {
	b, err := e.getBytes(settingsKey(id), "read table settings")
	if err != nil {
		return storage.TableSettings{}, err
	}
	return storage.UnmarshalSettings(b)
}

func (e *Engine) getUint64(key []byte) (uint64, bool, error) {
	v, closer, err := e.db.Get(key)
	if errors.Is(err, pebbledb.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, false, entity.ErrCorrupt
	}
	return binary.BigEndian.Uint64(v), true, nil
}

// Close stops background work, records the clock's high-water mark and closes the
// database. Operations in flight finish first; later ones fail with ErrClosed. Closing
// twice is harmless.
func (e *Engine) Close() error {
	e.closeMu.Lock()
	if e.closed {
		e.closeMu.Unlock()
		return nil
	}
	e.closed = true
	e.closeMu.Unlock()

	close(e.purgeStop)
	<-e.purgeDone
	<-e.buildDone
	// The clock mark is an optimisation (see load): on a full disk it is skipped.
	b := e.db.NewBatch()
	_ = b.Set(metaClock, binary.BigEndian.AppendUint64(nil, uint64(e.clock.Next(0))), nil)
	err := e.commit(b)
	b.Close()
	if errors.Is(err, storage.ErrNoSpace) {
		err = nil
	}
	// Stop the guard first: it wakes background work it paused, which Close waits for.
	e.space.close()
	if cerr := e.db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("close: %w", err)
	}
	return nil
}

func (e *Engine) enter() error {
	e.closeMu.RLock()
	if e.closed {
		e.closeMu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (e *Engine) exit() { e.closeMu.RUnlock() }

func (e *Engine) lookup(account, name string) (*table, error) {
	ref := tableRef{account, storage.TableKey(name)}
	e.catMu.RLock()
	t := e.tables[ref]
	e.catMu.RUnlock()
	if t == nil {
		return nil, storage.ErrTableNotFound
	}
	return t, nil
}

// CreateTable adds a table under a fresh id. It fails with ErrTableExists when the
// account has a table of the same TableKey.
func (e *Engine) CreateTable(ctx context.Context, account, name string, settings storage.TableSettings) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.exit()
	ref := tableRef{account, storage.TableKey(name)}
	e.ddlMu.Lock()
	defer e.ddlMu.Unlock()
	e.catMu.RLock()
	_, exists := e.tables[ref]
	e.catMu.RUnlock()
	if exists {
		return storage.ErrTableExists
	}
	id := e.nextID
	e.nextID++ // even if the commit fails: an id is never handed out twice
	settings = storage.AssignIndexIDs(storage.TableSettings{}, settings, true)
	b := e.db.NewBatch()
	defer b.Close()
	_ = b.Set(catalogKey(account, ref.key), catalogValue(id, name), nil)
	_ = b.Set(metaNextID, binary.BigEndian.AppendUint64(nil, id+1), nil)
	if v := storage.MarshalSettings(settings); v != nil {
		_ = b.Set(settingsKey(id), v, nil)
	}
	t := newTable(id, name, settings)
	var f *feedState
	if settings.ChangeFeedOn() {
		f = e.newFeed(b, t, account, ref.key, settings.ChangeFeed)
		f.on = true
	}
	mark := e.markIndexes(b, settings) // after newFeed's mark, which it may raise
	if err := e.commit(b); err != nil {
		return fmt.Errorf("create table: %w", err)
	}
	if f != nil {
		e.addFeed(f)
	}
	e.catMu.Lock()
	e.tables[ref] = t
	e.byID[id] = t
	e.catMu.Unlock()
	e.raiseFormat(mark)
	return nil
}

// GetTable reports a table's display name and settings (from memory).
func (e *Engine) GetTable(ctx context.Context, account, name string) (storage.TableInfo, error) {
	if err := e.enter(); err != nil {
		return storage.TableInfo{}, err
	}
	defer e.exit()
	t, err := e.lookup(account, name)
	if err != nil {
		return storage.TableInfo{}, err
	}
	return storage.TableInfo{Name: t.name, Settings: *t.settings.Load()}, nil
}

// ListTables reads the catalogue keys of the account in order, so it needs memory only
// for the page, and each listed table's settings from memory (or, for a table deleted or
// created again since the iterator's snapshot, from its settings key). limit ≤ 0 means
// no limit.
func (e *Engine) ListTables(ctx context.Context, account, from string, limit int) ([]storage.TableInfo, string, error) {
	if err := e.enter(); err != nil {
		return nil, "", err
	}
	defer e.exit()
	prefix := catalogPrefix(account)
	it, err := e.db.NewIterWithContext(ctx, &pebbledb.IterOptions{
		LowerBound: catalogKey(account, storage.TableKey(from)),
		UpperBound: prefixEnd(prefix),
	})
	if err != nil {
		return nil, "", fmt.Errorf("list tables: %w", err)
	}
	defer it.Close()
	var out []storage.TableInfo
	next := ""
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, "", fmt.Errorf("list tables: %w", err)
		}
		id, name, err := decodeCatalogValue(v)
		if err != nil {
			return nil, "", fmt.Errorf("list tables: %w", err)
		}
		if limit > 0 && len(out) == limit {
			next = name
			break
		}
		s, err := e.settingsOf(account, name, id)
		if err != nil {
			return nil, "", fmt.Errorf("list tables: %w", err)
		}
		out = append(out, storage.TableInfo{Name: name, Settings: s})
	}
	if err := it.Error(); err != nil {
		return nil, "", fmt.Errorf("list tables: %w", err)
	}
	return out, next, nil
}

// settingsOf returns the settings of table id, named name in account.
func (e *Engine) settingsOf(account, name string, id uint64) (storage.TableSettings, error) {
	e.catMu.RLock()
	t := e.tables[tableRef{account, storage.TableKey(name)}]
	e.catMu.RUnlock()
	if t != nil && t.id == id {
		return *t.settings.Load(), nil
	}
	return e.readSettings(id)
}

// DeleteTable removes the table from the catalogue and records its id for purging, in
// one synced batch, after waiting for Applies in flight on it. The rows become
// unreachable at once (nothing maps a name to the old id any more) and are range-deleted
// by the background purger.
func (e *Engine) DeleteTable(ctx context.Context, account, name string) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.exit()
	ref := tableRef{account, storage.TableKey(name)}
	e.ddlMu.Lock()
	defer e.ddlMu.Unlock()
	e.catMu.RLock()
	t := e.tables[ref]
	e.catMu.RUnlock()
	if t == nil {
		return storage.ErrTableNotFound
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	b := e.db.NewBatch()
	defer b.Close()
	_ = b.Delete(catalogKey(account, ref.key), nil)
	_ = b.Delete(aclKey(t.id), nil)
	_ = b.Delete(settingsKey(t.id), nil)
	_ = b.Set(purgeKey(t.id), nil, nil)
	if f := t.feed; f != nil {
		// The feed's last record, also when the feed is off (after its feed-off record),
		// so that retention removes the feed once this record passes; the feed itself
		// stays until then, readable by its id.
		first, _ := putChanges(b, f, "", []change{{op: storage.ChangeTableDeleted, at: e.clock.Now()}}, nil)
		defer f.finish(first)
	}
	if err := e.commit(b); err != nil {
		return fmt.Errorf("delete table: %w", err)
	}
	if t.feed != nil {
		t.feed.on = false
	}
	t.dropped = true
	e.catMu.Lock()
	delete(e.tables, ref)
	delete(e.byID, t.id)
	e.catMu.Unlock()
	e.wakePurger()
	return nil
}

// GetTableACL reads the table's stored access policies from the key of its id.
func (e *Engine) GetTableACL(ctx context.Context, account, name string) ([]byte, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.exit()
	t, err := e.lookup(account, name)
	if err != nil {
		return nil, err
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.dropped {
		return nil, storage.ErrTableNotFound
	}
	return e.getBytes(aclKey(t.id), "get table acl")
}

// SetTableACL writes (or, for an empty acl, deletes) the key of the table's id in a
// synced write. It holds the table shared, like Apply, so it either commits before a
// concurrent DeleteTable (whose batch then removes the key) or sees the table dropped;
// and a table created again has a new id, so nothing set on the old one reaches it.
func (e *Engine) SetTableACL(ctx context.Context, account, name string, acl []byte) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.exit()
	t, err := e.lookup(account, name)
	if err != nil {
		return err
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.dropped {
		return storage.ErrTableNotFound
	}
	return e.setBytes(aclKey(t.id), acl, "set table acl")
}

// GetServiceProperties reads the account's service properties.
func (e *Engine) GetServiceProperties(ctx context.Context, account string) ([]byte, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.exit()
	return e.getBytes(svcPropsKey(account), "get service properties")
}

// SetServiceProperties writes (or, when empty, deletes) the account's service properties
// in a synced write.
func (e *Engine) SetServiceProperties(ctx context.Context, account string, props []byte) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.exit()
	return e.setBytes(svcPropsKey(account), props, "set service properties")
}

// getBytes returns a copy of key's value, nil when it is absent.
func (e *Engine) getBytes(key []byte, op string) ([]byte, error) {
	v, closer, err := e.db.Get(key)
	if errors.Is(err, pebbledb.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	defer closer.Close()
	return bytes.Clone(v), nil
}

// setBytes sets key to v, or deletes it when v is empty, and syncs.
func (e *Engine) setBytes(key, v []byte, op string) error {
	b := e.db.NewBatch()
	defer b.Close()
	if len(v) == 0 {
		_ = b.Delete(key, nil)
	} else {
		_ = b.Set(key, v, nil)
	}
	if err := e.commit(b); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// testHookBeforeCommit, when set by a test, runs in Apply after the checks and before the
// commit, with the locks held and the written rows pending in the row cache.
var testHookBeforeCommit func()

// testHookBeforeFill, when set by a test, runs in a point read that missed the row cache
// after it read Pebble and before it fills the cache.
var testHookBeforeFill func()

// row is the state of one entity during an Apply.
type row struct {
	storage.Row
	key    []byte
	rk     string
	stripe uint32
	stored bool // in the database before the Apply (expired or not)
	// storedExpiry is the stored row's expiry (0: none), whose index key goes when the
	// row is written or deleted; expiry is the expiry of the row's state in the Apply.
	storedExpiry int64
	expiry       int64
	// expiredStored is a stored row found expired, until a mutation of the Apply writes
	// over it: a feed records its expiry first (noteChange).
	expiredStored bool
	// ref is the number of the lean record whose state the stored row holds (0: none),
	// and refValue the stored value then (a copy), from which a write of the row fills
	// that record (changes.go, leanRecord).
	ref      uint64
	refValue []byte
	// lastWrite is 1 + the index, among the Apply's records, of the write that left the
	// row's state (0: none), which is then written lean with the row referring to it.
	lastWrite int
	// keepStored asks loadRow for the stored row's encoded properties (storedEnc),
	// expired or not: a table with indexes replaces the stored row's entries.
	keepStored bool
	storedEnc  []byte
}

// noteChange appends the records of mutation m, which has just succeeded on row r
// (leaving props at version v), for a table whose feed is on: its expiry first if it
// writes over a stored expired row, then its own, then an expiry if its explicit expiry
// has already passed (the row is absent from its own write on).
func noteChange(cs []change, r *row, m *storage.Mutation, props []entity.Property, v, now int64) []change {
	if r.expiredStored {
		r.expiredStored = false
		cs = append(cs, change{op: storage.ChangeExpire, rk: r.rk, at: now})
	}
	if m.Op == storage.Delete {
		return append(cs, change{op: storage.ChangeOp(m.Op), rk: r.rk, at: now})
	}
	exp := r.expiry
	if !r.Exists {
		exp = m.Expiry
	}
	cs = append(cs, change{op: storage.ChangeOp(m.Op), rk: r.rk, props: props, version: v, at: v, expiry: exp})
	if !r.Exists {
		cs = append(cs, change{op: storage.ChangeExpire, rk: r.rk, at: v})
	}
	return cs
}

// Apply runs the mutations in order against the rows' current state, read under their
// locks, and commits the final state of every touched row in one synced batch. A
// failing precondition, an invalid merge result or an invalid time-to-live aborts before
// anything is written. Each written row's expiry is computed from the table's settings
// as they are when the Apply holds the table; a row's expiry index key changes in the
// same batch as the row. The position is the batch's last sequence number.
func (e *Engine) Apply(ctx context.Context, account, tableName, pk string, muts []storage.Mutation) (storage.Applied, error) {
	vs, p, err := e.apply(ctx, account, tableName, pk, muts, nil)
	return storage.Applied{Versions: vs, Position: p}, err
}

// ApplyEach is Apply with each mutation on its own: under the same locks and in the same
// single pass, a mutation that fails leaves its row as it was and is reported in Errs,
// and the others are committed in one synced batch, so a failure costs nothing more than
// its own check. Nothing is committed when every mutation fails.
func (e *Engine) ApplyEach(ctx context.Context, account, tableName, pk string, muts []storage.Mutation) (storage.Each, error) {
	errs := make([]error, len(muts))
	vs, p, err := e.apply(ctx, account, tableName, pk, muts, errs)
	if err != nil {
		return storage.Each{}, err
	}
	if vs == nil {
		vs = make([]int64, len(muts))
	}
	return storage.Each{Versions: vs, Errs: errs, Position: p}, nil
}

// apply is Apply, or ApplyEach when errs is not nil: then each mutation's failure goes
// to errs (which has one slot per mutation) instead of ending the call, the mutations
// must name distinct rows, and nothing is committed when no row changed (the position is
// then 0).
func (e *Engine) apply(ctx context.Context, account, tableName, pk string, muts []storage.Mutation, errs []error) ([]int64, storage.Position, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	if err := e.enter(); err != nil {
		return nil, 0, err
	}
	defer e.exit()
	t, err := e.lookup(account, tableName)
	if err != nil || len(muts) == 0 {
		return nil, 0, err
	}
	needProps := false
	for i := range muts {
		switch muts[i].Op {
		case storage.Merge, storage.InsertOrMerge:
			needProps = true
		case storage.Insert, storage.Replace, storage.Delete, storage.InsertOrReplace:
		default:
			err := fmt.Errorf("unknown mutation %v", muts[i].Op)
			if errs == nil {
				return nil, 0, &storage.ApplyError{Index: i, Err: err}
			}
			errs[i] = err
		}
	}

	// A single write (nearly every Apply) keeps its row on the stack; the rows' keys share
	// one pooled buffer, which no key outlives (the batch copies what it is given).
	var oneRow [1]row
	var oneOf [1]int
	rows, rowOf := oneRow[:0], oneOf[:]
	if len(muts) > 1 {
		rows, rowOf = make([]row, 0, len(muts)), make([]int, len(muts))
	}
	kb := keyPool.Get().(*[]byte)
	defer putBuf(&keyPool, kb)
	keys := (*kb)[:0]
	var byRK map[string]int
	if len(muts) > 1 {
		byRK = make(map[string]int, len(muts))
	}
	for i := range muts {
		rk := muts[i].RowKey
		if byRK != nil {
			if j, ok := byRK[rk]; ok {
				if errs != nil {
					return nil, 0, fmt.Errorf("apply each: row %q named twice", rk)
				}
				rowOf[i] = j
				continue
			}
			byRK[rk] = len(rows)
		}
		rowOf[i] = len(rows)
		// An append that grows keys leaves the earlier keys in the old array, intact.
		start := len(keys)
		keys = appendDataKey(keys, t.id, pk, rk)
		key := keys[start:len(keys):len(keys)]
		rows = append(rows, row{key: key, rk: rk, stripe: uint32(maphash.Bytes(e.seed, key) % lockStripes)})
	}
	*kb = keys

	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.dropped {
		return nil, 0, storage.ErrTableNotFound
	}
	settings := *t.settings.Load()
	var feed *feedState // nil: nothing to record (nearly every table)
	if settings.ChangeFeedOn() && t.feed != nil && t.feed.on {
		feed = t.feed
	}
	indexes := settings.Indexes
	for j := range rows {
		rows[j].keepStored = len(indexes) > 0
	}
	// A table with a unique index locks the stripes of the values the Apply may take
	// or give up too (unique.go); those it finds only once it has read its rows it
	// takes by starting over with them.
	var uc *uniqueCheck
	var extra []uint32
	var fresh []row
	var errs0 []error
	if hasUnique(indexes) {
		// Never nil: lockRows then takes every stripe the many-stripes way, which
		// knows what it holds.
		extra = append(make([]uint32, 0, 8), e.valueStripes(t.id, indexes, muts)...)
		fresh, errs0 = slices.Clone(rows), slices.Clone(errs)
	}
	var locks rowLocks
	defer locks.unlock()
	var (
		now        int64
		versions   []int64
		dirty      bool
		changes    []change
		oldU, newU [][]uniqueKey // with uc: each row's unique values as stored and as left
		last       []int         // with uc: each row's last write
	)
	for {
		locks = e.lockRows(rows, extra)
		now = e.clock.Now()
		if err := e.loadRows(rows, needProps, now); err != nil {
			return nil, 0, err
		}
		if fresh != nil {
			it, err := e.db.NewIter(&l6Filters) // under the locks: the entries' latest state
			if err != nil {
				return nil, 0, fmt.Errorf("read unique entries: %w", err)
			}
			defer it.Close()
			uc = &uniqueCheck{e: e, id: t.id, pk: pk, defs: indexes, now: now, held: locks.stripes(),
				it: it, stored: map[string]holding{}, overlay: map[string]holding{}}
			oldU, newU, last = make([][]uniqueKey, len(rows)), make([][]uniqueKey, len(rows)), make([]int, len(rows))
			for j := range rows {
				if rows[j].stored {
					props, err := entity.DecodeProps(rows[j].storedEnc)
					if err != nil {
						return nil, 0, fmt.Errorf("read entity: %w", err)
					}
					oldU[j] = appendUniqueKeys(nil, t.id, indexes, props)
				}
			}
		}
		versions = make([]int64, len(muts))
		dirty = false
		changes = changes[:0]
		for i := range muts {
			r := &rows[rowOf[i]]
			if errs != nil && errs[i] != nil {
				continue // an unknown mutation
			}
			was, wasExpiry := r.Row, r.expiry
			v, err := storage.Step(pk, &muts[i], &r.Row, e.clock.Next)
			props := r.Props // the state the mutation left, before an expiry past already
			if err == nil && r.Exists && muts[i].Op != storage.Delete {
				// Every write restarts the clock: the expiry of the row as this mutation
				// leaves it, from its new version (or the mutation's explicit one, which may
				// leave the row expired at once).
				r.expiry, err = storage.SettleExpiry(settings, &muts[i], &r.Row)
			}
			var nu []uniqueKey
			if err == nil && uc != nil {
				if r.Exists {
					nu = appendUniqueKeys(nil, t.id, indexes, r.Props)
				}
				if errs != nil {
					// ApplyEach: each mutation against what the ones before it left.
					if uv, cerr := uc.takeEach(r.rk, oldU[rowOf[i]], nu); cerr != nil {
						return nil, 0, fmt.Errorf("read unique entries: %w", cerr)
					} else if uv != nil {
						err = uv
					}
				}
			}
			if err != nil {
				if errs == nil {
					return nil, 0, &storage.ApplyError{Index: i, Err: err}
				}
				// The row stays as it was (Step replaces its fields, never their contents).
				errs[i], r.Row, r.expiry = err, was, wasExpiry
				continue
			}
			versions[i] = v
			dirty = true
			if uc != nil {
				newU[rowOf[i]], last[rowOf[i]] = nu, i
			}
			if feed != nil {
				changes = noteChange(changes, r, &muts[i], props, v, now)
				r.lastWrite = 0
				if muts[i].Op != storage.Delete && r.Exists {
					r.lastWrite = len(changes) // the write's record is the last one noted
				}
			}
		}
		if uc == nil {
			break
		}
		if errs == nil {
			i, uv, err := uc.checkFinal(rows, oldU, newU, last)
			if err != nil {
				return nil, 0, fmt.Errorf("read unique entries: %w", err)
			}
			if uv != nil && len(uc.need) == 0 {
				return nil, 0, &storage.ApplyError{Index: i, Err: uv}
			}
		}
		if len(uc.need) == 0 {
			break
		}
		// Values found once the rows were read: start over holding their stripes too.
		locks.unlock()
		extra = append(extra, uc.need...)
		copy(rows, fresh)
		copy(errs, errs0)
	}
	if !dirty {
		return versions, 0, nil // ApplyEach with every mutation failed: nothing to commit
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err // nothing committed yet: the caller gave up while we waited
	}
	var first uint64 // the number of changes[0]
	if len(changes) > 0 {
		// Numbered under the row locks, retired once the batch is synced (or failed):
		// commitReleasing returns only then.
		first = feed.take(len(changes))
		defer feed.finish(first)
		for j := range rows {
			if r := &rows[j]; r.Dirty && r.Exists && r.lastWrite > 0 {
				changes[r.lastWrite-1].lean = true
			}
		}
	}

	b := e.db.NewBatch()
	defer b.Close()
	vb := valuePool.Get().(*[]byte)
	defer putBuf(&valuePool, vb)
	buf := (*vb)[:0]
	defer func() { *vb = buf }()
	var key [17]byte
	if uc != nil {
		// Every row's unique entries given up before any row's taken (putUniqueDeletes).
		for j := range rows {
			if rows[j].Dirty {
				if err := uc.putUniqueDeletes(b, rows[j].rk, oldU[j], newU[j]); err != nil {
					return nil, 0, fmt.Errorf("read unique entries: %w", err)
				}
			}
		}
	}
	for j := range rows {
		r := &rows[j]
		if !r.Dirty {
			continue
		}
		if r.ref != 0 {
			// The stored row's lean record loses its state with this write: it gets
			// it in full, unless retention has removed it.
			if f := t.feed; f != nil && r.ref > f.removedNow() {
				var err error
				if buf, err = appendFilled(buf[:0], r.refValue, pk, r.rk); err != nil {
					return nil, 0, fmt.Errorf("read entity: %w", err)
				}
				_ = b.Set(appendFeedKey(key[:0], f.id, r.ref), buf, nil)
			}
		}
		if r.Exists && r.lastWrite > 0 && len(changes) > 0 {
			c := &changes[r.lastWrite-1]
			buf = appendValueRef(buf[:0], r.Version, r.expiry, first+uint64(r.lastWrite-1), byte(c.op), r.Props)
			_ = b.Set(r.key, buf, nil)
		} else if r.Exists {
			buf = appendValue(buf[:0], r.Version, r.expiry, r.Props)
			_ = b.Set(r.key, buf, nil) // copies
		} else {
			// Also when nothing is stored (inserted and deleted in this Apply): the
			// tombstone costs little and gives the batch a sequence number.
			_ = b.Delete(r.key, nil)
		}
		if len(indexes) > 0 {
			var old, new [][]byte
			if r.stored {
				props, err := entity.DecodeProps(r.storedEnc)
				if err != nil {
					return nil, 0, fmt.Errorf("read entity: %w", err)
				}
				old = appendIndexEntries(nil, t.id, indexes, pk, r.rk, props)
			}
			if r.Exists {
				new = appendIndexEntries(nil, t.id, indexes, pk, r.rk, r.Props)
			}
			putIndexChanges(b, old, new)
			if uc != nil {
				if err := uc.putUniqueSets(b, r.rk, newU[j]); err != nil {
					return nil, 0, fmt.Errorf("read unique entries: %w", err)
				}
			}
		}
		if r.storedExpiry != 0 {
			buf = appendExpiryKey(buf[:0], t.id, r.storedExpiry, pk, r.rk)
			_ = b.Delete(buf, nil)
		}
		if r.Exists && r.expiry != 0 {
			buf = appendExpiryKey(buf[:0], t.id, r.expiry, pk, r.rk)
			_ = b.Set(buf, nil, nil)
		}
	}
	for i := range changes {
		buf = appendChange(buf[:0], &changes[i], pk)
		_ = b.Set(appendFeedKey(key[:0], feed.id, first+uint64(i)), buf, nil)
	}
	// The row cache forgets the rows before the batch is visible and again once it is
	// (rowCache), still under the row locks.
	rel := released{locks: &locks, cache: e.rows, rows: rows}
	e.rows.begin(rows)
	if testHookBeforeCommit != nil {
		testHookBeforeCommit()
	}
	if err := e.commitReleasing(b, rel.release); err != nil {
		return nil, 0, fmt.Errorf("apply: %w", err)
	}
	return versions, batchPosition(b), nil
}

// released is what an Apply lets go of once its batch is visible (or has failed): the
// row cache's invalidation of its rows, then the row locks. release may be called twice;
// the second call does nothing.
type released struct {
	locks *rowLocks
	cache *rowCache
	rows  []row
	done  bool
}

func (r *released) release() {
	if r.done {
		return
	}
	r.done = true
	r.cache.end(r.rows)
	r.locks.unlock()
}

// lockRows locks the rows' stripes and the extra ones (the stripes of unique values,
// unique.go) in ascending order, each once, so two Applies with overlapping rows or
// values cannot deadlock, and returns the locks to unlock.
func (e *Engine) lockRows(rows []row, extra []uint32) rowLocks {
	if len(rows) == 1 && extra == nil {
		m := &e.stripes[rows[0].stripe]
		m.Lock()
		return rowLocks{one: m}
	}
	s := make([]uint32, len(rows), len(rows)+len(extra))
	for i := range rows {
		s[i] = rows[i].stripe
	}
	s = append(s, extra...)
	slices.Sort(s)
	s = slices.Compact(s)
	for _, i := range s {
		e.stripes[i].Lock()
	}
	return rowLocks{e: e, many: s}
}

// rowLocks are the stripes lockRows locked: one, or many (ascending) of e's. A value, so
// that a single row's lock costs no allocation.
type rowLocks struct {
	one  *sync.Mutex
	e    *Engine
	many []uint32
}

// stripes are the stripes l holds, ascending, when lockRows took them the many-stripes
// way (always when it was given extra stripes).
func (l *rowLocks) stripes() []uint32 { return l.many }

// unlock unlocks what l still holds; a second call does nothing.
func (l *rowLocks) unlock() {
	if l.one != nil {
		l.one.Unlock()
		l.one = nil
		return
	}
	for _, i := range l.many {
		l.e.stripes[i].Unlock()
	}
	l.many = nil
}

// valuePool recycles the buffers Apply encodes rows into (the batch copies them).
var valuePool = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// putBuf returns a buffer to its pool unless it grew past 64 KiB (a large entity's), so
// the pools never pin big allocations.
func putBuf(p *sync.Pool, b *[]byte) {
	if cap(*b) <= 64<<10 {
		p.Put(b)
	}
}

// l6Filters are the options of loadRows's iterator (NewIter copies them).
var l6Filters = pebbledb.IterOptions{UseL6Filters: true}

// loadRows reads the rows' stored versions (and properties when a merge may need them)
// through one iterator that consults the Bloom filters of every level, L6 included
// (db.Get skips L6 filters). Nearly every Insert looks for a key that does not exist, and
// without the filter that costs a data block read per insert in the largest level. The
// iterator is created under the row locks, so its snapshot holds the rows' latest state.
// A row expired at now is stored but does not exist; its version stays, so the next one
// exceeds it.
//
// Fewer rows than scanRowsMin (nearly always one) are first looked for in the row cache,
// which is exact (rowCache) and, under the rows' locks, cannot change: a row read
// before it is written (a read, then a conditional update) costs no search of the
// memtables and levels, and if every row is there no iterator is made.
//
// Many rows (a batch) are first read by one scan of the key range they span
// (scanRows); only if the range holds more stored keys of no row than there are rows is
// each row the scan did not reach looked up on its own.
func (e *Engine) loadRows(rows []row, needProps bool, now int64) error {
	var left []int // indexes of the rows still to read, nil: all rows
	var leftBuf [scanRowsMin]int
	if len(rows) < scanRowsMin && e.rows != nil {
		left = leftBuf[:0]
		for j := range rows {
			var err error
			if !e.rows.peek(rows[j].key, func(v []byte) { err = loadRow(&rows[j], v, needProps, now) }) {
				left = append(left, j)
			} else if err != nil {
				return fmt.Errorf("read entity: %w", err)
			}
		}
		if len(left) == 0 {
			return nil
		}
	}
	it, err := e.db.NewIter(&l6Filters)
	if err != nil {
		return fmt.Errorf("read entity: %w", err)
	}
	defer it.Close()
	if len(rows) >= scanRowsMin {
		if left, err = scanRows(it, rows, needProps, now); err != nil {
			return fmt.Errorf("read entity: %w", err)
		}
		if len(left) == 0 {
			return nil
		}
		it.SetBounds(nil, nil)
	}
	lookup := func(r *row) error {
		if !it.SeekPrefixGE(r.key) || !bytes.Equal(it.Key(), r.key) {
			return it.Error()
		}
		return loadRowAt(r, it, needProps, now)
	}
	if left == nil {
		for j := range rows {
			if err := lookup(&rows[j]); err != nil {
				return fmt.Errorf("read entity: %w", err)
			}
		}
		return nil
	}
	for _, j := range left {
		if err := lookup(&rows[j]); err != nil {
			return fmt.Errorf("read entity: %w", err)
		}
	}
	return nil
}

// scanRowsMin is the fewest rows loadRows reads with a scan of their range.
const scanRowsMin = 8

// scanRows reads rows (distinct keys of one partition) by walking the stored keys of the
// range from the smallest row key to the largest alongside the rows in key order: a row
// the walk passes without meeting is not stored. One seek and a step per stored key in
// the range costs far less than a Bloom-filtered lookup per row in every level when the
// rows' keys are close together (ascending keys, or a batch's neighbours), as they
// usually are. When the range holds more stored keys that are no row's than there are
// rows, the walk stops, and scanRows returns the indexes of the rows it did not reach,
// in key order, for lookups one by one; it returns none when it read them all.
//
// Keys deleted but not yet compacted away are stepped over inside Pebble and not
// counted: a batch of scattered keys into a partition of many recent deletes walks them
// all, which lookups would not. Compactions drop such tombstones as they reach the
// lowest level holding the keys.
func scanRows(it *pebbledb.Iterator, rows []row, needProps bool, now int64) ([]int, error) {
	order := make([]int, len(rows))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return bytes.Compare(rows[a].key, rows[b].key) })
	last := rows[order[len(order)-1]].key
	upper := append(append(make([]byte, 0, len(last)+1), last...), 0) // just past last
	it.SetBounds(rows[order[0]].key, upper)
	others := 0 // stored keys in the range that no row has
	j := 0
	for ok := it.First(); ok && j < len(order); ok = it.Next() {
		k := it.Key()
		for j < len(order) && bytes.Compare(rows[order[j]].key, k) < 0 {
			j++ // passed: not stored
		}
		if j < len(order) && bytes.Equal(rows[order[j]].key, k) {
			if err := loadRowAt(&rows[order[j]], it, needProps, now); err != nil {
				return nil, err
			}
			j++
			continue
		}
		if others++; others > len(rows) {
			return order[j:], nil
		}
	}
	return nil, it.Error()
}

// loadRowAt reads r's stored state from the iterator, positioned at r's key.
func loadRowAt(r *row, it *pebbledb.Iterator, needProps bool, now int64) error {
	v, err := it.ValueAndErr()
	if err != nil {
		return err
	}
	return loadRow(r, v, needProps, now)
}

// loadRow reads r's stored state from its stored value v, which it does not keep.
func loadRow(r *row, v []byte, needProps bool, now int64) error {
	var enc []byte
	var err error
	if r.Version, r.storedExpiry, enc, err = parseValue(v); err != nil {
		return err
	}
	r.stored = true
	r.Exists = !storage.Expired(r.storedExpiry, now)
	r.expiredStored = !r.Exists
	if r.ref, _ = valueRef(v); r.ref != 0 {
		r.refValue = append(r.refValue[:0], v...)
	}
	if r.Exists && needProps {
		// Decoded only if a merge needs it; the copy outlives the iterator.
		r.Encoded = append([]byte(nil), enc...)
	}
	if r.keepStored {
		r.storedEnc = append(r.storedEnc[:0], enc...)
	}
	return nil
}

// keyPool recycles the key buffers of point reads (keys are at most about 2 KiB: two
// 1 KiB keys, escaped, so no buffer in it grows large).
var keyPool = sync.Pool{New: func() any { b := make([]byte, 0, 128); return &b }}

// Get reads one entity; an expired one is not found.
func (e *Engine) Get(ctx context.Context, account, tableName, pk, rk string) (storage.Record, error) {
	return e.get(account, tableName, pk, rk, false)
}

// GetEncoded is Get with the properties left in their stored form (storage.Reader).
func (e *Engine) GetEncoded(ctx context.Context, account, tableName, pk, rk string) (storage.Record, error) {
	return e.get(account, tableName, pk, rk, true)
}

// get reads one entity, its properties decoded or (encoded) checked and copied out of
// Pebble's value, which is only valid until the read is closed.
func (e *Engine) get(account, tableName, pk, rk string, encoded bool) (storage.Record, error) {
	if err := e.enter(); err != nil {
		return storage.Record{}, err
	}
	defer e.exit()
	t, err := e.lookup(account, tableName)
	if err != nil {
		return storage.Record{}, err
	}
	kb := keyPool.Get().(*[]byte)
	defer putBuf(&keyPool, kb) // after closer.Close: the read may hold the key until then
	*kb = appendDataKey((*kb)[:0], t.id, pk, rk)
	var rec storage.Record
	hit, tok := e.rows.get(*kb, func(v []byte) {
		rec, err = e.record(v, pk, rk, encoded, true)
	})
	if hit {
		return rec, err
	}
	v, closer, err := e.db.Get(*kb)
	if errors.Is(err, pebbledb.ErrNotFound) {
		return storage.Record{}, storage.ErrNotFound
	}
	if err != nil {
		return storage.Record{}, fmt.Errorf("get entity: %w", err)
	}
	defer closer.Close()
	if rec, err = e.record(v, pk, rk, encoded, false); err == nil {
		if testHookBeforeFill != nil {
			testHookBeforeFill()
		}
		e.rows.fill(tok, *kb, v)
	}
	return rec, err
}

// record is the entity of stored value v, its properties decoded or (encoded) in their
// stored form; an expired one is not found. A value read from Pebble is valid only until
// its read is closed, so its properties are checked and copied. A cached value (cached)
// was checked when it was read and is never changed or reused (rowCache), so an encoded
// record shares its bytes: storage.Record.Encoded is read-only, and the cache entry lives
// as long as the record refers to it, evicted or not.
func (e *Engine) record(v []byte, pk, rk string, encoded, cached bool) (storage.Record, error) {
	ver, exp, enc, err := parseValue(v)
	if err != nil {
		return storage.Record{}, fmt.Errorf("get entity: %w", err)
	}
	if storage.Expired(exp, e.clock.Now()) {
		return storage.Record{}, storage.ErrNotFound
	}
	rec := storage.Record{Entity: entity.Entity{PartitionKey: pk, RowKey: rk}, Version: ver, Expiry: exp}
	switch {
	case encoded && cached:
		rec.Encoded = enc[:len(enc):len(enc)] // an append to it copies
	case encoded:
		if err = entity.CheckProps(enc); err == nil {
			rec.Encoded = append(make([]byte, 0, len(enc)), enc...)
		}
	default:
		rec.Entity.Props, err = entity.DecodeProps(enc)
	}
	if err != nil {
		return storage.Record{}, fmt.Errorf("get entity: value: %w", err)
	}
	return rec, nil
}

// Scan iterates the key range in (PartitionKey, RowKey) byte order with a bounded
// iterator; it holds at most Limit records. When it stops early (Limit reached, or
// Deadline passed, checked every scanCheckEvery records) Next is the key of the first
// record it did not examine, so a resumed scan neither skips nor repeats one, and Next is
// nil exactly when the range is exhausted. Rows expired at the scan's start are examined
// but skipped before any filter or size accounting, like rows that are not there.
func (e *Engine) Scan(ctx context.Context, account, tableName string, req storage.ScanRequest) (storage.ScanResult, error) {
	if req.Limit <= 0 {
		return storage.ScanResult{}, fmt.Errorf("scan: limit %d is not positive", req.Limit)
	}
	if err := e.enter(); err != nil {
		return storage.ScanResult{}, err
	}
	defer e.exit()
	t, err := e.lookup(account, tableName)
	if err != nil {
		return storage.ScanResult{}, err
	}
	if req.End != nil && !req.Start.Less(*req.End) {
		return storage.ScanResult{}, nil
	}
	upper := tablePrefix(t.id + 1)
	if req.End != nil {
		upper = dataKey(t.id, req.End.PartitionKey, req.End.RowKey)
	}
	it, err := e.db.NewIterWithContext(ctx, &pebbledb.IterOptions{
		LowerBound: dataKey(t.id, req.Start.PartitionKey, req.Start.RowKey),
		UpperBound: upper,
	})
	if err != nil {
		return storage.ScanResult{}, fmt.Errorf("scan: %w", err)
	}
	defer it.Close()

	var res storage.ScanResult
	var dec keyDecoder
	var arena []byte // Encoded records' bags, in blocks from storage.GetBlock
	examined, size := 0, 0
	now := e.clock.Now()
	for it.First(); it.Valid(); it.Next() {
		if len(res.Records) == req.Limit || (examined > 0 && examined%scanCheckEvery == 0 && expired(ctx, req.Deadline)) {
			pk, rk, err := dec.decode(it.Key())
			if err != nil {
				return storage.ScanResult{}, fmt.Errorf("scan: %w", err)
			}
			res.Next = &storage.Key{PartitionKey: pk, RowKey: rk}
			break
		}
		examined++
		pk, rk, err := dec.decode(it.Key())
		if err != nil {
			return storage.ScanResult{}, fmt.Errorf("scan: %w", err)
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return storage.ScanResult{}, fmt.Errorf("scan: %w", err)
		}
		ver, exp, enc, err := parseValue(v)
		if err != nil {
			return storage.ScanResult{}, fmt.Errorf("scan: %w", err)
		}
		if storage.Expired(exp, now) {
			continue
		}
		if req.EncodedFilter != nil {
			// Filter on the stored bytes: only the properties the filter names are read,
			// and only accepted records are decoded.
			ok, err := req.EncodedFilter(pk, rk, ver, enc)
			if err != nil {
				return storage.ScanResult{}, fmt.Errorf("scan: %w", err)
			}
			if !ok {
				continue
			}
		}
		// The stored value is a header and the properties in AppendProps form, so the
		// record's size is known before it is decoded. (A record the plain Filter
		// rejects is decoded first; it is not counted.)
		n := len(pk) + len(rk) + len(enc)
		full := req.MaxBytes > 0 && len(res.Records) > 0 && size+n > req.MaxBytes
		accepted := req.EncodedFilter != nil || req.Filter == nil
		if full && accepted {
			res.Next = &storage.Key{PartitionKey: pk, RowKey: rk}
			break
		}
		if req.Encoded && accepted && !full {
			// Kept in the stored form: checked, then copied into the page's arena (the
			// iterator's value is only valid until it moves).
			if err := entity.CheckProps(enc); err != nil {
				return storage.ScanResult{}, fmt.Errorf("scan: value: %w", err)
			}
			if len(arena)+len(enc) > cap(arena) {
				if len(enc) <= storage.BlockSize {
					bp := storage.GetBlock()
					res.Blocks = append(res.Blocks, bp)
					arena = *bp
				} else {
					arena = make([]byte, 0, len(enc)) // a bag larger than a block: its own
				}
			}
			at := len(arena)
			arena = append(arena, enc...)
			size += n
			if res.Records == nil {
				res.Records = make([]storage.Record, 0, min(req.Limit, 128))
			}
			res.Records = append(res.Records, storage.Record{
				Entity:  entity.Entity{PartitionKey: pk, RowKey: rk},
				Version: ver,
				Encoded: arena[at:len(arena):len(arena)],
				Expiry:  exp,
			})
			continue
		}
		props, err := entity.DecodeProps(enc)
		if err != nil {
			return storage.ScanResult{}, fmt.Errorf("scan: value: %w", err)
		}
		rec := storage.Record{Entity: entity.Entity{PartitionKey: pk, RowKey: rk, Props: props}, Version: ver, Expiry: exp}
		if !accepted && !req.Filter(&rec) {
			continue
		}
		if full {
			res.Next = &storage.Key{PartitionKey: pk, RowKey: rk}
			break
		}
		size += n
		res.Records = append(res.Records, rec)
	}
	if err := it.Error(); err != nil {
		return storage.ScanResult{}, fmt.Errorf("scan: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return storage.ScanResult{}, err
	}
	res.Examined = examined
	return res, nil
}

func expired(ctx context.Context, deadline time.Time) bool {
	return ctx.Err() != nil || (!deadline.IsZero() && !time.Now().Before(deadline))
}

// keyDecoder decodes data keys, reusing the PartitionKey string while consecutive keys
// share it (most do), so a scan allocates one PartitionKey per partition.
type keyDecoder struct {
	pkEnc []byte
	pk    string
}

func (d *keyDecoder) decode(k []byte) (pk, rk string, err error) {
	if len(k) < 9 || k[0] != kindData {
		return "", "", errCorruptKey
	}
	k = k[9:]
	if d.pkEnc != nil && len(k) > len(d.pkEnc) && string(k[:len(d.pkEnc)]) == string(d.pkEnc) {
		k = k[len(d.pkEnc):]
	} else {
		var enc []byte
		d.pk, enc, k, err = decodeEscaped(k)
		if err != nil {
			return "", "", err
		}
		d.pkEnc = append(d.pkEnc[:0], enc...)
	}
	rk, _, rest, err := decodeEscaped(k)
	if err != nil || len(rest) != 0 {
		return "", "", errCorruptKey
	}
	return d.pk, rk, nil
}

// Name is the engine's name.
func (e *Engine) Name() string { return "pebble" }

// SetTableSettings replaces a table's settings: one synced write of the key of its id
// (deleted for a standard table), then the in-memory copy that Apply reads. It holds
// ddlMu, so it is ordered with CreateTable and DeleteTable: it either lands before a
// DeleteTable (whose batch removes the key) or finds the table gone; a table created
// again has a new id and so never gets the old one's settings.
func (e *Engine) SetTableSettings(ctx context.Context, account, name string, settings storage.TableSettings) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.exit()
	e.ddlMu.Lock()
	defer e.ddlMu.Unlock()
	t, err := e.lookup(account, name)
	if err != nil {
		return err
	}
	// Held exclusively, so that no Apply is between reading the old settings and its
	// commit: a change of the feed is ordered with every write of the table.
	t.mu.Lock()
	defer t.mu.Unlock()
	stored := *t.settings.Load()
	settings = storage.AssignIndexIDs(stored, settings, false)
	b := e.db.NewBatch()
	defer b.Close()
	if v := storage.MarshalSettings(settings); v == nil {
		_ = b.Delete(settingsKey(t.id), nil)
	} else {
		_ = b.Set(settingsKey(t.id), v, nil)
	}
	building := putDroppedIndexes(b, t.id, stored, settings)
	var started, retained *feedState
	switch f := t.feed; {
	case settings.ChangeFeedOn() && f == nil:
		started = e.newFeed(b, t, account, storage.TableKey(name), settings.ChangeFeed)
	case f != nil:
		if !settings.ChangeFeedOn() && f.on {
			// The gap's mark: nothing is recorded from here until the feed is on again.
			first, _ := putChanges(b, f, "", []change{{op: storage.ChangeFeedOff, at: e.clock.Now()}}, nil)
			defer f.finish(first)
		}
		if settings.ChangeFeedOn() {
			// A new retention goes into the mark (the feed keeps the last one while off).
			f.markMu.Lock()
			defer f.markMu.Unlock()
			m := f.mark()
			m.retention = settings.ChangeFeed
			_ = b.Set(feedKey(f.id, 0), m.value(), nil)
			retained = f
		}
	}
	mark := e.markIndexes(b, settings) // after newFeed's mark, which it may raise
	if err := e.commit(b); err != nil {
		return fmt.Errorf("set table settings: %w", err)
	}
	if started != nil {
		e.addFeed(started)
	}
	if retained != nil {
		retained.retention = settings.ChangeFeed // under markMu, as written
	}
	if t.feed != nil {
		t.feed.on = settings.ChangeFeedOn()
	}
	t.settings.Store(&settings)
	e.raiseFormat(mark)
	if building {
		e.wakeBuilder()
	}
	return nil
}
