package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ceruleandb/cerulean/client"
	"github.com/ceruleandb/cerulean/internal/transfer/record"
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

// Import writes the records r yields to dst, creating tables as needed: with the
// settings a settings record gives (a JSON Lines export of a Cerulean table), else as an
// SDK creates them. Records are counted from the start of the input; a resumed run reads
// and discards the committed ones first (a file is re-read, not seeked, so the count is
// right for every format), applying the settings records among them.
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
	ep, err := probe(ctx, dst, o.Retry, obs)
	if err != nil {
		return err
	}
	if cp.Since == 0 && !o.Resume {
		cp.Since = sinceOf(ep.clock) // a checkpoint written before Since existed keeps 0: unknown
	}
	targetOf := func(rec *record.Record) string {
		if o.Force || rec.Table == "" {
			return o.Table
		}
		return rec.Table
	}
	settings := map[string]*client.TableSettings{} // target table → the input's settings
	created := map[string]bool{}
	prepare := func(table string) error {
		if err := ensureTable(ctx, dst, ep, table, settings[table], o.Retry); err != nil {
			return err
		}
		if exactExpiry(settings[table]) {
			if err := checkTarget(ctx, dst, table, o.Retry); err != nil {
				return err
			}
		}
		created[table] = true
		return nil
	}
	// applySettings takes a settings record: its table is created (or checked) now, so
	// that a table without entities is carried too.
	applySettings := func(rec *record.Record, n int64) error {
		if o.IgnoreSettings {
			return nil
		}
		table := targetOf(rec)
		if table == "" {
			return fmt.Errorf("record %d (the settings of a table) names no table, and no --table was given", n)
		}
		if prev, ok := settings[table]; ok && !sameSettings(*prev, *rec.Settings) {
			return fmt.Errorf("record %d: table %s is given two settings: %s and %s", n, table, describeSettings(*prev), describeSettings(*rec.Settings))
		} else if !ok && created[table] {
			return fmt.Errorf("record %d: the settings of table %s come after entities of it", n, table)
		}
		settings[table] = rec.Settings
		return prepare(table)
	}
	// Skip what is committed.
	var read int64
	for read < cp.Records {
		rec, err := r.Read()
		if err == io.EOF {
			return fmt.Errorf("resume: the input has %d records, the checkpoint says %d are committed: is it the same input?", read, cp.Records)
		} else if err != nil && !isLineError(err) {
			return err
		}
		read++
		if err == nil && rec.Settings != nil {
			if err := applySettings(&rec, read); err != nil {
				return err
			}
		}
	}
	s := newSink(ctx, dst, o.Mode, o.Workers, o.Retry)
	s.onDone, s.onRetry, s.onExpired = obs.Done, obs.Retried, o.onExpired()
	s.resolve, s.since = o.Resume, cp.Since
	s.next = pos{0, read}
	save := func() error {
		cp.Records = s.committed().at.(int64)
		return cp.save(o.Checkpoint)
	}
	// Saved before anything is written, with Since.
	if err := save(); err != nil {
		return err
	}
	last := time.Now()
	var seq int64
	var runErr error
	// passed commits a record that writes nothing (a bad line skipped, a table's
	// settings) once everything before it is.
	passed := func() {
		read++
		s.mu.Lock()
		s.next = pos{seq, read}
		s.mu.Unlock()
	}
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
				passed()
				continue
			}
			runErr = err
			break
		}
		if rec.Settings != nil {
			if err := applySettings(&rec, read+1); err != nil {
				runErr = err
				break
			}
			passed()
			continue
		}
		table := targetOf(&rec)
		if table == "" {
			runErr = fmt.Errorf("record %d (PartitionKey %q, RowKey %q) names no table, and no --table was given", read+1, rec.Entity.PartitionKey, rec.Entity.RowKey)
			break
		}
		if !created[table] {
			if err := prepare(table); err != nil {
				runErr = err
				break
			}
		}
		// A table whose settings line says it is elastic carries every entity's expiry: an
		// entity without odata.expiry never expires. Otherwise the file's expiries (if any)
		// are not carried, and the target computes its own.
		exact := !o.IgnoreSettings && exactExpiry(settings[table])
		if !exact {
			rec.Expiry = 0
		}
		if err := s.add(table, exact, &rec, pos{seq, read}, pos{seq + 1, read + 1}); err != nil {
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
