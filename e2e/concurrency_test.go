package e2e

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

func TestConcurrency(t *testing.T) {
	srv := startServer(t)
	svc := newServiceClient(t, srv)

	t.Run("OptimisticCounter", func(t *testing.T) {
		const workers, perWorker = 16, 8
		c, _ := newTable(t, svc)
		if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "counter", "RowKey": "c", "N": 0}), nil); err != nil {
			t.Fatal(err)
		}
		cx := ctxFor(t, 3*time.Minute)
		var successes, conflicts atomic.Int64
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				done := 0
				for attempt := 0; done < perWorker; attempt++ {
					if attempt > 5000 {
						t.Errorf("worker %d: no progress after %d attempts", w, attempt)
						return
					}
					resp, err := c.GetEntity(cx, "counter", "c", nil)
					if err != nil {
						t.Errorf("worker %d: GetEntity: %v", w, err)
						return
					}
					e := decodeEDM(t, resp.Value)
					n, ok := e.Properties["N"].(int32)
					if !ok {
						t.Errorf("worker %d: N = %#v", w, e.Properties["N"])
						return
					}
					etag := resp.ETag
					_, err = c.UpdateEntity(cx, marshal(t, map[string]any{"PartitionKey": "counter", "RowKey": "c", "N": n + 1}),
						&aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeReplace, IfMatch: &etag})
					switch {
					case err == nil:
						successes.Add(1)
						done++
					case statusOf(err) == http.StatusPreconditionFailed:
						conflicts.Add(1)
					default:
						t.Errorf("worker %d: UpdateEntity: %v", w, err)
						return
					}
				}
			}(w)
		}
		wg.Wait()
		e, _ := getEDM(t, c, "counter", "c")
		t.Logf("successes=%d conflicts(412)=%d final N=%v", successes.Load(), conflicts.Load(), e.Properties["N"])
		if got := e.Properties["N"]; got != int32(successes.Load()) {
			t.Errorf("final N = %v, but %d conditional updates succeeded (lost or duplicated updates)", got, successes.Load())
		}
		if successes.Load() != workers*perWorker {
			t.Errorf("successes = %d, want %d", successes.Load(), workers*perWorker)
		}
	})

	t.Run("ConcurrentInsertSameKey", func(t *testing.T) {
		const workers = 16
		c, _ := newTable(t, svc)
		cx := ctxFor(t, time.Minute)
		var ok, conflict atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				<-start
				_, err := c.AddEntity(cx, marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "same", "W": w}), nil)
				switch {
				case err == nil:
					ok.Add(1)
				case statusOf(err) == http.StatusConflict:
					conflict.Add(1)
				default:
					t.Errorf("worker %d: %v", w, err)
				}
			}(w)
		}
		close(start)
		wg.Wait()
		if ok.Load() != 1 || conflict.Load() != workers-1 {
			t.Errorf("concurrent inserts of one key: %d succeeded, %d got 409; want 1 and %d", ok.Load(), conflict.Load(), workers-1)
		}
	})

	t.Run("ConcurrentMergesKeepAllProperties", func(t *testing.T) {
		// Each worker merges its own property into one entity with If-Match: *; merges must not
		// lose each other's properties (a read-modify-write race would).
		const workers, perWorker = 8, 5
		c, _ := newTable(t, svc)
		if _, err := c.AddEntity(ctx(t), marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "m"}), nil); err != nil {
			t.Fatal(err)
		}
		cx := ctxFor(t, time.Minute)
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; i < perWorker; i++ {
					prop := "W" + string(rune('a'+w)) + string(rune('a'+i))
					if _, err := c.UpdateEntity(cx, marshal(t, map[string]any{"PartitionKey": "p", "RowKey": "m", prop: i}), nil); err != nil {
						t.Errorf("merge %s: %v", prop, err)
					}
				}
			}(w)
		}
		wg.Wait()
		e, _ := getEDM(t, c, "p", "m")
		if len(e.Properties) != workers*perWorker {
			t.Errorf("entity has %d properties after %d concurrent merges of distinct properties", len(e.Properties), workers*perWorker)
		}
	})
}
