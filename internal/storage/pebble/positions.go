package pebble

import (
	"context"
	"time"

	"github.com/ceruleandb/cerulean/internal/storage"
	pebbledb "github.com/cockroachdb/pebble/v2"
)

// batchPosition is the position of a committed batch: its last sequence number. Pebble
// gives a batch's records consecutive sequence numbers from SeqNum.
func batchPosition(b *pebbledb.Batch) storage.Position {
	n := uint64(b.Count())
	if n == 0 {
		return 0
	}
	return storage.Position(uint64(b.SeqNum()) + n - 1)
}

// noteCommitted raises the committed position to p.
func (e *Engine) noteCommitted(p storage.Position) {
	for {
		c := e.committed.Load()
		if uint64(p) <= c || e.committed.CompareAndSwap(c, uint64(p)) {
			return
		}
	}
}

// ReadView returns a view of the engine's latest state once it has committed position
// opts.At, at every consistency level (a Pebble store has no replicas): every position an
// Apply returned (in this process or before a restart) is at or below the committed
// position by the time that Apply returns, so only a position from another store (or a
// made-up one) waits, polling, up to Options.PositionWait, and then fails with
// storage.ErrFuturePosition. A done ctx ends the wait with its error.
func (e *Engine) ReadView(ctx context.Context, opts storage.ReadOptions) (storage.View, error) {
	if err := e.waitCommitted(ctx, opts.At); err != nil {
		return nil, err
	}
	if opts.At == 0 {
		return e.latest, nil // nearly every read: no view to allocate
	}
	return view{e, opts.At}, nil
}

// Position is the committed position: every Apply that returned is at or below it.
func (e *Engine) Position(ctx context.Context) (storage.Position, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return storage.Position(e.committed.Load()), nil
}

// view reads the engine's latest state, which covers every committed position.
type view struct {
	*Engine
	at storage.Position
}

func (view) Source() string { return storage.SourcePrimary }

// Position is the committed position after the reads (or the requested one, if a
// concurrent commit has not been noted yet): every read reads the latest state, so any
// later view is at least as new.
func (v view) Position() storage.Position {
	return max(v.at, storage.Position(v.committed.Load()))
}

// waitCommitted waits until position p is committed (see ReadView).
func (e *Engine) waitCommitted(ctx context.Context, p storage.Position) error {
	if uint64(p) <= e.committed.Load() {
		return nil
	}
	wait := time.NewTimer(e.positionWait)
	defer wait.Stop()
	poll := time.NewTicker(positionPoll)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wait.C:
			return storage.ErrFuturePosition
		case <-poll.C:
			if uint64(p) <= e.committed.Load() {
				return nil
			}
		}
	}
}
