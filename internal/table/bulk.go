package table

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ceruleandb/cerulean/internal/azerr"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// Bulk writes (elastic tables only): many entity writes across many partitions in one
// request, not one transaction — Dataverse's CreateMultiple, UpdateMultiple,
// UpsertMultiple and DeleteMultiple. Each operation succeeds or fails on its own and the
// caller learns which; what did succeed is durable, whatever happens to the rest.
//
// How they are applied (docs/compatibility.md "Bulk writes"):
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
//     alone, and are never applied. So does an operation whose entity an earlier valid
//     operation of the request already names (InvalidDuplicateRow): the order of two
//     writes to one entity in one bulk request would otherwise matter in ways the caller
//     cannot see. Two operations on one entity share its partition, so each partition
//     checks its own operations, in request order, as it reaches them.
//   - The operations are decoded only when their group is about to be applied, and
//     dropped once it is (BulkSource): a request holds its body and a small index per
//     operation, and at most BulkWorkers groups of decoded entities, instead of every
//     entity at once (issue 42, item 27: decoded entities take 1.2 to 11.6 times their
//     JSON).
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

// BulkSource is a bulk request's operations as BulkFrom takes them: grouped first, each
// decoded only when the group it belongs to is about to be applied.
type BulkSource interface {
	// Len is how many operations the request holds.
	Len() int
	// Partition is the partition of operation i: a number in [0, Len()) standing for one
	// PartitionKey of the request, the same number for the same key, numbered in order of
	// first appearance; or -1 for an operation that fails whatever its partition (its
	// entity has no PartitionKey).
	Partition(i int) int
	// Load sets op to operation i, its Entity decoded, or with Err set when the caller
	// finds it invalid while decoding or authorizing it (the checks a single write of the
	// same kind gets are BulkFrom's). An operation without Err must have the PartitionKey
	// its Partition stands for. BulkFrom loads each operation once: those of partition -1
	// before anything is applied, the others from the goroutine applying their partition,
	// in request order within it, just before their group is applied.
	Load(i int, op *BulkOp)
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

// Bulk applies ops, decoded already, to the table as described at the top of this file:
// BulkFrom with every operation at hand.
func (s *Service) Bulk(ctx context.Context, account, table string, ops []BulkOp) (BulkResult, error) {
	if len(ops) > MaxBulkOperations {
		return BulkResult{}, tooManyBulkOps(len(ops))
	}
	src := &opsSource{ops: ops, part: make([]int32, len(ops))}
	byPK := map[string]int32{}
	for i := range ops {
		if ops[i].Err != nil {
			src.part[i] = -1
			continue
		}
		p, ok := byPK[ops[i].Entity.PartitionKey]
		if !ok {
			p = int32(len(byPK))
			byPK[ops[i].Entity.PartitionKey] = p
		}
		src.part[i] = p
	}
	return s.BulkFrom(ctx, account, table, src, 0)
}

// opsSource is a BulkSource over decoded operations.
type opsSource struct {
	ops  []BulkOp
	part []int32
}

func (o *opsSource) Len() int               { return len(o.ops) }
func (o *opsSource) Partition(i int) int    { return int(o.part[i]) }
func (o *opsSource) Load(i int, op *BulkOp) { *op = o.ops[i] }

func tooManyBulkOps(n int) error {
	return azerr.Newf(azerr.InvalidInput, "The bulk request holds %d operations; at most %d are allowed.", n, MaxBulkOperations)
}

// BulkFrom applies the operations of src to the table as described at the top of this
// file, with at most workers groups in flight (at most BulkWorkers; 0 means BulkWorkers):
// what the caller allows the request's decoded entities to take. The result has an item
// for every operation; the error is non-nil only when the request as a whole is refused
// (too many operations), and then nothing was written.
func (s *Service) BulkFrom(ctx context.Context, account, table string, src BulkSource, workers int) (BulkResult, error) {
	n := src.Len()
	if n > MaxBulkOperations {
		return BulkResult{}, tooManyBulkOps(n)
	}
	b := bulkRun{s: s, account: account, table: table, src: src, items: make([]BulkItem, n)}
	parts := b.plan()
	if workers <= 0 || workers > BulkWorkers {
		workers = BulkWorkers
	}
	workers = min(workers, len(parts))
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
			g := &bulkGroup{}
			for {
				i := int(next.Add(1)) - 1
				if i >= len(parts) {
					return
				}
				b.partition(ctx, applyCtx, parts[i], g)
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

// bulkRun is the state of one BulkFrom call. Each operation's item is written by exactly
// one goroutine (the one applying its partition), so items needs no lock.
type bulkRun struct {
	s              *Service
	account, table string
	src            BulkSource
	items          []BulkItem

	mu   sync.Mutex
	pos  storage.Position
	stop *azerr.Error // set once: why no new Apply may start
}

// bulkGroup is what one worker holds of the group it applies: its operations, decoded,
// and their mutations, cleared once the group is applied so that nothing of it outlives
// its turn.
type bulkGroup struct {
	ops   [MaxBatchOperations]BulkOp
	muts  []storage.Mutation
	which []int32 // the operation of each mutation
}

// plan groups the operations by partition (in order of first appearance, each in
// request order), and fails those that belong to none.
func (b *bulkRun) plan() [][]int32 {
	n := b.src.Len()
	var parts [][]int32
	for i := range n {
		p := b.src.Partition(i)
		if p < 0 || p >= n {
			var op BulkOp
			b.src.Load(i, &op)
			err := op.Err
			if err == nil {
				err = fmt.Errorf("bulk: operation %d has no partition (%d) but no error", i, p)
			}
			b.items[i].Err = asAzErr(err)
			continue
		}
		for p >= len(parts) {
			parts = append(parts, nil)
		}
		parts[p] = append(parts[p], int32(i))
	}
	// A source numbers every partition it names; skip any number it left out.
	out := parts[:0]
	for _, p := range parts {
		if len(p) > 0 {
			out = append(out, p)
		}
	}
	return out
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

// partition applies one partition's operations (indexes into the source, in request
// order) in engine writes of up to MaxBatchOperations mutations: each group is loaded,
// checked (validation, then duplicates among the partition's valid operations so far),
// applied, and dropped. Once the request is halted the groups are still loaded and
// checked, so an invalid operation reports its own error, and the valid ones report the
// halt.
func (b *bulkRun) partition(ctx, applyCtx context.Context, idx []int32, g *bulkGroup) {
	var pk string
	havePK := false
	seen := map[string]struct{}{} // the row keys of the partition's valid operations so far
	for len(idx) > 0 {
		chunk := idx[:min(len(idx), MaxBatchOperations)]
		idx = idx[len(chunk):]
		g.muts, g.which = g.muts[:0], g.which[:0]
		for k, i := range chunk {
			op := &g.ops[k]
			b.src.Load(int(i), op)
			err := op.Err
			if err == nil {
				err = validateBulkOp(op)
			}
			if err == nil {
				switch {
				case !havePK:
					pk, havePK = strings.Clone(op.Entity.PartitionKey), true
				case op.Entity.PartitionKey != pk:
					err = fmt.Errorf("bulk: operation %d of partition %q has PartitionKey %q", i, pk, op.Entity.PartitionKey)
				}
			}
			if err == nil {
				rk := op.Entity.RowKey
				if _, dup := seen[rk]; dup {
					err = azerr.Newf(azerr.InvalidDuplicateRow, "The bulk request holds more than one operation on the entity (PartitionKey '%s', RowKey '%s'); an entity may appear only once in a bulk request.", pk, rk)
				} else {
					// A copy: the entity's strings share one allocation, which must go
					// with the group.
					seen[strings.Clone(rk)] = struct{}{}
				}
			}
			if err != nil {
				b.items[i].Err = asAzErr(err)
				continue
			}
			g.muts = append(g.muts, mutationOf(op))
			g.which = append(g.which, i)
		}
		b.apply(ctx, applyCtx, pk, g)
		clear(g.ops[:len(chunk)])
		clear(g.muts)
	}
}

// apply applies the mutations of one group, unless the request is halted.
func (b *bulkRun) apply(ctx, applyCtx context.Context, pk string, g *bulkGroup) {
	if len(g.muts) == 0 {
		return
	}
	if e := b.halted(ctx); e != nil {
		b.failAll(g.which, e)
		return
	}
	each, err := b.s.eng.ApplyEach(applyCtx, b.account, b.table, pk, g.muts)
	if err != nil {
		e := asAzErr(b.s.mapErr(err, entityScope))
		b.failAll(g.which, e)
		b.halt(e)
		return
	}
	b.s.markAvailable()
	var stop *azerr.Error
	for j, i := range g.which {
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

func (b *bulkRun) failAll(idx []int32, e *azerr.Error) {
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
