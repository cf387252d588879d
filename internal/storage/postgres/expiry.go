package postgres

import (
	"context"
	"fmt"
)

// Removal of expired rows.
//
// Expired rows are invisible from the instant they expire (every read and precondition
// compares expiry with the database clock); removing them is housekeeping. Every front
// end runs purgeExpired every Options.ExpiryInterval: chunks of ExpiryChunk rows, each
// one statement and one short transaction, until a chunk comes back short. A chunk
// walks the partial index on expiry from its oldest entry, so it reads the rows that
// have expired and stops at the first that has not: the cost follows what expires, not
// the table. A row's index entries go in the same statement. Front ends purge at once without waiting for each other (SKIP LOCKED skips
// rows another purger or a writer holds; the next round gets them), and a row written
// again since it expired is not deleted: the delete checks the expiry of the row it
// deletes.

// ExpiryChunk is how many expired rows one purge statement deletes at most.
const ExpiryChunk = 1000

// PurgeExpired removes every row expired now, instead of waiting for the background
// purge, and returns how many it removed. It is a maintenance hook.
func (e *Engine) PurgeExpired(ctx context.Context) (int, error) {
	if e.closed.Load() {
		return 0, ErrClosed
	}
	n, err := e.purgeExpired(ctx)
	return n, e.mapErr(ctx, "purge expired rows", err)
}

func (e *Engine) purgeExpired(ctx context.Context) (int, error) {
	n, err := e.purgeExpiredPlain(ctx)
	if err != nil {
		return n, err
	}
	m, err := e.purgeExpiredFeeds(ctx)
	return n + m, err
}

// purgeExpiredPlain removes the expired rows of the tables without a change feed on.
func (e *Engine) purgeExpiredPlain(ctx context.Context) (int, error) {
	total, failures := 0, 0
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		var n int64
		err := e.pool.QueryRow(ctx, e.q.purgeExpired, ExpiryChunk).Scan(&n)
		if err != nil {
			if failures++; retryable(err) && failures < 10 {
				continue
			}
			return total, fmt.Errorf("purge expired rows: %w", err)
		}
		failures = 0
		total += int(n)
		if n < ExpiryChunk {
			return total, nil
		}
	}
}

func (e *Engine) expiryLoop() {
	e.every(e.opts.ExpiryInterval, nil, func(ctx context.Context) {
		if n, err := e.purgeExpired(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("cerulean: purge expired rows", "err", e.mapErr(ctx, "purge expired rows", err))
		} else if n > 0 {
			e.log.Debug("cerulean: purged expired rows", "rows", n)
		}
		// And change records past their feeds' retention, on the same schedule.
		if n, err := e.trimChanges(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("cerulean: trim change feeds", "err", e.mapErr(ctx, "trim change feeds", err))
		} else if n > 0 {
			e.log.Debug("cerulean: trimmed change feeds", "records", n)
		}
	})
}
