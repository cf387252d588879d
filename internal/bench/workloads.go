package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// Partition-key prefixes: each workload has its own key space.
const (
	prefixInsert  = "i"
	prefixPreload = "r"
	prefixBatch   = "b"
	// The load workloads' partitions.
	prefixLoadBatch = "lb"
	prefixLoadBulk  = "lk"
	counterPK       = "counter"
)

// runWorkload runs one named workload. A non-nil error means the workload
// could not run or failed its correctness check; the Result still describes
// whatever happened.
func (b *bench) runWorkload(ctx context.Context, name string) (Result, error) {
	switch name {
	case WorkloadInsert:
		return b.runInsert(ctx), nil
	case WorkloadRead, WorkloadUpsert, WorkloadQuery, WorkloadScan:
		var err error // returned once, by the workload that tried the preload
		if !b.preloaded && b.preloadErr == nil {
			err = b.preload(ctx)
			b.preloadErr, b.preloaded = err, err == nil
		}
		if b.preloadErr != nil {
			return Result{Workload: name, PartitionTarget: PartitionTarget,
				Notes: "not run: preload failed: " + b.preloadErr.Error()}, err
		}
		switch name {
		case WorkloadRead:
			return b.runRead(ctx), nil
		case WorkloadUpsert:
			return b.runUpsert(ctx), nil
		case WorkloadScan:
			return b.runScan(ctx), nil
		}
		return b.runQuery(ctx), nil
	case WorkloadUpdate:
		return b.runUpdate(ctx)
	case WorkloadBatch:
		return b.runBatch(ctx), nil
	case WorkloadBatchLoad:
		return b.runBatchLoad(ctx), nil
	case WorkloadBulkLoad:
		return b.runBulkLoad(ctx), nil
	case WorkloadFeed:
		return b.runFeed(ctx), nil
	case WorkloadIndexInsert:
		return b.runIndexInsert(ctx), nil
	case WorkloadIndexQuery:
		return b.runIndexQuery(ctx), nil
	}
	return Result{Workload: name}, fmt.Errorf("bench: unknown workload %q", name)
}

// partitions returns how many partitions a spreading workload uses.
func (b *bench) partitions() int {
	if b.opts.HotPartition {
		return 1
	}
	return b.opts.Partitions
}

// pick chooses a partition index uniformly, so that with P partitions the
// hottest one sees about 1/P of the load.
func (w *worker) pick(n int) int {
	if n <= 1 {
		return 0
	}
	return w.rng.IntN(n)
}

// rowKey returns a row key unique across workers, rounds and runs.
func (b *bench) rowKey(w *worker) string {
	w.seq++
	if w.rkPrefix == "" || w.rkRound != b.round {
		w.rkPrefix, w.rkRound = b.runID+"-"+strconv.Itoa(b.round)+"-"+strconv.Itoa(w.id)+"-", b.round
	}
	var buf [64]byte
	return string(strconv.AppendInt(append(buf[:0], w.rkPrefix...), w.seq, 10))
}

func (b *bench) runInsert(ctx context.Context) Result {
	parts := b.partitions()
	st, secs := b.drive(ctx, WorkloadInsert, parts, b.insertOp(parts))
	return b.result(WorkloadInsert, st, secs, func(i int) string { return b.pk(prefixInsert, i) })
}

// insertOp is the insert workload's operation (also indexinsert's): AddEntity of a new
// entity with a unique row key into a random one of parts partitions.
func (b *bench) insertOp(parts int) opFunc {
	return func(ctx context.Context, w *worker) (int, int, error) {
		p := w.pick(parts)
		rk := b.rowKey(w)
		w.stamp = stamp(w.stamp[:0])
		w.buf = b.appendEntity(w.buf[:0], b.pk(prefixInsert, p), rk, w.id, w.seq, w.stamp)
		return 1, p, w.t.insert(ctx, w.buf)
	}
}

// preloadRowKey is the row key of preloaded entity i; preloaded entity i
// lives in partition i % preloadParts.
func preloadRowKey(i int) string { return fmt.Sprintf("%09d", i) }

// preloadCount is how many preloaded entities partition p holds.
func (b *bench) preloadCount(p int) int {
	n := b.opts.Preload / b.preloadParts
	if p < b.opts.Preload%b.preloadParts {
		n++
	}
	return n
}

// preload upserts Preload entities with Workers goroutines through the
// retrying client. Upsert (not insert) keeps it idempotent on a reused table
// and across SDK retries; batches would be faster but not every server
// supports them, and the load is not timed. It stops at the first error
// that survives the SDK's retries.
func (b *bench) preload(ctx context.Context) error {
	b.preloadParts = 1
	if !b.opts.HotPartition {
		b.preloadParts = min(b.opts.Partitions, max(1, (b.opts.Preload+queryPartitionRows-1)/queryPartitionRows))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next, done atomic.Int64
	total := int64(b.opts.Preload)
	stop := startProgress(b.opts.Progress, &done, func(el time.Duration, n int64, rate float64) string {
		return fmt.Sprintf("preload %3.0fs  %s/%s entities  %s/s", el.Seconds(), commas(float64(n)), commas(float64(total)), commas(rate))
	})
	start := time.Now()
	var once sync.Once
	var firstErr error
	var wg sync.WaitGroup
	for w := range b.opts.Workers {
		wg.Go(func() {
			var buf, now []byte
			for {
				i := next.Add(1) - 1
				if i >= total || ctx.Err() != nil {
					return
				}
				p := int(i) % b.preloadParts
				now = stamp(now[:0])
				buf = b.appendEntity(buf[:0], b.pk(prefixPreload, p), preloadRowKey(int(i)), w, i, now)
				_, err := b.setupTable.UpsertEntity(ctx, buf, &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
				if err != nil {
					once.Do(func() { firstErr = err; cancel() })
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	stop()
	secs := time.Since(start).Seconds()
	if firstErr != nil {
		return fmt.Errorf("bench: preload after %d of %d entities: %s", done.Load(), total, summarize(firstErr))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	fmt.Fprintf(b.text, "%-9s %s entities into %d partitions in %.1fs (%s/s, untimed setup)\n", "preload",
		commas(float64(total)), b.preloadParts, secs, commas(float64(total)/secs))
	return nil
}

func (b *bench) runRead(ctx context.Context) Result {
	st, secs := b.drive(ctx, WorkloadRead, b.preloadParts, func(ctx context.Context, w *worker) (int, int, error) {
		i := w.rng.IntN(b.opts.Preload)
		p := i % b.preloadParts
		_, _, err := w.t.get(ctx, b.pk(prefixPreload, p), preloadRowKey(i))
		return 1, p, err
	})
	return b.result(WorkloadRead, st, secs, func(i int) string { return b.pk(prefixPreload, i) })
}

// runUpsert insert-or-merges random preloaded entities with the properties they were
// preloaded with (the same Ratio, so the scan that may follow finds the same 1%), so
// every upsert is a merge into an existing entity: the read-modify-write a server makes
// for the SDKs' default UpsertEntity.
func (b *bench) runUpsert(ctx context.Context) Result {
	st, secs := b.drive(ctx, WorkloadUpsert, b.preloadParts, func(ctx context.Context, w *worker) (int, int, error) {
		i := w.rng.IntN(b.opts.Preload)
		p := i % b.preloadParts
		pk, rk := b.pk(prefixPreload, p), preloadRowKey(i)
		w.stamp = stamp(w.stamp[:0])
		w.buf = b.appendEntity(w.buf[:0], pk, rk, w.id, int64(i), w.stamp)
		return 1, p, w.t.upsert(ctx, pk, rk, w.buf)
	})
	return b.result(WorkloadUpsert, st, secs, func(i int) string { return b.pk(prefixPreload, i) })
}

func (b *bench) runQuery(ctx context.Context) Result {
	st, secs := b.drive(ctx, WorkloadQuery, b.preloadParts, func(ctx context.Context, w *worker) (int, int, error) {
		p := w.pick(b.preloadParts)
		pk := b.pk(prefixPreload, p)
		n, err := w.t.query(ctx, "PartitionKey eq '"+pk+"'")
		if err != nil {
			return 0, p, err
		}
		// More is fine (a reused table may hold rows from earlier runs);
		// fewer means lost rows or a broken continuation. The floor
		// answers every partition with one recorded page: not checked.
		if want := b.preloadCount(p); n < want && !b.onFloor {
			return 0, p, &shortScanError{pk: pk, got: n, want: want}
		}
		return n, p, nil
	})
	return b.result(WorkloadQuery, st, secs, func(i int) string { return b.pk(prefixPreload, i) })
}

// runUpdate is the optimistic-concurrency contention test: all workers
// increment one counter entity with read-modify-write guarded by If-Match.
// A correct server serializes them — losers get 412 and retry — so the
// final count equals the successful updates exactly. A larger count means a
// write was applied but reported failed (possible only where errors were
// also counted); a smaller one means a lost update. Either is reported as an
// error of Run.
func (b *bench) runUpdate(ctx context.Context) (Result, error) {
	rk := b.runID + "-" + randomID(4) // a counter of its own per round
	body := fmt.Appendf(nil, `{"PartitionKey":%q,"RowKey":%q,"Count":0}`, counterPK, rk)
	if b.onFloor {
		// The floor replays the server's answers; there is no counter to create or check.
	} else if _, err := b.setupTable.UpsertEntity(ctx, body, &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace}); err != nil {
		err = fmt.Errorf("bench: creating the update counter: %s", summarize(err))
		return Result{Workload: WorkloadUpdate, PartitionTarget: PartitionTarget, Notes: "not run: " + err.Error()}, err
	}
	st, secs := b.drive(ctx, WorkloadUpdate, 1, func(ctx context.Context, w *worker) (int, int, error) {
		for {
			n, etag, err := readCounter(ctx, w.t, rk)
			if err != nil {
				return 0, 0, err
			}
			w.buf = fmt.Appendf(w.buf[:0], `{"PartitionKey":%q,"RowKey":%q,"Count":%d}`, counterPK, rk, n+1)
			err = w.t.replace(ctx, counterPK, rk, w.buf, etag)
			if err == nil {
				return 1, 0, nil
			}
			if !isStatus(err, http.StatusPreconditionFailed) {
				return 0, 0, err
			}
			w.conflicts++
			if w.stopping() || ctx.Err() != nil {
				return 0, 0, nil
			}
		}
	})
	notes := []string{fmt.Sprintf("%s If-Match conflicts (412) retried", commas(float64(st.conflicts)))}
	var checkErr error
	if ctx.Err() == nil && !b.onFloor {
		final, _, err := readCounter(ctx, sdkTarget{b.setupTable}, rk)
		switch {
		case err != nil:
			checkErr = fmt.Errorf("bench: update: reading the final counter: %s", summarize(err))
			notes = append(notes, "final counter unreadable: "+summarize(err))
		case final == st.entities:
			notes = append(notes, fmt.Sprintf("final counter %d = %d successes: OK", final, st.entities))
		default:
			checkErr = fmt.Errorf("bench: update: final counter %d != %d successful updates (%+d)", final, st.entities, final-st.entities)
			notes = append(notes, fmt.Sprintf("final counter %d != %d successes: MISMATCH (%+d; %d failed requests had unknown outcome)",
				final, st.entities, final-st.entities, st.errors))
		}
		if checkErr != nil {
			st.errors++
		}
	}
	return b.result(WorkloadUpdate, st, secs, func(int) string { return counterPK }, notes...), checkErr
}

// readCounter returns the update workload's counter value and ETag.
func readCounter(ctx context.Context, t target, rk string) (int64, string, error) {
	value, etag, err := t.get(ctx, counterPK, rk)
	if err != nil {
		return 0, "", err
	}
	var v struct{ Count *int64 }
	if err := json.Unmarshal(value, &v); err != nil {
		return 0, "", fmt.Errorf("counter entity: %w", err)
	}
	if v.Count == nil {
		return 0, "", errors.New("counter entity has no Count property")
	}
	if etag == "" {
		return 0, "", errors.New("GetEntity response carried no ETag")
	}
	return *v.Count, etag, nil
}

// batchSize is how many entities go into one transaction: 100 (Azure's
// maximum) unless that would exceed the 4 MiB request limit.
func (b *bench) batchSize() int {
	perEntity := b.opts.EntitySize + 400 // typed properties, keys, multipart headers
	return max(1, min(maxBatchEntities, maxBatchBytes/perEntity))
}

// batchEntities builds the entities of one insert transaction for partition p, in w's
// reused buffers.
func (b *bench) batchEntities(w *worker, p int) (string, [][]byte) {
	n := b.batchSize()
	if len(w.bufs) < n {
		w.bufs = make([][]byte, n)
	}
	pk := b.pk(prefixBatch, p)
	w.stamp = stamp(w.stamp[:0])
	for i := range n {
		w.bufs[i] = b.appendEntity(w.bufs[i][:0], pk, b.rowKey(w), w.id, w.seq, w.stamp)
	}
	return pk, w.bufs[:n]
}

// probeBatch sends one untimed batch through a target of its own: whether the server
// takes batches at all. The floor is not probed (it answers what the server answered).
func (b *bench) probeBatch(ctx context.Context) error {
	if b.onFloor {
		return nil
	}
	t := b.newTarget()
	defer t.close()
	probe := &worker{id: b.opts.Workers} // distinct id: keys never collide with the workers'
	pk, entities := b.batchEntities(probe, 0)
	return t.batch(ctx, pk, entities)
}

// runBatch measures entity-group transactions. One untimed probe batch goes
// first: if the server rejects it, the workload is reported as skipped
// (Notes says why) instead of failing the run, since batch support is an
// optional capability for some servers.
func (b *bench) runBatch(ctx context.Context) Result {
	parts := b.partitions()
	if err := b.probeBatch(ctx); err != nil {
		return Result{Workload: WorkloadBatch, PartitionTarget: PartitionTarget,
			Notes: "skipped: the server rejected the first batch: " + summarize(err)}
	}
	size := b.batchSize()
	st, secs := b.drive(ctx, WorkloadBatch, parts, func(ctx context.Context, w *worker) (int, int, error) {
		p := w.pick(parts)
		pk, entities := b.batchEntities(w, p)
		return size, p, w.t.batch(ctx, pk, entities)
	})
	var note string
	if size < maxBatchEntities {
		note = fmt.Sprintf("%d entities per batch (4 MiB request limit)", size)
	}
	return b.result(WorkloadBatch, st, secs, func(i int) string { return b.pk(prefixBatch, i) }, note)
}
