package postgres

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/jackc/pgx/v5/pgconn"
)

// Coalesced single writes.
//
// A synced commit is most of what a single-entity write costs the database: the
// transaction's start and commit, the WAL flush and the wait for it, a Sync and its
// flush to the client, the position query's own transaction. Concurrent single writes
// (applySingle's statements, which never raise: a failed precondition or a stale cache
// writes no row and answers none) therefore share them: the writes queued while the
// connections allowed for single writes are busy go out together as one pipeline, one
// implicit transaction, one commit and one position read. Each keeps its own statement
// and its own answer, and each is still atomic; a commit covers all of them, and the
// position read after it covers each.
//
// The statements of a group run in (table id, PartitionKey, RowKey) order, so two groups
// take their row locks in the same order and cannot deadlock each other. Two writes of
// one row in a group run one after the other, as they would on two connections.
//
// If the database refuses a statement, the group's transaction is rolled back and
// nothing of it is committed; each write then runs again on its own, so it gets its own
// answer and a write never fails for another's statement. A connection failure is every
// write's failure, as it would have been alone.
//
// A merge of one entity (applyRMW) is a read and a compare-and-swap: its swap, which
// answers no row rather than raising when it loses, goes with the single writes, and its
// read with the point reads.
//
// Point reads of the primary (Get, the primary's views' Get) go the same way, through a
// coalescer of their own: concurrent ones share a round trip, a Sync, the database's
// wake-up and the position read after them. A group of reads is one statement
// (mergeGets: the keys as arrays, unnested), read from one snapshot taken within the
// group's round trip, and the position read after the group is an upper bound of what
// each saw (views.go), as the one after a lone read is.
//
// A replica's point reads (a replica view's Get) go through a coalescer of the replica's
// own, for the same reasons: without it, each read there was its own round trip with
// its brackets, and cost the replica 3–4× the CPU of a read of the primary. A replica's
// group is one pipeline, bracketed as a view brackets a statement (replicaGroup): the
// replay position, the group's statement, the replay position again. The first is a
// lower bound of what every read of the group saw, checked by each against the position
// it must cover; the second an upper bound, each read's position. A replica's group runs
// under a bound of its own (Options.ReplicaReadTimeout) and is cancelled when the replica
// leaves rotation; a read whose own bound runs out while its group is under way does not
// wait for the group (abandon), so no read waits on a replica beyond its bound.
//
// Nothing waits to fill a group: a write goes out at once when fewer than
// coalescer.slots groups are in flight (singleSlots for writes, getSlots for reads),
// and only otherwise joins the queue, which the next group takes whole (up to
// maxGroup). So a lone write costs what it did before, and under load the groups grow
// by themselves with the database's commit latency. The primary's point reads have one
// slot more, which a group takes only once coalescer.spill reads wait (spillGets).

// maxGroup bounds the writes of one group, so that one transaction stays short.
const maxGroup = 64

// single is one queued statement (a single write, or a Get).
type single struct {
	st     *stmt
	tid    int64
	pk, rk []byte
	at     bounds
	err    error
	done   chan struct{} // closed once at and err are set
	lead   chan struct{} // a token to run the queue as a group (buffered 1)
	queued bool          // still in the queue (guarded by coalescer.mu)
}

// bounds are the positions read around a group's statements: lo before them (0 when
// not read), hi after them (the commit position, or a replica's replay position).
type bounds struct{ lo, hi storage.Position }

type coalescer struct {
	e     *Engine
	slots int // most groups in flight
	// spill, if above 0, lets one group more than slots go out as soon as that many
	// statements are queued (see spillGets).
	spill int
	// exec runs a group's statements (or one alone) and reads the positions around them.
	// group is set when ctx is not a caller's own (run detaches it: see there), so that
	// exec bounds it where it must (a replica's).
	exec func(ctx context.Context, stmts []stmt, group bool) (bounds, error)
	// abandon: a caller whose context ends while its statement is in a group returns at
	// once rather than waiting for the group's outcome. Only for reads, whose outcome a
	// caller that gave up has no use for (a write's must be known).
	abandon bool
	// merge, if set, makes one statement of a group that does the work of all of its
	// statements and leaves each one's rows and dest as if it had run alone; ok false
	// runs the group's statements one by one instead.
	merge func(group []*single) (st stmt, ok bool)

	mu       sync.Mutex
	queue    []*single
	inflight int

	// calls counts the statements given to do; shared, those that ran, without error, in
	// a group of more than one; merged, the groups of them that ran as one statement.
	calls, shared, merged atomic.Int64
}

// do runs st in a group and returns the positions read around the group's transaction;
// st.rows and st.dest are set as if it ran alone. st must not raise an error for an
// answer (applySingle's statements and Get's do not): an error rolls the group back
// and runs each of its statements again alone. tid, pk and rk order the group's
// statements (a write's table id and row).
func (c *coalescer) do(ctx context.Context, st *stmt, tid int64, pk, rk []byte) (bounds, error) {
	c.calls.Add(1)
	c.mu.Lock()
	if c.inflight < c.slots && len(c.queue) == 0 {
		c.inflight++
		c.mu.Unlock()
		one := []stmt{*st}
		at, err := c.exec(ctx, one, false)
		st.rows = one[0].rows
		c.next()
		return at, err
	}
	s := &single{st: st, tid: tid, pk: pk, rk: rk, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	s.queued = true
	c.queue = append(c.queue, s)
	if c.spill > 0 && len(c.queue) >= c.spill && c.inflight <= c.slots {
		// Enough wait to make a group worth its round trip: they go out now, in the one
		// extra slot, rather than wait out the groups in flight. (This write is in the
		// group unless the queue was longer than maxGroup; it then waits below.)
		c.inflight++
		group := c.take()
		c.mu.Unlock()
		c.run(ctx, group)
		c.next()
	} else {
		c.mu.Unlock()
	}
	for {
		select {
		case <-s.done:
			c.pass(s)
			return s.at, s.err
		case <-s.lead:
			// A slot is free: run the queue (this write is in it, unless a group took it
			// meanwhile).
			c.mu.Lock()
			group := c.take()
			c.mu.Unlock()
			if len(group) > 0 {
				c.run(ctx, group)
			}
			c.next()
		case <-ctx.Done():
			c.mu.Lock()
			if s.queued {
				c.queue = slices.DeleteFunc(c.queue, func(x *single) bool { return x == s })
				s.queued = false
				c.mu.Unlock()
				c.pass(s)
				return bounds{}, ctx.Err()
			}
			c.mu.Unlock()
			if c.abandon {
				// The group finishes without it: it writes only into st, which the
				// caller, failing, no longer reads.
				c.pass(s)
				return bounds{}, ctx.Err()
			}
			// Taken by a group: its outcome is this write's. The group's statements are
			// bounded by the statement timeout.
			<-s.done
			c.pass(s)
			return s.at, s.err
		}
	}
}

// take removes up to maxGroup writes from the head of the queue; c.mu is held. The
// caller holds a slot.
func (c *coalescer) take() []*single {
	n := min(len(c.queue), maxGroup)
	group := slices.Clone(c.queue[:n])
	c.queue = slices.Delete(c.queue, 0, n)
	for _, s := range group {
		s.queued = false
	}
	return group
}

// pass hands on a slot that was offered to s (which is no longer queued, so no other
// offer can come) and that s will not use.
func (c *coalescer) pass(s *single) {
	select {
	case <-s.lead:
		c.next()
	default:
	}
}

// next gives up the caller's slot, handing it to the first queued write if any.
func (c *coalescer) next() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) > 0 {
		select {
		case c.queue[0].lead <- struct{}{}:
			return // the slot passes on
		default:
			// It has a token already (and is about to use it): keep looking.
		}
		for _, s := range c.queue[1:] {
			select {
			case s.lead <- struct{}{}:
				return
			default:
			}
		}
	}
	c.inflight--
}

// run executes a group and finishes each of its writes. It does not run under the
// context of the caller that runs it: a caller that goes away must not fail the others'
// writes (the statement timeout bounds them).
func (c *coalescer) run(ctx context.Context, group []*single) {
	ctx = context.WithoutCancel(ctx)
	if len(group) == 1 {
		s := group[0]
		one := []stmt{*s.st}
		s.at, s.err = c.exec(ctx, one, true)
		c.finish(s, &one[0])
		return
	}
	slices.SortStableFunc(group, func(x, y *single) int {
		if x.tid != y.tid {
			return cmp.Compare(x.tid, y.tid)
		}
		if d := bytes.Compare(x.pk, y.pk); d != 0 {
			return d
		}
		return bytes.Compare(x.rk, y.rk)
	})
	// One statement for the whole group if merge makes one (it then sets each write's rows
	// and dest itself), or each write's own statement.
	var stmts []stmt
	merged := false
	if c.merge != nil {
		var st stmt
		if st, merged = c.merge(group); merged {
			stmts = []stmt{st}
		}
	}
	if !merged {
		stmts = make([]stmt, len(group))
		for i, s := range group {
			stmts[i] = *s.st
		}
	}
	at, err := c.exec(ctx, stmts, true)
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		c.runAlone(ctx, group)
		return
	}
	if err == nil {
		c.shared.Add(int64(len(group)))
		if merged {
			c.merged.Add(1)
		}
	}
	for i, s := range group {
		s.at, s.err = at, err
		if merged {
			close(s.done)
		} else {
			c.finish(s, &stmts[i])
		}
	}
}

// runAlone runs each statement of a group that the database refused (and rolled back)
// again, alone, for its own answer.
func (c *coalescer) runAlone(ctx context.Context, group []*single) {
	for _, s := range group {
		s.st.rows = 0 // a merged statement may have counted rows before it failed
		one := []stmt{*s.st}
		s.at, s.err = c.exec(ctx, one, true)
		c.finish(s, &one[0])
	}
}

// finish copies the row count of the statement as it ran and wakes the write's caller.
func (c *coalescer) finish(s *single, ran *stmt) {
	s.st.rows = ran.rows
	close(s.done)
}

// singleSlots is how many groups (of single writes, or of point reads) may be in flight
// at once for a pool of poolSize connections: as many as the process has cores
// (GOMAXPROCS), and at most a quarter of the pool, so that under load statements queue and
// share round trips and commits, while batches and queries keep connections of their own.
//
// Each group in flight is a database backend running its statements one after another;
// beyond the cores this process has to use the answers, more groups only cut the same
// load into smaller ones, each with its own round trip, Sync, backend wake-up, commit and
// position read. On a 2-core machine shared with PostgreSQL, 2 slots rather than 8 (a
// quarter of the default pool) took point reads from 14,400/s to 18,700/s and synced
// inserts from 9,300/s to 11,600/s (medians of 3, `cerulean bench --client raw`, 32
// connections), with lower p99s and the database's CPU per statement about halved.
func singleSlots(poolSize int) int {
	return max(1, min(poolSize/4, runtime.GOMAXPROCS(0)))
}

// getSlots is how many groups of point reads may be in flight at once for a pool of
// poolSize connections: one per two cores (GOMAXPROCS), at most a quarter of the pool as
// for writes, and at least one.
//
// A group of reads waits for no commit: its round trip is the backend's work and the
// front end's, both CPU, so a second group in flight on a small machine only splits the
// reads into smaller groups that cost more each, and wakes one more backend. On 2 cores
// shared with PostgreSQL (`cerulean bench --client raw --workers 32 --workloads read`,
// fresh servers and databases, alternating), one group in flight rather than two made
// 12,941–16,307 point reads/s against 11,404–13,199 in four pairs of 5-second runs, with
// the front end's CPU per read 62–77 µs against 78–86 and groups of about 17 reads
// instead of 13; in four pairs of 3-round runs the medians were 13,561–17,461/s against
// 11,629–16,098/s (one pair the other way). The price is in the tail under load, where a
// read may wait out the group in flight: p99s at half the measured rate of 4.9–9.0 ms
// against 4.7–5.3 ms, at rates about a fifth higher. Without the HTTP server's work on
// the cores (BenchmarkGet, the engine alone) one slot and two read alike: there the
// backends are the bottleneck.
func getSlots(poolSize int) int {
	return max(1, min(poolSize/4, runtime.GOMAXPROCS(0)/2))
}

// spillGets is the primary's point reads' spill (coalescer.spill): when that many reads
// are queued behind the groups in flight (getSlots), they go out at once as one more
// group.
//
// With one group in flight (2 cores), the reads that arrive while it is out wait for
// it, and so do their HTTP exchanges: the front end's core then sits idle while the
// database runs the group. Under `cerulean bench --client raw --workers 32 --workloads
// read` the groups held 9–11 reads and 0.27–0.30 of the 2 cores were idle (0.17 under
// the same load on Pebble). A second group once 8 wait makes groups of 6–8 reads, each
// with its own round trip, Sync and backend wake-up, but keeps the cores busier (0.15–0.18
// idle): 22,053–22,604 reads/s against 17,624–22,075 in three alternating pairs. Spills of
// 6 and 10 did alike, both above none, in three alternating triples (none, 6, 10):
// 19,022/19,771/20,764, 17,095/18,886/18,467 and 14,644/17,137/17,972 reads/s.
const spillGets = 8
