package transfer

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
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
	table   string
	pk      string
	mode    client.WriteMode
	ents    []client.BatchEntity
	bytes   int
	start   pos
	records int
}

// sink writes records to one target: it groups them into batches of one partition (at
// most 100 entities, under 4 MiB), hands each to the worker that owns its partition (so
// one partition's batches are written in order, and several partitions in parallel), and
// tracks which positions are acknowledged for the checkpoint.
type sink struct {
	dst     *client.Client
	retry   Retry
	mode    client.WriteMode
	// replay says whether a record must be written as an upsert because an interrupted
	// run may already have written it (resume of an insert); nil for none.
	replay func(r *record.Record, at any) bool
	onDone func(entities, bytes int)
	onRetry func(error)

	seed   maphash.Seed
	queues []chan *batch
	wg     sync.WaitGroup
	cur    *batch
	buf    []byte

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

// add takes one record at position p (p.seq increasing by one per record) and, at the
// end of a batch, hands the batch on. It blocks while every worker is busy.
func (s *sink) add(table string, r *record.Record, p pos, after pos) error {
	if err := s.Err(); err != nil {
		return err
	}
	mode := s.mode
	if s.replay != nil && mode == client.Insert && s.replay(r, p.at) {
		mode = client.Replace
	}
	s.buf = record.AppendJSON(s.buf[:0], r, record.JSONOptions{})
	b := s.cur
	if b != nil && (b.table != table || b.pk != r.Entity.PartitionKey || b.mode != mode || len(b.ents) == MaxBatch || b.bytes+len(s.buf) > maxBatchBytes) {
		s.flush()
		b = nil
	}
	if b == nil {
		b = &batch{table: table, pk: r.Entity.PartitionKey, mode: mode, start: p}
		s.cur = b
		s.mu.Lock()
		s.inflight[p.seq] = p
		s.mu.Unlock()
	}
	b.ents = append(b.ents, client.BatchEntity{PartitionKey: r.Entity.PartitionKey, RowKey: r.Entity.RowKey, Body: append([]byte(nil), s.buf...)})
	b.bytes += len(s.buf)
	s.mu.Lock()
	s.next = after
	s.mu.Unlock()
	return nil
}

// flush hands the current batch to its partition's worker.
func (s *sink) flush() {
	b := s.cur
	if b == nil {
		return
	}
	s.cur = nil
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

// drop forgets the batch being gathered (an interrupt: it was never sent).
func (s *sink) drop() {
	if s.cur != nil {
		s.mu.Lock()
		delete(s.inflight, s.cur.start.seq)
		s.next = s.cur.start
		s.mu.Unlock()
		s.cur = nil
	}
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
		we.Err = be.Err
	} else if len(b.ents) == 1 {
		we.RowKey = b.ents[0].RowKey
	} else {
		we.RowKey = b.ents[0].RowKey + "…" + b.ents[len(b.ents)-1].RowKey
	}
	return we
}
