package bench

import (
	"context"
	"fmt"
	"sync/atomic"
)

// The scan workload: a filtered scan that must examine every preloaded entity to find the
// ~1% that match a predicate on an ordinary (non-key) property.
//
// The filter is
//
//	PartitionKey ge 'r' and PartitionKey lt 's' and Ratio lt 0.01
//
// Preloaded entity i has Ratio (i%1000)/1000 + 0.0005, so exactly those with i%1000 < 10
// match: 1%. The PartitionKey bounds are the preload's key space ("r…" partitions); they
// only fence off the rows other workloads write (insert and batch add tens of thousands
// of entities in other partitions), so the number of entities a scan must examine is
// known: the preload. Within them no index helps — every entity is read and tested. Run
// with --workloads scan and the bounds cover the whole table: a filtered full-table scan.
const scanFilter = "PartitionKey ge '" + prefixPreload + "' and PartitionKey lt '" + prefixPreloadEnd +
	"' and Ratio lt 0.01"

// prefixPreloadEnd is the least string above every "r…" partition key.
const prefixPreloadEnd = "s"

// maxScanWorkers caps the concurrent scans. One scan is long (the whole preload) and a
// few already saturate a server; with many more, every scan in flight when the duration
// ends must still finish, and the workload would overrun its duration many times over.
const maxScanWorkers = 4

// scanMatches is how many of the first n preloaded entities the scan filter matches.
func scanMatches(n int) int {
	return n/1000*10 + min(n%1000, 10)
}

// runScan measures filtered scans. Entities (and so entities/s) count entities EXAMINED:
// the preload, once per completed scan. Notes give the entities returned. A scan that
// returns fewer entities than the preload holds matches is an error (lost rows or a broken
// continuation); more is fine (a reused table may hold rows from earlier, larger preloads).
func (b *bench) runScan(ctx context.Context) Result {
	examined := b.opts.Preload
	want := scanMatches(b.opts.Preload)
	var returned, scans atomic.Int64

	sb := *b // the same bench with fewer workers
	sb.opts.Workers = min(b.opts.Workers, maxScanWorkers)
	st, secs := sb.drive(ctx, WorkloadScan, 1, func(ctx context.Context, w *worker) (int, int, error) {
		n, err := w.t.query(ctx, scanFilter)
		if err != nil {
			return 0, 0, err
		}
		if n < want && !b.onFloor {
			return 0, 0, &shortFilteredScanError{got: n, want: want}
		}
		returned.Add(int64(n))
		scans.Add(1)
		return examined, 0, nil
	})
	notes := []string{fmt.Sprintf("entities/s counts entities examined: %s preloaded per scan, %d concurrent scans",
		commas(float64(examined)), sb.opts.Workers)}
	if n, s := returned.Load(), scans.Load(); n > 0 && s > 0 && secs > 0 {
		notes = append(notes, fmt.Sprintf("returned %s entities/s (%s per scan, %.2f%% of those examined; filter %s)",
			commas(float64(n)/secs), commas(float64(n)/float64(s)),
			100*float64(n)/float64(s)/float64(max(examined, 1)), scanFilter))
	}
	r := b.result(WorkloadScan, st, secs, func(int) string { return "" }, notes...)
	// A scan reads every partition: no partition is hotter than another.
	r.HottestPartition, r.HottestPartitionPerSec = "", 0
	return r
}

// shortFilteredScanError is a scan that returned fewer entities than the preload holds
// matches. It unwraps to a *shortScanError, so it is counted as an "incomplete scan".
type shortFilteredScanError struct {
	got, want int
}

func (e *shortFilteredScanError) Error() string {
	return fmt.Sprintf("filtered scan (%s) returned %d of the %d matching preloaded entities", scanFilter, e.got, e.want)
}

func (e *shortFilteredScanError) Unwrap() error {
	return &shortScanError{pk: "r…", got: e.got, want: e.want}
}
