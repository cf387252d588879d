package pebble

import (
	"context"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/ceruleandb/cerulean/internal/storage"
)

// Stats are the engine's figures for monitoring, read when asked (the metrics package
// asks at each scrape), so keeping them costs the data path nothing.
type Stats struct {
	// DB is Pebble's own metrics: WAL fsync latencies, compactions, block cache, disk use.
	DB *pebbledb.Metrics
	// PendingPurges is how many deleted tables still have rows waiting to be purged.
	PendingPurges int
	// RowCacheHits and RowCacheMisses count the point reads the row cache answered and
	// those it did not; RowCacheBytes is the memory its entries are charged.
	RowCacheHits, RowCacheMisses uint64
	RowCacheBytes                int64
	// WALBlockingSyncs counts the WAL syncs made as blocking system calls because the
	// one before took longer than rawSyncLimit (a slow disk; see walSyncer).
	WALBlockingSyncs uint64
	// WriteStalls counts the times Pebble held all writes back, by StallReason, and how
	// long they lasted (see stalls.go).
	WriteStalls [numStallReasons]WriteStalls
	// IndexBuilds is how many declared indexes are building: the builder's work
	// outstanding (build.go), read from the catalogue in memory. A dropped index has no
	// counterpart: its entries are range-deleted in the settings change's own batch
	// (putDroppedIndexes), so no removal is ever outstanding.
	IndexBuilds int
	// IndexBuildRows counts the rows index builds have passed since the engine opened,
	// as their indexes' Progress counts them (a chunk's rows once it commits), so its
	// rate is the builds' speed.
	IndexBuildRows uint64
}

// Stats reads the engine's figures. It fails once the engine is closed.
func (e *Engine) Stats(ctx context.Context) (Stats, error) {
	if err := e.enter(); err != nil {
		return Stats{}, err
	}
	defer e.exit()
	ids, err := e.pendingPurges(ctx)
	if err != nil {
		return Stats{}, err
	}
	st := Stats{DB: e.db.Metrics(), PendingPurges: len(ids)}
	st.RowCacheHits, st.RowCacheMisses, st.RowCacheBytes = e.rows.stats()
	if e.wal != nil {
		st.WALBlockingSyncs = e.wal.blockingSyncs.Load()
	}
	st.WriteStalls = e.stalls.read()
	st.IndexBuilds = e.indexBuilds()
	st.IndexBuildRows = e.buildRows.Load()
	return st, nil
}

// indexBuilds counts the building indexes of the tables in the catalogue (deleted tables
// are not in it: their purge removes their entries whole). It reads only memory, one
// settings pointer per table, so a scrape may call it.
func (e *Engine) indexBuilds() int {
	e.catMu.RLock()
	defer e.catMu.RUnlock()
	n := 0
	for _, t := range e.byID {
		for _, d := range t.settings.Load().Indexes {
			if d.State == storage.IndexBuilding {
				n++
			}
		}
	}
	return n
}
