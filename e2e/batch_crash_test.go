package e2e

// Crash atomicity of entity group transactions: SIGKILL the server in the middle of a
// stream of 100-entity insert batches; after the restart every batch is entirely present
// or entirely absent, and every acknowledged batch is present (issue 5).

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

const egtCrashBatchSize = 100

// egtCrashPayload is the deterministic content of entity i of batch id.
func egtCrashPayload(id string, i int) string {
	return strings.Repeat(fmt.Sprintf("%s/%03d;", id, i), 4)
}

// egtBatchTracker runs insert batches and records which were sent and which acknowledged.
type egtBatchTracker struct {
	mu        sync.Mutex
	attempted map[string]bool // batch id → sent (outcome possibly unknown)
	acked     map[string]bool // batch id → SubmitTransaction succeeded
}

// run starts workers, each submitting 100-entity insert batches (one partition per batch)
// until stop is closed or the server goes away. It returns when all workers are done.
func (bt *egtBatchTracker) run(t *testing.T, c *aztables.Client, cycle, workers int, stop <-chan struct{}) (ok, cut int64) {
	var wg sync.WaitGroup
	var nOK, nCut atomic.Int64
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("c%d-w%d-%05d", cycle, w, seq)
				actions := make([]aztables.TransactionAction, egtCrashBatchSize)
				for i := range actions {
					actions[i] = aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd, Entity: marshal(t, map[string]any{
						"PartitionKey": "b-" + id, "RowKey": fmt.Sprintf("%03d", i),
						"Batch": id, "Index": i, "Payload": egtCrashPayload(id, i),
					})}
				}
				bt.mu.Lock()
				bt.attempted[id] = true
				bt.mu.Unlock()
				cx, cancel := ctxWithTimeout(20 * time.Second)
				_, err := c.SubmitTransaction(cx, actions, nil)
				cancel()
				if err == nil {
					bt.mu.Lock()
					bt.acked[id] = true
					bt.mu.Unlock()
					nOK.Add(1)
					continue
				}
				nCut.Add(1)
				if code := statusOf(err); code != 0 && code != http.StatusServiceUnavailable {
					// The server answered with an error: with fresh partitions that is a bug.
					t.Errorf("batch %s: server error %v", id, egtFirstLine(err))
				}
				return // the server is going away
			}
		}(w)
	}
	wg.Wait()
	return nOK.Load(), nCut.Load()
}

func egtFirstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// verify scans the table (or the partitions of one cycle's batches, cyclePrefix "c3-")
// and checks that every batch found is complete and intact, was attempted, and that every
// acknowledged batch in scope is present. It returns the number of batches found.
func (bt *egtBatchTracker) verify(t *testing.T, c *aztables.Client, cyclePrefix, what string) int {
	t.Helper()
	var opts *aztables.ListEntitiesOptions
	if cyclePrefix != "" {
		f := fmt.Sprintf("PartitionKey ge 'b-%s' and PartitionKey lt 'b-%s~'", cyclePrefix, cyclePrefix)
		opts = &aztables.ListEntitiesOptions{Filter: &f}
	}
	found := map[string][]bool{} // batch id → which indexes were seen
	bad := 0
	report := func(format string, args ...any) {
		if bad++; bad <= 20 {
			t.Errorf(what+": "+format, args...)
		}
	}
	for _, b := range listAll(t, c, opts) {
		var e struct {
			PartitionKey, RowKey, Batch, Payload string
			Index                                int
		}
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatalf("%s: entity %s: %v", what, b, err)
		}
		id := strings.TrimPrefix(e.PartitionKey, "b-")
		if e.Batch != id || e.RowKey != fmt.Sprintf("%03d", e.Index) || e.Index < 0 || e.Index >= egtCrashBatchSize || e.Payload != egtCrashPayload(id, e.Index) {
			report("entity (%s,%s) corrupted: %s", e.PartitionKey, e.RowKey, b)
			continue
		}
		seen := found[id]
		if seen == nil {
			seen = make([]bool, egtCrashBatchSize)
			found[id] = seen
		}
		if seen[e.Index] {
			report("entity (%s,%s) returned twice", e.PartitionKey, e.RowKey)
		}
		seen[e.Index] = true
	}
	bt.mu.Lock()
	defer bt.mu.Unlock()
	ids := make([]string, 0, len(found))
	for id := range found {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		n := 0
		for _, s := range found[id] {
			if s {
				n++
			}
		}
		if !bt.attempted[id] {
			report("batch %s was never sent but %d of its entities exist", id, n)
		} else if n != egtCrashBatchSize {
			report("batch %s is partially present: %d of %d entities (acknowledged: %v)", id, n, egtCrashBatchSize, bt.acked[id])
		}
	}
	var missing []string
	for id := range bt.acked {
		if (cyclePrefix == "" || strings.HasPrefix(id, cyclePrefix)) && found[id] == nil {
			missing = append(missing, id)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		report("%d acknowledged batches are missing entirely, e.g. %v", len(missing), missing[:min(len(missing), 10)])
	}
	return len(found)
}

func TestBatchCrashAtomicity(t *testing.T) {
	const cycles, workers = 5, 8
	srv := startServer(t)
	table := tableName(t)
	if _, err := newServiceClient(t, srv).CreateTable(ctx(t), table, nil); err != nil {
		t.Fatal(err)
	}
	bt := &egtBatchTracker{attempted: map[string]bool{}, acked: map[string]bool{}}
	began := time.Now()
	for cycle := 0; cycle < cycles; cycle++ {
		if cycle > 0 {
			srv.restart(t)
			c := newServiceClient(t, srv).NewClient(table)
			n := bt.verify(t, c, fmt.Sprintf("c%d-", cycle-1), fmt.Sprintf("after crash %d", cycle-1))
			t.Logf("after crash %d: %d batches of cycle %d present", cycle-1, n, cycle-1)
			if t.Failed() {
				t.Fatalf("stopping after crash %d", cycle-1)
			}
		}
		c := newServiceClient(t, srv).NewClient(table)
		stop := make(chan struct{})
		var ok, cut int64
		done := make(chan struct{})
		go func() {
			ok, cut = bt.run(t, c, cycle, workers, stop)
			close(done)
		}()
		// 1.0 s, 1.15 s, ...: kill at a different point of the stream each cycle.
		time.Sleep(time.Second + time.Duration(cycle)*150*time.Millisecond)
		srv.kill()
		close(stop)
		<-done
		t.Logf("cycle %d: %d batches acknowledged, %d cut off by SIGKILL", cycle, ok, cut)
		if ok == 0 {
			t.Fatalf("cycle %d: no batch acknowledged", cycle)
		}
	}
	srv.restart(t)
	c := newServiceClient(t, srv).NewClient(table)
	n := bt.verify(t, c, "", "after the last crash")
	bt.mu.Lock()
	t.Logf("final: %d batches present (%d entities), %d acknowledged, %d sent; %v", n, n*egtCrashBatchSize, len(bt.acked), len(bt.attempted), time.Since(began).Round(time.Millisecond))
	bt.mu.Unlock()
}
