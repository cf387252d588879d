package table

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ceruleandb/cerulean/azerr"
	"github.com/ceruleandb/cerulean/entity"
	"github.com/ceruleandb/cerulean/storage"
)

// Bulk writes (elastic tables only): many entity writes across many partitions in one
// request, not one transaction — Dataverse's CreateMultiple, UpdateMultiple,
// UpsertMultiple and DeleteMultiple. Each operation succeeds or fails on its own and the
// caller learns which; what did succeed is durable, whatever happens to the rest.
//
// How they are applied (docs/protocol.md §15):
//   - Operations are grouped by PartitionKey. Each partition's operations run in request
//     order, in engine writes (storage.Engine.ApplyEach) of up to MaxBatchOperations
//     mutations; different partitions run in parallel on at most BulkWorkers goroutines
//     per request.
//   - ApplyEach applies each mutation on its own, so an entity is never half-written and
//     a failure affects exactly the operation that caused it; it checks the conditions
//     in the engine (several front ends may share a database) and costs the same however
//     many of its mutations fail: one engine write per group, never a re-run of the
//     others.
//   - Operations that fail validation (entity limits, keys, a condition on an insert) fail
//     alone before anything is applied. So does an operation whose entity an earlier
//     valid operation of the request already names (InvalidDuplicateRow): the order of
//     two writes to one entity in one bulk request would otherwise matter in ways the
//     caller cannot see.
//   - When the request's context ends (the client went away), no new Apply starts; the
//     Applies running finish (they are never cut in the middle), and the operations not
//     attempted are reported as not done. An engine error that is not about one
//     operation (unavailable, disk full, table deleted) stops the request the same way:
//     the operations not attempted carry that error, so the caller can retry them.
//     (Before ApplyEach, a group was one atomic Apply retried without each operation
//     that failed: with 50 conflicting inserts in each group of 100, a 10,000-operation
//     request made 5,100 Applies, and took 32.9 s on PostgreSQL instead of 1.6 s when
//     none conflicted, 1.0 s on Pebble instead of 0.32 s. With ApplyEach: 1.75 s against
//     1.41 s, and 0.30 s against 0.34 s; BenchmarkBulkConflicts on a loaded 2-core
//     machine.)

// MaxBulkOperations is the most operations one bulk request may hold.
const MaxBulkOperations = 10_000

// BulkWorkers is how many partitions of one bulk request are applied at once. Applies on
// different partitions do not wait for each other in either engine, so a request that
// spans partitions overlaps their round trips (PostgreSQL) and commits (Pebble).
// BenchmarkBulk (10,000 1-KiB inserts over 100 partitions, 2 cores) chose it: PostgreSQL
// gains 50% from 1 to 8 workers and nothing beyond; Pebble, CPU-bound there, is level
// from 1 to 16 and loses at 32. More would only crowd out other requests.
var BulkWorkers = 8

// BulkOp is one operation of a bulk request.
type BulkOp struct {
	// Op is the mutation: Insert, Replace, Merge, Delete (the entity must exist; Cond
	// may name its version), InsertOrReplace or InsertOrMerge (no condition).
	Op     storage.Op
	Entity entity.Entity
	// Cond is the If-Match condition of Replace, Merge and Delete; absent means any
	// existing version ("*"). Insert and the upserts take none.
	Cond Condition
	// Err, when set, fails the operation before it is applied: the caller found it
	// invalid while decoding or authorizing it. It takes no part in the duplicate check.
	Err error
}

// BulkItem is the outcome of one BulkOp: Err is nil and Version the entity's new
// version (0 after a Delete), or Err says why nothing of the operation was written.
type BulkItem struct {
	Version int64
	Err     *azerr.Error
}

// BulkResult is the outcome of a bulk request: one item per operation, in request order,
// and the highest commit position of the Applies that committed (0 if none did).
type BulkResult struct {
	Items     []BulkItem
	Position  storage.Position
	Succeeded int
	Failed    int
}

// ErrNotElastic is returned by CheckBulk for a standard table, which takes no bulk
// writes: the server answers as for any query parameter the service does not know.
var ErrNotElastic = errors.New("bulk writes need an elastic table")

// CheckBulk reports whether a bulk request may write to the table: nil for an elastic
// table, ErrNotElastic for a standard one, 404 TableNotFound for a missing one. The
// server calls it before reading the request body.
func (s *Service) CheckBulk(ctx context.Context, account, table string) error {
	ti, err := s.eng.GetTable(ctx, account, table)
	if err != nil {
		return s.mapErr(err, entityScope)
	}
	s.markAvailable()
	if !ti.Settings.Elastic {
		return ErrNotElastic
	}
	return nil
}

// Bulk applies ops to the table as described at the top of this file. The result has an
// item for every operation; the error is non-nil only when the request as a whole is
// refused (too many operations), and then nothing was written.
func (s *Service) Bulk(ctx context.Context, account, table string, ops []BulkOp) (BulkResult, error) {
	if len(ops) > MaxBulkOperations {
		return BulkResult{}, azerr.Newf(azerr.InvalidInput, "The bulk request holds %d operations; at most %d are allowed.", len(ops), MaxBulkOperations)
	}
	b := bulkRun{s: s, account: account, table: table, ops: ops, items: make([]BulkItem, len(ops))}
	parts := b.plan()
	workers := min(BulkWorkers, len(parts))
	// Applies run on a context that the client's going away does not cancel: an Apply
	// started is finished, so its outcome is known and reported; between Applies the
	// request's context is checked and, once it is done, nothing new starts.
	applyCtx := context.WithoutCancel(ctx)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(parts) {
					return
				}
				b.partition(ctx, applyCtx, parts[i])
			}
		}()
	}
	wg.Wait()
	res := BulkResult{Items: b.items, Position: b.pos}
	for i := range b.items {
		if b.items[i].Err != nil {
			res.Failed++
		} else {
			res.Succeeded++
		}
	}
	return res, nil
}

// bulkRun is the state of one Bulk call. Each operation's item is written by exactly one
// goroutine (the one applying its partition), so items needs no lock.
type bulkRun struct {
	s              *Service
	account, table string
	ops            []BulkOp
	items          []BulkItem

	mu   sync.Mutex
	pos  storage.Position
	stop *azerr.Error // set once: why no new Apply may start
}

// plan validates every operation, fails the invalid ones and the duplicates, and groups
// the rest by partition (in order of first appearance, each in request order).
func (b *bulkRun) plan() [][]int {
	var parts [][]int
	byPK := map[string]int{}
	seen := make(map[storage.Key]struct{}, len(b.ops))
	for i := range b.ops {
		op := &b.ops[i]
		err := op.Err
		if err == nil {
			err = validateBulkOp(op)
		}
		if err == nil {
			k := storage.Key{PartitionKey: op.Entity.PartitionKey, RowKey: op.Entity.RowKey}
			if _, dup := seen[k]; dup {
				err = azerr.Newf(azerr.InvalidDuplicateRow, "The bulk request holds more than one operation on the entity (PartitionKey '%s', RowKey '%s'); an entity may appear only once in a bulk request.", k.PartitionKey, k.RowKey)
			}
			seen[k] = struct{}{}
		}
		if err != nil {
			b.items[i].Err = asAzErr(err)
			continue
		}
		p, ok := byPK[op.Entity.PartitionKey]
		if !ok {
			p = len(parts)
			byPK[op.Entity.PartitionKey] = p
			parts = append(parts, nil)
		}
		parts[p] = append(parts[p], i)
	}
	return parts
}

// validateBulkOp applies the checks a single write of the same kind gets.
func validateBulkOp(op *BulkOp) error {
	e := &op.Entity
	switch op.Op {
	case storage.Delete:
		if err := entity.ValidateKey("PartitionKey", e.PartitionKey); err != nil {
			return err
		}
		return entity.ValidateKey("RowKey", e.RowKey)
	case storage.Insert, storage.InsertOrReplace, storage.InsertOrMerge:
		if op.Cond.Present {
			return azerr.Newf(azerr.InvalidInput, "A condition (If-Match) is not allowed with %s.", op.Op)
		}
	case storage.Replace, storage.Merge:
	default:
		return fmt.Errorf("bulk: unknown operation %v", op.Op)
	}
	return entity.Validate(e)
}

// asAzErr is err as a service error; anything else is a bug, reported as InternalError.
func asAzErr(err error) *azerr.Error {
	e, _ := azerr.As(err)
	return e
}

// halted reports why no new Apply may start, or nil.
func (b *bulkRun) halted(ctx context.Context) *azerr.Error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stop == nil && ctx.Err() != nil {
		b.stop = azerr.Newf(azerr.OperationTimedOut, "The operation was not attempted: the request ended before it was reached.")
	}
	return b.stop
}

// halt stops the request after an engine error that is not about one operation.
func (b *bulkRun) halt(e *azerr.Error) {
	b.mu.Lock()
	if b.stop == nil {
		d := "The operation was not attempted: an earlier part of the bulk request failed with this error."
		if e.Detail != "" {
			d = e.Detail + " " + d
		}
		b.stop = e.WithDetail(d)
	}
	b.mu.Unlock()
}

// partition applies one partition's operations (indexes into ops, in request order) in
// engine writes of up to MaxBatchOperations mutations.
func (b *bulkRun) partition(ctx, applyCtx context.Context, idx []int) {
	pk := b.ops[idx[0]].Entity.PartitionKey
	muts := make([]storage.Mutation, 0, MaxBatchOperations)
	for len(idx) > 0 {
		n := min(len(idx), MaxBatchOperations)
		chunk := idx[:n]
		idx = idx[n:]
		if e := b.halted(ctx); e != nil {
			b.failAll(chunk, e)
			b.failAll(idx, e)
			return
		}
		muts = muts[:0]
		for _, i := range chunk {
			muts = append(muts, mutationOf(&b.ops[i]))
		}
		each, err := b.s.eng.ApplyEach(applyCtx, b.account, b.table, pk, muts)
		if err != nil {
			e := asAzErr(b.s.mapErr(err, entityScope))
			b.failAll(chunk, e)
			b.halt(e)
			continue
		}
		b.s.markAvailable()
		var stop *azerr.Error
		for j, i := range chunk {
			if err := each.Errs[j]; err != nil {
				b.items[i].Err = asAzErr(b.s.mapErr(err, entityScope))
				if !storage.PerMutation(err) {
					stop = b.items[i].Err // not about this operation: the request stops
				}
				continue
			}
			b.items[i].Version = each.Versions[j]
		}
		if each.Position != 0 {
			b.mu.Lock()
			b.pos = max(b.pos, each.Position)
			b.mu.Unlock()
		}
		if stop != nil {
			b.halt(stop)
		}
	}
}

func (b *bulkRun) failAll(idx []int, e *azerr.Error) {
	for _, i := range idx {
		b.items[i].Err = e
	}
}

// mutationOf is the engine mutation of a valid operation.
func mutationOf(op *BulkOp) storage.Mutation {
	m := storage.Mutation{Op: op.Op, RowKey: op.Entity.RowKey}
	if op.Op != storage.Delete {
		m.Props = op.Entity.Props
	}
	if op.Cond.Present {
		m.IfMatch = op.Cond.ifMatch()
	}
	return m
}
