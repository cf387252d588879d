package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Commit positions (session tokens).
//
// An Apply's position is read after its commit, in the same round trip: the write's
// statements and the position query go out as one pipeline with two Syncs,
//
//	Bind/Execute × N, Sync, Bind/Execute(position), Sync
//
// so the statements run as one implicit transaction that commits at the first Sync, and
// the position query runs after the commit, in a transaction of its own. If a statement
// fails, the server skips the rest up to the first Sync (the transaction is rolled
// back), and still answers the position query; the connection is left idle either way.
// On PostgreSQL the position is the WAL insert position (dialect.positionQuery): it is
// at or past the end of the commit record, and every later commit ends past it.
//
// Each front end remembers the highest position it has seen (its writes', and the
// positions its reads were bracketed by, views.go). waitPrimary(p) answers at once for p
// at or below it; above it, it reads the database's position until it has reached p, for
// up to Options.PositionWait, and then fails with storage.ErrFuturePosition. Replicas
// are asked the same question of their replay position (replicas.go).

// stmt is one statement of a pipelined write and where its first row goes.
type stmt struct {
	sql  string
	args []any
	dest []any // scan targets for the first row; nil ignores the rows
	rows int   // rows the statement returned (set by exec)
	// each, if set, reads every row instead of dest the first; an error fails the
	// statement as a scan error does.
	each func(m valueScanner, fds []pgconn.FieldDescription, vals [][]byte) error
	// feed, if set, says the statement records changes of a table's feed: the pipeline
	// numbers them and seals the feed last (changes.go).
	feed *feedNote
}

// valueScanner decodes one column value (pgtype.Map's Scan).
type valueScanner interface {
	Scan(oid uint32, formatCode int16, src []byte, dst any) error
}

// execGroup is exec for the primary's coalescers (coalescer.exec): the position read
// after the commit is the upper bound; no lower bound is read.
func (e *Engine) execGroup(ctx context.Context, stmts []stmt, _ bool) (bounds, error) {
	pos, err := e.exec(ctx, stmts)
	return bounds{hi: pos}, err
}

// execReads is execGroup for statements that write nothing (Engine.gets: point reads
// and a merge's read). On PostgreSQL their pipeline has one Sync,
//
//	Bind/Execute × N, Bind/Execute(position), Sync
//
// rather than a commit's Sync before the position query: a transaction that writes
// nothing has no commit to wait for, and the position is still read after the
// statements ran, so it is still an upper bound of what each of them saw (the WAL insert
// position is past every commit a later snapshot sees; it is read live, not from the
// transaction's snapshot). That spares the database a transaction, a ReadyForQuery and
// a flush per group, and the front end a wake-up and a read. The other dialects read
// their position from the clock, which inside the statements' transaction could be
// the transaction's start: they keep the Sync.
func (e *Engine) execReads(ctx context.Context, stmts []stmt, _ bool) (bounds, error) {
	mode := positionAfterCommit
	if e.dialect == dialectPostgres {
		mode = positionInReads
	}
	pos, err := e.run(ctx, stmts, mode)
	return bounds{hi: pos}, err
}

// positionMode says whether and where a pipeline reads the position.
type positionMode uint8

const (
	// positionNone reads no position (0: a benchmark's baseline).
	positionNone positionMode = iota
	// positionAfterCommit reads it after a Sync that commits the statements.
	positionAfterCommit
	// positionInReads reads it after the statements, before the one Sync: only for
	// statements that write nothing, on PostgreSQL (execReads).
	positionInReads
)

// exec runs stmts as one implicit transaction and then reads the commit position, in
// one round trip. It returns the first statement error (a *pgconn.PgError when the
// database refused a statement; nothing of the transaction is then committed).
func (e *Engine) exec(ctx context.Context, stmts []stmt) (storage.Position, error) {
	return e.pipeline(ctx, stmts, true)
}

// pipeline is exec, with the position query only if withPosition (without it, the
// position is 0: a benchmark's baseline).
func (e *Engine) pipeline(ctx context.Context, stmts []stmt, withPosition bool) (storage.Position, error) {
	if withPosition {
		return e.run(ctx, stmts, positionAfterCommit)
	}
	return e.run(ctx, stmts, positionNone)
}

// run is pipeline with the position read as mode says.
func (e *Engine) run(ctx context.Context, stmts []stmt, mode positionMode) (storage.Position, error) {
	withPosition := mode != positionNone
	c, err := e.pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Release()
	conn := c.Conn()
	// Statements that record changes of a feed are followed by its seal, the
	// transaction's last statements (changes.go).
	written := stmts
	if seals := e.sealFeeds(stmts); seals != nil {
		stmts = append(stmts[:len(stmts):len(stmts)], seals...)
		defer func() {
			for i := range written {
				written[i].rows = stmts[i].rows
			}
		}()
	}
	// Statements are prepared once per connection (pgx keeps them by SQL text).
	n := len(stmts)
	if withPosition {
		n++
	}
	sds := make([]*pgconn.StatementDescription, n)
	for i := range stmts {
		if sds[i], err = conn.Prepare(ctx, stmts[i].sql, stmts[i].sql); err != nil {
			return 0, err
		}
	}
	if withPosition {
		if sds[len(stmts)], err = conn.Prepare(ctx, e.q.position, e.q.position); err != nil {
			return 0, err
		}
	}
	// Encode every argument before anything is sent: a failure then sends nothing.
	m := conn.TypeMap()
	ps, err := encodeParams(m, sds, func(i int) []any {
		if i < len(stmts) {
			return stmts[i].args
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	pipe := conn.PgConn().StartPipeline(ctx)
	for i := range sds {
		pipe.SendQueryPrepared(sds[i].Name, ps[i].values, ps[i].formats, ps[i].results)
		if i == len(stmts)-1 && mode == positionAfterCommit {
			pipe.SendPipelineSync() // the commit
		}
	}
	if err := pipe.Sync(); err != nil {
		_ = pipe.Close()
		return 0, err
	}

	stmtErr := readResults(m, pipe, stmts)
	var pe *pgconn.PgError
	if stmtErr != nil && !errors.As(stmtErr, &pe) {
		// The connection failed (or answered nonsense): it is closed, and the pool drops it.
		_ = pipe.Close()
		return 0, stmtErr
	}
	// The first Sync (after an error, the server skipped to it), then the position; or,
	// with positionInReads, the position and then the one Sync (which an error skipped
	// to, past the position).
	var pos storage.Position
	posErr := func() error {
		if mode != positionInReads || stmtErr != nil {
			if err := nextSync(pipe); err != nil || !withPosition || mode == positionInReads {
				return err
			}
		}
		res, err := pipe.GetResults()
		if err != nil {
			return err
		}
		rr, ok := res.(*pgconn.ResultReader)
		if !ok {
			return fmt.Errorf("pipeline: unexpected %T", res)
		}
		var text string
		st := stmt{dest: []any{&text}}
		if err := readResult(m, rr, &st); err != nil {
			return err
		}
		if st.rows != 1 {
			return fmt.Errorf("position: %d rows", st.rows)
		}
		if pos, err = parsePosition(text); err != nil {
			return err
		}
		return nextSync(pipe)
	}()
	if cerr := pipe.Close(); posErr == nil {
		posErr = cerr
	}
	if e.unconfirmedOn(conn.PgConn()) && stmtErr == nil {
		// Committed locally, not confirmed by the synchronous standby (failover.go).
		closeUnconfirmed(ctx, conn.PgConn())
		return 0, errUnconfirmed
	}
	if stmtErr != nil {
		return 0, stmtErr
	}
	if posErr != nil && !withPosition {
		return 0, posErr
	}
	if posErr != nil {
		// Committed, but the position was not read: read it now (still after the commit).
		if pos, posErr = e.currentPosition(ctx); posErr != nil {
			return 0, fmt.Errorf("committed, but reading the commit position failed: %w", posErr)
		}
	}
	e.observe(pos)
	return pos, nil
}

// readResults reads the results of stmts from pipe, in order, up to the first error,
// which it returns (a *pgconn.PgError when the server refused a statement: the pipeline
// then goes on at the next Sync).
func readResults(m valueScanner, pipe *pgconn.Pipeline, stmts []stmt) error {
	for i := range stmts {
		res, err := pipe.GetResults()
		if err != nil {
			return err
		}
		rr, ok := res.(*pgconn.ResultReader)
		if !ok {
			return fmt.Errorf("pipeline: unexpected %T", res)
		}
		if err := readResult(m, rr, &stmts[i]); err != nil {
			return err
		}
	}
	return nil
}

// readResult reads a statement's rows, scanning the first into st.dest, and closes it.
func readResult(m valueScanner, rr *pgconn.ResultReader, st *stmt) error {
	var scanErr error
	for rr.NextRow() {
		switch {
		case scanErr != nil:
		case st.each != nil:
			scanErr = st.each(m, rr.FieldDescriptions(), rr.Values())
		case st.rows == 0 && st.dest != nil:
			scanErr = scanColumns(m, rr.FieldDescriptions(), rr.Values(), st.dest)
		}
		st.rows++
	}
	if _, err := rr.Close(); err != nil {
		return err
	}
	return scanErr
}

// scanColumns scans a row's columns into dest, one each.
func scanColumns(m valueScanner, fds []pgconn.FieldDescription, vals [][]byte, dest []any) error {
	if len(fds) != len(dest) {
		return fmt.Errorf("statement answered %d columns, want %d", len(fds), len(dest))
	}
	for j := range fds {
		if err := scanValue(m, fds[j].DataTypeOID, fds[j].Format, vals[j], dest[j]); err != nil {
			return fmt.Errorf("scan column %s: %w", fds[j].Name, err)
		}
	}
	return nil
}

// nextSync reads the pipeline up to and including its next Sync point.
func nextSync(pipe *pgconn.Pipeline) error {
	for {
		res, err := pipe.GetResults()
		if err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) {
				continue // skipped to the Sync
			}
			return err
		}
		switch r := res.(type) {
		case *pgconn.PipelineSync:
			return nil
		case *pgconn.ResultReader:
			if _, err := r.Close(); err != nil {
				var pe *pgconn.PgError
				if !errors.As(err, &pe) {
					return err
				}
			}
		case nil:
			return errors.New("pipeline: missing Sync")
		}
	}
}

// parsePosition reads the position query's answer: a PostgreSQL LSN "X/Y" (two
// hexadecimal halves of a 64-bit byte position) or a decimal tick count.
func parsePosition(s string) (storage.Position, error) {
	if hi, lo, ok := strings.Cut(s, "/"); ok {
		h, err1 := strconv.ParseUint(hi, 16, 32)
		l, err2 := strconv.ParseUint(lo, 16, 32)
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("position %q is not an LSN", s)
		}
		return storage.Position(h<<32 | l), nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("position %q: %w", s, err)
	}
	return storage.Position(n), nil
}

// observe raises the highest position this front end has seen to p.
func (e *Engine) observe(p storage.Position) { raiseTo(&e.highest, p) }

// raiseTo sets a to p if p is higher, and reports whether it did.
func raiseTo(a *atomic.Uint64, p storage.Position) bool {
	for {
		old := a.Load()
		if uint64(p) <= old {
			return false
		}
		if a.CompareAndSwap(old, uint64(p)) {
			return true
		}
	}
}

// markPosition commits a transaction that writes no row but still moves the position,
// and returns the position after it: the position of an Apply that wrote nothing.
func (e *Engine) markPosition(ctx context.Context) (storage.Position, error) {
	return e.exec(ctx, []stmt{{sql: e.q.mark}})
}

// currentPosition reads the position the primary has reached.
func (e *Engine) currentPosition(ctx context.Context) (storage.Position, error) {
	_, p, err := reached(ctx, e.pool, e.q.position, 0)
	if err == nil {
		e.observe(p)
	}
	return p, err
}

// reached reports whether the database behind pool has reached position p, and the
// position it has reached. query is the position query (for a replica, one that reads
// its replay position).
func reached(ctx context.Context, pool *pgxpool.Pool, query string, p storage.Position) (bool, storage.Position, error) {
	var text string
	if err := pool.QueryRow(ctx, query).Scan(&text); err != nil {
		return false, 0, err
	}
	at, err := parsePosition(text)
	if err != nil {
		return false, 0, err
	}
	return at >= p, at, nil
}

// waitPrimary returns once the primary has reached p: a position this front end has
// seen answers at once; a higher one (another front end's, or one from the future) is
// looked up, and waited for up to Options.PositionWait.
func (e *Engine) waitPrimary(ctx context.Context, p storage.Position) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if p == 0 || uint64(p) <= e.highest.Load() {
		return nil
	}
	deadline := time.Now().Add(e.opts.PositionWait)
	wait := time.Millisecond
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		ok, at, err := reached(ctx, e.pool, e.q.position, p)
		if err != nil {
			return e.mapErr(ctx, "read position", err)
		}
		e.observe(at)
		if ok {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("position %d (the database is at %d): %w", p, at, storage.ErrFuturePosition)
		}
		t := time.NewTimer(min(wait, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(wait*2, 50*time.Millisecond)
	}
}

// Position reads the primary's position: it covers every write that returned.
func (e *Engine) Position(ctx context.Context) (storage.Position, error) {
	if e.closed.Load() {
		return 0, ErrClosed
	}
	p, err := e.currentPosition(ctx)
	return p, e.mapErr(ctx, "read position", err)
}
