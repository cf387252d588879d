// Package postgres is the storage engine for PostgreSQL and the databases that speak its
// wire protocol (YugabyteDB, CockroachDB, Citus): several stateless Cerulean front ends
// share one database, which holds everything — catalogue, entities, versions — so any
// front end can serve any request.
//
// In brief (schema.go has the tables, dialect.go the little SQL that differs):
//
//   - Conditional writes are enforced by the database. An Apply of N mutations without
//     merges is one round trip: N statements pipelined in one implicit transaction, each
//     checking its own precondition in its WHERE or ON CONFLICT clause and raising an
//     error when it fails, which aborts the transaction; statements run in RowKey order so
//     two batches lock rows in the same order. See apply.go.
//   - Concurrent single-entity writes share one transaction and one synced commit, in
//     key order, each with its own statement and answer; concurrent point reads of the
//     primary share a round trip. Nothing waits to fill a group: a lone call goes out at
//     once. See coalesce.go.
//   - Merges are read-modify-write with a compare-and-swap on the version (two round
//     trips), because properties are an exact binary blob (entity.AppendProps) that SQL
//     cannot take apart portably. See apply.go for why.
//   - Versions come from the database server's clock, GREATEST'ed with the row's previous
//     version + 1 inside the statement, so they increase per entity whichever front end
//     writes.
//   - DeleteTable moves the table's id from the catalogue to a purge queue in one
//     statement; a background loop in every front end deletes the rows in bounded chunks.
//   - A table's stored access policies are a column of its catalogue row (they go with the
//     row when the table is deleted), service properties a row per account; each Get and
//     Set is one statement, and nothing is cached, so every front end sees a change at
//     once. See tables.go.
//   - A table's settings (elastic, time-to-live) are a column of its catalogue row too,
//     with a generation that every change renews. The write path keeps them in a cache
//     per front end, and every write that depends on them commits only at the cached
//     generation, so a change made through any front end applies to the next write
//     everywhere at no extra round trip (one read per table and front end fills the
//     cache). See settings.go.
//   - Every written row stores its expiry (storage.Expiry, computed in Go from the
//     settings and stored as the statement's version + TTL); every read and precondition
//     treats a row whose expiry has passed on the database clock as absent, and a
//     background purge in every front end deletes expired rows through a partial index
//     on expiry, in chunks that front ends can run at once. See expiry.go.
//   - Every Apply reports its commit position: the WAL position read after the commit
//     in the same round trip (on CockroachDB and YugabyteDB, the database clock).
//     A read view waits, briefly, for the database to reach a position. See positions.go.
//   - Read replicas (hot standbys fed by streaming replication) serve the reads their
//     consistency level allows: a monitor in every front end watches each one's replay
//     position and staleness, and every read on a view is bracketed by position queries
//     in its own round trip, so a read never sees less than it asked for and reports
//     the position that covers it. A replica that cannot serve is left out, never an
//     error. See replicas.go and views.go.
//   - A database that cannot be reached makes every call fail with
//     storage.ErrUnavailable (503 ServerBusy with Retry-After for clients); the pool
//     reconnects by itself when the database is back.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/singleflight"
)

// Defaults for Options.
const (
	DefaultPoolSize         = 32
	DefaultStatementTimeout = 30 * time.Second
	DefaultConnectTimeout   = 5 * time.Second
	DefaultPurgeInterval    = time.Minute
	DefaultPurgeGrace       = 10 * time.Minute
	DefaultExpiryInterval   = 15 * time.Second
	DefaultIndexInterval    = time.Second
	DefaultPositionWait     = time.Second
	DefaultMaxStaleness     = 5 * time.Second
	DefaultReplicaMaxLag    = 30 * time.Second
	DefaultReplicaWait      = 50 * time.Millisecond
	DefaultReplicaPoll      = 100 * time.Millisecond
	// DefaultReplicaReadTimeout: see Options.ReplicaReadTimeout and views.go.
	DefaultReplicaReadTimeout = 500 * time.Millisecond
	// DefaultSyncCommitTimeout: see Options.SyncCommitTimeout and failover.go.
	DefaultSyncCommitTimeout = 10 * time.Second
	// PurgeChunk is how many rows one purge statement deletes, so that purging a large
	// table never holds one huge transaction.
	PurgeChunk = 10_000
)

// maxAttempts bounds how often one call is retried after serialization failures,
// deadlocks and lost compare-and-swaps before it gives up with ErrUnavailable.
//
// Why so many: compare-and-swaps are optimistic, and a writer can lose many times in a row
// to others on the same rows. In the conformance suite's overlapping batches (16 writers,
// each writing 4 of 8 shared rows per batch, 20 batches each) every run had a writer
// needing more than 12 attempts, and a run on CI's loaded machine one needing more than
// 50. The backoff (up to 20 ms) keeps 200 attempts within a few seconds. Since a front
// end's read-modify-writes take turns on row locks (rowlocks.go), they lose only to plain
// writes and to other front ends, but those can still race as hard.
const maxAttempts = 200

// prepareAll prepares sqls (nil: none) on c, each named by its text as pipeline expects.
func prepareAll(ctx context.Context, c *pgx.Conn, sqls *[]string) error {
	if sqls == nil {
		return nil
	}
	for _, sql := range *sqls {
		if _, err := c.Prepare(ctx, sql, sql); err != nil {
			return err
		}
	}
	return nil
}

// ErrClosed is returned by every method called after Close.
var ErrClosed = fmt.Errorf("engine closed: %w", storage.ErrUnavailable)

// Options tunes an Engine. The zero value is usable.
type Options struct {
	// PoolSize is the most connections the engine holds (default DefaultPoolSize).
	PoolSize int
	// StatementTimeout bounds every statement on the server (default
	// DefaultStatementTimeout; negative disables it). A statement that runs out is
	// reported as storage.ErrUnavailable.
	StatementTimeout time.Duration
	// ConnectTimeout bounds establishing a connection when the URL does not set
	// connect_timeout (default DefaultConnectTimeout).
	ConnectTimeout time.Duration
	// PurgeInterval is how often the background purger looks for deleted tables
	// (default DefaultPurgeInterval); a DeleteTable through this engine wakes it at once.
	PurgeInterval time.Duration
	// PurgeGrace is how long a deleted table's purge entry is kept after the table was
	// deleted (default DefaultPurgeGrace). A write that resolved the table's id just
	// before the delete can still commit rows under the old id while its statement runs,
	// so the purger keeps deleting until the grace period, longer than any statement,
	// has passed; only then is the entry dropped.
	PurgeGrace time.Duration
	// ExpiryInterval is how often the background purge looks for expired rows (default
	// DefaultExpiryInterval). Expired rows are invisible at once; this bounds how long
	// they take room.
	ExpiryInterval time.Duration
	// IndexInterval is how often the background loop looks for index builds and dropped
	// indexes' entries to remove (default DefaultIndexInterval); a settings change that
	// declares or drops an index wakes it too. Negative: never in the background, only
	// through BuildIndexes (tests that drive the builds themselves).
	IndexInterval time.Duration
	// PositionWait is how long a read view waits for the primary to reach a position
	// before it fails with storage.ErrFuturePosition (default DefaultPositionWait).
	PositionWait time.Duration
	// ReplicaURLs are hot standbys of the database (streaming replicas), one URL each:
	// reads go to them as their consistency level allows (replicas.go). Empty: every
	// read goes to the primary.
	ReplicaURLs []string
	// MaxStaleness bounds how far behind the primary a replica serving a
	// BoundedStaleness read may be (default DefaultMaxStaleness).
	MaxStaleness time.Duration
	// ReplicaMaxLag takes a replica out of rotation for every level while it is further
	// behind than this (default DefaultReplicaMaxLag).
	ReplicaMaxLag time.Duration
	// ReplicaWait is how long a Session read waits for a replica to reach its token
	// before it goes to the primary (default DefaultReplicaWait).
	ReplicaWait time.Duration
	// ReplicaPoll is how often each replica's replay position and the primary's
	// position are read (default DefaultReplicaPoll); reads waiting for a replica poll
	// it faster.
	ReplicaPoll time.Duration
	// ReplicaReadTimeout bounds every round trip to a replica (default
	// DefaultReplicaReadTimeout): a statement that has not completed within it is
	// cancelled, the replica leaves rotation, and the read runs again on another replica
	// or the primary in the same request (views.go). A replica comes back once a poll
	// answers within it.
	ReplicaReadTimeout time.Duration
	// SyncCommitTimeout bounds how long a commit waits for the primary's synchronous
	// standby (default DefaultSyncCommitTimeout; negative: no bound): past it the wait
	// is cancelled and the write answers 503, outcome unknown (failover.go). PostgreSQL's
	// statement timeout does not bound that wait.
	SyncCommitTimeout time.Duration
	// Logger receives background errors (default slog.Default()).
	Logger *slog.Logger
	// DisablePurger turns both background purges off, of deleted tables and of expired
	// rows (Purge and PurgeExpired still work). For tests.
	DisablePurger bool
}

// Engine is a storage.Engine over a PostgreSQL-wire database. It is safe for concurrent
// use, and several Engines (in several processes) may share one database.
type Engine struct {
	pool    *pgxpool.Pool
	dialect dialect
	opts    Options
	log     *slog.Logger
	q       queries

	// cache holds tables' settings for the write path (settings.go); loads shares
	// the concurrent loads of one table's entry.
	cache settingsCache
	loads singleflight.Group
	// upserts chooses how InsertOrMerge is made (applyUpsert): up by one for each that
	// found its entity, down by one for each that created it (leanUpserts).
	upserts atomic.Int64
	// locks are the rows' locks a read-modify-write holds (rowlocks.go).
	locks *rowLocks
	// retries counts calls retry ran again (Stats.Retries).
	retries atomic.Uint64
	// singles groups concurrent single-mutation writes into shared commits, and gets
	// concurrent point reads of the primary into shared round trips (coalesce.go).
	singles, gets coalescer
	// highest is the highest commit position this front end has seen (positions.go).
	highest atomic.Uint64
	// timeline is the primary's timeline as last checked (0: unknown); failoverSem lets
	// one new connection at a time check it (failover.go).
	timeline    atomic.Uint32
	failoverSem chan struct{}
	// unconfirmed holds the connections on which the primary warned that a commit's wait
	// for its synchronous standby was cancelled, unconfirmedN how many (failover.go).
	unconfirmed  sync.Map // *pgconn.PgConn → notice
	unconfirmedN atomic.Int64
	// replicas are the read replicas (replicas.go); nil without any.
	replicas *replicaSet
	// primaryReads counts the views' reads the primary served.
	primaryReads atomic.Uint64
	// stmtErrs counts the errors mapErr reports, by class (Stats).
	stmtErrs stmtErrors
	// watches are the change feeds someone waits on through this front end (changes.go).
	watches feedWatches

	closed    atomic.Bool
	closeOnce sync.Once
	purgeMu   sync.Mutex
	// pendingPurges is how many deleted tables still have rows to purge, as this front
	// end last saw (Stats.PendingPurges).
	pendingPurges atomic.Int64
	purgeWake     chan struct{}
	purgeStop     chan struct{}
	// indexWake wakes the index loop: a settings change recorded builds or drops
	// (indexbuild.go).
	indexWake chan struct{}
	// indexBuilds and indexDrops are the cerulean_index_work rows of each kind as this
	// front end's index passes last saw them, less those the passes finished since
	// (Stats.IndexBuilds, IndexDrops); buildRows counts the rows its builds passed
	// (Stats.IndexBuildRows).
	indexBuilds, indexDrops atomic.Int64
	buildRows               atomic.Uint64

	loops sync.WaitGroup // the background purges
}

var _ storage.Engine = (*Engine)(nil)

// Open connects to the database at url (a postgres:// URL or key=value DSN), creates or
// migrates the schema, and starts the background purger. It fails if the database
// cannot be reached now; once open, the engine rides out outages.
func Open(ctx context.Context, url string, opts Options) (*Engine, error) {
	if opts.PoolSize <= 0 {
		opts.PoolSize = DefaultPoolSize
	}
	if opts.StatementTimeout == 0 {
		opts.StatementTimeout = DefaultStatementTimeout
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = DefaultConnectTimeout
	}
	if opts.PurgeInterval <= 0 {
		opts.PurgeInterval = DefaultPurgeInterval
	}
	if opts.PurgeGrace <= 0 {
		opts.PurgeGrace = DefaultPurgeGrace
	}
	if opts.ExpiryInterval <= 0 {
		opts.ExpiryInterval = DefaultExpiryInterval
	}
	if opts.IndexInterval == 0 {
		opts.IndexInterval = DefaultIndexInterval
	}
	if opts.PositionWait <= 0 {
		opts.PositionWait = DefaultPositionWait
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxStaleness <= 0 {
		opts.MaxStaleness = DefaultMaxStaleness
	}
	if opts.ReplicaMaxLag <= 0 {
		opts.ReplicaMaxLag = DefaultReplicaMaxLag
	}
	if opts.ReplicaWait == 0 {
		opts.ReplicaWait = DefaultReplicaWait
	}
	if opts.ReplicaPoll <= 0 {
		opts.ReplicaPoll = DefaultReplicaPoll
	}
	if opts.ReplicaReadTimeout <= 0 {
		opts.ReplicaReadTimeout = DefaultReplicaReadTimeout
	}
	if opts.SyncCommitTimeout == 0 {
		opts.SyncCommitTimeout = DefaultSyncCommitTimeout
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres url: %w", err)
	}
	timeout := opts.StatementTimeout
	// configure applies what the primary's pool and the replicas' share.
	configure := func(cfg *pgxpool.Config) {
		cfg.MaxConns = int32(opts.PoolSize)
		if cfg.ConnConfig.ConnectTimeout == 0 {
			cfg.ConnConfig.ConnectTimeout = opts.ConnectTimeout
		}
		// Keepalives and a user timeout, so that a dead host is noticed in seconds
		// (dial.go).
		cfg.ConnConfig.DialFunc = dialer(cfg.ConnConfig.ConnectTimeout)
		if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
			cfg.ConnConfig.RuntimeParams["application_name"] = "cerulean"
		}
		// Connections idle for a while are checked before use, so after a database
		// restart the pool notices dead ones instead of handing them out (pgxpool pings
		// those idle for more than a second); a check period finds them in the
		// background too.
		cfg.HealthCheckPeriod = 5 * time.Second
		// Connections for the groups in flight (coalesce.go) and one more stay open,
		// made in the background (at start, and when one ages out or breaks), so that
		// no request waits for a new connection (~35 ms: BenchmarkNewConnection) in
		// the steady state, and a front end's first requests do not either. Without
		// them, a front end's connections closed after 30 minutes idle, and all of them
		// at once after an hour (pgxpool's lifetime, which the jitter now spreads), and
		// the requests that came next each waited for a new one. The URL's
		// pool_min_conns, if set, wins.
		if cfg.MinConns == 0 {
			cfg.MinConns = int32(min(opts.PoolSize, singleSlots(opts.PoolSize)+getSlots(opts.PoolSize)+1))
		}
		if cfg.MaxConnLifetimeJitter == 0 {
			cfg.MaxConnLifetimeJitter = cfg.MaxConnLifetime / 10
		}
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			if timeout > 0 {
				// SET rather than a startup parameter: every database accepts it.
				if _, err := c.Exec(ctx, fmt.Sprintf("SET statement_timeout = %d", timeout.Milliseconds())); err != nil {
					return err
				}
			}
			return nil
		}
	}
	configure(cfg)
	// The write statements, prepared on every connection as it is made (once the schema
	// is migrated), so that no write waits for a prepare.
	var prepare atomic.Pointer[[]string]
	// The engine, once open: every later connection to the primary is checked before it
	// serves anything, for a failover (failover.go).
	var opened atomic.Pointer[Engine]
	setTimeout := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		if err := setTimeout(ctx, c); err != nil {
			return err
		}
		if e := opened.Load(); e != nil {
			if err := e.checkPrimary(ctx, c); err != nil {
				return err
			}
		}
		return prepareAll(ctx, c, prepare.Load())
	}
	// Warnings of commits not confirmed by a synchronous standby (failover.go).
	cfg.ConnConfig.OnNotice = func(pc *pgconn.PgConn, n *pgconn.Notice) {
		if e := opened.Load(); e != nil {
			e.noteNotice(pc, n)
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	d, version, err := detectDialect(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	if err := migrate(ctx, pool, d); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	q := buildQueries(d)
	prepare.Store(&[]string{q.insert1, q.upsert1, q.replace1, q.delete1, q.insertB, q.upsertB, q.replaceB, q.deleteB,
		q.insertMany, q.upsertMany, q.casUpdate, q.casDelete, q.casInsert, q.casUpdateB, q.casDeleteB, q.casInsertB, q.position, q.mark})
	// The connections the pool opened meanwhile (MinConns) prepare them now; should one
	// fail, its statements are prepared on first use (a broken connection is dropped).
	for _, c := range pool.AcquireAllIdle(ctx) {
		_ = prepareAll(ctx, c.Conn(), prepare.Load())
		c.Release()
	}
	e := &Engine{
		pool:      pool,
		dialect:   d,
		opts:      opts,
		log:       opts.Logger,
		q:         q,
		purgeWake: make(chan struct{}, 1),
		purgeStop: make(chan struct{}),
		indexWake: make(chan struct{}, 1),
		locks:     newRowLocks(),

		failoverSem: make(chan struct{}, 1),
	}
	e.singles = coalescer{e: e, slots: singleSlots(opts.PoolSize)}
	e.gets = coalescer{e: e, slots: getSlots(opts.PoolSize), spill: spillGets}
	e.singles.exec, e.gets.exec = e.execGroup, e.execReads
	e.singles.merge = e.mergeSingles
	e.gets.merge = e.mergeGets
	e.log.Debug("postgres engine open", "dialect", d.String(), "server", version)
	// The primary's timeline and position now; from here on every new connection checks
	// them (failover.go).
	if c, err := pool.Acquire(ctx); err == nil {
		err = e.checkPrimary(ctx, c.Conn())
		c.Release()
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("postgres: %w", err)
		}
	}
	opened.Store(e)
	if err := e.openReplicas(ctx, opts.ReplicaURLs, configure); err != nil {
		close(e.purgeStop)
		e.loops.Wait()
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if e.dialect == dialectPostgres && opts.SyncCommitTimeout > 0 {
		e.loops.Add(1)
		go e.every(syncWatchInterval(opts.SyncCommitTimeout), nil, e.cancelStuckCommits)
	}
	if !opts.DisablePurger {
		e.loops.Add(2)
		go e.purgeLoop()
		go e.expiryLoop()
		if opts.IndexInterval > 0 {
			e.loops.Add(1)
			go e.indexLoop()
		}
		e.wakePurger() // resume purges pending from before
	}
	return e, nil
}

// Dialect names the database the engine detected: postgresql, yugabytedb or cockroachdb.
func (e *Engine) Dialect() string { return e.dialect.String() }

// Close stops the purges and closes the pool, after the calls in flight return. Later
// calls fail with ErrClosed. Closing twice is harmless.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		e.closed.Store(true)
		close(e.purgeStop)
		e.loops.Wait()
		if e.replicas != nil {
			e.replicas.close()
		}
		e.pool.Close()
	})
	return nil
}

// ---------------------------------------------------------------------------------------
// Errors and retries

// errConflict reports a compare-and-swap that lost to a concurrent write; the call is
// retried from its read.
var errConflict = errors.New("concurrent write")

func retryableCode(code string) bool {
	switch code {
	case "40001", // serialization_failure (CockroachDB and YugabyteDB report contention so)
		"40P01": // deadlock_detected
		return true
	}
	return false
}

// unavailableCode reports server errors that mean "cannot serve now": the connection
// classes, shutdown, too many connections, and statement timeouts.
func unavailableCode(code string) bool {
	if len(code) == 5 && code[:2] == "08" { // connection_exception
		return true
	}
	switch code {
	case "57P01", "57P02", "57P03", // admin_shutdown, crash_shutdown, cannot_connect_now
		"57014",          // query_canceled: statement_timeout
		"25006",          // read_only_sql_transaction: the server is a standby now (failover.go)
		"53300",          // too_many_connections
		"53400",          // configuration_limit_exceeded
		"58000", "58030": // system_error, io_error
		return true
	}
	return false
}

// retryable reports whether a call that failed with err may simply run again: the
// database asked for it (serialization failure, deadlock), a compare-and-swap lost, or
// nothing was sent before the connection failed.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return contended(err) || !errors.As(err, &pe) && pgconn.SafeToRetry(err)
}

// contended reports a write that lost to a concurrent write of the same rows: a lost
// compare-and-swap, a serialization failure or a deadlock.
func contended(err error) bool {
	var pe *pgconn.PgError
	return errors.Is(err, errConflict) || errors.As(err, &pe) && retryableCode(pe.Code)
}

// mapErr turns a database error into what the engine reports: the caller's own context
// error, storage.ErrUnavailable for anything that means the database cannot serve now,
// and the error itself (a bug or a schema problem) otherwise.
func (e *Engine) mapErr(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	var ae *storage.ApplyError
	if errors.As(err, &ae) || errors.Is(err, storage.ErrTableNotFound) || errors.Is(err, storage.ErrTableExists) ||
		errors.Is(err, storage.ErrNotFound) || errors.Is(err, storage.ErrUnavailable) ||
		errors.Is(err, storage.ErrFeedOff) || errors.Is(err, storage.ErrChangesExpired) || errors.Is(err, storage.ErrIndexNotFound) {
		return err
	}
	if errors.Is(err, errConflict) {
		e.stmtErrs.contention.Add(1)
		return fmt.Errorf("%s: too much contention: %w", op, storage.ErrUnavailable)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if pe.Code == "53100" { // disk_full: the write is refused, reads go on
			e.stmtErrs.noSpace.Add(1)
			return fmt.Errorf("%s: %w: %v", op, storage.ErrNoSpace, err)
		}
		if unavailableCode(pe.Code) || retryableCode(pe.Code) {
			e.stmtErrs.unavailable.Add(1)
			return fmt.Errorf("%s: %w: %v", op, storage.ErrUnavailable, err)
		}
		e.stmtErrs.other.Add(1)
		return fmt.Errorf("%s: %w", op, err)
	}
	if isConnErr(err) {
		e.stmtErrs.unavailable.Add(1)
		return fmt.Errorf("%s: %w: %v", op, storage.ErrUnavailable, err)
	}
	if e.closed.Load() {
		return ErrClosed
	}
	e.stmtErrs.other.Add(1)
	return fmt.Errorf("%s: %w", op, err)
}

// isConnErr recognises failures of the connection rather than answers of the server:
// refused, reset, timed out, closed under us, pool closed.
func isConnErr(err error) bool {
	var ne net.Error
	var ce *pgconn.ConnectError
	return pgconn.SafeToRetry(err) || pgconn.Timeout(err) || errors.As(err, &ne) || errors.As(err, &ce) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) ||
		strings.Contains(err.Error(), "closed pool")
}

// retry runs fn until it succeeds, fails with an error that is not retryable, or has
// been tried maxAttempts times, backing off a little (with jitter) between attempts.
func (e *Engine) retry(ctx context.Context, op string, fn func() error) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var err error
	for attempt := 1; ; attempt++ {
		err = fn()
		if err == nil || !retryable(err) || attempt >= maxAttempts || ctx.Err() != nil || e.closed.Load() {
			break
		}
		if contended(err) {
			e.retries.Add(1)
		}
		// Back off 0–1 ms at first, growing to 0–20 ms: enough to let the winner of a
		// conflict commit, short enough not to matter.
		d := time.Duration(rand.Int64N(int64(min(attempt, 20)) * int64(time.Millisecond)))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	return e.mapErr(ctx, op, err)
}
