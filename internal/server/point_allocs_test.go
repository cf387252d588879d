package server

import (
	"net/http"
	"testing"
)

// TestPointAllocs holds the point paths to their allocation budgets (see
// point_bench_test.go): a Get Entity of the bench's entity and a synced Insert Entity
// answered with the entity, each through ServeHTTP on real Pebble. The budgets are what
// the paths allocate today plus a little slack; a change that brings back per-request
// garbage (header slices, canonicalised lookups, views, keys, closures) fails here.
func TestPointAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops objects under -race")
	}
	if testing.Short() {
		t.Skip("synced inserts")
	}
	srv, _ := pebbleServer(t, "bench")
	in := newInserter(srv, insertTemplate(t), 1)
	insert := testing.AllocsPerRun(200, func() { in.insert(t) })
	const insertBudget = 18 // 15 today
	if insert > insertBudget {
		t.Errorf("Insert Entity allocates %.1f times, budget %d", insert, insertBudget)
	}

	get := sdkRequest(t, http.MethodGet, "/devstoreaccount1/bench(PartitionKey='w1',RowKey='7')", nil)
	w := newBenchWriter()
	reads := testing.AllocsPerRun(500, func() {
		w.reset()
		srv.ServeHTTP(w, get)
		if w.code != http.StatusOK {
			t.Fatalf("get: status %d", w.code)
		}
	})
	const getBudget = 18 // 15 today
	if reads > getBudget {
		t.Errorf("Get Entity allocates %.1f times, budget %d", reads, getBudget)
	}
}
