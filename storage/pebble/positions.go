package pebble

import (
	"context"
	"time"

	"github.com/ceruleandb/cerulean/storage"
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

// ReaderAt returns the engine itself once it has committed position p: every position
// an Apply returned (in this process or before a restart) is at or below the committed
// position by the time that Apply returns, so only a position from another store (or a
// made-up one) waits, polling, up to Options.PositionWait, and then fails with
// storage.ErrFuturePosition. A done ctx ends the wait with its error.
func (e *Engine) ReaderAt(ctx context.Context, p storage.Position) (storage.Reader, error) {
	if uint64(p) <= e.committed.Load() {
		return e, nil
	}
	wait := time.NewTimer(e.positionWait)
	defer wait.Stop()
	poll := time.NewTicker(positionPoll)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-wait.C:
			return nil, storage.ErrFuturePosition
		case <-poll.C:
			if uint64(p) <= e.committed.Load() {
				return e, nil
			}
		}
	}
}
