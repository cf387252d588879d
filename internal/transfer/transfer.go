// Package transfer moves table entities between endpoints and files: export (endpoint →
// records), import (records → endpoint) and copy (endpoint → endpoint, over several
// PartitionKey ranges at once), streaming in constant memory.
//
// Writes go in $batch changesets of at most 100 entities of one partition; each
// partition belongs to one of several parallel writers, so a partition's batches are
// written in order and different partitions at once. Calls that fail with 500, 503,
// 408, 429, a timeout or a broken connection are retried with exponential backoff and
// full jitter (Retry).
//
// Resume: a run with a checkpoint path records its last committed position — the point
// before which every entity is acknowledged by the target — after acknowledged work and
// when it stops. A stop (Options.Stop closed, e.g. on Ctrl-C) lets the batches already
// sent finish, drops the one being gathered, writes the checkpoint and returns
// ErrInterrupted. A run killed without a stop (kill -9, OOM, a lost terminal) leaves the
// checkpoint it saved last (at most a second old): anything past it may have been
// written. The guarantee of a resumed run, whatever ended the first: every entity is
// written at least once by the runs together, none is refused for having been written
// by an earlier run, and an entity the target held before the job is still a conflict
// in --mode insert. Upserts are idempotent; an insert that the target refuses with
// EntityAlreadyExists is resolved against the target (sink.resolveConflict): an entity
// it holds with exactly the source's data and a Timestamp from the job's start on
// (Checkpoint.Since, saved before anything is written) is one an earlier run wrote.
package transfer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ceruleandb/cerulean/client"
	"github.com/ceruleandb/cerulean/internal/transfer/record"
)

// ErrInterrupted is returned by a run stopped through Options.Stop; its checkpoint is
// written.
var ErrInterrupted = errors.New("interrupted")

// Observer hears of a run's progress; its methods are called from several goroutines.
type Observer interface {
	// Done counts entities committed (written, or exported) and their bytes.
	Done(entities, bytes int)
	// Failed counts an error that did not stop the run (a bad line skipped).
	Failed(err error)
	// Retried counts a call about to be repeated.
	Retried(err error)
}

// Options are what every run takes.
type Options struct {
	// Workers is the number of parallel partition writers (0: 8).
	Workers int
	Retry   Retry
	// Mode is how entities are written (insert, replace or merge upserts).
	Mode client.WriteMode
	// Checkpoint is the checkpoint file ("" for none); Resume starts from it.
	Checkpoint string
	Resume     bool
	// Stop, when closed, stops the run cleanly (ErrInterrupted).
	Stop <-chan struct{}
	// Observer hears of progress; nil for none.
	Observer Observer
	// SkipBad skips records the input cannot read (reporting them to Observer.Failed);
	// otherwise the first one stops the run.
	SkipBad bool
	// CheckpointEvery is how often the checkpoint is written during a run (0: 1 s).
	CheckpointEvery time.Duration
	// IgnoreSettings moves entities alone: tables' elastic settings and entities'
	// expiry are neither read nor written (settings.go).
	IgnoreSettings bool
}

// ExpiryObserver is an Observer that also hears of entities not written because they
// had expired by the time they would have been (an elastic table's time-to-live).
type ExpiryObserver interface {
	Expired(entities int)
}

func (o *Options) onExpired() func(int) {
	if e, ok := o.Observer.(ExpiryObserver); ok {
		return e.Expired
	}
	return nil
}

func (o *Options) observer() Observer {
	if o.Observer == nil {
		return nopObserver{}
	}
	return o.Observer
}

func (o *Options) every() time.Duration {
	if o.CheckpointEvery <= 0 {
		return time.Second
	}
	return o.CheckpointEvery
}

type nopObserver struct{}

func (nopObserver) Done(int, int) {}
func (nopObserver) Failed(error)  {}
func (nopObserver) Retried(error) {}

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// ListTables is every table of src, for "all tables".
func ListTables(ctx context.Context, src *client.Client, retry Retry) ([]string, error) {
	var tables []client.Table
	err := retry.do(ctx, func(int) error {
		var err error
		tables, err = src.ListTables(ctx, false)
		return err
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.Name
	}
	return names, nil
}

// pageReader reads a table page by page, one page ahead of its consumer, so reading
// overlaps writing.
type pageReader struct {
	pages chan pageOrErr
	stop  chan struct{}
	once  sync.Once
}

type pageOrErr struct {
	at   client.Continuation // the continuation the page was fetched with
	page *client.Page
	err  error
}

func readPages(ctx context.Context, src *client.Client, table string, q client.Query, retry Retry, obs Observer) *pageReader {
	pr := &pageReader{pages: make(chan pageOrErr, 1), stop: make(chan struct{})}
	go func() {
		defer close(pr.pages)
		for {
			at := q.Continuation
			var page *client.Page
			err := retry.do(ctx, func(int) error {
				var err error
				page, err = src.QueryEntities(ctx, table, q)
				return err
			}, obs.Retried)
			if err != nil {
				err = fmt.Errorf("query table %s: %w", table, err)
			}
			select {
			case pr.pages <- pageOrErr{at, page, err}:
			case <-pr.stop:
				return
			}
			if err != nil || page.Next.Done() {
				return
			}
			q.Continuation = page.Next
		}
	}()
	return pr
}

func (pr *pageReader) close() { pr.once.Do(func() { close(pr.stop) }) }

// CopyOptions are a copy's own options.
type CopyOptions struct {
	Options
	// Tables are the source tables (all of them when empty); Rename maps a source table
	// to its target name (a one-table copy to another name).
	Tables []string
	Rename map[string]string
	Filter string
	// Readers is the number of PartitionKey ranges of a table read at once (0: 4).
	Readers int
	Job     string
	// Follow keeps the target in step with the source after the copy: every table's
	// change feed is read from before its entities were and applied until Stop
	// (follow.go). Each source table must have its feed on.
	Follow bool
}

// Copy copies tables from src to dst, one after the other. Each table is split into
// PartitionKey ranges (see splitPoints) copied at once, each read as a stream of pages
// (the next fetched while the last is written) and written by its share of the Workers;
// memory is bounded by the pages and batches in flight, whatever the table's size. The
// checkpoint holds each range's position.
func Copy(ctx context.Context, src, dst *client.Client, o CopyOptions) error {
	cp, err := startTables(ctx, src, o.Options, o.Job, o.Tables)
	if err != nil {
		return err
	}
	dstEP, err := probe(ctx, dst, o.Retry, o.observer())
	if err != nil {
		return err
	}
	srcEP := endpoint{}
	if !o.IgnoreSettings {
		if srcEP, err = probe(ctx, src, o.Retry, o.observer()); err != nil {
			return err
		}
	}
	if cp.Since == 0 && !o.Resume {
		// Before anything is written: a resumed run must know when the job began. (A
		// checkpoint written before Since existed keeps 0: unknown.)
		cp.Since = sinceOf(dstEP.clock)
		if err := cp.save(o.Checkpoint); err != nil {
			return err
		}
	}
	readers := o.Readers
	if readers <= 0 {
		readers = 4
	}
	var mu sync.Mutex // guards cp while ranges save it
	for i := range cp.Tables {
		ts := &cp.Tables[i]
		if ts.Done {
			continue
		}
		if stopped(o.Stop) {
			return ErrInterrupted
		}
		target := ts.Name
		if n, ok := o.Rename[ts.Name]; ok {
			target = n
		}
		settings, err := sourceSettings(ctx, src, srcEP, ts.Name, o.IgnoreSettings, o.Retry, o.observer())
		if err != nil {
			return err
		}
		if err := ensureTable(ctx, dst, dstEP, target, settings, o.Retry); err != nil {
			return err
		}
		if exactExpiry(settings) {
			if err := checkTarget(ctx, dst, target, o.Retry); err != nil {
				return err
			}
		}
		if ts.Ranges == nil {
			if o.Follow {
				// Before a single entity is read: every change from here on is in the
				// feed after this point.
				if ts.Feed, err = feedStart(ctx, src, ts.Name, o.Retry, o.observer()); err != nil {
					return err
				}
			}
			bounds, err := splitPoints(ctx, src, ts.Name, readers, o.Retry)
			if err != nil {
				return err
			}
			lo := ""
			for _, b := range bounds {
				ts.Ranges = append(ts.Ranges, RangeState{Lo: lo, Hi: b})
				lo = b
			}
			ts.Ranges = append(ts.Ranges, RangeState{Lo: lo})
			if err := cp.save(o.Checkpoint); err != nil {
				return err
			}
		}
		if err := copyRanges(ctx, src, dst, ts, target, settings, cp, &mu, &o); err != nil {
			return err
		}
		ts.Done = true
		if err := cp.save(o.Checkpoint); err != nil {
			return err
		}
	}
	if o.Follow {
		if err := follow(ctx, src, dst, cp, &mu, &o); err != nil {
			return err
		}
	}
	cp.Done = true
	return cp.save(o.Checkpoint)
}

// copyRanges copies a table's unfinished ranges at once; the first failure stops the
// others (they finish their batches in flight and save their positions).
func copyRanges(ctx context.Context, src, dst *client.Client, ts *TableState, target string, settings *client.TableSettings, cp *Checkpoint, mu *sync.Mutex, o *CopyOptions) error {
	var todo []*RangeState
	for i := range ts.Ranges {
		if !ts.Ranges[i].Done {
			todo = append(todo, &ts.Ranges[i])
		}
	}
	workers := o.Workers
	if workers <= 0 {
		workers = 8
	}
	workers = max(1, workers/max(1, len(todo)))
	abort := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		select {
		case <-o.Stop:
		case <-abort:
		}
		close(stop)
	}()
	var once sync.Once
	errs := make([]error, len(todo))
	var wg sync.WaitGroup
	for i, rs := range todo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = copyRange(ctx, src, dst, ts.Name, rs, target, settings, cp, mu, o, workers, stop)
			if errs[i] != nil && errs[i] != ErrInterrupted {
				once.Do(func() { close(abort) })
			}
		}()
	}
	wg.Wait()
	once.Do(func() { close(abort) })
	var interrupted bool
	for _, err := range errs {
		if err == ErrInterrupted {
			interrupted = true
		} else if err != nil {
			return err
		}
	}
	if interrupted {
		return ErrInterrupted
	}
	return nil
}

// copyAt is where a copied record is seen again: the page continuation and the rows
// committed before that page.
type copyAt struct {
	next client.Continuation
	rows int64
}

// copyRange copies one PartitionKey range of a table with its own sink.
func copyRange(ctx context.Context, src, dst *client.Client, table string, ts *RangeState, target string, settings *client.TableSettings, cp *Checkpoint, mu *sync.Mutex, o *CopyOptions, workers int, stop <-chan struct{}) error {
	obs := o.observer()
	s := newSink(ctx, dst, o.Mode, workers, o.Retry)
	s.onDone, s.onRetry, s.onExpired = obs.Done, obs.Retried, o.onExpired()
	s.resolve, s.since = o.Resume, cp.Since
	exact := exactExpiry(settings)
	base := copyAt{ts.Next, ts.Rows}
	s.next = pos{0, base}
	var seq int64
	save := func() error {
		c := s.committed()
		at := c.at.(copyAt)
		mu.Lock()
		defer mu.Unlock()
		ts.Next = at.next
		ts.Rows = at.rows
		return cp.save(o.Checkpoint)
	}
	// A Cerulean source (settings carried) is asked for every entity's expiry.
	q := client.Query{Filter: rangeFilter(o.Filter, ts.Lo, ts.Hi), Continuation: ts.Next, Expiry: settings != nil}
	pr := readPages(ctx, src, table, q, o.Retry, obs)
	defer pr.close()
	tick := time.NewTicker(o.every())
	defer tick.Stop()
	var runErr error
	rowsBefore := ts.Rows
loop:
	for {
		var po pageOrErr
		var ok bool
		select {
		case po, ok = <-pr.pages:
		case <-stop:
			runErr = ErrInterrupted
			break loop
		case <-s.failed:
			break loop
		}
		if !ok {
			break
		}
		if po.err != nil {
			runErr = po.err
			break
		}
		if err := checkPage(table, exact, po.page); err != nil {
			runErr = err
			break
		}
		pageStart := seq
		at := copyAt{po.at, rowsBefore + pageStart}
		for i, raw := range po.page.Entities {
			r, err := record.FromAnswer(raw)
			if err != nil {
				runErr = fmt.Errorf("table %s: entity %d of a page: %s", table, i, record.Detail(err))
				break loop
			}
			if err := checkRecord(table, exact, &r); err != nil {
				runErr = err
				break loop
			}
			after := pos{seq + 1, at}
			if i == len(po.page.Entities)-1 {
				after = pos{seq + 1, copyAt{po.page.Next, rowsBefore + seq + 1}}
			}
			if err := s.add(target, exact, &r, pos{seq, at}, after); err != nil {
				break loop
			}
			seq++
			if stopped(stop) {
				runErr = ErrInterrupted
				break loop
			}
		}
		select {
		case <-tick.C:
			if err := save(); err != nil {
				runErr = err
				break loop
			}
		default:
		}
	}
	pr.close()
	if err := s.finish(runErr == ErrInterrupted, runErr, save); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	ts.Done = true
	return cp.save(o.Checkpoint)
}
