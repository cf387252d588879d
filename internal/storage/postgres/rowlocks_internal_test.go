package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ceruleandb/cerulean/internal/entity"
	"github.com/ceruleandb/cerulean/internal/storage"
)

// TestRowLocksTakeTurns has 32 callers of one front end merge into the same four rows
// at once, alone and in batches of two overlapping rows (as the conformance suite's
// overlapping writers do): their read-modify-writes take turns on the rows' locks, so no
// compare-and-swap loses and nothing is retried, and every merged property is stored.
// Without the locks, about a thousand swaps lose (1,095 in one run: Stats.Retries).
func TestRowLocksTakeTurns(t *testing.T) {
	ctx := context.Background()
	e, acct := tableEngine(t, "rl")
	const rows, callers, rounds = 4, 32, 12
	for r := range rows {
		if _, err := e.Apply(ctx, acct, "T", "p", []storage.Mutation{{Op: storage.Insert, RowKey: fmt.Sprintf("r%d", r)}}); err != nil {
			t.Fatal(err)
		}
	}
	before := e.Stats().Retries
	want := make([]map[string]bool, rows)
	for r := range want {
		want[r] = map[string]bool{}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				name := fmt.Sprintf("c%02d_%02d", c, i)
				prop := []entity.Property{{Name: name, Value: entity.Int32Value(int32(i))}}
				r1, r2 := (c+i)%rows, (c+i+1)%rows
				var muts []storage.Mutation
				switch i % 3 {
				case 0:
					muts = []storage.Mutation{{Op: storage.Merge, RowKey: fmt.Sprintf("r%d", r1), Props: prop}}
				case 1:
					muts = []storage.Mutation{{Op: storage.InsertOrMerge, RowKey: fmt.Sprintf("r%d", r1), Props: prop}}
				default:
					muts = []storage.Mutation{
						{Op: storage.InsertOrMerge, RowKey: fmt.Sprintf("r%d", r1), Props: prop},
						{Op: storage.Merge, RowKey: fmt.Sprintf("r%d", r2), Props: prop},
					}
				}
				if _, err := e.Apply(ctx, acct, "T", "p", muts); err != nil {
					t.Errorf("%s: %v", name, err)
					return
				}
				mu.Lock()
				want[r1][name] = true
				if len(muts) == 2 {
					want[r2][name] = true
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if n := e.Stats().Retries - before; n != 0 {
		t.Errorf("%d merges retried after losing a compare-and-swap to one of their own front end", n)
	}
	for r := range rows {
		rec, err := e.Get(ctx, acct, "T", "p", fmt.Sprintf("r%d", r))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, p := range rec.Entity.Props {
			got[p.Name] = true
		}
		for name := range want[r] {
			if !got[name] {
				t.Errorf("r%d: merged property %s missing", r, name)
			}
		}
		if len(got) != len(want[r]) {
			t.Errorf("r%d: %d properties, merged %d", r, len(got), len(want[r]))
		}
	}
}

// TestRowLockWaitEnds: a caller waiting for a row's lock stops when its context ends,
// holding none of the stripes it took before it; the holder's unlock frees them all.
func TestRowLockWaitEnds(t *testing.T) {
	l := newRowLocks()
	a := &applyArgs{acct: []byte("a"), key: []byte("t"), pk: "p"}
	for r := range 50 {
		a.muts = append(a.muts, storage.Mutation{RowKey: fmt.Sprintf("r%02d", r)})
	}
	one := &applyArgs{acct: a.acct, key: a.key, pk: a.pk, muts: a.muts[49:]}
	unlockOne, err := l.lock(context.Background(), one)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := l.lock(ctx, a); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("lock of a held row: %v, want the deadline", err)
	}
	unlockOne()
	// Everything is free again: all fifty rows lock at once, twice in turn.
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		unlock, err := l.lock(ctx, a)
		cancel()
		if err != nil {
			t.Fatalf("lock after the wait ended: %v", err)
		}
		unlock()
	}
}
