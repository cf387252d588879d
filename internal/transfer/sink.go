package transfer

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ceruleandb/cerulean/client"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/transfer/record"
)

// MaxBatch is the most entities of one $batch changeset.
const MaxBatch = 100

// maxBatchBytes keeps a changeset under the service's 4 MiB request limit.
const maxBatchBytes = 3 << 20

// WriteError is a write the target refused: the entity it names (when the service named
// one), and the service's error.
type WriteError struct {
	Table, PartitionKey, RowKey string
	Err                         error
}

func (e *WriteError) Error() string {
	code := ""
	var ce *client.Error
	if errors.As(e.Err, &ce) && ce.Code != "" {
		code = ce.Code + ": "
	}
	return fmt.Sprintf("table %s, PartitionKey %q, RowKey %q: %s%v", e.Table, e.PartitionKey, e.RowKey, code, trimCode(e.Err))
}

func (e *WriteError) Unwrap() error { return e.Err }

// trimCode is the error's message without the status and code client.Error puts first.
func trimCode(err error) string {
	var ce *client.Error
	if errors.As(err, &ce) {
		s := (&client.Error{Status: ce.Status, Message: ce.Message}).Error()
		if i := len(fmt.Sprint(ce.Status)) + 2; len(s) > i {
			return s[i:]
		}
	}
	return err.Error()
}

// pos is a record's place in its stream: seq counts records from the start of the run;
// at is where a resumed run starts to see this record again (an offset in a file, or
// the continuation of the page holding it).
type pos struct {
	seq int64
	at  any
}

type batch struct {
	table string
	pk    string
	mode  client.WriteMode
	items []item
	bytes int
	start pos
}

// item is one entity of a batch: its keys, its request body (the entity's properties as
// read) and, when its expiry is carried, that expiry (BatchEntity.Expiry: the instant, or
// client.ExpiryNever), which each attempt checks against the clock.
type item struct {
	client.BatchEntity
}

// sink writes records to one target: it groups them into batches of one partition (at
// most 100 entities, under 4 MiB), hands each to the worker that owns its partition (so
// one partition's batches are written in order, and several partitions in parallel), and
// tracks which positions are acknowledged for the checkpoint.
type sink struct {
	dst   *client.Client
	retry Retry
	mode  client.WriteMode
	// resolve marks a resumed run: an insert refused with EntityAlreadyExists is
	// resolved against the target (resolveConflict), since the interrupted run may have
	// written the entities past its checkpoint, whatever stopped it.
	resolve bool
	// since is the earliest Timestamp (the target's clock, 100 ns ticks since the Unix
	// epoch) that an entity written by this run, or by the run it resumes, can have; 0
	// when unknown.
	since int64
	// now is the clock that decides what lifetime an expiring entity has left (nil:
	// the system clock).
	now       func() time.Time
	onDone    func(entities, bytes int)
	onRetry   func(error)
	onExpired func(entities int)

	seed         maphash.Seed
	queues       []chan *batch
	wg           sync.WaitGroup
	open         map[openKey]*batch
	pending      int // entities in open batches
	pendingBytes int // and their bytes
	buf          []byte

	mu       sync.Mutex
	inflight map[int64]pos // start seq → start position of each unacknowledged batch
	next     pos           // the position after the last record added
	err      error
	failed   chan struct{}
}

func newSink(ctx context.Context, dst *client.Client, mode client.WriteMode, workers int, retry Retry) *sink {
	if workers <= 0 {
		workers = 8
	}
	s := &sink{dst: dst, mode: mode, retry: retry, seed: maphash.MakeSeed(), inflight: map[int64]pos{}, failed: make(chan struct{})}
	for range workers {
		q := make(chan *batch, 2)
		s.queues = append(s.queues, q)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for b := range q {
				if s.failedYet() {
					continue
				}
				n, err := s.write(ctx, b)
				if err != nil {
					s.fail(err)
					continue
				}
				s.ack(b, n)
			}
		}()
	}
	return s
}

func (s *sink) failedYet() bool {
	select {
	case <-s.failed:
		return true
	default:
		return false
	}
}

func (s *sink) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
		close(s.failed)
	}
}

// Err is the first write error, if any.
func (s *sink) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// maxPending and maxPendingBytes bound what waits in open batches: an input that
// interleaves many partitions gets its batches flushed, full or not, once this many
// entities or bytes wait (so 1,000 interleaved partitions still make batches of ~100).
const (
	maxPending      = 100_000
	maxPendingBytes = 64 << 20
)

// add takes one record at position p (p.seq increasing by one per record; after is the
// position past it) and adds it to its partition's open batch, handing the batch on
// when it is full. It blocks while the partition's writer is busy. exact says that the
// record's expiry is carried (Record.Expiry, 0 for never): the entity is then written
// with exactly that expiry (x-cerulean-expiry), or not at all once it has passed.
func (s *sink) add(table string, exact bool, r *record.Record, p pos, after pos) error {
	if err := s.Err(); err != nil {
		return err
	}
	var it item
	if exact {
		if r.Expiry != 0 && s.passed(r.Expiry) {
			// Never written; committed once everything before it is.
			if s.onExpired != nil {
				s.onExpired(1)
			}
			s.mu.Lock()
			s.next = after
			s.mu.Unlock()
			return nil
		}
		it.Expiry = r.Expiry
		if it.Expiry == 0 {
			it.Expiry = client.ExpiryNever
		}
	}
	s.buf = record.AppendJSON(s.buf[:0], r, record.JSONOptions{})
	key := openKey{table, r.Entity.PartitionKey}
	b := s.open[key]
	if b != nil && b.bytes+len(s.buf) > maxBatchBytes {
		s.send(key, b)
		b = nil
	}
	if b == nil {
		if s.open == nil {
			s.open = map[openKey]*batch{}
		}
		b = &batch{table: table, pk: r.Entity.PartitionKey, mode: s.mode, start: p}
		s.open[key] = b
		s.mu.Lock()
		s.inflight[p.seq] = p
		s.mu.Unlock()
	}
	it.PartitionKey, it.RowKey, it.Body = r.Entity.PartitionKey, r.Entity.RowKey, append([]byte(nil), s.buf...)
	b.items = append(b.items, it)
	b.bytes += len(s.buf)
	s.pending++
	s.pendingBytes += len(s.buf)
	s.mu.Lock()
	s.next = after
	s.mu.Unlock()
	if len(b.items) == MaxBatch {
		s.send(key, b)
	}
	if s.pending >= maxPending || s.pendingBytes >= maxPendingBytes {
		s.flush()
	}
	return nil
}

// passed reports whether an instant (100 ns ticks) is at or before the sink's clock: an
// entity expiring then is gone at the source, and is not written.
func (s *sink) passed(expiry int64) bool {
	now := time.Now
	if s.now != nil {
		now = s.now
	}
	return expiry <= entity.TimeToTicks(now())
}

// openKey names an open batch: entities of one partition.
type openKey struct {
	table, pk string
}

// flush hands every open batch to its partition's writer, oldest first.
func (s *sink) flush() {
	keys := make([]openKey, 0, len(s.open))
	for k := range s.open {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return s.open[keys[i]].start.seq < s.open[keys[j]].start.seq })
	for _, k := range keys {
		s.send(k, s.open[k])
	}
}

// send hands one open batch to its partition's writer.
func (s *sink) send(key openKey, b *batch) {
	delete(s.open, key)
	s.pending -= len(b.items)
	s.pendingBytes -= b.bytes
	var h maphash.Hash
	h.SetSeed(s.seed)
	h.WriteString(b.table)
	h.WriteByte(0)
	h.WriteString(b.pk)
	q := s.queues[h.Sum64()%uint64(len(s.queues))]
	select {
	case q <- b:
	case <-s.failed:
	}
}

// drop forgets the open batches (an interrupt: they were never sent). Their starts stay
// unacknowledged, so the committed position stays before them.
func (s *sink) drop() {
	s.open, s.pending, s.pendingBytes = nil, 0, 0
}

// close waits for every handed-on batch to be written (or the first error).
func (s *sink) close() error {
	for _, q := range s.queues {
		close(q)
	}
	s.wg.Wait()
	return s.Err()
}

// ack records a batch as acknowledged: n of its entities are on the target (the others
// expired before they could be written).
func (s *sink) ack(b *batch, n int) {
	s.mu.Lock()
	delete(s.inflight, b.start.seq)
	s.mu.Unlock()
	if s.onDone != nil && n > 0 {
		bytes := b.bytes
		if n < len(b.items) {
			bytes = b.bytes * n / len(b.items)
		}
		s.onDone(n, bytes)
	}
}

// committed is the position before which every record is acknowledged: the start of the
// oldest unacknowledged batch, or after the last record added.
func (s *sink) committed() pos {
	s.mu.Lock()
	defer s.mu.Unlock()
	best := s.next
	first := true
	for seq, p := range s.inflight {
		if first || seq < best.seq {
			best, first = p, false
		}
	}
	return best
}

// maxResolve bounds how often one batch is resolved against the target and sent again
// (another writer inserting the same keys meanwhile could otherwise keep it going).
const maxResolve = 4

// write sends one batch with retries and returns how many of its entities are on the
// target (written now, or found written by the run this one resumes).
//
// An insert refused with EntityAlreadyExists is resolved against the target
// (resolveConflict) when the entities may be this job's own: in a resumed run (the
// interrupted one may have written anything past its checkpoint, whatever stopped it:
// kill -9, OOM, a closed terminal), or when an earlier attempt's answer never arrived
// (the lost attempt may have been committed). The changeset is all or nothing, so one
// such entity fails all of it: the entities the job wrote are taken out and the others
// sent again, while an entity the target held otherwise stays a conflict.
func (s *sink) write(ctx context.Context, b *batch) (int, error) {
	items := b.items
	lost := false
	done := 0
	for round := 0; ; round++ {
		var sent []item
		err := s.retry.do(ctx, func(int) error {
			items = s.refresh(items)
			sent = items
			if len(items) == 0 {
				return nil
			}
			ents := make([]client.BatchEntity, len(items))
			for i := range items {
				ents[i] = items[i].BatchEntity
			}
			err := s.dst.Batch(ctx, b.table, b.mode, ents)
			var be *client.BatchError
			if err != nil && !errors.As(err, &be) {
				lost = true
			}
			return err
		}, s.onRetry)
		if err == nil {
			return done + len(sent), nil
		}
		var be *client.BatchError
		if b.mode == client.Insert && (s.resolve || lost) && round < maxResolve && errors.As(err, &be) && be.Err.Code == "EntityAlreadyExists" {
			keep, err := s.resolveConflict(ctx, b, sent, err)
			if err != nil {
				return 0, err
			}
			done += len(sent) - len(keep)
			if items = keep; len(items) == 0 {
				return done, nil
			}
			continue
		}
		return 0, writeError(b, sent, err)
	}
}

// refresh prepares items for one more attempt: the entities that have expired meanwhile
// are taken out (and counted). (The target would take them and expire them at once; not
// sending them keeps the count of what was written true.)
func (s *sink) refresh(items []item) []item {
	var out []item
	for i := range items {
		it := items[i]
		if it.Expiry > 0 && s.passed(it.Expiry) {
			if out == nil {
				out = append(make([]item, 0, len(items)), items[:i]...)
			}
			if s.onExpired != nil {
				s.onExpired(1)
			}
			continue
		}
		if out != nil {
			out = append(out, it)
		}
	}
	if out == nil {
		return items
	}
	return out
}

// writeError names the entity a refused batch names, with the service's error.
func writeError(b *batch, sent []item, err error) error {
	we := &WriteError{Table: b.table, PartitionKey: b.pk, Err: err}
	var be *client.BatchError
	if errors.As(err, &be) && be.Index >= 0 && be.Index < len(sent) {
		we.RowKey = sent[be.Index].RowKey
		e := *be.Err
		if _, msg, ok := strings.Cut(e.Message, ":"); ok {
			e.Message = msg // "<index>:<message>": the index is spent on naming the entity
		}
		we.Err = &e
	} else if len(sent) == 1 {
		we.RowKey = sent[0].RowKey
	} else if len(sent) > 1 {
		we.RowKey = sent[0].RowKey + "…" + sent[len(sent)-1].RowKey
	}
	return we
}

// resolveConflict reads from the target the entities of a batch refused with
// EntityAlreadyExists and sorts them out: an entity the target does not hold is kept (to
// be sent again); one it holds with exactly the source's properties and a Timestamp
// from this job's time on (since) was written by the job — by the interrupted run, or by
// an attempt whose answer was lost — and is taken out; any other is a conflict, reported
// as the service would report it. It returns the entities to send again.
//
// Why this is sound: the job writes nothing before since (the target's clock when the
// first run began, less a margin), so an entity older than that was on the target before
// the job and stays a conflict, as --mode insert asks, even when it is identical. An
// entity written since, with every property equal, is what the job would write: taking
// it out leaves the same end state whoever wrote it. Anything else — different data, a
// changed source — is reported, never overwritten.
func (s *sink) resolveConflict(ctx context.Context, b *batch, sent []item, conflict error) ([]item, error) {
	have, err := s.lookup(ctx, b.table, b.pk, sent)
	if err != nil {
		we := writeError(b, sent, conflict).(*WriteError)
		we.Err = fmt.Errorf("%w (and reading the target to tell whether this job wrote it failed: %v)", we.Err, err)
		return nil, we
	}
	var keep []item
	for i := range sent {
		it := &sent[i]
		t, ok := have[it.RowKey]
		if !ok {
			keep = append(keep, *it)
			continue
		}
		if why := s.foreign(&t, it); why != "" {
			return nil, &WriteError{Table: b.table, PartitionKey: b.pk, RowKey: it.RowKey,
				Err: &client.Error{Status: 409, Code: "EntityAlreadyExists", Message: "The specified entity already exists: " + why + "."}}
		}
	}
	return keep, nil
}

// foreign says why the target's entity t was not written by this job ("" when it was).
func (s *sink) foreign(t *record.Record, it *item) string {
	if s.since != 0 && (!t.HasTimestamp || t.Timestamp < s.since) {
		return "the target held it before this job began"
	}
	src, err := record.FromJSON(it.Body)
	if err != nil {
		return "the source's entity cannot be compared"
	}
	if !sameProps(src.Entity.Props, t.Entity.Props) {
		return "the target holds other data under its keys"
	}
	return ""
}

// sameProps reports whether two property sets are equal, in any order, values compared
// exactly (entity.Value.Equal).
func sameProps(src, dst []entity.Property) bool {
	if len(src) != len(dst) {
		return false
	}
	byName := make(map[string]entity.Value, len(dst))
	for _, p := range dst {
		byName[p.Name] = p.Value
	}
	for _, p := range src {
		v, ok := byName[p.Name]
		if !ok || !p.Value.Equal(v) {
			return false
		}
	}
	return true
}

// lookupScan bounds the entities one lookup reads by range before reading the keys it
// has not seen one by one.
const lookupScan = 2000

// lookup reads the target's entities with the keys of items (all of partition pk),
// RowKey → entity; keys it does not hold are absent. One range query covers a batch
// whose keys are close (a copy's, an export's: in key order); keys the range did not
// show are then read one by one, unless the range was read whole and every key is ASCII
// (whose order every service agrees on, so a key inside the range and not shown is not
// there).
func (s *sink) lookup(ctx context.Context, table, pk string, items []item) (map[string]record.Record, error) {
	want := make(map[string]bool, len(items))
	lo, hi := items[0].RowKey, items[0].RowKey
	ascii := true
	for i := range items {
		rk := items[i].RowKey
		want[rk] = true
		lo, hi = min(lo, rk), max(hi, rk)
		ascii = ascii && isASCII(rk)
	}
	have := map[string]record.Record{}
	q := client.Query{Filter: "PartitionKey eq " + literal(pk) + " and RowKey ge " + literal(lo) + " and RowKey le " + literal(hi)}
	whole := false
	for seen := 0; seen < lookupScan; {
		var page *client.Page
		err := s.retry.do(ctx, func(int) error {
			var err error
			page, err = s.dst.QueryEntities(ctx, table, q)
			return err
		}, s.onRetry)
		if err != nil {
			return nil, err
		}
		for _, raw := range page.Entities {
			seen++
			r, err := record.FromJSON(raw)
			if err != nil {
				return nil, fmt.Errorf("an entity of the target: %s", record.Detail(err))
			}
			if r.Entity.PartitionKey == pk && want[r.Entity.RowKey] {
				have[r.Entity.RowKey] = r
			}
		}
		if page.Next.Done() {
			whole = true
			break
		}
		q.Continuation = page.Next
	}
	if whole && ascii {
		return have, nil
	}
	for rk := range want {
		if _, ok := have[rk]; ok {
			continue
		}
		var raw []byte
		var found bool
		err := s.retry.do(ctx, func(int) error {
			var err error
			raw, found, err = s.dst.GetEntity(ctx, table, pk, rk)
			return err
		}, s.onRetry)
		if err != nil {
			return nil, err
		}
		if found {
			r, err := record.FromJSON(raw)
			if err != nil {
				return nil, fmt.Errorf("an entity of the target: %s", record.Detail(err))
			}
			have[rk] = r
		}
	}
	return have, nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// finish ends a run's writing: the batches being gathered are dropped (drop: the run was
// interrupted or failed, and the checkpoint must not claim them) or flushed, the writers
// are waited for, and the checkpoint is saved once more, so that it holds every
// acknowledged batch. It returns the first error of the writers, the run (runErr) and
// the save, in that order.
func (s *sink) finish(drop bool, runErr error, save func() error) error {
	if drop {
		s.drop()
	} else {
		s.flush()
	}
	werr := s.close()
	if err := save(); err != nil && runErr == nil {
		runErr = err
	}
	if werr != nil {
		return werr
	}
	return runErr
}
