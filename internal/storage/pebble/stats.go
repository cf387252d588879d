package pebble

import (
	"context"

	pebbledb "github.com/cockroachdb/pebble/v2"
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
	return st, nil
}
