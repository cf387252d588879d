package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ceruleandb/cerulean/client"
)

// The index workloads measure Cerulean's secondary indexes (docs/indexes.md) with the
// issue's two questions: what an index costs writes, and what it saves queries.
//
//   - indexinsert: the insert workload's writes into three elastic tables of its own,
//     with 0, 1 and 3 indexes on the entities' typed properties, in turns (0, 1, 3, 0, 1,
//     3), each a sixth of Duration, so that the machine's drift over the run falls on the
//     three alike. Its entities/s is the one-index table's; the notes give the three
//     rates and their ratios to no index.
//   - indexquery: IndexEntities entities loaded (untimed, bulk requests) into an elastic
//     table with an index on Tag, where about 100 entities share each value, and an
//     unindexed copy of it, TagCopy. The timed part queries Tag eq '…' for random values
//     (following continuation, each query must return all its value's entities); then
//     index queries and a few TagCopy eq '…' queries, which must scan the table, one at
//     a time. The speed-up is the scans' median latency over the index queries' (both
//     alone, so that it is the plans' ratio, not the load's). The first index
//     query's plan (x-cerulean-plan) is reported, so a run that did not use the
//     index shows it.

// indexPerValue is about how many indexquery entities share one Tag.
const indexPerValue = 100

// indexScans is how many unindexed scans indexquery times (one at a time), and
// indexSerial how many index queries it times one at a time to compare them with.
const (
	indexScans  = 5
	indexSerial = 200
)

// indexTableName names an index workload's table: the bench table's name plus suffix.
func (b *bench) indexTableName(suffix string) string { return b.opts.Table + suffix }

// insertIndexes are the declarations of indexinsert's tables, by index count.
var insertIndexes = map[int][]client.Index{
	0: nil,
	1: {{Name: "BySeq", Properties: []string{"Seq"}}},
	3: {
		{Name: "BySeq", Properties: []string{"Seq"}},
		{Name: "ByRatio", Properties: []string{"Ratio"}},
		{Name: "ByWorkerCreated", Properties: []string{"Worker", "Created"}},
	},
}

func (b *bench) runIndexInsert(ctx context.Context) Result {
	skip := func(why string) Result {
		return Result{Workload: WorkloadIndexInsert, PartitionTarget: PartitionTarget, Notes: "skipped: " + why}
	}
	c, err := b.leanClient()
	if err != nil {
		return skip(err.Error())
	}
	counts := []int{0, 1, 3}
	alts := map[int]*altTable{}
	for _, n := range counts {
		name := b.indexTableName("ix" + strconv.Itoa(n))
		if err := c.CreateTable(ctx, name, &client.TableSettings{Elastic: true, Indexes: insertIndexes[n]}); err != nil {
			return skip(fmt.Sprintf("creating an elastic table with %d indexes: %s", n, summarize(err)))
		}
		defer b.dropTable(ctx, c, name)
		if alts[n], err = b.altTable(name); err != nil {
			return skip(err.Error())
		}
	}
	parts := b.partitions()
	total := map[int]*stats{}
	secs := map[int]float64{}
	full := b.opts.Duration
	defer func() { b.opts.Duration = full }()
	b.opts.Duration = max(time.Second, full/6)
	for turn := range 2 * len(counts) {
		n := counts[turn%len(counts)]
		b.alt = alts[n]
		b.round++ // new row keys for the turn: each table gets two turns per round
		st, s := b.drive(ctx, fmt.Sprintf("%s/%d", WorkloadIndexInsert, n), parts, b.insertOp(parts))
		if total[n] == nil {
			total[n] = &stats{perPart: make([]int64, parts)}
		}
		total[n].merge(st)
		secs[n] += s
	}
	b.alt = nil
	rate := func(n int) float64 {
		if secs[n] == 0 {
			return 0
		}
		return float64(total[n].entities) / secs[n]
	}
	note := fmt.Sprintf("entities/s with 0, 1, 3 indexes: %s, %s, %s", commas(rate(0)), commas(rate(1)), commas(rate(3)))
	if r0 := rate(0); r0 > 0 {
		note += fmt.Sprintf(" (%.2f×, %.2f× of none)", rate(1)/r0, rate(3)/r0)
	}
	r := b.result(WorkloadIndexInsert, total[1], secs[1], func(i int) string { return b.pk(prefixInsert, i) }, note)
	r.IndexInsertPerSec = []float64{rate(0), rate(1), rate(3)}
	for _, n := range []int{0, 3} {
		r.Errors += total[n].errors
	}
	return r
}

// appendTagged appends an indexquery entity: appendEntity's with Tag and TagCopy (the
// value tag, the same in both) before its closing brace.
func (b *bench) appendTagged(buf []byte, pk, rk string, seq int64, created []byte, tag string) []byte {
	buf = b.appendEntity(buf, pk, rk, 0, seq, created)
	buf = buf[:len(buf)-1]
	buf = append(buf, `,"Tag":"`...)
	buf = append(buf, tag...)
	buf = append(buf, `","TagCopy":"`...)
	buf = append(buf, tag...)
	return append(buf, `"}`...)
}

// tagOf is the Tag of indexquery entity i of n: values is n/indexPerValue (at least 1)
// and entity i takes value i % values, so each value is shared by about indexPerValue
// entities spread over every partition.
func tagOf(i, values int) string { return fmt.Sprintf("t%07d", i%values) }

// tagCount is how many of n entities hold value v of values.
func tagCount(v, n, values int) int {
	c := n / values
	if v < n%values {
		c++
	}
	return c
}

func (b *bench) runIndexQuery(ctx context.Context) Result {
	skip := func(why string) Result {
		return Result{Workload: WorkloadIndexQuery, PartitionTarget: PartitionTarget, Notes: "skipped: " + why}
	}
	c, err := b.leanClient()
	if err != nil {
		return skip(err.Error())
	}
	if b.indexQuery == nil {
		b.indexQuery = b.setUpIndexQuery(ctx, c)
	}
	if err := b.indexQuery.err; err != nil {
		return Result{Workload: WorkloadIndexQuery, PartitionTarget: PartitionTarget, Errors: 1, Notes: "not run: " + summarize(err)}
	}
	name, n, values := b.indexQuery.name, b.opts.IndexEntities, b.indexQuery.values
	plan, err := b.planOf(ctx, c, name, fmt.Sprintf("Tag eq '%s'", tagOf(0, values)))
	if err != nil {
		return skip("the first index query failed: " + summarize(err))
	}
	alt, err := b.altTable(name)
	if err != nil {
		return skip(err.Error())
	}
	b.alt = alt
	query := func(prop string) opFunc {
		return func(ctx context.Context, w *worker) (int, int, error) {
			v := w.rng.IntN(values)
			got, err := w.t.query(ctx, fmt.Sprintf("%s eq '%s'", prop, tagOf(v, values)))
			if err != nil {
				return 0, 0, err
			}
			if want := tagCount(v, n, values); got != want {
				return 0, 0, &shortScanError{pk: prop + " eq " + tagOf(v, values), got: got, want: want}
			}
			return got, 0, nil
		}
	}
	st, secs := b.drive(ctx, WorkloadIndexQuery, 1, query("Tag"))

	// Latency, one query at a time: indexSerial index queries, then the same queries on
	// the unindexed copy, indexScans of them (or as many as fit in Duration, at least
	// one). Both alone, so the ratio is the plans', not the load's.
	w := &worker{id: 0, t: b.newTarget(), rng: rand.New(rand.NewPCG(rand.Uint64(), 0))}
	w.perPart = make([]int64, 1)
	serial := func(prop string, count int) *stats {
		st := &stats{perPart: make([]int64, 1)}
		deadline := time.Now().Add(b.opts.Duration)
		for i := 0; i < count && ctx.Err() == nil && (i == 0 || time.Now().Before(deadline)); i++ {
			t0 := time.Now()
			got, _, err := query(prop)(ctx, w)
			if err != nil {
				st.fail(err)
				continue
			}
			st.ops++
			st.entities += int64(got)
			st.hist.record(time.Since(t0))
		}
		return st
	}
	alone := serial("Tag", indexSerial)
	scans := serial("TagCopy", indexScans)
	w.t.close()
	b.alt = nil

	scanP50, p50 := scans.hist.percentile(0.50), alone.hist.percentile(0.50)
	var notes []string
	if p50 > 0 && scanP50 > 0 {
		notes = append(notes, fmt.Sprintf("%.0f× faster than the scan (p50, one query at a time)", float64(scanP50)/float64(p50)))
	}
	notes = append(notes, fmt.Sprintf("plan %q", plan),
		fmt.Sprintf("%s entities, about %d per value; one at a time: index query p50 %s over %d, unindexed scan p50 %s over %d",
			commas(float64(n)), n/values, fmtMS(p50), alone.ops, fmtMS(scanP50), scans.ops))
	if e := alone.errNote(); e != "" {
		notes = append(notes, "index queries alone: "+e)
	}
	if e := scans.errNote(); e != "" {
		notes = append(notes, "scans: "+e)
	}
	r := b.result(WorkloadIndexQuery, st, secs, func(int) string { return "" }, notes...)
	r.HottestPartition, r.HottestPartitionPerSec = "", 0
	r.Errors += scans.errors + alone.errors
	if p50 > 0 && scanP50 > 0 {
		r.IndexSpeedup = float64(scanP50) / float64(p50)
	}
	r.IndexAloneP50 = p50
	r.IndexScanP50 = scanP50
	return r
}

// indexQueryTable is indexquery's loaded table.
type indexQueryTable struct {
	name   string
	values int   // distinct Tag values
	err    error // why it could not be set up: every round reports it
}

// setUpIndexQuery creates and loads indexquery's table, once per run; Run drops it at the
// end.
func (b *bench) setUpIndexQuery(ctx context.Context, c *client.Client) *indexQueryTable {
	t := &indexQueryTable{name: b.indexTableName("ixq"), values: max(1, b.opts.IndexEntities/indexPerValue)}
	settings := &client.TableSettings{Elastic: true, Indexes: []client.Index{{Name: "ByTag", Properties: []string{"Tag"}}}}
	if err := c.CreateTable(ctx, t.name, settings); err != nil {
		t.err = fmt.Errorf("creating an elastic table with an index: %w", err)
		return t
	}
	b.cleanups = append(b.cleanups, func() { b.dropTable(ctx, c, t.name) })
	t.err = b.loadTagged(ctx, c, t.name, b.opts.IndexEntities, t.values)
	return t
}

// loadTagged writes n tagged entities into table with bulk requests (untimed setup),
// Workers/8 requests at once, reporting progress like the preload.
func (b *bench) loadTagged(ctx context.Context, c *client.Client, table string, n, values int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	size := b.bulkOps()
	var next, done atomic.Int64
	stop := startProgress(b.opts.Progress, &done, func(el time.Duration, k int64, rate float64) string {
		return fmt.Sprintf("index load %3.0fs  %s/%s entities  %s/s", el.Seconds(), commas(float64(k)), commas(float64(n)), commas(rate))
	})
	start := time.Now()
	var once sync.Once
	var firstErr error
	var wg sync.WaitGroup
	parts := max(1, b.partitions())
	for range max(1, b.opts.Workers/8) {
		wg.Go(func() {
			var bufs [][]byte
			for ctx.Err() == nil {
				first := int(next.Add(int64(size)) - int64(size))
				if first >= n {
					return
				}
				k := min(size, n-first)
				ops := make([]client.BulkOp, k)
				bufs = slices.Grow(bufs[:0], k)[:k]
				now := stamp(nil)
				for j := range ops {
					i := first + j
					bufs[j] = b.appendTagged(bufs[j][:0], b.pk(prefixPreload, i%parts), preloadRowKey(i), int64(i), now, tagOf(i, values))
					ops[j] = client.BulkOp{Op: client.BulkUpsert, Entity: bufs[j]}
				}
				res, err := c.Bulk(ctx, table, ops)
				if err == nil && res.Failed > 0 {
					for _, r := range res.Results {
						if r.Error != nil {
							err = &itemError{r.Error.Code, r.Error.Message}
							break
						}
					}
				}
				if err != nil {
					once.Do(func() { firstErr = err; cancel() })
					return
				}
				done.Add(int64(k))
			}
		})
	}
	wg.Wait()
	stop()
	if firstErr != nil {
		return fmt.Errorf("bench: index load after %d of %d entities: %s", done.Load(), n, summarize(firstErr))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	fmt.Fprintf(b.text, "%-9s %s entities, %d values of Tag, in %.1fs (%s/s, untimed setup)\n", "index load",
		commas(float64(n)), values, secs, commas(float64(n)/secs))
	return nil
}

// planOf runs one query page of filter on table and returns the plan the server says it
// used (x-cerulean-plan; "" from a server that does not say).
func (b *bench) planOf(ctx context.Context, c *client.Client, table, filter string) (string, error) {
	q := url.Values{"$filter": {filter}, "$top": {"1"}}
	resp, err := c.Do(ctx, http.MethodGet, table+"()", q, nil, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if err := client.ResponseError(resp); err != nil {
		return "", err
	}
	return resp.Header.Get("x-cerulean-plan"), nil
}
