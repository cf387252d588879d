package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Read views (storage.View).
//
// ReadView picks the source of one request's reads — the primary, or a replica the
// consistency level allows (replicas.go) — and returns a view that runs every read
// statement bracketed by position queries, in the same round trip:
//
//	[replay position]        only on a replica asked to cover a position: the lower bound
//	the read statement
//	[position]               primary: WAL insert position; replica: replay position
//
// The statements go out as one pipeline (a pgx batch). In READ COMMITTED each statement
// takes its snapshot when it starts, so a position read by the statement before the read
// is a lower bound of what the read sees, and one read by the statement after is an upper
// bound: every commit the read saw ends at or before it (a commit is visible on the
// primary only after its record is inserted, and on a replica only once replayed). A
// scan of several statements runs in one REPEATABLE READ transaction: the lower bound is
// read on its connection before BEGIN, the upper bound inside it before COMMIT.
//
// The lower bound makes a replica's answer safe even if the replica restarted behind what
// the router last saw of it (errBehind: the read goes elsewhere); the upper bound is the
// view's Position, which the server hands out as the session token and the continuation's
// position, so that a later read at it never sees an older state whichever front end
// and replica serve it.
//
// A replica that fails a read — unreachable, behind, cancelled by a recovery conflict,
// anything that is not an answer — never fails the request: the view marks it, and runs
// the read again on another replica that qualifies or on the primary.
//
// Nothing waits on a replica's answer beyond Options.ReplicaReadTimeout: each round trip
// there (a statement with its brackets; beginning a scan's transaction; each of its
// statements; its commit) runs under a context bounded by it. A replica that does not
// answer within it — a hung server, a host cut off without a reset, a query blocked
// behind a lock the replay holds — leaves rotation with the reason logged, and the read
// runs again elsewhere in the same request. Each read attempt on a replica is also
// cancelled the moment the replica leaves rotation for any reason (a failed poll,
// another read's timeout, a promotion), and runs again elsewhere: no read stays on a
// replica the engine has given up on. A cancelled statement's connection is closed by
// pgx, so a hung server keeps none of the pool's connections busy.
//
// Taking a connection from the pool is not bounded so: when it must open one, that takes
// a few round trips and a new server process, and under a burst of reads that open many
// at once it took 1.2–1.8 s on the test machine, on a healthy replica. A read waiting for
// a connection to a hung replica is cancelled when the replica leaves rotation instead:
// at the first timeout of a read there, or at the latest when a poll (every
// Options.ReplicaPoll) does not answer within pollTimeout (1 s).

// errBehind reports a replica whose replay position is below what the view must cover.
var errBehind = errors.New("replica behind the position asked for")

// maxReplicaTries bounds how many replicas one read tries before the primary.
const maxReplicaTries = 3

// ReadView opens a view for one request's reads (see storage.View and above).
func (e *Engine) ReadView(ctx context.Context, opts storage.ReadOptions) (storage.View, error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	v := &view{e: e, opts: opts, pos: opts.At}
	if e.replicas != nil && replicaLevel(opts) {
		if r := e.replicas.route(ctx, opts, nil, true); r != nil {
			v.rep = r
			return v, nil
		}
	}
	if err := e.waitPrimary(ctx, opts.At); err != nil {
		return nil, err
	}
	return v, nil
}

// replicaLevel reports whether a read at opts may be served by a replica: every level
// but Strong, and Session only with a position to cover (without one it is Strong).
func replicaLevel(opts storage.ReadOptions) bool {
	switch opts.Consistency {
	case storage.Strong:
		return false
	case storage.Session:
		return opts.At > 0
	}
	return true
}

// view is a storage.View: the primary's when rep is nil, else replica rep's.
type view struct {
	e    *Engine
	opts storage.ReadOptions
	rep  *replica
	// pos is the highest upper bound read so far (at least opts.At).
	pos storage.Position
	// err is a failure of a bracket's position query, noticed after its statement's rows
	// were read (bracketRows.Close cannot return it).
	err error
	// tried counts the replicas this view has tried.
	tried int
	// att is the read attempt under way on the replica (do), nil on the primary.
	att *attempt
}

// startRound bounds the round trip that starts now, on a replica, by
// Options.ReplicaReadTimeout (attempt).
func (v *view) startRound() {
	if v.att != nil {
		v.att.startRound(v.e.opts.ReplicaReadTimeout)
	}
}

// endRound ends the current round trip's bound.
func (v *view) endRound() {
	if v.att != nil {
		v.att.endRound()
	}
}

var _ storage.View = (*view)(nil)

func (v *view) Source() string {
	if v.rep != nil {
		return storage.ReplicaSource(v.rep.name)
	}
	return storage.SourcePrimary
}

func (v *view) Position() storage.Position { return v.pos }

// do runs read on the view's source, and again elsewhere if a replica fails it. On a
// replica, read runs under a context that is cancelled when the replica leaves rotation.
func (v *view) do(ctx context.Context, read func(context.Context, reads) error) error {
	for {
		v.err = nil
		rctx := ctx
		if v.rep != nil {
			v.att = v.rep.begin(ctx)
			rctx = v.att.ctx
		}
		err := read(rctx, reads{e: v.e, db: v, once: v.rep != nil, grouped: true, view: v})
		if err == nil {
			err = v.err
		}
		var left, slow bool
		if v.att != nil {
			left, slow = err != nil && v.att.left(), err != nil && v.att.slow()
			v.att.end()
			v.att = nil
		}
		if err == nil || v.rep == nil || answer(err) || ctx.Err() != nil {
			if err == nil || answer(err) {
				v.served()
			}
			if v.rep != nil {
				err = v.e.mapErr(ctx, "replica read", err)
			}
			return err
		}
		if err := v.elsewhere(ctx, err, left, slow); err != nil {
			return err
		}
	}
}

// served counts a read the view's source answered.
func (v *view) served() {
	if v.rep != nil {
		v.rep.reads.Add(1)
	} else {
		v.e.primaryReads.Add(1)
	}
}

// answer reports errors that are the database's answer to the read, the same on any
// source that covers the view's position.
func answer(err error) bool {
	return errors.Is(err, storage.ErrNotFound) || errors.Is(err, storage.ErrTableNotFound) ||
		errors.Is(err, storage.ErrIndexNotFound) || errors.Is(err, storage.ErrFeedOff) || errors.Is(err, storage.ErrChangesExpired)
}

// elsewhere moves the view off a replica that failed a read with err (or that left
// rotation while the read was under way, or did not answer in time: slow): to another
// replica that qualifies (after a brief wait when the replica was only behind), or to the
// primary.
func (v *view) elsewhere(ctx context.Context, err error, left, slow bool) error {
	failed := v.rep
	v.tried++
	v.rep = nil
	behind := errors.Is(err, errBehind)
	switch {
	case left:
		// Out of rotation already, with its reason.
	case slow:
		failed.out(true, v.e.slowReason())
	case behind:
		failed.poke() // its monitor looks again now
		failed = nil  // it may still catch up: wait for it too
	default:
		failed.fail(err)
	}
	if v.tried < maxReplicaTries {
		if r := v.e.replicas.route(ctx, v.opts, failed, !behind); r != nil {
			v.rep = r
			return nil
		}
	}
	return v.e.waitPrimary(ctx, v.opts.At)
}

// pool is the view's source's pool.
func (v *view) pool() *pgxpool.Pool {
	if v.rep != nil {
		return v.rep.pool
	}
	return v.e.pool
}

// upperQuery reads the source's position after a read.
func (v *view) upperQuery() string {
	if v.rep != nil {
		return replayQuery
	}
	return v.e.q.position
}

// checkLower reports whether the bracket must read a lower bound first: on a replica,
// when the view must cover a position.
func (v *view) checkLower() bool { return v.rep != nil && v.opts.At > 0 }

// noteLower checks a lower bound read before a read statement.
func (v *view) noteLower(text *string) error {
	p, err := parseReplay(text)
	if err != nil {
		return err
	}
	v.rep.noteReplay(p)
	if p < v.opts.At {
		return fmt.Errorf("%s replayed to %d, the read needs %d: %w", v.rep.name, p, v.opts.At, errBehind)
	}
	return nil
}

// noteGroup checks and records the bounds read around a coalesced point read
// (coalesce.go): on a replica, the lower bound must cover the view's position.
func (v *view) noteGroup(at bounds) error {
	if v.rep != nil {
		v.rep.noteReplay(at.hi)
		if at.lo < v.opts.At {
			return fmt.Errorf("%s replayed to %d, the read needs %d: %w", v.rep.name, at.lo, v.opts.At, errBehind)
		}
	}
	v.pos = max(v.pos, at.hi)
	return nil
}

// noteUpper records an upper bound read after a read statement.
func (v *view) noteUpper(text *string) {
	var p storage.Position
	var err error
	if v.rep != nil {
		if p, err = parseReplay(text); err == nil {
			v.rep.noteReplay(p)
		}
	} else if text == nil {
		err = errors.New("position: NULL")
	} else if p, err = parsePosition(*text); err == nil {
		v.e.observe(p)
	}
	if err != nil {
		if v.err == nil {
			v.err = err
		}
		return
	}
	v.pos = max(v.pos, p)
}

// Query runs sql bracketed by position queries (rdb), in one round trip bounded on a
// replica.
func (v *view) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c, err := v.pool().Acquire(ctx)
	if err != nil {
		return nil, err
	}
	v.startRound()
	b := &pgx.Batch{}
	lower := v.checkLower()
	if lower {
		b.Queue(replayQuery)
	}
	b.Queue(sql, args...)
	b.Queue(v.upperQuery())
	br := c.SendBatch(ctx, b)
	fail := func(err error) (pgx.Rows, error) {
		_ = br.Close()
		c.Release()
		v.endRound()
		return nil, err
	}
	if lower {
		var text *string
		if err := br.QueryRow().Scan(&text); err != nil {
			return fail(err)
		}
		if err := v.noteLower(text); err != nil {
			return fail(err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return fail(err)
	}
	return &bracketRows{Rows: rows, v: v, br: br, c: c}, nil
}

// QueryRow is Query for one row (rdb).
func (v *view) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := v.Query(ctx, sql, args...)
	return bracketRow{rows: rows, err: err}
}

// BeginTx begins a transaction on the view's source, after reading the lower bound on
// its connection; the upper bound is read inside it at Commit (rdb). On a replica, the
// beginning, each statement and the commit are bounded each.
func (v *view) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	c, err := v.pool().Acquire(ctx)
	if err != nil {
		return nil, err
	}
	v.startRound()
	defer v.endRound()
	if v.checkLower() {
		var text *string
		if err := c.QueryRow(ctx, replayQuery).Scan(&text); err != nil {
			c.Release()
			return nil, err
		}
		if err := v.noteLower(text); err != nil {
			c.Release()
			return nil, err
		}
	}
	tx, err := c.BeginTx(ctx, opts)
	if err != nil {
		c.Release()
		return nil, err
	}
	return &bracketTx{Tx: tx, v: v, c: c}, nil
}

// bracketRows are a read statement's rows; closing them reads the upper bound that
// follows them in the batch, and releases the connection.
type bracketRows struct {
	pgx.Rows
	v      *view
	br     pgx.BatchResults
	c      *pgxpool.Conn
	closed bool
}

func (r *bracketRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	if r.Rows.Err() == nil {
		var text *string
		if err := r.br.QueryRow().Scan(&text); err != nil {
			if r.v.err == nil {
				r.v.err = err
			}
		} else {
			r.v.noteUpper(text)
		}
	}
	if err := r.br.Close(); err != nil && r.v.err == nil && r.Rows.Err() == nil {
		r.v.err = err
	}
	r.c.Release()
	r.v.endRound()
}

// bracketRow is a pgx.Row over bracketRows.
type bracketRow struct {
	rows pgx.Rows
	err  error
}

func (r bracketRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// bracketTx reads the upper bound before it commits, and releases its connection.
type bracketTx struct {
	pgx.Tx
	v        *view
	c        *pgxpool.Conn
	released bool
}

// Query runs a statement of the transaction, bounded on a replica.
func (t *bracketTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	t.v.startRound()
	rows, err := t.Tx.Query(ctx, sql, args...)
	if err != nil {
		t.v.endRound()
		return nil, err
	}
	return &boundRows{Rows: rows, v: t.v}, nil
}

func (t *bracketTx) Commit(ctx context.Context) error {
	t.v.startRound()
	defer t.v.endRound()
	var text *string
	if err := t.Tx.QueryRow(ctx, t.v.upperQuery()).Scan(&text); err != nil {
		_ = t.Tx.Rollback(ctx)
		t.release()
		return err
	}
	t.v.noteUpper(text)
	err := t.Tx.Commit(ctx)
	t.release()
	return err
}

func (t *bracketTx) Rollback(ctx context.Context) error {
	t.v.startRound()
	defer t.v.endRound()
	err := t.Tx.Rollback(ctx)
	t.release()
	return err
}

// boundRows are a statement's rows whose round trip's bound ends when they are closed.
type boundRows struct {
	pgx.Rows
	v      *view
	closed bool
}

func (r *boundRows) Close() {
	r.Rows.Close()
	if !r.closed {
		r.closed = true
		r.v.endRound()
	}
}

func (t *bracketTx) release() {
	if !t.released {
		t.released = true
		t.c.Release()
	}
}

// The view's reads (storage.Reader).

func (v *view) Get(ctx context.Context, account, table, pk, rk string) (rec storage.Record, err error) {
	err = v.do(ctx, func(ctx context.Context, r reads) (err error) { rec, err = r.Get(ctx, account, table, pk, rk); return })
	return rec, err
}

func (v *view) GetEncoded(ctx context.Context, account, table, pk, rk string) (rec storage.Record, err error) {
	err = v.do(ctx, func(ctx context.Context, r reads) (err error) {
		rec, err = r.GetEncoded(ctx, account, table, pk, rk)
		return
	})
	return rec, err
}

func (v *view) Scan(ctx context.Context, account, table string, req storage.ScanRequest) (res storage.ScanResult, err error) {
	err = v.do(ctx, func(ctx context.Context, r reads) (err error) { res, err = r.Scan(ctx, account, table, req); return })
	return res, err
}

func (v *view) GetTable(ctx context.Context, account, name string) (info storage.TableInfo, err error) {
	err = v.do(ctx, func(ctx context.Context, r reads) (err error) { info, err = r.GetTable(ctx, account, name); return })
	return info, err
}

func (v *view) ListTables(ctx context.Context, account, from string, limit int) (tables []storage.TableInfo, next string, err error) {
	err = v.do(ctx, func(ctx context.Context, r reads) (err error) {
		tables, next, err = r.ListTables(ctx, account, from, limit)
		return
	})
	return tables, next, err
}

func (v *view) GetTableACL(ctx context.Context, account, table string) (acl []byte, err error) {
	err = v.do(ctx, func(ctx context.Context, r reads) (err error) { acl, err = r.GetTableACL(ctx, account, table); return })
	return acl, err
}

func (v *view) GetServiceProperties(ctx context.Context, account string) (props []byte, err error) {
	err = v.do(ctx, func(ctx context.Context, r reads) (err error) {
		props, err = r.GetServiceProperties(ctx, account)
		return
	})
	return props, err
}
