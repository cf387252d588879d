package metrics

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/ceruleandb/cerulean/internal/storage/pebble"
	"github.com/ceruleandb/cerulean/internal/storage/postgres"
)

// engineCollector is the collector of eng's figures, or nil for an engine this package
// does not know. Each engine has a typed Stats method; one adapter here per engine turns
// it into series at scrape time.
func engineCollector(eng storage.Engine) prometheus.Collector {
	switch e := eng.(type) {
	case *pebble.Engine:
		return &pebbleCollector{e: e}
	case *postgres.Engine:
		return &postgresCollector{e: e}
	}
	return nil
}

// scrapeTimeout bounds how long a scrape waits for the engine.
const scrapeTimeout = 5 * time.Second

var (
	pebbleWALSync = prometheus.NewDesc("cerulean_pebble_wal_fsync_duration_seconds",
		"Latency of the WAL's fsyncs (every acknowledged write waits for one).", nil, nil)
	pebbleWALBlockingSyncs = prometheus.NewDesc("cerulean_pebble_wal_blocking_syncs_total",
		"WAL syncs made as blocking system calls because the one before took over 2 ms (a slow disk); the others keep the Go scheduler's P.", nil, nil)
	pebbleCompactions = prometheus.NewDesc("cerulean_pebble_compactions_total",
		"Compactions run.", nil, nil)
	pebbleCompactedBytes = prometheus.NewDesc("cerulean_pebble_compacted_bytes_total",
		"Bytes written by compactions, to sstables and to blob files (values rewritten).", nil, nil)
	pebbleCompactionDebt = prometheus.NewDesc("cerulean_pebble_compaction_debt_bytes",
		"Estimated bytes still to compact for the LSM to be stable.", nil, nil)
	pebbleCacheHits = prometheus.NewDesc("cerulean_pebble_block_cache_hits_total",
		"Block cache hits (hit ratio: hits / (hits + misses)).", nil, nil)
	pebbleCacheMisses = prometheus.NewDesc("cerulean_pebble_block_cache_misses_total",
		"Block cache misses.", nil, nil)
	pebbleCacheBytes = prometheus.NewDesc("cerulean_pebble_block_cache_bytes",
		"Bytes held by the block cache.", nil, nil)
	pebbleRowCacheHits = prometheus.NewDesc("cerulean_pebble_row_cache_hits_total",
		"Point reads answered by the row cache (hit ratio: hits / (hits + misses)).", nil, nil)
	pebbleRowCacheMisses = prometheus.NewDesc("cerulean_pebble_row_cache_misses_total",
		"Point reads the row cache did not hold.", nil, nil)
	pebbleRowCacheBytes = prometheus.NewDesc("cerulean_pebble_row_cache_bytes",
		"Bytes held by the row cache.", nil, nil)
	pebbleDisk = prometheus.NewDesc("cerulean_pebble_disk_bytes",
		"Disk space the store uses (tables, WAL, obsolete files awaiting deletion).", nil, nil)
	pebbleWriteStalls = prometheus.NewDesc("cerulean_pebble_write_stalls_total",
		"Times the engine held every write back: reason memtables (waiting for a flush) or l0 (waiting for a compaction out of L0).", []string{"reason"}, nil)
	pebbleWriteStallSeconds = prometheus.NewDesc("cerulean_pebble_write_stall_seconds_total",
		"Time writes were held back by stalls, by reason (a stall in progress counts up to the scrape).", []string{"reason"}, nil)
	pebbleL0Sublevels = prometheus.NewDesc("cerulean_pebble_l0_sublevels",
		fmt.Sprintf("Sublevels in L0, the level flushes write to: a read may consult one sstable in each, and at %d every write waits for a compaction out of L0 (a write stall, reason l0).", pebble.L0StopWritesThreshold), nil, nil)
	pebblePurges = prometheus.NewDesc("cerulean_pebble_pending_table_purges",
		"Deleted tables whose rows are still to be purged.", nil, nil)
	pebbleIndexBuilds = prometheus.NewDesc("cerulean_pebble_index_builds",
		"Indexes being built (state building): online builds the background builder has still to finish.", nil, nil)
	pebbleIndexBuildRows = prometheus.NewDesc("cerulean_pebble_index_build_rows_total",
		"Rows the index builds have passed, as their Progress counts them (rate: a build's speed).", nil, nil)
	engineScrapeErrors = prometheus.NewDesc("cerulean_engine_scrape_errors_total",
		"Scrapes that could not read the engine's figures.", nil, nil)
)

// walSyncBounds are the upper bounds (seconds) the WAL fsync histogram is exposed with:
// each is the largest of Pebble's own bucket bounds not above it, so the counts are
// exact, in 16 buckets instead of Pebble's 100.
var walSyncBounds = []float64{.0001, .0002, .0005, .001, .002, .003, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10}

type pebbleCollector struct {
	e      *pebble.Engine
	errors atomic.Uint64 // scrapes that failed to read the engine (it was closed)
}

func (c *pebbleCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{pebbleWALSync, pebbleCompactions, pebbleCompactedBytes, pebbleCompactionDebt,
		pebbleCacheHits, pebbleCacheMisses, pebbleCacheBytes, pebbleRowCacheHits, pebbleRowCacheMisses, pebbleRowCacheBytes, pebbleWALBlockingSyncs, pebbleDisk, pebblePurges, pebbleIndexBuilds, pebbleIndexBuildRows, engineScrapeErrors,
		pebbleWriteStalls, pebbleWriteStallSeconds, pebbleL0Sublevels} {
		ch <- d
	}
}

func (c *pebbleCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	st, err := c.e.Stats(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(engineScrapeErrors, prometheus.CounterValue, float64(c.errors.Add(1)))
		return
	}
	ch <- prometheus.MustNewConstMetric(engineScrapeErrors, prometheus.CounterValue, float64(c.errors.Load()))
	m := st.DB
	if h := m.LogWriter.FsyncLatency; h != nil {
		var d dto.Metric
		if err := h.Write(&d); err == nil && d.Histogram != nil {
			if ch2, err := walSyncHistogram(d.Histogram); err == nil {
				ch <- ch2
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(pebbleCompactions, prometheus.CounterValue, float64(m.Compact.Count))
	ch <- prometheus.MustNewConstMetric(pebbleCompactedBytes, prometheus.CounterValue, float64(compactedBytes(m)))
	ch <- prometheus.MustNewConstMetric(pebbleCompactionDebt, prometheus.GaugeValue, float64(m.Compact.EstimatedDebt))
	ch <- prometheus.MustNewConstMetric(pebbleCacheHits, prometheus.CounterValue, float64(m.BlockCache.Hits))
	ch <- prometheus.MustNewConstMetric(pebbleCacheMisses, prometheus.CounterValue, float64(m.BlockCache.Misses))
	ch <- prometheus.MustNewConstMetric(pebbleCacheBytes, prometheus.GaugeValue, float64(m.BlockCache.Size))
	ch <- prometheus.MustNewConstMetric(pebbleRowCacheHits, prometheus.CounterValue, float64(st.RowCacheHits))
	ch <- prometheus.MustNewConstMetric(pebbleRowCacheMisses, prometheus.CounterValue, float64(st.RowCacheMisses))
	ch <- prometheus.MustNewConstMetric(pebbleRowCacheBytes, prometheus.GaugeValue, float64(st.RowCacheBytes))
	ch <- prometheus.MustNewConstMetric(pebbleWALBlockingSyncs, prometheus.CounterValue, float64(st.WALBlockingSyncs))
	ch <- prometheus.MustNewConstMetric(pebbleDisk, prometheus.GaugeValue, float64(m.DiskSpaceUsage()))
	ch <- prometheus.MustNewConstMetric(pebblePurges, prometheus.GaugeValue, float64(st.PendingPurges))
	ch <- prometheus.MustNewConstMetric(pebbleIndexBuilds, prometheus.GaugeValue, float64(st.IndexBuilds))
	ch <- prometheus.MustNewConstMetric(pebbleIndexBuildRows, prometheus.CounterValue, float64(st.IndexBuildRows))
	ch <- prometheus.MustNewConstMetric(pebbleL0Sublevels, prometheus.GaugeValue, float64(m.Levels[0].Sublevels))
	for r, w := range st.WriteStalls {
		reason := pebble.StallReason(r).String()
		ch <- prometheus.MustNewConstMetric(pebbleWriteStalls, prometheus.CounterValue, float64(w.Count), reason)
		ch <- prometheus.MustNewConstMetric(pebbleWriteStallSeconds, prometheus.CounterValue, w.Duration.Seconds(), reason)
	}
}

// compactedBytes is what compactions wrote: sstables, and blob files, where values kept
// apart from the keys go (see pebble.Options.ValueSeparationMinSize). A compaction writes
// blob files when it rewrites the values its sstables carry, all of them past a blob
// reference depth (storage/pebble's maxBlobReferenceDepth), so on a store of large values
// they can be most of its output. Pebble counts a flush's blob files as compacted too (a
// flush runs as a compaction), and again as flushed; they are the flush's, so they are
// left out.
func compactedBytes(m *pebbledb.Metrics) uint64 {
	var n uint64
	for i := range m.Levels {
		l := &m.Levels[i]
		n += l.TableBytesCompacted + l.BlobBytesCompacted - min(l.BlobBytesFlushed, l.BlobBytesCompacted)
	}
	return n
}

// walSyncHistogram re-buckets Pebble's fsync histogram (nanoseconds, 100 buckets) into
// walSyncBounds (seconds).
func walSyncHistogram(h *dto.Histogram) (prometheus.Metric, error) {
	buckets := make(map[float64]uint64, len(walSyncBounds))
	src := h.GetBucket()
	j := 0
	var last uint64
	for _, b := range walSyncBounds {
		for j < len(src) && src[j].GetUpperBound()/1e9 <= b {
			last = src[j].GetCumulativeCount()
			j++
		}
		buckets[b] = last
	}
	return prometheus.NewConstHistogram(pebbleWALSync, h.GetSampleCount(), h.GetSampleSum()/1e9, buckets)
}

var (
	pgPoolMax = prometheus.NewDesc("cerulean_postgres_pool_max_conns",
		"Size of the connection pool to the primary.", nil, nil)
	pgPoolConns = prometheus.NewDesc("cerulean_postgres_pool_conns",
		"Connections to the primary, by state: in_use, idle, opening.", []string{"state"}, nil)
	pgPoolAcquires = prometheus.NewDesc("cerulean_postgres_pool_acquires_total",
		"Connections handed out by the pool.", nil, nil)
	pgPoolWaits = prometheus.NewDesc("cerulean_postgres_pool_waits_total",
		"Acquires that had to wait for a connection (none idle).", nil, nil)
	pgPoolWaitSeconds = prometheus.NewDesc("cerulean_postgres_pool_wait_seconds_total",
		"Time acquires spent waiting for a connection.", nil, nil)
	pgPoolCanceled = prometheus.NewDesc("cerulean_postgres_pool_canceled_acquires_total",
		"Acquires whose caller gave up waiting.", nil, nil)
	pgStmtErrors = prometheus.NewDesc("cerulean_postgres_statement_errors_total",
		"Database errors the engine reported, by class: unavailable, no_space, contention, other.", []string{"class"}, nil)
	pgRetries = prometheus.NewDesc("cerulean_postgres_retries_total",
		"Calls run again after losing to a concurrent write of the same rows (a lost compare-and-swap, a serialization failure, a deadlock).", nil, nil)
	pgPurges = prometheus.NewDesc("cerulean_postgres_pending_table_purges",
		"Deleted tables whose rows are still to be purged, as this front end's purger last found.", nil, nil)
	pgIndexBuilds = prometheus.NewDesc("cerulean_postgres_index_builds",
		"Indexes being built (cerulean_index_work rows of kind build), as this front end's index loop last found, less the builds it finished since.", nil, nil)
	pgIndexDrops = prometheus.NewDesc("cerulean_postgres_index_drops",
		"Dropped indexes, and unique indexes whose build failed, whose entries are still being removed, as this front end's index loop last found, less the removals it finished since.", nil, nil)
	pgIndexBuildRows = prometheus.NewDesc("cerulean_postgres_index_build_rows_total",
		"Rows this front end's index builds have passed, as their Progress counts them (rate: a build's speed; one front end builds a table at a time).", nil, nil)
	pgReplicaUp = prometheus.NewDesc("cerulean_postgres_replica_in_rotation",
		"1 if the read replica may serve reads, else 0; by replica (host:port as configured).", []string{"replica"}, nil)
	pgReplicaStaleness = prometheus.NewDesc("cerulean_postgres_replica_staleness_seconds",
		"How old the replica's state may be (-1: unknown).", []string{"replica"}, nil)
	pgReplicaLag = prometheus.NewDesc("cerulean_postgres_replica_lag_bytes",
		"WAL the replica has still to replay.", []string{"replica"}, nil)
)

type postgresCollector struct{ e *postgres.Engine }

func (c *postgresCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{pgPoolMax, pgPoolConns, pgPoolAcquires, pgPoolWaits, pgPoolWaitSeconds,
		pgPoolCanceled, pgStmtErrors, pgRetries, pgPurges, pgIndexBuilds, pgIndexDrops, pgIndexBuildRows, pgReplicaUp, pgReplicaStaleness, pgReplicaLag} {
		ch <- d
	}
}

func (c *postgresCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.e.Stats()
	p := st.Pool
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge(pgPoolMax, float64(p.Max))
	gauge(pgPoolConns, float64(p.Acquired), "in_use")
	gauge(pgPoolConns, float64(p.Idle), "idle")
	gauge(pgPoolConns, float64(p.Constructing), "opening")
	counter(pgPoolAcquires, float64(p.Acquires))
	counter(pgPoolWaits, float64(p.EmptyAcquires))
	counter(pgPoolWaitSeconds, p.EmptyAcquireWait.Seconds())
	counter(pgPoolCanceled, float64(p.CanceledAcquires))
	e := st.StatementErrors
	counter(pgStmtErrors, float64(e.Unavailable), "unavailable")
	counter(pgStmtErrors, float64(e.NoSpace), "no_space")
	counter(pgStmtErrors, float64(e.Contention), "contention")
	counter(pgStmtErrors, float64(e.Other), "other")
	counter(pgRetries, float64(st.Retries))
	gauge(pgPurges, float64(st.PendingPurges))
	gauge(pgIndexBuilds, float64(st.IndexBuilds))
	gauge(pgIndexDrops, float64(st.IndexDrops))
	counter(pgIndexBuildRows, float64(st.IndexBuildRows))
	for _, r := range st.Replicas {
		up := 0.0
		if r.InRotation {
			up = 1
		}
		gauge(pgReplicaUp, up, r.Name)
		gauge(pgReplicaStaleness, r.StalenessSeconds, r.Name)
		gauge(pgReplicaLag, float64(r.LagBytes), r.Name)
	}
}
