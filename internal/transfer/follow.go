package transfer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/ceruleandb/cerulean/client"
	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/transfer/record"
)

// Following a source's change feeds (CopyOptions.Follow, docs/change-feed.md): a copy
// that keeps the target in step with a live source.
//
// Before a table's entities are read, the copy takes the position of the table's feed
// ("now") and keeps it in the checkpoint (TableState.Feed). Once every table is copied,
// it reads each table's feed from there and applies the records to the target, page by
// page, until stopped. Entities the scan copied and the feed then changes again are
// written again: a record holds the entity's whole state, so writing it (Insert Or
// Replace) or deleting it (a delete of a missing entity is no error) brings the target to
// the source's state whatever the target held — which also makes a resumed run, that
// applies again the page it was applying, safe. Within a page only each entity's last
// record is applied (the earlier ones are states the target need not pass through);
// partitions are applied in parallel, and the continuation is saved once the page is
// applied, so a resumed run never skips a change.

// followPoll is how long one feed read waits for changes.
const followPoll = 20 * time.Second

// ErrFollowStopped is returned by a copy that was following its source when Stop was
// closed: the normal end of following; the checkpoint is saved and a resumed run carries
// on from it.
var ErrFollowStopped = errors.New("stopped following")

// ErrFeedOff is a follow's error when a source table has no change feed.
var ErrFeedOff = errors.New("the source table has no change feed: turn it on (cerulean table set TABLE --change-feed 1d) before a copy with --follow")

// feedStart reads where a source table's feed is now.
func feedStart(ctx context.Context, src *client.Client, table string, retry Retry, obs Observer) (string, error) {
	var p *client.ChangesPage
	err := retry.do(ctx, func(int) error {
		var err error
		p, err = src.ReadChanges(ctx, table, client.ChangesOptions{From: client.FromNow})
		return err
	}, obs.Retried)
	var e *client.Error
	if errors.As(err, &e) && e.Status == http.StatusBadRequest {
		return "", fmt.Errorf("table %s: %w", table, ErrFeedOff)
	}
	if err != nil {
		return "", fmt.Errorf("table %s: read its change feed: %w", table, err)
	}
	return p.Continuation, nil
}

// follow applies the feeds of the copied tables to the target until o.Stop (then
// ErrInterrupted, with the checkpoint saved) or an error. A table whose source is
// deleted stops being followed; the run ends when none is left.
func follow(ctx context.Context, src, dst *client.Client, cp *Checkpoint, mu *sync.Mutex, o *CopyOptions) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(cp.Tables))
	n := 0
	for i := range cp.Tables {
		ts := &cp.Tables[i]
		if ts.Feed == "" {
			continue // its source table was deleted, in an earlier run
		}
		target := ts.Name
		if r, ok := o.Rename[ts.Name]; ok {
			target = r
		}
		n++
		go func() { errs <- followTable(ctx, src, dst, ts, target, cp, mu, o) }()
	}
	var first error
	for range n {
		if err := <-errs; err != nil && (first == nil || first == ErrInterrupted) {
			first = err
			if err != ErrInterrupted {
				cancel()
			}
		}
	}
	if first == ErrInterrupted {
		return ErrFollowStopped
	}
	return first
}

// followTable follows one table's feed.
func followTable(ctx context.Context, src, dst *client.Client, ts *TableState, target string, cp *Checkpoint, mu *sync.Mutex, o *CopyOptions) error {
	obs := o.observer()
	// A read waits at most followPoll, and a stop cuts it short.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-o.Stop:
			cancel()
		case <-rctx.Done():
		}
	}()
	mu.Lock()
	from := ts.Feed
	mu.Unlock()
	for {
		if stopped(o.Stop) {
			return ErrInterrupted
		}
		var p *client.ChangesPage
		err := o.Retry.do(rctx, func(int) error {
			var err error
			p, err = src.ReadChanges(rctx, ts.Name, client.ChangesOptions{From: from, Wait: followPoll, Limit: 1000})
			return err
		}, obs.Retried)
		if err != nil {
			if stopped(o.Stop) {
				return ErrInterrupted
			}
			var e *client.Error
			if errors.As(err, &e) && e.Code == client.CodeChangesExpired {
				return fmt.Errorf("table %s: the source's change feed no longer holds the changes after this copy's position (its retention passed while the copy was stopped or behind): copy the table again: %w", ts.Name, err)
			}
			return fmt.Errorf("table %s: read its change feed: %w", ts.Name, err)
		}
		ended, err := applyChanges(ctx, dst, ts.Name, target, p.Changes, o)
		if err != nil {
			return err
		}
		if ended {
			p.Continuation = "" // nothing more to follow
		}
		mu.Lock()
		ts.Feed = p.Continuation
		err = cp.save(o.Checkpoint)
		mu.Unlock()
		if err != nil || ended {
			return err
		}
		from = p.Continuation
	}
}

// applyChanges applies a page of a table's feed to the target: each entity's last
// record, partitions in parallel. It reports whether the page ended the feed (the
// source table deleted).
func applyChanges(ctx context.Context, dst *client.Client, table, target string, changes []client.Change, o *CopyOptions) (ended bool, err error) {
	type key struct{ pk, rk string }
	last := map[key]int{}
	var parts []string
	byPart := map[string][]key{}
	for i, ch := range changes {
		switch ch.Op {
		case "tableDeleted":
			ended = true
			continue
		case "feedOff":
			return false, fmt.Errorf("table %s: the source's change feed was turned off: the changes made while it was off are not known: copy the table again", table)
		}
		k := key{ch.PartitionKey, ch.RowKey}
		if _, seen := last[k]; !seen {
			if _, ok := byPart[k.pk]; !ok {
				parts = append(parts, k.pk)
			}
			byPart[k.pk] = append(byPart[k.pk], k)
		}
		last[k] = i
	}
	workers := o.Workers
	if workers <= 0 {
		workers = 8
	}
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	for _, pk := range parts {
		keys := byPart[pk]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			recs := make([]*client.Change, len(keys))
			for i, k := range keys {
				recs[i] = &changes[last[k]]
			}
			if err := applyPartition(ctx, dst, table, target, recs, o); err != nil {
				once.Do(func() { firstErr = err })
			}
		}()
	}
	wg.Wait()
	return ended, firstErr
}

// applyPartition writes a partition's entities (Insert Or Replace, in batches of 100)
// and deletes its removed ones (a missing one is no error).
func applyPartition(ctx context.Context, dst *client.Client, table, target string, recs []*client.Change, o *CopyOptions) error {
	obs := o.observer()
	var puts []client.BatchEntity
	var dels []*client.Change
	bytes := 0
	for _, ch := range recs {
		if len(ch.Entity) == 0 {
			dels = append(dels, ch)
			continue
		}
		r, err := record.FromAnswer(ch.Entity)
		if err != nil {
			return fmt.Errorf("table %s: change %d: %s", table, ch.Seq, record.Detail(err))
		}
		if o.IgnoreSettings {
			r.Expiry = 0
		} else if r.Expiry != 0 && r.Expiry <= entity.TimeToTicks(time.Now()) {
			dels = append(dels, ch) // expired at the source already
			continue
		}
		body := record.AppendJSON(nil, &r, record.JSONOptions{})
		bytes += len(body)
		puts = append(puts, client.BatchEntity{PartitionKey: ch.PartitionKey, RowKey: ch.RowKey, Body: body, Expiry: r.Expiry})
	}
	for len(puts) > 0 {
		n := min(len(puts), 100)
		chunk := puts[:n]
		err := o.Retry.do(ctx, func(int) error { return dst.Batch(ctx, target, client.Replace, chunk) }, obs.Retried)
		if err != nil {
			return &WriteError{Table: target, PartitionKey: chunk[0].PartitionKey, Err: err}
		}
		puts = puts[n:]
	}
	for _, ch := range dels {
		err := o.Retry.do(ctx, func(int) error {
			_, err := dst.DeleteEntity(ctx, target, ch.PartitionKey, ch.RowKey)
			return err
		}, obs.Retried)
		if err != nil {
			return &WriteError{Table: target, PartitionKey: ch.PartitionKey, Err: err}
		}
	}
	obs.Done(len(recs), bytes)
	return nil
}
