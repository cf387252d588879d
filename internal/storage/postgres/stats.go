package postgres

import (
	"sync/atomic"
	"time"
)

// Stats are the engine's figures for monitoring, read when asked (the metrics package
// asks at each scrape).
type Stats struct {
	// Pool is the primary's connection pool.
	Pool PoolStats
	// StatementErrors counts the database errors the engine has reported since it
	// opened, by class.
	StatementErrors StatementErrors
	// Retries counts calls run again after losing a compare-and-swap to a concurrent
	// write, or after the database reported a serialization failure or a deadlock
	// (retry): contention between writers of the same rows, which within one front end
	// only plain writes cause (a front end's read-modify-writes take turns, rowlocks.go).
	Retries uint64
	// Replicas is each read replica's state (Replicas).
	Replicas []ReplicaStatus
	// PendingPurges is how many deleted tables still have rows to purge, as this front
	// end's purger last found (a table deleted through this front end counts at once; one
	// deleted through another, from the next pass of this one's purger, every
	// PurgeInterval).
	PendingPurges int64
	// IndexBuilds and IndexDrops are the index work outstanding in the database, the
	// cerulean_index_work rows of each kind (indexbuild.go): indexes being built, and
	// dropped indexes (or failed builds) whose entries are still being removed. They are
	// as this front end's index passes last listed them (the list each pass reads
	// anyway, so the figures cost no query), less the work the passes finished since.
	// The background loop lists every Options.IndexInterval and at once after a settings
	// change through this front end, so work recorded through another front end counts
	// from this one's next pass; with the loop off, only BuildIndexes calls list. Every
	// front end sees all of it, whichever one builds.
	IndexBuilds, IndexDrops int64
	// IndexBuildRows counts the rows this front end's index builds have passed since the
	// engine opened, as their indexes' Progress counts them (a chunk's rows once it
	// commits), so its rate is the builds' speed here; builds another front end runs
	// count in its own.
	IndexBuildRows uint64
}

// PoolStats describe the primary's connection pool (pgxpool.Stat).
type PoolStats struct {
	// Max is the pool's size; Acquired the connections in use; Idle those waiting for
	// work; Constructing those being opened.
	Max, Acquired, Idle, Constructing int32
	// Acquires counts connections handed out; EmptyAcquires those that had to wait for
	// one (none idle), for EmptyAcquireWait in total; CanceledAcquires those whose
	// caller gave up waiting.
	Acquires, EmptyAcquires, CanceledAcquires int64
	EmptyAcquireWait                          time.Duration
}

// StatementErrors counts database errors by class: Unavailable (the database cannot
// serve now: connection lost, shutting down, a retryable failure left after retries),
// NoSpace (disk full), Contention (conflicts left after retries) and Other (anything
// else: a bug or a schema problem).
type StatementErrors struct {
	Unavailable, NoSpace, Contention, Other uint64
}

// stmtErrors are the counters behind StatementErrors.
type stmtErrors struct {
	unavailable, noSpace, contention, other atomic.Uint64
}

// Stats reads the engine's figures.
func (e *Engine) Stats() Stats {
	s := e.pool.Stat()
	return Stats{
		Pool: PoolStats{
			Max:              s.MaxConns(),
			Acquired:         s.AcquiredConns(),
			Idle:             s.IdleConns(),
			Constructing:     s.ConstructingConns(),
			Acquires:         s.AcquireCount(),
			EmptyAcquires:    s.EmptyAcquireCount(),
			CanceledAcquires: s.CanceledAcquireCount(),
			EmptyAcquireWait: s.EmptyAcquireWaitTime(),
		},
		StatementErrors: StatementErrors{
			Unavailable: e.stmtErrs.unavailable.Load(),
			NoSpace:     e.stmtErrs.noSpace.Load(),
			Contention:  e.stmtErrs.contention.Load(),
			Other:       e.stmtErrs.other.Load(),
		},
		Retries:        e.retries.Load(),
		Replicas:       e.Replicas(),
		PendingPurges:  e.pendingPurges.Load(),
		IndexBuilds:    max(0, e.indexBuilds.Load()), // passes at once may count one off twice
		IndexDrops:     max(0, e.indexDrops.Load()),
		IndexBuildRows: e.buildRows.Load(),
	}
}
