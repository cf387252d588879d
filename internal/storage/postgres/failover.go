package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Positions across a failover (docs/high-availability.md).
//
// With a high-availability tool (Patroni, pg_auto_failover) the primary can change under
// a front end: its URL names every node with target_session_attrs=read-write, so when
// the primary dies the pool's connections fail (503 ServerBusy) and new ones reach
// whichever node was promoted. With synchronous replication the promoted standby holds
// every acknowledged commit, so no acknowledged write is lost. But positions need care:
// a position is the WAL insert position read after a commit or around a read
// (positions.go), and the old primary's insert position can run ahead of what reached
// the standby — WAL of transactions not committed yet, or written but not yet sent. The
// standby is promoted at the end of what it received (the switch point, where its new
// timeline begins), so its positions start below tokens the old primary handed out.
// Left alone, that breaks two promises:
//
//   - A Session read with such a token through a front end that has not seen it waits
//     for the new primary to reach it, and answers 503 ServerBusy (ErrFuturePosition)
//     until enough writes have moved the new primary past it — with no writes, forever.
//   - Positions go back: a write after the failover gets a position below a token the
//     client holds; and a standby that received more of the old timeline than the
//     promoted one (before it is rewound to follow the new primary) reports a replay
//     position that compares as covering the new primary's early positions, though it
//     lacks their writes.
//
// Nothing the old timeline held past the switch point was ever acknowledged or visible
// (a commit becomes visible on the primary only once the synchronous standby has it), so
// every state of the new primary at or past the switch point covers any token of the old
// timeline: the only fix needed is for the new primary's positions to pass the old
// timeline's. So every connection to the primary, as it is made (the pool's AfterConnect,
// before it serves anything), reads the primary's insert position and the end of the WAL
// it replayed before it became a primary (pg_last_wal_replay_lsn: the switch point on a
// promoted standby, the end of crash recovery on a restarted primary, NULL on one that
// started cleanly), and when the insert position is below
//
//   - the highest position this front end has seen (its writes', its reads', its
//     replicas' replay positions), or
//   - failoverMargin past the end of the replayed WAL (for tokens other front ends
//     handed out, and the replay positions of standbys that received more of the old
//     timeline than the promoted one),
//
// it writes WAL until the position passes both (pg_logical_emit_message, which any role
// may call, with a non-transactional message of that many bytes; no row changes). The
// first connection after a failover does it, whichever front end makes it; later ones
// find the position already past. The connection serves nothing before, so no position
// this front end hands out on the new primary is below one it handed out on the old, and
// no standby still on the old timeline covers a position of the new. The same holds after
// a crash of the primary that Patroni restarted in place (its WAL not flushed is gone,
// some of it under positions handed out). What is left: a token more than failoverMargin
// past the switch point, from a front end that did not live through the failover (the
// old primary had that much WAL its standby never got), waits for writes as a token from
// the future does (503 ServerBusy after Options.PositionWait); it is never served from a
// state older than it covers.
//
// failoverMargin is a WAL segment (16 MiB): more than the WAL a primary holds that its
// synchronous standby has not received — at most its WAL buffers (wal_buffers: 16 MiB at
// most unless set higher) plus what is in flight on the network — in all but
// pathological cases. Pushing it costs one 16 MiB WAL record per failover.
const failoverMargin = 16 << 20

// primaryStateQuery reads the primary's insert position, the end of the WAL it replayed
// before it became a primary (NULL if none), and its timeline (the first 8 hexadecimal
// digits of the WAL file name, for the log; pg_walfile_name fails on a standby).
const primaryStateQuery = `SELECT pg_current_wal_insert_lsn()::TEXT, pg_last_wal_replay_lsn()::TEXT,
	pg_walfile_name(pg_current_wal_insert_lsn())`

// advanceQuery writes a non-transactional logical message of $1 bytes: WAL, and nothing
// else.
const advanceQuery = `SELECT pg_logical_emit_message(false, 'cerulean.failover', repeat(' ', $1::int))::TEXT`

// advanceLock is the advisory lock key under which front ends advance the position
// ("cerulean" in ASCII).
const advanceLock int64 = 0x6365_7275_6c65_616e

// maxAdvance bounds one advanceQuery's message.
const maxAdvance = 64 << 20

// feedFailoverGap is how far every change feed's counter jumps when a promoted standby
// (or a primary restarted after a crash) first takes writes (docs/change-feed-design.md
// §5). A reader of an asynchronous standby may have seen records of the old timeline that
// the promoted standby never received; their numbers lie below the counter's value on
// the old primary, which is at most the records in flight past the switch point above
// the counter the new primary starts from. After the jump every record of the new
// timeline is numbered above them, so a continuation from such a record reads on without
// skipping a record of the new timeline (the lost records themselves are gone, as their
// changes are). A reader of the primary or a synchronous standby never sees such records.
const feedFailoverGap = 1 << 24

// feedFailoverQuery moves every feed's counter past the numbers the old timeline may
// have handed out.
const feedFailoverQuery = `UPDATE cerulean_feeds SET next = next + $1`

// checkPrimary runs on every new connection to the primary before it serves anything:
// see above. It returns an error only when the connection failed (the pool then drops
// it); a database that cannot answer the queries (not PostgreSQL's WAL functions, or a
// server in recovery, which serves no write anyway) is left alone.
func (e *Engine) checkPrimary(ctx context.Context, c *pgx.Conn) error {
	if e.dialect != dialectPostgres {
		return nil
	}
	// One connection at a time: after a failover every connection is new, and one
	// advance serves them all.
	select {
	case e.failoverSem <- struct{}{}:
		defer func() { <-e.failoverSem }()
	case <-ctx.Done():
		return ctx.Err()
	}
	pos, replayed, tl, err := readPrimaryState(ctx, c)
	if err != nil {
		return primaryCheckErr(err)
	}
	target := storage.Position(e.highest.Load())
	if replayed != 0 {
		target = max(target, replayed+failoverMargin)
	}
	if prev := e.timeline.Swap(tl); prev != 0 && prev != tl {
		e.log.Warn("new primary timeline: a failover happened", "timeline", tl, "previousTimeline", prev,
			"position", lsn(pos), "switchPoint", lsn(replayed))
	}
	if pos >= target {
		e.observe(pos)
		return nil
	}
	// Front ends take turns (a session advisory lock, which every role may take, released
	// with the connection should it break), and each looks again once it has the lock: the
	// first one's advance serves them all, instead of each writing its own 16 MiB.
	if _, err := c.Exec(ctx, "SELECT pg_advisory_lock($1)", advanceLock); err != nil {
		return primaryCheckErr(err)
	}
	defer func() { _, _ = c.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", advanceLock) }()
	if pos, _, _, err = readPrimaryState(ctx, c); err != nil {
		return primaryCheckErr(err)
	}
	if pos >= target {
		e.observe(pos)
		return nil
	}
	if replayed != 0 {
		// Before any write of this timeline takes a number: the first connection past
		// the switch point does it, under the lock, before it advances the position (so
		// a later connection that finds the position advanced finds the counters moved).
		if _, err := c.Exec(ctx, feedFailoverQuery, int64(feedFailoverGap)); err != nil {
			return primaryCheckErr(err)
		}
	}
	from := pos
	for range 8 {
		n := min(uint64(target-pos), maxAdvance)
		if _, err := c.Exec(ctx, advanceQuery, strconv.FormatUint(n, 10)); err != nil {
			return primaryCheckErr(err)
		}
		if pos, _, _, err = readPrimaryState(ctx, c); err != nil {
			return primaryCheckErr(err)
		}
		if pos >= target {
			break
		}
	}
	if pos < target {
		return fmt.Errorf("primary position %s still below %s after advancing it", lsn(pos), lsn(target))
	}
	e.observe(pos)
	e.log.Info("primary position advanced past every position handed out before it became the primary",
		"from", lsn(from), "to", lsn(pos), "replayedTo", lsn(replayed), "timeline", tl)
	return nil
}

// primaryCheckErr is checkPrimary's error: nil for a server's refusal (see there).
func primaryCheckErr(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && !unavailableCode(pe.Code) {
		return nil
	}
	return err
}

// readPrimaryState reads the primary's insert position, the end of the WAL it replayed
// (0: none) and its timeline.
func readPrimaryState(ctx context.Context, c *pgx.Conn) (pos, replayed storage.Position, tl uint32, err error) {
	var text, file string
	var replay *string
	if err := c.QueryRow(ctx, primaryStateQuery).Scan(&text, &replay, &file); err != nil {
		return 0, 0, 0, err
	}
	if pos, err = parsePosition(text); err != nil {
		return 0, 0, 0, err
	}
	if replay != nil {
		if replayed, err = parsePosition(*replay); err != nil {
			return 0, 0, 0, err
		}
	}
	if len(file) < 8 {
		return 0, 0, 0, fmt.Errorf("WAL file name %q", file)
	}
	n, err := strconv.ParseUint(file[:8], 16, 32)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("WAL file name %q: %w", file, err)
	}
	return pos, replayed, uint32(n), nil
}

// Commits a synchronous standby never confirmed.
//
// With synchronous replication a commit waits, after it is durable locally, until the
// synchronous standby has it (the statement timeout does not bound that wait: it ends
// before the commit). A primary that hung and came back after another node was promoted
// waits for a standby that now follows someone else. If the wait is cancelled — a cancel
// request (pg_cancel_backend, a client's), or the server shutting down — PostgreSQL ends
// it with a WARNING ("canceling wait for synchronous replication"; the transaction "has
// already committed locally, but might not have been replicated to the standby") and
// reports the commit as a success. Such a commit can be
// lost in the failover (the old primary is rewound), so the engine must not acknowledge
// it: a write during which the primary sent a WARNING (code 01000, or 57P01 for the
// shutdown case) fails with storage.ErrUnavailable — 503 ServerBusy, outcome unknown,
// which clients retry (an insert retried may then find its entity: 409). The notices are
// recorded per connection by the pool's OnNotice (noteNotice) and looked up after the
// write only while there are any, so writes pay one atomic load.

// Commits stuck waiting for a synchronous standby.
//
// With synchronous_mode_strict (docs/high-availability.md), a primary that has lost every
// standby makes each commit wait until one is back, and nothing else bounds that wait:
// the statement timeout ends before the commit, and a request would hang until its client
// gives up. So every front end looks, every syncWatchInterval, for backends of its
// database and role that have waited for a synchronous standby longer than
// Options.SyncCommitTimeout, and cancels their waits (pg_cancel_backend, which a role may
// send to its own backends). Each such commit then ends with the WARNING above, and its
// write answers 503 ServerBusy: committed on one machine, outcome unknown. The look is one
// query on the primary; it cancels another front end's waits as readily as its own,
// which is the same policy.

// stuckCommitsQuery cancels the waits for a synchronous standby older than $1 seconds of
// this database's and role's backends, and counts them.
const stuckCommitsQuery = `SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity
	WHERE wait_event = 'SyncRep' AND datname = current_database() AND usename = current_user
	AND query_start < now() - make_interval(secs => $1::float8)`

// syncWatchInterval is how often cancelStuckCommits looks: a quarter of the bound, at
// least 100 ms and at most a second.
func syncWatchInterval(bound time.Duration) time.Duration {
	return min(max(bound/4, 100*time.Millisecond), time.Second)
}

// cancelStuckCommits cancels the commits that have waited for a synchronous standby
// longer than Options.SyncCommitTimeout (see above). A primary that cannot be reached is
// left alone: its waits end with its connections.
func (e *Engine) cancelStuckCommits(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var n int64
	if err := e.pool.QueryRow(ctx, stuckCommitsQuery, e.opts.SyncCommitTimeout.Seconds()).Scan(&n); err != nil {
		e.log.Debug("look for commits waiting for the synchronous standby", "err", err)
		return
	}
	if n > 0 {
		e.log.Warn("cancelled commits that waited for the synchronous standby too long: their writes answer 503",
			"commits", n, "bound", e.opts.SyncCommitTimeout)
	}
}

// errUnconfirmed is a write whose commit the synchronous standby did not confirm.
var errUnconfirmed = fmt.Errorf("the commit's wait for the synchronous standby was cancelled: it may be lost in a failover: %w", storage.ErrUnavailable)

// noteNotice records a WARNING the primary sent on connection pc.
func (e *Engine) noteNotice(pc *pgconn.PgConn, n *pgconn.Notice) {
	sev := n.SeverityUnlocalized
	if sev == "" {
		sev = n.Severity
	}
	if sev != "WARNING" || n.Code != "01000" && n.Code != "57P01" {
		return
	}
	if _, loaded := e.unconfirmed.LoadOrStore(pc, n.Message); !loaded {
		e.unconfirmedN.Add(1)
	}
	e.log.Warn("the primary cancelled a commit's wait for its synchronous standby; the write is reported as failed (503)", "notice", n.Message, "detail", n.Detail)
}

// onPrimary runs fn on a connection of the primary's pool and fails with errUnconfirmed
// when the primary warned during it that a commit's wait for the synchronous standby was
// cancelled, as pipeline does for the entity writes: the catalogue's writes (tables.go)
// keep the same promise.
func (e *Engine) onPrimary(ctx context.Context, fn func(c *pgxpool.Conn) error) error {
	c, err := e.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	err = fn(c)
	if e.unconfirmedOn(c.Conn().PgConn()) && err == nil {
		closeUnconfirmed(ctx, c.Conn().PgConn())
		return errUnconfirmed
	}
	return err
}

// closeUnconfirmed closes a connection on which a commit went unconfirmed, so that the
// pool drops it (a primary that cannot reach its synchronous standby is no place to go on
// writing).
func closeUnconfirmed(ctx context.Context, pc *pgconn.PgConn) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	_ = pc.Close(cctx)
	cancel()
}

// unconfirmedOn reports (and forgets) a WARNING noteNotice recorded on pc.
func (e *Engine) unconfirmedOn(pc *pgconn.PgConn) bool {
	if e.unconfirmedN.Load() == 0 {
		return false
	}
	if _, ok := e.unconfirmed.LoadAndDelete(pc); ok {
		e.unconfirmedN.Add(-1)
		return true
	}
	return false
}
