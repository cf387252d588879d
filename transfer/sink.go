package transfer

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sort"
	"strings"
	"sync"

	"github.com/ceruleandb/cerulean/client"
	"github.com/ceruleandb/cerulean/transfer/record"
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
	ents  []client.BatchEntity
	bytes int
	start pos
}

// sink writes records to one target: it groups them into batches of one partition (at
// most 100 entities, under 4 MiB), hands each to the worker that owns its partition (so
// one partition's batches are written in order, and several partitions in parallel), and
// tracks which positions are acknowledged for the checkpoint.
type sink struct {
	dst   *client.Client
	retry Retry
	mode  client.WriteMode
	// replay says whether a record must be written as an upsert because an interrupted
	// run may already have written it (resume of an insert); nil for none.
	replay  func(r *record.Record, at any) bool
	onDone  func(entities, bytes int)
	onRetry func(error)

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
				if err := s.write(ctx, b); err != nil {
					s.fail(err)
					continue
				}
				s.ack(b)
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
// when it is full. It blocks while the partition's writer is busy.
func (s *sink) add(table string, r *record.Record, p pos, after pos) error {
	if err := s.Err(); err != nil {
		return err
	}
	mode := s.mode
	if s.replay != nil && mode == client.Insert && s.replay(r, p.at) {
		mode = client.Replace
	}
	s.buf = record.AppendJSON(s.buf[:0], r, record.JSONOptions{})
	key := openKey{table, r.Entity.PartitionKey, mode}
	b := s.open[key]
	if b != nil && b.bytes+len(s.buf) > maxBatchBytes {
		s.send(key, b)
		b = nil
	}
	if b == nil {
		if s.open == nil {
			s.open = map[openKey]*batch{}
		}
		b = &batch{table: table, pk: r.Entity.PartitionKey, mode: mode, start: p}
		s.open[key] = b
		s.mu.Lock()
		s.inflight[p.seq] = p
		s.mu.Unlock()
	}
	b.ents = append(b.ents, client.BatchEntity{PartitionKey: r.Entity.PartitionKey, RowKey: r.Entity.RowKey, Body: append([]byte(nil), s.buf...)})
	b.bytes += len(s.buf)
	s.pending++
	s.pendingBytes += len(s.buf)
	s.mu.Lock()
	s.next = after
	s.mu.Unlock()
	if len(b.ents) == MaxBatch {
		s.send(key, b)
	}
	if s.pending >= maxPending || s.pendingBytes >= maxPendingBytes {
		s.flush()
	}
	return nil
}

// openKey names an open batch: entities of one partition written the same way.
type openKey struct {
	table, pk string
	mode      client.WriteMode
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
	s.pending -= len(b.ents)
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

func (s *sink) ack(b *batch) {
	s.mu.Lock()
	delete(s.inflight, b.start.seq)
	s.mu.Unlock()
	if s.onDone != nil {
		s.onDone(len(b.ents), b.bytes)
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

// write sends one batch with retries. A batch whose answer never arrived may have been
// written; when its repeat is an insert refused with EntityAlreadyExists, it is sent
// again as Insert Or Replace: the entities are the ones this run wrote.
func (s *sink) write(ctx context.Context, b *batch) error {
	mode := b.mode
	lost := false
	err := s.retry.do(ctx, func(int) error {
		err := s.dst.Batch(ctx, b.table, mode, b.ents)
		var be *client.BatchError
		if err != nil && !errors.As(err, &be) {
			lost = true
		}
		if lost && mode == client.Insert && errors.As(err, &be) && be.Err.Code == "EntityAlreadyExists" {
			mode = client.Replace
			err = s.dst.Batch(ctx, b.table, mode, b.ents)
		}
		return err
	}, s.onRetry)
	if err == nil {
		return nil
	}
	we := &WriteError{Table: b.table, PartitionKey: b.pk, Err: err}
	var be *client.BatchError
	if errors.As(err, &be) && be.Index >= 0 && be.Index < len(b.ents) {
		we.RowKey = b.ents[be.Index].RowKey
		e := *be.Err
		if _, msg, ok := strings.Cut(e.Message, ":"); ok {
			e.Message = msg // "<index>:<message>": the index is spent on naming the entity
		}
		we.Err = &e
	} else if len(b.ents) == 1 {
		we.RowKey = b.ents[0].RowKey
	} else {
		we.RowKey = b.ents[0].RowKey + "…" + b.ents[len(b.ents)-1].RowKey
	}
	return we
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
