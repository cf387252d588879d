package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ceruleandb/cerulean/client"
)

// The load workloads write Options.Load new entities as fast as the server takes them and
// report entities/s, once through 100-entity $batch transactions (batchload, the fastest
// way the Azure Table API offers) and once through Cerulean's bulk writes (bulkload,
// POST ?comp=bulk on an elastic table), so one run compares them.
//
// Both write the same entities (appendEntity, Options.EntitySize) in the same key layout:
// entity j goes to partition (j/100) mod Partitions, so 100 consecutive entities share a
// partition — one $batch, or one engine Apply inside a bulk request, each (fewer than 100
// when entities are too large for 100 in a 4 MiB batch). They differ only
// in how requests carry them:
//   - batchload: Workers goroutines, each sending one batch at a time, into the bench table.
//   - bulkload: Workers/8 goroutines (at least 1), each sending one bulk request at a
//     time of bulkOps() entities (about 3 MiB, at most 10,000), into an elastic
//     table created for it. The server applies each request's partitions 8 at a time, so
//     both keep about Workers partition writes in flight; and four 3 MiB bodies in
//     flight stay within half of the server's default body memory budget (64 MiB).
//
// bulkload needs a Cerulean server and an account key (the client package signs with it);
// elsewhere it is skipped with a note, as batch is on servers without batches.

// bulkRequestBytes is the body size bulkload aims its requests at.
const bulkRequestBytes = 3 << 20

// loadUnit is how many consecutive entities of a load share a partition: one batch, 100
// unless the entities are too large for 100 in a 4 MiB batch.
func (b *bench) loadUnit() int { return b.batchSize() }

// bulkOps is how many entities go into one bulk request: about bulkRequestBytes of body,
// in whole partition units, between one unit and client.MaxBulkOperations.
func (b *bench) bulkOps() int {
	unit := b.loadUnit()
	perEntity := b.opts.EntitySize + 400 // typed properties, keys and the operation's envelope
	n := bulkRequestBytes / perEntity / unit * unit
	return max(unit, min(client.MaxBulkOperations/unit*unit, n))
}

// loadKey is the partition key and row key of load entity j.
func (b *bench) loadKey(j int, prefix string) (string, string) {
	p := (j / b.loadUnit()) % b.partitions()
	return b.pk(prefix, p), b.runID + "-" + strconv.Itoa(b.round) + "-" + fmt.Sprintf("%09d", j)
}

// itemError is the failure of one operation of a bulk request.
type itemError struct{ code, message string }

func (e *itemError) Error() string { return "bulk item " + e.code + ": " + e.message }

// load writes Options.Load entities with workers goroutines, count entities per call of
// send (first is the index of the call's first entity), and returns the merged stats
// (ops = requests) and the elapsed seconds.
func (b *bench) load(ctx context.Context, label string, workers, count int, send func(ctx context.Context, w *worker, first, n int) error) (*stats, float64) {
	total := b.opts.Load
	var next atomic.Int64
	var done, liveErrs atomic.Int64
	stop := startProgress(b.opts.Progress, &done, func(el time.Duration, n int64, rate float64) string {
		return fmt.Sprintf("%-9s %3.0fs  %s/%s entities  %s/s  %s errors", label, el.Seconds(),
			commas(float64(n)), commas(float64(total)), commas(rate), commas(float64(liveErrs.Load())))
	})
	start := time.Now()
	seed := time.Now().UnixNano()
	ws := make([]*worker, workers)
	var wg sync.WaitGroup
	for i := range ws {
		w := &worker{id: i, seq: seed, t: b.newTarget()}
		ws[i] = w
		wg.Go(func() {
			defer w.t.close()
			for ctx.Err() == nil {
				first := int(next.Add(int64(count))) - count
				if first >= total {
					return
				}
				n := min(count, total-first)
				t0 := time.Now()
				err := send(ctx, w, first, n)
				d := time.Since(t0)
				if ctx.Err() != nil {
					return
				}
				var ie *itemErrors
				switch {
				case errors.As(err, &ie):
					for _, e := range ie.errs {
						w.fail(e)
					}
					liveErrs.Add(int64(len(ie.errs)))
					n -= len(ie.errs)
				case err != nil:
					w.fail(err)
					liveErrs.Add(1)
					continue
				}
				w.ops++
				w.entities += int64(n)
				w.hist.record(d)
				done.Add(int64(n))
			}
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	stop()
	st := &stats{}
	for _, w := range ws {
		st.merge(&w.stats)
	}
	return st, secs
}

// itemErrors carries the failed items of an otherwise answered bulk request.
type itemErrors struct{ errs []error }

func (e *itemErrors) Error() string { return fmt.Sprintf("%d bulk items failed", len(e.errs)) }

// runBatchLoad loads Options.Load entities into the bench table with 100-entity $batch
// insert transactions. An untimed probe batch goes first, as in runBatch.
func (b *bench) runBatchLoad(ctx context.Context) Result {
	size := b.loadUnit()
	if err := b.probeBatch(ctx); err != nil {
		return Result{Workload: WorkloadBatchLoad, PartitionTarget: PartitionTarget,
			Notes: "skipped: the server rejected the first batch: " + summarize(err)}
	}
	st, secs := b.load(ctx, WorkloadBatchLoad, b.opts.Workers, size, func(ctx context.Context, w *worker, first, n int) error {
		if len(w.bufs) < n {
			w.bufs = make([][]byte, n)
		}
		var pk string
		now := stamp(nil)
		for j := first; j < first+n; j++ {
			var rk string
			pk, rk = b.loadKey(j, prefixLoadBatch) // one partition: the calls are whole units
			i := j - first
			w.bufs[i] = b.appendEntity(w.bufs[i][:0], pk, rk, w.id, int64(j), now)
		}
		return w.t.batch(ctx, pk, w.bufs[:n])
	})
	return b.result(WorkloadBatchLoad, st, secs, nil,
		fmt.Sprintf("%s entities in batches of %d, %d workers", commas(float64(b.opts.Load)), size, b.opts.Workers))
}

// runBulkLoad loads Options.Load entities into a new elastic table with bulk requests.
func (b *bench) runBulkLoad(ctx context.Context) Result {
	skip := func(why string) Result {
		return Result{Workload: WorkloadBulkLoad, PartitionTarget: PartitionTarget, Notes: "skipped: " + why}
	}
	c, err := b.leanClient()
	if err != nil {
		return skip(err.Error())
	}
	name := "bulk" + b.runID
	if err := c.CreateTable(ctx, name, &client.TableSettings{Elastic: true}); err != nil {
		return skip("creating an elastic table: " + summarize(err))
	}
	defer b.dropTable(ctx, c, name)
	if _, err := c.Bulk(ctx, name, nil); err != nil {
		return skip("the server refused a bulk request: " + summarize(err))
	}
	size := b.bulkOps()
	workers := max(1, b.opts.Workers/8)
	st, secs := b.load(ctx, WorkloadBulkLoad, workers, size, func(ctx context.Context, w *worker, first, n int) error {
		ops := make([]client.BulkOp, n)
		if len(w.bufs) < n {
			w.bufs = make([][]byte, n)
		}
		now := stamp(nil)
		for i := range ops {
			pk, rk := b.loadKey(first+i, prefixLoadBulk)
			w.bufs[i] = b.appendEntity(w.bufs[i][:0], pk, rk, w.id, int64(first+i), now)
			ops[i] = client.BulkOp{Op: client.BulkInsert, Entity: w.bufs[i]}
		}
		res, err := c.Bulk(ctx, name, ops)
		if err != nil {
			return err
		}
		if res.Failed == 0 {
			return nil
		}
		ie := &itemErrors{}
		for _, r := range res.Results {
			if r.Error != nil {
				ie.errs = append(ie.errs, &itemError{r.Error.Code, r.Error.Message})
			}
		}
		return ie
	})
	return b.result(WorkloadBulkLoad, st, secs, nil,
		fmt.Sprintf("%s entities in bulk requests of %d, %d workers, elastic table %s", commas(float64(b.opts.Load)), size, workers, name))
}

// dropTable deletes a table a workload created for itself (unless --keep), even when ctx
// is cancelled, and says so.
func (b *bench) dropTable(ctx context.Context, c *client.Client, name string) {
	if b.opts.Keep {
		fmt.Fprintf(b.text, "table %s kept\n", name)
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	resp, err := c.Do(dctx, http.MethodDelete, "Tables('"+name+"')", nil, nil, nil)
	if err == nil {
		err = client.ResponseError(resp)
		resp.Body.Close()
	}
	if err == nil {
		fmt.Fprintf(b.text, "table %s deleted\n", name)
	} else {
		fmt.Fprintf(b.text, "table %s not deleted: %s\n", name, summarize(err))
	}
}

// leanClient is a client package client for the connection string's account key.
func (b *bench) leanClient() (*client.Client, error) {
	m := map[string]string{}
	for _, part := range strings.Split(strings.TrimRight(b.opts.ConnectionString, ";"), ";") {
		k, v, _ := strings.Cut(part, "=")
		m[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	if m["AccountKey"] == "" {
		return nil, errors.New("bulk requests are signed with an account key; the connection string has none")
	}
	c, err := client.New(b.endpoint, m["AccountName"], m["AccountKey"])
	if err != nil {
		return nil, errors.New("the connection string's account key is not valid base64")
	}
	c.HTTP = b.hc
	return c, nil
}
