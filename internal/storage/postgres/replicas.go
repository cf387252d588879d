package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ceruleandb/cerulean/internal/storage"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Read replicas: hot standbys of the primary, fed by PostgreSQL's streaming replication.
//
// The engine watches each replica's replay position (pg_last_wal_replay_lsn) and the
// primary's WAL position, every Options.ReplicaPoll, and keeps a short history of the
// primary's positions over time. From them it knows, for each replica:
//
//   - the position it has replayed: a read there sees every write whose session-token
//     position is at or below it (positions are WAL positions read after the commit);
//   - how stale it is: the primary's positions sampled at time t were all replayed, so the
//     replica holds every write committed by t. Staleness = now − the latest such t (an
//     upper bound, measured by positions, not by replay timestamps, which say nothing
//     while the primary is idle).
//
// While the primary cannot be reached (its last sample failed), staleness is measured
// against the last position it reported, not the wall clock: it is the time of the last
// sample that answered − the latest t the replica covers. A replica that has replayed
// everything the primary last reported is 0 behind — it holds every write anyone could
// read from the primary when it was last heard from — and keeps serving every level but
// Strong, BoundedStaleness included, for as long as the outage lasts; one that was 2 s
// behind stays 2 s behind. (The wall clock would have taken every replica out of rotation
// after Options.ReplicaMaxLag, and out of BoundedStaleness after Options.MaxStaleness,
// though nothing newer exists to read.) Strong reads and writes need the primary: they
// fail with storage.ErrUnavailable (503 ServerBusy with Retry-After) until it is back, as
// do Session reads whose position no replica has replayed. The one thing this front end
// cannot see is a primary that is up but cut off from it alone, taking writes through
// other front ends: a replica that keeps streaming from it stays current by itself, but
// one cut off too serves the state the primary last reported here.
//
// A replica is in rotation while its last poll answered within Options.ReplicaReadTimeout,
// it is in recovery (a promoted replica is no longer ours to read), it reports a replay
// position (an Aurora reader or a logical replica does not), it is what the engine must
// read (identify: a copy of the primary — same system identifier, when the role may read
// it — whose database has Cerulean's schema at this build's version), and it is no more
// than Options.ReplicaMaxLag stale. A read that fails on it takes it out at once, and the
// next good poll brings it back.
//
// At start-up every replica is polled once before Open returns: one that answers but is
// the wrong server, database or search_path (identify's misconfigurations, which never go
// away by themselves) fails Open with a message naming the problem. One that is down,
// not in recovery (in a failover a standby becomes the primary: a state, not a mistake)
// or has not replayed the schema yet starts out of rotation instead, and comes in once it
// qualifies. Each reason a replica is out of rotation is logged once (a warning when it
// leaves rotation or the kind of reason changes) and shown in /debug/replicas.
//
// Routing (route, await) by level: Strong — never a replica; Session with a token and
// any level with a position to cover — a replica that has replayed it, else the replica
// most likely to have it by the time the read runs (the view's bracket checks), else one
// that catches up within Options.ReplicaWait, else the primary; BoundedStaleness — a
// replica no more than Options.MaxStaleness stale; ConsistentPrefix and Eventual — any
// replica in rotation. Among equals the choice is random, which spreads reads evenly.

const (
	// replayQuery reads a replica's replay position (NULL on a server not replaying WAL).
	replayQuery = `SELECT pg_last_wal_replay_lsn()::TEXT`
	// stateQuery is a replica's poll.
	stateQuery = `SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::TEXT`
	// identityQuery reads the cluster's system identifier, which a standby shares with
	// its primary.
	identityQuery = `SELECT system_identifier::TEXT FROM pg_control_system()`
	// schemaAtQuery reads the primary's WAL write position (replicaSet.schemaAt).
	schemaAtQuery = `SELECT pg_current_wal_lsn()::TEXT`
	// versionQuery reads the version of Cerulean's schema in the database (schema.go).
	versionQuery = `SELECT COALESCE(MAX(version), 0) FROM cerulean_migrations`
	// minPollTimeout bounds one poll (pollTimeout): a replica that does not answer within
	// it is out.
	minPollTimeout = time.Second
	// fastPoll is how often replicas are polled while reads wait for one to catch up.
	fastPoll = 2 * time.Millisecond
)

// notPolled is why a replica is out of rotation before its first poll.
const notPolled = "not polled yet"

// errLeft is the cause with which a replica's reads in flight are cancelled when it leaves
// rotation (attempt).
var errLeft = errors.New("the replica left rotation")

// errSlow is the cause with which a read attempt on a replica is cancelled when a round
// trip runs out of Options.ReplicaReadTimeout.
var errSlow = errors.New("no answer within the replica read timeout")

// attempt is one read attempt on a replica (view.do). Its context, which the read's
// statements run under, is cancelled when the replica leaves rotation (cause errLeft) or
// when a round trip runs out of Options.ReplicaReadTimeout (cause errSlow). One object, one
// context and one timer per attempt, reset for each of its round trips (which run one
// after another), keep a replica read's extra cost to a few allocations.
type attempt struct {
	r      *replica
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer // the round trip's bound; nil before the first
}

// begin starts a read attempt on the replica under parent. If the replica is out of
// rotation already, the attempt is cancelled at once.
func (r *replica) begin(parent context.Context) *attempt {
	a := &attempt{r: r}
	a.ctx, a.cancel = context.WithCancelCause(parent)
	r.mu.Lock()
	if r.rotation.Load() {
		r.inflight[a] = struct{}{}
	} else {
		a.cancel(errLeft)
	}
	r.mu.Unlock()
	return a
}

// end ends the attempt, releasing its context and timer.
func (a *attempt) end() {
	a.r.mu.Lock()
	delete(a.r.inflight, a)
	a.r.mu.Unlock()
	if a.timer != nil {
		a.timer.Stop()
	}
	a.cancel(nil)
}

// startRound bounds the round trip that starts now by d.
func (a *attempt) startRound(d time.Duration) {
	if a.timer == nil {
		a.timer = time.AfterFunc(d, a.expire)
	} else {
		a.timer.Reset(d)
	}
}

// endRound ends the current round trip's bound.
func (a *attempt) endRound() {
	if a.timer != nil {
		a.timer.Stop()
	}
}

func (a *attempt) expire() { a.cancel(errSlow) }

// slow reports an attempt cancelled for a round trip that ran out of time; left, one
// cancelled because the replica left rotation.
func (a *attempt) slow() bool { return context.Cause(a.ctx) == errSlow }
func (a *attempt) left() bool { return errors.Is(context.Cause(a.ctx), errLeft) }

// errNoReplay reports a replica that gives no replay position.
var errNoReplay = errors.New("no replay position (pg_last_wal_replay_lsn() is NULL): not a streaming standby")

// parseReplay reads a replay position, which is NULL on a server that is not replaying.
func parseReplay(text *string) (storage.Position, error) {
	if text == nil {
		return 0, errNoReplay
	}
	return parsePosition(*text)
}

// replica is one read replica and what the engine knows of it.
type replica struct {
	set      *replicaSet
	name     string // host:port, for logs, Source and status (never credentials)
	database string // the database its URL names
	pool     *pgxpool.Pool

	replay    atomic.Uint64 // replay position last seen (poll or a view's bracket)
	seen      atomic.Uint64 // the highest replay position ever seen
	covered   atomic.Int64  // UnixNano: it holds every write the primary had by then; 0 unknown
	reachable atomic.Bool
	rotation  atomic.Bool
	lagging   atomic.Bool // further behind than Options.MaxStaleness (logged)
	// wrong: out of rotation for a misconfiguration (identify), which start-up refuses.
	wrong atomic.Bool
	reads atomic.Uint64
	// gets coalesces the point reads of views on the replica (replica_gets.go).
	gets coalescer
	// conflicts counts its reads cancelled by recovery conflicts; conflictsLogged is
	// how many of them were logged, loggedAt when (UnixNano).
	conflicts, conflictsLogged atomic.Uint64
	loggedAt                   atomic.Int64
	wake                       chan struct{} // polls at once

	mu         sync.Mutex
	why        string // why it is out of rotation
	identified bool   // identify passed since it last became reachable
	// inflight are the read attempts under way on the replica, cancelled when it leaves
	// rotation.
	inflight map[*attempt]struct{}
}

// sample is the primary's position at a time: every write committed by then is at or
// below pos.
type sample struct {
	at  int64 // UnixNano, taken before the position was read
	pos storage.Position
}

// replicaSet is the engine's replicas and their monitor.
type replicaSet struct {
	e    *Engine
	list []*replica

	mu      sync.Mutex
	changed chan struct{} // closed when a replay position advances

	waiters atomic.Int32 // reads waiting in await

	smu     sync.Mutex
	samples []sample // ring of the primary's positions, oldest first from head
	head, n int

	// down: the primary's last sample failed; heard is when the last one that answered
	// was taken (UnixNano). Staleness is measured at heard while the primary is down.
	down  atomic.Bool
	heard atomic.Int64

	primaryID string // the primary's system identifier; "" when it cannot be read
	// schemaAt is the primary's position when the engine opened, after the schema was
	// migrated: a replica that has replayed it has Cerulean's schema at this build's
	// version in the primary's database (identify).
	schemaAt storage.Position
}

// openReplicas makes a pool per replica URL (connections are made on demand, so a
// replica that is down at start-up only starts out of rotation) and starts the monitor.
func (e *Engine) openReplicas(ctx context.Context, urls []string, configure func(*pgxpool.Config)) error {
	if len(urls) == 0 {
		return nil
	}
	if e.dialect != dialectPostgres {
		return fmt.Errorf("read replicas need PostgreSQL streaming replication; %s serves consistent reads from every node itself", e.dialect)
	}
	s := &replicaSet{e: e, changed: make(chan struct{})}
	keep := e.opts.ReplicaMaxLag + 10*e.opts.ReplicaPoll
	s.samples = make([]sample, min(int(keep/e.opts.ReplicaPoll)+8, 100_000))
	names := map[string]int{}
	for _, u := range urls {
		cfg, err := pgxpool.ParseConfig(u)
		if err != nil {
			s.close()
			return fmt.Errorf("replica url: %w", err)
		}
		configure(cfg)
		name := net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
		if names[name]++; names[name] > 1 {
			name += "#" + strconv.Itoa(names[name])
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			s.close()
			return fmt.Errorf("replica %s: %w", name, err)
		}
		r := &replica{set: s, name: name, database: cfg.ConnConfig.Database, pool: pool, wake: make(chan struct{}, 1), why: notPolled,
			inflight: map[*attempt]struct{}{}}
		r.gets = coalescer{e: e, slots: getSlots(int(cfg.MaxConns)), exec: r.execGroup, merge: e.mergeGets, abandon: true}
		s.list = append(s.list, r)
	}
	if err := e.pool.QueryRow(ctx, identityQuery).Scan(&s.primaryID); err != nil {
		e.log.Debug("replicas: cannot read the primary's system identifier; replicas are not checked against it", "err", err)
		s.primaryID = ""
	}
	s.samplePrimary(ctx)
	// The WAL write position, not the insert position the samples read: on an idle
	// primary that one may point past the next page's header, which no standby ever
	// reports having replayed; the write position is at most the end of the last record.
	var text string
	if err := e.pool.QueryRow(ctx, schemaAtQuery).Scan(&text); err != nil {
		s.close()
		return fmt.Errorf("read the primary's WAL position: %w", err)
	}
	p, err := parsePosition(text)
	if err != nil {
		s.close()
		return err
	}
	s.schemaAt = p
	// The first poll of each replica, now: one that is not what it must be is refused.
	var wg sync.WaitGroup
	for _, r := range s.list {
		wg.Go(func() { r.poll(ctx) })
	}
	wg.Wait()
	var wrong []error
	for _, r := range s.list {
		if r.wrong.Load() {
			r.mu.Lock()
			wrong = append(wrong, fmt.Errorf("replica %s: %s", r.name, r.why))
			r.mu.Unlock()
		}
	}
	if len(wrong) > 0 {
		s.close()
		return errors.Join(wrong...)
	}
	e.replicas = s
	e.loops.Add(1)
	go e.every(e.opts.ReplicaPoll, nil, s.samplePrimary)
	for _, r := range s.list {
		e.loops.Add(1)
		go r.monitor()
	}
	return nil
}

// close closes the replicas' pools (after the monitor has stopped).
func (s *replicaSet) close() {
	for _, r := range s.list {
		r.pool.Close()
	}
}

// samplePrimary records the primary's position now.
func (s *replicaSet) samplePrimary(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.e.pollTimeout())
	defer cancel()
	at := time.Now().UnixNano()
	_, p, err := reached(ctx, s.e.pool, s.e.q.position, 0)
	if err != nil {
		if ctx.Err() != nil && s.e.closed.Load() {
			return
		}
		// Replicas keep their last figures, and staleness is measured at the last
		// sample that answered (see above).
		if !s.down.Swap(true) {
			s.e.log.Warn("primary unreachable: replicas serve every level but Strong, their staleness measured against the primary's last reported position",
				"position", lsn(s.latest()), "reportedAgo", time.Since(time.Unix(0, s.heard.Load())).Round(time.Millisecond), "err", err)
		}
		return
	}
	s.e.observe(p)
	s.heard.Store(at)
	if s.down.Swap(false) {
		s.e.log.Info("primary reachable again", "position", lsn(p))
	}
	s.smu.Lock()
	i := (s.head + s.n) % len(s.samples)
	if s.n == len(s.samples) {
		s.head = (s.head + 1) % len(s.samples)
	} else {
		s.n++
	}
	s.samples[i] = sample{at: at, pos: p}
	s.smu.Unlock()
}

// coveredAt is the latest sample time whose position replay covers (0 if none), and
// the time of the oldest sample kept.
func (s *replicaSet) coveredAt(replay storage.Position) (covered, oldest int64) {
	s.smu.Lock()
	defer s.smu.Unlock()
	if s.n == 0 {
		return 0, time.Now().UnixNano()
	}
	oldest = s.samples[s.head].at
	for k := s.n - 1; k >= 0; k-- {
		if sm := s.samples[(s.head+k)%len(s.samples)]; sm.pos <= replay {
			return sm.at, oldest
		}
	}
	return 0, oldest
}

// reference is the time staleness is measured at: now, or while the primary cannot be
// reached, when it last answered a sample.
func (s *replicaSet) reference(now time.Time) time.Time {
	if s.down.Load() {
		if heard := time.Unix(0, s.heard.Load()); heard.Before(now) {
			return heard
		}
	}
	return now
}

// latest is the primary's last sampled position.
func (s *replicaSet) latest() storage.Position {
	s.smu.Lock()
	defer s.smu.Unlock()
	if s.n == 0 {
		return 0
	}
	return s.samples[(s.head+s.n-1)%len(s.samples)].pos
}

// monitor polls the replica every ReplicaPoll, at once when woken, and every fastPoll
// while reads wait for a replica that keeps up.
func (r *replica) monitor() {
	e := r.set.e
	defer e.loops.Done()
	ctx, cancel := e.loopContext()
	defer cancel()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-e.purgeStop:
			return
		case <-r.wake:
		case <-t.C:
		}
		r.poll(ctx)
		next := e.opts.ReplicaPoll
		if r.set.waiters.Load() > 0 && r.keepsUp(time.Now()) {
			next = fastPoll
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(next)
	}
}

// poke makes the monitor poll now.
func (r *replica) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// pollTimeout bounds one poll of a replica or of the primary: minPollTimeout, or twice
// Options.ReplicaReadTimeout if that is longer.
func (e *Engine) pollTimeout() time.Duration {
	return max(minPollTimeout, 2*e.opts.ReplicaReadTimeout)
}

// poll reads the replica's state and decides whether it is in rotation.
func (r *replica) poll(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.set.e.pollTimeout())
	defer cancel()
	var (
		recovering bool
		text       *string
	)
	// What was seen before the poll is sent: a live standby's replay position only grows,
	// so an answer below it means the standby restarted behind it. (A view may see a
	// higher position while the poll is under way; that proves nothing.)
	seen := storage.Position(r.seen.Load())
	began := time.Now()
	err := r.pool.QueryRow(ctx, stateQuery).Scan(&recovering, &text)
	if err != nil && recoveryConflict(err) && ctx.Err() == nil {
		// The replay ended the connection (a dropped database, say): poll again, on
		// another one.
		r.set.e.log.Info("replica: a recovery conflict ended a connection", "replica", r.name, "err", err)
		began = time.Now()
		err = r.pool.QueryRow(ctx, stateQuery).Scan(&recovering, &text)
	}
	if err != nil {
		if ctx.Err() != nil && r.set.e.closed.Load() {
			return
		}
		var pe *pgconn.PgError
		switch {
		case recoveryConflict(err):
			r.out(true, "recovery conflict: "+err.Error())
		case errors.As(err, &pe) && !unavailableCode(pe.Code):
			// It answered, but refuses us: no such database, no such role, not allowed.
			r.out(true, "refused: "+err.Error())
		default:
			r.out(false, "unreachable: "+err.Error())
		}
		return
	}
	// A replica that answers, but slower than a read may wait, serves no read: reads
	// would only run out of time there.
	if took, bound := time.Since(began), r.set.e.opts.ReplicaReadTimeout; took > bound {
		r.out(true, fmt.Sprintf("slow: a poll took %v, more than %v (--replica-read-timeout)", took.Round(time.Millisecond), bound))
		return
	}
	if !recovering {
		r.out(true, "not in recovery: it was promoted, or is not a standby")
		return
	}
	p, err := parseReplay(text)
	if err != nil {
		r.out(true, err.Error())
		return
	}
	why, wrong := r.identify(ctx, p)
	r.wrong.Store(wrong)
	if why != "" {
		r.out(true, why)
		return
	}
	r.replay.Store(uint64(p)) // the truth now, even if lower than before (a restart)
	r.set.e.observe(p)        // the primary has reached what a replica replayed
	r.set.notify()
	if p < seen {
		// Restarted behind what it had replayed (a standby reopens at its last restart
		// point): its reads would go back in time, so it waits until it is back there.
		r.out(true, fmt.Sprintf("catching up after a restart: replayed to %s, had reached %s", lsn(p), lsn(seen)))
		return
	}
	raiseTo(&r.seen, p)
	covered, oldest := r.set.coveredAt(p)
	r.covered.Store(covered)
	// Uncovered by every sample kept: lagging if the samples span ReplicaMaxLag, else
	// (just after start-up) unknown, which only BoundedStaleness reads avoid.
	ref := r.set.reference(time.Now())
	if max := r.set.e.opts.ReplicaMaxLag; covered == 0 && ref.Sub(time.Unix(0, oldest)) > max ||
		covered != 0 && ref.Sub(time.Unix(0, covered)) > max {
		r.out(true, fmt.Sprintf("lagging: more than %v behind the primary", max))
		return
	}
	r.in()
	r.noteLag(p, covered)
}

// noteLag logs when a replica in rotation falls further behind than Options.MaxStaleness
// (it then serves no BoundedStaleness read) and when it is back within it.
func (r *replica) noteLag(replay storage.Position, covered int64) {
	o := r.set.e.opts
	staleness := r.staleness(time.Now())
	lagging := covered != 0 && staleness > o.MaxStaleness
	if lagging == r.lagging.Load() {
		return
	}
	r.lagging.Store(lagging)
	primary := r.set.latest()
	var bytes uint64
	if primary > replay {
		bytes = uint64(primary - replay)
	}
	if lagging {
		r.set.e.log.Warn("replica lagging", "replica", r.name, "staleness", staleness.Round(time.Millisecond),
			"lagBytes", bytes, "maxStaleness", o.MaxStaleness)
	} else {
		r.set.e.log.Info("replica caught up", "replica", r.name, "lagBytes", bytes)
	}
}

// schemaVersion is the version of Cerulean's schema this build migrates to.
func schemaVersion() int64 { return migrations[len(migrations)-1].version }

// identify checks, once per reconnection, that the replica is what the engine must read:
// a copy of the primary (the same system identifier, when the role may read it) whose
// database — as its URL names it, with its search_path — has Cerulean's schema at this
// build's version. replay is the replica's replay position. It returns why not ("" if it
// is), and whether that is a misconfiguration rather than a state the replica leaves by
// itself: another server; or, once it has replayed past the point where the primary's
// database had the schema (replicaSet.schemaAt), no schema (or an older one, or none this
// role may read) in the database it is read in — another database or search_path than
// the primary's URL names.
func (r *replica) identify(ctx context.Context, replay storage.Position) (why string, wrong bool) {
	r.mu.Lock()
	done := r.identified
	r.mu.Unlock()
	if done {
		return "", false
	}
	s := r.set
	if s.primaryID != "" {
		var id string
		if err := r.pool.QueryRow(ctx, identityQuery).Scan(&id); err != nil {
			s.e.log.Debug("replica: cannot read its system identifier", "replica", r.name, "err", err)
			id = s.primaryID
		}
		if id != s.primaryID {
			return fmt.Sprintf("not a standby of the primary (system identifier %s, the primary's is %s)", id, s.primaryID), true
		}
	}
	var version int64
	err := r.pool.QueryRow(ctx, versionQuery).Scan(&version)
	var pe *pgconn.PgError
	switch {
	case err == nil && version >= schemaVersion():
		r.mu.Lock()
		r.identified = true
		r.mu.Unlock()
		return "", false
	case err == nil:
		why = fmt.Sprintf("Cerulean's schema in database %q is at version %d, this build's is %d", r.database, version, schemaVersion())
	case errors.As(err, &pe) && !unavailableCode(pe.Code) && !recoveryConflict(err):
		why = fmt.Sprintf("no Cerulean schema readable in database %q (%s)", r.database, pe.Message)
	default:
		return "cannot read Cerulean's schema version: " + err.Error(), false
	}
	if replay < s.schemaAt {
		return fmt.Sprintf("%s: it has not replayed the primary's schema yet (replayed to %s, the schema is complete at %s)", why, lsn(replay), lsn(s.schemaAt)), false
	}
	return fmt.Sprintf("%s, though it has replayed past the point where the primary's database has it (%s): "+
		"the replica URL names another database, search_path or role than --postgres-url", why, lsn(s.schemaAt)), true
}

// in puts the replica in rotation.
func (r *replica) in() {
	r.reachable.Store(true)
	if r.rotation.Load() {
		return
	}
	r.mu.Lock()
	r.why = ""
	r.mu.Unlock()
	r.rotation.Store(true)
	staleness := "unknown yet"
	if r.covered.Load() != 0 {
		staleness = r.staleness(time.Now()).Round(time.Millisecond).String()
	}
	r.set.e.log.Info("replica in rotation", "replica", r.name, "replay", lsn(storage.Position(r.replay.Load())),
		"staleness", staleness)
	r.set.notify()
}

// out takes the replica out of rotation, saying why (a warning when it leaves rotation;
// later reasons at debug level), and cancels the reads under way there (views.go).
func (r *replica) out(reachable bool, why string) {
	r.reachable.Store(reachable)
	was := r.rotation.Swap(false)
	r.mu.Lock()
	if len(r.inflight) > 0 {
		cause := fmt.Errorf("%w: %s", errLeft, why)
		for a := range r.inflight {
			a.cancel(cause)
			delete(r.inflight, a)
		}
	}
	first := r.why == notPolled
	changed := r.why != why
	kindChanged := reasonKind(r.why) != reasonKind(why)
	r.why = why
	if !reachable {
		r.identified = false // it may come back as another server
	}
	r.mu.Unlock()
	switch {
	case was || first:
		r.set.e.log.Warn("replica out of rotation", "replica", r.name, "reason", why)
	case kindChanged:
		r.set.e.log.Warn("replica still out of rotation", "replica", r.name, "reason", why)
	case changed:
		r.set.e.log.Debug("replica still out of rotation", "replica", r.name, "reason", why)
	}
}

// reasonKind is the kind of a reason to be out of rotation: its text up to the first
// colon or parenthesis ("unreachable", "lagging", "no Cerulean schema readable in
// database "x""), so that a reason whose details change (an error's text, a position) is
// logged once.
func reasonKind(why string) string {
	if i := strings.IndexAny(why, ":("); i >= 0 {
		return why[:i]
	}
	return why
}

// fail takes the replica out after a read failed on it, if the failure means it cannot
// serve (the connection or the server); a statement-level failure (a recovery conflict)
// only moves that read.
func (r *replica) fail(err error) {
	var pe *pgconn.PgError
	switch {
	case recoveryConflict(err):
		r.noteConflict(err)
	case errors.As(err, &pe) && misconfigured(pe.Code):
		// The database, a table or the right to read it is missing there: check the
		// replica again (identify) before it serves another read.
		r.mu.Lock()
		r.identified = false
		r.mu.Unlock()
		r.out(true, "a read failed: "+err.Error())
		r.poke()
	case errors.As(err, &pe) && !unavailableCode(pe.Code):
		// An answer to the statement: only this read moves.
	case errors.As(err, &pe) || isConnErr(err):
		r.out(false, "a read failed: "+err.Error())
		r.poke()
	}
}

// recoveryConflict reports an error a standby raises when replaying the primary's WAL
// conflicts with a statement or a session there — the statement is cancelled, or the
// session ended: SQLSTATE 40001 and 40P01 (which nothing else raises on a standby, where
// no transaction writes) and 57P04 (the session's database was dropped).
func recoveryConflict(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case "40001", "40P01", "57P04":
		return true
	}
	return false
}

// misconfigured reports SQLSTATEs that say a replica lacks what reads need: no such
// database, table or column, or no right to read them.
func misconfigured(code string) bool {
	switch code {
	case "3D000", "3F000", "42P01", "42703", "42501", "28000":
		return true
	}
	return false
}

// noteConflict logs reads a recovery conflict cancelled (they run again elsewhere): the
// first at once, then at most one line every 10 s with the count since.
func (r *replica) noteConflict(err error) {
	n := r.conflicts.Add(1)
	now := time.Now().UnixNano()
	last := r.loggedAt.Load()
	if last != 0 && time.Duration(now-last) < 10*time.Second || !r.loggedAt.CompareAndSwap(last, now) {
		return
	}
	since := n - r.conflictsLogged.Swap(n)
	r.set.e.log.Info("replica reads cancelled by recovery conflicts; they ran again elsewhere", "replica", r.name, "reads", since, "err", err)
}

// noteReplay raises the replay position to p, as a view's bracket saw it.
func (r *replica) noteReplay(p storage.Position) {
	raiseTo(&r.seen, p)
	if raiseTo(&r.replay, p) {
		r.set.e.observe(p)
		r.set.notify()
	}
}

// staleness bounds how old the replica's state is at now: measured at now, or while the
// primary cannot be reached, at its last answer (replicaSet.reference).
func (r *replica) staleness(now time.Time) time.Duration {
	c := r.covered.Load()
	if c == 0 {
		return time.Duration(1<<63 - 1)
	}
	return max(r.set.reference(now).Sub(time.Unix(0, c)), 0)
}

// keepsUp reports a replica in rotation whose replay follows the primary closely enough
// that a fresh position is worth trying or waiting for there.
func (r *replica) keepsUp(now time.Time) bool {
	o := r.set.e.opts
	return r.rotation.Load() && r.staleness(now) <= max(2*o.ReplicaWait, 4*o.ReplicaPoll)
}

// notify wakes the reads waiting in await.
func (s *replicaSet) notify() {
	if s.waiters.Load() == 0 {
		return
	}
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// eligible reports whether r may serve a read at level c now (ignoring positions).
func (s *replicaSet) eligible(r *replica, c storage.Consistency, now time.Time) bool {
	if !r.rotation.Load() {
		return false
	}
	return c != storage.BoundedStaleness || r.staleness(now) <= s.e.opts.MaxStaleness
}

// route picks the replica for a read at opts, or nil for the primary; exclude (if not
// nil) just failed a read. Without a position to cover, any eligible replica; with one,
// an eligible replica known to have replayed it, else (with probe) the eligible replica
// that keeps up with the highest replay position — its bracket checks, in the read's
// own round trip, whether it has the position by then — else (without probe, after
// such a check failed) one that replays it within Options.ReplicaWait, if any keeps up.
func (s *replicaSet) route(ctx context.Context, opts storage.ReadOptions, exclude *replica, probe bool) *replica {
	now := time.Now()
	ok := func(r *replica) bool { return r != exclude && s.eligible(r, opts.Consistency, now) }
	if opts.At == 0 {
		return s.pick(ok)
	}
	covers := func(r *replica) bool { return ok(r) && storage.Position(r.replay.Load()) >= opts.At }
	if r := s.pick(covers); r != nil {
		return r
	}
	var best *replica
	for _, r := range s.list {
		if ok(r) && r.keepsUp(now) && (best == nil || r.replay.Load() > best.replay.Load()) {
			best = r
		}
	}
	if best == nil {
		return nil
	}
	if probe {
		return best
	}
	return s.await(ctx, covers, s.e.opts.ReplicaWait)
}

// pick returns a random replica that ok accepts, or nil.
func (s *replicaSet) pick(ok func(*replica) bool) *replica {
	var chosen *replica
	n := 0
	for _, r := range s.list {
		if ok(r) {
			n++
			if rand.IntN(n) == 0 { // reservoir sampling: each with probability 1/n
				chosen = r
			}
		}
	}
	return chosen
}

// await waits up to d for a replica that ok accepts, polling the replicas fast
// meanwhile, and returns it, or nil.
func (s *replicaSet) await(ctx context.Context, ok func(*replica) bool, d time.Duration) *replica {
	if d <= 0 {
		return nil
	}
	s.waiters.Add(1)
	defer s.waiters.Add(-1)
	for _, r := range s.list {
		r.poke()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if r := s.pick(ok); r != nil {
			return r
		}
		select {
		case <-ch:
		case <-t.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// ReplicaStatus is what the engine knows of one replica, for diagnostics.
type ReplicaStatus struct {
	// Name is the replica's host:port (its URL without credentials).
	Name string `json:"name"`
	// Reachable: the last poll answered.
	Reachable bool `json:"reachable"`
	// InRotation: reads may go to it (reachable, a standby of this primary, not further
	// behind than Options.ReplicaMaxLag).
	InRotation bool `json:"inRotation"`
	// ReplayPosition is the replica's replay position as last seen; PrimaryPosition the
	// primary's last sampled position; both as PostgreSQL writes an LSN.
	ReplayPosition  string `json:"replayPosition"`
	PrimaryPosition string `json:"primaryPosition"`
	// LagBytes is how much WAL the replica has still to replay (0 when caught up).
	LagBytes uint64 `json:"lagBytes"`
	// StalenessSeconds bounds how old the replica's state is: it holds every write the
	// primary had committed that long ago (-1: unknown).
	StalenessSeconds float64 `json:"stalenessSeconds"`
	// Reads is how many reads this front end has served from it.
	Reads uint64 `json:"reads"`
	// RecoveryConflicts is how many of this front end's reads a recovery conflict
	// cancelled there (each ran again elsewhere).
	RecoveryConflicts uint64 `json:"recoveryConflicts"`
	// Error is why it is out of rotation, if it is.
	Error string `json:"error,omitempty"`
}

// Replicas reports the state of each configured replica, in the order configured.
func (e *Engine) Replicas() []ReplicaStatus {
	s := e.replicas
	if s == nil {
		return []ReplicaStatus{}
	}
	now := time.Now()
	primary := s.latest()
	out := make([]ReplicaStatus, 0, len(s.list))
	for _, r := range s.list {
		replay := storage.Position(r.replay.Load())
		st := ReplicaStatus{
			Name:              r.name,
			Reachable:         r.reachable.Load(),
			InRotation:        r.rotation.Load(),
			ReplayPosition:    lsn(replay),
			PrimaryPosition:   lsn(primary),
			Reads:             r.reads.Load(),
			RecoveryConflicts: r.conflicts.Load(),
			StalenessSeconds:  -1,
		}
		if primary > replay {
			st.LagBytes = uint64(primary - replay)
		}
		if r.covered.Load() != 0 {
			st.StalenessSeconds = r.staleness(now).Seconds()
		}
		r.mu.Lock()
		st.Error = r.why
		r.mu.Unlock()
		out = append(out, st)
	}
	return out
}

// PrimaryReads is how many views' reads this front end has served from the primary.
func (e *Engine) PrimaryReads() uint64 { return e.primaryReads.Load() }

// lsn writes a position as PostgreSQL writes an LSN.
func lsn(p storage.Position) string {
	return fmt.Sprintf("%X/%X", uint64(p)>>32, uint64(p)&0xFFFFFFFF)
}
