package bench

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/ceruleandb/cerulean/client"
)

// The feed workload measures Cerulean's change feed (docs/change-feed.md): the insert
// workload's writes into a table with the feed on, while one reader follows the feed by
// long polling. It reports the inserts' entities/s (and their ratio to the insert
// workload's, when that ran in the same run: the cost of the feed on writes), the delay
// from each insert's acknowledgement to the reader receiving its record (p50, p99; 0
// when the record arrived before the acknowledgement), and, after the writes, the whole
// feed read from its beginning in pages of 1,000 (changes/s).

// feedTableName is the feed workload's table: the bench table's name plus "feed".
func (b *bench) feedTableName() string { return b.opts.Table + "feed" }

func (b *bench) runFeed(ctx context.Context) Result {
	skip := func(why string) Result {
		return Result{Workload: WorkloadFeed, PartitionTarget: PartitionTarget, Notes: "skipped: " + why}
	}
	c, err := b.leanClient()
	if err != nil {
		return skip(err.Error())
	}
	name := b.feedTableName()
	if err := c.CreateTable(ctx, name, &client.TableSettings{ChangeFeedRetention: 3600}); err != nil {
		return skip("creating a table with a change feed: " + summarize(err))
	}
	defer b.dropTable(ctx, c, name)
	alt, err := b.altTable(name)
	if err != nil {
		return skip(err.Error())
	}
	start, err := c.ReadChanges(ctx, name, client.ChangesOptions{From: client.FromNow})
	if err != nil {
		return skip("reading the change feed: " + summarize(err))
	}

	// The reader: when each row key's record arrived.
	var mu sync.Mutex
	acked := map[string]time.Time{}
	seen := map[string]time.Time{}
	rctx, stopReader := context.WithCancel(ctx)
	readerDone := make(chan error, 1)
	go func() {
		readerDone <- c.FollowChanges(rctx, name, client.ChangesOptions{From: start.Continuation, Wait: 30 * time.Second},
			func(ch client.Change) error {
				now := time.Now()
				mu.Lock()
				seen[ch.RowKey] = now
				mu.Unlock()
				return nil
			}, nil)
	}()

	parts := b.partitions()
	b.alt = alt
	st, secs := b.drive(ctx, WorkloadFeed, parts, func(ctx context.Context, w *worker) (int, int, error) {
		p := w.pick(parts)
		rk := b.rowKey(w)
		w.stamp = stamp(w.stamp[:0])
		w.buf = b.appendEntity(w.buf[:0], b.pk(prefixInsert, p), rk, w.id, w.seq, w.stamp)
		if err := w.t.insert(ctx, w.buf); err != nil {
			return 0, p, err
		}
		now := time.Now()
		mu.Lock()
		acked[rk] = now
		mu.Unlock()
		return 1, p, nil
	})
	b.alt = nil

	// Wait for the reader to have every acknowledged write (at most a minute).
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		missing := 0
		for rk := range acked {
			if _, ok := seen[rk]; !ok {
				missing++
			}
		}
		mu.Unlock()
		if missing == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
	}
	stopReader()
	<-readerDone
	mu.Lock()
	lags := make([]time.Duration, 0, len(acked))
	missing := 0
	for rk, at := range acked {
		s, ok := seen[rk]
		if !ok {
			missing++
			continue
		}
		lags = append(lags, max(0, s.Sub(at)))
	}
	mu.Unlock()
	sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
	pct := func(q float64) time.Duration {
		if len(lags) == 0 {
			return 0
		}
		return lags[min(len(lags)-1, int(q*float64(len(lags))))]
	}

	// The whole feed from its beginning.
	t0 := time.Now()
	read, from := 0, client.FromBeginning
	for ctx.Err() == nil {
		p, err := c.ReadChanges(ctx, name, client.ChangesOptions{From: from, Limit: 1000})
		if err != nil {
			st.fail(fmt.Errorf("reading the feed back: %w", err))
			break
		}
		read += len(p.Changes)
		if len(p.Changes) == 0 {
			break
		}
		from = p.Continuation
	}
	readSecs := time.Since(t0).Seconds()

	notes := []string{fmt.Sprintf("write→reader delay p50 %s p99 %s over %s writes", fmtMS(pct(0.50)), fmtMS(pct(0.99)), commas(float64(len(lags))))}
	if missing > 0 {
		notes = append(notes, fmt.Sprintf("%d acknowledged writes never reached the reader", missing))
		st.errors += int64(missing)
	}
	if readSecs > 0 {
		notes = append(notes, fmt.Sprintf("feed read back: %s changes in %.2fs, %s changes/s", commas(float64(read)), readSecs, commas(float64(read)/readSecs)))
	}
	r := b.result(WorkloadFeed, st, secs, func(i int) string { return b.pk(prefixInsert, i) }, notes...)
	if b.lastInsert != nil && b.lastInsert.EntitiesPerSec > 0 {
		r.Notes = fmt.Sprintf("%.2f× insert's entities/s (feed on vs off); %s", r.EntitiesPerSec/b.lastInsert.EntitiesPerSec, r.Notes)
	}
	r.FeedDelayP50, r.FeedDelayP99 = pct(0.50), pct(0.99)
	if readSecs > 0 {
		r.FeedReadPerSec = float64(read) / readSecs
	}
	return r
}

// fmtMS is a duration in milliseconds with two decimals.
func fmtMS(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}
