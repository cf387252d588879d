package postgres

import (
	"context"
	"hash/maphash"
	"slices"
)

// Row locks of one front end.
//
// A read-modify-write (a merge, or a batch with merges: applyRMW) reads its rows, applies
// its mutations in Go and compare-and-swaps each row on the version it read; a swap that
// loses to another write starts the Apply again, after a random backoff (retry). Two
// such writes of one row from one front end used to race in the database like writes of
// two front ends: under 32 callers merging into the same rows, most swaps lost and
// waited out a backoff, and the conformance suite's overlapping batches could starve a
// writer until it ran out of attempts. So the front end's read-modify-writes take a
// lock on each of their rows, from before the read until the swap has answered, as the
// Pebble engine's Applies do (striped, hashed by row, taken in ascending stripe order so
// that two writes of overlapping rows cannot deadlock). Within a front end they then
// take turns and never lose to each other; a swap still loses to a plain write, or to
// another front end's, and is retried as before. The locks are an optimisation, never a
// guarantee the database relies on: correctness stays with the compare-and-swap.
//
// A lock is a channel of one token, so that a caller whose context ends stops waiting.
// Plain writes (one statement each, atomic in the database) take no lock: they never
// retry, so they cannot starve.

// lockStripes is the number of row-lock stripes. Two rows share one with probability
// 1/lockStripes, which costs a little concurrency, never correctness.
const lockStripes = 4096

// rowLocks are a front end's row-lock stripes.
type rowLocks struct {
	seed    maphash.Seed
	stripes [lockStripes]chan struct{}
}

func newRowLocks() *rowLocks {
	l := &rowLocks{seed: maphash.MakeSeed()}
	for i := range l.stripes {
		l.stripes[i] = make(chan struct{}, 1)
	}
	return l
}

// stripe is the stripe of a row of a's table and partition.
func (l *rowLocks) stripe(a *applyArgs, rk string) int {
	var h maphash.Hash
	h.SetSeed(l.seed)
	h.Write(a.acct)
	h.WriteByte(0)
	h.Write(a.key)
	h.WriteByte(0)
	h.WriteString(a.pk)
	h.WriteByte(0)
	h.WriteString(rk)
	return int(h.Sum64() % lockStripes)
}

// lock takes the stripes of every row a's mutations touch, in ascending order, each
// once, and returns the function that lets them go. It fails only with ctx's error,
// holding nothing.
func (l *rowLocks) lock(ctx context.Context, a *applyArgs) (unlock func(), err error) {
	s := make([]int, len(a.muts))
	for i := range a.muts {
		s[i] = l.stripe(a, a.muts[i].RowKey)
	}
	slices.Sort(s)
	s = slices.Compact(s)
	for n, i := range s {
		select {
		case l.stripes[i] <- struct{}{}:
		case <-ctx.Done():
			l.unlock(s[:n])
			return nil, ctx.Err()
		}
	}
	return func() { l.unlock(s) }, nil
}

func (l *rowLocks) unlock(s []int) {
	for _, i := range s {
		<-l.stripes[i]
	}
}
