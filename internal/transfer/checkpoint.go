package transfer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ceruleandb/cerulean/client"
)

// Checkpoint is the last committed position of a run, written (atomically: a temporary
// file renamed over it) after acknowledged work and when the run stops. A resumed run
// reads it, checks that it belongs to the same job, and starts from it.
type Checkpoint struct {
	// Job names what the run does (kind, source, target, tables, options that change
	// the output) without secrets; a checkpoint of another job is refused.
	Job string `json:"job"`
	// Tables is the per-table position of an export or a copy, in order.
	Tables []TableState `json:"tables,omitempty"`
	// Records is, for an import, how many records of the input are committed (written,
	// skipped as bad, or expired).
	Records int64 `json:"records,omitempty"`
	// Since is, for an import or a copy, the earliest Timestamp (the target's clock, 100
	// ns ticks since the Unix epoch) an entity written by the job can have: saved before
	// the first write and kept by every resumed run, it tells the entities the job wrote
	// from those the target held before (sink.resolveConflict).
	Since int64 `json:"since,omitempty"`
	// OutputBytes is, for an export to a file, the length of the output that holds
	// exactly the committed entities.
	OutputBytes int64 `json:"outputBytes,omitempty"`
	// Done marks a finished run.
	Done bool `json:"done,omitempty"`
}

// TableState is one table's position: Done, or the continuation where the first page
// not fully committed starts.
type TableState struct {
	Name string `json:"name"`
	// Ranges are a copy's PartitionKey ranges, each read and written on its own.
	Ranges []RangeState `json:"ranges,omitempty"`
	RangeState
	// Feed is, for a copy that follows its source (CopyOptions.Follow), the continuation
	// of the source table's change feed from which the target is not yet known to be
	// in step: taken before the table's entities are read, then advanced page by page;
	// empty once the source table was deleted.
	Feed string `json:"feed,omitempty"`
}

// RangeState is one PartitionKey range of a table, [Lo, Hi) ("" for an open end), and
// where its copy stands.
type RangeState struct {
	Lo   string              `json:"lo,omitempty"`
	Hi   string              `json:"hi,omitempty"`
	Done bool                `json:"done,omitempty"`
	Next client.Continuation `json:"next"`
	Rows int64               `json:"rows,omitempty"`
}

// ErrNoCheckpoint is returned by LoadCheckpoint when there is nothing to resume.
var ErrNoCheckpoint = errors.New("no checkpoint to resume from")

// LoadCheckpoint reads the checkpoint at path for job.
func LoadCheckpoint(path, job string) (*Checkpoint, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s does not exist", ErrNoCheckpoint, path)
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	var c Checkpoint
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if c.Job != job {
		return nil, fmt.Errorf("checkpoint %s is for another job (%s), not %s", path, c.Job, job)
	}
	if c.Done {
		return nil, fmt.Errorf("checkpoint %s: that run finished; nothing to resume", path)
	}
	return &c, nil
}

// save writes c to path atomically.
func (c *Checkpoint) save(path string) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".checkpoint-*")
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write checkpoint: %w", err)
	}
	return nil
}

// startTables begins a run over tables of src (every table of the account when none are
// named): a new checkpoint listing them, or with o.Resume the job's saved one, which
// already lists them with their progress. The checkpoint is saved before anything is
// read, so an interrupted run always leaves one to resume from.
func startTables(ctx context.Context, src *client.Client, o Options, job string, tables []string) (*Checkpoint, error) {
	if o.Resume {
		return LoadCheckpoint(o.Checkpoint, job)
	}
	cp := &Checkpoint{Job: job}
	if len(tables) == 0 {
		var err error
		if tables, err = ListTables(ctx, src, o.Retry); err != nil {
			return nil, err
		}
	}
	for _, t := range tables {
		cp.Tables = append(cp.Tables, TableState{Name: t})
	}
	if err := cp.save(o.Checkpoint); err != nil {
		return nil, err
	}
	return cp, nil
}
