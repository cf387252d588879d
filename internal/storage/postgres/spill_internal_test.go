package postgres

import (
	"context"
	"sync"
	"testing"
	"time"
)

// fakeGroups is a coalescer's exec that reports each group's size as it starts and
// holds it until released.
type fakeGroups struct {
	started chan int      // each group's size, as it starts
	release chan struct{} // one receive lets one group finish
}

func (f *fakeGroups) exec(_ context.Context, stmts []stmt, _ bool) (bounds, error) {
	f.started <- len(stmts)
	<-f.release
	for i := range stmts {
		stmts[i].rows = 1
	}
	return bounds{hi: 7}, nil
}

// TestSpill: with one slot and a spill of 4, reads queued behind the group in flight go
// out as a second group as soon as 4 wait, never as a third, and without a spill they
// wait for the first; every caller gets its statement's answer and the slots are all
// given back.
func TestSpill(t *testing.T) {
	for _, spill := range []int{0, 4} {
		f := &fakeGroups{started: make(chan int, 64), release: make(chan struct{})}
		c := &coalescer{slots: 1, spill: spill, exec: f.exec}
		var wg sync.WaitGroup
		call := func() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st := stmt{}
				at, err := c.do(context.Background(), &st, 0, nil, nil)
				if err != nil || at.hi != 7 || st.rows != 1 {
					t.Errorf("spill %d: a call answered %v, %v, %d rows", spill, at, err, st.rows)
				}
			}()
		}
		queued := func(n int) {
			t.Helper()
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
				c.mu.Lock()
				got := len(c.queue)
				c.mu.Unlock()
				if got == n {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("spill %d: %d queued, want %d", spill, got, n)
				}
			}
		}
		started := func() int {
			t.Helper()
			select {
			case n := <-f.started:
				return n
			case <-time.After(5 * time.Second):
				t.Fatalf("spill %d: no group started", spill)
				return 0
			}
		}
		noStart := func() {
			t.Helper()
			select {
			case n := <-f.started:
				t.Fatalf("spill %d: a group of %d started while its slot was taken", spill, n)
			case <-time.After(50 * time.Millisecond):
			}
		}
		call() // alone, in the slot
		if n := started(); n != 1 {
			t.Fatalf("spill %d: the first call ran in a group of %d", spill, n)
		}
		for range 3 {
			call()
		}
		queued(3)
		noStart()
		call() // the fourth waiting
		if spill == 0 {
			queued(4)
			noStart()
			f.release <- struct{}{} // the first group ends; the four go together
			if n := started(); n != 4 {
				t.Fatalf("spill 0: the waiting calls ran as a group of %d, want 4", n)
			}
			f.release <- struct{}{}
		} else {
			if n := started(); n != 4 {
				t.Fatalf("spill 4: the spilled group has %d, want 4", n)
			}
			// Both slots taken: more calls wait, even past the spill.
			for range 5 {
				call()
			}
			queued(5)
			noStart()
			f.release <- struct{}{}
			if n := started(); n != 5 {
				t.Fatalf("spill 4: the calls queued behind two groups ran as %d, want 5", n)
			}
			f.release <- struct{}{}
			f.release <- struct{}{}
		}
		wg.Wait()
		if c.inflight != 0 || len(c.queue) != 0 {
			t.Errorf("spill %d: %d slots taken and %d queued after every call returned", spill, c.inflight, len(c.queue))
		}
	}
}
