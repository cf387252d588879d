package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ceruleandb/cerulean/client"
	"github.com/ceruleandb/cerulean/transfer/record"
)

// ImportOptions are an import's own options.
type ImportOptions struct {
	Options
	// Table is the target table of records that name none; when Force is set it is the
	// target of every record.
	Table string
	Force bool
	// Job identifies the run for its checkpoint.
	Job string
}

// Import writes the records r yields to dst, creating tables as needed. Records are
// counted from the start of the input; a resumed run reads and discards the committed
// ones first (a file is re-read, not seeked, so the count is right for every format).
func Import(ctx context.Context, r record.Reader, dst *client.Client, o ImportOptions) error {
	obs := o.observer()
	cp := &Checkpoint{Job: o.Job}
	if o.Resume {
		c, err := LoadCheckpoint(o.Checkpoint, o.Job)
		if err != nil {
			return err
		}
		cp = c
	}
	// Skip what is committed.
	var read int64
	for read < cp.Records {
		if _, err := r.Read(); err == io.EOF {
			return fmt.Errorf("resume: the input has %d records, the checkpoint says %d are committed: is it the same input?", read, cp.Records)
		} else if err != nil && !isLineError(err) {
			return err
		}
		read++
	}
	high := cp.HighRecords
	s := newSink(ctx, dst, o.Mode, o.Workers, o.Retry)
	s.onDone, s.onRetry = obs.Done, obs.Retried
	if high > read {
		s.replay = func(_ *record.Record, at any) bool { return at.(int64) < high }
	}
	s.next = pos{0, read}
	created := map[string]bool{}
	save := func() error {
		c := s.committed()
		cp.Records = c.at.(int64)
		if read > cp.HighRecords {
			cp.HighRecords = read
		}
		return cp.save(o.Checkpoint)
	}
	if err := save(); err != nil {
		return err
	}
	last := time.Now()
	var seq int64
	var runErr error
	for {
		if stopped(o.Stop) {
			runErr = ErrInterrupted
			break
		}
		if s.failedYet() {
			break
		}
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			if isLineError(err) && o.SkipBad {
				obs.Failed(err)
				// A skipped record is committed once everything before it is.
				read++
				s.mu.Lock()
				s.next = pos{seq, read} // used once nothing before it is in flight
				s.mu.Unlock()
				continue
			}
			runErr = err
			break
		}
		table := rec.Table
		if o.Force || table == "" {
			table = o.Table
		}
		if table == "" {
			runErr = fmt.Errorf("record %d (PartitionKey %q, RowKey %q) names no table, and no --table was given", read+1, rec.Entity.PartitionKey, rec.Entity.RowKey)
			break
		}
		if !created[table] {
			if err := ensureTable(ctx, dst, table, o.Retry); err != nil {
				runErr = err
				break
			}
			created[table] = true
		}
		if err := s.add(table, &rec, pos{seq, read}, pos{seq + 1, read + 1}); err != nil {
			break
		}
		seq++
		read++
		if time.Since(last) >= o.every() {
			last = time.Now()
			if err := save(); err != nil {
				runErr = err
				break
			}
		}
	}
	if err := s.finish(runErr != nil, runErr, save); err != nil {
		return err
	}
	cp.Done = true
	return cp.save(o.Checkpoint)
}

func isLineError(err error) bool {
	var le *record.LineError
	return errors.As(err, &le)
}
