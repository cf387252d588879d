package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// A replica's point reads go through its own coalescer (replica.gets, coalesce.go):
// concurrent Gets of replica views share one round trip and one statement (mergeGets),
// bracketed by the replica's replay position read before and after it.

// slowReason is why a replica that did not answer a read in time leaves rotation.
func (e *Engine) slowReason() string {
	return fmt.Sprintf("slow: a read had no answer within %v (--replica-read-timeout)", e.opts.ReplicaReadTimeout)
}

// execGroup runs point reads on the replica (coalescer.exec) with their brackets.
//
// A lone read (group false) runs under its caller's context, which is its view's
// attempt: bounded and cancelled with the replica already. A group's context is no
// caller's (coalescer.run detaches it, so that a caller that goes away does not fail the
// others' reads), so the group runs as an attempt of its own: bounded by
// Options.ReplicaReadTimeout and cancelled when the replica leaves rotation. A group that
// runs out of time takes the replica out of rotation, as a view's read does; its readers
// then run their reads elsewhere.
func (r *replica) execGroup(ctx context.Context, stmts []stmt, group bool) (bounds, error) {
	if !group {
		return r.readPipeline(ctx, stmts)
	}
	a := r.begin(ctx)
	a.startRound(r.set.e.opts.ReplicaReadTimeout)
	at, err := r.readPipeline(a.ctx, stmts)
	slow := err != nil && a.slow()
	a.end()
	if slow {
		r.out(true, r.set.e.slowReason())
	}
	return at, err
}

// readPipeline runs stmts on the replica between two reads of its replay position, as
// one pipeline with one Sync: one round trip. In READ COMMITTED each statement takes its
// snapshot as it starts, so the first position is a lower bound of what every statement
// saw and the second an upper bound (views.go). stmts' rows are set as they ran. A
// statement the replica refuses (a recovery conflict, say) is returned as the
// *pgconn.PgError it answered.
func (r *replica) readPipeline(ctx context.Context, stmts []stmt) (bounds, error) {
	c, err := r.pool.Acquire(ctx)
	if err != nil {
		return bounds{}, err
	}
	defer c.Release()
	conn := c.Conn()
	var lo, hi *string
	all := make([]stmt, 0, len(stmts)+2)
	all = append(all, stmt{sql: replayQuery, dest: []any{&lo}})
	all = append(all, stmts...)
	all = append(all, stmt{sql: replayQuery, dest: []any{&hi}})
	// Statements are prepared once per connection (pgx keeps them by SQL text); every
	// argument is encoded before anything is sent.
	m := conn.TypeMap()
	sds := make([]*pgconn.StatementDescription, len(all))
	for i := range all {
		if sds[i], err = conn.Prepare(ctx, all[i].sql, all[i].sql); err != nil {
			return bounds{}, err
		}
	}
	ps, err := encodeParams(m, sds, func(i int) []any { return all[i].args })
	if err != nil {
		return bounds{}, err
	}
	pipe := conn.PgConn().StartPipeline(ctx)
	for i := range all {
		pipe.SendQueryPrepared(sds[i].Name, ps[i].values, ps[i].formats, ps[i].results)
	}
	if err := pipe.Sync(); err != nil {
		_ = pipe.Close()
		return bounds{}, err
	}
	stmtErr := readResults(m, pipe, all)
	var pe *pgconn.PgError
	if stmtErr != nil && !errors.As(stmtErr, &pe) {
		// The connection failed (or answered nonsense): it is closed, and the pool drops it.
		_ = pipe.Close()
		return bounds{}, stmtErr
	}
	syncErr := nextSync(pipe)
	if err := pipe.Close(); syncErr == nil {
		syncErr = err
	}
	if stmtErr != nil {
		return bounds{}, stmtErr
	}
	if syncErr != nil {
		return bounds{}, syncErr
	}
	for i := range stmts {
		stmts[i].rows = all[i+1].rows
	}
	var at bounds
	if at.lo, err = parseReplay(lo); err != nil {
		return bounds{}, err
	}
	if at.hi, err = parseReplay(hi); err != nil {
		return bounds{}, err
	}
	return at, nil
}
